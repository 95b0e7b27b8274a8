"""Chapter 3's normalisation layers: the float64 golden references (reference_kernels.norms), the
CPU Welford / Chan walk-through (kernellab.topics.welford) and the CUDA kernels
(kernellab.kernels.norms_cuda) on the sim tier.

Tolerances are derived, not tuned (the derivation is in norms_cuda's docstring,
"Accuracy"). In short, with u = u_fp32 + u_fp64, c = 6 (Higham & Mary 2019's lambda, as
kernellab.numerics.KAware), a row's mean mu, variance s2, sd' = sqrt(s2 + eps) and scale
s = sqrt(mean(x^2)):

* the statistics are sums of N terms in float32: |e_mean| <= c sqrt(N) u s, and Welford's
  variance |e_var| <= c sqrt(N) u s sd (relative error c sqrt(N) u kappa, kappa = s/sd, Chan,
  Golub & LeVeque 1983), so rstd is off by <= c sqrt(N) u s / (2 sd') relative, plus the
  three roundings of 1/sqrt(var + eps);
* then the final arithmetic (8 roundings of u_fp32 at most, counted in norms_cuda) and one
  rounding to the output dtype, u_out |y|.

Every kernel case starts Y as NaN and checks that the inputs are unchanged. Kernel sizes stay
small: the simulator costs a few microseconds an access. The whole file takes ~10 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernellab  # noqa: F401  (selects the gpu/sim tier before numba.cuda is imported)
from kernellab.numerics import compare, unit_roundoff
from kernellab.topics import welford as wf
from reference_kernels.norms import layernorm_golden, layernorm_stats_golden, rmsnorm_golden

U32 = unit_roundoff(np.float32)
U64 = unit_roundoff(np.float64)
C = 6.0                                       # the tail constant of the sqrt(N) bound

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:                           # pragma: no cover - a base dependency
    BF16 = None


def rows(R, N, dtype=np.float32, seed=0, mean=0.0, std=1.0):
    rng = np.random.default_rng(seed + 1009 * N + R)
    return (mean + std * rng.standard_normal((R, N))).astype(dtype)


def params(N, seed=1):
    rng = np.random.default_rng(seed + N)
    gamma = (1.0 + 0.5 * rng.standard_normal(N)).astype(np.float32)
    beta = (0.5 * rng.standard_normal(N)).astype(np.float32)
    return gamma, beta


# ----------------------------------------------------------------------------------------------
# Golden references
# ----------------------------------------------------------------------------------------------

def test_layernorm_golden_matches_the_formula():
    """Against the definition, row by row, with exactly rounded sums (math.fsum)."""
    X = rows(6, 37, np.float32).reshape(2, 3, 37)
    gamma, beta = params(37)
    Y, mean, rstd = layernorm_golden(X, gamma, beta, eps=1e-5, return_stats=True)
    assert Y.dtype == np.float64 and Y.shape == X.shape
    assert mean.shape == rstd.shape == (2, 3)
    for idx in np.ndindex(2, 3):
        x = X[idx].astype(np.float64)
        mu = math.fsum(x) / 37
        var = math.fsum((x - mu) ** 2) / 37                 # biased: 1/N
        r = 1.0 / math.sqrt(var + 1e-5)
        np.testing.assert_allclose(mean[idx], mu, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(rstd[idx], r, rtol=1e-14)
        np.testing.assert_allclose(Y[idx], (x - mu) * r * gamma + beta, rtol=1e-13, atol=1e-14)
    # numpy's own biased variance agrees; without gamma/beta it is the plain standardisation
    np.testing.assert_allclose(1.0 / rstd ** 2 - 1e-5, np.var(X.astype(np.float64), axis=-1),
                               rtol=1e-12)
    Y0 = layernorm_golden(X)
    np.testing.assert_allclose(Y0, (Y - beta) / gamma, rtol=1e-12, atol=1e-12)
    m2, r2 = layernorm_stats_golden(X)
    assert np.array_equal(m2, mean) and np.array_equal(r2, rstd)


def test_rmsnorm_golden_matches_the_formula():
    X = rows(4, 29, np.float16)
    g, _ = params(29)
    Y, rstd = rmsnorm_golden(X, g, eps=1e-6, return_rstd=True)
    assert Y.dtype == np.float64 and rstd.shape == (4,)
    for i in range(4):
        x = X[i].astype(np.float64)
        r = 1.0 / math.sqrt(math.fsum(x * x) / 29 + 1e-6)
        np.testing.assert_allclose(rstd[i], r, rtol=1e-14)
        np.testing.assert_allclose(Y[i], x * r * g, rtol=1e-13)
    np.testing.assert_allclose(rmsnorm_golden(X), Y / g, rtol=1e-12)


def test_golden_widens_low_precision_inputs_exactly():
    X16 = rows(3, 20, np.float16)
    assert np.array_equal(layernorm_golden(X16), layernorm_golden(X16.astype(np.float64)))
    assert np.array_equal(rmsnorm_golden(X16), rmsnorm_golden(X16.astype(np.float64)))
    if BF16 is not None:
        Xb = rows(3, 20, np.float32).astype(BF16)
        Xw = Xb.astype(np.float64)
        assert np.array_equal(Xw.astype(BF16).astype(np.float64), Xw)
        assert np.array_equal(layernorm_golden(Xb), layernorm_golden(Xw))
        assert np.array_equal(rmsnorm_golden(Xb, Xb[0]), rmsnorm_golden(Xw, Xw[0]))


def test_golden_edge_rows():
    # a constant row (variance 0) and an N = 1 row are finite: y = beta
    X = np.full((2, 5), 3.25, np.float32)
    gamma, beta = params(5)
    Y = layernorm_golden(X, gamma, beta)
    assert np.isfinite(Y).all() and np.array_equal(Y, np.broadcast_to(beta, (2, 5)))
    assert np.array_equal(layernorm_golden(np.array([[7.0]]), [2.0], [0.5]), [[0.5]])
    assert np.array_equal(rmsnorm_golden(np.zeros((1, 4))), np.zeros((1, 4)))
    # 1-D input: one row
    assert layernorm_golden(np.arange(4.0)).shape == (4,)


def test_golden_errors():
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="empty last axis"):
        layernorm_golden(np.ones((2, 0)))
    with pytest.raises(ValueError, match="scalar"):
        rmsnorm_golden(np.float64(1.0))
    with pytest.raises(ValueError, match=r"gamma must have shape \(3,\)"):
        layernorm_golden(X, np.ones(4))
    with pytest.raises(ValueError, match="beta"):
        layernorm_golden(X, None, np.ones((1, 3)))
    with pytest.raises(ValueError, match="g must have shape"):
        rmsnorm_golden(X, np.ones(2))
    for eps in (0.0, -1e-5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps"):
            layernorm_golden(X, eps=eps)
        with pytest.raises(ValueError, match="eps"):
            rmsnorm_golden(X, eps=eps)
    with pytest.raises(TypeError, match="eps"):
        layernorm_golden(X, eps="1e-5")
    with pytest.raises(TypeError, match="float dtype"):
        layernorm_golden(np.ones((2, 3), np.int32))
    with pytest.raises(TypeError, match="float dtype"):
        rmsnorm_golden(X, np.ones(3, bool))


# ----------------------------------------------------------------------------------------------
# Welford and Chan on the CPU
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 31, 1000])
def test_welford_float64_matches_two_pass(n):
    x = rows(1, n, np.float64, mean=3.0, std=2.0)[0]
    m = wf.welford(x, np.float64)
    assert m.n == n and isinstance(m.mean, np.float64)
    # float64 Welford vs numpy's two-pass: both within a few u_fp64 * sqrt(n) of the truth
    tol = C * math.sqrt(n) * U64
    assert abs(m.mean - x.mean()) <= tol * np.abs(x).mean()
    assert abs(m.variance - np.var(x)) <= tol * (1 + np.abs(x).max() ** 2)
    if n > 1:
        np.testing.assert_allclose(m.sample_variance, np.var(x, ddof=1), rtol=100 * tol)
    assert wf.welford([], np.float64) == (0, 0.0, 0.0)


def test_chan_merge():
    x = rows(1, 300, np.float64, mean=-5.0, std=3.0)[0]
    a, b = wf.welford(x[:120], np.float64), wf.welford(x[120:], np.float64)
    ab, whole = wf.chan_merge(a, b), wf.welford(x, np.float64)
    assert ab.n == 300
    np.testing.assert_allclose([ab.mean, ab.m2], [whole.mean, whole.m2], rtol=1e-13)
    np.testing.assert_allclose(ab.variance, np.var(x), rtol=1e-13)
    # an empty partial changes nothing, exactly, on either side; two empties stay empty
    empty = wf.welford([], np.float32)
    a32 = wf.welford(x[:7], np.float32)
    assert wf.chan_merge(a32, empty) == a32 and wf.chan_merge(empty, a32) == a32
    assert wf.chan_merge(empty, empty) == (0, 0.0, 0.0)
    assert isinstance(wf.chan_merge(a32, a32).mean, np.float32)       # stays in float32
    with pytest.raises(ValueError):
        wf.chan_merge((-1, 0.0, 0.0), a)


@pytest.mark.parametrize("layout", ["strided", "contiguous"])
@pytest.mark.parametrize("leaves", [1, 7, 32, 256])
def test_tree_merge_equals_one_pass(leaves, layout):
    x = rows(1, 200, np.float64, mean=2.0)[0]
    one = wf.welford(x, np.float64)
    tree = wf.tree_merge(x, leaves, np.float64, layout)                # 256 > n: empty leaves
    assert tree.n == 200
    np.testing.assert_allclose([tree.mean, tree.m2], [one.mean, one.m2], rtol=1e-13)
    # float32: the tree and the one-pass loop agree to rounding, c sqrt(n) u_fp32 * kappa
    t32, o32 = wf.tree_merge(x, leaves, np.float32, layout), wf.welford(x, np.float32)
    kappa = math.sqrt(np.mean(x * x) / np.var(x))
    bound = 2 * C * math.sqrt(200) * U32 * kappa           # both deviate from the truth
    assert abs(float(t32.variance) / float(o32.variance) - 1) <= bound
    assert abs(float(t32.mean) - float(o32.mean)) <= 2 * C * math.sqrt(200) * U32 * abs(x).max()


def test_cancellation_demo():
    """Mean 1e4, std 1 in float32: kappa = s/sd ~ 1e4. The naive formula's error grows like
    u kappa^2 ~ 6 (E[x^2] ~ 1e8 is rounded to a multiple of ~8), Welford's like
    c sqrt(n) u kappa; the naive result fails even Welford's bound."""
    n = 10_000
    d = wf.cancellation_demo(n=n, mean=1e4, std=1.0, seed=0)
    kappa = math.sqrt(1e8 + 1) / 1.0
    welford_bound = C * math.sqrt(n) * U32 * kappa
    naive = d.rel_errors["naive E[x^2]-E[x]^2"]
    assert naive > 0.5, str(d)                              # wrong in the first digit
    assert naive > welford_bound, str(d)
    for k, e in d.rel_errors.items():
        if k.startswith("Welford") or k == "two-pass":
            assert e <= welford_bound, str(d)
    assert d.rel_errors["Welford"] < naive / 100
    assert "naive" in str(d) and d.dtype == "float32"


