"""Grader self-tests for lab gemm-cpu: the solution passes, the untouched lab and every
known-wrong submission fail for the stated reason, and the verdicts are stable."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from grader.runner import grade
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
SUBS = Folder("gemm-cpu", "wrong")
SOLUTION = ROOT / "solutions" / "01_gemm_cpu.ipynb"
LAB = ROOT / "labs" / "01_gemm_cpu.ipynb"


def first_error(report) -> str:
    return " | ".join(c.error or "" for c in report.cases if not c.passed)


# ---------------------------------------------------------------------------- end to end (CLI)
@pytest.mark.timed
@pytest.mark.slow
def test_solution_passes_everything_and_json_has_the_figures():
    r = cli("grade", "gemm-cpu", str(SOLUTION), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == d["max_score"] == 100
    from grader.labs._repeat import REPEATS
    from grader.labs.gemm_cpu.spec import DTYPES, VISIBLE_SHAPES

    # + the repeat cases of one case (grader.labs._repeat)
    assert d["cases_passed"] == d["cases_total"] == len(VISIBLE_SHAPES) * len(DTYPES) + REPEATS
    for c in d["cases"]:
        cm = c["comparison"]
        for key in ("max_abs", "max_rel", "max_ulp", "worst_index", "mismatches", "budget_used",
                    "frobenius_rel", "frobenius_bound"):
            assert key in cm
        # the reference uses < 50% of its error budget (kernellab.numerics' margin rule)
        assert cm["budget_used"] < 0.5, c
    names = [x["name"] for x in d["rules"]]
    assert names == ["speedup over the naive ijk kernel", "fraction of numpy.matmul (OpenBLAS)",
                     "fastest timed call is plausible"]
    for rule in d["rules"]:
        assert isinstance(rule["measured"], float) and isinstance(rule["threshold"], float)
        assert rule["passed"] is True
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("gemm-cpu", LAB)


def test_usage_errors_are_plain_and_exit_2(tmp_path):
    r = cli("grade", "no-such-lab", str(SOLUTION))
    assert r.returncode == 2 and "unknown lab" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "hidden.json"
    bad.write_text("{not json")
    r = cli("grade", "gemm-cpu", str(SOLUTION), "--hidden", str(bad))
    assert r.returncode == 2 and "hidden-case file" in r.stderr and "Traceback" not in r.stderr
    bad.write_text(json.dumps({"cases": [{"M": 0, "N": 1, "K": 1}]}))
    r = cli("grade", "gemm-cpu", str(SOLUTION), "--hidden", str(bad))
    assert r.returncode == 2 and "hidden case 0: M must be >= 1, not 0" in r.stderr


def test_missing_file_and_notebook_without_solution_cells(tmp_path):
    rep = grade("gemm-cpu", tmp_path / "nope.py", run_performance=False)
    assert not rep.passed and "no such file" in rep.fatal
    nb = tmp_path / "x.ipynb"
    nb.write_text(LAB.read_text().replace('"solution"', '"other"'))
    rep = grade("gemm-cpu", nb, run_performance=False)
    assert not rep.passed and "tagged 'solution'" in rep.fatal
    garbage = tmp_path / "y.ipynb"
    garbage.write_text("not a notebook")
    rep = grade("gemm-cpu", garbage, run_performance=False)
    assert not rep.passed and "not a readable Jupyter notebook" in rep.fatal


# ------------------------------------------------------------------ known-wrong submissions
# each fails for its reason, the honest styles pass: tests/test_grader/test_known_verdicts.py
def test_zeros_fail_every_case_and_score_nothing():
    rep = grade("gemm-cpu", SUBS / "zeros.py", run_performance=False)
    assert rep.cases and not any(c.passed for c in rep.cases)
    assert rep.score == 0


def test_correctness_only_grading_of_the_solution_passes_out_of_60():
    rep = grade("gemm-cpu", SOLUTION, run_performance=False)
    assert rep.passed and rep.score == rep.max_score == rep.correctness_points
    assert "correctness only" in rep.to_text()


def _peak(monkeypatch, one_core_gflops):
    """perf_rules with a fixed measured one-core fp32 peak (the rules' arithmetic only)."""
    from kernellab import machine

    f = one_core_gflops * 1e9
    peak = machine.MeasuredPeak(one_core={"float32": f, "float64": f / 2},
                                all_cores={"float32": 2 * f, "float64": f}, threads=2,
                                vector_bits=512, measurements=1, quiet=True, source="test")
    monkeypatch.setattr(machine, "measured_peak", lambda refresh=None: peak)


def test_plausibility_rule_fails_a_kernel_faster_than_the_machine(monkeypatch):
    from grader.labs.gemm_cpu import GemmCPU
    from kernellab.machine import PEAK_MARGIN

    _peak(monkeypatch, 250.0)
    base = {"speedup_naive": [100.0] * 5, "fraction_numpy": [0.9] * 5,
            "gflops_numpy": [190.0] * 5, "gflops_naive": [1.0] * 5, "gflops_small": [90.0] * 5,
            "peak_gflops": 166.0, "peak_formula": "test"}
    honest = GemmCPU().perf_rules({**base, "gflops": [230.0] * 5})
    assert all(r.passed for r in honest)
    cheat = GemmCPU().perf_rules({**base, "gflops": [170.0] * 4 + [5000.0]})
    rule = next(r for r in cheat if r.name == "fastest timed call is plausible")
    assert not rule.passed and rule.measured == 5000.0 and rule.threshold == PEAK_MARGIN * 250
    assert "measured FMA peak" in rule.detail
    # /proc's clock (the nominal peak) moves nothing: a VM hiding its boost clock, or
    # KERNELLAB_CPU_GHZ far too low, never fails an honest fast kernel
    low = GemmCPU().perf_rules({**base, "peak_gflops": 20.0, "gflops": [230.0] * 5})
    assert all(r.passed for r in low)
    # a measured peak somehow too low: numpy's fastest call in the same run is the witness
    _peak(monkeypatch, 100.0)
    witnessed = GemmCPU().perf_rules({**base, "gflops": [250.0] * 5})
    rule = next(r for r in witnessed if r.name == "fastest timed call is plausible")
    assert rule.passed and rule.threshold == PEAK_MARGIN * 190 and "numpy" in rule.detail


def test_fraction_of_numpy_has_one_meaning_whatever_kernel_openblas_runs(monkeypatch):
    """OpenBLAS's own kernel (235 GFLOP/s on a 250 GFLOP/s core) or a forced AVX2 one (126):
    the baseline is floored at NUMPY_FLOOR_OF_PEAK x the FMA peak measured in the same rounds,
    so a kernel at 190 passes and one at 45 (plain ikj) fails both ways; the machine's cached
    peak plays no part while the probe is believed."""
    from grader.labs.gemm_cpu.spec import NUMPY_FLOOR_OF_PEAK, GemmCPU

    _peak(monkeypatch, 400.0)   # the cached peak: not the floor, while the probe is believed
    floor = NUMPY_FLOOR_OF_PEAK * 250.0
    for numpy_gflops in (235.0, 126.0):
        for sub, passes in ((190.0, True), (45.0, False)):
            m = {"speedup_naive": [100.0] * 5, "fraction_numpy": [sub / numpy_gflops] * 5,
                 "gflops": [sub] * 5, "gflops_cpu": [sub] * 5, "gflops_peak": [250.0] * 5,
                 "gflops_numpy": [numpy_gflops] * 5, "gflops_naive": [1.0] * 5,
                 "gflops_small": [90.0] * 5, "peak_gflops": 166.0, "peak_formula": "test"}
            rule = next(r for r in GemmCPU().perf_rules(m)
                        if r.name == "fraction of numpy.matmul (OpenBLAS)")
            assert rule.passed is passes, (numpy_gflops, sub, rule)
            assert rule.measured == pytest.approx(sub / max(numpy_gflops, floor))
            assert ("the floor" in rule.detail) is (numpy_gflops < floor)


def test_the_floor_follows_the_peak_of_each_round(monkeypatch):
    """A round in which the core ran slower (its FMA peak and the kernel both lower) keeps the
    kernel's fraction: the floor is that round's, not a figure measured at another time."""
    from grader.labs.gemm_cpu.spec import NUMPY_FLOOR_OF_PEAK, GemmCPU

    _peak(monkeypatch, 250.0)
    # numpy forced to a kernel at half the core's rate, so the floor binds; rounds 3-5 at 60%
    # of the clock: the peak and the kernel both scale
    scale = [1.0, 1.0, 0.6, 0.6, 0.6]
    m = {"speedup_naive": [100.0] * 5, "fraction_numpy": [190.0 / 126.0] * 5,
         "gflops": [190.0 * s for s in scale], "gflops_cpu": [190.0 * s for s in scale],
         "gflops_peak": [250.0 * s for s in scale], "gflops_numpy": [126.0 * s for s in scale],
         "gflops_naive": [1.0] * 5, "gflops_small": [90.0] * 5, "peak_gflops": 166.0,
         "peak_formula": "test"}
    rule = next(r for r in GemmCPU().perf_rules(m)
                if r.name == "fraction of numpy.matmul (OpenBLAS)")
    assert rule.measured == pytest.approx(190.0 / (NUMPY_FLOOR_OF_PEAK * 250.0))
    assert "in the same rounds" in rule.detail and "the floor" in rule.detail
    # a probe far below the cached peak (slow, or scalar), or none: the cached peak is the floor
    import statistics

    from grader.labs.gemm_cpu.spec import PROBE_MIN_OF_PEAK

    for probes, why in (([0.4 * PROBE_MIN_OF_PEAK * 250.0] * 5, "the probe in the rounds"),
                        ([], "no probe in the rounds")):
        m["gflops_peak"] = probes
        rule = next(r for r in GemmCPU().perf_rules(m)
                    if r.name == "fraction of numpy.matmul (OpenBLAS)")
        assert rule.measured == pytest.approx(
            statistics.median([190.0 * s / (NUMPY_FLOOR_OF_PEAK * 250.0) for s in scale]))
        assert why in rule.detail, rule.detail
    # no probe and no cached peak: numpy alone, and the note says so
    monkeypatch.setattr("kernellab.machine.measured_peak", lambda *a, **k: None)
    rule = next(r for r in GemmCPU().perf_rules(m)
                if r.name == "fraction of numpy.matmul (OpenBLAS)")
    assert rule.measured == pytest.approx(190.0 / 126.0) and "no floor" in rule.detail


def test_tail_bug_is_located_on_the_last_tile_row():
    rep = grade("gemm-cpu", SUBS / "tail_bug.py", run_performance=False)
    case = next(c for c in rep.cases if c.case == "33x31x127 float32")
    assert not case.passed
    assert case.comparison["worst_index"][0] == 32
    assert case.comparison["bad_tiles"] == [[1, 0]]


def test_crash_costs_only_its_worker_and_grading_goes_on():
    rep = grade("gemm-cpu", SUBS / "crashes.py", run_performance=False)
    errs = [c.error for c in rep.cases]
    assert sum("SIGSEGV" in e for e in errs) == 3
    assert all("not run" in e for e in errs[3:])
    from grader.labs._repeat import REPEATS
    from grader.labs.gemm_cpu.spec import DTYPES, VISIBLE_SHAPES

    assert len(rep.cases) == len(VISIBLE_SHAPES) * len(DTYPES) + REPEATS  # + the repeats


@pytest.mark.timed
@pytest.mark.slow
def test_plain_ikj_loop_is_correct_but_too_slow():
    rep = grade("gemm-cpu", SUBS / "ikj_plain.py")
    assert all(c.passed for c in rep.cases), first_error(rep)
    frac = next(r for r in rep.rules if r.name.startswith("fraction of numpy"))
    assert not frac.passed, rep.to_text()
    assert not rep.passed


# --------------------------------------------------------------------------- hidden and batch
def test_hidden_cases_from_file_and_seed(tmp_path):
    hidden = tmp_path / "hidden.json"
    hidden.write_text(json.dumps({"seed": 7, "cases": [
        {"M": 70, "N": 5, "K": 1100, "dtype": "float32"}, {"M": 1, "N": 300, "K": 2,
                                                             "dtype": "float64"}]}))
    rep = grade("gemm-cpu", SUBS / "zeros.py", hidden=hidden, run_performance=False)
    hid = [c for c in rep.cases if c.hidden]
    assert [c.params["K"] for c in hid] == [1100, 2]
    os.environ["KERNELLAB_HIDDEN_SEED"] = "1234"
    try:
        rep = grade("gemm-cpu", SOLUTION, run_performance=False)
    finally:
        del os.environ["KERNELLAB_HIDDEN_SEED"]
    hid = [c for c in rep.cases if c.hidden]
    assert len(hid) == 6 and all(c.passed for c in hid), first_error(rep)
    assert hid[-1].params["K"] > 512


def test_batch_grading_writes_csv(tmp_path):
    out = tmp_path / "scores.csv"
    r = cli("grade", "gemm-cpu", str(SUBS / "zeros.py"), str(SUBS / "calls_matmul.py"),
            "--no-perf", "--quiet", "--csv", str(out))
    assert r.returncode == 1
    rows = list(csv.DictReader(out.open()))
    assert [Path(x["submission"]).name for x in rows] == ["zeros.py", "calls_matmul.py"]
    assert all(x["passed"] == "False" for x in rows)
