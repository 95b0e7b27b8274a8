"""Grader self-tests for lab softmax-cuda (on the sim tier: the suite runs without a GPU): the
solution passes with its figures in the JSON and under half of every error budget, the
untouched lab fails "not implemented", every known-wrong submission fails for the reason in
its header, the modelled thresholds sit where the model puts them, the tolerance is neither
so loose that a zero or a float16 sum passes nor so tight that the golden reference itself
fails, and the gpu-tier measurement runs (on the simulator, with a wall clock)."""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

import kernellab
from grader.labs.softmax_cuda import spec as lab
from grader.runner import grade, recheck
from grader.spec import HiddenCases
from kernellab.numerics import RowSoftmax, compare
from reference_kernels.reductions import softmax_golden, softmax_shift
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
SUBS = Folder("softmax-cuda", "wrong")
SOLUTION = ROOT / "solutions" / "03_softmax_cuda.ipynb"
LAB = ROOT / "labs" / "03_softmax_cuda.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the known-wrong verdicts are the sim tier's")

SPEED = "modelled speedup over the three-pass softmax"
COALESCED = "global memory coalesced"
BY_KERNELS = "the softmax was computed by kernels"


@functools.lru_cache(maxsize=None)
def graded(name: str):
    """The correctness-only report of a known-wrong submission, graded once per session."""
    return grade("softmax-cuda", SUBS / name, run_performance=False)


def failing(report) -> list:
    return [c for c in report.cases if not c.passed]


def rule(report, name):
    return next(r for r in report.rules if r.name == name)


# ---------------------------------------------------------------------------- end to end (CLI)
def test_solution_passes_in_budget_and_json_has_the_figures():
    t0 = time.perf_counter()
    r = cli("grade", "softmax-cuda", str(SOLUTION), "--json")
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 120, seconds                  # about 30 s on the course machine
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == d["max_score"] == 100 and d["tier"] == "sim"
    n_cases = len(lab.DTYPES) * (len(lab.SUM_SHAPES) + len(lab.SOFTMAX_SHAPES))
    assert d["cases_passed"] == d["cases_total"] == n_cases
    for c in d["cases"]:
        assert c["error"] is None
        # the reference solution uses at most half of its budget (kernellab.numerics' margin
        # rule); a correctly rounded float16 output uses exactly half of the one-ulp output
        # term at worst
        assert c["comparison"]["budget_used"] <= 0.5 + 1e-3, c
    rules = {x["name"]: x for x in d["rules"]}
    assert list(rules) == [SPEED, COALESCED, BY_KERNELS]
    assert all(x["passed"] for x in rules.values())
    # the model's figure for a fused kernel: X once and Y once against 3 + 1 (module docstring)
    assert rules[SPEED]["measured"] == pytest.approx(2.0, rel=0.02)
    assert rules[COALESCED]["measured"] == pytest.approx(100.0)
    assert "dram-bound" in rules[SPEED]["detail"] and "DRAM roof" in rules[SPEED]["detail"]
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("softmax-cuda", LAB, "--no-perf")


# ------------------------------------------------------------------ known-wrong submissions
#: file -> (every failing case's error contains one of these, the failing cases' names all
#: contain one of these, and at least this many cases fail)
WRONG_CASES = {
    # no max subtraction: exp overflows on the +-1e4 rows (and 0/0 on the fully masked one)
    "no_max.py": (("exp overflows in float32", "must be written as zeros"), ("large", "masked"),
                  4),
    # float16 statistics: errors of float16 size on float16 rows only
    "fp16_accumulation.py": ("accumulated in float16", ("softmax float16",), 2),
    # the barrier between the two levels of the block's tree removed
    "race_missing_barrier.py": ("race: ", ("row_sum", "softmax"), 40),
    # one element per thread with 1024 threads: rows beyond 1024 elements
    "first_1024_only.py": ("", ("x1025", "x4097"), 8),
    # a fully masked row written as NaN
    "masked_row_nan.py": ("must be written as zeros", ("masked",), 2),
    # a correct row_sum without warp shuffles
    "row_sum_no_shuffle.py": ("executed no warp shuffle", ("row_sum",), 10),
}


