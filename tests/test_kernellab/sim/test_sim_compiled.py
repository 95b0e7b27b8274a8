"""The compiled path (:mod:`kernellab.sim.compiled`) against the greenlet executor: same
results, counters and per-array figures; the path and the reason for a greenlet run are
reported in ``LaunchStats``; a fault on the compiled path is explained by the greenlet re-run."""

import kernellab  # noqa: F401  - first: selects the sim tier
import numpy as np
import pytest
from numba import cuda, float32

from kernellab import bf16

from kernellab import sim
from kernellab.kernels import gemm_cuda, reduce_cuda
from kernellab.sim.errors import OutOfBoundsError

@cuda.jit
def _oob(x, out):
    i = cuda.grid(1)
    out[i] = x[i + 1]          # the last thread reads past x

def _run(how, fn):
    with sim.capture(gpu_compile=False, compiled=how) as cap:
        out = fn()
    return out, cap.launches[-1]

def _gemm():
    n = 48
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    grid, block = gemm_cuda.launch_config("v3_shared_tiles", n, n, n)
    gemm_cuda.KERNELS["v3_shared_tiles"][grid, block](A, B, C)
    return C

def _reduce():
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    grid, block = reduce_cuda.launch_config("v3_sequential", x.size)   # a shared-memory tree
    out = np.full(grid, np.nan, np.float32)
    reduce_cuda.reduce_v3_kernel[grid, block](x, out)
    return out

@cuda.jit
def _four_d(x, out):
    b, h, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    plane = x[b, h]                       # a view: its elements are logged through x
    out[b, h, t, 0] = plane[t, 1] * float32(2) + x[b, h, t, 0]
    out[b, h, t, 1] = x[b, h, 31 - t, 1]

def _four():
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 2)).astype(np.float32)
    out = np.full_like(x, np.nan)
    _four_d[(2, 3), 32](x, out)
    return out

@cuda.jit
def _bits_roundtrip(x, out, back):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = bf16.narrow(x[i])            # float32 -> uint32 bits -> uint16
        back[i] = bf16.widen(out[i])          # uint32 bits -> float32

def _bits():
    words = np.random.default_rng(3).integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
    x = words.view(np.float32)
    out, back = np.zeros(256, np.uint16), np.zeros(256, np.float32)
    _bits_roundtrip[2, 128](x, out, back)
    return np.concatenate([out.view(np.uint8), back.view(np.uint8)])

@pytest.mark.parametrize("fn", [_gemm, _reduce, _four, _bits],
                         ids=["tiled_gemm", "block_reduce", "four_d_and_views", "scalar_view"])
def test_compiled_matches_greenlet(fn):
    got, s1 = _run("always", fn)
    want, s2 = _run("off", fn)
    assert s1.path == "compiled", s1.path_note
    assert s2.path == "greenlet" and "off" in s2.path_note
    assert np.array_equal(got, want, equal_nan=True)
    assert s1.counters == s2.counters
    assert s1.arrays == s2.arrays
    assert s1.block_max == s2.block_max

x = np.zeros(3, np.float32)      # a global array named as the kernel's parameter (a notebook's)


@cuda.jit
def _shadows_global(x, out):
    i = cuda.grid(1)
    y = x[i]                      # a local and a parameter: neither reads the global
    out[i] = y


def test_a_parameter_named_as_a_global_array_keeps_the_compiled_path():
    a = np.arange(64, dtype=np.float32)
    out = np.zeros_like(a)
    got, s = _run("always", lambda: (_shadows_global[2, 32](a, out), out)[1])
    assert s.path == "compiled", s.path_note
    assert np.array_equal(got, a)


