"""Per-function grading: in a lab with several required functions (softmax-cuda, int8-linear) a
function that is missing, has the wrong signature, fails to compile, hangs in its warm-up call
or raises in every call fails its own cases and is named once in the report; the other
functions' cases run and earn their points. The performance phase needs the cases of the
functions it times (``LabSpec.perf_functions``; all of them by default) and names a broken one.
A rule violation reads as one block, not one line per case. The in-notebook checker does the same.

Kept cheap: the softmax-cuda gradings (sim tier) run only the cases of at most 6 elements."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernellab
from grader import local
from grader.labs.int8_linear import Int8Linear
from grader.report import CaseResult
from grader.runner import _performance_gate, grade
from grader import notebook
from known import Folder  # tests/known.py: where each known submission is

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = Folder("softmax-cuda", "wrong")
INT8 = Folder("int8-linear", "wrong")

sim_only = pytest.mark.skipif(kernellab.TIER != "sim",
                              reason="the softmax-cuda gradings here are the sim tier's")


def small(case) -> bool:
    return case.params["M"] * case.params["N"] <= 6


def by_fn(rep, fn):
    return [c for c in rep.cases if c.function == fn]


def correctness_section(rep) -> list[str]:
    text = rep.to_text().splitlines()
    start = next(i for i, ln in enumerate(text) if ln.startswith("3. correctness"))
    end = next(i for i, ln in enumerate(text[start:], start)
               if ln.startswith("4. performance") or not ln.strip())
    return text[start:end]


def assert_earns_its_share(rep, good: tuple[str, ...]):
    """Every case of the ``good`` functions passes, and the correctness score is exactly their
    share of the cases (every case weighs the same)."""
    ok = [c for c in rep.cases if c.function in good]
    assert ok and all(c.passed for c in ok), [(c.case, c.error) for c in ok if not c.passed]
    assert not any(c.passed for c in rep.cases if c.function not in good)
    share = rep.correctness_points * len(ok) / len(rep.cases)
    assert rep.correctness_score == pytest.approx(share, abs=0.05) and rep.correctness_score > 0
    assert not rep.passed and rep.fatal is None


def named_once(rep, needle: str) -> None:
    lines = [ln for ln in correctness_section(rep) if needle in ln]
    assert len(lines) == 1, "\n".join(correctness_section(rep))


# ------------------------------------------------------------------------- softmax-cuda
@sim_only
def test_softmax_missing_keeps_row_sum_points_and_names_softmax_once():
    rep = grade("softmax-cuda", SOFTMAX / "missing_softmax.py", only=small)
    assert_earns_its_share(rep, ("row_sum",))
    soft = by_fn(rep, "softmax")
    assert soft and all(c.not_run for c in soft)
    assert set(rep.broken) == {"softmax"} and "'softmax' is not defined" in rep.broken["softmax"]
    named_once(rep, "'softmax' is not defined")
    assert not any("same error as" in ln for ln in correctness_section(rep))
    # the performance phase times softmax: not run, and the note says why
    assert rep.rules == [] and "'softmax' is not defined" in rep.performance_note
    assert rep.performance_score == 0


@sim_only
def test_softmax_wrong_signature_keeps_row_sum_points():
    rep = grade("softmax-cuda", SOFTMAX / "softmax_wrong_signature.py", run_performance=False,
                only=small)
    assert_earns_its_share(rep, ("row_sum",))
    assert all(c.not_run for c in by_fn(rep, "softmax"))
    named_once(rep, "softmax(X) cannot be called as softmax(X, Y)")
    sig = {s["name"]: s["ok"] for s in rep.signatures}
    assert sig == {"row_sum": True, "softmax": False}


@sim_only
def test_softmax_that_raises_every_time_is_one_line():
    rep = grade("softmax-cuda", SOFTMAX / "softmax_raises.py", run_performance=False,
                only=small)
    assert_earns_its_share(rep, ("row_sum",))
    soft = by_fn(rep, "softmax")
    assert soft and all(not c.not_run and "NameError" in c.error for c in soft)  # they ran
    assert rep.broken == {}
    named_once(rep, "NameError: name 'BLOCK' is not defined")
    assert f"softmax: all {len(soft)} of its cases FAIL" in rep.to_text()


# ------------------------------------------------------------------------- int8-linear
def test_int8_gemm_missing_keeps_the_other_two_functions_points():
    rep = grade("int8-linear", INT8 / "missing_int8_gemm.py",  # performance requested
                only=lambda c: "4096" not in c.name)
    assert_earns_its_share(rep, ("quantize_per_channel", "linear_w8a8"))
    assert all(c.not_run for c in by_fn(rep, "int8_gemm"))
    named_once(rep, "'int8_gemm' is not defined")
    assert rep.rules == [] and "'int8_gemm' is not defined" in rep.performance_note


def test_a_function_that_does_not_compile_fails_only_its_own_cases():
    rep = grade("int8-linear", INT8 / "quantize_does_not_compile.py", run_performance=False)
    assert set(rep.broken) == {"quantize_per_channel"}
    assert "compiling quantize_per_channel failed: numba could not compile it" in \
        rep.broken["quantize_per_channel"]
    assert all(c.not_run for c in by_fn(rep, "quantize_per_channel"))
    assert all(c.passed for c in by_fn(rep, "int8_gemm"))
    # linear_w8a8 calls the broken quantiser: it runs, and fails its own cases
    lin = by_fn(rep, "linear_w8a8")
    assert lin and all(not c.not_run and not c.passed for c in lin)
    assert rep.correctness_score == pytest.approx(
        rep.correctness_points * len(by_fn(rep, "int8_gemm")) / len(rep.cases), abs=0.05)
    named_once(rep, "compiling quantize_per_channel failed")


def test_functions_that_hang_in_their_warm_up_are_dropped_and_the_worker_restarted(tmp_path):
    src = notebook.submission_source(ROOT / "solutions" / "06_int8_linear.ipynb")
    sub = tmp_path / "hangs.py"
    sub.write_text(src + "\n\ndef quantize_per_channel(W):\n    while True:\n        pass\n")
    rep = grade("int8-linear", sub, run_performance=False, first_call_timeout_s=1)
    # linear_w8a8 calls the quantiser, so its warm-up hangs too: two restarts, int8_gemm graded
    assert set(rep.broken) == {"quantize_per_channel", "linear_w8a8"}
    for fn in rep.broken:
        assert f"first call of {fn}" in rep.broken[fn] and "did not finish within" in \
            rep.broken[fn]
        named_once(rep, f"first call of {fn}")
    assert_earns_its_share(rep, ("int8_gemm",))


def test_performance_runs_when_the_functions_it_times_pass(monkeypatch):
    """With ``perf_functions`` declared (int8-linear times int8_gemm only), a broken
    quantize_per_channel does not stop int8_gemm's speed from being measured and scored."""
    assert Int8Linear.perf_functions == ("int8_gemm",)
    rep = grade("int8-linear", INT8 / "quantize_does_not_compile.py",
                only=lambda c: c.params["fn"] == "int8_gemm" or c.name.startswith("quantize 1x"))
    assert [c.function for c in rep.cases if not c.passed] == ["quantize_per_channel"] * 2
    assert rep.rules and rep.recheck is not None and rep.recheck.passed, rep.to_text()
    assert rep.performance_score > 0 and not rep.passed