@pytest.mark.parametrize("name", sorted(WRONG_CASES))
def test_known_wrong_submission_fails_its_cases_for_the_stated_reason(name):
    reason, where, at_least = WRONG_CASES[name]
    rep = graded(name)
    assert not rep.passed
    bad = failing(rep)
    assert len(bad) >= at_least, rep.to_text()
    for c in bad:
        assert any(r in c.error for r in (reason if isinstance(reason, tuple) else (reason,))), \
            (c.case, c.error)
        assert any(w in c.case for w in where), (c.case, c.error)
    assert "Traceback" not in rep.to_text()


def test_no_max_names_the_overflow_on_the_large_rows():
    rep = graded("no_max.py")
    large = [c for c in failing(rep) if "large" in c.case]
    assert len(large) == 2 and all("exp overflows" in c.error for c in large), rep.to_text()


def test_fp16_accumulation_passes_every_float32_case():
    rep = graded("fp16_accumulation.py")
    assert all(c.passed for c in rep.cases if "float32" in c.case), rep.to_text()


def test_race_report_names_the_slot_array_and_both_lines():
    """Both accesses in program order, their barrier interval, and where the missing
    syncthreads() goes (between the two levels of the block's tree)."""
    rep = graded("race_missing_barrier.py")
    err = failing(rep)[0].error
    src = (SUBS / "race_missing_barrier.py").read_text().splitlines()
    w = next(i for i, t in enumerate(src, 1) if "slots[warp] = v" in t)
    r = next(i for i, t in enumerate(src, 1) if "v = slots[lane]" in t)
    fn = "(?:of|in) block_sum"       # the engine's form, or the grader's source-map form
    assert "shared array slots[" in err and err.count("tid=") == 2, err
    assert re.search(rf"write by tid=\(\d+, 0, 0\) at line {w} {fn}.* and read by "
                     rf"tid=\(\d+, 0, 0\) at line {r} {fn}", err), err
    assert "both before the block's first syncthreads() (line " in err, err
    assert re.search(rf"no syncthreads\(\) comes between them\. A syncthreads\(\) is needed "
                     rf"after the write at line {w} {fn}.*, before the read at line {r} {fn}",
                     err), err


#: file -> (rule that must fail, rule that must pass, check of the speedup figure)
WRONG_SPEED = {
    # two launches (statistics, then normalise): X read from DRAM twice, 4/3 of the baseline
    "two_kernels.py": (SPEED, COALESCED, lambda s: s == pytest.approx(4 / 3, rel=0.02)),
    # each thread its own contiguous chunk: uncoalesced; its sectors make it global-bound
    "chunked_uncoalesced.py": (COALESCED, None, lambda s: s < lab.MIN_MODELLED_SPEEDUP),
}


@pytest.mark.parametrize("name", sorted(WRONG_SPEED))
def test_known_wrong_submission_is_correct_but_fails_a_speed_rule(name):
    must_fail, may_pass, figure = WRONG_SPEED[name]
    rep = grade("softmax-cuda", SUBS / name)
    assert all(c.passed for c in rep.cases), rep.to_text()
    assert not rep.passed and rep.recheck is not None and rep.recheck.passed
    assert not rule(rep, must_fail).passed, rep.to_text()
    if may_pass:
        assert rule(rep, may_pass).passed, rep.to_text()
    assert rule(rep, BY_KERNELS).passed
    assert figure(rule(rep, SPEED).measured), rep.to_text()
    # a failing speed rule names the site that cost the most; the coalescing rule the worst
    site = r"the load of X at line \d+ (?:of|in) \w+ \(`[^`]+`\)"  # the line quoted
    assert re.search(rf"Where the cost is: most global traffic: {site}",
                     rule(rep, SPEED).detail), rule(rep, SPEED).detail
    if must_fail == COALESCED:
        assert re.search(rf"least coalesced: {site}, \d+% of its bytes used",
                         rule(rep, COALESCED).detail), rule(rep, COALESCED).detail


