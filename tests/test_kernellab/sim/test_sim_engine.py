"""The sim tier's own tests: every warp intrinsic, GPU limit, hazard and the race
detector of ``kernellab.sim.engine``, each with a kernel that must trip it and a near-identical
kernel that must not; the traffic counters, the trace, the fallback to the stock executor, the
``checks="fast"`` mode and the GPU-compile check.

Rules of the engine these tests pin down (and so document):

* a ``syncthreads`` must be reached by every *live* thread of the block at one call site:
  threads that have returned are not waited for (an early ``return`` before a barrier the rest
  reach is allowed); threads waiting at two different ``syncthreads`` lines are a divergence;
* a warp collective must be reached by every lane its mask names; a named lane that has exited,
  does not exist (partial warp) or waits elsewhere is a divergence error, not a hang (stricter
  than CUDA, which leaves a collective naming exited lanes to the implementation);
* ``threading.local`` is shared by the threads of a block (known; kernels must not use it);
  numpy's error state is per simulated thread (each thread runs in its own contextvars copy);
* ``while True: pass`` (a spin that touches no array) is not caught by the engine's watchdog;
* ``checks="fast"``: bounds, poison and divergence checks stay on; the access log is off, so no
  race / uninitialised-read detection and no traffic counters (blocks, threads, warps,
  barriers and warp-op counts are still kept);
* ``shuffles`` and ``votes`` count warp-level operations (one per warp), ``atomics`` counts
  per-thread operations;
* shared arrays are named after the variable they are assigned to (``s = cuda.shared.array``
  -> ``s``), dynamic shared memory ``dynamic_shared``; global arrays after the kernel parameter.

Kernels are tiny (a warp or two, a few blocks) so the file runs in seconds; the GPU compile is
switched off (``gpu_compile=False``) except where it is the subject.
"""

import kernellab  # noqa: F401  - first: selects the sim tier on a GPU-less machine, arms the engine

import os
import pathlib
import re
import threading
import time

import numpy as np
import pytest
from numba import cuda, float32, float64, int32, int64, uint8

from kernellab import device, sim
from kernellab.sim import engine
from kernellab.sim.errors import (
    DivergenceError, GPUCompileError, KernelError, LaunchConfigError, OutOfBoundsError,
    RaceError, StuckKernelError, UninitialisedReadError,
)

pytestmark = pytest.mark.skipif(not device.simulator_active(),
                                reason=f"the sim-tier engine runs only on the simulator, not on "
                                       f"{kernellab.TIER}")

FULL = 0xFFFFFFFF
TILE = 8

# ------------------------------------------------------------------------------------------
# helpers

_SRC = pathlib.Path(__file__).read_text().splitlines()


def line(tag):
    """The source line of this file that ends with the comment ``# @tag``."""
    hits = [n for n, s in enumerate(_SRC, 1) if s.rstrip().endswith(f"# @{tag}")]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


@pytest.fixture(autouse=True)
def _restore_options():
    old = sim.options()
    yield
    sim.configure(**old)


def run(kern, grid, block, *args, trace=False, **opts):
    """Launch ``kern[grid, block](*args)`` on the engine; returns its LaunchStats."""
    opts.setdefault("gpu_compile", False)
    with sim.capture(trace=trace, **opts) as cap:
        kern[grid, block](*args)
    assert len(cap.launches) == 1
    return cap.launches[0]


def fails(exc, kind, kern, grid, block, *args, **opts):
    """The launch raises exactly ``exc`` (kind ``kind``); returns its message."""
    with pytest.raises(exc) as info:
        run(kern, grid, block, *args, **opts)
    assert type(info.value) is exc, repr(info.value)
    assert info.value.kind == kind
    return str(info.value)


def tids(msg):
    return set(re.findall(r"tid=\((\d+, \d+, \d+)\)", msg))


def stock(kern, grid, block, *args):
    """Launch on numba-cuda's own simulator executor (no engine, nothing captured)."""
    with sim.capture(executor="stock", gpu_compile=False) as cap:
        kern[grid, block](*args)
    assert cap.launches == []


# ------------------------------------------------------------------------------------------
# warp intrinsics


@cuda.jit
def k_reduce_down(x, out):
    i = cuda.grid(1)
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(FULL, v, off)
        off //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit
def k_reduce_xor(x, out):
    i = cuda.grid(1)
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(FULL, v, off)
        off //= 2
    out[i] = v


@cuda.jit
def k_scan_up(x, out):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    off = 1
    while off < 32:
        n = cuda.shfl_up_sync(FULL, v, off)
        if lane >= off:
            v += n
        off *= 2
    out[i] = v


@cuda.jit
def k_shfl_edges(x, out):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    out[i, 0] = cuda.shfl_sync(FULL, v, (lane + 3) % 32)
    out[i, 1] = cuda.shfl_sync(FULL, v, 5)
    out[i, 2] = cuda.shfl_up_sync(FULL, v, 5)
    out[i, 3] = cuda.shfl_down_sync(FULL, v, 5)
    out[i, 4] = cuda.shfl_xor_sync(FULL, v, 7)
    out[i, 5] = lane


def _ints(n, seed=0, lo=-100, hi=100, dtype=np.int32):
    return np.random.default_rng(seed).integers(lo, hi, n).astype(dtype)


def test_shfl_down_sync_warp_reduction():
    x = _ints(64)
    out = np.zeros(2, np.int32)
    st = run(k_reduce_down, 1, 64, x, out)
    np.testing.assert_array_equal(out, x.reshape(2, 32).sum(axis=1))
    assert st.counters["shuffles"] == 2 * 5          # 5 shuffles, one per warp each


def test_shfl_xor_sync_butterfly_gives_every_lane_the_sum():
    x = _ints(64, seed=1)
    out = np.zeros(64, np.int32)
    run(k_reduce_xor, 2, 32, x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(2, 32).sum(axis=1), 32))


def test_float32_warp_reduction_matches_the_tree_order():
    x = np.random.default_rng(2).standard_normal(32).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(k_reduce_down, 1, 32, x, out)
    v = x.copy()                                     # the same tree, computed by numpy
    for off in (16, 8, 4, 2, 1):
        src = np.arange(32) + off
        v = v + np.where(src < 32, v[np.minimum(src, 31)], v)
    assert out[0].view(np.uint32) == v[0].view(np.uint32)


def test_shfl_up_sync_inclusive_scan():
    x = _ints(64, seed=3)
    out = np.zeros(64, np.int32)
    run(k_scan_up, 1, 64, x, out)
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(2, 32), axis=1).reshape(-1))


def test_shfl_sources_and_out_of_warp_lanes():
    x = _ints(64, seed=4, lo=0, hi=1000)
    out = np.zeros((64, 6), np.int32)
    run(k_shfl_edges, 2, 32, x, out)
    lanes = np.arange(32)
    for w in range(2):
        xs = x[32 * w:32 * (w + 1)]
        o = out[32 * w:32 * (w + 1)]
        np.testing.assert_array_equal(o[:, 0], xs[(lanes + 3) % 32])
        np.testing.assert_array_equal(o[:, 1], np.full(32, xs[5]))
        # a source outside the warp returns the lane's own value (numba-cuda's docstring)
        np.testing.assert_array_equal(o[:, 2], np.where(lanes >= 5, xs[lanes - 5], xs))
        np.testing.assert_array_equal(o[:, 3],
                                      np.where(lanes + 5 < 32, xs[np.minimum(lanes + 5, 31)], xs))
        np.testing.assert_array_equal(o[:, 4], xs[lanes ^ 7])
        np.testing.assert_array_equal(o[:, 5], lanes)


@cuda.jit
def k_laneid_2d(out):
    out[cuda.threadIdx.y, cuda.threadIdx.x] = cuda.laneid


def test_laneid_of_a_2d_block_follows_the_linear_thread_id():
    out = np.full((8, 8), -1, np.int32)
    run(k_laneid_2d, 1, (8, 8), out)
    np.testing.assert_array_equal(out, (np.arange(64) % 32).reshape(8, 8))


@cuda.jit
def k_votes(x, out):
    i = cuda.grid(1)
    p = x[i] > 0
    out[i, 0] = cuda.ballot_sync(FULL, p)
    out[i, 1] = cuda.all_sync(FULL, p)
    out[i, 2] = cuda.any_sync(FULL, p)
    out[i, 3] = cuda.eq_sync(FULL, p)


def test_ballot_all_any_eq_activemask():
    x = np.ones(128, np.int32)
    x[0:32] = np.where(np.arange(32) % 3 == 0, 5, -5)        # mixed
    x[64:96] = 0                                             # none
    x[96:128] = np.where(np.arange(32) >= 30, 1, 0)          # lanes 30, 31 only
    out = np.zeros((128, 4), np.int64)
    st = run(k_votes, 2, 64, x, out)
    for w in range(4):
        p = x[32 * w:32 * (w + 1)] > 0
        o = out[32 * w:32 * (w + 1)]
        ballot = sum(1 << k for k in range(32) if p[k])
        assert set((o[:, 0] & 0xFFFFFFFF).tolist()) == {ballot}
        assert set((o[:, 1] != 0).tolist()) == {bool(p.all())}
        assert set((o[:, 2] != 0).tolist()) == {bool(p.any())}
        assert set((o[:, 3] != 0).tolist()) == {bool(p.all() or not p.any())}
    assert st.counters["votes"] == 4 * 4            # 4 vote instructions per warp


@cuda.jit
def k_activemask(out, split):
    i = cuda.grid(1)
    out[i, 0] = cuda.activemask()
    cuda.syncwarp()
    if cuda.laneid < split:
        out[i, 1] = cuda.activemask()   # after a warp op, in converged code


def test_activemask_is_the_same_for_every_lane_of_a_converged_warp():
    """On a GPU the 32 lanes of a converged warp execute activemask together and all get
    0xffffffff; the sim tier must not let the lanes that ran ahead (and exited) vanish from
    the mask of the lanes that run after them."""
    out = np.zeros((64, 2), np.int64)
    run(k_activemask, 1, 64, out, 32)
    assert set((out[:, 0] & FULL).tolist()) == {FULL}
    assert set((out[:, 1] & FULL).tolist()) == {FULL}


@cuda.jit
def k_ballot_all(out):
    out[cuda.grid(1)] = cuda.ballot_sync(FULL, 1)


def test_ballot_sync_returns_an_int32_as_numba_cuda_types_it():
    """numba-cuda types ballot_sync as int32 (intrinsics.py: ``signature(types.i4, ...)``), so
    a full ballot stored into an int64 array is -1 on a GPU."""
    out = np.zeros(32, np.int64)
    run(k_ballot_all, 1, 32, out)
    assert set(out.tolist()) == {-1}


@cuda.jit
def k_eq(x, out):
    i = cuda.grid(1)
    out[i] = cuda.eq_sync(FULL, x[i])


def test_eq_sync_compares_predicates_not_values():
    """numba-cuda's eq_sync is ``vote.sync.uni.pred`` on ``predicate != 0``: lanes holding 2
    and 3 agree (both true); lanes holding 0 and 3 do not."""
    out = np.zeros(32, np.int32)
    run(k_eq, 1, 32, np.arange(1, 33, dtype=np.int32), out)
    assert set(out.tolist()) == {1}
    out[:] = 7
    run(k_eq, 1, 32, np.arange(0, 32, dtype=np.int32), out)
    assert set(out.tolist()) == {0}


@cuda.jit
def k_partial_warp(out):
    i = cuda.grid(1)
    m = cuda.activemask()
    out[i, 0] = m
    out[i, 1] = cuda.ballot_sync(m, i % 2 == 0)
    v = i
    off = 4
    while off > 0:                 # the 8 live lanes of the last warp reduce among themselves
        if (cuda.laneid ^ off) < 32 and (m >> (cuda.laneid ^ off)) & 1:
            v += cuda.shfl_xor_sync(m, v, off)
        off //= 2
    out[i, 2] = v


