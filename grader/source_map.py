"""Source locations a student can find: ``line N`` of the graded code, as the notebook shows it.

The grader runs one text: a ``.py`` file as it is, or a notebook's solution cells joined
(:func:`grader.notebook.submission_origins`). The static rules, the sim and NPU simulators,
numba and Python's tracebacks all name lines of that text (``line 27``, ``line 3 of dev``,
``File ".../submission.py", line 27``, ``submission.py:27: code``), which a notebook's author
never sees. :meth:`SourceMap.rewrite` turns each into the cell and the line in it, with the
line quoted::

    line 27            ->  solution cell 2 (notebook cell 7), line 5 (`As[ty, tx] = A[row, tx]`)
    line 27 of dev     ->  solution cell 2 (notebook cell 7), line 5 of dev (`...`)
    line 27 (a .py)    ->  line 27 (`As[ty, tx] = A[row, tx]`)

A later location in the same message and the same cell says only ``line 6 (`...`)``.

"solution cell k" is the k-th cell tagged ``solution``; "notebook cell c" counts every cell of
the notebook from the top, markdown included, from 1. Only text the grader writes goes through
:meth:`SourceMap.rewrite`, never what the submission printed; the submission's own words inside
it (an exception's message) come marked by :func:`protect` and stay as they are.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass
from pathlib import Path

#: longest quoted source line (longer ones end in "…")
QUOTE_CHARS = 60

# One pass over the text, the longest forms first, so nothing is rewritten twice:
#   File "<path>", line N[:]        (Python, numba and the GPU compiler's locations)
#   <name>.py:N[: the line]         (the NPU simulator's kernellab.npu.record.format_src; the
#                                    quoted line after it, when it is line N, is dropped)
#   line N[ of FN]                  (the static rules, the sim engine)
# A line number has at most 9 digits (a longer run is no line of any submission, and int() of
# more than 4300 digits raises).
_LOCATION = re.compile(
    r'File "(?P<file>[^"\n]+)", line (?P<fline>\d{1,9})(?!\d)'
    r"|(?<![\w/.-])(?P<base>[\w.-]+\.py):(?P<bline>\d{1,9})(?!\d)"
    r"|\bline (?P<line>\d{1,9})(?!\d)(?: of (?P<fn>[A-Za-z_]\w*))?")

# the marks around the submission's own words (private-use characters: no text has them)
_OPEN, _CLOSE = "\ue000", "\ue001"
_PROTECTED = re.compile(f"{_OPEN}(.*?)(?:{_CLOSE}|\\Z)", re.S)


def protect(text: str) -> str:
    """The submission's own words (an exception's message, which the worker puts in the
    grader's text), marked so that :meth:`SourceMap.rewrite` and :func:`rewrite_for_namespace`
    leave them as they are and drop the marks: a student's "on line 2" or "submission.py:4" is
    not a location the grader found. Unmarked when nothing in it reads like a location. Cut the
    text before protecting it."""
    text = text.replace(_OPEN, "").replace(_CLOSE, "")
    return f"{_OPEN}{text}{_CLOSE}" if _LOCATION.search(text) else text


def _pieces(text: str):
    """``(protected, piece)`` in order: the grader's text and the protected words between."""
    pos = 0
    for m in _PROTECTED.finditer(text):
        yield False, text[pos:m.start()].replace(_CLOSE, "")
        yield True, m.group(1)
        pos = m.end()
    yield False, text[pos:].replace(_CLOSE, "")