# ------------------------------------------------------------ thresholds from the model
def _launch(name, reads, writes, blocks):
    """A launch that moves ``reads``/``writes`` bytes of DRAM, coalesced, nothing else."""
    from grader.labs._cuda import LAUNCH_COUNTERS

    c = dict.fromkeys(LAUNCH_COUNTERS, 0)
    c.update(blocks=blocks, dram_read_bytes=reads, dram_write_bytes=writes,
             global_load_sectors=reads // 32, global_store_sectors=writes // 32,
             global_load_bytes=reads, global_store_bytes=writes)
    return {"name": name, "grid": [blocks, 1, 1], "block": [256, 1, 1], "counters": c}


@pytest.mark.parametrize("M,N", [(128, 1024), (4096, 4096)])
def test_the_threshold_sits_between_two_launches_and_one(M, N):
    """From DRAM traffic alone (no simulation): one fused launch models at 2x the three-pass
    softmax, two launches at 4/3x; the threshold sits between with margin both ways. One
    block per row fills the GPU at both shapes (M >= 108 SMs), so the grids as launched give
    the same figures."""
    x = 4 * M * N
    three = [_launch("max", x, 4 * M, M), _launch("sum", x, 4 * M, M),
             _launch("norm", x, x, M)]
    two = [_launch("stats", x, 8 * M, M), _launch("norm", x, x, M)]
    one = [_launch("fused", x, x, M)]
    t = {k: lab.modelled_as_launched(v)["seconds"] for k, v in
         {"three": three, "two": two, "one": one}.items()}
    assert t["three"] / t["one"] == pytest.approx(2.0, rel=0.01)
    assert t["three"] / t["two"] == pytest.approx(4 / 3, rel=0.01)
    assert 1.15 * t["three"] / t["two"] < lab.MIN_MODELLED_SPEEDUP < t["three"] / t["one"] / 1.15


# --------------------------------------------------------------------- the tolerance itself
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kind", lab.KINDS)
def test_tolerance_accepts_the_golden_rounded_and_rejects_zeros(dtype, kind):
    rng = np.random.default_rng(7)
    X = lab.softmax_inputs(rng, 3, 513, dtype, kind)
    ref = softmax_golden(X)
    pol = RowSoftmax(N=513, acc_dtype="float32", out_dtype=dtype, shift=softmax_shift(X))
    rounded = compare(ref.astype(dtype), ref, pol, tile=None)
    assert rounded.ok and rounded.budget_used <= 0.5 + 1e-9, rounded.message
    assert not compare(np.zeros_like(ref, dtype=dtype), ref, pol, tile=None).ok


def test_float16_rounded_sum_fails_the_float32_tolerance():
    """A softmax whose denominator carries one float16 rounding of error fails a float32
    output case: the bound allows float32-sized statistics."""
    rng = np.random.default_rng(3)
    X = lab.softmax_inputs(rng, 2, 1000, "float32")
    ref = softmax_golden(X)
    e = np.exp(X.astype(np.float64) - X.max(axis=1, keepdims=True))
    d16 = e.sum(axis=1, keepdims=True).astype(np.float16).astype(np.float64)
    pol = RowSoftmax(N=1000, acc_dtype="float32", out_dtype="float32", shift=softmax_shift(X))
    assert not compare((e / d16).astype(np.float32), ref, pol, tile=None).ok


def test_masked_row_is_zeros_in_the_golden_reference():
    X = np.full((2, 5), -np.inf, np.float32)
    X[0, 2] = 1.0
    y = softmax_golden(X)
    assert y[0].tolist() == [0, 0, 1, 0, 0] and y[1].tolist() == [0] * 5