@cuda.jit
def k_partial_warp_full_mask(out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_sync(FULL, i, 0)  # @partial_full


def test_partial_warp_activemask_and_votes():
    out = np.zeros((40, 3), np.int64)
    run(k_partial_warp, 1, 40, out)
    assert set(out[:32, 0].tolist()) == {FULL}
    assert set(out[32:, 0].tolist()) == {0xFF}
    assert set((out[:32, 1] & FULL).tolist()) == {0x55555555}
    assert set((out[32:, 1] & FULL).tolist()) == {0x55}
    np.testing.assert_array_equal(out[32:, 2], np.full(8, sum(range(32, 40))))


def test_full_mask_in_a_partial_warp_is_divergence():
    out = np.zeros(40, np.int64)
    msg = fails(DivergenceError, "divergence", k_partial_warp_full_mask, 1, 40, out)
    assert "ctaid=(0, 0, 0)" in msg and "warp 1" in msg
    assert "lane 8" in msg and f"line {line('partial_full')}" in msg
    out = np.zeros(64, np.int64)                     # the same kernel on whole warps: fine
    run(k_partial_warp_full_mask, 1, 64, out)
    np.testing.assert_array_equal(out, np.repeat([0, 32], 32))


@cuda.jit
def k_shfl_after_exit(x, out, mask):
    i = cuda.grid(1)
    if cuda.laneid >= 16:
        return
    out[i] = cuda.shfl_xor_sync(mask, x[i], 1)  # @shfl_exit


def test_lane_named_in_the_mask_that_exited_is_divergence_not_a_hang():
    x = _ints(32, seed=5)
    out = np.zeros(32, np.int32)
    t0 = time.monotonic()
    msg = fails(DivergenceError, "divergence", k_shfl_after_exit, 1, 32, x, out, FULL)
    assert time.monotonic() - t0 < 5
    assert "ctaid=(0, 0, 0)" in msg and "warp 0" in msg and "exited" in msg
    assert re.search(r"lane (1[6-9]|2\d|3[01]) \(tid=\((1[6-9]|2\d|3[01]), 0, 0\)\)", msg), msg
    assert f"line {line('shfl_exit')}" in msg and "shfl_xor_sync" in msg
    # the mask naming only the lanes that stay: correct
    run(k_shfl_after_exit, 1, 32, x, out, 0x0000FFFF)
    np.testing.assert_array_equal(out[:16], x[np.arange(16) ^ 1])


@cuda.jit
def k_lanes_at_barrier(x, out, split):
    i = cuda.grid(1)
    if cuda.laneid < split:
        out[i] = cuda.shfl_sync(FULL, x[i], 0)  # @shfl_vs_bar
    else:
        cuda.syncthreads()


def test_lane_waiting_at_a_barrier_instead_of_the_collective_is_divergence():
    x = _ints(32, seed=6)
    out = np.zeros(32, np.int32)
    msg = fails(DivergenceError, "divergence", k_lanes_at_barrier, 1, 32, x, out, 16)
    assert "never arrived" in msg and "16" in msg and f"line {line('shfl_vs_bar')}" in msg
    run(k_lanes_at_barrier, 1, 32, x, out, 32)
    assert set(out.tolist()) == {int(x[0])}


@cuda.jit
def k_two_collectives(x, out, same):
    i = cuda.grid(1)
    if same or cuda.laneid % 2 == 0:
        out[i] = cuda.ballot_sync(FULL, x[i] > 0)  # @coll_a
    else:
        out[i] = cuda.any_sync(FULL, x[i] > 0)  # @coll_b


def test_lanes_calling_different_collectives_is_divergence():
    x = _ints(32, seed=7)
    out = np.zeros(32, np.int64)
    msg = fails(DivergenceError, "divergence", k_two_collectives, 1, 32, x, out, 0)
    assert "ctaid=(0, 0, 0)" in msg and "warp 0" in msg
    assert f"line {line('coll_a')}" in msg and f"line {line('coll_b')}" in msg
    run(k_two_collectives, 1, 32, x, out, 1)
    assert len(set(out.tolist())) == 1


@cuda.jit
def k_half_warp_groups(x, out):
    """Two disjoint half-warp groups, each with its own mask: legal CUDA (sm_70+)."""
    i = cuda.grid(1)
    if cuda.laneid < 16:
        out[i] = cuda.shfl_sync(0x0000FFFF, x[i], 0)
    else:
        out[i] = cuda.shfl_sync(0xFFFF0000, x[i], 16)


@pytest.mark.parametrize("shuffle", [None, 1, 2, 3])
def test_disjoint_masks_in_one_warp_do_not_depend_on_thread_order(shuffle):
    x = _ints(32, seed=8, lo=0, hi=1000)
    out = np.zeros(32, np.int32)
    run(k_half_warp_groups, 1, 32, x, out, shuffle=shuffle)
    np.testing.assert_array_equal(out, np.repeat([x[0], x[16]], 16))


@cuda.jit
def k_dp4a(a, b, c, out):
    i = cuda.grid(1)
    out[i] = cuda.dp4a(a[i], b[i], c[i])


def _dp4a_ref(a, b, c):
    """Independent reference: bytes via numpy views, int64 dot product, wrap to int32."""
    ab = a.view(np.int8 if a.dtype.kind == "i" else np.uint8).reshape(-1, 4).astype(np.int64)
    bb = b.view(np.int8 if b.dtype.kind == "i" else np.uint8).reshape(-1, 4).astype(np.int64)
    acc = (ab * bb).sum(axis=1) + c.astype(np.int64)
    return (acc & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("ta,tb", [(np.int32, np.int32), (np.uint32, np.uint32),
                                   (np.uint32, np.int32)])
def test_dp4a_signed_unsigned_and_wraparound(ta, tb):
    """cuda.dp4a on the sim tier (note: numba-cuda 0.30.4 itself has no cuda.dp4a, so a
    kernel using it fails the GPU-compile check; compiled off here)."""
    rng = np.random.default_rng(9)
    n = 64
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.int32).astype(ta)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.int32).astype(tb)
    a[:4] = np.array([0x7F7F7F7F, 0x80808080, 0xFFFFFFFF, 0x01020304], np.uint32).astype(ta)
    b[:4] = np.array([0x7F7F7F7F, 0x80808080, 0xFFFFFFFF, 0x05060708], np.uint32).astype(tb)
    c = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    c[:8] = [2**31 - 1, -2**31, 2**31 - 1, -2**31, 0, 7, 2**31 - 100, -2**31 + 100]
    out = np.zeros(n, np.int32)
    run(k_dp4a, 2, 32, a, b, c, out)
    np.testing.assert_array_equal(out, _dp4a_ref(a, b, c))


def test_dp4a_hand_checked_values():
    assert int(engine.dp4a(0x01020304, 0x05060708, 0)) == 1 * 5 + 2 * 6 + 3 * 7 + 4 * 8
    assert int(engine.dp4a(-1, -1, 0)) == 4                       # four (-1)*(-1), signed
    assert int(engine.dp4a(np.uint32(FULL), np.uint32(FULL), 0)) == 4 * 255 * 255
    assert int(engine.dp4a(np.uint32(FULL), -1, 0)) == 4 * 255 * -1   # unsigned x signed
    assert int(engine.dp4a(0x7F7F7F7F, 0x7F7F7F7F, 2**31 - 1)) == 2**31 - 1 + 4 * 127 * 127 - 2**32


@cuda.jit
def k_syncwarp_count(out):
    i = cuda.grid(1)
    out[i] = i
    cuda.syncwarp()
    cuda.syncwarp(FULL)


def test_syncwarp_completes_and_is_counted():
    out = np.zeros(64, np.int32)
    st = run(k_syncwarp_count, 1, 64, out)
    np.testing.assert_array_equal(out, np.arange(64))
    assert st.counters["warp_syncs"] == 2 * 2


# ------------------------------------------------------------------------------------------
# limits


@cuda.jit
def k_tid3(out):
    t = (cuda.threadIdx.z * cuda.blockDim.y + cuda.threadIdx.y) * cuda.blockDim.x \
        + cuda.threadIdx.x
    out[t] = t


@pytest.mark.parametrize("block", [(1024, 1, 1), (32, 32, 1), (1, 16, 64), (4, 4, 64)])
def test_block_at_the_thread_limits_runs(block):
    n = block[0] * block[1] * block[2]
    out = np.full(n, -1, np.int32)
    st = run(k_tid3, 1, block, out)
    np.testing.assert_array_equal(out, np.arange(n))
    assert st.counters["threads"] == n


@pytest.mark.parametrize("block", [(1025, 1, 1), (33, 32, 1), (1, 1, 65), (2, 8, 65)])
def test_block_past_the_thread_limits_is_a_launch_config_error(block):
    n = block[0] * block[1] * block[2]
    out = np.zeros(n, np.int32)
    msg = fails(LaunchConfigError, "launch-config", k_tid3, 1, block, out)
    assert ("1024" in msg) or ("64" in msg and "z" in msg), msg
    assert (out == 0).all()                          # nothing ran


@cuda.jit
def k_shared_48k(out, extra):
    s = cuda.shared.array(12288, float32)              # 48 KiB exactly
    t = cuda.threadIdx.x
    s[t] = t
    if extra:
        e = cuda.shared.array(1, int32)  # @shared_over
        e[0] = 1
    cuda.syncthreads()
    out[t] = s[t]


def test_static_shared_memory_limit():
    out = np.zeros(32, np.float32)
    st = run(k_shared_48k, 1, 32, out, 0)
    np.testing.assert_array_equal(out, np.arange(32))
    assert st.counters["shared_bytes_per_block"] == 48 * 1024
    msg = fails(LaunchConfigError, "launch-config", k_shared_48k, 1, 32, out, 1)
    assert "49156" in msg and "49152" in msg and f"line {line('shared_over')}" in msg
    assert "ctaid=(0, 0, 0)" in msg and "tid=(0, 0, 0)" in msg


@cuda.jit
def k_two_shared_one_line(out):
    a = cuda.shared.array(32, int32); b = cuda.shared.array(32, int32)  # noqa: E702
    t = cuda.threadIdx.x
    a[t] = 1
    b[t] = 2
    cuda.syncthreads()
    out[t] = a[t] + b[t]


def test_two_shared_arrays_on_one_line_are_two_arrays():
    out = np.zeros(32, np.int32)
    st = run(k_two_shared_one_line, 1, 32, out)
    assert set(out.tolist()) == {3}
    assert st.counters["shared_bytes_per_block"] == 2 * 32 * 4
    stock(k_two_shared_one_line, 1, 32, out)          # the stock simulator aliases them
    assert set(out.tolist()) == {4}


@cuda.jit
def k_dynamic_shared(out, static_too):
    d = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    if static_too:
        s = cuda.shared.array(10240, float32)          # 40 KiB static
        s[t] = 1.0
    d[t] = t  # @dyn
    cuda.syncthreads()
    out[t] = d[(t + 1) % 32]


def test_dynamic_shared_memory_is_poisoned_bounds_checked_and_counted():
    out = np.zeros(32, np.float32)
    with sim.capture(gpu_compile=False) as cap:
        k_dynamic_shared[1, 32, 0, 32 * 4](out, 0)
    np.testing.assert_array_equal(out, np.roll(np.arange(32, dtype=np.float32), -1))
    assert cap.launches[0].counters["shared_bytes_per_block"] == 128
    with pytest.raises(OutOfBoundsError) as info, sim.capture(gpu_compile=False):
        k_dynamic_shared[1, 32, 0, 31 * 4](out, 0)
    msg = str(info.value)
    assert "tid=(31, 0, 0)" in msg and "ctaid=(0, 0, 0)" in msg and f"line {line('dyn')}" in msg
    assert "[31]" in msg


def test_static_plus_dynamic_shared_memory_over_48_kib_is_a_launch_config_error():
    """Without an opt-in (cudaFuncSetAttribute, which numba-cuda 0.30 does not expose) a GPU
    refuses a block whose static + dynamic shared memory exceeds 48 KiB."""
    out = np.zeros(32, np.float32)
    with sim.capture(gpu_compile=False):
        k_dynamic_shared[1, 32, 0, 8 * 1024](out, 1)     # 40 + 8 KiB: fine
    with pytest.raises(LaunchConfigError), sim.capture(gpu_compile=False):
        k_dynamic_shared[1, 32, 0, 16 * 1024](out, 1)    # 40 + 16 KiB


def test_grid_y_z_limit():
    out = np.zeros(1, np.int32)
    fails(LaunchConfigError, "launch-config", k_tid3, (1, 65536, 1), 1, out)
    fails(LaunchConfigError, "launch-config", k_tid3, (1, 1, 65536), 1, out)


# ------------------------------------------------------------------------------------------
# bounds


@cuda.jit
def k_global_1d(x, out, aux, bad, store):
    i = cuda.grid(1)
    j = i
    special = cuda.blockIdx.x == 1 and cuda.threadIdx.x == 5
    if special:
        j = bad
    if store:
        out[i] = x[i]
        if special:
            aux[j] = x[i]  # @g1d_store
    else:
        out[i] = x[j]  # @g1d_load


@pytest.mark.parametrize("store", [0, 1])
@pytest.mark.parametrize("bad", [-1, -64, 64, 1000])
def test_global_1d_out_of_bounds(bad, store):
    x = np.arange(64, dtype=np.float32)
    out, aux = np.zeros(64, np.float32), np.zeros(64, np.float32)
    msg = fails(OutOfBoundsError, "out-of-bounds", k_global_1d, 2, 32, x, out, aux, bad, store)
    arr = "aux" if store else "x"
    assert "tid=(5, 0, 0)" in msg and "ctaid=(1, 0, 0)" in msg
    assert f"{arr}[{bad}]" in msg
    assert f"line {line('g1d_store' if store else 'g1d_load')}" in msg
    if bad < 0:
        assert "negative" in msg