def test_the_performance_gate_names_what_stops_it(monkeypatch):
    spec = Int8Linear()
    ok = lambda fn: CaseResult("c", {}, function=fn, passed=True)  # noqa: E731
    bad = lambda fn: CaseResult("c", {}, function=fn, error="wrong")  # noqa: E731
    missing = {"int8_gemm": "'int8_gemm' is not defined (...)"}
    # by default (no perf_functions) the phase needs every function's cases
    monkeypatch.setattr(Int8Linear, "perf_functions", ())
    assert _performance_gate(spec, [ok("int8_gemm"), bad("linear_w8a8")], {}) == \
        "correctness must pass first"
    assert _performance_gate(spec, [ok("quantize_per_channel")], missing) == \
        "correctness must pass first ('int8_gemm' is not defined (...))"
    assert _performance_gate(spec, [ok("int8_gemm"), ok("linear_w8a8")], {}) is None
    monkeypatch.setattr(Int8Linear, "perf_functions", ("int8_gemm",))
    assert _performance_gate(spec, [ok("int8_gemm"), bad("linear_w8a8")], {}) is None
    assert _performance_gate(spec, [bad("int8_gemm"), ok("linear_w8a8")], {}) == \
        "the cases of int8_gemm must pass first"
    assert _performance_gate(spec, [ok("quantize_per_channel")], missing) == \
        "it times int8_gemm: 'int8_gemm' is not defined (...)"
    assert _performance_gate(spec, [], {}) == "the cases of int8_gemm must pass first"


