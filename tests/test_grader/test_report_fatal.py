"""A stop before any case runs reads as one named block and the score, on every lab:
a syntax error is called a syntax error (with the line quoted and a caret), a missing function
says what the lab asks for and what the submission defines (the closest name suggested), an
error at import names its line; a notebook's locations name the solution cell and quote the
line; the ulp column is explained where it is printed; the in-notebook checker words it alike.

Kept cheap: syntax errors stop before any process starts; a missing function costs one worker
load (about half a second); the one sim-tier grading runs two small cases."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

import kernellab
from grader import local
from grader.labs import get_spec_class
from grader.report import CaseResult, Report
from grader.runner import grade
from grader.spec import HiddenCases
from known import Folder  # tests/known.py: where each known submission is

ROOT = Path(__file__).resolve().parents[2]
LABS = ["gemm-cpu", "gemm-cuda", "softmax-cuda", "winograd", "flash-attention", "int8-linear",
        "npu-vector-add", "npu-matmul"]


def functions(lab: str) -> dict:
    return dict(get_spec_class(lab).functions)


def assert_one_block(rep, title: str, times: int = 1) -> str:
    """The report of a stop: the block's title once (``times`` in a lab with several functions,
    one block each), no case table, the score line."""
    text = rep.to_text()
    assert text.count(title) == times, text
    assert "3. correctness" not in text and "max ulp" not in text, text
    assert not any(f"   {c.case} " in text for c in rep.cases), text  # no row per case
    n = len(rep.cases)
    assert n and f"/{rep.max_score} ({n} cases not run)  FAIL" in text, text
    assert "stopped:" not in text and "Traceback" not in text, text
    return text


def notebook(tmp_path: Path, cells: list[tuple[str, str]]) -> Path:
    """A notebook of (kind, source) cells; kind "sol" is a code cell tagged solution."""
    nb = nbformat.v4.new_notebook()
    for kind, src in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            meta = {"tags": ["solution"]} if kind == "sol" else {}
            nb.cells.append(nbformat.v4.new_code_cell(src, metadata=meta))
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(path))
    return path


# ------------------------------------------------------------------------- syntax error
@pytest.mark.parametrize("lab", LABS)
def test_a_syntax_error_is_called_a_syntax_error(lab, tmp_path):
    fn, params = next(iter(functions(lab).items()))
    sub = tmp_path / "syntax.py"
    head = f"def {fn}({', '.join(params)})"
    sub.write_text(f"import numpy as np\n{head}\n    pass\n")
    rep = grade(lab, sub, run_performance=False)
    assert not rep.passed and rep.score == 0 and rep.fatal_kind == "syntax-error"
    text = assert_one_block(rep, "SYNTAX ERROR — nothing was run")
    assert "breaks the lab's rules" not in text and "rule violation" not in text, text
    assert rep.fatal == "syntax error at line 2: expected ':'", rep.fatal  # the csv's column
    assert "SYNTAX ERROR — nothing was run\n   at line 2: expected ':'\n" in text, text
    # the line quoted, the caret under the place Python points at (just past the ')')
    assert f"   | {head}\n   | {' ' * len(head)}^\n" in text, text
    assert rep.to_dict()["fatal_kind"] == "syntax-error"


def test_a_syntax_error_in_a_notebook_names_the_solution_cell(tmp_path):
    nb = notebook(tmp_path, [("md", "# Lab"), ("sol", "import numpy as np"),
                             ("code", "x = 1"),
                             ("sol", "%matplotlib inline\n\ndef gemm(A, B, C)\n    pass")])
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert rep.fatal_kind == "syntax-error"
    assert rep.fatal == ("syntax error at solution cell 2 (notebook cell 4), line 3: "
                         "expected ':'"), rep.fatal
    text = assert_one_block(rep, "SYNTAX ERROR")
    assert "   | def gemm(A, B, C)\n   |                  ^\n" in text, text


def test_the_lines_python_names_in_a_syntax_error_are_told_by_cell(tmp_path):
    # "on line N" in Python's words counts lines of the joined cells, as its own line number
    nb = notebook(tmp_path, [("md", "# t"), ("sol", "import numpy as np\n\nX = 1\nY = 2\n"),
                             ("sol", "@njit\ndef gemm(A, B, C):\n")])
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert rep.fatal == ("syntax error at solution cell 2 (notebook cell 3), line 2: expected an "
                         "indented block after function definition on line 2"), rep.fatal
    nb = notebook(tmp_path, [("sol", "import numpy as np\nX = [1,"), ("md", "text"),
                             ("sol", "     2)\n")])
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert rep.fatal == ("syntax error at solution cell 2 (notebook cell 3), line 1: closing "
                         "parenthesis ')' does not match opening parenthesis '[' on solution "
                         "cell 1 (notebook cell 1), line 2 (`X = [1,`)"), rep.fatal


def test_continuation_lines_that_start_with_percent_or_bang_are_python(tmp_path):
    nb = notebook(tmp_path, [("sol", "%load_ext autoreload\nimport numpy as np\nx = 3\n"
                                     's = ("%d"\n     % x)\nok = (x\n      != 4)\n'),
                             ("sol", 'LABEL = "a\u2028b"\n\ndef gemm(A, B, C)\n    pass')])
    rep = grade("gemm-cpu", nb, run_performance=False)  # the syntax error is the real one
    assert rep.fatal == ("syntax error at solution cell 2 (notebook cell 2), line 3: "
                         "expected ':'"), rep.fatal


def test_the_submissions_message_is_quoted_as_it_is(tmp_path):
    words = 'shape check failed on line 2 in File "submission.py", line 3 and submission.py:4'
    raise_it = f"raise ValueError({words!r} + ' line ' + '9' * 5000)"
    nb = notebook(tmp_path, [("md", "# t"), ("sol", "import numpy as np\n\n\n"
                                                    f"def gemm(A, B, C):\n    {raise_it}\n")])
    first = get_spec_class("gemm-cpu")().cases(HiddenCases())[0].name
    rep = grade("gemm-cpu", nb, run_performance=False, only=lambda c: c.name == first)
    err = rep.cases[0].error
    assert err.startswith(f"ValueError: {words} line 999"), err  # no line 2, 3 or 4 of the cell
    assert "9…" in err and len(err) < 450, err  # cut, and no int() of 5000 digits
    assert "9… — at solution cell 1 (notebook cell 2), line 5 (`raise ValueError(" in err, err


def test_a_rule_violation_in_a_notebook_quotes_its_line(tmp_path):
    nb = notebook(tmp_path, [("sol", "import numpy as np"), ("md", "text"),
                             ("sol", "!pip list\ndef gemm(A, B, C):\n    C[:, :] = A @ B")])
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert rep.fatal_kind == "rule-violation"
    text = assert_one_block(rep, "RULE VIOLATION — nothing was run")
    assert rep.static == ["solution cell 2 (notebook cell 3), line 3 (`C[:, :] = A @ B`): the "
                          "'@' operator computes the product for you: write the loops yourself"]
    assert "the rules: imports of math, numba, numpy only" in text, text


def test_the_rule_block_states_the_labs_own_imports(tmp_path):
    """An NPU lab's rules are its own (kernellab's NPU API), not the CPU labs' list."""
    sub = tmp_path / "os.py"
    sub.write_text("import os\n")
    rep = grade("npu-vector-add", sub, run_performance=False)
    text = assert_one_block(rep, "RULE VIOLATION — nothing was run")
    assert ("the rules: imports of kernellab, math, numpy (with kernellab.npu, kernellab.npu.asc, "
            "kernellab.npu.launch; nothing else of kernellab) only") in text, text


