"""Chapter 5's attention ladder (kernellab.kernels.attention_cuda): both versions correct under
FlashAttention's error rule against the float64 golden reference (causal on and off, tails of
the tiles, float32 and float16, the logsumexp), free of hazards on the sim tier, and moving the
global bytes their formulas say: v1 Theta(N^2), v2 Theta(N^2 d^2 / M).

Sizes are small (the simulator interprets every thread): B = H = 1 except where the batch and
head indexing is the point, N <= 100, d in {32, 64}."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernellab
from kernellab.kernels import attention_cuda as ac
from grader.labs.flash_attention.spec import rule
from kernellab.numerics import compare, ulp
from reference_kernels.attention import attention_golden, attention_plain

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)

#: The error rule is the lab's (grader.labs.flash_attention.spec.rule): FlashAttention's, kappa = 2
#: times the error of reference_kernels.attention.attention_plain (products and sums left to
#: right in float32, like a one-pass kernel's) plus one ulp at max|O| plus, for float32, the
#: derived rounding bound of a fused kernel. Without that bound a correct float32 kernel used up
#: to 1.63x the budget (attention_cpu, 150 seeds per shape; kernellab.numerics.
#: flash_attention_rule's docstring).


def _qkv(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def fa_policy(Q, K, V, causal, ref):
    """The lab's correctness rule (grader.labs.flash_attention.spec.rule)."""
    return rule(Q, K, V, causal, ref)


def lse_bound(Q, K, lse_ref):
    """Rounding bound of the float32 logsumexp (float32 arithmetic on exactly widened inputs),
    row by row: a score s_ij = scale q.k is off by at most gamma_{d+1} a_ij, a_ij = scale
    sum_t |q_it k_jt| (sequential dot product, then the scale), which moves m + log l by at
    most max_j of that; l = sum_j exp(s_ij - m) adds N terms (each exp within 2 ulp) and is
    rescaled at most once per K block (<= N times): within (3N + 4) u relative, which moves
    log l by as much; m + log l rounds once more. u = 2^-24 (worst case, not a fit)."""
    u = 2.0 ** -24
    d = Q.shape[-1]
    N = Q.shape[2]
    a = np.matmul(np.abs(Q.astype(np.float64)), np.swapaxes(np.abs(K.astype(np.float64)), -1, -2))
    a = a.max(axis=-1) / math.sqrt(d)
    return u * ((d + 2) * a + (3 * N + 4) + np.abs(lse_ref))


def _check(f, Q, K, V, causal, **kw):
    ref, lse_ref = attention_golden(Q, K, V, causal)
    O = np.full_like(Q, np.nan)
    copies = [x.copy() for x in (Q, K, V)]
    lse = f(Q, K, V, O, causal, **kw)
    assert all(np.array_equal(x, c) for x, c in zip((Q, K, V), copies)), "inputs modified"
    assert O.dtype == Q.dtype and O.shape == Q.shape
    res = compare(O, ref, fa_policy(Q, K, V, causal, ref), tile=None)
    assert res.ok, res.message
    # the margin rule (kernellab.numerics) asks a reference kernel for a 2x margin; under this
    # rule a kernel exactly as accurate as the plain baseline sits at 1/kappa = 50% by
    # construction, and float32 v2 is measured at up to 53% here: the margin is checked against
    # the baseline itself instead (no more than 1.25x its error, float32 and float16 alike;
    # 1.05x measured)
    base = np.abs(attention_plain(Q, K, V, causal).astype(np.float64) - ref).max()
    assert res.max_abs <= 1.25 * base + float(ulp(np.array(np.abs(ref).max()), Q.dtype)), \
        (res.max_abs, base)
    assert lse.dtype == np.float32 and lse.shape == Q.shape[:3]
    lerr = np.abs(lse.astype(np.float64) - lse_ref)
    assert (lerr <= lse_bound(Q, K, lse_ref)).all(), float(lerr.max())
    return O, lse


@pytest.mark.parametrize("name", list(ac.LADDER_LSE))
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, d", [(1, 32), (17, 32), (33, 64)])
def test_every_version_meets_the_flash_attention_rule(name, dtype, causal, N, d):
    Q, K, V = _qkv((1, 1, N, d), dtype, seed=N + d)
    _check(ac.LADDER_LSE[name], Q, K, V, causal)


