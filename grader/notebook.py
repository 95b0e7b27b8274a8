"""Lab notebooks: which cells are the student's, and how a solution becomes a lab.

Conventions (nbgrader's markers):

* The cells a student fills in carry the cell tag ``solution``. The grader runs exactly those
  cells, in order, and nothing else of the notebook.
* Inside them, the reference answer sits between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION`` lines. Text after ``BEGIN SOLUTION`` (``### BEGIN SOLUTION: pack B
  first``) is the one-line hint the stub shows; ``### `` lines right below the BEGIN line, at
  its indentation, continue the hint (joined with a space), so that no line passes 100 characters.
* ``kernellab release`` replaces each block with a stub at the block's indentation that raises
  ``NotImplementedError`` with that hint.
"""

from __future__ import annotations

import json
import re
import tokenize
import warnings
from pathlib import Path

try:
    import nbformat
except ImportError:  # a GPU machine with only the runtime installed (make gpu-check): notebooks
    nbformat = None  # are then read as plain JSON, without nbformat's schema validation

SOLUTION_TAG = "solution"
BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?::\s*(?P<hint>.*\S))?\s*$")
END = re.compile(r"^[ \t]*### END SOLUTION\s*$")
MORE = re.compile(r"^(?P<indent>[ \t]*)### (?P<more>.*\S)\s*$")  # a hint's continuation line
DEFAULT_HINT = "replace this line with your implementation"


class NotebookError(ValueError):
    """A notebook breaks the lab conventions (unbalanced markers, no solution cells, bad JSON)."""


def read(path: str | Path):
    """Read a notebook (nbformat v4; a ``NotebookNode``, or a plain dict when nbformat is not
    installed). Raises NotebookError if it is not a valid notebook."""
    if nbformat is None:
        try:
            nb = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise NotebookError(f"{path}: not a readable Jupyter notebook ({exc})") from None
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise NotebookError(f"{path}: not a readable Jupyter notebook (no list of cells)")
        return nb
    try:
        with warnings.catch_warnings():  # nbformat's advice (missing cell ids …) is noise here
            warnings.simplefilter("ignore")
            return nbformat.read(str(path), as_version=4)
    except Exception as exc:  # nbformat raises several types for bad JSON / schema
        raise NotebookError(f"{path}: not a readable Jupyter notebook ({exc})") from None


def is_solution_cell(cell) -> bool:
    """A code cell tagged ``solution``. Tolerates malformed cells (a notebook edited by hand):
    tags that are not a list of strings count as no tags."""
    if not isinstance(cell, dict) or cell.get("cell_type") != "code":
        return False
    meta = cell.get("metadata")
    tags = meta.get("tags") if isinstance(meta, dict) else None
    return isinstance(tags, (list, tuple)) and SOLUTION_TAG in tags


def stub_source(source: str, where: str = "") -> str:
    """Replace every BEGIN/END SOLUTION block in ``source`` by a NotImplementedError stub.

    Raises NotebookError on an unclosed or unopened block.
    """
    out, inside = [], None
    lines = split_lines(source)
    for n, line in enumerate(lines, 1):
        m = BEGIN.match(line)
        if m:
            if inside is not None:
                raise NotebookError(f"{where} line {n}: BEGIN SOLUTION inside another block")
            inside = m
            ind = m.group("indent")
            hint = " ".join([m.group("hint"), *_hint_continued(lines[n:], ind)]) \
                if m.group("hint") else DEFAULT_HINT
            out.append(f"{ind}# YOUR CODE HERE")
            quoted = '"' + hint.replace("\\", "\\\\").replace('"', '\\"') + '"'
            out.append(f"{ind}raise NotImplementedError({quoted})")
            continue
        if END.match(line):
            if inside is None:
                raise NotebookError(f"{where} line {n}: END SOLUTION without BEGIN")
            inside = None
            continue
        if inside is None:
            out.append(line)
    if inside is not None:
        raise NotebookError(f"{where}: BEGIN SOLUTION never closed")
    return "\n".join(out)


def _hint_continued(lines: list[str], indent: str) -> list[str]:
    """The hint's continuation: the ``### `` lines at the BEGIN line's ``indent`` that open
    ``lines`` (those below it; they are inside the block, so the stub drops them). They become
    part of the hint the student sees: a ``### `` comment meant for the solution's reader only
    must not follow the BEGIN line directly (put a code line or a plain ``#`` comment first)."""
    more = []
    for line in lines:
        c = MORE.match(line)
        if not c or c.group("indent") != indent or BEGIN.match(line) or END.match(line):
            break
        more.append(c.group("more"))
    return more


def solution_lines(source: str) -> list[str]:
    """The non-blank lines inside BEGIN/END SOLUTION blocks (to check none leaks into a lab)."""
    lines, inside = [], False
    for line in split_lines(source):
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def make_lab(solution_nb):
    """The student's version of a solution notebook (a ``NotebookNode``): blocks stubbed,
    outputs cleared. Needs nbformat."""
    if nbformat is None:
        raise NotebookError("making a lab needs nbformat (pip install nbformat)")
    nb = nbformat.from_dict(solution_nb)
    for i, cell in enumerate(nb.cells):
        lines = split_lines(cell.source or "")
        marked = any(BEGIN.match(ln) or END.match(ln) for ln in lines)
        if cell.cell_type == "code":
            if marked and not is_solution_cell(cell):
                # the grader runs only tagged cells: an untagged block could never be graded
                raise NotebookError(f"cell {i}: solution markers in a code cell not tagged "
                                    f"'{SOLUTION_TAG}'")
            cell.outputs = []
            cell.execution_count = None
            cell.source = stub_source(cell.source, where=f"cell {i}")
        elif marked:
            raise NotebookError(f"cell {i}: solution markers in a {cell.cell_type} cell (its "
                                "text would reach the lab)")
    return nb