def quote_line(text: str, limit: int = QUOTE_CHARS) -> str:
    """A source line as a report quotes it: stripped, cut at ``limit`` characters."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _split_lines(text: str) -> list[str]:
    # the line ends Python's tokenizer counts (not str.splitlines, which also splits at \f, \v …)
    return re.split(r"\r\n|\r|\n", text)


@dataclass
class SourceMap:
    """Where each line of a graded text came from.

    ``lines``: the graded text's lines (line ``n`` is ``lines[n - 1]``). ``origins``: for a
    notebook, one :data:`grader.notebook.Origin` per line (None for the blank line between
    two cells); None for a ``.py``. ``filename``: the basename of the file the grader compiles
    the text from (``submission.py``); locations in other files are left alone."""

    lines: list[str]
    origins: list | None = None
    filename: str = "submission.py"

    @classmethod
    def of_submission(cls, path: str | Path) -> tuple[str, "SourceMap"]:
        """``(code, map)`` for a submission file. Raises NotebookError as
        :func:`grader.notebook.submission_source` does (and OSError)."""
        from grader import notebook  # here: the worker imports this module, never nbformat

        text, origins = notebook.submission_origins(path)
        return text, cls(_split_lines(text), origins)

    def valid(self, n: int) -> bool:
        return 1 <= n <= len(self.lines)

    def where(self, n: int, fn: str | None = None) -> str:
        """``solution cell 2 (notebook cell 7), line 5`` (``…, line 5 of FN``), or ``line n``
        for a ``.py`` or a line the map does not know."""
        tail = f" of {fn}" if fn else ""
        if self.origins is not None and 1 <= n <= len(self.origins) and self.origins[n - 1]:
            cell, k, ln, _ = self.origins[n - 1]
            return f"solution cell {k} (notebook cell {cell}), line {ln}{tail}"
        return f"line {n}{tail}"

    def source_line(self, n: int) -> str:
        """Line ``n`` as the student wrote it (a notebook's IPython magic uncommented)."""
        if self.origins is not None and 1 <= n <= len(self.origins) and self.origins[n - 1]:
            return self.origins[n - 1][3]
        return self.lines[n - 1] if self.valid(n) else ""

    def cell_of(self, n: int):
        """The notebook cell line ``n`` came from (None for a ``.py`` or an unknown line)."""
        if self.origins is not None and 1 <= n <= len(self.origins) and self.origins[n - 1]:
            return self.origins[n - 1][0]
        return None

    def locate(self, n: int, fn: str | None = None, *, same_cell: bool = False,
               quote: bool = True) -> str:
        """:meth:`where` plus the quoted line: ``line 27 (`C[i, j] = acc`)``. ``same_cell``: the
        text just named this line's cell, so only ``line 5`` in it is said. ``quote``: False
        when the reader is shown the line already."""
        code = quote_line(self.source_line(n)) if quote else ""
        where = self.where(n, fn)
        if same_cell and self.cell_of(n) is not None:
            where = f"line {self.origins[n - 1][2]}" + (f" of {fn}" if fn else "")
        return where + (f" (`{code}`)" if code else "")

    def rewrite(self, text, *, shown: int | None = None):
        """``text`` with every location in the graded code told as :meth:`locate` does. Other
        files' locations, numbers past the end and the submission's own words (:func:`protect`)
        are left as they are; None stays None. ``shown``: the line the text is about, whose
        cell the reader was just told and which is quoted beside it (a syntax error's): a
        location in its cell says only ``line L``, and that line itself is not quoted."""
        if not text or not isinstance(text, str):
            return text
        out = []
        last = self.cell_of(shown) if shown is not None else None  # the cell named last
        for protected, piece in _pieces(text):
            if protected:
                out.append(piece)
            else:
                last = self._rewrite_piece(piece, out, last, shown)
        return "".join(out)

    def _rewrite_piece(self, text: str, out: list, last, shown):
        pos = 0
        for m in _LOCATION.finditer(text):
            if m.start() < pos:  # inside a quoted line already dropped
                continue
            fn, end = None, m.end()
            if m.group("fline"):
                n = int(m.group("fline"))
                ok = os.path.basename(m.group("file")) == self.filename
            elif m.group("bline"):
                n = int(m.group("bline"))
                ok = m.group("base") == self.filename
                quoted = ": " + self.lines[n - 1].strip() if self.valid(n) else None
                if ok and quoted and text.startswith(quoted, end):
                    end += len(quoted)  # format_src's copy of the line: quoted below instead
            else:
                n, fn, ok = int(m.group("line")), m.group("fn"), True
            if not ok or not self.valid(n):
                continue
            cell = self.cell_of(n)
            out.append(text[pos:m.start()])
            out.append(self.locate(n, fn, same_cell=cell is not None and cell == last,
                                   quote=n != shown))
            last, pos = cell, end
        out.append(text[pos:])
        return last


def locate_in_file(filename: str, n: int) -> str:
    """``line n (`code`)`` from ``filename`` (a notebook cell's file too: IPython registers
    each cell with :mod:`linecache`), or ``line n`` when the line cannot be read."""
    code = quote_line(linecache.getline(filename, n)) if filename else ""
    return f"line {n}" + (f" (`{code}`)" if code else "")


def _code_of(obj):
    """The code object behind a function, a numba dispatcher or a sim kernel, or None."""
    for attr in ("py_func", "fn", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if inner is not None and hasattr(inner, "__code__"):
            return inner.__code__
    return getattr(obj, "__code__", None)


def _line_range(code) -> tuple[int, int]:
    lines = [ln for _, _, ln in code.co_lines() if ln is not None] or [code.co_firstlineno]
    return min(code.co_firstlineno, *lines), max(lines)


def rewrite_for_namespace(text: str, namespace: dict, extra=()) -> str:
    """For the in-notebook checker: quote the lines ``line N`` / ``line N of FN`` name, found
    in the functions (kernels, device functions, launchers) of ``namespace`` (the notebook's
    globals) and ``extra``. ``line N of FN`` is looked up in FN; a bare ``line N`` in every
    function whose lines include N, and quoted only when they all live in one file (the cells
    of a notebook are separate files, so a line number alone can be ambiguous). The
    submission's own words (:func:`protect`) are left as they are."""
    if not text or not isinstance(text, str):
        return text
    codes = {}
    for obj in list(namespace.values()) + list(extra):
        try:
            code = _code_of(obj)
        except Exception:  # noqa: BLE001 - a student's object may do anything on attribute access
            continue
        if code is not None and isinstance(getattr(code, "co_filename", None), str):
            codes.setdefault(code.co_name, []).append(code)

    def sub(m: re.Match) -> str:
        if not m.group("line"):
            return m.group(0)
        n, fn = int(m.group("line")), m.group("fn")
        pool = codes.get(fn, []) if fn else [c for cs in codes.values() for c in cs]
        files = {c.co_filename for c in pool if _line_range(c)[0] <= n <= _line_range(c)[1]}
        if len(files) != 1:
            return m.group(0)
        located = locate_in_file(files.pop(), n)
        if fn:
            head, _, rest = located.partition(" (")
            return f"{head} of {fn}" + (f" ({rest}" if rest else "")
        return located

    return "".join(piece if protected else _LOCATION.sub(sub, piece)
                   for protected, piece in _pieces(text))
