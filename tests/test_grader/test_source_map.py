"""grader.source_map: every line of the graded text maps back to its notebook cell and line
(magics, empty cells and markdown cells included), and the grader's location forms are
rewritten to name the cell and quote the line, once, leaving other files' locations alone."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from grader.runner import syntax_error
from grader.source_map import SourceMap, protect, quote_line, rewrite_for_namespace
from grader.worker import _describe_exception
from grader import notebook


def make_nb(tmp_path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    sol = {"tags": ["solution"]}
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab"),                               # cell 1
                nbformat.v4.new_code_cell("import numpy as np\n%timeit 1\n!ls", metadata=sol),
                nbformat.v4.new_code_cell("x = 1"),                                   # cell 3
                nbformat.v4.new_code_cell("", metadata=sol),                          # cell 4
                nbformat.v4.new_code_cell("def dev(a):\n    return a + 1\n", metadata=sol)]
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_every_line_of_the_graded_text_maps_to_its_cell(tmp_path):
    text, smap = SourceMap.of_submission(make_nb(tmp_path))
    assert text == notebook.submission_source(make_nb(tmp_path))
    lines = text.split("\n")[:-1]
    assert len(lines) == len(smap.origins)
    for line, origin in zip(lines, smap.origins):
        if origin is None:
            assert line == ""  # between two cells, or the empty cell
            continue
        cell, k, n, original = origin
        # the graded line is the cell's line (a magic commented out), numbers as shown
        assert line in (original, "# (ipython) " + original)
    assert smap.where(2) == "solution cell 1 (notebook cell 2), line 2"
    assert smap.locate(2) == "solution cell 1 (notebook cell 2), line 2 (`%timeit 1`)"
    n_def = lines.index("def dev(a):") + 1
    assert smap.where(n_def) == "solution cell 3 (notebook cell 5), line 1"


def test_the_grader_location_forms_are_rewritten(tmp_path):
    _, smap = SourceMap.of_submission(make_nb(tmp_path))
    n = smap.lines.index("    return a + 1") + 1
    where = "solution cell 3 (notebook cell 5), line 2"
    code = "(`return a + 1`)"
    assert smap.rewrite(f"write at line {n}: x") == f"write at {where} {code}: x"
    assert smap.rewrite(f"at line {n} of dev") == f"at {where} of dev {code}"
    assert smap.rewrite(f'File "/c/ab12/submission.py", line {n}:') == f"{where} {code}:"
    assert smap.rewrite(f"submission.py:{n}: return a + 1\nTBuf") == f"{where} {code}\nTBuf"
    # the NPU's one-line form: the reason after the quoted line is kept
    assert smap.rewrite(f"E: submission.py:{n}: return a + 1 / L0C of 9 B: too big") == \
        f"E: {where} {code} / L0C of 9 B: too big"
    assert smap.rewrite(f"submission.py:{n}: other code / x") == f"{where} {code}: other code / x"
    # a later location in the same cell says only the line; another cell is named again
    assert smap.rewrite(f"line {n} and line {n - 1}") == \
        f"{where} {code} and line 1 (`def dev(a):`)"
    assert smap.rewrite(f"line {n} and line 1") == \
        f"{where} {code} and solution cell 1 (notebook cell 2), line 1 (`import numpy as np`)"


def test_what_is_not_a_location_of_the_graded_code_is_left_alone(tmp_path):
    _, smap = SourceMap.of_submission(make_nb(tmp_path))
    for text in ('File "/usr/lib/numba/core.py", line 3', "helper.py:2: x", "line 999",
                 "line 0", "lines 2 and 3", "", None):
        assert smap.rewrite(text) == text


def test_a_py_file_keeps_its_numbers_and_gets_its_lines_quoted(tmp_path):
    sub = tmp_path / "k.py"
    sub.write_text("import numpy as np\r\n\r\ndef f(a):\r\n    return a\n")
    _, smap = SourceMap.of_submission(sub)
    assert smap.origins is None
    assert smap.rewrite("line 4 of f") == "line 4 of f (`return a`)"
    assert smap.rewrite("line 2") == "line 2"  # an empty line: nothing to quote
    long = "x = " + "1 + " * 40 + "1"
    assert quote_line(long).endswith("…") and len(quote_line(long)) == 60


def test_the_in_notebook_rewrite_finds_the_function_that_holds_the_line():
    def kernel(a):
        b = a + 1
        return b

    first = kernel.__code__.co_firstlineno
    ns = {"kernel": kernel}
    assert rewrite_for_namespace(f"read at line {first + 1}", ns) == \
        f"read at line {first + 1} (`b = a + 1`)"
    assert rewrite_for_namespace(f"line {first + 2} of kernel", ns) == \
        f"line {first + 2} of kernel (`return b`)"
    assert rewrite_for_namespace("line 1", ns) == "line 1"  # in no function of the notebook


# ------------------------------------------------- notebook lines as Python and IPython read them
def nb_of(tmp_path: Path, *cells: str) -> Path:
    """A notebook: a markdown cell, then ``cells`` as code cells tagged solution."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab")] + [
        nbformat.v4.new_code_cell(src, metadata={"tags": ["solution"]}) for src in cells]
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(path))
    return path


