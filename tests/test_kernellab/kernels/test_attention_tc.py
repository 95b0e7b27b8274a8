"""Chapter 5's tensor-core FlashAttention-2 (kernellab.kernels.attention_tc): correct under
FlashAttention's float16 rule against the float64 golden reference (causal on and off, N not a
multiple of 16 nor of the key block, several key blocks, batches and heads, every head
dimension), the logsumexp within a derived bound, free of hazards in shuffled thread orders, and
counted as its partition says: mma_ops from the warps and blocks it visits, the global bytes of
the scalar kernel with the same blocks, conflict-free ldmatrix, double-buffered copies in flight
across the MMAs.

Sizes are small (the simulator interprets every thread): B = H = 1 except where the batch and
head indexing is the point, N <= 130."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernellab
from kernellab import bf16
from kernellab.kernels import attention_cuda as ac
from kernellab.kernels import attention_tc as tc
from kernellab.numerics import compare
from reference_kernels.attention import attention_golden

F16 = np.dtype(np.float16)
BF16 = bf16.BF16
sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")


def _qkv(shape, seed, dtype=F16):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def lse_bound(Q, K, lse_ref):
    """Rounding bound of the float32 logsumexp, row by row (the derivation of
    test_attention_cuda_ladder.lse_bound): a score off by gamma_{d+1} a_ij, a_ij = scale
    sum_t |q_it k_jt| (an mma's sum is within float32's bound too: kernellab.sim.mma), the row
    sum of N float32 exponentials rescaled at most N times, one more rounding; u = 2^-24."""
    u = 2.0 ** -24
    d, N = Q.shape[-1], Q.shape[2]
    a = np.matmul(np.abs(Q.astype(np.float64)), np.swapaxes(np.abs(K.astype(np.float64)), -1, -2))
    a = a.max(axis=-1) / math.sqrt(d)
    return u * ((d + 2) * a + (3 * N + 4) + np.abs(lse_ref))


def _run(Q, K, V, causal, **kw):
    """O and lse of the kernel, checked: inputs unchanged, O of the inputs' dtype within the
    rule, lse within its bound. Returns the comparison."""
    O = np.full_like(Q, np.nan)
    copies = [x.copy() for x in (Q, K, V)]
    lse = tc.attention_tc_lse(Q, K, V, O, causal, **kw)
    assert all(np.array_equal(x, c) for x, c in zip((Q, K, V), copies)), "inputs modified"
    assert O.dtype == Q.dtype and np.isfinite(O.astype(np.float32)).all()
    ref, rule = tc.expected(Q, K, V, causal)
    res = compare(O, ref, rule, tile=None)
    assert res.ok, res.message
    assert res.budget_used < 0.5            # the course's margin for a kernel (chapter 5)
    _, lse_ref = attention_golden(Q, K, V, causal)
    assert lse.dtype == np.float32 and lse.shape == Q.shape[:3]
    err = np.abs(lse.astype(np.float64) - lse_ref)
    assert (err <= lse_bound(Q, K, lse_ref)).all(), float(err.max())
    return res


# ----------------------------------------------------------------------------------------------
# correctness
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, d, Bc", [(40, 64, None),    # one Q block, warp 3 past N
                                      (100, 64, 32),     # tails of 16, 32 and 64; 4 key blocks
                                      (1, 16, None)],    # one key, one live row
                         ids=["N40-d64", "N100-d64-Bc32", "N1-d16"])
def test_meets_the_flash_attention_rule(N, d, Bc, causal):
    _run(*_qkv((1, 1, N, d), seed=N + d), causal, Bc=Bc)


def test_bfloat16_inputs_take_the_bf16_mma():
    # bfloat16 bits through the f16 mma (or P rounded to float16) would be far outside the rule
    _run(*_qkv((1, 2, 37, 32), seed=5, dtype=BF16), True)
    _run(*_qkv((1, 1, 20, 64), seed=6, dtype=BF16), False, Bc=16)


def test_batches_heads_and_every_head_dimension():
    _run(*_qkv((2, 2, 33, 32), seed=3), False)
    _run(*_qkv((1, 1, 20, 128), seed=4), True)      # Bc = 16 at d = 128: two key blocks


def test_row_of_one_key_is_its_value():
    Q, K, V = _qkv((1, 1, 17, 16), seed=5)
    O = np.empty_like(Q)
    tc.attention_tc(Q, K, V, O, causal=True)
    assert np.array_equal(O[0, 0, 0], V[0, 0, 0])   # softmax over one key is exactly 1


@pytest.mark.skipif(kernellab.TIER != "sim", reason="sim tier checks")
def test_no_hazard_in_any_thread_order():
    """The race detector, bounds, uninitialised-read and cp.async checks run on every launch;
    here the threads of each barrier interval also run in shuffled orders."""
    from kernellab import sim

    Q, K, V = _qkv((1, 1, 70, 16), seed=6)
    for seed in (1, 2):
        O = np.full_like(Q, np.nan)
        with sim.capture(shuffle=seed):
            tc.attention_tc(Q, K, V, O, True)
        assert np.isfinite(O).all()


def test_device_arrays_stay_on_the_device():
    from numba import cuda

    Q, K, V = _qkv((1, 1, 17, 32), seed=7)
    dO = cuda.to_device(np.full_like(Q, np.nan))
    lse = tc.attention_tc_lse(*(cuda.to_device(x) for x in (Q, K, V)), dO)
    assert not isinstance(lse, np.ndarray)
    ref, rule = tc.expected(Q, K, V)
    assert compare(dO.copy_to_host(), ref, rule, tile=None).ok


# ----------------------------------------------------------------------------------------------
# the partition, counted
# ----------------------------------------------------------------------------------------------

def _counters(Q, K, V, causal=False, **kw):
    from kernellab import sim

    with sim.capture() as cap:
        tc.attention_tc(Q, K, V, np.empty_like(Q), causal, **kw)
    (launch,) = cap.launches
    return launch


@pytest.fixture(scope="module")
def launch_128():
    """d = 64, N = 128: two Q blocks, two key blocks, every warp live."""
    return _counters(*_qkv((1, 1, 128, 64), seed=8))


@sim_only
@pytest.mark.parametrize("N, d, Bc, causal", [(128, 64, None, False), (72, 64, None, True),
                                              (100, 64, 32, True), (33, 16, None, False)])
def test_counters_follow_the_partition(N, d, Bc, causal, launch_128):
    """mma_ops: Bc d / 64 per live warp and visited key block; global bytes: those of the
    scalar kernel with the same blocks (Br = 64), Q and O once, K and V once per visited
    block, lse once; one block of 4 warps per 64 query rows."""
    s = launch_128 if N == 128 else _counters(*_qkv((1, 1, N, d), seed=N), causal, Bc=Bc)
    bc = Bc or tc.tc_block_sizes(d)[1]
    c = s.counters
    assert c["mma_ops"] == tc.mma_ops_expected(1, 1, N, d, Bc, causal)
    assert s.block == (tc.WARPS * 32, 1, 1) and c["blocks"] == -(-N // tc.BR)
    p = ac.flash_bytes_predicted(1, 1, N, d, tc.BR, bc, 2, causal)
    assert (c["global_load_bytes"], c["global_store_bytes"]) == (p["load"], p["store"])
    assert c["shuffles"] > 0 and c["local_touched_bytes"] == 0


def test_mma_ops_formula():
    """At N a multiple of Bc and of 64, without causal masking: exactly the FLOPs of
    attention_flops (4 N^2 d) in m16n8k16 instructions of 4096 FLOP; causal: fewer."""
    for N, d in ((128, 64), (256, 32), (64, 128)):
        assert tc.mma_ops_expected(1, 1, N, d) * 4096 == ac.attention_flops(1, 1, N, d)
        assert tc.mma_ops_expected(1, 1, N, d, causal=True) < tc.mma_ops_expected(1, 1, N, d)
    # a tail pads the last key block to Bc and the last warp's rows to 16
    assert tc.mma_ops_expected(1, 1, 100, 64) * 4096 > ac.attention_flops(1, 1, 100, 64)
    assert tc.mma_ops_expected(2, 3, 100, 64) == 6 * tc.mma_ops_expected(1, 1, 100, 64)


@sim_only
def test_ldmatrix_is_conflict_free_and_copies_overlap(launch_128):
    """d = 64, N = 128, two key blocks: every ldmatrix.x4 takes its minimum of 4 wavefronts
    (the 16-byte row padding), the O read-back one a request, and the second key block's
    cp.async bytes (K and V, both Q blocks) are in flight across the first block's MMAs."""
    N, d = 128, 64
    c = launch_128.counters
    _, bc = tc.tc_block_sizes(d)
    warps = N // tc.ROWS
    blocks_visited = N // bc
    ldmatrix = warps * (d // 16 + blocks_visited * 2 * (bc // 16) * (d // 16))
    readback = warps * tc.ROWS * d // 32
    assert c["shared_load_wavefronts"] == 4 * ldmatrix + readback
    assert c["shared_load_requests"] == ldmatrix + readback
    per_block = 2 * bc * d * 2
    assert c["cp_async_overlapped_bytes"] == (N // tc.BR) * (blocks_visited - 1) * per_block


def test_p_fragment_is_the_s_accumulator_in_registers():
    """C layout of two adjacent S tiles = A layout of P (the PTX ISA's tables, kernellab.sim.mma):
    the same map for every lane, the one the kernel packs."""
    from kernellab.sim.mma import a_coords, c_coords

    want = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    for lane in range(32):
        m = tc.p_fragment_map(lane)
        assert m == want
        for (tile, i), (r, col) in zip(m, a_coords(lane)):
            assert c_coords(lane)[i] == (r, col - 8 * tile)
    with pytest.raises(ValueError):
        tc.p_fragment_map(32)


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------

def test_block_sizes_fit_static_shared_memory():
    for d in tc.HEAD_DIMS:
        br, bc = tc.tc_block_sizes(d)
        assert br == 64 and tc.tc_shared_bytes(d, bc) <= tc.SMEM_LIMIT
        assert bc == 64 or tc.tc_shared_bytes(d, 2 * bc) > tc.SMEM_LIMIT     # the largest
    assert tc.tc_block_sizes(64) == (64, 64) and tc.tc_block_sizes(128) == (64, 16)
    with pytest.raises(ValueError):
        tc.tc_block_sizes(48)


def test_the_harness_checks_its_arguments():
    Q, K, V = _qkv((1, 1, 8, 16), seed=9)
    O = np.empty_like(Q)
    with pytest.raises(TypeError):
        tc.attention_tc(Q.tolist(), K, V, O)
    with pytest.raises(ValueError, match="float16"):
        tc.attention_tc(*(x.astype(np.float32) for x in (Q, K, V)), O.astype(np.float32))
    with pytest.raises(ValueError, match="Q's dtype"):
        tc.attention_tc(Q, K.astype(BF16), V, O)
    with pytest.raises(ValueError, match="head dimension"):
        tc.attention_tc(*_qkv((1, 1, 8, 24), seed=1), np.empty((1, 1, 8, 24), F16))
    with pytest.raises(ValueError, match="match"):
        tc.attention_tc(Q, K[:, :, :4], V, O)
    with pytest.raises(ValueError, match="4-D"):
        tc.attention_tc(Q[0], K[0], V[0], O[0])
    with pytest.raises(ValueError, match="multiple of 16"):
        tc.attention_tc(Q, K, V, O, Bc=24)
    with pytest.raises(ValueError, match="shared memory"):
        tc.attention_tc(*_qkv((1, 1, 8, 128), seed=1), np.empty((1, 1, 8, 128), F16), Bc=64)
    ro = np.empty_like(Q)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        tc.attention_tc(Q, K, V, ro)
    with pytest.raises(ValueError, match="overlaps"):
        tc.attention_tc(Q, K, V, Q)
    empty = np.empty((1, 1, 0, 16), F16)
    assert tc.attention_tc_lse(empty, empty, empty, empty.copy()).shape == (1, 1, 0)