@pytest.mark.parametrize("store", [0, 1])
def test_global_1d_last_valid_index_works(store):
    x = np.arange(64, dtype=np.float32)
    out, aux = np.zeros(64, np.float32), np.zeros(64, np.float32)
    run(k_global_1d, 2, 32, x, out, aux, 63, store)
    exp = np.arange(64, dtype=np.float32)
    if store:
        assert aux[63] == 37 and (aux[:63] == 0).all()
    else:
        exp[37] = 63
    np.testing.assert_array_equal(out, exp)


@cuda.jit
def k_global_2d(A, out, bi, bj):
    r, c = cuda.grid(2)
    ii = r
    jj = c
    if cuda.blockIdx.y == 1 and cuda.threadIdx.x == 3 and cuda.threadIdx.y == 2:
        ii = bi
        jj = bj
    out[r, c] = A[ii, jj]  # @g2d


@pytest.mark.parametrize("bi,bj", [(-1, 0), (0, -1), (4, 0), (0, 8), (4, 8)])
def test_global_2d_out_of_bounds(bi, bj):
    A = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 8), np.float32)
    msg = fails(OutOfBoundsError, "out-of-bounds", k_global_2d, (1, 2), (4, 4), A, out, bi, bj)
    assert "tid=(3, 2, 0)" in msg and "ctaid=(0, 1, 0)" in msg
    assert f"A[{bi}, {bj}]" in msg and f"line {line('g2d')}" in msg and "(4, 8)" in msg


def test_global_2d_last_valid_index_works():
    A = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 8), np.float32)
    run(k_global_2d, (1, 2), (4, 4), A, out, 3, 7)
    exp = A.copy()
    exp[3, 6] = A[3, 7]
    np.testing.assert_array_equal(out, exp)


@cuda.jit
def k_shared_1d(out, bad):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    s[t] = t
    cuda.syncthreads()
    j = bad if t == 7 else t
    out[t] = s[j]  # @s1d


@cuda.jit
def k_shared_2d(out, bi, bj):
    s = cuda.shared.array((4, 8), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    s[ty, tx] = ty * 8 + tx
    cuda.syncthreads()
    ii = ty
    jj = tx
    if tx == 6 and ty == 1:
        ii = bi
        jj = bj
    out[ty, tx] = s[ii, jj]  # @s2d


@pytest.mark.parametrize("bad", [-1, -32, 32])
def test_shared_1d_out_of_bounds(bad):
    out = np.zeros(32, np.float32)
    msg = fails(OutOfBoundsError, "out-of-bounds", k_shared_1d, 1, 32, out, bad)
    assert "tid=(7, 0, 0)" in msg and "ctaid=(0, 0, 0)" in msg
    assert f"s[{bad}]" in msg and f"line {line('s1d')}" in msg and "shared" in msg


def test_shared_1d_last_valid_index_works():
    out = np.zeros(32, np.float32)
    run(k_shared_1d, 1, 32, out, 31)
    exp = np.arange(32, dtype=np.float32)
    exp[7] = 31
    np.testing.assert_array_equal(out, exp)


@pytest.mark.parametrize("bi,bj", [(-1, 0), (0, -1), (4, 0), (0, 8)])
def test_shared_2d_out_of_bounds(bi, bj):
    out = np.zeros((4, 8), np.float32)
    msg = fails(OutOfBoundsError, "out-of-bounds", k_shared_2d, 1, (8, 4), out, bi, bj)
    assert "tid=(6, 1, 0)" in msg and "ctaid=(0, 0, 0)" in msg
    assert f"s[{bi}, {bj}]" in msg and f"line {line('s2d')}" in msg


def test_shared_2d_last_valid_index_works():
    out = np.zeros((4, 8), np.float32)
    run(k_shared_2d, 1, (8, 4), out, 3, 7)
    exp = np.arange(32, dtype=np.float32).reshape(4, 8)
    exp[1, 6] = 31
    np.testing.assert_array_equal(out, exp)


# ------------------------------------------------------------------------------------------
# poison and uninitialised reads


@cuda.jit
def k_local_poison(of, oi, ou8, oi64):
    t = cuda.threadIdx.x
    lf = cuda.local.array(4, float64)
    li = cuda.local.array(4, int32)
    lu = cuda.local.array(4, uint8)
    ll = cuda.local.array(4, int64)
    of[t] = lf[t % 4]
    oi[t] = li[t % 4]
    ou8[t] = lu[t % 4]
    oi64[t] = ll[t % 4]


def test_local_arrays_start_poisoned():
    of, oi = np.zeros(8), np.zeros(8, np.int32)
    ou8, oi64 = np.zeros(8, np.uint8), np.zeros(8, np.int64)
    run(k_local_poison, 1, 8, of, oi, ou8, oi64)
    assert np.isnan(of).all()
    assert set(oi.view(np.uint32).tolist()) == {0xCDCDCDCD}
    assert set(ou8.tolist()) == {0xCD}
    assert set(oi64.view(np.uint64).tolist()) == {0xCDCDCDCDCDCDCDCD}


@cuda.jit
def k_shared_peek(of, oi):
    sf = cuda.shared.array(8, float32)
    si = cuda.shared.array(8, int32)
    t = cuda.threadIdx.x
    of[t] = sf[t]
    oi[t] = si[t]


def test_shared_arrays_start_poisoned():
    """Seen with checks="fast" (which does not stop at the uninitialised read)."""
    of, oi = np.zeros(8, np.float32), np.zeros(8, np.int32)
    run(k_shared_peek, 1, 8, of, oi, checks="fast")
    assert np.isnan(of).all()
    assert set(oi.view(np.uint32).tolist()) == {0xCDCDCDCD}


@cuda.jit
def k_tail_tile(x, out, n):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    if t < n:
        s[t] = x[t]
    cuda.syncthreads()
    out[t] = s[31 - t]  # @uninit


def test_read_of_unwritten_shared_memory_is_an_uninitialised_read():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    msg = fails(UninitialisedReadError, "uninitialised-read", k_tail_tile, 1, 32, x, out, 30)
    assert "ctaid=(0, 0, 0)" in msg and len(tids(msg)) == 1
    assert re.search(r"tid=\((0|1), 0, 0\)", msg)
    assert re.search(r" s\[(30|31)\]", msg) and f"line {line('uninit')}" in msg
    run(k_tail_tile, 1, 32, x, out, 32)
    np.testing.assert_array_equal(out, x[::-1])
    assert "had already returned" not in msg  # no thread returned early: no such hint


@cuda.jit
def k_returns_above_the_stores(x, out, n):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    if t >= n:
        return                          # the early return the lab texts warn about
    s[t] = x[t]
    cuda.syncthreads()
    out[t] = s[(t + 1) % 32]            # @early


def test_an_uninitialised_read_after_early_returns_says_so():
    """Threads that returned above the shared-memory stores leave their elements unwritten;
    the report counts them and names the cause."""
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    msg = fails(UninitialisedReadError, "uninitialised-read", k_returns_above_the_stores, 1, 32,
                x, out, 30)
    assert f"line {line('early')}" in msg, msg
    assert "2 of the block's 32 threads had already returned" in msg, msg
    assert "keep every thread to the end" in msg, msg


@cuda.jit
def k_accumulate(x, out, init):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    if init:
        s[t] = 0.0
    s[t] += x[t]  # @acc
    cuda.syncthreads()
    out[t] = s[t]


def test_accumulating_into_unwritten_shared_memory_is_an_uninitialised_read():
    """``s[t] += v`` with no ``s[t] = 0`` first reads poison: the read comes before the write
    in the thread's own program order, so it is uninitialised although the same interval
    writes the element later."""
    x = np.ones(32, np.float32)
    out = np.zeros(32, np.float32)
    run(k_accumulate, 1, 32, x, out, 1)
    np.testing.assert_array_equal(out, x)
    msg = fails(UninitialisedReadError, "uninitialised-read", k_accumulate, 1, 32, x, out, 0)
    assert "tid=(" in msg and " s[" in msg and f"line {line('acc')}" in msg


@cuda.jit
def k_prev_block(out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    if b == 0:
        s[t] = 1.0
    cuda.syncthreads()
    out[b, t] = s[t]  # @prev


def test_a_block_does_not_see_the_previous_blocks_shared_memory():
    out = np.zeros((2, 32), np.float32)
    msg = fails(UninitialisedReadError, "uninitialised-read", k_prev_block, 2, 32, out)
    assert "ctaid=(1, 0, 0)" in msg and f"line {line('prev')}" in msg
    out[:] = 0
    run(k_prev_block, 2, 32, out, checks="fast")
    assert (out[0] == 1).all() and np.isnan(out[1]).all()


# ------------------------------------------------------------------------------------------
# divergence of syncthreads


@cuda.jit
def k_div_sync(out, split):
    t = cuda.threadIdx.x
    if t < split:
        out[t] = 1
        cuda.syncthreads()  # @div_a
    else:
        out[t] = 2
        cuda.syncthreads()  # @div_b
    out[t] += 10


@cuda.jit
def k_one_sync(out, split):
    t = cuda.threadIdx.x
    if t < split:
        out[t] = 1
    else:
        out[t] = 2
    cuda.syncthreads()
    out[t] += 10


def test_syncthreads_in_divergent_branches_is_divergence():
    out = np.zeros(32, np.int32)
    msg = fails(DivergenceError, "divergence", k_div_sync, 1, 32, out, 16)
    assert "ctaid=(0, 0, 0)" in msg
    assert f"line {line('div_a')}" in msg and f"line {line('div_b')}" in msg
    assert "(0, 0, 0)" in msg and "(16, 0, 0)" in msg
    run(k_one_sync, 1, 32, out, 16)
    np.testing.assert_array_equal(out, np.repeat([11, 12], 16))
    run(k_div_sync, 1, 32, out, 32)                  # the whole block takes one branch
    assert set(out.tolist()) == {11}


@cuda.jit
def k_early_return(x, out, n):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i >= n:
        return
    s[t] = x[i]
    cuda.syncthreads()
    out[i] = 2 * s[t]


def test_early_return_before_a_barrier_is_allowed():
    """The rule the engine follows: a barrier waits for every *live* thread of the block."""
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    st = run(k_early_return, 1, 64, x, out, 40)
    np.testing.assert_array_equal(out[:40], 2 * x[:40])
    assert (out[40:] == 0).all()
    assert st.counters["barriers"] == 1


@cuda.jit
def k_sync_votes(x, out):
    t = cuda.threadIdx.x
    p = x[t] > 0
    out[t, 0] = cuda.syncthreads_count(p)
    out[t, 1] = cuda.syncthreads_and(p)
    out[t, 2] = cuda.syncthreads_or(p)


def test_syncthreads_count_and_or():
    x = np.where(np.arange(64) % 4 == 0, 1, 0).astype(np.int32)
    out = np.zeros((64, 3), np.int32)
    st = run(k_sync_votes, 1, 64, x, out)
    assert set(out[:, 0].tolist()) == {16}
    assert set(out[:, 1].tolist()) == {0}
    assert set(out[:, 2].tolist()) == {1}
    assert st.counters["barriers"] == 3


# ------------------------------------------------------------------------------------------
# the race detector


@cuda.jit
def k_stencil(x, out, sync):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i]  # @st_w
    if sync:
        cuda.syncthreads()
    out[i] = s[t] + s[(t + 1) % 32]  # @st_r


def test_stencil_without_barrier_is_a_race():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    msg = fails(RaceError, "race", k_stencil, 2, 32, x, out, 0)
    assert len(tids(msg)) == 2, msg
    assert re.search(r"ctaid=\((0|1), 0, 0\)", msg)
    assert "shared array s[" in msg and "byte address 0x" in msg
    assert f"line {line('st_w')}" in msg and f"line {line('st_r')}" in msg
    assert "write by" in msg and "read by" in msg


def test_stencil_with_barrier_is_no_race():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    run(k_stencil, 2, 32, x, out, 1)
    xs = x.reshape(2, 32)
    np.testing.assert_array_equal(out, (xs + np.roll(xs, -1, axis=1)).reshape(-1))


@cuda.jit
def k_block_sum(x, out, sync):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]  # @red
        if sync:
            cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


def test_tiled_reduction_missing_barrier_is_a_race():
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(4, np.float32)
    msg = fails(RaceError, "race", k_block_sum, 4, 64, x, out, 0)
    assert len(tids(msg)) == 2 and "ctaid=(" in msg and "shared array s[" in msg
    assert f"line {line('red')}" in msg
    run(k_block_sum, 4, 64, x, out, 1)
    np.testing.assert_array_equal(out, x.reshape(4, 64).sum(axis=1))