# ------------------------------------------------------------------------- missing function
@pytest.mark.parametrize("lab", LABS)
def test_a_missing_function_says_what_the_lab_asks_for(lab, tmp_path):
    fns = functions(lab)
    first, params = next(iter(fns.items()))
    typo = first[:-1]  # gemm -> gem: the closest name is suggested
    sub = tmp_path / "missing.py"
    sub.write_text(f"def {typo}({', '.join(params)}):\n    return None\n")
    rep = grade(lab, sub, run_performance=False)
    assert not rep.passed and rep.score == 0 and rep.fatal_kind == "missing-function"
    text = assert_one_block(rep, "MISSING FUNCTION — ", times=len(fns))
    for fn, ps in fns.items():
        assert text.count(f"'{fn}' is not defined: the lab asks for {fn}({', '.join(ps)})") == 1
    assert f"the submission defines: {typo}({', '.join(params)})" in text, text
    assert text.count(f"did you mean {typo}? the lab calls it {first}: rename it") == 1, text
    assert rep.defined == {typo: list(params)}


@pytest.mark.parametrize("lab, src, says", [
    ("gemm-cpu", "def gemm(A, B):\n    pass\n",
     "gemm(A, B) cannot be called as gemm(A, B, C), which is how the lab calls it"),
    ("gemm-cuda", "from numba import cuda\n\n\n@cuda.jit\ndef gemm(A, B, C):\n    pass\n",
     "'gemm' is a @cuda.jit kernel; the lab calls gemm(A, B, C) as a plain Python function"),
])
def test_a_wrong_signature_is_one_block(lab, src, says, tmp_path):
    sub = tmp_path / "sig.py"
    sub.write_text(src)
    rep = grade(lab, sub, run_performance=False)
    assert rep.fatal_kind == "wrong-signature"
    text = assert_one_block(rep, "WRONG SIGNATURE — no case was run")
    assert text.count(says) == 1, text


