"""The repeat cases of the CPU labs (grader.labs._repeat): each follows its earlier case, changes
a few entries of the named inputs, passes the golden output of its own inputs and fails the
earlier inputs' output with a note naming the stale input. Grader side only (no worker)."""

from __future__ import annotations

import numpy as np
import pytest

from grader.labs import get_spec_class
from grader.spec import HiddenCases
from reference_kernels.conv import conv2d_golden
from reference_kernels.gemm import gemm_golden
from reference_kernels.quant import (dequantize_linear_golden, int_gemm_golden,
                                     quantize_per_channel_golden, quantize_per_token_golden)


def golden(fn: str, inputs: dict) -> dict:
    """The reference outputs of one call, rounded to the output dtype."""
    if fn == "gemm":
        A = inputs["A"]
        return {"C": gemm_golden(A, inputs["B"]).astype(A.dtype)}
    if fn == "conv2d_winograd":
        return {"Y": conv2d_golden(inputs["X"], inputs["W"]).astype(np.float32)}
    if fn == "quantize_per_channel":
        Wq, s = quantize_per_channel_golden(inputs["W"])
        return {"Wq": Wq, "scales": s}
    if fn == "int8_gemm":
        return {"C": int_gemm_golden(inputs["Aq"], inputs["Bq"]).astype(np.int32)}
    Xq, sx = quantize_per_token_golden(inputs["X"])
    return {"Y": dequantize_linear_golden(Xq, sx, inputs["Wq"], inputs["w_scales"],
                                          inputs["bias"]).astype(np.float32)}


@pytest.mark.parametrize("lab, count", [("gemm-cpu", 3), ("winograd", 3), ("int8-linear", 9)])
def test_repeat_cases_catch_a_stale_result_and_pass_a_fresh_one(lab, count):
    spec = get_spec_class(lab)()
    cases = spec.cases(HiddenCases())
    reps = [i for i, c in enumerate(cases) if "changed" in c.params]
    assert len(reps) == count
    for i in reps:
        again = cases[i]
        base = next(c for c in reversed(cases[:i]) if "changed" not in c.params)
        assert again.params["changed"]["base"] == base.name  # right after its earlier case
        fn = spec.case_function(again)
        data, earlier = spec.case_data(again), spec.case_data(base)
        assert spec.check(again, data, golden(fn, data.inputs)).ok
        for stale in again.params["changed"]["arrays"]:  # one input from the earlier call
            mixed = {k: (earlier.inputs if k == stale else data.inputs)[k] for k in data.inputs}
            cmp = spec.check(again, data, golden(fn, mixed))
            assert not cmp.ok, (again.name, stale)
            assert cmp.message.startswith(f"these outputs were computed from the earlier "
                                          f"call's {stale} (case {base.name})"), cmp.message


def test_the_timed_calls_fresh_inputs_catch_a_cache_keyed_on_shapes():
    """The timed calls need no repeat cases (grader.labs._repeat's docstring): every call has
    fresh inputs, so a cache keyed on the shapes returns a wrong output after its first call
    and the after-call check counts it (grader.runner turns a count > 0 into a failed
    re-check), while a cache keyed on a few entries misses its key and is right."""
    from grader.labs._timed import TimedCalls
    from grader.labs.int8_linear.measure import exact_freivalds

    rng, check_rng = np.random.default_rng(5), np.random.default_rng(6)

    def run(key):
        cache = {}

        def gemm(A, B, C):
            k = key(A, B)
            if k not in cache:
                cache[k] = int_gemm_golden(A, B).astype(np.int32)
            C[...] = cache[k]

        calls = TimedCalls(("Aq", "Bq"), ("C",),
                           is_correct=lambda ab, c: exact_freivalds(*ab, c[0], check_rng),
                           is_unwritten=lambda c: False)
        fresh = calls.setup(lambda: (rng.integers(-128, 128, (16, 16), dtype=np.int8),
                                     rng.integers(-128, 128, (16, 16), dtype=np.int8)),
                            lambda: (np.zeros((16, 16), np.int32),))
        for _ in range(5):
            args = fresh()
            gemm(*args)
            calls.after("submission", args)
        return calls.checked, calls.wrong

    assert run(lambda A, B: (A.shape, B.shape)) == (5, 4)
    assert run(lambda A, B: (A.shape, int(B[0, 0]), int(B[-1, -1]))) == (5, 0)


def test_the_changed_entries_keep_every_symmetric_key_of_the_array():
    """The repeat permutes the chosen entries: sum, norm, max and the multiset of values stay,
    so a cache keyed on any of them returns its stale output; the array itself differs."""
    from grader.labs._repeat import change_inputs

    for lab in ("int8-linear", "winograd", "gemm-cpu"):
        spec = get_spec_class(lab)()
        for case in spec.cases(HiddenCases()):
            if "changed" not in case.params:
                continue
            base = spec.case_data(case)
            before = {k: v.copy() for k, v in base.inputs.items()}
            after = change_inputs(case, base).inputs
            for name in case.params["changed"]["arrays"]:
                a, b = before[name], after[name]
                assert not np.array_equal(a, b), (lab, case.name, name)
                assert np.array_equal(np.sort(a, axis=None), np.sort(b, axis=None))


@pytest.mark.parametrize("lab, sub, repeat", [
    ("int8-linear", "int8_linear/gemm_cache_by_sum.py",
     "gemm 31x33x65 random again 1/3, 8 entries of Aq and Bq changed"),
    ("winograd", "winograd/filter_cache_by_sum.py",
     "N1 C16 K8 13x11 again 1/3, 8 entries of X and W changed"),
])
def test_a_cache_keyed_on_a_sum_fails_the_repeat_case(lab, sub, repeat):
    """End to end on the repeat case and its earlier case (a partial grading): a cache keyed on
    the shape and the sum of an input returns the earlier call's output."""
    from grader.runner import grade
    from known import Folder  # tests/known.py: where each known submission is

    path = Folder() / sub  # "<lab_module>/<name>.py"
    first = repeat.split(" again ")[0]
    rep = grade(lab, path, run_performance=False, only=lambda c: c.name in (first, repeat))
    assert [(c.case, c.passed) for c in rep.cases] == [(first, True), (repeat, False)]
    assert "computed from the earlier call's" in rep.cases[1].error, rep.cases[1].error


def test_a_cache_keyed_on_a_few_entries_escapes_every_repeat_almost_never():
    """A key on k = 3 fixed entries escapes one repeat when a changed position falls on one of
    them (1 - C(n - k, m) / C(n, m) for m changed entries of n); it passes only if it escapes
    all REPEATS repeats, which the cases keep below 1e-4 for every repeated input of every lab
    (so a known-wrong cache's verdict does not flip once in a CI run's gradings)."""
    from math import comb

    from grader.labs._repeat import REPEATS

    k = 3
    for lab in ("gemm-cpu", "winograd", "int8-linear"):
        spec = get_spec_class(lab)()
        cases = spec.cases(HiddenCases())
        for base in {c.params["changed"]["base"] for c in cases if "changed" in c.params}:
            reps = [c for c in cases if c.params.get("changed", {}).get("base") == base]
            assert len(reps) == REPEATS, (lab, base)
            data = spec.case_data(reps[0])
            for name in reps[0].params["changed"]["arrays"]:
                n, m = data.inputs[name].size, reps[0].params["changed"]["count"]
                escape = 1 - comb(n - k, m) / comb(n, m)
                assert escape ** REPEATS < 1e-4, (lab, base, name, escape)