def test_race_message_names_the_interval_and_where_the_barrier_goes():
    """A race names both accesses, their barrier interval and where a
    syncthreads() must go. Straight-line code: after the write, before the read; a tree whose
    levels share one interval: the read is in a later pass of the loop, the barrier at the
    end of the loop body."""
    x = np.arange(64, dtype=np.float32)
    msg = fails(RaceError, "race", k_stencil, 2, 32, x, np.zeros(64, np.float32), 0)
    assert "both in a block that reaches no syncthreads()" in msg, msg
    assert (f"A syncthreads() is needed after the write at line {line('st_w')}, before the "
            f"read at line {line('st_r')}") in msg, msg
    msg = fails(RaceError, "race", k_block_sum, 4, 64, np.arange(256, dtype=np.float32),
                np.zeros(4, np.float32), 0)
    assert "both after the block's last syncthreads() (the 1st, line " in msg, msg
    assert "the read is in a later pass" in msg and "of the loop" in msg, msg
    assert (f"A syncthreads() is needed after the write at line {line('red')}, before the "
            f"loop's next read at line {line('red')} \u2014 at the end of the loop body") in msg

    # only warp 0 runs the tree (t < 32 at every level): a syncwarp() is enough, and said
    assert "(only warp 0 runs these two lines here, so a cuda.syncwarp() is enough)" in msg


