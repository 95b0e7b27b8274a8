"""The race check of the sim tier grows at most as n log n in the accesses, for every
synchronisation pattern, and still catches each pattern's race.

Per pattern (block barriers; ``__syncwarp`` exchanges through shared memory in a warp-per-row
kernel; shuffles in a warp-per-row kernel; atomics mixed with plain accesses) a race-free
kernel runs at two sizes, n and about 4n accesses, and the work of ``_Launch._races`` is
counted deterministically: the Python lines it runs (``sys.settrace``: a pairwise check in
Python runs lines per pair of accesses) and the most memory it holds at once (``tracemalloc``,
which sees numpy's buffers: a pairwise check in numpy holds memory per pair). Both must grow
by no more than n log n does: W(n2) / W(n1) <= n2 log n2 / (n1 log n1). A racy variant of
each kernel must still raise the RaceError naming both threads. The vectorised test of
:mod:`kernellab.sim.racecheck` is also checked against the plain pairwise rule on random
batches: same verdict, same first pair.
"""

import kernellab  # noqa: F401  - first: selects the sim tier on a GPU-less machine, arms the engine

import math
import re
import sys
import tracemalloc

import numpy as np
import pytest
from numba import cuda, float32, int32

from kernellab import device, sim
from kernellab.sim import analysis, racecheck
from kernellab.sim.errors import RaceError

pytestmark = pytest.mark.skipif(not device.simulator_active(),
                                reason=f"the sim-tier engine runs only on the simulator, not on "
                                       f"{kernellab.TIER}")

FULL = 0xFFFFFFFF
ROWS = 4            # warps a block: one row each in the warp-per-row kernels
THREADS = 32 * ROWS


@pytest.fixture(autouse=True)
def _restore_options():
    old = sim.options()
    yield
    sim.configure(**old)


# ------------------------------------------------------------------------------------------
# kernels: each race-free with order=1; order=0 drops one ordering and races


@cuda.jit
def k_barriers(x, out, steps, order):
    """A block-wide tile: each thread stores its element, every thread reads two others."""
    s = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    acc = float32(0)
    for k in range(steps):
        s[t] = x[(k * THREADS + t) % x.size]
        if order:
            cuda.syncthreads()
        acc += s[(t + 1) % THREADS] + s[(t + 33) % THREADS]
        cuda.syncthreads()
    out[t] = acc


@cuda.jit
def k_syncwarp_rows(x, out, steps, order):
    """One warp a row: lanes store their slot of the warp's shared row, every lane reads the
    whole row; syncwarp orders the stores before the reads and the reads before the next
    stores (order=0 drops the second)."""
    s = cuda.shared.array((ROWS, 32), float32)
    t = cuda.threadIdx.x
    w = t // 32
    lane = t % 32
    acc = float32(0)
    for k in range(steps):
        s[w, lane] = x[w, (k * 32 + lane) % x.shape[1]]
        cuda.syncwarp()
        for j in range(32):
            acc += s[w, j]
        if order:
            cuda.syncwarp()
    out[w, lane] = acc


@cuda.jit
def k_shuffle_rows(x, out, steps, order):
    """One warp a row: a shuffle all-reduce gives each lane its row maximum, lanes exchange
    their shifted values through shared memory. A shuffle exchanges registers and orders no
    memory access: with order=0 only shuffles lie between a lane's store and its neighbour's
    load, a race."""
    s = cuda.shared.array((ROWS, 32), float32)
    t = cuda.threadIdx.x
    w = t // 32
    lane = t % 32
    acc = float32(0)
    for k in range(steps):
        v = x[w, (k * 32 + lane) % x.shape[1]]
        m = v
        for off in (16, 8, 4, 2, 1):
            m = max(m, cuda.shfl_xor_sync(FULL, m, off))
        s[w, lane] = v - m
        if order:
            cuda.syncwarp()
        acc += s[w, (lane + 1) % 32] + cuda.shfl_down_sync(FULL, v, 1)
        cuda.syncwarp()
    out[w, lane] = acc