def test_naive_variance_negative_is_possible():
    x = (1e4 + rows(1, 1000, np.float64)[0]).astype(np.float32)
    vals = {float(wf.naive_variance(x + np.float32(k), np.float32)) for k in range(8)}
    assert any(v <= 0 for v in vals)                          # 0 or negative: rstd explodes
    assert abs(float(wf.two_pass_variance(x)) / np.var(x.astype(np.float64)) - 1) < \
        C * math.sqrt(1000) * U32 * 1e4


def test_welford_errors():
    with pytest.raises(TypeError):
        wf.welford([1.0], np.int32)
    with pytest.raises(ValueError):
        wf.tree_merge([1.0], 0)
    with pytest.raises(ValueError):
        wf.tree_merge([1.0], 2, layout="diagonal")
    with pytest.raises(ValueError):
        wf.naive_variance([], np.float32)


# ----------------------------------------------------------------------------------------------
# CUDA kernels (sim tier without a GPU)
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nc():
    from kernellab.kernels import norms_cuda
    return norms_cuda


NS = [1, 2, 31, 33, 100, 257, 1000]
DTYPES = [np.float32, np.float16]


def n_rows(N):
    return 2 if N >= 1000 else 3


def stats_bounds(X, eps):
    """Bounds on the kernel's float32 mean and rstd (the derivation above)."""
    x = X.astype(np.float64)
    N = x.shape[1]
    u = U32 + U64
    s = np.sqrt(np.mean(x * x, axis=1))
    sdp = np.sqrt(np.var(x, axis=1) + eps)
    mean_b = C * math.sqrt(N) * u * s
    rstd_rel = C * math.sqrt(N) * u * s / (2 * sdp) + 4 * U32   # 3.5 roundings, rounded up
    return mean_b, rstd_rel