# ------------------------------------------------------------------------- report noise
def test_a_rule_violation_is_one_block_not_one_line_per_case(tmp_path):
    sub = tmp_path / "imports_os.py"
    sub.write_text("import os\n\n\ndef gemm(A, B, C):\n    C[:, :] = A @ B\n")
    rep = grade("gemm-cpu", sub, run_performance=False)
    assert rep.fatal and rep.cases and all(c.not_run for c in rep.cases)
    assert rep.fatal_kind == "rule-violation"
    text = rep.to_text()
    assert "3. correctness" not in text and not any(c.case in text for c in rep.cases)
    assert text.count("RULE VIOLATION — nothing was run") == 1
    # each finding once, with its line quoted, then the score with the count of cases not run
    assert text.count("line 1 (`import os`): import of 'os' is not allowed") == 1, text
    assert text.count("line 5 (`C[:, :] = A @ B`): the '@' operator") == 1, text
    assert f"score: 0/60 ({len(rep.cases)} cases not run)  FAIL" in text, text


def test_a_single_function_lab_with_its_function_missing_stops_as_before(tmp_path):
    sub = tmp_path / "no_gemm.py"
    sub.write_text("def gem(A, B, C):\n    pass\n")
    rep = grade("gemm-cpu", sub, run_performance=False)
    assert rep.fatal == "'gemm' is not defined: the lab asks for gemm(A, B, C)"
    assert rep.fatal_kind == "missing-function" and rep.defined == {"gem": ["A", "B", "C"]}
    assert rep.score == 0 and all(c.not_run for c in rep.cases)
    text = rep.to_text()
    assert text.count("'gemm' is not defined") == 1 and "3. correctness" not in text, text
    assert "did you mean gem?" in text, text


# ------------------------------------------------------------------------- in the notebook
def test_local_check_all_names_a_missing_function_once_and_checks_the_rest(capsys):
    from reference_kernels.quant import quantize_per_channel_golden

    ns = {"quantize_per_channel": quantize_per_channel_golden}  # numpy: no JIT in the test
    assert local.check_all("int8-linear", ns, limit=2) is False
    out = capsys.readouterr().out
    for fn in ("int8_gemm", "linear_w8a8"):  # one block each, as in the grader's report
        assert out.count(f"{fn}: MISSING FUNCTION — its 2 cases not run") == 1, out
        assert out.count(f"'{fn}' is not defined: the lab asks for {fn}(") == 1, out
    assert out.count("2/2 cases pass") == 1, out  # quantize_per_channel's, checked


def test_local_check_refuses_a_wrong_signature_in_one_line(capsys):
    def quantize_per_channel(W, scales):
        raise AssertionError("never called")

    assert local.check("int8-linear", quantize_per_channel) is False
    out = capsys.readouterr().out.strip().splitlines()
    # the grader's block (title, the reason), then how to grade for real; no case line
    assert len(out) == 3 and out[0].startswith("quantize_per_channel: WRONG SIGNATURE"), out
    assert "cannot be called as quantize_per_channel(W)" in out[1], out
    assert "kernellab grade int8-linear" in out[2], out
    with pytest.raises(ValueError, match="say which it is with function="):
        local.check("int8-linear", lambda W: None)


def test_local_check_prints_a_repeated_error_once(capsys):
    def int8_gemm(Aq, Bq, C):
        raise RuntimeError("not yet")

    assert local.check("int8-linear", int8_gemm, limit=3) is False
    out = capsys.readouterr().out
    assert out.count("RuntimeError: not yet") == 1 and out.count("(same error as ") == 2, out