def test_a_compile_error_names_its_line(tmp_path):
    sub = tmp_path / "typo.py"
    sub.write_text("import numba\n\n\n@numba.njit\ndef gemm(A, B, C):\n"
                   "    C[0, 0] = undefined_name + 1\n")
    rep = grade("gemm-cpu", sub, run_performance=False)
    assert rep.fatal_kind == "compile-error"
    assert_one_block(rep, "COMPILE ERROR — no case was run")
    assert "NameError: name 'undefined_name' is not defined" in rep.fatal, rep.fatal
    assert rep.fatal.endswith(" — at line 6 (`C[0, 0] = undefined_name + 1`)"), rep.fatal


def test_a_typing_error_names_its_line_once_without_numbas_excerpt(tmp_path):
    sub = tmp_path / "attr.py"
    sub.write_text("import numba\n\n\n@numba.njit\ndef gemm(A, B, C):\n    x = A[0, 0]\n"
                   "    C[0, 0] = x.nosuch\n")
    rep = grade("gemm-cpu", sub, run_performance=False)
    assert rep.fatal_kind == "compile-error"
    assert "Unknown attribute 'nosuch' of type float32 — at line 7 (`C[0, 0] = x.nosuch`)" \
        in rep.fatal, rep.fatal
    assert rep.fatal.count("line 7") == 1 and "def gemm" not in rep.fatal, rep.fatal


# ------------------------------------------------------------------------- crash at import
@pytest.mark.parametrize("lab", ["gemm-cpu", "npu-vector-add"])
def test_an_error_at_import_names_its_line(lab, tmp_path):
    sub = tmp_path / "crash.py"
    sub.write_text("import numpy as np\nprint('see line 1')\nX = np.zeros(2)[3]\n")
    rep = grade(lab, sub, run_performance=False)
    assert rep.fatal_kind == "import-error"
    text = assert_one_block(rep, "ERROR WHILE LOADING")
    assert "IndexError: index 3 is out of bounds" in rep.fatal
    assert rep.fatal.endswith(" — at line 3 (`X = np.zeros(2)[3]`)"), rep.fatal
    # what the submission printed is its own text: never rewritten
    assert "see line 1" in rep.output_tail and "   | see line 1" in text, text


def test_an_error_at_import_in_a_notebook_names_the_cell(tmp_path):
    nb = notebook(tmp_path, [("md", "# Lab"), ("md", "more"), ("sol", "import numpy as np"),
                             ("sol", "\n\nTILE = np.zeros(2)[3]")])
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert rep.fatal_kind == "import-error"
    assert rep.fatal.endswith(
        " — at solution cell 2 (notebook cell 4), line 3 (`TILE = np.zeros(2)[3]`)"), rep.fatal