# (cell, the indices of its lines IPython runs as a magic or a shell command)
CELLS = [
    ('x = 3\ns = ("%d"\n     % x)\nok = (x\n      != 4)\n', []),  # continuations: Python
    ("y = 5 \\\n% 3\n%time z = 1\n", [2]),                          # after a backslash
    ('s = """\n%not a magic\n"""\n!ls\n', [3]),                     # inside a string
    ("def f():\n    %time 1\n    return 2\n", [1]),                 # indented: still a magic
    ("x = [1,\n2]\n%who\n", [2]),
    ("!echo (\n%who\n", [0, 1]),            # a shell line's bracket opens nothing
    ("x = 1  # (\n%who\n", [1]),
    ("a = 1\n\n%x\n   \n!y", [2, 4]),
]


def test_a_magic_is_a_percent_or_bang_that_starts_a_logical_line():
    for cell, want in CELLS:
        assert sorted(notebook.magic_lines(notebook.split_lines(cell))) == want, cell


def test_ipython_finds_the_same_magics():
    inputtransformer2 = pytest.importorskip("IPython.core.inputtransformer2")
    tm = inputtransformer2.TransformerManager()
    for cell, want in CELLS:
        lines = notebook.split_lines(cell)
        out = notebook.split_lines(tm.transform_cell(cell))
        assert len(out) == len(lines)
        # (IPython also empties lines of blanks)
        assert [i for i, (a, b) in enumerate(zip(lines, out)) if a != b and a.strip()] == want


def test_continuation_lines_and_line_separators_in_strings_stay_python(tmp_path):
    cells = ['import numpy as np\nx = 3\ns = ("%d"\n     % x)\nok = (x\n      != 4)\n',
             'LABEL = "a\u2028b"  # a pasted separator\n# note\u2028 x = 1/0\nY = 2\n',
             "%load_ext autoreload\n\tX = (1,\n!= 2)"]
    text, smap = SourceMap.of_submission(nb_of(tmp_path, *cells))
    assert text.startswith(cells[0] + "\n" + cells[1])  # both cells as they are, line by line
    assert "# (ipython) %load_ext autoreload\n\tX = (1,\n!= 2)\n" in text
    assert syntax_error(cells[0] + cells[1], smap) is None
    ns: dict = {}
    exec(compile(cells[0] + cells[1], "x.py", "exec"), ns)  # U+2028 in a comment: no 1/0
    assert ns["s"] == "3" and ns["ok"] is True and ns["LABEL"] == "a\u2028b"
    assert len(smap.origins) == len(text.split("\n")) - 1
    n = smap.lines.index("Y = 2") + 1  # one line per "\n": the U+2028 split nothing
    assert smap.where(n) == "solution cell 2 (notebook cell 3), line 3"
    assert smap.source_line(n - 2) == cells[1].split("\n")[0]


# ------------------------------------------------------------- line numbers no int() can read
def test_a_number_too_long_for_a_line_is_left_alone(tmp_path):
    _, smap = SourceMap.of_submission(make_nb(tmp_path))
    huge = "line " + "9" * 5000  # int() of over 4300 digits raises
    for text in (huge, huge + " of dev", f'File "submission.py", line {"1" * 5000}',
                 "submission.py:" + "2" * 5000, "line 1234567890"):
        assert smap.rewrite(text) == text
        assert rewrite_for_namespace(text, {"dev": make_nb}) == text
    msg = _describe_exception(NotImplementedError(huge), "x.py", 0)
    assert msg == "not implemented: " + huge[:300] + "…", msg


# --------------------------------------------------------- the submission's own words as they are
def raised(path: Path, code: str) -> BaseException:
    """The exception ``code`` raises, with its traceback in ``path`` (as the worker runs it)."""
    try:
        exec(compile(code, str(path), "exec"), {})
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def test_the_submissions_words_are_never_read_as_locations(tmp_path):
    words = ('shape check failed on line 2 in File "submission.py", line 3 and '
             "submission.py:4: x")
    cell = f"import numpy as np\n\n\ndef gemm(A, B, C):\n    raise ValueError({words!r})\n"
    code, smap = SourceMap.of_submission(nb_of(tmp_path, cell))
    sub = tmp_path / "submission.py"
    at = smap.locate(5)
    assert at.startswith("solution cell 1 (notebook cell 2), line 5 (`raise ValueError("), at
    text = smap.rewrite(_describe_exception(raised(sub, code + "gemm(1, 2, 3)\n"), str(sub), 0))
    assert text == f"ValueError: {words} — at {at}", text
    # the grader's own locations around the protected words are still told
    assert smap.rewrite(f"line 5: {protect('line 1')} and line 4") == \
        f"{at}: line 1 and line 4 (`def gemm(A, B, C):`)"
    # a message that names the submission's own line still gets the location said
    code = "def gemm(A, B, C):\n    raise RuntimeError('see submission.py:2')\ngemm(1, 2, 3)\n"
    sub.write_text(code)
    _, smap = SourceMap.of_submission(sub)
    text = smap.rewrite(_describe_exception(raised(sub, code), str(sub), 0))
    assert text == ("RuntimeError: see submission.py:2 — at line 2 "
                    "(`raise RuntimeError('see submission.py:2')`)"), text
    # an untouched stub's hint, in the grader's text and in the in-notebook checker's
    stub = _describe_exception(NotImplementedError("write line 3 of dev"), str(sub), 0)
    assert smap.rewrite(stub) == "not implemented: write line 3 of dev"
    assert rewrite_for_namespace(stub, {"dev": make_nb}) == "not implemented: write line 3 of dev"
    # exit codes are the submission's words too; marks a submission wrote are not ours
    assert smap.rewrite(_describe_exception(SystemExit("line 1"), str(sub), 0)) == \
        "called exit()/sys.exit() (code 'line 1'): a kernel must return normally"
    assert smap.rewrite(protect("\ue001line 2\ue000")) == "line 2"