def check_layernorm(nc, X, gamma, beta, eps=1e-5, threads=None):
    R, N = X.shape
    X0 = X.copy()
    Y = np.full_like(X, np.nan)
    mean = np.full(R, np.nan, np.float32)
    rstd = np.full(R, np.nan, np.float32)
    assert nc.layernorm(X, gamma, beta, Y, eps, mean=mean, rstd=rstd, threads=threads) is None
    assert np.array_equal(X, X0, equal_nan=True), "X modified"
    ref, mu, rs = layernorm_golden(X, gamma, beta, eps, return_stats=True)
    res = compare(Y, ref, nc.layernorm_tolerance(X, gamma, beta, eps))
    assert res.ok, res.message
    mean_b, rstd_rel = stats_bounds(X, eps)
    assert (np.abs(mean - mu) <= mean_b).all(), (mean, mu)
    assert (np.abs(rstd / rs - 1) <= rstd_rel).all(), (rstd, rs)
    return Y, res


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("N", NS)
def test_layernorm_kernel(nc, N, dtype):
    X = rows(n_rows(N), N, dtype)
    gamma, beta = params(N)
    _, res = check_layernorm(nc, X, gamma, beta)
    if dtype == np.float32:
        assert res.budget_used < 0.5, res.message  # kernellab.numerics' margin rule


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("N", NS)
def test_rmsnorm_kernel(nc, N, dtype):
    R = n_rows(N)
    X = rows(R, N, dtype, seed=5)
    g, _ = params(N, seed=7)
    X0 = X.copy()
    Y = np.full_like(X, np.nan)
    rstd = np.full(R, np.nan, np.float32)
    assert nc.rmsnorm(X, g, Y, 1e-6, rstd=rstd) is None
    assert np.array_equal(X, X0)
    ref, rs = rmsnorm_golden(X, g, 1e-6, return_rstd=True)
    res = compare(Y, ref, nc.rmsnorm_tolerance(X, g, 1e-6))
    assert res.ok, res.message
    assert (np.abs(rstd / rs - 1) <= C * math.sqrt(N) * (U32 + U64) / 2 + 4 * U32).all()
    if dtype == np.float32:
        assert res.budget_used < 0.5, res.message