def test_case_list_covers_the_issue_sizes_and_kinds():
    cases = lab.SoftmaxCUDA().cases(HiddenCases())
    names = " ".join(c.name for c in cases)
    for n in (1, 31, 33, 1000, 4097):
        assert f"x{n}" in names
    for kind in ("large", "equal", "masked"):
        assert kind in names
    assert {c.params["dtype"] for c in cases} == {"float32", "float16"}
    spec = lab.SoftmaxCUDA()
    X = spec.case_data(next(c for c in cases if "large" in c.name)).inputs["X"]
    assert np.abs(X).max() > 1e3          # overflows exp without the max


def test_hidden_cases_are_validated_and_bounded():
    spec = lab.SoftmaxCUDA()
    ok = spec.cases(HiddenCases(seed=5, cases=[{"fn": "softmax", "M": 2, "N": 77,
                                                 "dtype": "float16", "kind": "masked"}]))
    assert ok[-1].hidden and ok[-1].params["kind"] == "masked"
    for bad in ({"fn": "gemm", "M": 1, "N": 1}, {"fn": "softmax", "M": 0, "N": 3},
                {"fn": "row_sum", "M": 1, "N": 1 << 20}, {"fn": "softmax", "M": 1, "N": 3,
                                                          "dtype": "bfloat16"}):
        with pytest.raises(ValueError):
            spec.cases(HiddenCases(cases=[bad]))
    seeded = [c for c in spec.cases(HiddenCases(seed=11)) if c.hidden]
    assert len(seeded) == 6 and {spec.case_function(c) for c in seeded} == {"row_sum",
                                                                            "softmax"}


# ------------------------------------------------- the gpu-tier code path, on the simulator
def test_gpu_tier_measurement_runs_on_the_simulator_with_a_wall_clock(tmp_path):
    from grader import notebook

    ns: dict = {}
    exec(compile(notebook.submission_source(SOLUTION), str(SOLUTION), "exec"), ns)
    spec = lab.SoftmaxCUDA()
    plan = {"tier": "gpu", "M": 3, "N": 40, "rounds": 2}
    m = spec.measure({"softmax": ns["softmax"]}, plan, tmp_path, clock="wall")
    assert m["tier"] == "gpu" and m["clock"] == "wall" and len(m["copy_fraction"]) == 2
    rules = spec.perf_rules(json.loads(json.dumps(m)))  # what crosses the worker boundary
    assert [r.name for r in rules] == ["bandwidth vs a device copy",
                                       "fastest timed call is plausible"]
    after = recheck(spec, plan, m["recheck"], tmp_path)
    assert after.passed, after.error
    assert m["recheck"]["checked_calls"] == plan["rounds"] and m["recheck"]["wrong_calls"] == 0


def test_gpu_rules_flag_a_call_faster_than_a_copy_allows():
    spec = lab.SoftmaxCUDA()
    base = {"tier": "gpu", "M": 4096, "N": 4096, "gbs_copy": [3000.0] * 5,
            "gbs_three_pass": [900.0] * 5, "speedup_three_pass": [2.5] * 5}
    honest = spec.perf_rules({**base, "gbs": [2400.0] * 5, "copy_fraction": [0.8] * 5})
    assert all(r.passed for r in honest)
    cheat = spec.perf_rules({**base, "gbs": [2400.0] * 4 + [10 ** 5],
                             "copy_fraction": [0.8] * 5})
    assert not cheat[1].passed and not cheat[1].scored
    slow = spec.perf_rules({**base, "gbs": [600.0] * 5, "copy_fraction": [0.2] * 5})
    assert not slow[0].passed


def test_local_check_runs_one_functions_cases():
    from grader import local

    seen = []

    def softmax(X, Y):
        seen.append(X.shape)
        Y[...] = softmax_golden(X).astype(Y.dtype)

    local.check("softmax-cuda", softmax, verbose=False)   # host code: "no kernel" on the sim
    assert len(seen) == len(lab.DTYPES) * len(lab.SOFTMAX_SHAPES)
    with pytest.raises(ValueError, match="no function"):
        local.check("softmax-cuda", softmax, function="gemm", verbose=False)
