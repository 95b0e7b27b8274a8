"""Grader self-tests for lab ``int8-linear``: the solution passes, the untouched lab and every
known-wrong submission (grader/labs/int8_linear/submissions/wrong/) fail for their stated
reason (a missing clamp only on rows of subnormal magnitude, the one place max-based scales let
it act), and returned outputs are checked like written ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grader.labs.int8_linear.measure import exact_freivalds
from grader.labs.int8_linear.spec import Int8Linear, MIN_SPEEDUP_NAIVE, SQNR_MARGIN_DB
from grader.runner import grade
from grader.spec import Case, HiddenCases
from reference_kernels.quant import (int_gemm_golden, predicted_sqnr_db,
                                     quantize_per_channel_golden)
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
SUBS = Folder("int8-linear", "wrong")
SOLUTION = ROOT / "solutions" / "06_int8_linear.ipynb"
LAB = ROOT / "labs" / "06_int8_linear.ipynb"


def failed(report) -> dict[str, str]:
    return {c.case: c.error or "" for c in report.cases if not c.passed}


@pytest.mark.timed
@pytest.mark.slow
def test_solution_passes_everything_with_margin():
    r = cli("grade", "int8-linear", str(SOLUTION), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == d["max_score"] == 100
    for c in d["cases"]:
        assert c["comparison"]["budget_used"] < 0.5, c  # kernellab.numerics' margin rule
    speed = d["rules"][0]
    assert speed["passed"] and speed["threshold"] == MIN_SPEEDUP_NAIVE
    assert speed["measured"] >= 1.5 * MIN_SPEEDUP_NAIVE  # the documented margin
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("int8-linear", LAB)


# each known-wrong one fails its cases for its reason: tests/test_grader/test_known_verdicts.py


def test_returned_outputs_are_checked(tmp_path):
    sol = (SUBS / "no_clamp.py").read_text()
    cases = {
        "returns_nothing": ("return Wq, scales", "return None", "returned nothing"),
        "returns_one": ("return Wq, scales", "return Wq", "expected the tuple (Wq, scales)"),
        "returns_wrong_dtype": ("return Wq, scales", "return Wq.astype(np.int16), scales",
                                "expected"),
        "returns_wrong_shape": ("return Wq, scales", "return Wq[:, :0], scales", ", 0) and dtype"),
    }
    for name, (old, new, reason) in cases.items():
        assert old in sol
        p = tmp_path / f"{name}.py"
        p.write_text(sol.replace(old, new))
        rep = grade("int8-linear", p, run_performance=False)
        q = [c.error for c in rep.cases if c.case.startswith("quantize")]
        assert q and all(e and reason in e for e in q), (name, q[:2])


@pytest.mark.timed
@pytest.mark.slow
def test_writing_inputs_during_timed_calls_fails_the_recheck():
    rep = grade("int8-linear", SUBS / "writes_inputs_when_timed.py")
    assert not failed(rep)
    assert rep.recheck is not None and not rep.recheck.passed
    assert "wrote into its input Aq" in rep.recheck.error
    assert not rep.passed


def test_the_reference_pipeline_passes_small_and_large_linear_cases():
    """The SQNR rule applies only to layers of SQNR_MIN_OUTPUTS outputs or more: with a
    handful of outputs the measured SQNR scatters far more than 3 dB around the prediction."""
    from grader.labs.int8_linear.spec import SQNR_MIN_OUTPUTS
    from reference_kernels.quant import dequantize_linear_golden, quantize_per_token_golden

    spec = Int8Linear()
    for seed in range(12):
        for (m, k, n, kind) in ((1, 64, 1, "gaussian"), (2, 256, 2, "outlier"),
                                (4, 4096, 4, "outlier"), (64, 4096, 128, "outlier")):
            case = Case("t", {"fn": "linear_w8a8", "M": m, "K": k, "N": n, "kind": kind}, seed)
            d = spec.case_data(case)
            X, Wq, sw, b = (d.inputs[x] for x in ("X", "Wq", "w_scales", "bias"))
            Xq, sx = quantize_per_token_golden(X)
            Y = dequantize_linear_golden(Xq, sx, Wq, sw, b).astype(np.float32)
            cmp = spec.check(case, d, {"Y": Y})
            assert cmp.ok, (m, k, n, kind, seed, cmp.message)
            assert ("SQNR" in cmp.message) == (m * n >= SQNR_MIN_OUTPUTS)


def test_int8_gemm_cases_overflow_narrow_accumulators():
    spec = Int8Linear()
    long = [c for c in spec.cases(HiddenCases()) if c.params["fn"] == "int8_gemm"
            and c.params["kind"] == "min" and c.params["K"] >= 1000]
    assert long, "no long all -128 case"
    for c in long:
        d = spec.case_data(c)
        ref = int_gemm_golden(d.inputs["Aq"], d.inputs["Bq"])
        assert np.abs(ref).max() > np.iinfo(np.int16).max * 1000


def test_tie_cases_have_ties_that_the_two_roundings_split():
    spec = Int8Linear()
    c = next(c for c in spec.cases(HiddenCases()) if c.params.get("kind") == "ties")
    W = spec.case_data(c).inputs["W"]
    _, s = quantize_per_channel_golden(W)
    ratio = W / s[:, None]
    ties = np.abs(ratio - np.trunc(ratio)) == 0.5
    assert ties.mean() > 0.9
    even = np.rint(ratio[ties])
    away = np.trunc(ratio[ties] + np.copysign(0.5, ratio[ties]))
    assert (even != away).mean() > 0.4


def test_sqnr_prediction_and_threshold():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 4096)).astype(np.float32)
    assert 40.0 < predicted_sqnr_db(X) < 42.5  # 6.02 x 8 + 4.77 - 20 log10(~4)
    X[:, 7] *= 60
    assert 18.0 < predicted_sqnr_db(X) < 22.0
    assert SQNR_MARGIN_DB == 3.0


def test_freivalds_is_exact():
    rng = np.random.default_rng(1)
    A = rng.integers(-128, 128, (40, 50), dtype=np.int8)
    B = rng.integers(-128, 128, (50, 30), dtype=np.int8)
    C = int_gemm_golden(A, B).astype(np.int32)
    assert exact_freivalds(A, B, C, rng)
    C[3, 4] += 1
    assert not exact_freivalds(A, B, C, rng, rounds=20)


def test_hidden_cases_are_validated():
    spec = Int8Linear()
    with pytest.raises(ValueError, match="missing parameter fn"):
        spec.cases(HiddenCases(cases=[{"M": 1}]))
    with pytest.raises(ValueError, match=">= 1"):
        spec.cases(HiddenCases(cases=[{"fn": "int8_gemm", "M": 0, "N": 1, "K": 1}]))
    with pytest.raises(ValueError, match="kind"):
        spec.cases(HiddenCases(cases=[{"fn": "int8_gemm", "M": 1, "N": 1, "K": 1,
                                       "kind": "nope"}]))
    with pytest.raises(ValueError, match="fn must be one of"):
        spec.cases(HiddenCases(cases=[{"fn": ["int8_gemm"], "M": 1, "N": 1, "K": 1}]))
    for bad in (2.9, True, "3"):  # the rule of every lab (tests/test_grader/test_hidden_cases.py)
        with pytest.raises(ValueError, match="M must be an integer"):
            spec.cases(HiddenCases(cases=[{"fn": "int8_gemm", "M": bad, "N": 1, "K": 1}]))
    with pytest.raises(ValueError, match="K must be <= 100000"):
        spec.cases(HiddenCases(cases=[{"fn": "int8_gemm", "M": 1, "N": 1, "K": 200000}]))
    gen = [c for c in spec.cases(HiddenCases(seed=9)) if c.hidden]
    assert len(gen) == 6
    for c in gen:
        spec.case_data(c)


def test_float32_inexact_case_sums_are_beyond_what_float32_holds():
    """Every C of the case is above 2^24 and most are not multiples of float32's spacing there:
    no float32 accumulation, in any order, ends on them (it ends on a float32 value)."""
    spec = Int8Linear()
    (c,) = [c for c in spec.cases(HiddenCases()) if c.params.get("kind") == "float32_inexact"]
    d = spec.case_data(c)
    ref = int_gemm_golden(d.inputs["Aq"], d.inputs["Bq"])
    assert ref.min() > 2 ** 25 and ref.max() < np.iinfo(np.int32).max
    assert (ref.astype(np.float32).astype(np.int64) != ref).mean() > 0.5
    with np.errstate(all="ignore"):
        f64 = (d.inputs["Aq"].astype(np.float64) @ d.inputs["Bq"].astype(np.float64))
    assert np.array_equal(f64.astype(np.int64), ref)  # float64 holds them: exact


def test_linear_near_ties_split_the_activation_roundings():
    from grader.labs.int8_linear.checks import other_roundings as _other_roundings
    from reference_kernels.quant import quantize_per_token_golden

    spec = Int8Linear()
    (c,) = [c for c in spec.cases(HiddenCases()) if c.params["fn"] == "linear_w8a8"
            and c.params["kind"] == "near_ties"]
    X = spec.case_data(c).inputs["X"]
    Xq, sx = quantize_per_token_golden(X)
    for why, q in _other_roundings(X, sx):   # float64 (two ways) and x * (1 / S)
        assert (q != Xq).sum() >= 100, why
        # in most rows (x * (1 / S) equals x / S in a row whose 1 / S happens to be exact)
        assert sum((q[m] != Xq[m]).any() for m in range(len(X))) >= 0.75 * len(X), why


def test_repeat_cases_change_a_few_entries_at_fresh_positions():
    spec = Int8Linear()
    first, second = (spec.cases(HiddenCases()) for _ in range(2))
    reps = [i for i, c in enumerate(first) if "again" in c.name]
    assert [spec.case_function(first[i]) for i in reps] == [
        f for f in ("quantize_per_channel", "int8_gemm", "linear_w8a8") for _ in range(3)]
    for i in reps:
        base = next(c for c in reversed(first[:i]) if "again" not in c.name)
        again, again2 = first[i], second[i]
        assert again.name.startswith(base.name) and again.name == again2.name
        assert again.params["changed"]["base"] == base.name
        b, r, r2 = (spec.case_data(x) for x in (base, again, again2))
        others = [spec.case_data(c) for c in first if c is not again
                  and c.params.get("changed", {}).get("base") == base.name]
        for name in again.params["changed"]["arrays"]:
            assert (b.inputs[name] != r.inputs[name]).sum() == 8
            assert not np.array_equal(r.inputs[name], r2.inputs[name])  # fresh positions
            # each repeat of one case changes its own positions
            assert all(not np.array_equal(r.inputs[name], o.inputs[name]) for o in others)
        untouched = set(b.inputs) - set(again.params["changed"]["arrays"])
        assert all(np.array_equal(b.inputs[k], r.inputs[k]) for k in untouched)