@pytest.mark.parametrize("N,threads", [(1, 256), (2, 64), (33, 1024), (1000, 32), (100, 96)])
def test_block_sizes(nc, N, threads):
    """Empty lanes and whole empty warps (N = 1 with 8 warps), the largest block, and one warp
    looping over a long row."""
    X = rows(2, N, np.float32, seed=3)
    gamma, beta = params(N, seed=3)
    check_layernorm(nc, X, gamma, beta, threads=threads)
    Y = np.full_like(X, np.nan)
    nc.rmsnorm(X, gamma, Y, threads=threads)
    assert compare(Y, rmsnorm_golden(X, gamma), nc.rmsnorm_tolerance(X, gamma)).ok


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
def test_constant_rows_and_single_element_rows(nc, dtype):
    """Variance 0: Welford's deltas are exactly 0, so mean is exact, M2 = 0, rstd =
    1/sqrt(eps) and y = beta exactly (rounded once to the output dtype)."""
    N = 40
    X = np.stack([np.zeros(N), np.full(N, 1e4), np.full(N, -2.5)]).astype(dtype)
    gamma, beta = params(N)
    Y = np.full_like(X, np.nan)
    mean = np.zeros(3, np.float32)
    rstd = np.zeros(3, np.float32)
    nc.layernorm(X, gamma, beta, Y, 1e-5, mean=mean, rstd=rstd)
    assert np.isfinite(Y).all()
    assert np.array_equal(Y, np.broadcast_to(beta.astype(dtype), Y.shape))
    assert np.array_equal(mean, X[:, 0].astype(np.float32))
    assert np.array_equal(rstd, np.full(3, np.float32(1) / np.sqrt(np.float32(1e-5))))
    # N = 1: every row is constant
    X1 = np.array([[3.0], [-7.5], [0.0]], dtype)
    Y1 = np.full_like(X1, np.nan)
    nc.layernorm(X1, np.array([2.0], np.float32), np.array([0.25], np.float32), Y1)
    assert np.array_equal(Y1, np.full((3, 1), 0.25, dtype))
    Z = np.full_like(X, np.nan)
    nc.rmsnorm(np.zeros_like(X), gamma, Z)                      # all-zero rows: 0 * rstd
    assert np.array_equal(Z, np.zeros_like(X))