@cuda.jit
def k_tiles_no_second_sync(x, out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    acc = float32(0.0)
    for k0 in range(0, x.shape[0], 32):
        s[t] = x[k0 + t]  # @tile_w
        cuda.syncthreads()  # @tile_sync
        acc += s[(t + 1) % 32]  # @tile_r
    out[t] = acc


def test_race_across_loop_passes_names_the_next_pass():
    """The read of this pass against the next pass's write, with the one barrier of the loop
    between the write and the read: both in the interval between its 1st and 2nd passes."""
    msg = fails(RaceError, "race", k_tiles_no_second_sync, 1, 32,
                np.arange(64, dtype=np.float32), np.zeros(32, np.float32))
    assert f"both after 1 syncthreads() and before the 2nd (both at line {line('tile_sync')})" \
        in msg, msg
    assert "the write is in the next pass of the loop" in msg, msg
    assert (f"A syncthreads() is needed after the read at line {line('tile_r')}, before the "
            f"loop's next write at line {line('tile_w')} \u2014 at the end of the loop body") \
        in msg, msg
    assert msg.index("read by") < msg.index("write by"), msg     # in program order
    assert "syncwarp" not in msg, msg             # a one-warp block: syncthreads() it is


@cuda.jit(device=True)
def d_publish_then_read(s, v):
    t = cuda.threadIdx.x
    s[t] = v
    cuda.syncthreads()
    return s[(t + 1) % 32]  # @f3_r


@cuda.jit(device=True)
def d_publish(s, v):
    s[cuda.threadIdx.x] = v  # @f3_w
    cuda.syncthreads()
    return s[0]


@cuda.jit
def k_two_functions_one_buffer(x, out):
    s = cuda.shared.array(32, float32)
    a = d_publish_then_read(s, x[cuda.threadIdx.x])  # @f3_c1
    out[cuda.threadIdx.x] = d_publish(s, a)  # @f3_c2


def test_race_across_two_device_functions_is_in_call_order():
    """Two device functions sharing one buffer, the first without its closing barrier: the
    first one's read comes first in program order (the order the thread ran them, whatever
    their lines), and the barrier goes before the first one returns."""
    msg = fails(RaceError, "race", k_two_functions_one_buffer, 1, 32,
                np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
    r = f"line {line('f3_r')} of d_publish_then_read"
    w = f"line {line('f3_w')} of d_publish"
    assert msg.index("read by tid=") < msg.index("write by tid="), msg
    assert f"at {r} and write by" in msg and msg.count(f"at {w}") == 1, msg
    assert (f"the read is in the call of d_publish_then_read from line {line('f3_c1')} and the "
            f"write in the later call of d_publish from line {line('f3_c2')}") in msg, msg
    assert (f"A syncthreads() is needed after the read at {r}, before d_publish_then_read "
            "returns (or between the two calls)") in msg, msg
    assert "pass" not in msg, msg


@cuda.jit(device=True)
def d_exchange(s, v):
    t = cuda.threadIdx.x
    s[t] = v  # @f4_w
    cuda.syncthreads()
    return s[(t + 1) % 32]  # @f4_r


@cuda.jit
def k_one_function_twice(x, out, passes):
    s = cuda.shared.array(32, float32)
    v = x[cuda.threadIdx.x]
    if passes == 0:
        v = d_exchange(s, v)  # @f4_c1
        v = d_exchange(s, v)  # @f4_c2
    else:
        for _ in range(passes):
            v = d_exchange(s, v)  # @f4_loop
    out[cuda.threadIdx.x] = v


def test_race_across_two_calls_of_one_device_function_names_the_calls():
    """A device function without its closing barrier, called twice in a row: the write is in
    the second call, not in a loop's next pass; called from a loop: the next call, made by the
    loop's next pass. Either way the barrier goes before the function returns."""
    x = np.arange(32, dtype=np.float32)
    r, w = f"line {line('f4_r')} of d_exchange", f"line {line('f4_w')} of d_exchange"
    fix = (f"A syncthreads() is needed after the read at {r}, before d_exchange returns "
           "(or ")
    msg = fails(RaceError, "race", k_one_function_twice, 1, 32, x, np.zeros(32, np.float32), 0)
    assert msg.index("read by tid=") < msg.index("write by tid="), msg
    assert f"at {r} and write by" in msg and f"at {w}, both after 1 syncthreads()" in msg, msg
    assert (f"the write is in a later call of d_exchange (from line {line('f4_c2')}) than the "
            f"read (from line {line('f4_c1')})") in msg, msg
    assert fix + "between the two calls)" in msg and "loop" not in msg, msg
    msg = fails(RaceError, "race", k_one_function_twice, 1, 32, x, np.zeros(32, np.float32), 2)
    assert msg.index("read by tid=") < msg.index("write by tid="), msg
    assert (f"the write is in the next call of d_exchange (from line {line('f4_loop')}), made "
            "by the next pass of the loop") in msg, msg
    assert fix + "at the end of the loop body)" in msg, msg


@cuda.jit
def k_write_write(out, writers):
    s = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t < writers:
        s[0] = t  # @ww
    cuda.syncthreads()
    out[t] = s[0]


def test_write_write_race():
    out = np.zeros(32, np.int32)
    msg = fails(RaceError, "race", k_write_write, 1, 32, out, 2)
    assert tids(msg) == {"0, 0, 0", "1, 0, 0"}, msg
    assert msg.count("write by") == 2 and "shared array s[0]" in msg
    assert msg.count(f"line {line('ww')}") == 2
    # one instruction: the index is what to fix (a barrier cannot separate one store from
    # itself)
    assert "write the element from one instruction" in msg and "separate" not in msg, msg
    run(k_write_write, 1, 32, out, 1)
    assert set(out.tolist()) == {0}


@cuda.jit
def k_warp_exchange(x, out, sync):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = x[t]  # @wx_w
    if sync:
        cuda.syncwarp()
    lane = t % 32
    out[t] = s[t - lane + (lane + 1) % 32]  # @wx_r


@cuda.jit
def k_cross_warp_exchange(x, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncwarp()                   # orders a warp's own lanes only
    out[t] = s[(t + 1) % 64]  # @xw_r


def test_syncwarp_orders_the_lanes_of_one_warp():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    run(k_warp_exchange, 1, 64, x, out, 1)
    xs = x.reshape(2, 32)
    np.testing.assert_array_equal(out, np.roll(xs, -1, axis=1).reshape(-1))
    msg = fails(RaceError, "race", k_warp_exchange, 1, 64, x, out, 0)
    assert len(tids(msg)) == 2 and f"line {line('wx_w')}" in msg and f"line {line('wx_r')}" in msg


def test_syncwarp_does_not_order_different_warps():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    msg = fails(RaceError, "race", k_cross_warp_exchange, 1, 64, x, out)
    found = tids(msg)
    assert len(found) == 2 and f"line {line('xw_r')}" in msg
    warps = {int(t.split(",")[0]) // 32 for t in found}
    assert warps == {0, 1}, msg


@cuda.jit
def k_global_one_element(out, per_block):
    if cuda.threadIdx.x == 0:
        if per_block:
            out[cuda.blockIdx.x] = cuda.blockIdx.x + 1  # @gw_ok
        else:
            out[0] = cuda.blockIdx.x + 1  # @gw_race


def test_two_blocks_writing_one_global_element_is_a_race():
    out = np.zeros(2, np.int32)
    msg = fails(RaceError, "race", k_global_one_element, 2, 32, out, 0)
    assert "out[0]" in msg and f"line {line('gw_race')}" in msg and "tid=(0, 0, 0)" in msg
    assert "ctaid=(1, 0, 0)" in msg
    run(k_global_one_element, 2, 32, out, 1)
    np.testing.assert_array_equal(out, [1, 2])


def test_cross_block_race_names_both_threads_and_blocks():
    """A race is 'reported with both threads, the address and both source lines';
    across blocks too."""
    out = np.zeros(2, np.int32)
    msg = fails(RaceError, "race", k_global_one_element, 2, 32, out, 0)
    assert "ctaid=(0, 0, 0)" in msg and "ctaid=(1, 0, 0)" in msg, msg
    assert msg.count(f"line {line('gw_race')}") == 2, msg
    assert "address 0x" in msg, msg


@cuda.jit
def k_cross_block_read(out):
    if cuda.threadIdx.x == 0:
        if cuda.blockIdx.x == 0:
            out[0] = 1
        else:
            out[1] = out[0]  # @xb_read


def test_a_block_reading_what_another_block_writes_is_a_race():
    out = np.zeros(2, np.int32)
    msg = fails(RaceError, "race", k_cross_block_read, 2, 32, out)
    assert "out[0]" in msg and "ctaid=(" in msg


@cuda.jit
def k_global_same_block(out, writers):
    t = cuda.threadIdx.x
    if t < writers:
        out[0] = t  # @gsb


def test_two_threads_of_one_block_writing_one_global_element_is_a_race():
    out = np.zeros(1, np.int32)
    msg = fails(RaceError, "race", k_global_same_block, 1, 32, out, 3)
    assert len(tids(msg)) == 2 and "global array out[0]" in msg
    assert msg.count(f"line {line('gsb')}") == 2
    run(k_global_same_block, 1, 32, out, 1)
    assert out[0] == 0


@cuda.jit
def k_atomic_count(out):
    cuda.atomic.add(out, 0, 1)


@cuda.jit
def k_atomic_shared(out):
    s = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = 0
    cuda.syncthreads()
    cuda.atomic.add(s, 0, t)
    cuda.syncthreads()
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


def test_atomics_on_one_global_address_are_no_race():
    out = np.zeros(1, np.int32)
    st = run(k_atomic_count, 2, 64, out)
    assert out[0] == 128
    assert st.counters["atomics"] == 128                  # per-thread operations


def test_atomics_on_one_shared_address_are_no_race():
    out = np.zeros(2, np.int32)
    run(k_atomic_shared, 2, 64, out)
    np.testing.assert_array_equal(out, [sum(range(64))] * 2)


@cuda.jit
def k_atomic_at(out, k):
    cuda.atomic.add(out, k, 1)  # @atomic_at


def test_atomic_index_out_of_bounds():
    out = np.zeros(4, np.int32)
    for bad in (-1, 4):
        msg = fails(OutOfBoundsError, "out-of-bounds", k_atomic_at, 1, 8, out, bad)
        assert "tid=(0, 0, 0)" in msg and f"out[{bad}]" in msg
        assert f"line {line('atomic_at')}" in msg
    run(k_atomic_at, 1, 8, out, 3)
    np.testing.assert_array_equal(out, [0, 0, 0, 8])


@cuda.jit
def k_own_element(x):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    x[i] = x[i] * 2
    s[t] = x[i]
    s[t] = s[t] + 1
    x[i] = s[t]


def test_a_thread_reading_then_writing_its_own_element_is_no_race():
    x = np.arange(64, dtype=np.float32)
    run(k_own_element, 2, 32, x)
    np.testing.assert_array_equal(x, 2 * np.arange(64) + 1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_race_found_whatever_the_thread_order(seed):
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    fails(RaceError, "race", k_stencil, 2, 32, x, out, 0, shuffle=seed)
    out4 = np.zeros(4, np.float32)
    fails(RaceError, "race", k_block_sum, 4, 64, np.arange(256, dtype=np.float32), out4, 0,
          shuffle=seed)


def test_race_free_results_identical_across_shuffles():
    rng = np.random.default_rng(10)
    x = rng.standard_normal(256).astype(np.float32)
    A = rng.standard_normal((20, 13)).astype(np.float32)
    B = rng.standard_normal((13, 19)).astype(np.float32)
    ref_sum = ref_c = None
    for seed in (None, 0, 1, 2):
        out = np.zeros(4, np.float32)
        run(k_block_sum, 4, 64, x, out, 1, shuffle=seed)
        C = np.zeros((20, 19), np.float32)
        run(k_tiled_gemm, (3, 3), (TILE, TILE), A, B, C, shuffle=seed)
        if ref_sum is None:
            ref_sum, ref_c = out.copy(), C.copy()
        assert out.tobytes() == ref_sum.tobytes()
        assert C.tobytes() == ref_c.tobytes()
    np.testing.assert_allclose(ref_c, A @ B, rtol=1e-5, atol=1e-5)


@cuda.jit
def k_race_after_long_work(x, out):
    s = cuda.shared.array(2, float32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = 1.0  # @long_w
        acc = float32(0.0)
        for k in range(x.shape[0]):
            acc += x[k]
        out[1] = acc
    elif t == 1:
        out[0] = s[0]  # @long_r


def test_race_found_when_an_interval_outlasts_a_slice(monkeypatch):
    """A thread that makes more than SLICE accesses in one barrier interval is switched out
    and the log so far is analysed; a race between an access before that switch and one after
    it must still be found (the default SLICE is 2**20 accesses; lowered here)."""
    monkeypatch.setattr(engine, "SLICE", 64)
    x = np.ones(300, np.float32)
    out = np.zeros(2, np.float32)
    msg = fails(RaceError, "race", k_race_after_long_work, 1, 32, x, out)
    assert f"line {line('long_w')}" in msg and f"line {line('long_r')}" in msg


# ------------------------------------------------------------------------------------------
# watchdog


@cuda.jit
def k_spin_plain(flag, out):
    t = cuda.threadIdx.x
    if t == 0:
        while flag[0] == 0:  # @spin
            pass
    out[t] = 1


@cuda.jit
def k_spin_atomic(flag, out, setter):
    t = cuda.threadIdx.x
    if t == 0:
        while cuda.atomic.add(flag, 0, 0) == 0:  # @spin_atomic
            pass
        out[0] = 1
    elif t == setter:
        acc = 0
        for k in range(200):
            acc += k
        out[t] = acc
        cuda.atomic.exch(flag, 0, 1)


@pytest.fixture
def fast_watchdog(monkeypatch):
    monkeypatch.setattr(engine, "SLICE", 2000)
    monkeypatch.setattr(engine, "STALE_SLICES", 3)


def test_spin_on_a_flag_nobody_writes_is_stuck(fast_watchdog):
    flag = np.zeros(1, np.int32)
    out = np.zeros(32, np.int32)
    t0 = time.monotonic()
    msg = fails(StuckKernelError, "stuck", k_spin_plain, 1, 32, flag, out)
    assert time.monotonic() - t0 < 5
    assert "ctaid=(0, 0, 0)" in msg and "tid=(0, 0, 0)" in msg
    assert f"tid=(0, 0, 0) line {line('spin')}" in msg, msg


def test_spin_on_a_flag_already_set_completes(fast_watchdog):
    flag = np.ones(1, np.int32)
    out = np.zeros(32, np.int32)
    run(k_spin_plain, 1, 32, flag, out)
    assert set(out.tolist()) == {1}


def test_spin_on_an_atomic_another_thread_sets_completes(fast_watchdog):
    flag = np.zeros(1, np.int32)
    out = np.zeros(32, np.int32)
    run(k_spin_atomic, 1, 32, flag, out, 31)
    assert out[0] == 1 and out[31] == sum(range(200)) and flag[0] == 1


def test_spin_on_an_atomic_nobody_sets_is_stuck(fast_watchdog):
    flag = np.zeros(1, np.int32)
    out = np.zeros(32, np.int32)
    msg = fails(StuckKernelError, "stuck", k_spin_atomic, 1, 32, flag, out, 99)
    assert f"tid=(0, 0, 0) line {line('spin_atomic')}" in msg, msg


@cuda.jit
def k_many_barriers(out, n):
    t = cuda.threadIdx.x
    for _ in range(n):
        out[t] += 1
        time.sleep(0.0002)
        cuda.syncthreads()


def test_wall_clock_watchdog():
    out = np.zeros(32, np.int32)
    msg = fails(StuckKernelError, "stuck", k_many_barriers, 1, 32, out, 100, watchdog_s=0.05)
    assert "watchdog" in msg and "ctaid=(0, 0, 0)" in msg
    out[:] = 0
    run(k_many_barriers, 1, 32, out, 3, watchdog_s=60)
    assert set(out.tolist()) == {3}


@cuda.jit
def k_busy_forever(out):
    while True:
        pass


def test_busy_loop_without_memory_access_is_caught_by_the_alarm():
    """A loop that never touches memory never switches greenlets; the wall-clock watchdog's
    SIGALRM (main thread only) still stops it."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the SIGALRM watchdog works in the main thread only")
    t0 = time.monotonic()
    msg = fails(StuckKernelError, "stuck", k_busy_forever, 1, 4, np.zeros(1, np.int32),
                watchdog_s=0.5)
    assert "watchdog" in msg and time.monotonic() - t0 < 5


# ------------------------------------------------------------------------------------------
# per-thread context


@cuda.jit
def k_errstate(out):
    t = cuda.threadIdx.x
    if t == 0:
        np.seterr(divide="raise")     # thread 0's own numpy error state
    cuda.syncthreads()
    if t != 0:
        out[t] = np.float32(1.0) / np.float32(0.0)


def test_numpy_error_state_does_not_leak_between_threads():
    out = np.zeros(32, np.float32)
    with np.errstate(divide="ignore"):
        run(k_errstate, 1, 32, out)
        assert np.geterr()["divide"] == "ignore"     # nor into the launching thread
    assert np.isinf(out[1:]).all()


_TLS = threading.local()


@cuda.jit
def k_tls(out):
    t = cuda.threadIdx.x
    _TLS.v = t
    cuda.syncthreads()
    out[t] = _TLS.v


def test_threading_local_is_shared_by_a_blocks_threads_known():
    """Known and documented: the threads of a block are greenlets of one OS thread."""
    out = np.full(32, -1, np.int32)
    run(k_tls, 1, 32, out)
    assert len(set(out.tolist())) == 1


# ------------------------------------------------------------------------------------------
# traffic counters


@cuda.jit
def k_copy_stride(x, out, stride):
    i = cuda.grid(1)
    out[i] = x[i * stride]  # @copy


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (8, 32), (32, 32)])
def test_global_sectors_per_warp_request(stride, sectors):
    x = np.arange(32 * stride, dtype=np.float32)
    out = np.zeros(32, np.float32)
    c = run(k_copy_stride, 1, 32, x, out, stride).counters
    assert c["global_load_requests"] == 1 and c["global_store_requests"] == 1
    assert c["global_load_sectors"] == sectors and c["global_store_sectors"] == 4
    assert c["global_load_elements"] == 32 and c["global_load_bytes"] == 128
    assert c["global_store_elements"] == 32 and c["global_store_bytes"] == 128
    assert c["dram_read_bytes"] == 32 * sectors and c["dram_write_bytes"] == 128
    np.testing.assert_array_equal(out, x[::stride])


def test_float64_global_warp_read_is_8_sectors():
    x = np.arange(32, dtype=np.float64)
    c = run(k_copy_stride, 1, 32, x, np.zeros(32), 1).counters
    assert c["global_load_sectors"] == 8 and c["global_load_bytes"] == 256


@cuda.jit
def k_sites(x, out, flag):
    i = cuda.grid(1)
    a = x[i * 8]  # @site-column
    b = x[0]  # @site-broadcast
    if i % 2 == 0:
        c = x[i]  # @site-even
    else:
        c = x[i + 1]  # @site-odd
    out[i] = a + b + c + flag  # @site-store


def test_per_site_traffic_with_the_sites_option():
    """``sites=True``: one row per access site (source line) and array; a broadcast's 128
    bytes asked use its one sector (32 bytes); two divergent lines at one request index are
    two requests, as on a GPU (the launch's counters merge them: one request of 5 sectors
    where the sites see 4 + 5). Without the option (or with ``checks="fast"``) there are
    none."""
    x = np.arange(8 * 64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    st = run(k_sites, 2, 32, x, out, 0.0, sites=True)
    got = {s_["line"]: s_ for s_ in st.sites}
    assert set(got) == {line(t) for t in ("site-column", "site-broadcast", "site-even",
                                          "site-odd", "site-store")}
    col, bc = got[line("site-column")], got[line("site-broadcast")]
    assert (col["array"], col["kind"], col["requests"]) == ("x", "load", 2)
    assert col["bytes_moved"] == 2 * 32 * 32 and col["bytes_used"] == 2 * 128
    assert bc["bytes_asked"] == 2 * 128 and bc["bytes_moved"] == bc["bytes_used"] == 2 * 32
    even, odd = got[line("site-even")], got[line("site-odd")]
    assert even["requests"] == odd["requests"] == 2       # 16 lanes each, every other float
    assert even["bytes_asked"] == even["bytes_used"] == 2 * 64 == even["bytes_moved"] // 2
    assert odd["bytes_moved"] == 2 * 5 * 32                # x[2] .. x[32]: 5 sectors
    assert got[line("site-store")]["kind"] == "store"
    assert got[line("site-store")]["where"] == f"line {line('site-store')}"
    c = st.counters
    assert sum(s_["bytes_moved"] for s_ in st.sites) == 32 * (
        c["global_load_sectors"] + c["global_store_sectors"] + 2 * 4)
    assert sum(s_["bytes_asked"] for s_ in st.sites) == (c["global_load_bytes"]
                                                         + c["global_store_bytes"])
    plain = run(k_sites, 2, 32, x, out, 0.0)
    assert plain.sites is None and plain.counters == c
    assert run(k_sites, 2, 32, x, out, 0.0, sites=True, checks="fast").sites is None


@cuda.jit
def k_one_block_works(x, out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    if cuda.blockIdx.x != 1:
        return
    for r in range(4):
        s[t] = x[r * 32 + t]
        cuda.syncthreads()
        out[r * 32 + t] = s[31 - t]
        cuda.syncthreads()


def test_block_max_is_the_busiest_blocks_work():
    """``LaunchStats.block_max``: the most global sectors, shared wavefronts and barriers one
    block had (here block 1 does everything: 4 x (4 load + 4 store) sectors, 4 x 2
    wavefronts, 8 barriers); with ``checks="fast"`` only barriers are counted."""
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    st = run(k_one_block_works, 4, 32, x, out)
    np.testing.assert_array_equal(out.reshape(4, 32), x.reshape(4, 32)[:, ::-1])
    assert st.block_max == {"global_sectors": 32, "shared_wavefronts": 8, "barriers": 8}
    c = st.counters
    assert c["global_load_sectors"] + c["global_store_sectors"] == 32 and c["barriers"] == 8
    even = run(k_copy_stride, 4, 32, np.arange(128, dtype=np.float32), np.zeros(128), 1)
    assert even.block_max == {"global_sectors": 4 + 8, "shared_wavefronts": 0, "barriers": 0}
    fast = run(k_one_block_works, 4, 32, x, out, checks="fast")
    assert fast.block_max == {"global_sectors": 0, "shared_wavefronts": 0, "barriers": 8}


@cuda.jit
def k_read_twice(x, out):
    i = cuda.threadIdx.x
    out[cuda.grid(1)] = x[i] + x[i]


def test_dram_bytes_count_each_sector_once_per_launch():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(128, np.float32)
    c = run(k_read_twice, 4, 32, x, out).counters
    assert c["global_load_requests"] == 4 * 2 and c["global_load_sectors"] == 4 * 2 * 4
    assert c["dram_read_bytes"] == 128 and c["dram_write_bytes"] == 512
    assert c["blocks"] == 4 and c["threads"] == 128 and c["warps"] == 4


@cuda.jit
def k_bank(out, stride):
    s = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    for k in range(32):
        s[k * 32 + t] = k
    cuda.syncthreads()
    out[t] = s[(t * stride) % 1024]  # @bank_r


@pytest.mark.parametrize("stride,waves", [(1, 1), (2, 2), (4, 4), (32, 32), (0, 1), (33, 1)])
def test_shared_bank_conflicts(stride, waves):
    """(0: broadcast of one word, free; 33: the padded layout's stride, conflict-free.)"""
    out = np.zeros(32, np.float32)
    c = run(k_bank, 1, 32, out, stride).counters
    assert c["shared_store_requests"] == 32 and c["shared_store_wavefronts"] == 32
    assert c["shared_load_requests"] == 1 and c["shared_load_wavefronts"] == waves
    assert c["shared_bytes_per_block"] == 4096 and c["barriers"] == 1



@pytest.mark.parametrize("stride,degree", [(1, 1), (2, 2), (16, 16), (32, 32), (0, 1), (33, 1)])
def test_shared_bank_conflicts_per_site(stride, degree):
    """``sites=True``: per shared access site, requests, wavefronts, the conflict-free
    wavefronts the same requests need (ceil(distinct words / 32)) and the worst request's,
    summing to the launch's counters."""
    out = np.zeros(32, np.float32)
    st = run(k_bank, 1, 32, out, stride, sites=True)
    got = {(r["kind"], r["array"]): r for r in st.shared_sites}
    load, store = got["load", "s"], got["store", "s"]
    assert load["line"] == line("bank_r") and load["where"] == f"line {line('bank_r')}"
    assert (load["requests"], load["wavefronts"], load["ideal_wavefronts"],
            load["worst_wavefronts"]) == (1, degree, 1, degree)
    assert (store["requests"], store["wavefronts"], store["ideal_wavefronts"]) == (32, 32, 32)
    c = st.counters
    assert sum(r["wavefronts"] for r in st.shared_sites) == (c["shared_load_wavefronts"]
                                                             + c["shared_store_wavefronts"])
    assert run(k_bank, 1, 32, out, stride).shared_sites is None


@cuda.jit
def k_bank_blocks(out, stride):
    s = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    for k in range(32):
        s[k * 32 + t] = k
    cuda.syncthreads()
    out[cuda.grid(1)] = s[(t * stride) % 1024]


def test_shared_sites_of_blocks_with_one_log_are_counted_once_a_block():
    """Blocks with identical shared-memory logs reuse the first one's analysis (the memo):
    their per-site rows are added as well."""
    out = np.zeros(128, np.float32)
    one = run(k_bank_blocks, 1, 32, out, 16, sites=True).shared_sites
    four = run(k_bank_blocks, 4, 32, out, 16, sites=True).shared_sites
    assert len(one) == len(four) == 2
    for a, b in zip(one, four):
        assert b["requests"] == 4 * a["requests"] and b["wavefronts"] == 4 * a["wavefronts"]
        assert b["worst_wavefronts"] == a["worst_wavefronts"]


@cuda.jit
def k_shared_f64(out):
    s = cuda.shared.array(32, float64)
    t = cuda.threadIdx.x
    s[t] = t
    cuda.syncthreads()
    out[t] = s[t]


def test_float64_shared_row_read_is_two_wavefronts():
    c = run(k_shared_f64, 1, 32, np.zeros(32)).counters
    assert c["shared_load_requests"] == 1 and c["shared_load_wavefronts"] == 2
    assert c["shared_store_wavefronts"] == 2


@cuda.jit
def k_tiled_gemm(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col, row = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[row, k + tx] if row < A.shape[0] and k + tx < A.shape[1] else 0.0
        sB[ty, tx] = B[k + ty, col] if col < B.shape[1] and k + ty < B.shape[0] else 0.0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if row < C.shape[0] and col < C.shape[1]:
        C[row, col] = acc


def test_barriers_shuffles_votes_atomics_are_counted():
    A = np.ones((16, 16), np.float32)
    c = run(k_tiled_gemm, (2, 2), (TILE, TILE), A, A, np.zeros((16, 16), np.float32)).counters
    assert c["barriers"] == 4 * 2 * 2                   # blocks x tiles x 2
    c = run(k_reduce_down, 1, 64, _ints(64), np.zeros(2, np.int32)).counters
    assert c["shuffles"] == 10 and c["votes"] == 0 and c["atomics"] == 0
    c = run(k_votes, 1, 32, _ints(32), np.zeros((32, 4), np.int64)).counters
    assert c["votes"] == 4 and c["shuffles"] == 0


def test_launch_stats_and_capture_total():
    x = np.arange(64, dtype=np.float32)
    with sim.capture(gpu_compile=False) as cap:
        k_copy_stride[2, 32](x, np.zeros(64, np.float32), 1)
        k_bank[1, 32](np.zeros(32, np.float32), 1)
    a, b = cap.launches
    assert (a.name, a.grid, a.block) == ("k_copy_stride", (2, 1, 1), (32, 1, 1))
    assert b.name == "k_bank" and a.ptx_counts is None and a.trace is None
    assert set(a.counters) == set(engine.COUNTER_KEYS)
    assert all(isinstance(v, int) for v in a.counters.values())
    tot = cap.total()
    assert tot["global_load_requests"] == 2 + 0 and tot["blocks"] == 3
    assert tot["global_store_requests"] == 2 + 1
    assert tot["shared_bytes_per_block"] == 4096 and tot["flops"] == 0


def test_counters_deterministic_across_runs_and_shuffles():
    rng = np.random.default_rng(11)
    A = rng.standard_normal((20, 13)).astype(np.float32)
    B = rng.standard_normal((13, 19)).astype(np.float32)
    seen = []
    for seed in (None, None, 0, 5):
        C = np.zeros((20, 19), np.float32)
        seen.append(run(k_tiled_gemm, (3, 3), (TILE, TILE), A, B, C, shuffle=seed).counters)
        x = rng.standard_normal(256).astype(np.float32)
        seen[-1] = (seen[-1], run(k_block_sum, 4, 64, x, np.zeros(4, np.float32), 1,
                                  shuffle=seed).counters)
    assert all(s == seen[0] for s in seen)
    c = seen[0][0]
    assert c["global_load_requests"] > 0 and c["shared_load_wavefronts"] > 0


# ------------------------------------------------------------------------------------------
# bit-identical with the stock executor, fallback, options


def test_tiled_gemm_and_reduction_bit_identical_to_the_stock_executor():
    rng = np.random.default_rng(12)
    A = rng.standard_normal((20, 13)).astype(np.float32)
    B = rng.standard_normal((13, 19)).astype(np.float32)
    C1, C2 = np.zeros((20, 19), np.float32), np.zeros((20, 19), np.float32)
    run(k_tiled_gemm, (3, 3), (TILE, TILE), A, B, C1)
    stock(k_tiled_gemm, (3, 3), (TILE, TILE), A, B, C2)
    assert C1.tobytes() == C2.tobytes()
    x = rng.standard_normal(256).astype(np.float32)
    s1, s2 = np.zeros(4, np.float32), np.zeros(4, np.float32)
    run(k_block_sum, 4, 64, x, s1, 1)
    stock(k_block_sum, 4, 64, x, s2, 1)
    assert s1.tobytes() == s2.tobytes()


def test_stock_executor_fallback_runs_numba_cudas_simulator():
    # through configure() too
    sim.configure(executor="stock")
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    with sim.capture(gpu_compile=False) as cap:
        k_global_1d[2, 32](x, out, np.zeros(1), -1, 0)   # the stock simulator wraps -1
    assert cap.launches == []
    assert out[37] == x[-1]
    sim.configure(executor="kernellab")
    with pytest.raises(OutOfBoundsError):
        run(k_global_1d, 2, 32, x, out, out, -1, 0)


@pytest.mark.parametrize("opts", [dict(executor="bogus"), dict(checks="slow"),
                                  dict(no_such_option=1)])
def test_configure_rejects_bad_options(opts):
    before = sim.options()
    with pytest.raises(ValueError):
        sim.configure(**opts)
    assert sim.options() == before


def test_options_and_capture_restore():
    before = sim.options()
    assert before["race_check"] is True and before["executor"] in ("kernellab", "stock")
    with sim.capture(shuffle=3, gpu_compile=False):
        assert sim.options()["shuffle"] == 3
    assert sim.options() == before


def test_race_check_off_lets_a_race_through():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    run(k_stencil, 2, 32, x, out, 0, race_check=False)


def test_fast_checks_mode():
    """checks="fast": bounds, poison and divergence stay; races, uninitialised reads and the
    traffic counters are off."""
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    st = run(k_stencil, 2, 32, x, out, 0, checks="fast")       # the race is not looked for
    assert st.checks == "fast"
    c = st.counters
    assert c["global_load_requests"] == 0 and c["shared_load_wavefronts"] == 0
    assert c["dram_read_bytes"] == 0
    assert c["blocks"] == 2 and c["threads"] == 64
    fails(OutOfBoundsError, "out-of-bounds", k_global_1d, 2, 32, x, out, out, -1, 0,
          checks="fast")
    fails(OutOfBoundsError, "out-of-bounds", k_shared_1d, 1, 32, out, 32, checks="fast")
    fails(DivergenceError, "divergence", k_div_sync, 1, 32, np.zeros(32, np.int32), 16,
          checks="fast")
    fails(DivergenceError, "divergence", k_shfl_after_exit, 1, 32, _ints(32),
          np.zeros(32, np.int32), FULL, checks="fast")
    st = run(k_block_sum, 4, 64, x.repeat(4), np.zeros(4, np.float32), 1, checks="fast")
    assert st.counters["barriers"] == 4 * 7
    of, oi = np.zeros(8, np.float32), np.zeros(8, np.int32)
    run(k_shared_peek, 1, 8, of, oi, checks="fast")             # poison still there
    assert np.isnan(of).all()


@cuda.jit
def k_kernel_exception(out):
    t = cuda.threadIdx.x
    out[t] = 1 // (t - 3)  # @zerodiv


def test_python_exception_in_a_thread_is_a_kernel_error():
    out = np.zeros(8, np.int32)
    with pytest.raises(KernelError) as info:
        run(k_kernel_exception, 1, 8, out)
    msg = str(info.value)
    assert info.value.kind == "kernel-exception"
    assert "tid=(3, 0, 0)" in msg and "ctaid=(0, 0, 0)" in msg and "ZeroDivisionError" in msg
    assert f"line {line('zerodiv')}" in msg
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# ------------------------------------------------------------------------------------------
# the GPU-compile check


@pytest.fixture
def ptx_cache(tmp_path, monkeypatch):
    from kernellab.sim import ptx
    ok, why = ptx.ptx_available()
    if not ok:
        pytest.skip(f"no GPU compiler: {why}")
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ptx.clear_cache()
    yield
    ptx.clear_cache()


@cuda.jit
def k_stringly(out):
    i = cuda.grid(1)
    out[i] = len(str(i))


def test_python_only_kernel_is_a_gpu_compile_error(ptx_cache):
    out = np.zeros(4, np.int64)
    stock(k_stringly, 1, 4, out)                     # the stock simulator runs any Python
    assert set(out.tolist()) == {1}
    msg = fails(GPUCompileError, "gpu-compile", k_stringly, 1, 4, out, gpu_compile=True)
    assert "k_stringly" in msg and "str" in msg


def test_gpu_compile_is_on_by_default_and_gives_ptx_counts(ptx_cache):
    if "KERNELLAB_SIM_GPU_COMPILE" not in os.environ:
        assert sim.options()["gpu_compile"] is True
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    st = run(k_stencil, 2, 32, x, out, 1, gpu_compile=True)
    assert st.ptx_counts is not None
    assert st.ptx_counts["bar.sync"] >= 1 and st.ptx_counts["ld.shared"] >= 1


# ------------------------------------------------------------------------------------------
# the trace


@cuda.jit
def k_trace(x, out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i]  # @tr_a
    cuda.syncthreads()
    out[i] = s[31 - t]  # @tr_b


def test_trace_holds_the_first_blocks_accesses_with_lines():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    st = run(k_trace, 2, 32, x, out, trace=True)
    tr = st.trace
    assert tr is not None and tr.dtype == engine.TRACE_DTYPE
    assert len(tr) == 4 * 32                          # block 0 only: 2 global + 2 shared each
    assert set(tr["tid"].tolist()) == set(range(32))
    assert (tr["warp"] == 0).all() and (tr["lane"] == tr["tid"]).all()
    for space, kind, arr, ln, off in [("g", "r", "x", line("tr_a"), lambda t: t),
                                      ("s", "w", "s", line("tr_a"), lambda t: t),
                                      ("s", "r", "s", line("tr_b"), lambda t: 31 - t),
                                      ("g", "w", "out", line("tr_b"), lambda t: t)]:
        m = (tr["space"] == space) & (tr["kind"] == kind) & (tr["array"] == arr)
        sub = tr[m]
        assert len(sub) == 32, (space, kind, arr)
        assert set(sub["line"].tolist()) == {ln}, (arr, kind, set(sub["line"].tolist()), ln)
        np.testing.assert_array_equal(sub["offset"], off(sub["tid"]))
        assert len(set(sub["request"].tolist())) == 1      # one warp-level request
        base = sub["addr"] - sub["offset"] * 4
        assert len(set(base.tolist())) == 1
        if space == "g":
            assert base[0] % 256 == 0
    assert run(k_trace, 2, 32, x, out).trace is None


# ------------------------------------------------------------------------------------------
# regressions from the engine review (repros in the review's b1..b19 scripts): numpy integer
# indices, shared-only blocks, row / strided / column views, aliased arguments, activemask and
# syncwarp masks, atomics in the log, dynamic shared memory by dtype, the stale-slice watchdog,
# record arrays, dp4a on narrow unsigned operands


@cuda.jit
def k_gather(idx, x, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        j = idx[i]                   # a numpy integer of idx's dtype
        out[i] = x[j]


@pytest.mark.parametrize("checks", ["full", "fast"])
@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.int16, np.int64, np.uint32])
def test_numpy_integer_index_gather(dt, checks):
    rng = np.random.default_rng(20)
    x = (np.arange(200, dtype=np.float32) * 10 + 1)
    idx = rng.permutation(200)[:64].astype(dt)
    out = np.zeros(64, np.float32)
    run(k_gather, 2, 32, idx, x, out, checks=checks)
    np.testing.assert_array_equal(out, x[idx.astype(np.int64)])


@cuda.jit
def k_hist_u8(img, out, bins):
    h = cuda.shared.array(256, int32)
    t = cuda.threadIdx.x
    if t < 256:
        h[t] = 0
    cuda.syncthreads()
    v = img[cuda.grid(1)]                # numpy uint8
    cuda.atomic.add(h, v, 1)
    cuda.syncthreads()
    out[cuda.grid(1)] = h[v]             # plain shared read with a uint8 index
    if t < 256:
        cuda.atomic.add(bins, t, h[t])


@pytest.mark.parametrize("checks", ["full", "fast"])
def test_shared_histogram_indexed_by_uint8(checks):
    img = (np.arange(512) % 7 * 37 % 256).astype(np.uint8)
    out = np.zeros(512, np.int32)
    bins = np.zeros(256, np.int32)
    run(k_hist_u8, 2, 256, img, out, bins, checks=checks)
    per_block = [np.bincount(img[b * 256:(b + 1) * 256], minlength=256) for b in range(2)]
    np.testing.assert_array_equal(out, np.concatenate(
        [per_block[b][img[b * 256:(b + 1) * 256]] for b in range(2)]))
    np.testing.assert_array_equal(bins, np.bincount(img, minlength=256))


@cuda.jit
def k_int16_row(A, rows, out):
    t = cuda.threadIdx.x
    r = rows[t]                          # numpy int16: r * A.shape[1] must not wrap in 16 bits
    out[t] = A[r, 5]


@pytest.mark.parametrize("checks", ["full", "fast"])
def test_int16_row_index_does_not_wrap(checks):
    A = np.arange(300 * 200, dtype=np.float32).reshape(300, 200)
    rows = np.array([200, 299, 0, 164, 250, 1, 2, 3], np.int16)
    out = np.zeros(8, np.float32)
    run(k_int16_row, 1, 8, A, rows, out, checks=checks)
    np.testing.assert_array_equal(out, A[rows.astype(np.int64), 5])


@cuda.jit
def k_shared_only_block(out, n):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    s[t] = t
    cuda.syncthreads()
    v = s[31 - t]
    i = cuda.grid(1)
    if i < n:                            # blocks past n touch shared memory only
        out[i] = v


@pytest.mark.parametrize("checks", ["full", "fast"])
def test_a_block_touching_only_shared_memory_works(checks):
    out = np.zeros(32, np.float32)
    st = run(k_shared_only_block, 3, 32, out, 32, checks=checks)
    np.testing.assert_array_equal(out, np.arange(32, dtype=np.float32)[::-1])
    assert st.counters["blocks"] == 3
    if checks == "full":
        assert st.counters["shared_load_requests"] == 3
        assert st.counters["global_store_requests"] == 1


@cuda.jit
def k_row_view(A, out, bad):
    i = cuda.threadIdx.x
    r = bad if i == 2 else i
    row = A[r]  # @rowview
    out[i] = row[0] + row[1]


@cuda.jit
def k_row_view_store(A, out):
    i = cuda.threadIdx.x
    src = A[i]
    dst = out[i]
    dst[0] = src[1]
    dst[1] = src[0]


def test_row_view_of_a_2d_argument():
    A = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = np.zeros(4, np.float32)
    run(k_row_view, 1, 4, A, out, 2)
    np.testing.assert_array_equal(out, A[:, 0] + A[:, 1])
    o2 = np.zeros((4, 2), np.float32)
    run(k_row_view_store, 1, 4, A, o2)
    np.testing.assert_array_equal(o2, A[:, ::-1])


@pytest.mark.parametrize("bad", [4, -1])
def test_row_view_with_a_bad_row_index_is_out_of_bounds(bad):
    A = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = np.zeros(4, np.float32)
    msg = fails(OutOfBoundsError, "out-of-bounds", k_row_view, 1, 4, A, out, bad)
    assert "tid=(2, 0, 0)" in msg and f"line {line('rowview')}" in msg, msg


@cuda.jit
def k_double(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] * 2


@cuda.jit
def k_scale_inplace(col, f):
    i = cuda.grid(1)
    if i < col.shape[0]:
        col[i] *= f


@pytest.mark.parametrize("view", ["[::2]", "[::-1]", "[3:14:3]", "[::-2]"])
def test_strided_and_reversed_device_views(view):
    x = np.arange(16, dtype=np.float32) + 1
    sel = eval("x" + view)
    results = []
    for how in ("engine", "stock"):
        d = cuda.to_device(x)  # noqa: F841 (read by the eval below)
        v = eval("d" + view)
        out = np.zeros(v.shape[0], np.float32)
        if how == "engine":
            run(k_double, 1, 32, v, out)
        else:
            stock(k_double, 1, 32, v, out)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], sel * 2)


def test_column_view_of_a_device_matrix_in_place():
    A = np.arange(32, dtype=np.float32).reshape(8, 4) + 1
    results = []
    for how in ("engine", "stock"):
        dA = cuda.to_device(A)
        if how == "engine":
            run(k_scale_inplace, 1, 8, dA[:, 1], np.float32(2.0))
        else:
            stock(k_scale_inplace, 1, 8, dA[:, 1], np.float32(2.0))
        results.append(dA.copy_to_host())
    exp = A.copy()
    exp[:, 1] *= 2
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], exp)


@cuda.jit
def k_smooth(src, dst):
    i = cuda.grid(1)
    if 0 < i < src.shape[0] - 1:
        dst[i] = (src[i - 1] + src[i + 1]) * 0.5  # @smooth


def test_one_device_array_passed_twice_to_an_in_place_stencil_is_a_race():
    x = np.arange(32, dtype=np.float32)
    d = cuda.to_device(x)
    msg = fails(RaceError, "race", k_smooth, 1, 32, d, d)
    assert len(tids(msg)) == 2 and f"line {line('smooth')}" in msg, msg
    # overlapping views of one device array: a race too
    d = cuda.to_device(np.arange(64, dtype=np.float32))
    fails(RaceError, "race", k_smooth, 1, 32, d[0:32], d[1:33])
    # one *host* array passed twice is not aliased: numba-cuda copies each host argument to
    # the device on its own (dispatcher ``_prepare_args``: ``wrap_arg(val).to_device`` per
    # argument), so dst's copy, written back last, is the smoothing of the original
    sq = x ** 2
    h = sq.copy()
    run(k_smooth, 1, 32, h, h)
    exp = sq.copy()
    exp[1:-1] = (sq[:-2] + sq[2:]) * 0.5
    np.testing.assert_array_equal(h, exp)
    # two distinct arrays: correct and race-free
    src, dst = cuda.to_device(x), cuda.to_device(np.zeros(32, np.float32))
    run(k_smooth, 1, 32, src, dst)
    exp = np.zeros(32, np.float32)
    exp[1:-1] = (x[:-2] + x[2:]) * 0.5
    np.testing.assert_array_equal(dst.copy_to_host(), exp)


@cuda.jit
def k_activemask_branches(out):
    i = cuda.grid(1)
    if cuda.laneid < 16:
        out[i] = cuda.activemask()      # lanes 0-15 only
    else:
        out[i] = cuda.activemask()      # lanes 16-31 only


@pytest.mark.parametrize("shuffle", [None, 1])
def test_activemask_in_two_divergent_branches(shuffle):
    out = np.zeros(64, np.int64)
    run(k_activemask_branches, 1, 64, out, shuffle=shuffle)
    exp = np.tile(np.repeat(np.array([0xFFFF, 0xFFFF0000], np.int64), 16), 2)
    np.testing.assert_array_equal(out & FULL, exp)


@cuda.jit
def k_syncwarp_mask(out, mode):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    s[t] = 0
    cuda.syncthreads()
    if t == 0:
        s[0] = 1.0  # @swm_w
    if mode == 0:
        cuda.syncwarp(FULL)
    elif mode == 1:
        if t < 16:
            cuda.syncwarp(0xFFFF)           # lanes 0-15 only
        else:
            cuda.syncwarp(0xFFFF0000)       # lanes 16-31 only
    elif t < 16:
        cuda.syncwarp(0xFFFF)               # lanes 16-31 do not sync at all
    if t == 16:
        out[0] = s[0]  # @swm_r
    cuda.syncthreads()


@pytest.mark.parametrize("mode", [1, 2])
def test_partial_syncwarp_does_not_order_lanes_outside_its_mask(mode):
    out = np.zeros(1, np.float32)
    msg = fails(RaceError, "race", k_syncwarp_mask, 1, 32, out, mode)
    assert tids(msg) == {"0, 0, 0", "16, 0, 0"}, msg
    assert f"line {line('swm_w')}" in msg and f"line {line('swm_r')}" in msg


@cuda.jit
def k_syncwarp_then_write(out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    s[t] = 0
    cuda.syncthreads()
    if t < 16:
        cuda.syncwarp(0xFFFF)               # lanes 0-15 only ...
        if t == 0:
            s[0] = 1.0  # @swt_w
    elif t == 16:
        out[0] = s[0]  # @swt_r
    cuda.syncthreads()


def test_lane_0_writing_after_a_half_warp_syncwarp_races_with_lane_16():
    """Lane 0 is past its syncwarp epoch, lane 16 never synced: they are not ordered (the
    engine once took different epochs of one warp as ordered whatever the mask)."""
    out = np.zeros(1, np.float32)
    msg = fails(RaceError, "race", k_syncwarp_then_write, 1, 32, out)
    assert tids(msg) == {"0, 0, 0", "16, 0, 0"}, msg
    assert f"line {line('swt_w')}" in msg and f"line {line('swt_r')}" in msg


def test_full_syncwarp_orders_lane_0_write_with_lane_16_read():
    out = np.zeros(1, np.float32)
    run(k_syncwarp_mask, 1, 32, out, 0)
    assert out[0] == 1.0


@cuda.jit
def k_store_vs_atomics(out, sync):
    cnt = cuda.shared.array(1, int32)
    if cuda.threadIdx.x == 0:
        cnt[0] = 0  # @sva_w
    if sync:
        cuda.syncthreads()
    cuda.atomic.add(cnt, 0, 1)  # @sva_a
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        out[0] = cnt[0]


def test_plain_store_racing_with_atomics_on_one_shared_address_is_a_race():
    out = np.zeros(1, np.int32)
    msg = fails(RaceError, "race", k_store_vs_atomics, 1, 64, out, 0)
    assert "cnt[0]" in msg and f"line {line('sva_w')}" in msg, msg
    run(k_store_vs_atomics, 1, 64, out, 1)               # a barrier between: fine
    assert out[0] == 64


@cuda.jit
def k_exch_init(out):
    c = cuda.shared.array(1, int32)
    if cuda.threadIdx.x == 0:
        cuda.atomic.exch(c, 0, 0)        # initialised by an atomic store
    cuda.syncthreads()
    cuda.atomic.add(c, 0, 1)
    cuda.syncthreads()
    out[cuda.threadIdx.x] = c[0]


def test_counter_initialised_by_atomic_exch_is_not_an_uninitialised_read():
    out = np.zeros(32, np.int32)
    run(k_exch_init, 1, 32, out)
    assert set(out.tolist()) == {32}


@cuda.jit
def k_hist_many(img, out):
    h = cuda.shared.array(8, int32)
    t = cuda.threadIdx.x
    if t < 8:
        h[t] = 0
    cuda.syncthreads()
    cuda.atomic.add(h, img[cuda.grid(1)], 1)
    cuda.syncthreads()
    if t < 8:
        cuda.atomic.add(out, t, h[t])


def test_many_threads_atomics_on_few_addresses_are_no_race_and_fast():
    img = (np.arange(4096) * 7 % 8 % 3).astype(np.uint8)     # 3 hot bins of 8
    out = np.zeros(8, np.int32)
    t0 = time.monotonic()
    st = run(k_hist_many, 4, 1024, img, out)
    dt = time.monotonic() - t0
    np.testing.assert_array_equal(out, np.bincount(img, minlength=8))
    assert st.counters["atomics"] == 4096 + 4 * 8
    assert dt < 2.0, dt


@cuda.jit
def k_dyn_views(out, lens):
    f = cuda.shared.array(0, float32)
    n = cuda.shared.array(0, int32)      # the same bytes, viewed as int32
    d = cuda.shared.array(0, float64)
    t = cuda.threadIdx.x
    f[t] = 1.0
    cuda.syncthreads()
    out[t] = n[t]
    lens[t, 0] = len(f)
    lens[t, 1] = len(n)
    lens[t, 2] = len(d)


def test_dynamic_shared_memory_views_share_bytes_and_have_their_own_length():
    out = np.zeros(8, np.int64)
    lens = np.zeros((8, 3), np.int64)
    with sim.capture(gpu_compile=False) as cap:
        k_dyn_views[1, 8, 0, 64](out, lens)
    assert len(cap.launches) == 1
    assert set(out.tolist()) == {int(np.float32(1.0).view(np.int32))} == {0x3F800000}
    assert set(map(tuple, lens.tolist())) == {(16, 16, 8)}


@cuda.jit
def k_dot_one_thread(a, b, out):
    if cuda.grid(1) == 0:
        acc = 0.0
        for i in range(a.shape[0]):     # loads only, distinct addresses
            acc += a[i] * b[i]
        out[0] = acc


def test_a_long_load_only_loop_is_not_stuck(fast_watchdog):
    n = 5000                              # 10000 loads: many slices of SLICE=2000 entries
    a = np.ones(n, np.float32)
    b = np.full(n, 2.0, np.float32)
    out = np.zeros(1, np.float32)
    run(k_dot_one_thread, 1, 1, a, b, out)
    assert out[0] == float(np.dot(a.astype(np.float64), b))
    # while a spin re-reading one flag still is
    msg = fails(StuckKernelError, "stuck", k_spin_plain, 1, 32, np.zeros(1, np.int32),
                np.zeros(32, np.int32))
    assert f"line {line('spin')}" in msg


@cuda.jit
def k_rare_atomic_max(x, out, scratch):
    t = cuda.threadIdx.x
    for k in range(100):
        v = x[t * 100 + k]
        scratch[t] = v                       # plain stores: real progress
        cuda.atomic.max(out, 0, v)           # almost never changes out[0]


def test_atomic_max_that_rarely_changes_with_plain_stores_completes(fast_watchdog):
    x = np.random.default_rng(21).random(3200).astype(np.float32)
    x[0] = 2.0
    out = np.zeros(1, np.float32)
    scratch = np.zeros(32, np.float32)
    run(k_rare_atomic_max, 1, 32, x, out, scratch)
    assert out[0] == x.max()
    np.testing.assert_array_equal(scratch, x.reshape(32, 100)[:, -1])


_REC = np.dtype([("x", np.float32), ("y", np.int32)])


@cuda.jit
def k_rec_read(a, out):
    i = cuda.threadIdx.x
    out[i] = a[i].x + a[i].y


@cuda.jit
def k_rec_store(a):
    i = cuda.threadIdx.x
    a[i].y = i * 10


def test_record_arrays_run_on_the_stock_executor():
    a = np.zeros(4, _REC)
    a["x"] = np.arange(4) + 0.5
    a["y"] = np.arange(4) * 3
    out = np.zeros(4, np.float32)
    with sim.capture(gpu_compile=False) as cap:       # the engine is selected ...
        k_rec_read[1, 4](a, out)
        k_rec_store[1, 4](a)
    assert cap.launches == []                         # ... and hands records to the stock one
    np.testing.assert_array_equal(out, np.arange(4) + 0.5 + np.arange(4) * 3)
    np.testing.assert_array_equal(a["y"], np.arange(4) * 10)
    np.testing.assert_array_equal(a["x"], np.arange(4) + 0.5)


@cuda.jit
def k_dp4a_narrow(a, b, c, out):
    i = cuda.grid(1)
    out[i] = cuda.dp4a(a[i], b[i], c[i])


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8),
                                   (np.uint8, np.int8), (np.uint16, np.int16)])
def test_dp4a_on_narrow_operands_widens_by_their_signedness(ta, tb):
    """A GPU widens a narrow operand to 32 bits by its own signedness (zext for unsigned, sext
    for signed) before dp4a splits it into bytes; numpy's astype does the same."""
    rng = np.random.default_rng(22)
    a = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, 32).astype(ta)
    b = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, 32).astype(tb)
    a[:2] = np.iinfo(ta).max
    b[:2] = np.iinfo(tb).max if np.iinfo(tb).min == 0 else np.iinfo(tb).min
    c = rng.integers(-1000, 1000, 32).astype(np.int32)
    out = np.zeros(32, np.int32)
    run(k_dp4a_narrow, 1, 32, a, b, c, out)
    w = {np.dtype(np.uint8): np.uint32, np.dtype(np.uint16): np.uint32,
         np.dtype(np.int8): np.int32, np.dtype(np.int16): np.int32}
    np.testing.assert_array_equal(out, _dp4a_ref(a.astype(w[a.dtype]), b.astype(w[b.dtype]), c))
    assert int(engine.dp4a(np.uint8(200), np.uint8(200), 0)) == 40000