@pytest.mark.parametrize("name, dtype, causal", [
    ("v1_materialised", F16, True), ("v2_flash2", F32, False), ("v2_flash2", F16, True)])
def test_n100(name, dtype, causal):
    Q, K, V = _qkv((1, 1, 100, 32), dtype, seed=100)
    _check(ac.LADDER_LSE[name], Q, K, V, causal)


@pytest.mark.parametrize("name", list(ac.LADDER_LSE))
def test_batches_and_heads_are_independent(name):
    Q, K, V = _qkv((2, 3, 9, 32), F32, seed=7)
    Q[1, 2] *= 4          # one head with sharper scores than the others
    _check(ac.LADDER_LSE[name], Q, K, V, True)


@pytest.mark.parametrize("Br, Bc", [(32, 8), (8, 32), (16, 16)])
def test_v2_any_block_shape_with_causal_tails(Br, Bc):
    """Br > Bc: on a diagonal block some rows see only masked keys (their m, l must stay);
    Br < Bc: one K/V block straddles several Q blocks; N = 33 leaves a 1-row tail either way."""
    Q, K, V = _qkv((1, 1, 33, 32), F32, seed=Br * Bc)
    _check(ac.attention_v2_lse, Q, K, V, True, Br=Br, Bc=Bc)


def test_large_scores_do_not_overflow_or_nan():
    Q, K, V = _qkv((1, 1, 17, 32), F32, seed=5)
    Q *= 30.0             # scores of a few hundred: exp would overflow without the max
    for f in ac.LADDER.values():
        O = np.full_like(Q, np.nan)
        f(Q, K, V, O, True)
        ref, _ = attention_golden(Q, K, V, True)
        assert np.isfinite(O).all()
        assert np.abs(O - ref).max() < 1e-4


def test_v2_row_of_one_key_is_its_value():
    Q, K, V = _qkv((1, 1, 5, 32), F16, seed=3)
    O = np.full_like(Q, np.nan)
    ac.attention_v2(Q, K, V, O, causal=True)
    assert np.array_equal(O[0, 0, 0], V[0, 0, 0])     # softmax over one key is exactly 1


@pytest.mark.skipif(kernellab.TIER != "sim", reason="sim tier checks")
def test_no_hazard_in_any_thread_order():
    """The sim tier's race detector, bounds and uninitialised-read checks run on every launch
    above; here the threads of each barrier interval also run in shuffled orders."""
    from kernellab import sim

    Q, K, V = _qkv((1, 2, 20, 32), F32, seed=11)
    for seed in (1, 2):
        for f in ac.LADDER.values():
            O = np.full_like(Q, np.nan)
            with sim.capture(shuffle=seed):
                f(Q, K, V, O, True)
            assert np.isfinite(O).all()


def test_device_arrays_stay_on_the_device():
    from numba import cuda

    Q, K, V = _qkv((1, 1, 17, 32), F32, seed=2)
    dO = cuda.to_device(np.full_like(Q, np.nan))
    lse = ac.attention_v2_lse(*(cuda.to_device(x) for x in (Q, K, V)), dO, False)
    assert not isinstance(lse, np.ndarray)
    ref, lse_ref = attention_golden(Q, K, V)
    assert np.abs(dO.copy_to_host() - ref).max() < 1e-5
    assert np.abs(lse.copy_to_host() - lse_ref).max() < 1e-5


# ----------------------------------------------------------------------------------------------
# block sizes from the shared-memory budget
# ----------------------------------------------------------------------------------------------

def test_block_sizes_follow_the_budget():
    assert ac.flash_block_sizes(32, F32) == (64, 64)
    assert ac.flash_block_sizes(64, F32) == (32, 32)
    assert ac.flash_block_sizes(64, F16) == (64, 64)
    assert ac.flash_block_sizes(32, F16) == (128, 128)        # MAX_BLOCK
    for d, dt in ((32, F32), (64, F32), (64, F16)):
        br, bc = ac.flash_block_sizes(d, dt)
        assert ac.flash_shared_bytes(br, bc, d, dt) <= ac.DEFAULT_SMEM_BYTES
        assert ac.flash_shared_bytes(2 * br, 2 * bc, d, dt) > ac.DEFAULT_SMEM_BYTES
    # tiles are linear in Br = Bc, so doubling the budget doubles Br
    m = ac.flash_shared_bytes(8, 8, 64, F32)
    assert ac.flash_block_sizes(64, F32, m) == (8, 8)
    assert ac.flash_block_sizes(64, F32, 2 * m) == (16, 16)
    assert ac.flash_block_sizes(64, F32, 2 * m - 1) == (8, 8)
    assert ac.flash_shared_bytes(8, 8, 64, F32) == 4 * (8 * 65 + 2 * 8 * 64)
    assert ac.flash_shared_bytes(8, 8, 64, F16) == 2 * (8 * 66 + 2 * 8 * 64)


