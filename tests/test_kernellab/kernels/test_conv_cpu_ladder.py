"""Chapter 4's CPU ladder (kernellab.kernels.conv_cpu) against the float64 golden convolution
on small and odd shapes, its argument errors, and the rounded numpy pipelines of the error study.

Tolerances (kernellab.numerics.KAware, the probabilistic c sqrt(K) u bound of Higham & Mary):

* direct and im2col + GEMM: each output is a sum of K = 9C products, so K = 9C with
  |X| ⋆ |W| (reference_kernels.conv.conv2d_abs) as the magnitude of the terms;
* Winograd F(m x m, 3 x 3): each output is a sum of terms (transform coefficients) x g x d, each
  term through at most C + 4 alpha + 7 roundings (conv_cpu.winograd_rounding_depth, derived in
  its docstring), and the magnitude of the terms is the same pipeline on |X|, |W| with |A^T|,
  |G|, |B^T| (`winograd.abs_bound`). The cancellation that makes Winograd exact in exact
  arithmetic is what this magnitude ignores, so the bound is loose; a transform with one sign
  wrong still fails it (test below).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernellab import numerics
from kernellab.kernels import conv_cpu as cc
from kernellab.topics.winograd import abs_bound
from reference_kernels.conv import conv2d_abs, conv2d_direct_rounded, conv2d_golden

# (N, C, H, W, K): H or W of 1, 2, 3, 5, 7; C = 1; N = 2; tiles that do not divide the image
SHAPES = [(1, 1, 1, 1, 1), (2, 1, 5, 7, 3), (1, 3, 2, 3, 2), (2, 2, 7, 1, 2), (1, 5, 3, 5, 4),
          (1, 4, 7, 7, 3), (2, 3, 6, 9, 5)]
M_OF = {"v3_winograd_2x2": 2, "v4_winograd_4x4": 4}


def policy(name, X, Wt):
    C = X.shape[1]
    if name in M_OF:
        m = M_OF[name]
        return numerics.KAware(K=cc.winograd_rounding_depth(m, C), acc_dtype="float32",
                               out_dtype="float32", abs_product=abs_bound(X, Wt, m))
    return numerics.KAware(K=9 * C, acc_dtype=X.dtype.name, out_dtype=X.dtype.name,
                           abs_product=conv2d_abs(X, Wt))


def inputs(shape, dtype=np.float32, seed=0):
    N, C, H, W, K = shape
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, C, H, W)).astype(dtype),
            rng.standard_normal((K, C, 3, 3)).astype(dtype))


@pytest.mark.parametrize("name", list(cc.LADDER))
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_every_kernel_matches_the_golden(name, shape):
    X, Wt = inputs(shape, seed=sum(shape))
    X0, W0 = X.copy(), Wt.copy()
    Y = np.full((shape[0], shape[4], shape[2], shape[3]), np.nan, np.float32)
    cc.LADDER[name](X, Wt, Y)
    res = numerics.compare(Y, conv2d_golden(X, Wt), policy(name, X, Wt), tile=None)
    assert res.ok, res.message
    assert res.budget_used <= 0.5, res.budget_used          # kernellab.numerics' margin rule
    assert np.array_equal(X, X0) and np.array_equal(Wt, W0)


@pytest.mark.parametrize("name", ["v1_direct", "v2_im2col"])
def test_direct_and_im2col_in_float64(name):
    X, Wt = inputs((2, 3, 5, 6, 2), np.float64, seed=3)
    Y = np.full((2, 2, 5, 6), np.nan)
    cc.LADDER[name](X, Wt, Y)
    res = numerics.compare(Y, conv2d_golden(X, Wt), policy(name, X, Wt), tile=None)
    assert res.ok, res.message


def test_winograd_bound_rejects_a_wrong_transform():
    """The loose Winograd bound still catches a transform that is off by a sign: F(2, 3)'s
    output transform with one entry negated."""
    X, Wt = inputs((1, 4, 6, 6, 3), seed=5)
    t = cc.transforms(2, 3)
    AT = list(map(list, t.AT))
    AT[1][3] = -AT[1][3]
    bad = type(t)(t.m, t.r, t.points, tuple(map(tuple, AT)), t.G, t.BT)
    Y = cc._winograd_rounded(X, Wt, bad, np.dtype(np.float32))
    assert not numerics.compare(Y, conv2d_golden(X, Wt), policy("v3_winograd_2x2", X, Wt),
                                tile=None).ok


def test_winograd_with_m6_works_too():
    X, Wt = inputs((1, 3, 13, 8, 2), seed=6)
    Y = np.full((1, 2, 13, 8), np.nan, np.float32)
    cc.winograd(X, Wt, Y, 6)
    pol = numerics.KAware(K=cc.winograd_rounding_depth(6, 3), acc_dtype="float32",
                          out_dtype="float32", abs_product=abs_bound(X, Wt, 6))
    assert numerics.compare(Y, conv2d_golden(X, Wt), pol, tile=None).ok


def test_stage_times_and_intensities():
    X, Wt = inputs((1, 8, 12, 12, 8), seed=7)
    rows = cc.winograd_stages(X, Wt, 2, repeats=1)
    assert [r["stage"] for r in rows] == ["filter transform", "input transform", "GEMMs",
                                          "output transform"]
    assert all(r["seconds"] > 0 and r["flops"] > 0 and r["bytes"] > 0 for r in rows)
    gemm = rows[2]
    assert gemm["flops"] == 16 * 2 * 8 * 8 * 36
    assert gemm["intensity"] > max(r["intensity"] for r in rows if r is not gemm)


# --- argument errors ----------------------------------------------------------------------------

def _good():
    X, Wt = inputs((1, 2, 4, 4, 3))
    return X, Wt, np.empty((1, 3, 4, 4), np.float32)


@pytest.mark.parametrize("name", list(cc.LADDER))
def test_argument_errors(name):
    f = cc.LADDER[name]
    X, Wt, Y = _good()
    with pytest.raises(ValueError, match="4-D"):
        f(X[0], Wt, Y)
    with pytest.raises(ValueError, match="channel mismatch"):
        f(X, Wt[:, :1], Y)
    with pytest.raises(ValueError, match="expected"):
        f(X, Wt, Y[:, :2])
    with pytest.raises(ValueError, match="share one dtype"):
        f(X.astype(np.float64), Wt, Y)
    with pytest.raises(ValueError, match="share one dtype"):
        f(X.astype(np.int32), Wt.astype(np.int32), Y.astype(np.int32))
    with pytest.raises(TypeError, match="numpy array"):
        f(X, Wt, Y.tolist())
    Yro = Y.copy()
    Yro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(X, Wt, Yro)
    if name != "v1_direct":
        with pytest.raises(ValueError, match="3x3"):
            f(X, np.zeros((3, 2, 5, 5), np.float32), Y)
    else:
        with pytest.raises(ValueError, match="odd"):
            f(X, np.zeros((3, 2, 2, 2), np.float32), Y)


def test_winograd_is_float32_only():
    X, Wt, Y = _good()
    with pytest.raises(ValueError, match="float32"):
        cc.conv_v3(X.astype(np.float64), Wt.astype(np.float64), Y.astype(np.float64))


# --- the rounded reference pipelines of the error study ------------------------------------------

def test_fp32_references_agree_with_the_ladder():
    X, Wt = inputs((1, 4, 9, 7, 3), seed=8)
    ref = conv2d_golden(X, Wt)
    d32 = conv2d_direct_rounded(X, Wt, np.float32)
    assert d32.dtype == np.float32
    assert numerics.compare(d32, ref, policy("v1_direct", X, Wt), tile=None).ok
    for name, m in M_OF.items():
        w32 = cc.winograd_reference(X, Wt, m, np.float32)
        assert w32.dtype == np.float32 and w32.shape == ref.shape
        assert numerics.compare(w32, ref, policy(name, X, Wt), tile=None).ok
        Y = np.empty_like(w32)
        cc.LADDER[name](X, Wt, Y)
        # same algorithm, different summation orders: far closer to each other than to the bound
        assert np.abs(Y - w32).max() <= 1e-4 * np.abs(ref).max()


def test_fp16_errors_exceed_fp32_errors():
    X, Wt = inputs((1, 8, 8, 8, 4), seed=9)
    X16, W16 = X.astype(np.float16), Wt.astype(np.float16)
    ref = conv2d_golden(X16, W16)                 # golden of the inputs the fp16 run saw
    ref32 = conv2d_golden(X, Wt)
    err = lambda y, r: float(np.abs(y.astype(np.float64) - r).mean())   # noqa: E731
    assert err(conv2d_direct_rounded(X16, W16, np.float16), ref) > \
        10 * err(conv2d_direct_rounded(X, Wt, np.float32), ref32)
    for m in (2, 4, 6):
        assert err(cc.winograd_reference(X16, W16, m, np.float16), ref) > \
            10 * err(cc.winograd_reference(X, Wt, m, np.float32), ref32)


def test_points_argument_changes_the_transform_not_the_result():
    from kernellab.topics.winograd import ALT_POINTS

    X, Wt = inputs((1, 2, 6, 6, 2), seed=10)
    ref = conv2d_golden(X, Wt)
    for m in (2, 4, 6):
        y = cc.winograd_reference(X, Wt, m, np.float64, points=ALT_POINTS[(m, 3)])
        assert np.allclose(y, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