# ------------------------------------------------------------------------- hazards, sim tier
RACE = Folder("gemm-cuda", "wrong") / "race_no_second_sync.py"
sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="the sim tier's hazard messages")


@sim_only
def test_a_race_in_a_notebook_names_the_cell_and_quotes_both_lines(tmp_path):
    src = RACE.read_text().splitlines()
    cut = src.index("@cuda.jit")  # imports and constants in one cell, the kernel in the next
    nb = notebook(tmp_path, [("md", "# Lab 2"), ("sol", "\n".join(src[:cut])),
                             ("code", "print('not graded')"), ("sol", "\n".join(src[cut:]))])
    rep = grade("gemm-cuda", nb, run_performance=False,
                only=lambda c: c.name in ("1x1x1", "17x17x17"))
    race = next(c for c in rep.cases if c.case == "17x17x17")
    assert race.error.startswith("race: "), race.error
    first = race.error.index("solution cell 2 (notebook cell 4), line ")
    assert "(`acc += As[ty, kk] * Bs[kk, tx]`)" in race.error[first:], race.error
    assert "(`As[ty, tx] = A[i, k0 + tx]`)" in race.error, race.error
    assert "notebook cell 2" not in race.error  # the kernel is in the second solution cell
    # the passing case's row prints ulps: the note that explains them follows the table
    text = rep.to_text()
    assert text.count("max ulp: the error in units in the last place") == 1, text
    assert "thousands of ulps can pass" in text