def test_bad_budgets_and_blocks_are_refused():
    Q, K, V = _qkv((1, 1, 4, 64), F32, seed=0)
    with pytest.raises(ValueError, match="cannot hold"):
        ac.flash_block_sizes(64, F32, 100)
    with pytest.raises(ValueError, match="48 KiB"):
        ac.flash_block_sizes(64, F32, 64 * 1024)
    with pytest.raises(ValueError, match="48 KiB"):
        ac.attention_v2(Q, K, V, np.empty_like(Q), Br=128, Bc=128)
    with pytest.raises(ValueError, match="Br"):
        ac.attention_v2(Q, K, V, np.empty_like(Q), Br=0, Bc=8)


@pytest.mark.parametrize("f", [ac.attention_v1, ac.attention_v2])
def test_the_harness_checks_its_arguments(f):
    Q, K, V = _qkv((1, 1, 4, 32), F32, seed=0)
    O = np.empty_like(Q)
    with pytest.raises(TypeError):
        f(Q.tolist(), K, V, O)
    with pytest.raises(ValueError, match="4-D"):
        f(Q[0], K[0], V[0], O[0])
    with pytest.raises(ValueError, match="match Q"):
        f(Q, K[:, :, :3], V, O)
    with pytest.raises(ValueError, match="match Q"):
        f(Q, K.astype(np.float16), V, O)
    with pytest.raises(ValueError, match="float32 or float16"):
        f(*(x.astype(np.float64) for x in (Q, K, V, O)))
    big = np.zeros((1, 1, 2, ac.D_MAX + 1), np.float32)
    with pytest.raises(ValueError, match="head dimension"):
        f(big, big.copy(), big.copy(), big.copy())
    ro = np.empty_like(Q)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(Q, K, V, ro)
    with pytest.raises(ValueError, match="overlaps"):
        f(Q, K, V, Q)


# ----------------------------------------------------------------------------------------------
# global traffic (sim tier counters)
# ----------------------------------------------------------------------------------------------

def _counted(f, shape, dtype, causal, **kw):
    from numba import cuda

    from kernellab import sim

    Q, K, V = (cuda.to_device(x) for x in _qkv(shape, dtype, seed=1))
    with sim.capture() as cap:
        f(Q, K, V, cuda.device_array(shape, dtype), causal, **kw)
    t = cap.total()
    kv = sum(a["load_elements"] for s in cap.launches for a in s.arrays
             if a["name"] in ("K", "V")) * np.dtype(dtype).itemsize
    return t["global_load_bytes"], t["global_store_bytes"], kv


sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")


@sim_only
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("N, d, Br, Bc, causal", [
    (33, 32, 16, 8, False), (33, 32, 16, 8, True), (33, 16, 8, 16, True), (20, 32, 32, 32, True)])
def test_v2_bytes_equal_the_formula(dtype, N, d, Br, Bc, causal):
    load, store, kv = _counted(ac.attention_v2, (1, 2, N, d), dtype, causal, Br=Br, Bc=Bc)
    p = ac.flash_bytes_predicted(1, 2, N, d, Br, Bc, dtype.itemsize, causal)
    assert (load, store, kv) == (p["load"], p["store"], p["kv"])


@sim_only
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("N, d", [(17, 32), (33, 16)])
def test_v1_bytes_equal_the_formula(dtype, N, d):
    load, store, _ = _counted(ac.attention_v1, (1, 2, N, d), dtype, False)
    p = ac.materialised_bytes_predicted(1, 2, N, d, dtype.itemsize)
    assert (load, store) == (p["load"], p["store"])


def _slope(y1, y2, x1, x2):
    return math.log(y2 / y1) / math.log(x2 / x1)