@cuda.jit
def k_atomic_rows(x, out, steps, order):
    """One warp a row: lane 0 zeroes the row's shared counter (a plain store), every lane adds
    to it atomically, lane 0 reads the sum (a plain load); syncwarp orders the plain accesses
    against the atomics (order=0 drops the one before the load)."""
    s = cuda.shared.array(ROWS, int32)
    t = cuda.threadIdx.x
    w = t // 32
    lane = t % 32
    acc = 0
    for k in range(steps):
        if lane == 0:
            s[w] = 0
        cuda.syncwarp()
        cuda.atomic.add(s, w, x[w, (k * 32 + lane) % x.shape[1]])
        if order:
            cuda.syncwarp()
        if lane == 0:
            acc += s[w]
    if lane == 0:
        out[w] = acc


def _args(kern, steps):
    """Inputs and the expected output of ``kern`` run race-free for ``steps`` steps."""
    rng = np.random.default_rng(steps)
    if kern is k_atomic_rows:
        x = rng.integers(-50, 50, (ROWS, 96)).astype(np.int32)
        cols = (np.arange(steps)[:, None] * 32 + np.arange(32)) % x.shape[1]
        return x, np.zeros(ROWS, np.int32), x[:, cols].sum(axis=(1, 2))
    if kern is k_barriers:
        x = rng.integers(-8, 8, 3 * THREADS).astype(np.float32)
        tile = x[(np.arange(steps)[:, None] * THREADS + np.arange(THREADS)) % x.size]
        t = np.arange(THREADS)
        want = (tile[:, (t + 1) % THREADS] + tile[:, (t + 33) % THREADS]).sum(axis=0)
        return x, np.zeros(THREADS, np.float32), want
    x = rng.integers(-8, 8, (ROWS, 96)).astype(np.float32)
    cols = (np.arange(steps)[:, None] * 32 + np.arange(32)) % x.shape[1]
    v = x[:, cols]                                          # (row, step, lane)
    if kern is k_syncwarp_rows:
        want = np.broadcast_to(v.sum(axis=2).sum(axis=1)[:, None], (ROWS, 32))
    else:
        d = v - v.max(axis=2, keepdims=True)
        down = np.concatenate([v[:, :, 1:], v[:, :, -1:]], axis=2)   # shfl_down by 1
        want = (np.roll(d, -1, axis=2) + down).sum(axis=1)
    return x, np.zeros((ROWS, 32), np.float32), want


def _run(kern, steps, order):
    x, out, want = _args(kern, steps)
    with sim.capture(gpu_compile=False):
        kern[1, THREADS](x, out, steps, order)
    return out, want