def test_large_mean_rows_fp32(nc):
    """Mean 1e4, std 1 (kappa ~ 1e4) in float32: Welford + Chan stays within the derived bound,
    while the textbook one-pass statistics E[x^2] - E[x]^2 in float32 fail it by orders of
    magnitude (a variance of 0 or negative: rstd = 1/sqrt(eps) or NaN)."""
    X = rows(3, 1000, np.float32, seed=11, mean=1e4)
    gamma, beta = params(1000)
    Y, res = check_layernorm(nc, X, gamma, beta)
    tol = nc.layernorm_tolerance(X, gamma, beta, 1e-5)
    ex = X.mean(axis=1, dtype=np.float32, keepdims=True)
    ex2 = (X * X).mean(axis=1, dtype=np.float32, keepdims=True)
    with np.errstate(invalid="ignore"):
        r = np.float32(1) / np.sqrt(ex2 - ex * ex + np.float32(1e-5))
        naive = (X - ex) * r * gamma + beta
    assert not compare(naive, layernorm_golden(X, gamma, beta), tol).ok
    # and the kernel's rstd is far better than kappa^2 u: within c sqrt(N) u kappa / 2
    _, rs = layernorm_stats_golden(X)
    rstd = np.zeros(3, np.float32)
    nc.layernorm(X, gamma, beta, np.empty_like(X), rstd=rstd)
    assert (np.abs(rstd / rs - 1) <= C * math.sqrt(1000) * U32 * 1e4 / 2).all()


def test_canaries_fail(nc):
    """What the tolerance must reject: zeros, an untouched (NaN) row, the unbiased variance."""
    X = rows(3, 100, np.float32)
    gamma, beta = params(100)
    ref = layernorm_golden(X, gamma, beta)
    tol = nc.layernorm_tolerance(X, gamma, beta)
    assert not compare(np.zeros_like(X), ref, tol).ok
    bad = ref.astype(np.float32)
    bad[-1] = np.nan
    assert not compare(bad, ref, tol).ok
    x = X.astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    unbiased = (x - mu) / np.sqrt(x.var(axis=1, ddof=1, keepdims=True) + 1e-5) * gamma + beta
    assert not compare(unbiased.astype(np.float32), ref, tol).ok
    Xr = rows(3, 100, np.float32)
    refr = rmsnorm_golden(Xr, gamma)
    no_eps_sqrt = Xr / np.sqrt(np.mean(Xr.astype(np.float64) ** 2, axis=1,
                                       keepdims=True)) * gamma * (1 + 1e-4)
    assert not compare(no_eps_sqrt.astype(np.float32), refr, nc.rmsnorm_tolerance(Xr, gamma)).ok