@sim_only
def test_the_in_notebook_checker_quotes_the_racing_lines(capsys):
    spec = importlib.util.spec_from_file_location("race_submission", RACE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lines = RACE.read_text().splitlines()
    want = next(n for n, ln in enumerate(lines, 1) if "acc += As[ty, kk]" in ln)
    assert local.check("gemm-cuda", mod.gemm, limit=4) is False
    out = capsys.readouterr().out
    assert "race: " in out and f"line {want} (`acc += As[ty, kk] * Bs[kk, tx]`)" in out, out
    assert out.count("max ulp: the error") == 1, out
    assert out.rstrip().endswith("run `kernellab grade gemm-cuda` (it grades "
                                 "work/02_gemm_cuda.ipynb)"), out


# ------------------------------------------------------------------------- the ulp note
def _report_with(policy: str) -> Report:
    rep = Report(lab="x", title="t", submission="s.py", tier="cpu", correctness_points=60,
                 performance_points=40, functions=["f"])
    cmp = {"max_abs": 1e-3, "max_ulp": 4000.0, "budget_used": 0.2, "policy": policy}
    rep.cases = [CaseResult("1x1x4096", {}, passed=True, comparison=cmp, function="f")]
    return rep.finish()


@pytest.mark.parametrize("policy, says", [
    ("K-aware: |err| <= 6*sqrt(K=4096)*(u_float32+u_ref)*(|A||B|)", "6·sqrt(K)·u·Σ|a·b|"),
    ("row softmax: |err| <= ...", "ln N and sqrt(N)"),
    ("measured baseline: |err| <= 2 x 1e-3", "a plain implementation in the same precision"),
    ("explicit bound: dequantisation", "the operation's own float steps"),
])
def test_the_ulp_column_is_explained_under_the_table(policy, says):
    text = _report_with(policy).to_text()
    assert text.count("max ulp: the error in units in the last place (ulp)") == 1, text
    assert "budget: the error as a share of the error the lab allows" in text
    assert says in text, text


def test_an_exact_lab_says_it_compares_bits():
    text = _report_with("exact: every element equal to the correctly rounded sum").to_text()
    assert "this lab compares bits (integers by value): anything but 0 fails" in text, text


def test_the_in_notebook_checker_explains_ulps_once_and_says_how_to_grade(capsys):
    import numpy as np

    def gemm(A, B, C):  # numpy: no JIT in the test
        C[:, :] = (A.astype(np.float64) @ B.astype(np.float64)).astype(C.dtype)

    assert local.check("gemm-cpu", gemm, limit=2) is True
    out = capsys.readouterr().out
    assert out.count("max ulp: the error in units in the last place") == 1, out
    assert "kernellab grade gemm-cpu" in out.splitlines()[-1], out


def test_the_in_notebook_checker_names_a_missing_function_as_the_grader_does(capsys):
    def rowsum(X, out):
        pass

    rowsum.__module__ = "__main__"  # as if defined in a notebook cell
    assert local.check_all("softmax-cuda", {"rowsum": rowsum}, limit=1) is False
    out = capsys.readouterr().out
    assert "row_sum: MISSING FUNCTION — its 1 case not run" in out, out
    assert "'row_sum' is not defined: the lab asks for row_sum(X, out)" in out
    assert "the notebook defines: rowsum(X, out)" in out
    assert "did you mean rowsum? the lab calls it row_sum: rename it" in out
    assert out.count("kernellab grade softmax-cuda") == 1, out


def test_an_exception_in_the_notebook_names_the_students_line(capsys):
    import numpy as np

    def gemm(A, B, C):
        C[:, :] = np.zeros(2)[5]

    assert local.check("gemm-cpu", gemm, limit=1) is False
    out = capsys.readouterr().out
    assert "IndexError: index 5 is out of bounds" in out
    assert "— at line " in out and "(`C[:, :] = np.zeros(2)[5]`)" in out, out


def test_failures_repeating_an_error_are_one_line_not_a_row_each():
    rep = _report_with("K-aware: ...")
    rep.cases += [CaseResult(f"{n}x{n}x{n}", {}, error="race: on As[0, 0] at line 3",
                             function="f") for n in (17, 33, 65, 129)]
    text = rep.finish().to_text()
    assert text.count("race: on As[0, 0]") == 1, text
    assert "   3 more cases FAIL with the same error as 17x17x17: 33x33x33, 65x65x65, " \
           "129x129x129" in text, text
    assert "same error as case" not in text and "   33x33x33 " not in text, text


def test_an_npu_hazard_keeps_its_reason_after_the_quoted_line():
    sub = Folder("npu-matmul", "wrong") / "l0c_overflow.py"
    first = get_spec_class("npu-matmul")().cases(HiddenCases())[0].name
    rep = grade("npu-matmul", sub, run_performance=False, only=lambda c: c.name == first)
    err = rep.cases[0].error
    line = next(n for n, t in enumerate(sub.read_text().splitlines(), 1)
                if "pipe.init_buffer(qc" in t)
    assert err.startswith(f"L0COverflowError: line {line} (`pipe.init_buffer(qc, "), err
    assert "/ L0C overflow: " in err and "<- does not fit" in err, err  # the why, in full
    assert err.count("— at line") == 0, err  # the message names its line: not said twice


def test_a_kernels_own_message_is_not_read_as_a_location():
    """On the sim tier an exception raised in a kernel reaches the report inside the engine's
    KernelError: its words are the submission's (cut, never rewritten), the line the
    engine's."""
    pytest.importorskip("numba.cuda")

    if kernellab.TIER != "sim":
        pytest.skip("the sim tier's KernelError")
    import numpy as np
    from numba import cuda

    from grader.source_map import SourceMap
    from grader.worker import _describe_sim_error
    from kernellab import sim

    @cuda.jit
    def k(x):
        raise ValueError("bad on line 2 " + "x" * 2000)

    with pytest.raises(Exception) as info, sim.capture(gpu_compile=False):
        k[1, 1](np.zeros(1, np.float32))
    text = _describe_sim_error(info.value)
    assert text is not None, repr(info.value)
    assert text.startswith("kernel-exception: tid=(0, 0, 0) ctaid=(0, 0, 0): ValueError: "), text
    out = SourceMap([f"code of line {n}" for n in range(1, 2000)]).rewrite(text)
    assert "bad on line 2 xxx" in out and "line 2 (`" not in out, out
    assert len(out) < 600, out  # the kernel's words cut; the engine's (line N) quoted:
    assert re.search(r"x… \(line \d+ \(`code of line \d+`\)\)$", out), out