class _Work:
    """Counts, over every ``_Launch._races`` call of a launch, the accesses analysed, the
    Python lines run (any frame, numpy's Python code included) and the peak memory traced."""

    def __init__(self, monkeypatch):
        self.accesses = self.lines = self.peak = 0
        inner = analysis._Launch._races
        work = self

        def tracer(frame, event, arg):
            if event == "line":
                work.lines += 1
            return tracer

        def races(launch, key, *args, **kw):
            work.accesses += len(key)
            old = sys.gettrace()
            tracemalloc.start()
            sys.settrace(tracer)
            try:
                return inner(launch, key, *args, **kw)
            finally:
                sys.settrace(old)
                work.peak = max(work.peak, tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()

        monkeypatch.setattr(analysis._Launch, "_races", races)


PATTERNS = [(k_barriers, 4), (k_syncwarp_rows, 2), (k_shuffle_rows, 8), (k_atomic_rows, 8)]


@pytest.mark.parametrize("kern, steps", PATTERNS, ids=lambda p: getattr(p, "__name__", ""))
def test_race_check_work_grows_at_most_n_log_n(kern, steps, monkeypatch):
    _run(kern, steps, 1)        # unmeasured: the first analysis of a process imports and caches
    got = []
    for s in (steps, 4 * steps):
        with monkeypatch.context() as mp:
            work = _Work(mp)
            out, want = _run(kern, s, 1)
        np.testing.assert_array_equal(out, want)       # the race-free kernel did its work
        got.append(work)
    small, big = got
    n1, n2 = small.accesses, big.accesses
    assert 3 * n1 < n2 <= 5 * n1, (n1, n2)               # about 4x the accesses
    bound = n2 * math.log(n2) / (n1 * math.log(n1))
    assert big.lines <= bound * small.lines, (small.lines, big.lines, bound)
    assert big.peak <= bound * small.peak, (small.peak, big.peak, bound)


def _tids(msg):
    return set(re.findall(r"tid=\((\d+, \d+, \d+)\)", msg))


@pytest.mark.parametrize("kern, steps", PATTERNS, ids=lambda p: getattr(p, "__name__", ""))
def test_each_pattern_still_catches_its_race(kern, steps):
    with pytest.raises(RaceError) as info:
        _run(kern, steps, 0)
    assert type(info.value) is RaceError and info.value.kind == "race"
    msg = str(info.value)
    assert "race on shared array s[" in msg and len(_tids(msg)) == 2, msg


# ------------------------------------------------------------------------------------------
# the vectorised test against the plain pairwise rule


def _pairwise_first(grp, tid, wep, cls, wevents):
    """The first racing pair ``(x, y)``, x < y, in position order, by the rule itself: same
    group, different threads, one writes, not both atomics, and not (one warp, different
    events, and the later event's mask names both lanes)."""
    n = len(grp)
    for x in range(n):
        for y in range(x + 1, n):
            if grp[x] != grp[y] or tid[x] == tid[y] or not (cls[x] | cls[y]) & 1:
                continue
            if cls[x] & cls[y] & 2:
                continue
            if tid[x] // 32 == tid[y] // 32 and wep[x] != wep[y]:
                m = wevents.get(max(wep[x], wep[y]), 0)
                if (m >> (tid[x] % 32)) & 1 and (m >> (tid[y] % 32)) & 1:
                    continue
            return x, y
    return None


def _batch(rng):
    """A random batch: up to 3 groups of up to 40 accesses by a few threads of one or two
    warps, events with full, partial or missing masks, any mix of access classes."""
    n = int(rng.integers(1, 40))
    grp = np.unique(rng.integers(0, int(rng.integers(1, 4)), n), return_inverse=True)[1]
    grp = np.sort(grp).astype(np.int64)
    threads = rng.choice(64 if rng.random() < 0.3 else 32, int(rng.integers(1, 8)),
                         replace=False)
    tid = rng.choice(threads, n).astype(np.int64)
    nev = int(rng.integers(1, 8))
    wep = rng.integers(0, nev, n).astype(np.int64)
    wevents = {}
    for e in range(1, nev):
        r = rng.random()
        if r < 0.4:
            wevents[e] = FULL
        elif r < 0.9:    # a mask naming some of the batch's lanes
            wevents[e] = sum(1 << int(t % 32) for t in threads if rng.random() < 0.7)
    cls = rng.choice(4, n).astype(np.int64) if rng.random() < 0.5 else (
        rng.random(n) < 0.3).astype(np.int64)
    return grp, tid, wep, cls, wevents


def test_vectorised_check_matches_the_pairwise_rule():
    rng = np.random.default_rng(2024)
    racy = 0
    for _ in range(3000):
        batch = _batch(rng)
        want = _pairwise_first(*batch)
        assert racecheck.racy_accesses(*batch).any() == (want is not None), batch
        assert racecheck.first_pair(*batch) == want, batch
        racy += want is not None
    assert 300 < racy < 2700, racy       # both verdicts were exercised