def test_device_arrays_and_defaults(nc):
    from numba import cuda

    X = rows(3, 50, np.float16)
    gamma, beta = params(50)
    dX, dg, db = cuda.to_device(X), cuda.to_device(gamma), cuda.to_device(beta)
    dY = cuda.to_device(np.full_like(X, np.nan))
    dm = cuda.to_device(np.zeros(3, np.float32))
    nc.layernorm(dX, dg, db, dY, mean=dm)
    cuda.synchronize()
    assert compare(dY.copy_to_host(), layernorm_golden(X, gamma, beta),
                   nc.layernorm_tolerance(X, gamma, beta)).ok
    np.testing.assert_allclose(dm.copy_to_host(), layernorm_stats_golden(X)[0], atol=1e-5)
    # gamma = beta = None: plain standardisation; host X, device Y
    dY2 = cuda.to_device(np.full_like(X, np.nan))
    nc.layernorm(X, None, None, dY2)
    assert compare(dY2.copy_to_host(), layernorm_golden(X), nc.layernorm_tolerance(X)).ok
    Y3 = np.full_like(X, np.nan)
    nc.rmsnorm(dX, None, Y3)
    assert compare(Y3, rmsnorm_golden(X), nc.rmsnorm_tolerance(X)).ok


def test_noncontiguous_and_empty(nc):
    base = rows(3, 40, np.float32)
    X = base[:, ::2]                                             # (3, 20), strided
    gamma, beta = params(20)
    big = np.full((3, 40), np.nan, np.float32)
    Y = big[:, 1::2]
    nc.layernorm(X, gamma, beta, Y)
    assert compare(np.ascontiguousarray(Y), layernorm_golden(X, gamma, beta),
                   nc.layernorm_tolerance(X, gamma, beta)).ok
    assert np.isnan(big[:, ::2]).all()                           # the columns between untouched
    nc.layernorm(np.empty((0, 7), np.float32), None, None, np.empty((0, 7), np.float32))
    from numba import cuda
    strided = cuda.to_device(np.ones((3, 40), np.float32))[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        nc.layernorm(strided, None, None, cuda.to_device(np.empty((3, 20), np.float32)))
    nc.rmsnorm(np.empty((0, 7), np.float16), None, np.empty((0, 7), np.float16))


def test_argument_errors(nc):
    X = np.ones((2, 3), np.float32)
    Y = np.empty_like(X)
    with pytest.raises(ValueError, match="2-D"):
        nc.layernorm(np.ones(3, np.float32), None, None, np.empty(3, np.float32))
    with pytest.raises(ValueError, match="N = 0"):
        nc.rmsnorm(np.ones((2, 0), np.float32), None, np.ones((2, 0), np.float32))
    with pytest.raises(ValueError, match="Y has shape"):
        nc.layernorm(X, None, None, np.empty((3, 2), np.float32))
    with pytest.raises(ValueError, match="float32 or float16"):
        nc.layernorm(X.astype(np.float64), None, None, Y.astype(np.float64))
    if BF16 is not None:
        with pytest.raises(ValueError, match="bfloat16"):
            nc.rmsnorm(X.astype(BF16), None, Y.astype(BF16))
    with pytest.raises(ValueError, match="Y has dtype float16"):
        nc.layernorm(X, None, None, np.zeros((2, 3), np.float16))
    with pytest.raises(ValueError, match="gamma must have shape"):
        nc.layernorm(X, np.ones(4, np.float32), None, Y)
    with pytest.raises(ValueError, match="beta has dtype float64"):
        nc.layernorm(X, None, np.zeros(3), Y)
    with pytest.raises(ValueError, match="g has dtype"):
        nc.rmsnorm(X, np.ones(3, np.float16), Y)
    with pytest.raises(ValueError, match="mean must have shape"):
        nc.layernorm(X, None, None, Y, mean=np.empty(3, np.float32))
    with pytest.raises(ValueError, match="rstd has dtype"):
        nc.rmsnorm(X, None, Y, rstd=np.empty(2))
    for eps in (0.0, -1.0, float("nan"), 1e-50):
        with pytest.raises(ValueError, match="eps"):
            nc.layernorm(X, None, None, Y, eps)
    with pytest.raises(TypeError, match="eps"):
        nc.rmsnorm(X, None, Y, eps=None)
    with pytest.raises(TypeError, match="numpy array"):
        nc.layernorm(X.tolist(), None, None, Y)
    with pytest.raises(TypeError, match="numpy array"):
        nc.rmsnorm(X, [1.0, 1.0, 1.0], Y)
    ro = np.empty_like(X)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        nc.layernorm(X, None, None, ro)
    with pytest.raises(ValueError, match="same array"):
        nc.rmsnorm(X, None, X)
    with pytest.raises(ValueError, match="overlap"):
        big = np.ones((2, 6), np.float32)
        nc.layernorm(big[:, :3], None, None, big[:, 2:5])
    for t in (0, 48, 2048, 64.0):
        with pytest.raises(ValueError, match="threads"):
            nc.layernorm(X, None, None, Y, threads=t)
    assert nc.launch_config(5, 1) == (5, 32) and nc.launch_config(2, 1000) == (2, 256)
    assert nc.launch_config(1, 33) == (1, 64) and nc.launch_config(3, 7, threads=128) == (3, 128)
    with pytest.raises(ValueError):
        nc.launch_config(0, 4)


def test_sim_counters(nc):
    """One LayerNorm and one RMSNorm launch, 4 rows x 1000 fp32 (8 warps a block): 2 barriers
    a row; shuffles 3 x 5 x (8 + 1) a row for LayerNorm, 5 x (8 + 1) for RMSNorm; X read twice
    and gamma/beta/g once a row, all coalesced (4 sectors a full warp request)."""
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim" or sim.options().get("executor") != "kernellab":
        pytest.skip("needs the sim tier's counting engine")
    R, N, W = 4, 1000, 8
    X = rows(R, N, np.float32)
    gamma, beta = params(N)
    with sim.capture() as cap:
        nc.layernorm(X, gamma, beta, np.empty_like(X))
        nc.rmsnorm(X, gamma, np.empty_like(X))
    ln, rms = (s.counters for s in cap.launches)
    req = -(-N // 32)                                   # warp requests per pass over a row
    sec = N * 4 // 32                                   # sectors per pass (rows sector-aligned)
    assert ln["blocks"] == R and ln["threads"] == R * 256
    assert ln["barriers"] == rms["barriers"] == 2 * R
    assert ln["shuffles"] == R * 3 * 5 * (W + 1) and rms["shuffles"] == R * 5 * (W + 1)
    assert ln["global_load_requests"] == R * 4 * req and rms["global_load_requests"] == R * 3 * req
    assert ln["global_load_sectors"] == R * 4 * sec and rms["global_load_sectors"] == R * 3 * sec
    assert ln["global_store_sectors"] == R * (sec + 2)            # Y, then mean and rstd
    assert ln["dram_read_bytes"] == 4 * (R * N + 2 * N)           # compulsory: X once
    assert ln["shared_load_wavefronts"] == ln["shared_load_requests"]   # no bank conflicts
    assert ln["shared_bytes_per_block"] == 3 * nc.MAX_WARPS * 4


# --- a block reduction with a barrier removed: the race detector must see it ---------------

def _racy_kernel(drop):
    from numba import cuda, float32

    from kernellab.kernels.norms_cuda import MAX_WARPS, warp_welford

    @cuda.jit
    def layernorm_stats_racy(X, mean_out):
        sh_n = cuda.shared.array(MAX_WARPS, float32)
        sh_mean = cuda.shared.array(MAX_WARPS, float32)
        sh_m2 = cuda.shared.array(MAX_WARPS, float32)
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        n = float32(0.0)
        mean = float32(0.0)
        m2 = float32(0.0)
        for j in range(tid, X.shape[1], cuda.blockDim.x):
            x = float32(X[cuda.blockIdx.x, j])
            n += float32(1.0)
            d = x - mean
            mean += d / n
            m2 += d * (x - mean)
        n, mean, m2 = warp_welford(n, mean, m2)
        if lane == 0:
            sh_n[warp] = n
            sh_mean[warp] = mean
            sh_m2[warp] = m2
        if drop != 1:
            cuda.syncthreads()          # barrier 1: the partials are written
        if warp == 0:
            if lane < cuda.blockDim.x // 32:
                n = sh_n[lane]
                mean = sh_mean[lane]
                m2 = sh_m2[lane]
            else:
                n = float32(0.0)
                mean = float32(0.0)
                m2 = float32(0.0)
            n, mean, m2 = warp_welford(n, mean, m2)
            if lane == 0:
                sh_mean[0] = mean
        if drop != 2:
            cuda.syncthreads()          # barrier 2: the result is in slot 0
        if tid == 32:
            mean_out[cuda.blockIdx.x] = sh_mean[0]

    return layernorm_stats_racy


@pytest.mark.parametrize("drop", [0, 1, 2], ids=["both-barriers", "no-barrier-1",
                                                  "no-barrier-2"])
def test_missing_barrier_is_a_race(drop):
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim" or not sim.options().get("race_check", False) or \
            sim.options().get("executor") != "kernellab":
        pytest.skip("needs the sim tier's race detector")
    from numba import cuda

    kern = _racy_kernel(drop)
    X = rows(2, 100, np.float32)
    out = np.full(2, np.nan, np.float32)
    if drop == 0:
        kern[2, 64](X, out)
        np.testing.assert_allclose(out, X.astype(np.float64).mean(axis=1), atol=1e-6)
    else:
        # barrier 1 missing: warp 0 reads warp 1's partial in the interval it is written;
        # barrier 2 missing: thread 32 reads slot 0 while lane 0 of warp 0 writes it
        where = "sh_n" if drop == 1 else "sh_mean"
        with pytest.raises(sim.RaceError, match=rf"race on shared array {where}\[.*no syncthreads"):
            kern[2, 64](X, out)
    cuda.synchronize()


def test_kernels_compile_for_a_gpu(nc):
    """The sim tier compiles every launched kernel to PTX for sm_80 (kernellab.sim.ptx: numba-cuda's
    real compiler, no GPU needed): for fp32 and fp16 inputs both kernels have their two barriers,
    their shuffles (3 values x 5 steps x 2 stages for LayerNorm, 5 x 2 for RMSNorm, unrolled), no
    local memory and no float64 arithmetic (the statistics stay in float32)."""
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim" or not sim.options().get("gpu_compile") or \
            sim.options().get("executor") != "kernellab":
        pytest.skip("needs the sim tier's GPU-compile check")
    for dt in DTYPES:
        X = rows(1, 40, dt)
        with sim.capture() as cap:
            nc.layernorm(X, None, None, np.empty_like(X))
            nc.rmsnorm(X, None, np.empty_like(X))
        for launch, shuffles in zip(cap.launches, (30, 10)):
            c = launch.ptx_counts
            assert c is not None, "GPU-compile check is off"
            assert c["bar.sync"] == 2, (launch.name, dt, c)
            assert c["shfl.sync"] == shuffles, (launch.name, dt, c)
            assert c["ld.local"] == c["st.local"] == 0, (launch.name, dt, c)
            assert all(c[k] == 0 for k in ("fma.f64", "mul.f64", "add.f64", "sub.f64")), c