def test_dp4a_gpu_code_zero_extends_uint8_operands(ptx_cache):
    from kernellab.sim import ptx
    u8 = np.zeros(32, np.uint8)
    r = ptx.compile_kernel(k_dp4a_narrow, (u8, u8, np.zeros(32, np.int32), np.zeros(32, np.int32)))
    loads = re.findall(r"\bld\.global(?:\.nc)?\.([su]8)\b", r.ptx)
    assert loads and set(loads) == {"u8"}, loads
    assert re.search(r"\bdp4a\.u32\.u32\b", r.ptx), r.ptx
    assert not re.search(r"\bcvt\.[su]32\.s8\b", r.ptx)
    # and the sim tier computes what that code computes
    a = np.array([200, 255, 1, 128] * 8, np.uint8)
    b = np.array([200, 255, 7, 128] * 8, np.uint8)
    c = np.arange(32, dtype=np.int32)
    out = np.zeros(32, np.int32)
    run(k_dp4a_narrow, 1, 32, a, b, c, out)
    np.testing.assert_array_equal(out, a.astype(np.int64) * b.astype(np.int64) + c)


# ---------------------------------------------------------------------------------- replay
@cuda.jit
def _twice(x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = 2 * x[i]


def test_replay_repeats_launches_and_copies_from_what_the_sources_hold_now():
    """sim.replay: launches (numpy arguments copied again, device arrays as they are) and
    host-device copies (cuda.to_device, copy_to_device, copy_to_host) are repeated in order;
    host code between them is not."""
    x = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    host = np.zeros(5, np.float32)

    def f():
        dx = cuda.to_device(x)
        dy = cuda.device_array(5, np.float32)
        _twice[1, 32](dx, dy)
        got = dy.copy_to_host()
        out[...] = got + 1                       # host code: not repeated
        dz = cuda.device_array(5, np.float32)
        dz.copy_to_device(host)
        _twice[1, 32](x, out)                    # numpy arguments: copied again
        return got

    with sim.capture(record=True) as cap:
        got = f()
    assert len(cap.recorded) == 5
    assert np.array_equal(got, 2 * np.arange(5)) and np.array_equal(out, 2 * np.arange(5))
    x[:] = 10
    host[:] = 7
    out[:] = -1
    sim.replay(cap.recorded, fresh=[x])
    assert np.array_equal(got, np.full(5, 20))   # to_device, launch, copy_to_host again
    assert np.array_equal(out, np.full(5, 20))   # the numpy launch again, from x as it is now
    assert np.array_equal(cap.recorded[3].dest, np.full(5, 7))   # copy_to_device again
    # an argument the host gave its content and is not a refilled input gets back what it had
    # at its launch: x not declared fresh replays as it was
    sim.replay(cap.recorded)
    assert np.array_equal(out, 2 * np.arange(5))
    with sim.capture() as plain:
        f()
    assert plain.recorded == []                  # recording is asked for


class _Sneaky(np.ndarray):
    """An array subclass: code a submission could attach to an array type must not run in a
    replay."""


def test_replay_refuses_arrays_of_other_types_and_keeps_flags_as_launched():
    x = np.arange(4, dtype=np.float32)
    flag = np.zeros(1, np.float32)
    y = np.zeros(4, np.float32)
    with sim.capture(record=True) as cap:
        _scaled_by_flag[1, 32](x, flag, y)
    flag[0] = 5.0                                # host code after the call: not replayed
    sim.replay(cap.recorded, fresh=[x])
    assert np.array_equal(y, np.zeros(4))        # flag as it was at the launch
    with sim.capture(record=True) as cap:
        _scaled_by_flag[1, 32](x.view(_Sneaky), flag, y)
    with pytest.raises(sim.SimError, match="_Sneaky.*cannot be run again"):
        sim.replay(cap.recorded)


@cuda.jit
def _scaled_by_flag(x, flag, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = x[i] * flag[0]


def test_replay_keeps_each_launch_configuration_and_refuses_rebound_globals():
    """numba's simulator configures a kernel object in place: a replay must launch each
    recorded launch with its own grid; and a device function rebound between the call and its
    replay would run other code in the replayed kernel, so the replay refuses."""
    d = cuda.device_array(96, np.float32)
    with sim.capture(record=True) as cap:
        d[:] = 0                                 # a fill, recorded (__setitem__)
        _fill[3, 32](d, 1.0)
        _fill[1, 32](d, 2.0)
        got = d.copy_to_host()
    got[:] = -1
    sim.replay(cap.recorded)
    assert np.array_equal(got, np.r_[np.full(32, 2.0), np.full(64, 1.0)])
    with sim.capture(record=True) as cap:
        _calls_helper[1, 32](d)
    global _helper
    saved = _helper
    try:
        _helper = cuda.jit(device=True)(lambda i: 7.0)
        with pytest.raises(sim.SimError, match="rebound"):
            sim.replay(cap.recorded)
    finally:
        _helper = saved


@cuda.jit
def _fill(x, v):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = v


@cuda.jit(device=True)
def _helper(i):
    return 3.0


@cuda.jit
def _calls_helper(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = _helper(i)


# ------------------------------------------------------------------------------------------
# local memory: the frame and the bytes stored to it (kernellab.sim.model charges them)


@cuda.jit
def k_local_row(x, out, n):
    row = cuda.local.array(64, float32)      # indexed by a run-time loop: local memory
    acc4 = cuda.local.array(4, float32)      # indexed by constants: registers on a GPU
    i = cuda.grid(1)
    for t in range(4):
        acc4[t] = float32(0.0)
    for j in range(n):
        row[j] = x[i] + float32(j)
    for j in range(n):
        acc4[j % 4] += row[n - 1 - j]
    out[i] = acc4[0] + acc4[1] + acc4[2] + acc4[3]


def test_local_frame_and_stored_bytes_are_counted():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    c = run(k_local_row, 2, 32, x, out, 10).counters
    # without the GPU compile the frame is every local array (an upper bound)
    assert c["local_frame_bytes"] == 64 * 4 + 4 * 4
    assert c["local_touched_bytes"] == 64 * (10 + 4) * 4
    assert out[5] == pytest.approx(10 * 5 + 45)
    # launches without local arrays report none
    c = run(k_copy_stride, 2, 32, x, np.zeros(64, np.float32), 1).counters
    assert c["local_frame_bytes"] == c["local_touched_bytes"] == 0


def test_local_frame_is_the_ptx_depot(ptx_cache):
    x = np.arange(64, dtype=np.float32)
    st = run(k_local_row, 2, 32, x, np.zeros(64, np.float32), 10, gpu_compile=True)
    frame = st.counters["local_frame_bytes"]
    # the run-time-indexed row stays in local memory; what NVVM keeps in registers is not
    # in the frame, and only the stores to arrays that fit in the frame count
    assert 64 * 4 <= frame <= 64 * 4 + 4 * 4
    assert st.counters["local_touched_bytes"] in (64 * 10 * 4, 64 * (10 + 4) * 4)


def test_local_depot_bytes_reads_every_depot():
    ptx = (".visible .entry k(\n{\n\t.local .align 16 .b8 \t__local_depot0[512];\n"
           "\t.local .align 8 .b8 __local_depot1[24];\n\tst.local.f32 [%rd1], %f1;\n}")
    assert engine.local_depot_bytes(ptx) == 536
    assert engine.local_depot_bytes(".visible .entry k()\n{\n\tret;\n}") == 0


# numba's scalar types called as casts: numpy's scalar types during a greenlet launch


def _cast_kernel_factory(elem):
    @cuda.jit
    def cast_k(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = float32(x[i]) * elem(2.5) + int32(x[i])   # global and closure casts
    return cast_k


def test_numba_scalar_casts_give_numpys_values_and_are_put_back():
    """``float32(v)`` is ``numba.types.float32.cast_python_value(v)``, which is
    ``np.float32(v)``: the launch sees numpy's scalar types (without numba's dispatch) and the
    module's globals and the closure hold numba's types again afterwards."""
    import numba

    k = _cast_kernel_factory(float64)
    x = np.linspace(-3, 3, 40).astype(np.float32)
    out = np.zeros(40, np.float64)
    s = run(k, 2, 32, x, out, compiled="off")
    assert s.path == "greenlet"
    want = (x.astype(np.float32) * np.float64(2.5)) + np.trunc(x).astype(np.int32)
    assert np.array_equal(out, want)
    assert globals()["float32"] is numba.float32 and globals()["int32"] is numba.int32
    assert k.py_func.__closure__[0].cell_contents is numba.float64
