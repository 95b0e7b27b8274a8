"""The tolerance policies: a correct kernel passes with room to spare, known faults fail."""

import math

import ml_dtypes
import numpy as np
import pytest

from kernellab.numerics import (Elementwise, Exact, KAware, SpecError, check_reference_scale,
                                compare, ulp, unit_roundoff)
from reference_kernels.gemm import gemm_abs_product, gemm_golden


def test_unit_roundoff_table():
    assert unit_roundoff(np.float64) == 2.0**-53
    assert unit_roundoff(np.float32) == 2.0**-24
    assert unit_roundoff(np.float16) == 2.0**-11
    assert unit_roundoff(ml_dtypes.bfloat16) == 2.0**-8
    with pytest.raises(TypeError):
        unit_roundoff(np.int32)


def test_ulp_matches_numpy_spacing():
    x = np.array([1.0, 1.5, 3.0, 1e-3, 6e4])
    for dt in (np.float32, np.float64, np.float16):
        np.testing.assert_array_equal(ulp(x, dt), np.spacing(x.astype(dt)).astype(np.float64))


def _gemm_case(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k), dtype=np.float32).astype(dtype)
    B = rng.standard_normal((k, n), dtype=np.float32).astype(dtype)
    return A, B, KAware(K=k, acc_dtype=np.dtype(dtype).name, out_dtype=np.dtype(dtype).name,
                        abs_product=gemm_abs_product(A, B))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 31, 127), (64, 48, 1000)])
def test_kaware_passes_a_correct_blas_result_with_margin(dtype, shape):
    A, B, pol = _gemm_case(*shape, dtype)
    res = compare(A @ B, gemm_golden(A, B), pol)
    assert res.ok, res.message
    assert res.budget_used < 0.5  # the reference solution must use < 50 % of its budget


def test_kaware_catches_fp16_accumulation():
    A, B, pol = _gemm_case(32, 32, 256, np.float32)
    out = np.zeros((32, 32), np.float32)
    for k in range(256):  # accumulate in float16
        out = (out.astype(np.float16)
               + (np.outer(A[:, k], B[k]).astype(np.float16))).astype(np.float32)
    res = compare(out, gemm_golden(A, B), pol)
    assert not res.ok
    assert res.budget_used > 100


def test_kaware_catches_zeros_and_nan():
    A, B, pol = _gemm_case(40, 40, 40, np.float32)
    ref = gemm_golden(A, B)
    assert not compare(np.zeros((40, 40), np.float32), ref, pol).ok
    nan = np.full((40, 40), np.nan, np.float32)
    r = compare(nan, ref, pol)
    assert not r.ok and r.nonfinite == 1600 and "never written" in r.message


def test_tile_map_points_at_tail():
    A, B, pol = _gemm_case(33, 70, 20, np.float32)
    ref = gemm_golden(A, B)
    out = (A @ B).copy()
    out[32, :] += 1.0  # last (partial) tile row wrong
    r = compare(out, ref, pol, tile=(32, 32))
    assert not r.ok
    assert r.tile_grid == (2, 3)
    assert r.bad_tiles == [(1, 0), (1, 1), (1, 2)]
    assert "tail" in r.message
    assert r.tile_map().splitlines() == ["...", "###"]
    assert r.worst_index[0] == 32


def test_elementwise_table_and_exact():
    ref = np.linspace(1, 2, 50)
    pol = Elementwise("float16")
    out = ref.astype(np.float16)
    assert compare(out, ref, pol).ok
    assert not compare((ref * 1.01).astype(np.float16), ref, pol).ok
    bf = ref.astype(ml_dtypes.bfloat16)
    assert compare(bf, ref, Elementwise("bfloat16")).ok
    ints = np.arange(10, dtype=np.int32)
    assert compare(ints, ints.astype(np.int64), Exact()).ok
    bad = ints.copy()
    bad[3] += 1
    r = compare(bad, ints.astype(np.int64), Exact())
    assert not r.ok and r.mismatches == 1 and r.worst_index == (3,)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        compare(np.zeros((2, 3)), np.zeros((3, 2)), Elementwise("float64"))


def test_reference_must_dwarf_atol():
    with pytest.raises(SpecError):
        check_reference_scale(np.full(10, 1e-6), atol=1e-5)
    check_reference_scale(np.full(10, 1.0), atol=1e-5)


def test_frobenius_check_catches_systematic_error_under_the_elementwise_bound():
    A, B, pol = _gemm_case(64, 64, 256, np.float32)
    ref = gemm_golden(A, B)
    bound, _, _ = pol.bounds(ref)
    rng = np.random.default_rng(1)
    out = ref + 0.5 * bound * rng.choice([-1.0, 1.0], size=ref.shape)  # every element at 50%
    r = compare(out, ref, pol)
    assert r.mismatches == 0  # element-wise: fine
    assert not r.ok and r.frobenius_rel > r.frobenius_bound  # on aggregate: too large
    assert "Frobenius" in r.message


def test_frobenius_check_reported():
    A, B, pol = _gemm_case(16, 16, 16, np.float64)
    r = compare(A @ B, gemm_golden(A, B), pol)
    assert r.frobenius_rel is not None and r.frobenius_rel <= r.frobenius_bound
    assert math.isfinite(r.frobenius_bound)
    d = r.to_dict()
    assert d["shape"] == [16, 16] and "budget_used" in d