def test_fault_on_the_compiled_path_is_named_by_the_greenlet_rerun():
    x = np.zeros(64, np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(OutOfBoundsError) as err:
        with sim.capture(gpu_compile=False, compiled="always"):
            _oob[2, 32](x, out)
    assert "tid=(31, 0, 0) ctaid=(1, 0, 0)" in str(err.value)

def test_unsupported_kernel_reports_why():
    @cuda.jit
    def k(x):
        i = cuda.grid(1)
        cuda.atomic.add(x, 0, 1.0)
        x[i + 1] = 0.0

    x = np.zeros(65, np.float32)
    with sim.capture(gpu_compile=False, compiled="always") as cap:
        k[2, 32](x)
    s = cap.launches[-1]
    assert s.path == "greenlet" and "cuda.atomic" in s.path_note


# ------------------------------------------------------------------------------------------
# warp collectives on the compiled path (kernellab.sim.compiled_warp)

FULL = 0xFFFFFFFF
WARPS = 4


@cuda.jit
def _shfl_block_sum(x, out):
    """Two-level block sum: shfl_down within each warp, lane 0's partial to shared, warp 0
    folds the partials with shfl_down again."""
    slots = cuda.shared.array(WARPS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    v = x[i] if i < x.shape[0] else float32(0)
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(FULL, v, off)
    if t % 32 == 0:
        slots[t // 32] = v
    cuda.syncthreads()
    if t < 32:
        v = slots[t] if t < WARPS else float32(0)
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_down_sync(FULL, v, off)
        if t == 0:
            out[cuda.blockIdx.x] = v


@cuda.jit
def _xor_allreduce(x, out, lanes):
    """Every lane gets its warp's sum (shfl_xor butterfly) and its neighbour's value
    (shfl_sync), the lane index of its warp's first positive value (ballot) and votes."""
    i = cuda.grid(1)
    v = x[i]
    s = v
    for off in (1, 2, 4, 8, 16):
        s += cuda.shfl_xor_sync(FULL, s, off)
    nb = cuda.shfl_sync(FULL, v, (cuda.laneid + 1) % 32)
    up = cuda.shfl_up_sync(FULL, v, 3)
    b = cuda.ballot_sync(FULL, v > 0)
    a = cuda.all_sync(FULL, v > -100)
    y = cuda.any_sync(FULL, v > 1000)
    out[i] = s + nb + up
    lanes[i] = b + (2 if a else 0) + (4 if y else 0)


@cuda.jit
def _syncwarp_exchange(x, out, order):
    """Each lane stores to its warp's shared row, reads its neighbours' slots after a
    syncwarp; with order=0 the syncwarp before the next pass's store is missing: a race."""
    s = cuda.shared.array((WARPS, 32), float32)
    t = cuda.threadIdx.x
    w = t // 32
    lane = t % 32
    acc = float32(0)
    for k in range(3):
        s[w, lane] = x[cuda.blockIdx.x * cuda.blockDim.x + t] * float32(k + 1)
        cuda.syncwarp()
        acc += s[w, (lane + 1) % 32] + s[w, (lane + 5) % 32]
        if order:
            cuda.syncwarp(FULL)
    out[cuda.blockIdx.x * cuda.blockDim.x + t] = acc


def _rows(n):
    return np.random.default_rng(n).integers(-8, 8, n).astype(np.float32)


def _c_block_sum():
    x = _rows(1000)
    out = np.full(8, np.nan, np.float32)
    _shfl_block_sum[8, 32 * WARPS](x, out)
    return out


def _c_xor():
    x = _rows(512)
    out = np.full(512, np.nan, np.float32)
    lanes = np.zeros(512, np.int32)
    _xor_allreduce[4, 128](x, out, lanes)
    return np.concatenate([out, lanes.astype(np.float32)])


def _c_syncwarp():
    x = _rows(256)
    out = np.full(256, np.nan, np.float32)
    _syncwarp_exchange[2, 32 * WARPS](x, out, 1)
    return out


def _analysis_inputs(monkeypatch):
    """Every access the analysis is given (block, entry, interval, thread, warp-sync event),
    as a sorted array, and the launch's warp-sync events."""
    from kernellab.sim import analysis
    got = {"rows": [], "wevents": None}
    inner = analysis._Launch.analyse

    def analyse(L, key, blin, epoch, tid, wep, *a, **kw):
        got["rows"].append(np.stack([blin, key, epoch, tid, wep], axis=1))
        got["wevents"] = dict(L.wevents)
        return inner(L, key, blin, epoch, tid, wep, *a, **kw)
    monkeypatch.setattr(analysis._Launch, "analyse", analyse)
    return got


def _sorted_rows(got):
    rows = np.concatenate(got["rows"])
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize("fn", [_c_block_sum, _c_xor, _c_syncwarp],
                         ids=["shfl_down_block_sum", "shfl_xor_votes", "syncwarp_exchange"])
def test_warp_collectives_take_the_compiled_path(fn, monkeypatch):
    with monkeypatch.context() as mp:
        seen1 = _analysis_inputs(mp)
        got, s1 = _run("always", fn)
    with monkeypatch.context() as mp:
        seen2 = _analysis_inputs(mp)
        want, s2 = _run("off", fn)
    assert s1.path == "compiled", s1.path_note
    assert s2.path == "greenlet"
    assert np.array_equal(got, want, equal_nan=True)
    assert not np.isnan(got).any()
    assert s1.counters == s2.counters
    assert s1.arrays == s2.arrays
    assert s1.block_max == s2.block_max
    assert s1.shuffle_warps == s2.shuffle_warps
    # the analysis saw the same accesses, each with the same warp-sync event, and the same
    # events (lane masks)
    assert np.array_equal(_sorted_rows(seen1), _sorted_rows(seen2))
    assert seen1["wevents"] == seen2["wevents"]


def test_warp_collective_results_against_numpy():
    got, s = _run("always", _c_block_sum)
    x = _rows(1000).astype(np.float64)
    want = np.add.reduceat(np.r_[x, np.zeros(24)], np.arange(0, 1024, 128))
    np.testing.assert_array_equal(got, want)   # small integers: every order sums exactly
    got, s = _run("always", _c_xor)
    x = _rows(512).reshape(-1, 32)
    lane = np.arange(32)
    out = (x.sum(axis=1, keepdims=True) + x[:, (lane + 1) % 32]
           + x[:, np.where(lane >= 3, lane - 3, lane)])
    ballot = ((x > 0) * (1 << lane)).sum(axis=1).astype(np.int64)
    ballot = np.where(ballot >= 1 << 31, ballot - (1 << 32), ballot)
    np.testing.assert_array_equal(got[:512], out.ravel())
    np.testing.assert_array_equal(got[512:], np.repeat(ballot + 2, 32).astype(np.float32))
    assert s.counters["shuffles"] == 16 * 7 and s.counters["votes"] == 16 * 3


def test_missing_syncwarp_race_is_found_by_the_compiled_run(monkeypatch):
    from kernellab.sim import compiled
    from kernellab.sim.analysis import _NeedDetail
    from kernellab.sim.errors import RaceError
    outcomes = []
    inner = compiled.run_blocks

    def run_blocks(*a, **kw):
        try:
            return inner(*a, **kw)
        except BaseException as exc:
            outcomes.append(type(exc))
            raise
    monkeypatch.setattr(compiled, "run_blocks", run_blocks)
    msgs = []
    for how in ("always", "off"):
        x = _rows(256)
        out = np.zeros(256, np.float32)
        with pytest.raises(RaceError) as err:
            with sim.capture(gpu_compile=False, compiled=how):
                _syncwarp_exchange[2, 32 * WARPS](x, out, 0)
        msgs.append(str(err.value))
    assert outcomes == [_NeedDetail], outcomes     # the compiled analysis found the hazard
    assert msgs[0] == msgs[1]
    assert "race on shared array s[" in msgs[0]


@cuda.jit
def _half_warp(x, out):
    """Lanes 0-15 shuffle among themselves while lanes 16-31 go on: the greenlet executor
    completes the half-warp's shuffle before lanes 16-31 run, which the compiled path does
    not reproduce: it falls back."""
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(0xFFFF, v, 1 if cuda.laneid < 15 else 0)
    out[i] = v


@cuda.jit
def _exited_lane(x, out):
    i = cuda.grid(1)
    if i % 32 == 31:
        return
    out[i] = cuda.shfl_down_sync(FULL, x[i], 1)     # names lane 31, which has returned


def test_irregular_collectives_fall_back_to_the_greenlet_executor():
    from kernellab.sim.errors import DivergenceError
    x = _rows(64)
    outs = []
    for how in ("always", "off"):
        out = np.zeros(64, np.float32)
        with sim.capture(gpu_compile=False, compiled=how) as cap:
            _half_warp[2, 32](x, out)
        outs.append((out, cap.launches[-1]))
    (a, s1), (b, s2) = outs
    assert s1.path == "greenlet" and "the compiled run stopped" in s1.path_note
    assert np.array_equal(a, b) and s1.counters == s2.counters
    msgs = []
    for how in ("always", "off"):
        with pytest.raises(DivergenceError) as err:
            with sim.capture(gpu_compile=False, compiled=how):
                _exited_lane[2, 32](x, np.zeros(64, np.float32))
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1] and "has exited" in msgs[0]
