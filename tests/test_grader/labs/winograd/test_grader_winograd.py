"""Grader self-tests for lab ``winograd``: the solution passes, the untouched lab and every
known-wrong submission (grader/labs/winograd/submissions/wrong/) fail for their stated reason,
and the tolerance accepts honest float32 convolutions (Winograd and direct alike) on odd sizes
while float16 transforms fail it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grader.labs.winograd.measure import sampled_ok
from grader.labs.winograd.spec import (GAMMA_TRANSFORMS, KAPPA, MIN_SPEEDUP_DIRECT,
                                       VISIBLE_SHAPES, Winograd)
from grader.runner import grade
from grader.spec import Case, HiddenCases
from kernellab.numerics import unit_roundoff
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
SUBS = Folder("winograd", "wrong")
SOLUTION = ROOT / "solutions" / "04_winograd.ipynb"
LAB = ROOT / "labs" / "04_winograd.ipynb"


def errors(report) -> list[str]:
    return [c.error or "" for c in report.cases if not c.passed]


# ---------------------------------------------------------------------------- end to end
@pytest.mark.timed
@pytest.mark.slow
def test_solution_passes_everything_with_margin():
    r = cli("grade", "winograd", str(SOLUTION), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == d["max_score"] == 100
    from grader.labs._repeat import REPEATS

    assert d["cases_passed"] == d["cases_total"] == len(VISIBLE_SHAPES) + REPEATS  # + repeats
    for c in d["cases"]:
        # the reference uses < 50% of its error budget (kernellab.numerics' margin rule)
        assert c["comparison"]["budget_used"] < 0.5, c
    speed = next(x for x in d["rules"] if x["name"].startswith("speedup"))
    assert speed["passed"] and speed["threshold"] == MIN_SPEEDUP_DIRECT
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("winograd", LAB)


# each known-wrong one fails its cases for its reason: tests/test_grader/test_known_verdicts.py


@pytest.mark.timed
@pytest.mark.slow
@pytest.mark.parametrize("name", ["direct.py", "filter_per_tile.py"])
def test_too_slow_submissions_pass_the_cases_and_fail_the_speed_rule(name):
    rep = grade("winograd", SUBS / name)
    assert all(c.passed for c in rep.cases), errors(rep)[:2]
    speed = next(r for r in rep.rules if r.name.startswith("speedup"))
    assert not speed.passed and speed.measured < MIN_SPEEDUP_DIRECT
    assert not rep.passed


@pytest.mark.timed
@pytest.mark.slow
def test_writing_inputs_during_timed_calls_fails_the_recheck():
    rep = grade("winograd", SUBS / "writes_inputs_when_timed.py")
    assert all(c.passed for c in rep.cases), errors(rep)[:2]
    assert rep.recheck is not None and not rep.recheck.passed
    assert "wrote into its input X" in rep.recheck.error
    assert not rep.passed


# ---------------------------------------------------------------------------- the tolerance
def _inputs(shape, seed, scale_x=1.0, scale_w=1.0):
    N, C, K, H, W = shape
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((N, C, H, W)) * scale_x).astype(np.float32)
    Wt = (rng.standard_normal((K, C, 3, 3)) * scale_w).astype(np.float32)
    return X, Wt


def _shapes(seed, n):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (int(rng.integers(1, 3)), int(rng.choice([1, 1, 2, 3, 5, 16, 40])),
               int(rng.integers(1, 5)), int(rng.integers(1, 12)), int(rng.integers(1, 12)))


def test_rule_constants_are_the_documented_ones():
    u = unit_roundoff("float32")
    assert KAPPA == 2.0
    assert GAMMA_TRANSFORMS == pytest.approx(11 * u / (1 - 11 * u), rel=1e-12)


def test_honest_float32_convolutions_pass_on_random_odd_shapes():
    """F(2x2,3x3) in float32 (chapter 4's v3, and the every-op-rounded numpy reference) and a
    direct convolution pass; data with a wide dynamic range included (filters and pixels
    spanning six decades, where Winograd's mixing of taps matters most)."""
    from kernellab.kernels.conv_cpu import conv_v1, conv_v3, winograd_reference

    spec = Winograd()
    worst = 0.0
    for i, shape in enumerate(_shapes(7, 40)):
        X, Wt = _inputs(shape, i)
        if i % 3 == 1:
            Wt = (Wt * 10.0 ** np.random.default_rng(i).uniform(-3, 3, Wt.shape)).astype(np.float32)
        if i % 3 == 2:
            X = (X * 10.0 ** np.random.default_rng(i).uniform(-3, 3, X.shape)).astype(np.float32)
        case = Case("t", dict(zip("NCKHW", shape)), 0)
        data = spec.case_data(case)
        data.inputs.update(X=X, W=Wt)
        for kernel in (conv_v1, conv_v3):
            Y = np.full((shape[0], shape[2], shape[3], shape[4]), np.nan, np.float32)
            kernel(X, Wt, Y)
            cmp = spec.check(case, data, {"Y": Y})
            assert cmp.ok, (kernel.__name__, shape, cmp.message)
            worst = max(worst, cmp.budget_used)
        cmp = spec.check(case, data, {"Y": winograd_reference(X, Wt, 2, np.float32)})
        assert cmp.ok, (shape, cmp.message)
        worst = max(worst, cmp.budget_used)
    assert worst < 0.5, worst  # honest kernels keep a 2x margin


def test_float16_and_zero_outputs_fail_the_rule():
    from kernellab.kernels.conv_cpu import winograd_reference

    spec = Winograd()
    for i, shape in enumerate([(1, 1, 1, 3, 3), (1, 16, 4, 8, 8), (1, 64, 8, 6, 6)]):
        case = Case("t", dict(zip("NCKHW", shape)), 100 + i)
        data = spec.case_data(case)
        X, Wt = data.inputs["X"], data.inputs["W"]
        Y16 = winograd_reference(X, Wt, 2, np.float16).astype(np.float32)
        cmp = spec.check(case, data, {"Y": Y16})
        assert not cmp.ok and "float16" in cmp.message, cmp.message
        assert cmp.budget_used > 20, cmp.budget_used  # far outside, not at the edge
        zero = np.zeros_like(Y16)
        assert not spec.check(case, data, {"Y": zero}).ok


def test_sampled_check_accepts_honest_and_rejects_skipped_work():
    from kernellab.kernels.conv_cpu import conv_v3

    X, Wt = _inputs((1, 64, 64, 56, 56), 3)
    Y = np.empty((1, 64, 56, 56), np.float32)
    conv_v3(X, Wt, Y)
    rng = np.random.default_rng(0)
    assert sampled_ok(X, Wt, Y, rng)
    stale = Y.copy()
    stale[:, 32:] = 0.0  # half the output channels skipped
    assert not sampled_ok(X, Wt, stale, rng)
    other = np.empty_like(Y)
    conv_v3(X[:, ::-1].copy(), Wt, other)  # the result of other inputs (a cached call)
    assert not sampled_ok(X, Wt, other, rng)


def test_hidden_cases_are_validated_and_generated():
    spec = Winograd()
    with pytest.raises(ValueError, match=">= 1"):
        spec.cases(HiddenCases(cases=[{"N": 1, "C": 0, "K": 1, "H": 1, "W": 1}]))
    with pytest.raises(ValueError, match="C must be an integer"):
        spec.cases(HiddenCases(cases=[{"N": 1, "C": "x", "K": 1, "H": 1, "W": 1}]))
    with pytest.raises(ValueError, match="MiB"):
        spec.cases(HiddenCases(cases=[{"N": 8, "C": 512, "K": 512, "H": 64, "W": 64}]))
    # the rule of every lab (tests/test_grader/test_hidden_cases.py)
    for bad in (2.9, True, "3", None):
        with pytest.raises(ValueError, match="N must be an integer"):
            spec.cases(HiddenCases(cases=[{"N": bad, "C": 1, "K": 1, "H": 1, "W": 1}]))
    with pytest.raises(ValueError, match="grader's check"):  # X, W, Y small; the check is not
        spec.cases(HiddenCases(cases=[{"N": 1, "C": 1, "K": 1, "H": 1, "W": 10_000_000}]))
    with pytest.raises(ValueError, match="too long for the grader's check"):  # 9 C numpy passes
        spec.cases(HiddenCases(cases=[{"N": 1, "C": 2_000_000, "K": 1, "H": 1, "W": 1}]))
    gen = [c for c in spec.cases(HiddenCases(seed=5)) if c.hidden]
    assert len(gen) == 6 and all(min(c.params.values()) >= 1 for c in gen)