def submission_source(path: str | Path) -> str:
    """The code the grader runs: a ``.py`` file as it is, or a notebook's ``solution`` cells in
    order, their lines kept (IPython magics and shell lines, :func:`magic_lines`, commented
    out). :func:`submission_origins` says where each of its lines came from.

    Raises NotebookError when a notebook has no cell tagged ``solution``.
    """
    return submission_origins(path)[0]


#: what the graded code puts before an IPython magic or shell line of a cell (a comment)
MAGIC_MARK = "# (ipython) "

# the line ends Python's tokenizer counts: str.splitlines also splits at \v, \f, \x1c-\x1e,
# \x85, U+2028 and U+2029, which may sit inside a string literal
_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """``text``'s lines as Python counts them (split at ``\\r\\n``, ``\\r`` or ``\\n`` only); a
    final line end ends the last line (``"a\\nb\\n"`` -> ``["a", "b"]``, ``""`` -> ``[]``)."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def magic_lines(lines: list[str]) -> set[int]:
    """The indices of the lines of one cell that IPython runs as a line magic (``%...``) or a
    shell command (``!...``): a ``%`` or ``!`` first (after the indentation) on a line that
    starts a logical line. A line inside brackets, a string or after a backslash is Python
    (``s = ("%d"`` / ``     % x)``; ``ok = (x`` / ``      != 4)``). Decided on Python's tokens,
    as IPython does (``IPython.core.inputtransformer2.EscapedCommand``: the first token of each
    logical line), each magic read as a comment so that what follows its ``%`` or ``!`` does
    not open a bracket or a string. Never raises: where the tokenizer stops (an indentation
    error, say: Python reports it), it starts again on the next line."""
    found: set[int] = set()
    start = 0
    while start < len(lines):
        start = _magics_from(lines, start, found)
    return found


def _magics_from(lines: list[str], start: int, found: set[int]) -> int:
    """Tokenize ``lines[start:]``, adding the magics' indices to ``found``; returns where to go
    on (``len(lines)`` when done; after the line the tokenizer stopped at, if it did)."""
    fed = start    # the next line the tokenizer reads
    ended = start  # lines before this one end a logical line (or are blank, or comments)
    depth = 0      # open brackets

    def readline() -> str:
        # the tokenizer reads a line only when it has given out every token of the one before
        nonlocal fed
        if fed >= len(lines):
            return ""
        i, fed = fed, fed + 1
        if i == ended and depth == 0 and lines[i].lstrip(" \t\f").startswith(("%", "!")):
            found.add(i)
            return "#\n"
        return lines[i] + "\n"

    try:
        for tok in tokenize.generate_tokens(readline):
            if tok.type == tokenize.OP and tok.string in ("(", "[", "{"):
                depth += 1
            elif tok.type == tokenize.OP and tok.string in (")", "]", "}"):
                depth = max(depth - 1, 0)
            elif tok.type in (tokenize.NEWLINE, tokenize.NL) and depth == 0:
                ended = start + tok.start[0]  # rows count from 1: the line after this one
    except (tokenize.TokenError, SyntaxError):  # IndentationError too; at EOF: fed is the end
        return max(fed, start + 1)
    return len(lines)


#: a line of the graded code: (notebook cell, solution cell, line in that cell, the line as the
#: student wrote it); numbers 1-based, the notebook cell counted over all its cells
Origin = tuple[int, int, int, str]


def submission_origins(path: str | Path) -> tuple[str, list[Origin | None] | None]:
    """``(code, origins)``: the code :func:`submission_source` returns and, for a notebook, one
    entry per line of it (``origins[n - 1]`` for line ``n``): an :data:`Origin`, or None for
    the blank line that separates two cells. For a ``.py`` file ``origins`` is None (its lines
    are its own). Raises NotebookError as :func:`submission_source` does."""
    path = Path(path)
    if path.suffix != ".ipynb":
        try:  # utf-8-sig: a byte-order mark (Windows editors) is not part of the code
            return path.read_bytes().decode("utf-8-sig"), None
        except UnicodeDecodeError as exc:
            raise NotebookError(f"{path}: not UTF-8 text (byte {exc.start}): save it as UTF-8"
                                ) from None
    nb = read(path)
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f"{path}: not a readable Jupyter notebook (no list of cells)")
    numbered = [(i + 1, c) for i, c in enumerate(cells) if is_solution_cell(c)]
    if not numbered:
        raise NotebookError(f"{path}: no code cell is tagged '{SOLUTION_TAG}' — the grader runs "
                            "only those cells; restore the tags from the lab notebook")
    parts: list[str] = []
    origins: list[Origin | None] = []
    for k, (cell_no, c) in enumerate(numbered, 1):
        src = c.get("source", "")
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise NotebookError(f"{path}: solution cell {k} has no readable source")
        raw = split_lines(src)
        magics = magic_lines(raw)
        lines = [MAGIC_MARK + ln if i in magics else ln for i, ln in enumerate(raw)]
        if parts:
            origins.append(None)  # the blank line "\n\n" puts between two cells
        origins.extend((cell_no, k, n, ln) for n, ln in enumerate(raw, 1))
        if not raw:  # an empty cell still takes one (empty) line of the joined text
            origins.append(None)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n", origins
