"""kernellab.topics.quant and kernellab.topics.quant_study (chapter 6): affine quantisation, the
exact integer GEMM and its zero-point cross terms, integer-only requantisation against
independent exact (Python int / Fraction) arithmetic and against float64, SmoothQuant's
equivalence and LLM.int8()'s decomposition."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import kernellab  # noqa: F401

from kernellab.topics import quant as Q
from kernellab.topics import quant_study as S
from reference_kernels.quant import (int_gemm_golden, linear_golden, quantize_per_channel_golden,
                                     quantize_per_token_golden, sqnr_db)

I32MIN, I32MAX = Q.INT32_MIN, Q.INT32_MAX


# ----------------------------------------------------------------------------------------------
# quantise / dequantise, calibration
# ----------------------------------------------------------------------------------------------

def test_symmetric_per_channel_and_per_token_are_the_golden_rule():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((7, 33), dtype=np.float32)
    W[3] = 0                                                    # an all-zero channel: S = 1
    wq = Q.quantize(W, granularity="channel")
    gq, gs = quantize_per_channel_golden(W)
    np.testing.assert_array_equal(wq.q, gq)
    np.testing.assert_array_equal(wq.scale.ravel(), gs)
    xq = Q.quantize(W, granularity="token")
    np.testing.assert_array_equal(xq.q, quantize_per_token_golden(W)[0])
    assert wq.q.dtype == np.int8 and wq.q.min() >= -127


def test_round_half_to_even_and_clamp():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 127.0, -127.0], np.float32)
    q = Q.quantize(x)                                           # S = 127 / 127 = 1
    np.testing.assert_array_equal(q.q, [0, 2, 2, 0, -2, 127, -127])
    clipped = Q.quantize(x * 10, calibration="percentile", percentile=50)
    assert clipped.q.max() == 127 and clipped.q.min() == -127


def test_symmetric_error_is_at_most_half_a_step():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 100), dtype=np.float32)
    for g in ("tensor", "token"):
        qt = Q.quantize(x, granularity=g)
        err = np.abs(qt.dequantize() - x.astype(np.float64))
        # round to nearest: S/2, plus the float32 division's rounding (|x/S| <= 127: 2^-17)
        assert np.all(err <= np.asarray(qt.scale, np.float64) * (0.5 + 2.0 ** -16))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_asymmetric_represents_zero_exactly_and_covers_the_range(dtype):
    rng = np.random.default_rng(2)
    x = (rng.random((5, 40), dtype=np.float32) * 3 + 0.5)      # all positive: lo widened to 0
    x[0, 0] = 0.0
    qt = Q.quantize(x, scheme="asymmetric", dtype=dtype)
    qmin, qmax, npdt = Q.QRANGES[dtype]
    assert qt.q.dtype == npdt and qt.zero_point == qmin       # real 0 -> q = Z = qmin
    assert qt.dequantize()[0, 0] == 0.0
    err = np.abs(qt.dequantize() - x)
    assert err.max() <= float(qt.scale) * (0.5 + 2.0 ** -16)
    relu_like = np.array([-1.0, 0.0, 3.0], np.float32)
    s, z, lo, hi = Q.calibrate(relu_like, scheme="asymmetric", dtype=dtype)
    assert np.isclose(float(s), 4.0 / 255) and Q.dequantize(z, s, z) == 0.0


def test_percentile_calibration_clips_the_tail_and_helps_heavy_tails():
    rng = np.random.default_rng(3)
    x = rng.laplace(size=200_000).astype(np.float32)
    mm = Q.quantize(x)
    pc = Q.quantize(x, calibration="percentile", percentile=99.99)
    assert float(pc.scale) < float(mm.scale)
    assert float(pc.scale) == pytest.approx(np.percentile(np.abs(x), 99.99) / 127, rel=1e-6)
    assert sqnr_db(x, pc.dequantize()) > sqnr_db(x, mm.dequantize())


def test_bad_options_raise():
    x = np.ones((2, 3), np.float32)
    for kw in ({"granularity": "row"}, {"scheme": "log"}, {"calibration": "entropy"},
               {"scheme": "asymmetric", "dtype": "int4"}, {"calibration": "percentile",
                                                           "percentile": 0}):
        with pytest.raises(ValueError):
            Q.quantize(x, **kw)
    with pytest.raises(ValueError):
        Q.quantize(np.ones(3, np.float32), granularity="token")


# ----------------------------------------------------------------------------------------------
# integer GEMM
# ----------------------------------------------------------------------------------------------

def test_int8_matmul_in_numpy_wraps():
    rng = np.random.default_rng(4)
    A = rng.integers(-128, 128, (8, 300)).astype(np.int8)
    B = rng.integers(-128, 128, (300, 5)).astype(np.int8)
    wrapped = A @ B
    exact = int_gemm_golden(A, B)
    assert wrapped.dtype == np.int8
    assert np.abs(exact).max() > 127
    np.testing.assert_array_equal(wrapped, exact.astype(np.int8))   # = exact mod 256


def test_int32_safe_k():
    assert Q.int32_safe_k() == 131071 == (2 ** 31 - 1) // 2 ** 14
    assert Q.int32_safe_k((-127, 127), (-127, 127)) == (2 ** 31 - 1) // 127 ** 2
    assert Q.int32_safe_k((0, 255), (-128, 127)) == 2 ** 31 // (255 * 128)
    k = Q.int32_safe_k()
    assert k * 128 * 128 <= I32MAX < (k + 1) * 128 * 128


def test_int_gemm_exact_equals_the_int64_golden_at_the_extremes():
    rng = np.random.default_rng(5)
    A = rng.integers(-128, 128, (9, 4099)).astype(np.int8)
    B = rng.integers(-128, 128, (4099, 6)).astype(np.int8)
    A[0] = -128
    B[:, 0] = -128
    out = Q.int_gemm_exact(A, B)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, int_gemm_golden(A, B))
    with pytest.raises(ValueError):
        Q.int_gemm_exact(np.full((1, 2), 2 ** 26, np.int64), np.full((2, 1), 2 ** 26, np.int64))
    with pytest.raises(ValueError):
        Q.int_gemm_exact(np.ones((2, 3), np.float32), np.ones((3, 2), np.int8))


def test_cross_terms_give_the_zero_point_product():
    rng = np.random.default_rng(6)
    A = rng.integers(0, 256, (6, 50)).astype(np.uint8)
    B = rng.integers(-128, 128, (50, 4)).astype(np.int8)
    za, zb = 131, -7
    want = int_gemm_golden(A.astype(np.int64) - za, B.astype(np.int64) - zb)
    np.testing.assert_array_equal(Q.affine_int_gemm(A, za, B, zb), want)
    zat = rng.integers(0, 256, (6, 1))                          # per-token / per-channel
    zbc = rng.integers(-5, 6, (1, 4))
    want = ((A.astype(np.int64)[:, :, None] - zat[:, :, None]) *
            (B.astype(np.int64)[None] - zbc[:, None, :])).sum(axis=1)
    np.testing.assert_array_equal(Q.affine_int_gemm(A, zat, B, zbc), want)


# ----------------------------------------------------------------------------------------------
# requantisation primitives against exact arithmetic
# ----------------------------------------------------------------------------------------------

def _srdhm_exact(a: int, b: int) -> int:
    if a == b == I32MIN:
        return I32MAX
    return (2 * a * b + 2 ** 31) >> 32        # floor(ab / 2^31 + 1/2), Python ints


def _rdbpot_exact(x: int, e: int) -> int:
    q = Fraction(x, 2 ** e)                   # nearest, ties away from zero
    r = int(abs(q) + Fraction(1, 2))
    return r if q >= 0 else -r


EDGE = [0, 1, -1, 2, -2, 3, -3, 2 ** 30, -2 ** 30, I32MAX, I32MIN, I32MAX - 1, I32MIN + 1,
        12345, -12345, 2 ** 15, -(2 ** 15) - 1]


def test_srdhm_matches_exact_rounding_including_saturation():
    rng = np.random.default_rng(7)
    a = np.array(EDGE + list(rng.integers(I32MIN, I32MAX, 300, endpoint=True)), np.int64)
    b = np.array(EDGE + list(rng.integers(I32MIN, I32MAX, 300, endpoint=True)), np.int64)
    A, B = np.meshgrid(a[:40], b[:40])
    for x, y in ((a, b), (A.ravel(), B.ravel())):
        got = Q.srdhm(x, y)
        want = [_srdhm_exact(int(p), int(q)) for p, q in zip(x, y)]
        np.testing.assert_array_equal(got, want)
    assert Q.srdhm(I32MIN, I32MIN) == I32MAX                      # the one saturating case
    assert Q.srdhm(1, 2 ** 30) == 1 and Q.srdhm(-1, 2 ** 30) == 0  # +-0.5: ties toward +inf
    with pytest.raises(OverflowError):
        Q.srdhm(2 ** 31, 1)


def test_rounding_divide_by_pot_rounds_half_away_from_zero():
    assert list(Q.rounding_divide_by_pot([3, -3, 5, -5, 6, -6, 7, -7], [1, 1, 2, 2, 2, 2, 2, 2])) \
        == [2, -2, 1, -1, 2, -2, 2, -2]
    rng = np.random.default_rng(8)
    x = np.array(EDGE + list(rng.integers(I32MIN, I32MAX, 200, endpoint=True)), np.int64)
    for e in (0, 1, 2, 7, 16, 30, 31):
        want = [_rdbpot_exact(int(v), e) for v in x]
        np.testing.assert_array_equal(Q.rounding_divide_by_pot(x, e), want)
    with pytest.raises(ValueError):
        Q.rounding_divide_by_pot(1, 32)


def test_quantize_multiplier_is_a_q31_mantissa_and_a_shift():
    rng = np.random.default_rng(9)
    reals = np.concatenate([rng.random(200) * 0.999 + 1e-4, [0.5, 0.25, 2.0 ** -31, 1.0,
                                                            1 - 2.0 ** -40, 3.7, 0.1234567]])
    m0, shift = Q.quantize_multiplier(reals)
    assert np.all((m0 >= 2 ** 30) & (m0 < 2 ** 31))
    approx = m0 * np.exp2(shift.astype(np.float64) - 31)
    assert np.all(np.abs(approx - reals) <= reals * 2.0 ** -31)   # half a Q31 ulp of [0.5, 1)
    m, s = Q.quantize_multiplier(1 - 2.0 ** -40)                  # rounds up to 2^31: halved
    assert m == 2 ** 30 and s == 1
    for bad in (0.0, -0.1, np.inf, 2.0 ** 31):
        with pytest.raises(ValueError):
            Q.quantize_multiplier(bad)


def test_requantize_is_within_half_an_lsb_of_the_real_product():
    """Integer path vs exact x*M. Error budget (derived, not tuned): the final rounding 1/2;
    srdhm's rounding 1/2 at the scale 2^-n of the shift n (so 2^-(n+1) in output units); the
    Q31 multiplier's relative error 2^-31, i.e. |x| M 2^-31. The float path rint(x M) and
    the integer path then differ by at most 1, and only within that error of a tie."""
    rng = np.random.default_rng(10)
    reals = np.concatenate([rng.random(60) * 0.99 + 1e-6, [2.0 ** -20, 0.5, 0.999999]])
    x = np.concatenate([rng.integers(-(2 ** 31), 2 ** 31, 400), EDGE]).astype(np.int64)
    for M in reals:
        m0, shift = Q.quantize_multiplier(M)
        y = Q.multiply_by_quantized_multiplier(x, m0, shift)
        exact = x.astype(np.float64) * M          # |x M| < 2^31: float64 error 2^-22, negligible
        n = max(-int(shift), 0)
        budget = 0.5 + 2.0 ** -(n + 1) + np.abs(exact) * 2.0 ** -31 + 1e-6
        assert np.all(np.abs(y - exact) <= budget), M
        fl = np.rint(exact)
        assert np.all(np.abs(y - fl) <= 1)
        # the paths differ only where exact x*M lies within the non-final error of a tie
        to_tie = np.abs(np.abs(exact) - np.floor(np.abs(exact)) - 0.5)
        differ = y != fl
        assert np.all(to_tie[differ] <= (budget - 0.5)[differ]), M


def test_requantize_end_to_end_bias_zero_point_clamp_per_channel():
    rng = np.random.default_rng(11)
    acc = rng.integers(-(2 ** 20), 2 ** 20, (50, 6)).astype(np.int64)
    bias = rng.integers(-(2 ** 16), 2 ** 16, 6)
    M = rng.random(6) * 2e-4 + 1e-5
    m0, shift = Q.quantize_multiplier(M)
    for zo, lo, hi in ((-3, -128, 127), (128, 0, 255)):
        out = Q.requantize(acc, m0, shift, zo, bias, lo, hi)
        fl = Q.requantize_float(acc, M, zo, bias, lo, hi)
        assert out.dtype == (np.uint8 if lo == 0 else np.int8)
        assert np.abs(out.astype(int) - fl.astype(int)).max() <= 1
        assert out.min() >= lo and out.max() <= hi
        assert (out == lo).any() and (out == hi).any()            # the clamp was exercised
    with pytest.raises(OverflowError):
        Q.requantize(np.array([I32MAX]), m0[0], shift[0], bias=np.array([1]))


def test_quantize_bias_is_at_scale_sa_sw():
    b = Q.quantize_bias([0.3, -1.0, 0.0], 0.01, np.array([0.5, 0.25, 1.0]))
    np.testing.assert_array_equal(b, [60, -400, 0])
    with pytest.raises(OverflowError):
        Q.quantize_bias([1e6], 1e-5, 1e-5)


# ----------------------------------------------------------------------------------------------
# SmoothQuant, LLM.int8(), the study's building blocks
# ----------------------------------------------------------------------------------------------

def test_smoothquant_leaves_the_product_unchanged_in_float64():
    X, W = S.layer_data(16, 64, 8, outlier_factor=60.0, outlier_channel=5, seed=1)
    for alpha in (0.0, 0.5, 0.75, 1.0):
        s = S.smoothquant_scales(np.abs(X).max(axis=0), W, alpha)
        Xs = X.astype(np.float64) / s
        Ws = W.astype(np.float64) * s
        ref = linear_golden(X, W)
        # float64 rounding only: two extra roundings per term, relative to |X||W|^T
        absprod = np.abs(X.astype(np.float64)) @ np.abs(W.T.astype(np.float64))
        bound = 4 * 2.0 ** -53 * 64 * absprod
        assert np.all(np.abs(Xs @ Ws.T - ref) <= bound)
    s = S.smoothquant_scales(np.abs(X).max(axis=0), W, 0.5)
    Xs, Ws = S.smooth(X, W, s)
    xa, wa = np.abs(Xs).max(axis=0), np.abs(Ws).max(axis=0)
    np.testing.assert_allclose(xa, wa, rtol=1e-6)                 # alpha = 0.5 balances them
    with pytest.raises(ValueError):
        S.smoothquant_scales(np.ones(64), W, 1.5)


def test_llm_int8_splits_out_the_outlier_channel():
    X, W = S.layer_data(32, 256, 16, outlier_factor=60.0, outlier_channel=11, seed=2)
    Y, cols = S.llm_int8_linear(X, W)
    assert list(cols) == [11]
    ref = linear_golden(X, W)
    assert sqnr_db(ref, Y) > sqnr_db(ref, S.w8a8_linear(X, W, "token")) + 10
    X0, W0 = S.layer_data(32, 256, 16, seed=2)                    # no outliers: plain W8A8
    Y0, cols0 = S.llm_int8_linear(X0, W0)
    assert cols0.size == 0
    np.testing.assert_array_equal(Y0, S.w8a8_linear(X0, W0, "token"))


def test_w8a8_linear_equals_the_golden_dequantisation():
    from reference_kernels.quant import dequantize_linear_golden
    X, W = S.layer_data(8, 96, 5, seed=3)
    wq, ws = quantize_per_channel_golden(W)
    xq, xs = quantize_per_token_golden(X)
    np.testing.assert_array_equal(S.w8a8_linear(X, W, "token"),
                                  dequantize_linear_golden(xq, xs, wq, ws, np.zeros(5)))


def test_cosine_similarity():
    a = np.array([1.0, 2.0, 3.0])
    assert Q.cosine_similarity(a, 2 * a) == pytest.approx(1.0)
    assert Q.cosine_similarity(a, -a) == pytest.approx(-1.0)
    assert np.isnan(Q.cosine_similarity(a, 0 * a))
