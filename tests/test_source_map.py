"""grader.source_map: every line of the graded text maps back to its notebook cell and line
(magics, empty cells and markdown cells included), and the grader's location forms are
rewritten to name the cell and quote the line, once, leaving other files' locations alone."""

from __future__ import annotations

from pathlib import Path

import nbformat

from grader.source_map import SourceMap, quote_line, rewrite_for_namespace
from kernellab import notebook


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