@sim_only
def test_v1_bytes_grow_as_n_squared():
    b = {N: sum(_counted(ac.attention_v1, (1, 1, N, 16), F32, False)[:2]) for N in (32, 64)}
    assert 1.9 <= _slope(b[32], b[64], 32, 64) <= 2.0


@sim_only
def test_v2_bytes_grow_as_n2_d2_over_m():
    """K and V are re-read once per Q block: 2 N d s ceil(N / Br) bytes, with Br ~ M / (3 d s),
    so the re-reads double twice when N doubles (slope 2) and halve when the budget M doubles
    (slope -1); Q, O and lse add 2 N d s + 4 N, so the totals' slopes are a little smaller."""
    d = 16
    m = ac.flash_shared_bytes(8, 8, d, F32)                  # Br = Bc = 8
    assert ac.flash_block_sizes(d, F32, 2 * m) == (16, 16)
    run = {(N, M): _counted(ac.attention_v2, (1, 1, N, d), F32, False, smem_bytes=M)
           for N, M in ((64, m), (128, m), (128, 2 * m))}
    kv = {k: v[2] for k, v in run.items()}
    total = {k: v[0] + v[1] for k, v in run.items()}
    assert _slope(kv[64, m], kv[128, m], 64, 128) == 2.0
    assert _slope(kv[128, m], kv[128, 2 * m], m, 2 * m) == -1.0
    for k, v in total.items():
        assert v == ac.flash_bytes_predicted(1, 1, k[0], d, *ac.flash_block_sizes(d, F32, k[1]),
                                             4)["total"]
    assert 1.85 <= _slope(total[64, m], total[128, m], 64, 128) < 2.0
    assert -1.0 < _slope(total[128, m], total[128, 2 * m], m, 2 * m) <= -0.85


def test_flash_moves_far_fewer_bytes_than_materialised_at_n256():
    """At N = 256 (formulas checked exactly against the counters above): v1's global traffic is
    dominated by the N x N scores and by its 16 x 16 GEMM tiles re-reading Q, K and V; v2's by
    K and V re-read N / Br times."""
    for d, dt in ((32, F32), (64, F32), (64, F16)):
        v1 = ac.materialised_bytes_predicted(1, 1, 256, d, dt.itemsize)["total"]
        v2 = ac.flash_bytes_predicted(1, 1, 256, d, *ac.flash_block_sizes(d, dt), dt.itemsize)
        assert v1 > 4 * v2["total"], (d, dt, v1, v2["total"])
    # and v1's grows as N^2 while v2's K/V term grows as N^2 / Br: the ratio holds with N
    r = [ac.materialised_bytes_predicted(1, 1, N, 64, 4)["total"]
         / ac.flash_bytes_predicted(1, 1, N, 64, 32, 32, 4)["total"] for N in (256, 1024, 4096)]
    assert r[0] < r[1] < r[2]


# ----------------------------------------------------------------------------------------------
# the Numba CPU version (kernellab.kernels.attention_cpu): same loop nest, same rule
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, d, Br, Bc", [(1, 32, 32, 32), (17, 32, 16, 16), (100, 64, 32, 8),
                                          (100, 32, 8, 32), (257, 64, 64, 64)])
def test_cpu_version_meets_the_flash_attention_rule(dtype, causal, N, d, Br, Bc):
    from kernellab.kernels.attention_cpu import flash_attention_cpu

    Q, K, V = _qkv((2, 2, N, d), dtype, seed=N * d)
    _check(lambda *a: flash_attention_cpu(*a, Br=Br, Bc=Bc), Q, K, V, causal)


def test_cpu_version_checks_its_arguments():
    from kernellab.kernels.attention_cpu import flash_attention_cpu

    Q, K, V = _qkv((1, 1, 4, 8), F32, seed=0)
    with pytest.raises(ValueError, match="share one"):
        flash_attention_cpu(Q, K[:, :, :3], V, np.empty_like(Q))
    with pytest.raises(ValueError, match="Br and Bc"):
        flash_attention_cpu(Q, K, V, np.empty_like(Q), Br=0)
    with pytest.raises(ValueError, match="float32 or float16"):
        flash_attention_cpu(*(x.astype(np.float64) for x in (Q, K, V, np.empty_like(Q))))
