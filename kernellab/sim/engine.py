"""The ``sim`` tier's kernel executor: numba-cuda's CUDA simulator, made fast and strict.

numba-cuda's simulator (``numba.cuda.simulator``) runs each CUDA thread of a block as an OS
thread and busy-polls barriers. This module replaces only its launch
(``FakeCUDAKernel.__call__``) and the in-kernel ``cuda`` module; everything else (``cuda.jit``,
device arrays, ``cuda.to_device``, device functions) is the simulator's own. The stock executor
stays available (``configure(executor="stock")`` or ``KERNELLAB_SIM_EXECUTOR=stock``).

How a launch runs
-----------------
* Blocks run one after another. A block's threads run on pooled greenlets (``greenlet``
  package) without preemption and switch only at a barrier (``syncthreads``), a warp collective
  (``shfl_*_sync``, ``ballot_sync``, ``syncwarp``...), an atomic, thread exit, or when a thread
  has logged ``SLICE`` accesses since its last switch (so a thread spinning on memory lets the
  others run). Threads run in thread-id order, or in a seeded random order per interval
  (``shuffle=seed``) to shake out order-dependent bugs.
* Every thread gets its own copy of the launching ``contextvars.Context`` (numpy's error state
  lives there). ``threading.local`` is shared by all threads of a block: do not use it in kernels.
* Arrays inside a kernel are wrapped (:class:`SimArray`): every element access of a global or
  shared array is bounds-checked (negative indices are errors, not wraparound) and appended to
  the running thread's log as one int (array, load/store, element offset). A thread's log is
  cut into a segment at every barrier, ``__syncwarp``, forced switch and exit, tagged with
  (block, barrier interval, thread, warp-sync epoch). At the end of each block the segments
  are analysed in bulk with numpy:

  - **races**: two threads touching one address, at least one writing, in one barrier interval
    (``__syncwarp`` orders the lanes of one warp); across blocks, any global address written by
    one block and touched by another (blocks are unordered);
  - **uninitialised shared memory**: a read of a shared element no thread has written before
    or in the read's interval (shared and ``cuda.local`` arrays start poisoned: NaN for floats,
    bytes ``0xCD`` for integers);
  - **traffic**: an access's *warp-level request* is (array, load/store, interval, warp, n-th
    access of that kind to that array by the thread in the interval) -- the lanes of a warp
    run one instruction stream, so their n-th accesses are one instruction; lanes that skip an
    access (a bounds guard) just do not take part. A global request costs its distinct 32-byte
    sectors, a shared request the most distinct 4-byte words that fall in one of the 32 banks
    (wavefronts; a broadcast of one word is free); DRAM sees each distinct sector once a
    launch (an atomic as a store). Arrays get virtual addresses aligned
    to 256 bytes, as ``cudaMalloc`` returns, so the counts do not depend on where numpy put the
    data. Arrays inside tuple arguments are copied and wrapped like any argument (numba-cuda
    passes them to a GPU). While a :func:`~kernellab.sim.capture` is open, each launch also
    reports per argument its accesses and a digest of its content at start and end
    (``LaunchStats.arrays``), so a grader can tell what a kernel read and wrote.

  ``cuda.local`` arrays are plain numpy arrays (not logged, not wrapped: a kernel's
  per-thread registers and stack run at full speed); at the end of each block the bytes each
  thread stored to them are counted (the elements no longer poisoned). A launch reports one
  thread's local frame, ``local_frame_bytes`` -- the PTX ``__local_depot`` of the kernel when
  it was compiled for a GPU (what NVVM kept in registers is not in it), else every local array
  -- and ``local_touched_bytes``, the stores to the arrays that frame holds (largest first);
  :func:`kernellab.sim.model.local_traffic` charges them when the frames overflow L1.

  A block's shared memory starts fresh, so blocks whose shared-memory logs are identical (the
  usual case) reuse the first one's shared analysis: exact, and most of the analysis time of a
  tiled kernel. When a race or uninitialised read is found, the launch is run again from a copy
  of its arguments with each access's source instruction logged too, so that the error can name
  the lines (errors are rare; logging lines on every access would double the log's cost); for
  a race, with each device-function access's call stack (call sites and call instances) too.
  A race names both accesses in program order -- the order a thread ran them, by call stack
  and loop back edges, not by line number -- their barrier interval (how many
  ``syncthreads`` the block had passed, and the lines of the barriers around it), whether a
  loop took the second access to a later pass or it is in another call of a device function,
  and where a ``syncthreads`` must go.
  ``checks="fast"`` skips the log altogether: bounds, poison and divergence checks stay, the race
  detector and the counters go.

  These rules follow the CUDA C++ Programming Guide (§ "Compute Capability 5.x+ / Shared Memory"
  for banks, § "Device Memory Accesses" for 32-byte sectors and coalescing) and NVIDIA's Compute
  Sanitizer manual (racecheck, synccheck, initcheck, memcheck).
* Limits a GPU enforces: at most 1024 threads a block (x, y <= 1024, z <= 64), grid y, z <=
  65535, at most 48 KiB of static shared memory a block (CUDA C++ Programming Guide, Table
  "Technical Specifications per Compute Capability").
* A barrier must be reached by every live (not yet exited) thread of the block at the same
  ``syncthreads`` call; a warp collective by every lane its mask names. Otherwise
  :class:`~kernellab.sim.errors.DivergenceError`.
* Watchdog: a block whose threads only load (no store, exit, barrier or changing atomic) for
  ``STALE_SLICES`` slices in a row, or a launch running longer than ``watchdog_s`` seconds of
  wall-clock, raises :class:`~kernellab.sim.errors.StuckKernelError` naming the threads and lines.

What it does not do, or does differently:

* no timing, and no memory ordering weaker than sequential consistency (a racy kernel may give
  the right answer here; the race detector is what catches it);
* negative indices are errors, as the issue asks and as CUDA C++ would read before the array;
  numba-cuda on a GPU wraps them like Python, so ``a[-1]`` that "works" there fails here;
* races between an atomic and a plain access are checked within a block, not across blocks;
  views of dynamic shared memory with different dtypes are separate arrays to the checks;
* a ``syncthreads`` is identified by its innermost call site: one device function holding the
  barrier, called from two divergent branches, is not reported as divergent;
* with ``checks="fast"`` nothing is logged, so a thread spinning on another thread's plain
  store never yields: only the wall-clock watchdog stops it;
* record (structured) arrays run on the stock executor (no checks, no counters; a capture
  lists such launches in ``unchecked``);
* arrays a kernel reads from module globals or its closure are read live, uncounted and
  unchecked (a GPU freezes them into the kernel when it compiles); a capture lists them
  (``LaunchStats.outside``);
* fp16/bf16 intrinsics beyond the stock simulator's, cooperative-grid sync across blocks and
  ``threading.local`` per thread are not provided;
* the pairwise race check is Python: kernels with many ``__syncwarp``-ordered exchanges on one
  address within a barrier interval analyse slowly (the common tiled kernels do not).
"""

from __future__ import annotations

import contextvars
from array import array as _array
import dis
import functools
import inspect
import operator
import os
import random
import re
import signal
import sys
import threading
import time
import types as _pytypes
from collections import deque

import numpy as np
from greenlet import greenlet, getcurrent

from numba.cuda.simulator import kernel as _simkernel
from numba.cuda.simulator import kernelapi as _kapi
from numba.cuda.simulator.args import ArgHint, InOut
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
from numba.cuda.errors import normalize_kernel_dimensions
from numba.cuda import types as _nbtypes
from numba.cuda.np import numpy_support as _npsupport

import math as _math_mod

from kernellab.sim import content_digest, gpumath
from kernellab.sim.counters import COUNTER_KEYS
from kernellab.sim.errors import (
    DivergenceError, KernelError, LaunchConfigError, OutOfBoundsError, RaceError, SimError,
    StuckKernelError, UninitialisedReadError,
)

WARP = 32
MAX_THREADS = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_YZ = 65535
MAX_STATIC_SHARED = 48 * 1024
SECTOR = 32
BANKS = 32
BANK_BYTES = 4
SLICE = 1 << 20            # a thread's log entries (2 an access) before a forced switch
BLOCK_CAP = 1 << 23        # logged accesses kept before an analysis (8 bytes each)
STALE_SLICES = 4
MEMO_ENTRIES = 32         # distinct per-block shared-memory logs remembered a launch
SPIN_ADDRESSES = 64       # a slice re-reading at most this many addresses is a spin-wait
ALIGN = 256
INT_POISON = 0xCD

_getframe = sys._getframe
_index = operator.index

# ----------------------------------------------------------------------------------------
# Options


_OPTS = {
    "executor": os.environ.get("KERNELLAB_SIM_EXECUTOR", "kernellab").strip() or "kernellab",
    "race_check": True,
    "gpu_compile": os.environ.get("KERNELLAB_SIM_GPU_COMPILE", "1").strip() != "0",
    "shuffle": (int(os.environ["KERNELLAB_SIM_SHUFFLE"])
                if os.environ.get("KERNELLAB_SIM_SHUFFLE", "").strip() else None),
    "watchdog_s": 600.0,
    "checks": os.environ.get("KERNELLAB_SIM_CHECKS", "full").strip() or "full",
    "sites": False,
}


def configure(**opts) -> dict:
    """Set executor options; returns the previous values of the ones given.

    ``executor`` ("kernellab" or "stock"), ``race_check`` (bool), ``gpu_compile`` (bool: compile
    each kernel to PTX once per signature, :mod:`kernellab.sim.ptx`), ``shuffle`` (None or an
    int seed), ``watchdog_s`` (float seconds per launch), ``sites`` (bool: log each access's
    source instruction and report per-site global traffic, ``LaunchStats.sites``, and shared
    requests and wavefronts, ``LaunchStats.shared_sites``; about 1.4x
    the logging cost, so off unless a grader asks). Raises ``ValueError`` for an unknown
    option or executor.
    """
    old = {}
    for k, v in opts.items():
        if k not in _OPTS:
            raise ValueError(f"unknown sim option {k!r}; options: {', '.join(sorted(_OPTS))}")
        if k == "executor" and v not in ("kernellab", "stock"):
            raise ValueError(f"executor must be 'kernellab' or 'stock', not {v!r}")
        if k == "checks" and v not in ("full", "fast"):
            raise ValueError(f"checks must be 'full' or 'fast', not {v!r}")
        old[k] = _OPTS[k]
        _OPTS[k] = v
    return old


def options() -> dict:
    """A copy of the current executor options."""
    return dict(_OPTS)


def _new_log():
    """An access log: a typed int64 array (8 bytes an entry, read by numpy without a copy)."""
    return _array("q")


def _join(logs):
    out = _array("q")
    for lg in logs:
        out.extend(lg)
    return out


# ----------------------------------------------------------------------------------------
# Per-launch state. Module globals, because the hot path (an array access) must be cheap.

_log = _new_log()       # the running thread's access log (one int64 an access, see _Root)
_slog = _new_log()      # modes 2, 3: the running thread's access sites, parallel to _log
_mode = 1                # 0 no log (checks="fast"), 1 log, 2 log with sites, 3 sites with
                         # call contexts (the re-run that explains a race)
_kcode = None            # code object of the running kernel (sites in it need no lookup)
_cur = None              # the running _Thread
_launch = None           # the running _Launch
_listeners: list = []    # capture() stacks


class _Thread:
    __slots__ = ("g", "tid", "idx", "idx3", "warp", "lane", "state", "wep", "wait", "resume",
                 "log", "slog", "segs", "live", "exit_ep")

    def __init__(self, tid, idx):
        self.tid = tid
        self.idx = idx
        self.warp = tid // WARP
        self.lane = tid % WARP
        self.state = 0       # 0 runnable, 1 at barrier, 2 at warp op, 3 exited
        self.wep = 0
        self.wait = None
        self.resume = None
        self.g = None
        self.log = _new_log()
        self.slog = _new_log()
        self.segs = []      # [(warp-sync epoch, log, site log)] closed by __syncwarp
        self.live = ()      # mode 3: [(frame, instance)] of the last access's device frames
        self.exit_ep = None  # the barrier interval the thread returned in


def _idx_str(idx):
    return "(" + ", ".join(str(v) for v in idx) + ")"


def _where(t=None):
    t = t if t is not None else _cur
    if t is None or _launch is None:
        return ""
    return f"tid={_idx_str(t.idx)} ctaid={_idx_str(_launch.ctaid)}"


# ----------------------------------------------------------------------------------------
# Arrays inside a kernel


class _Root:
    """One allocation (a kernel argument, or a shared array of the current block)."""

    __slots__ = ("name", "space", "arr", "flat", "itemsize", "base", "aid", "key", "elems",
                 "wowner", "rowner", "dram_r", "dram_w", "written", "shape", "first",
                 "nload", "nstore", "natomic", "digest0", "stored", "dram_a")

    def __init__(self, name, space, arr, base, aid):
        self.name = name
        self.space = space           # 'g' or 's'
        self.arr = arr
        # a 1-D view of the allocation when it is contiguous (fast element reads)
        self.flat = arr.reshape(-1) if arr.flags.c_contiguous else None
        self.itemsize = arr.itemsize
        self.base = base             # virtual byte address of element offset 0
        self.aid = aid
        self.key = aid << AID_SHIFT
        self.elems = arr.size
        self.shape = arr.shape
        self.wowner = None
        self.rowner = None
        self.dram_r = None
        self.dram_w = None
        self.written = None
        self.first = None       # mode 2: first access to each element (block, tid, site, write)
        self.nload = self.nstore = self.natomic = 0     # element accesses (stores: atomics too)
        self.digest0 = None     # content_digest at the launch's start (while captured)
        self.stored = None      # global: which elements were stored to (atomics included)
        self.dram_a = None      # global: sectors atomics touched (a read-modify-write)


# A log entry is one int: (array id << 37) | (is_write << 36) | (is_atomic << 35) | element
# offset. An atomic is logged as a write with the atomic bit.
OFF_BITS = 35
OFF_MASK = (1 << OFF_BITS) - 1
ATOMIC_BIT = 1 << OFF_BITS
W_SHIFT = OFF_BITS + 1
WRITE_BIT = 1 << W_SHIFT
AID_SHIFT = W_SHIFT + 1
_STORE_BITS = WRITE_BIT | ATOMIC_BIT


def _site(f):
    """Site id of an access made from a frame outside the kernel's own code (a device
    function): (code id << 24) | instruction offset."""
    code = f.f_code
    cid = _code_ids.get(code)
    if cid is None:
        cid = _code_ids[code] = len(_code_ids) + 1
        _codes.append(code)
    return (cid << 24) | f.f_lasti


_code_ids: dict = {}
_codes: list = [None]

# Mode 3 (the re-run that explains a race): a device-function access's site also carries its
# call context, ``site | (context id << CTX_SHIFT)``. A context is the tuple, outermost
# first, of (caller's site, frame instance) of each device-function frame on the stack; an
# instance numbers one call (frames compared by identity, so a second call of one function is
# a new instance even where CPython reuses the frame's memory).
CTX_SHIFT = 40
SITE_MASK = (1 << CTX_SHIFT) - 1
_ctx_ids: dict = {}
_ctxs: list = [()]          # context id -> context; 0: the kernel's own frame
_site_plain = _site
_ninst = [0]
_NUMBA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(_simkernel.__file__))) + os.sep
_SIM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


_foreign: dict = {}         # code object -> True for the simulator's own frames


def _is_foreign(code):
    """True for a frame of numba's simulator or of this package between a kernel and its
    device functions (``FakeCUDAKernel.__call__``): not a call in the student's code."""
    got = _foreign.get(code)
    if got is None:
        fn = code.co_filename
        got = _foreign[code] = (fn.startswith(_NUMBA_DIR) or fn.startswith(_SIM_DIR))
    return got


def _site_ctx(f):
    """:func:`_site` with the call context of frame ``f`` (mode 3)."""
    chain = []
    g = f
    while g is not None and g.f_code is not _kcode:
        if not _is_foreign(g.f_code):
            chain.append(g)
        g = g.f_back
    callers = chain[1:] + [g]       # each device frame's caller (g: the kernel's, or None)
    sites = [0 if c is None else c.f_lasti if c.f_code is _kcode else _site_plain(c)
             for c in callers]
    chain.reverse()
    sites.reverse()
    t = _cur
    prev = t.live
    live = []
    same = True
    for d, g in enumerate(chain):
        same = same and d < len(prev) and prev[d][0] is g
        if same:
            live.append(prev[d])
        else:
            _ninst[0] += 1
            live.append((g, _ninst[0]))
    t.live = live
    key = tuple((cs, n) for cs, (_, n) in zip(sites, live))
    cid = _ctx_ids.get(key)
    if cid is None:
        cid = _ctx_ids[key] = len(_ctxs)
        _ctxs.append(key)
    return _site_plain(f) | (cid << CTX_SHIFT)


class SimArray:
    """A global or shared array as a kernel thread sees it on the sim tier.

    Indexing with integers is bounds-checked (``OutOfBoundsError`` names the thread, the array
    and the index; negative indices are errors, not wraparound), logged for the race detector
    and the traffic counters, and returns what the numpy array returns (a numpy scalar of the
    array's dtype, so arithmetic rounds as on the stock simulator). Slicing returns a wrapped
    view. ``shape``, ``size``, ``ndim``, ``dtype`` and ``len()`` work as on numpy.

    This base class is the general path (any dimension count, slices, non-contiguous
    storage); :func:`_wrap` picks a specialised subclass for 1-D and 2-D contiguous storage.
    """

    __slots__ = ("_a", "_f", "_root", "_o", "_st", "_kr", "_kw", "shape", "ndim", "size",
                 "dtype", "_n0", "_n1", "_s0", "_s1")

    def __init__(self, arr, root, off0, st):
        self._a = arr
        self._f = root.flat
        self._root = root
        self._o = off0
        self._st = st
        self._kr = root.key + off0
        self._kw = root.key + off0 + WRITE_BIT
        self.shape = arr.shape
        self.ndim = arr.ndim
        self.size = arr.size
        self.dtype = arr.dtype
        self._n0 = arr.shape[0] if arr.ndim else 1
        self._n1 = arr.shape[1] if arr.ndim > 1 else 1
        self._s0 = st[0] if arr.ndim else 0
        self._s1 = st[1] if arr.ndim > 1 else 0

    def __len__(self):
        return self._n0

    def __repr__(self):
        sp = "shared" if self._root.space == "s" else "global"
        return f"<sim {sp} array {self._root.name} {self.shape} {self.dtype}>"

    def _offset(self, idx, f):
        """Element offset of ``idx`` from this view's start, or None for a non-scalar index."""
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.ndim:
            if len(idx) > self.ndim and all(isinstance(i, (int, np.integer)) for i in idx):
                raise OutOfBoundsError(
                    f"{_where()}: array {self._root.name} has {self.ndim} dimension(s), "
                    f"indexed with {len(idx)} index(es) {idx!r} (line {f.f_lineno})")
            for i, n in zip(idx, self.shape):      # a row view A[i]: check what is given
                if (isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))
                        and not 0 <= i < n):
                    raise self._oob(idx, f)
            return None
        off = 0
        for i, n, s in zip(idx, self.shape, self._st):
            if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
                return None
            if not 0 <= i < n:
                raise self._oob(idx, f)
            off += int(i) * s
        return off

    def _oob(self, idx, f):
        if not isinstance(idx, tuple):
            idx = (idx,)
        sp = "shared" if self._root.space == "s" else "global"
        shown = tuple(int(i) if isinstance(i, (int, np.integer)) else i for i in idx)
        return OutOfBoundsError(
            f"{_where()}: out-of-bounds {sp} access {self._root.name}{list(shown)} at line "
            f"{f.f_lineno}: the array's shape is {tuple(self.shape)}"
            + (" (a negative index is out of bounds on a GPU; it does not wrap around)"
               if any(isinstance(i, (int, np.integer)) and i < 0 for i in shown) else ""))

    def _record(self, entry, f):
        if _mode == 0:
            return
        log = _log
        log.append(entry)
        if _mode >= 2:
            _slog.append(f.f_lasti if f.f_code is _kcode else _site(f))
        if len(log) > SLICE:
            _slice()

    def _general_get(self, idx, f):
        off = self._offset(idx, f)
        if off is None:
            res = self._a[idx]
            if isinstance(res, np.ndarray):
                return self._view(res)
            raise OutOfBoundsError(f"{_where()}: unsupported index {idx!r} into "
                                   f"{self._root.name} (line {f.f_lineno})")
        self._record(self._kr + off, f)
        return self._a[idx]

    def _general_set(self, idx, val, f):
        off = self._offset(idx, f)
        if off is None:
            res = self._a[idx]
            if isinstance(res, np.ndarray):
                v = self._view(res)
                for j in np.ndindex(res.shape):
                    v._general_set(j, val if np.ndim(val) == 0 else val[j], f)
                return
            raise OutOfBoundsError(f"{_where()}: unsupported index {idx!r} into "
                                   f"{self._root.name} (line {f.f_lineno})")
        self._record(self._kw + off, f)
        try:
            self._a[idx] = val
        except OverflowError:
            self._a[idx] = _narrow(val, self.dtype)

    def _view(self, sub):
        base = self._root.arr
        isz = base.itemsize
        off0 = (sub.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz
        return _wrap(sub, self._root, off0)

    def __getitem__(self, idx):
        return self._general_get(idx, _getframe(1))

    def __setitem__(self, idx, val):
        self._general_set(idx, val, _getframe(1))

    # numpy interop (ufuncs on whole arrays; rare inside kernels): untracked
    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def __getattr__(self, name):
        return getattr(self._a, name)


def _narrow(v, dtype):
    """``v`` converted to integer ``dtype`` with wraparound, as a GPU store of a wider or
    differently signed integer does (numpy refuses an out-of-range value instead)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise OverflowError(f"value {v!r} does not fit {dtype}")
    bits = 8 * dtype.itemsize
    u = np.array([int(v) & ((1 << bits) - 1)], np.uint64).astype(f"u{dtype.itemsize}")
    return u.view(dtype)[0]


# The fast paths, one class per (dimensions, logging mode), generated from one template so
# each access runs straight-line code. Modes: 0 bounds checks only (checks="fast"), 1 log the
# access (the default), 2 also log the source instruction (the re-run that names lines); mode
# 3 (a race's re-run) is mode 2 with ``_site`` bound to :func:`_site_ctx`.
_FAST_TEMPLATE = """
class {name}(SimArray):
    __slots__ = ()

    def __getitem__(self, {args}):
        try:
            {unpack}
            ok = {bounds}
        except (TypeError, ValueError):
            return self._general_get({idx}, _getframe(1))
        if ok:
            rel = {rel}
{log_r}
            return self._f[{pos}]
        return self._general_get({idx}, _getframe(1))

    def __setitem__(self, {args}, v):
        try:
            {unpack}
            ok = {bounds}
        except (TypeError, ValueError):
            return self._general_set({idx}, v, _getframe(1))
        if ok:
            rel = {rel}
{log_w}
            try:
                self._f[{pos}] = v
            except OverflowError:
                self._f[{pos}] = _narrow(v, self.dtype)
            return
        return self._general_set({idx}, v, _getframe(1))
"""
_LOG = """            log = _log
            log.append(self.{k} + rel)
            if len(log) > SLICE:
                _slice()"""
_LOG_SITE = """            log = _log
            log.append(self.{k} + rel)
            f = _getframe(1)
            _slog.append(f.f_lasti if f.f_code is _kcode else _site(f))
            if len(log) > SLICE:
                _slice()"""
# A numpy integer index (np.int32 loaded from an int32 array...) becomes a Python int first:
# under numpy 2's promotion rules np.int32 arithmetic with the log key would overflow.
_DIMS = {
    # (dimensions, unit innermost stride): template fields
    (1, False): dict(args="i", unpack="i = i if i.__class__ is int else _index(i)",
                     bounds="0 <= i < self._n0", idx="i", rel="i * self._s0"),
    (1, True): dict(args="i", unpack="i = i if i.__class__ is int else _index(i)",
                    bounds="0 <= i < self._n0", idx="i", rel="i"),
    (2, False): dict(args="idx", unpack=(
        "i, j = idx\n            if i.__class__ is not int or j.__class__ is not int:\n"
        "                i = _index(i)\n                j = _index(j)"),
        bounds="0 <= i < self._n0 and 0 <= j < self._n1", idx="idx",
        rel="i * self._s0 + j * self._s1"),
    (2, True): dict(args="idx", unpack=(
        "i, j = idx\n            if i.__class__ is not int or j.__class__ is not int:\n"
        "                i = _index(i)\n                j = _index(j)"),
        bounds="0 <= i < self._n0 and 0 <= j < self._n1", idx="idx",
        rel="i * self._s0 + j"),
}
_FAST = {}
for (_nd, _unit), _d in _DIMS.items():
    for _zero in (False, True):        # a view starting at the allocation's first element
        for _m, _lg in ((0, "            pass"), (1, _LOG), (2, _LOG_SITE)):
            _nm = f"_Arr{_nd}{'u' if _unit else ''}{'z' if _zero else ''}m{_m}"
            exec(compile(_FAST_TEMPLATE.format(
                name=_nm, log_r=_lg.format(k="_kr"), log_w=_lg.format(k="_kw"),
                pos="rel" if _zero else "self._o + rel", **_d),
                f"{__file__}#fast-array-template", "exec"), globals())
            _FAST[_nd, _unit, _zero, _m] = globals()[_nm]
        _FAST[_nd, _unit, _zero, 3] = _FAST[_nd, _unit, _zero, 2]    # _site is _site_ctx


def _wrap(arr, root, off0):
    """Wrap ndarray ``arr`` (a view into ``root.arr`` starting at element ``off0``)."""
    isz = arr.itemsize
    st = tuple(s // isz for s in arr.strides)
    cls = SimArray
    if root.flat is not None and all(s >= 0 for s in st) and arr.ndim in (1, 2):
        cls = _FAST.get((arr.ndim, st[-1] == 1, off0 == 0, _mode), SimArray)
    return cls(arr, root, off0, st)


# ----------------------------------------------------------------------------------------
# The in-kernel ``cuda`` module


def _poisoned(shape, dtype):
    a = np.empty(shape, dtype)
    if a.dtype.kind in "fc":
        a.fill(np.nan)
    else:
        a.view(np.uint8).fill(INT_POISON)
    return a


class _Shared:
    def __init__(self, launch):
        self._launch = launch

    def array(self, shape, dtype, alignment=None):
        return self._launch.shared_array(shape, dtype, _getframe(1))


class _Local:
    def array(self, shape, dtype, alignment=None):
        if isinstance(dtype, _nbtypes.Type):
            dtype = _npsupport.as_dtype(dtype)
        a = _poisoned(shape, dtype)
        if _launch is not None and _cur is not None:
            _launch.block_locals.append((_cur.tid, a))    # its footprint, at the block's end
        return a


def _local_footprints(launch):
    """Fold the finished block's ``cuda.local`` arrays into the launch's local-memory figures:
    per thread that has local arrays, ``(nbytes, bytes stored to)`` of each, largest first
    (``local_threads``; an element is stored to when it no longer holds the poison it started
    with), and the most bytes one thread's arrays take (``local_alloc_max``)."""
    if not launch.block_locals:
        return
    per = {}
    for tid, a in launch.block_locals:
        if a.dtype.kind in "fc":
            n = int(a.size - np.count_nonzero(np.isnan(a)))
        else:
            b = a.reshape(-1).view(np.uint8).reshape(a.size, a.itemsize)
            n = int(np.count_nonzero((b != INT_POISON).any(axis=1)))
        per.setdefault(tid, []).append((a.nbytes, n * a.itemsize))
    for arrays in per.values():
        arrays.sort(reverse=True)
        launch.local_alloc_max = max(launch.local_alloc_max, sum(x for x, _ in arrays))
        launch.local_threads.append(arrays)
    launch.block_locals = []


class _Const:
    def array_like(self, ary):
        return ary


def _flat_index(arr, index):
    if isinstance(index, tuple):
        return index
    return (index,)


class _Atomic:
    """Atomics: bounds-checked, counted, exempt from the race detector, and a switch point so
    that a thread spinning on an atomic lets the others run."""

    def _op(self, array, index, fn):
        idx = _flat_index(array, index)
        a = array._a if isinstance(array, SimArray) else array
        if isinstance(array, SimArray):
            f = _getframe(2)
            off = array._offset(idx, f)
            if off is None:
                raise OutOfBoundsError(f"{_where()}: unsupported atomic index {index!r}")
            if _mode:      # logged as a write with the atomic bit: races with plain accesses
                _log.append(array._kw + off + ATOMIC_BIT)
                if _mode >= 2:
                    _slog.append(f.f_lasti if f.f_code is _kcode else _site(f))
        if isinstance(array, SimArray) and array._root.space == "g":
            array._root.natomic += 1
        old = a[idx]
        new = fn(old)
        changed = not (new == old or (new != new and old != old))
        if changed:
            try:
                a[idx] = new
            except OverflowError:
                a[idx] = _narrow(new, a.dtype)
        _launch.counters["atomics"] += 1
        _yield("atomic", changed)
        return old

    def add(self, array, index, val):
        return self._op(array, index, lambda o: o + val)

    def sub(self, array, index, val):
        return self._op(array, index, lambda o: o - val)

    def and_(self, array, index, val):
        return self._op(array, index, lambda o: o & val)

    def or_(self, array, index, val):
        return self._op(array, index, lambda o: o | val)

    def xor(self, array, index, val):
        return self._op(array, index, lambda o: o ^ val)

    def inc(self, array, index, val):
        return self._op(array, index, lambda o: 0 if o >= val else o + 1)

    def dec(self, array, index, val):
        return self._op(array, index, lambda o: val if (o == 0 or o > val) else o - 1)

    def exch(self, array, index, val):
        return self._op(array, index, lambda o: val)

    def max(self, array, index, val):
        return self._op(array, index, lambda o: max(o, val))

    def min(self, array, index, val):
        return self._op(array, index, lambda o: min(o, val))

    def nanmax(self, array, index, val):
        return self._op(array, index, lambda o: np.nanmax([o, val]))

    def nanmin(self, array, index, val):
        return self._op(array, index, lambda o: np.nanmin([o, val]))

    def cas(self, array, index, old, val):
        return self._op(array, index, lambda o: val if o == old else o)

    def compare_and_swap(self, array, old, val):
        return self.cas(array, (0,) * array.ndim, old, val)


class _GridGroup:
    def sync(self):
        if _launch.nblocks != 1:
            raise DivergenceError(
                f"{_where()}: grid.sync() with {_launch.nblocks} blocks: the sim tier runs blocks "
                "one after another and can only synchronise a one-block grid")
        return _barrier("plain", 0, _getframe(1))


class _CG:
    def this_grid(self):
        return _GridGroup()


class SimCudaModule(_kapi.FakeCUDAModule):
    """The ``cuda`` a kernel sees during a sim-tier launch: the stock simulator's module with
    threads, barriers, atomics, shared/local memory and warp intrinsics replaced."""

    def __init__(self, launch):
        super().__init__(launch.grid, launch.block, launch.dynshared_size)
        self._shared = _Shared(launch)
        self._local = _Local()
        self._atomic = _Atomic()
        self._cg = _CG()
        self._launch = launch

    # plain attributes (not the stock module's properties), set by the scheduler each time
    # it switches to a thread: cheaper than a property call on every use in a kernel
    threadIdx = None
    blockIdx = None
    laneid = None

    def grid(self, n):
        t = _cur.idx
        b = _launch.ctaid
        bd = _launch.block
        x = b[0] * bd[0] + t[0]
        if n == 1:
            return x
        y = b[1] * bd[1] + t[1]
        if n == 2:
            return (x, y)
        if n == 3:
            return (x, y, b[2] * bd[2] + t[2])
        raise RuntimeError("Global ID has 1-3 dimensions. %d requested" % n)

    def syncthreads(self):
        t = _cur
        t.state = 1
        t.wait = ("plain", 0, _getframe(1))
        _sched.switch()

    def syncthreads_count(self, val):
        return _barrier("count", val, _getframe(1))

    def syncthreads_and(self, val):
        return _barrier("and", val, _getframe(1))

    def syncthreads_or(self, val):
        return _barrier("or", val, _getframe(1))

    # warp-level primitives (CUDA C++ Programming Guide, "Warp Shuffle Functions",
    # "Warp Vote Functions", "__syncwarp"; numba-cuda docs "Warp Intrinsics")
    def syncwarp(self, mask=0xFFFFFFFF):
        _warp_op("syncwarp", mask, None, None, _getframe(1))

    def shfl_sync(self, mask, value, src_lane):
        return _warp_op("shfl", mask, value, src_lane, _getframe(1))

    def shfl_up_sync(self, mask, value, delta):
        return _warp_op("shfl_up", mask, value, delta, _getframe(1))

    def shfl_down_sync(self, mask, value, delta):
        return _warp_op("shfl_down", mask, value, delta, _getframe(1))

    def shfl_xor_sync(self, mask, value, lane_mask):
        return _warp_op("shfl_xor", mask, value, lane_mask, _getframe(1))

    def ballot_sync(self, mask, predicate):
        return _warp_op("ballot", mask, predicate, None, _getframe(1))

    def all_sync(self, mask, predicate):
        return _warp_op("all", mask, predicate, None, _getframe(1))

    def any_sync(self, mask, predicate):
        return _warp_op("any", mask, predicate, None, _getframe(1))

    def eq_sync(self, mask, value):
        return _warp_op("eq", mask, value, None, _getframe(1))

    def match_any_sync(self, mask, value):
        return _warp_op("match_any", mask, value, None, _getframe(1))

    def match_all_sync(self, mask, value):
        return _warp_op("match_all", mask, value, None, _getframe(1))

    def activemask(self):
        return _warp_op("activemask", ACTIVE, None, None, _getframe(1))

    def lanemask_lt(self):
        return np.uint32((1 << _cur.lane) - 1)

    def dp4a(self, a, b, c):
        return dp4a(a, b, c)


def dp4a(a, b, c):
    """``c + sum_k a_k * b_k`` over the four bytes of ``a`` and ``b`` (PTX ``dp4a``).

    Bytes are signed when the operand's type is signed (Python ``int``, ``np.int32``...) and
    unsigned for numpy unsigned integers, as :mod:`kernellab.cuda_ext`'s GPU intrinsic types
    them; the result is ``np.int32`` (``np.uint32`` when both ``a`` and ``b`` are unsigned) and
    wraps on overflow. Source: PTX ISA, "Integer Arithmetic Instructions: dp4a".
    """
    ua = isinstance(a, np.unsignedinteger)
    ub = isinstance(b, np.unsignedinteger)

    def lanes(x, unsigned):
        raw = np.array([int(x) & 0xFFFFFFFF], np.uint32)
        return raw.view(np.uint8 if unsigned else np.int8).astype(np.int64)
    acc = (int(np.dot(lanes(a, ua), lanes(b, ub))) + int(c)) & 0xFFFFFFFF
    out = np.array([acc], np.uint32)
    return out[0] if (ua and ub) else out.view(np.int32)[0]


# ----------------------------------------------------------------------------------------
# Thread switching

_sched = None   # the scheduler greenlet of the running block


def _barrier(kind, value, frame):
    t = _cur
    t.state = 1
    t.wait = (kind, value, frame)
    return _sched.switch()


def _warp_op(op, mask, value, arg, frame):
    t = _cur
    t.state = 2
    try:
        m = mask if mask is ACTIVE else int(mask) & 0xFFFFFFFF
    except (TypeError, ValueError):
        raise DivergenceError(f"{_where()}: {op} mask {mask!r} is not an integer") from None
    t.wait = (op, m, value, arg, (frame.f_code, frame.f_lasti))
    return _sched.switch()


def _yield(why, changed):
    t = _cur
    t.wait = (why, changed)
    return _sched.switch()


def _slice():
    _yield("slice", False)


# ----------------------------------------------------------------------------------------
# A launch


class _NeedDetail(Exception):
    """A hazard was found by a log without the detail to explain it: re-run the launch in
    ``mode`` (2: logging source sites, so the error can name lines; 3: with call contexts
    too, so a race can be put in program order)."""

    def __init__(self, mode=2):
        super().__init__(mode)
        self.mode = mode


def _bank_words(req, addr, isz):
    """``(req, word)``: the 4-byte shared-memory words (``addr // BANK_BYTES``; word w is in
    bank w mod 32) of each access, tagged with the access's request ``req``; an 8- or 16-byte
    element occupies 2 or 4 consecutive words, each listed (CUDA C++ Programming Guide,
    "Shared Memory", compute capability 5.x and later)."""
    word = addr // BANK_BYTES
    if (isz > BANK_BYTES).any():
        wide = isz > BANK_BYTES
        more = [wide & (isz > BANK_BYTES * k) for k in range(1, 4)]
        req = np.concatenate([req] + [req[m] for m in more])
        word = np.concatenate([word] + [word[m] + k for k, m in enumerate(more, 1)])
    return req, word


class _Launch:
    def __init__(self, kernel, grid, block, dynshared_size, name):
        self.kernel = kernel
        self.name = name
        self.grid = grid
        self.block = block
        self.dynshared_size = dynshared_size or 0
        self.nblocks = grid[0] * grid[1] * grid[2]
        self.nthreads = block[0] * block[1] * block[2]
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)
        self.roots = []          # by aid: globals first, then each block's shared arrays
        self.groots = []
        self.block_roots = []
        self.shared_roots = {}
        self.shared_bytes = 0
        self.shared_bytes_used = 0
        self.ctaid = (0, 0, 0)
        self.ctaid3 = None
        self.blin = 0
        self.threads = []
        self.trace = None
        self.want_trace = False
        self.trace_parts = []
        self.t0 = time.monotonic()
        self.dyn = None
        self.kcode = kernel.fn.__code__
        self.pending = 0
        self.isz_by_aid = self.base_by_aid = self.isg_by_aid = None
        self.segs = []
        self.wevents = {}       # __syncwarp event id -> lane mask (thread wep = last event)
        self.nwevents = 0
        self.block_event0 = 0
        self.mark_segs = 0
        self.log_marks = {}
        self.epoch = 0
        self.memo = {}
        self.block_start_flush = True
        self.block_open = False
        self.trace_roots = []
        self.shuffle_warps = set()  # (block, warp) of every warp that executed a shuffle
        self.arrays = []
        self.block_locals = []      # (tid, array) of the running block's cuda.local arrays
        self.local_alloc_max = 0    # bytes of local arrays of the thread that has the most
        self.local_threads = []     # per thread with local arrays: [(nbytes, stored bytes)]
        self.site_acc = {}          # mode 2: (site, array id * 2 + is_write) -> global traffic
        self.sites = None
        # mode 2: (site, array id * 2 + is_write) -> [array name, shared requests, wavefronts,
        # conflict-free wavefronts, worst request's wavefronts]
        self.shared_site_acc = {}
        self.shared_sites = None
        self.shared_rows = None     # what the last _count added to shared_site_acc (memo)
        self.bar_sites = []         # the running block's barriers, in order: (code, offset)
        # the busiest block's work: the most global sectors, shared wavefronts and barriers
        # one block had (each a maximum over the blocks on its own)
        self.block_max = dict.fromkeys(BLOCK_MAX_KEYS, 0)

    # -- memory
    def global_root(self, name, arr):
        """Wrap kernel argument ``arr``. The allocation it lives in is the *root*: a view of a
        contiguous array (a column ``A[:, 1]``, ``d[::2]``, a transposed matrix) gets a root
        over that array, so addresses, races and sectors are those of the real memory; two
        arguments in one allocation share it (an in-place stencil ``k(d, d)`` is race-checked).
        """
        base_arr = arr
        while isinstance(base_arr.base, np.ndarray):
            base_arr = base_arr.base
        if not (base_arr.flags.c_contiguous and base_arr.dtype == arr.dtype
                and np.shares_memory(arr, base_arr)):
            base_arr = arr if arr.flags.c_contiguous else None
        if base_arr is None:
            # an odd view (another dtype, a non-contiguous owner): address it in its own
            # C-order element space; races and counters still see each element once
            base_arr = np.ascontiguousarray(arr)
            logical = True
        else:
            logical = False
        for root in self.groots:
            if root.arr is base_arr and not logical:
                break
        else:
            base = ALIGN * (1 << 24) * (1 + len(self.groots))
            root = _Root(name, "g", base_arr, base, len(self.roots))
            self.roots.append(root)
            self.groots.append(root)
            nsec = (base_arr.size * base_arr.itemsize + SECTOR - 1) // SECTOR + 1
            root.dram_r = np.zeros(nsec, np.bool_)
            root.dram_w = np.zeros(nsec, np.bool_)
            root.wowner = np.full(base_arr.size, -1, np.int32)
            root.rowner = np.full(base_arr.size, -1, np.int32)
            root.stored = np.zeros(base_arr.size, np.bool_)
            root.dram_a = np.zeros(nsec, np.bool_)
            if _listeners:      # what the allocation held when the launch started
                root.digest0 = content_digest(base_arr)
        if logical:
            if arr is not base_arr:
                root.arr = arr             # reads and writes go to the caller's array
                root.flat = None
            return SimArray(arr, root, 0, tuple(
                int(np.prod(arr.shape[k + 1:])) for k in range(arr.ndim)))
        off0 = ((arr.__array_interface__["data"][0]
                 - base_arr.__array_interface__["data"][0]) // arr.itemsize)
        return _wrap(arr, root, off0)

    def shared_array(self, shape, dtype, frame):
        if isinstance(dtype, _nbtypes.Type):
            dtype = _npsupport.as_dtype(dtype)
        dtype = np.dtype(dtype)
        if shape == 0:
            # one buffer a block (bytes 0xFF: NaN for every float width), one view per dtype;
            # views of different dtypes are separate arrays to the race and uninitialised-read
            # checks
            if self.dyn is None:
                self.dyn = {"bytes": np.full(self.dynshared_size, 0xFF, np.uint8)}
            view = self.dyn.get(dtype)
            if view is None:
                raw = self.dyn["bytes"]
                arr = raw[:len(raw) // dtype.itemsize * dtype.itemsize].view(dtype)
                view = self.dyn[dtype] = self._new_shared(f"dynamic_shared[{dtype}]", arr)
                if len(self.dyn) > 2:
                    for other in self.dyn.values():
                        if isinstance(other, SimArray):
                            other._root.written[:] = True   # set through another dtype
            return view
        # one buffer per call site and block (code object + instruction offset: two
        # allocations on one source line are two arrays, unlike the stock simulator)
        # (CPython's specialising interpreter may report one call site at two offsets)
        key = (frame.f_code, _instr_start(frame.f_code, frame.f_lasti))
        got = self.shared_roots.get(key)
        if got is None:
            arr = _poisoned(shape, dtype)
            self.shared_bytes += arr.nbytes
            if self.shared_bytes + self.dynshared_size > MAX_STATIC_SHARED:
                dyn = (f" plus {self.dynshared_size} bytes of dynamic shared memory"
                       if self.dynshared_size else "")
                raise LaunchConfigError(
                    f"{_where()}: static shared memory of this block reaches {self.shared_bytes} "
                    f"bytes at line {frame.f_lineno}{dyn}; the limit is {MAX_STATIC_SHARED} "
                    "bytes (48 KiB) a block")
            name = _assigned_name(frame.f_code, frame.f_lasti) or f"shared{len(self.shared_roots)}"
            got = self._new_shared(name, arr)
            self.shared_roots[key] = got
        return got

    def _new_shared(self, name, arr):
        base = self.shared_bytes_used
        self.shared_bytes_used = base + (arr.nbytes + 15) // 16 * 16
        root = _Root(name, "s", arr, base, len(self.roots))
        self.roots.append(root)
        root.written = np.zeros(arr.size, np.bool_)
        self.block_roots.append(root)
        return _wrap(arr, root, 0)

    # -- lines
    def site_line(self, site):
        site = int(site) & ~1
        cid, lasti = site >> 24, site & 0xFFFFFF
        code = self.kcode if cid == 0 else _codes[cid]
        return _line_of(code, lasti)

    def site_where(self, site):
        site = int(site) & ~1
        cid = site >> 24
        code = self.kcode if cid == 0 else _codes[cid]
        line = self.site_line(site)
        if cid == 0:
            return f"line {line}"
        return f"line {line} of {code.co_name}"

    # -- access logs. A thread's log is closed into a segment at each barrier, __syncwarp,
    # forced switch and exit; segments are analysed in bulk by flush(), at the end of a block
    # once enough have piled up (never inside a barrier interval, except when a forced
    # switch finds a thread spinning).
    def close(self, t):
        if t.log:
            self.segs.append((self.blin, self.epoch, t.tid, t.wep, t.log, t.slog))
            t.log = _new_log()
            t.slog = _new_log()

    def stored_since_mark(self, threads):
        """True when any thread logged a plain store since the previous call (the watchdog's
        test of progress at a forced switch; atomics report their own progress); then moves
        the mark."""
        found = False
        for sg in self.segs[self.mark_segs:]:
            if ((np.frombuffer(sg[4], np.int64) & _STORE_BITS) == WRITE_BIT).any():
                found = True
                break
        marks = self.log_marks
        for t in threads:
            lg = t.log
            m = marks.get(t.tid)
            start = m[1] if m is not None and m[0] is lg else 0
            if not found and len(lg) > start and (
                    (np.frombuffer(lg, np.int64)[start:] & _STORE_BITS) == WRITE_BIT).any():
                found = True
            marks[t.tid] = (lg, len(lg))
        self.mark_segs = len(self.segs)
        return found

    def flush(self):
        """Analyse the closed segments (counters, races, uninitialised reads); returns True
        when any of them stored to memory."""
        segs = self.segs
        self.segs = []
        self.mark_segs = 0
        self.pending = 0
        if not segs:
            return False
        lens = [len(sg[4]) for sg in segs]
        key = np.frombuffer(_join([sg[4] for sg in segs]), np.int64)
        meta = np.array([sg[:4] for sg in segs], np.int64)
        rep = np.repeat(np.arange(len(segs)), lens)
        blin = meta[rep, 0]
        epoch = meta[rep, 1]
        tid = meta[rep, 2]
        wep = meta[rep, 3]
        ctx = None
        if _mode >= 2:
            site = np.frombuffer(_join([sg[5] for sg in segs]), np.int64)
            if _mode == 3:
                ctx = site >> CTX_SHIFT
                site = site & SITE_MASK
            site = self._canonical(site)
        else:
            site = None
        nep = int(meta[:, 1].max()) + 1
        _, iv = _dense(blin * nep + epoch)
        self.isz_by_aid = np.array([r.itemsize for r in self.roots], np.int64)
        self.base_by_aid = np.array([r.base for r in self.roots], np.int64)
        self.isg_by_aid = np.array([r.space == "g" for r in self.roots], np.bool_)
        if self.want_trace and self.blin == 0:
            self.trace_roots = list(self.roots)
        isg = self.isg_by_aid[key >> AID_SHIFT]
        parts = []
        if isg.all() or not isg.any():
            parts.append((None, bool(isg.all())))
        else:
            parts = [(np.flatnonzero(isg), True), (np.flatnonzero(~isg), False)]
        whole_block = self.block_start_flush and len(segs) and not self.block_open
        for sel, glob in parts:
            if sel is None:
                k, t, b, i, w, e = key, tid, blin, iv, wep, epoch
                st, cx = site, ctx
            else:
                k, t, b, i, w, e = key[sel], tid[sel], blin[sel], iv[sel], wep[sel], epoch[sel]
                st = site[sel] if site is not None else None
                cx = ctx[sel] if ctx is not None else None
            memo_key = None
            if not glob and whole_block and _mode:
                # A block's shared memory starts fresh, so the analysis of its shared
                # accesses depends only on this log: blocks with identical logs (the usual
                # case: data-independent indexing) reuse the first one's result, exactly.
                w_rel = np.where(w > self.block_event0, w - self.block_event0, 0)
                meta_ = (e << 32) | (w_rel << 10) | t
                shapes = tuple((r.itemsize, r.shape) for r in self.block_roots)
                memo_key = (len(k), int(k.sum()), int((k * meta_).sum()), shapes)
                hit = self.memo.get(memo_key)
                if hit is not None and np.array_equal(hit[0], k) and np.array_equal(hit[1], meta_):
                    for name, v in hit[2].items():
                        self.counters[name] += v
                    if hit[3]:
                        self._add_shared_rows(hit[3])
                    continue
                memo_arrays = (k, meta_)
                before = {n_: self.counters[n_] for n_ in SHARED_KEYS}
            self.shared_rows = None
            self._count(k, t, b, i, st)
            if _OPTS["race_check"]:
                self._races(k, t, b, i, w, st, e, cx)
            if not glob:
                self._uninitialised(k, t, b, e, st)
            if memo_key is not None:
                if len(self.memo) >= MEMO_ENTRIES:
                    self.memo.pop(next(iter(self.memo)))
                self.memo[memo_key] = memo_arrays + (
                    {n_: self.counters[n_] - before[n_] for n_ in SHARED_KEYS},
                    self.shared_rows)
        self.block_start_flush = False
        if _mode == 3:      # every log is closed at a flush: the contexts can go
            _ctx_ids.clear()
            del _ctxs[1:]
        return bool(((key >> W_SHIFT) & 1).any())

    def _count(self, key, tid, blin, iv, site):
        """Traffic counters. An access's warp-level request is (array, load/store, barrier
        interval, warp, n-th access of that kind to that array by the thread in the interval):
        the lanes of a warp run one instruction stream, so their n-th accesses are one
        instruction."""
        c = self.counters
        ak = key >> W_SHIFT                      # array id * 2 + is_write
        niv = int(iv.max()) + 1
        uak_iv, akiv = _dense(ak * niv + iv)
        g = (akiv << 10) | tid
        order = np.argsort(g, kind="stable")
        gs = g[order]
        starts = np.r_[0, np.flatnonzero(gs[1:] != gs[:-1]) + 1]
        counts = np.diff(np.r_[starts, len(gs)])
        occ = np.empty(len(gs), np.int64)
        occ[order] = np.arange(len(gs)) - np.repeat(starts, counts)
        req = (((akiv << 5) | (tid >> 5)) << 26) | occ
        ureq, rinv = _dense(req)
        req_ak = (uak_iv // niv)[ureq >> 31]
        aid = ak >> 1
        off = key & OFF_MASK
        isz = self.isz_by_aid[aid]
        addr = self.base_by_aid[aid] + off * isz
        isg = self.isg_by_aid[aid]
        nak = int(ak.max()) + 1
        n_ak = np.bincount(ak, minlength=nak)
        req_per_ak = np.bincount(req_ak, minlength=nak)
        cost = np.zeros(nak, np.int64)
        if isg.any():
            ga, gr, gi = addr[isg], rinv[isg], isz[isg]
            secs = _uniq(np.r_[(gr << 34) | (ga // SECTOR),
                                   (gr << 34) | ((ga + gi - 1) // SECTOR)])
            cost += np.bincount(req_ak[secs >> 34], minlength=nak)
            if site is not None:
                self._count_sites(ga, gr, gi, site[isg], req_ak)
            gaid = aid[isg]
            gw = ((key[isg] >> W_SHIFT) & 1).astype(np.bool_)
            gat = (key[isg] & ATOMIC_BIT) != 0
            for root in self.groots:
                m = gaid == root.aid
                if not m.any():
                    continue
                o = off[isg][m] * root.itemsize
                w = gw[m]
                root.stored[off[isg][m][w]] = True
                # an atomic is a read-modify-write: counted as a store, its sectors also
                # reported apart (``LaunchStats.arrays``: dram_atomic_bytes)
                for bm, sel in ((root.dram_r, ~w), (root.dram_w, w), (root.dram_a, gat[m])):
                    if sel.any():
                        bm[o[sel] // SECTOR] = True
                        bm[(o[sel] + root.itemsize - 1) // SECTOR] = True
        if (~isg).any():
            sa, sr, si = addr[~isg], rinv[~isg], isz[~isg]
            if site is not None:
                self._count_shared_sites(sa, sr, si, site[~isg], req_ak, aid[~isg])
            sr, word = _bank_words(sr, sa, si)
            ur, sinv = _dense(sr)
            uw = _uniq((sinv << 34) | word)
            bank = (uw & ((1 << 34) - 1)) % BANKS
            per_bank = np.bincount((uw >> 34) * BANKS + bank, minlength=len(ur) * BANKS)
            waves = per_bank.reshape(len(ur), BANKS).max(axis=1)
            cost += np.bincount(req_ak[ur], weights=waves, minlength=nak).astype(np.int64)
        for a in np.flatnonzero(n_ak).tolist():
            root = self.roots[a >> 1]
            kind = "store" if a & 1 else "load"
            if root.space == "g":
                if a & 1:
                    root.nstore += int(n_ak[a])
                else:
                    root.nload += int(n_ak[a])
                c[f"global_{kind}_requests"] += int(req_per_ak[a])
                c[f"global_{kind}_elements"] += int(n_ak[a])
                c[f"global_{kind}_bytes"] += int(n_ak[a]) * root.itemsize
                c[f"global_{kind}_sectors"] += int(cost[a])
            else:
                c[f"shared_{kind}_requests"] += int(req_per_ak[a])
                c[f"shared_{kind}_elements"] += int(n_ak[a])
                c[f"shared_{kind}_wavefronts"] += int(cost[a])
        if self.want_trace:
            first = blin == 0
            if first.any():
                self.trace_parts.append((key[first], tid[first],
                                         site[first] if site is not None else None,
                                         req[first]))

    def _count_sites(self, ga, gr, gi, gsite, req_ak):
        """Per access site (source instruction) and array: global requests, sectors moved,
        bytes asked for, and bytes asked capped per request at the bytes its sectors moved (a
        broadcast asks for 128 bytes of one 32-byte sector: 32 count). A site's request is a
        warp-level request's accesses made from that site (divergent lanes at one request
        index but two instructions are two requests)."""
        us, sinv = _dense(gsite)
        usub, subinv = _dense(gr * len(us) + sinv)
        nsub = len(usub)
        secs = _uniq(np.r_[(subinv << 34) | (ga // SECTOR),
                           (subinv << 34) | ((ga + gi - 1) // SECTOR)])
        moved = SECTOR * np.bincount(secs >> 34, minlength=nsub)
        asked = np.bincount(subinv, weights=gi, minlength=nsub).astype(np.int64)
        capped = np.minimum(asked, moved)
        sub_ak = req_ak[usub // len(us)]
        sub_site = us[usub % len(us)]
        nak = int(sub_ak.max()) + 1
        ukey, kinv = _dense(sub_site * nak + sub_ak)
        sums = [np.bincount(kinv, weights=w, minlength=len(ukey)).astype(np.int64)
                for w in (None, moved, asked, capped)]
        acc = self.site_acc
        for k, key_ in enumerate(ukey.tolist()):
            site_ak = (key_ // nak, key_ % nak)
            got = acc.get(site_ak)
            row = [int(x[k]) for x in sums]
            acc[site_ak] = row if got is None else [a + b for a, b in zip(got, row)]

    def _count_shared_sites(self, sa, sr, si, ssite, req_ak, said):
        """Per access site and shared array: requests, wavefronts, the wavefronts the same
        requests need without bank conflicts (ceil(distinct 4-byte words / 32) each), and the
        worst request's wavefronts. A site's request is the accesses of one warp-level request
        made from that site (as :meth:`_count_sites`). Mode 2 only: the bank-conflict detail
        of a speed rule (CUDA C++ Programming Guide, "Shared Memory" of compute capability
        5.x+: an n-way conflict takes n wavefronts where one would do)."""
        us, sinv = _dense(ssite)
        usub, subinv = _dense(sr * len(us) + sinv)
        nsub = len(usub)
        first = np.zeros(nsub, np.int64)        # an access of each sub-request: its array
        first[subinv] = np.arange(len(subinv))
        subinv, word = _bank_words(subinv, sa, si)
        uw = _uniq((subinv << 34) | word)
        owner = uw >> 34
        bank = (uw & ((1 << 34) - 1)) % BANKS
        per_bank = np.bincount(owner * BANKS + bank, minlength=nsub * BANKS)
        waves = per_bank.reshape(nsub, BANKS).max(axis=1)
        ideal = -(-np.bincount(owner, minlength=nsub) // BANKS)
        sub_ak = req_ak[usub // len(us)]
        sub_site = us[usub % len(us)]
        nak = int(sub_ak.max()) + 1
        ukey, kinv = _dense(sub_site * nak + sub_ak)
        sums = [np.bincount(kinv, weights=w, minlength=len(ukey)).astype(np.int64)
                for w in (None, waves, ideal)]
        worst = np.zeros(len(ukey), np.int64)
        np.maximum.at(worst, kinv, waves)
        k_aid = np.zeros(len(ukey), np.int64)
        k_aid[kinv] = said[first]
        rows = {}
        for k, key_ in enumerate(ukey.tolist()):
            rows[(key_ // nak, key_ % nak)] = [str(self.roots[int(k_aid[k])].name),
                                               int(sums[0][k]), int(sums[1][k]),
                                               int(sums[2][k]), int(worst[k])]
        self.shared_rows = rows
        self._add_shared_rows(rows)

    def _add_shared_rows(self, rows):
        acc = self.shared_site_acc
        for site_ak, row in rows.items():
            got = acc.get(site_ak)
            acc[site_ak] = list(row) if got is None else [
                got[0], got[1] + row[1], got[2] + row[2], got[3] + row[3], max(got[4], row[4])]

    def _canonical(self, site):
        """Map each site to the offset of its instruction: CPython 3.11's specialising
        interpreter reports a call from a quickened subscript at the instruction's last inline
        cache entry rather than at the instruction, so one access has two raw offsets."""
        u, inv = np.unique(site, return_inverse=True)
        out = np.empty_like(u)
        for k, s_ in enumerate(u.tolist()):
            cid, lasti = s_ >> 24, s_ & 0xFFFFFF
            code = self.kcode if cid == 0 else _codes[cid]
            out[k] = (cid << 24) | _instr_start(code, lasti)
        return out[inv.ravel()]

    def _uninitialised(self, key, tid, blin, epoch, site):
        """Reads of shared memory that no thread wrote before (or in) the read's interval."""
        aid = key >> AID_SHIFT
        sh = ~self.isg_by_aid[aid]
        if not sh.any():
            return
        idx = np.flatnonzero(sh)
        addr_id = key[idx] & ~(WRITE_BIT | ATOMIC_BIT)
        w = ((key[idx] >> W_SHIFT) & 1).astype(np.bool_)
        ua, ad = _dense(addr_id)
        big = np.iinfo(np.int64).max
        # order of the accesses: barrier interval first, then position in the log (a thread's
        # accesses keep program order; another thread's write in the same interval is a race,
        # reported before this check)
        ep = epoch[idx]
        th = tid[idx]
        seq = (ep << 40) | idx
        fw = np.full(len(ua), big, np.int64)
        np.minimum.at(fw, ad[w], seq[w])
        # a write by another thread in the read's own interval is the race detector's business
        # (racy, not uninitialised): find, per (address, interval), whether threads other than
        # one single writer wrote
        nep_ = int(ep.max()) + 1
        ae = ad * nep_ + ep
        wkeys, winv = _dense(ae[w])
        lo = np.full(len(wkeys), big, np.int64)
        hi = np.full(len(wkeys), -1, np.int64)
        np.minimum.at(lo, winv, th[w])
        np.maximum.at(hi, winv, th[w])
        prev = np.zeros(len(ua), np.bool_)
        ua_aid = ua >> AID_SHIFT
        ua_off = ua & OFF_MASK
        for a in np.unique(ua_aid).tolist():
            root = self.roots[a]
            m = ua_aid == a
            prev[m] = root.written[ua_off[m]]
            root.written[ua_off[m][fw[m] != big]] = True
        r = ~w
        bad = r & ~prev[ad] & (fw[ad] > seq)
        if bad.any() and len(wkeys):
            k_bad = np.flatnonzero(bad)
            pos = np.minimum(np.searchsorted(wkeys, ae[k_bad]), len(wkeys) - 1)
            same_iv = wkeys[pos] == ae[k_bad]
            other = same_iv & ((lo[pos] != th[k_bad]) | (hi[pos] != th[k_bad]))
            bad[k_bad[other]] = False
        if bad.any():
            if _mode < 2:
                raise _NeedDetail(2)
            k = int(np.flatnonzero(bad)[0])
            root = self.roots[int(aid[idx][k])]
            th = self.thread_idx(int(tid[idx][k]))
            # threads of the block that had returned before the read's barrier interval: the
            # usual cause is an early `return` above the shared-memory loads
            r_ep = int(ep[k])
            gone = sum(t.exit_ep is not None and t.exit_ep < r_ep for t in self.threads)
            early = (f"; {gone} of the block's {len(self.threads)} threads had already "
                     "returned, which is the likely cause if they were to store it: a thread "
                     "that returns early (e.g. `if row >= M: return` above the tile loads) "
                     "stores nothing to the tile and skips the barriers; keep every thread to "
                     "the end and guard only its global loads and stores"
                     if 0 < gone < len(self.threads) else "")
            raise UninitialisedReadError(
                f"tid={_idx_str(th)} ctaid={_idx_str(self.block_idx(blin[idx][k]))}: read of shared "
                f"array {root.name}{_unravel(root, int(ua_off[ad[k]]))} at "
                f"{self.site_where(site[idx][k])}, which no thread of this block has "
                "written (shared memory starts uninitialised on a GPU; the sim tier "
                f"fills it with NaN / bytes 0xCD){early}")

    def _races(self, key, tid, blin, iv, wep, site, epoch, ctx=None):
        addr_id = key & ~(WRITE_BIT | ATOMIC_BIT)   # array id and offset
        isw = ((key >> W_SHIFT) & 1).astype(np.bool_)
        isa = ((key >> OFF_BITS) & 1).astype(np.bool_)
        if isw.any():
            # (address, interval) pairs touched by two or more threads, at least one writing
            ua, ad = _dense(addr_id)
            niv = int(iv.max()) + 1
            adiv = ad * niv + iv
            pair = _uniq((adiv << 10) | tid)
            q = pair >> 10
            multi = q[1:][q[1:] == q[:-1]]
            if len(multi):
                cand = np.intersect1d(multi, adiv[isw])
                if isa.any():       # two atomics never race: a race needs a plain access
                    cand = np.intersect1d(cand, adiv[~isa])
                if len(cand):
                    self._check_candidates(cand, adiv, addr_id, tid, blin, wep, site, isw,
                                           isa, (iv, epoch, ctx))
        # across blocks: blocks are unordered, so an address one block writes must not be
        # touched by another block of the same launch
        aid = addr_id >> AID_SHIFT
        for root in self.groots:
            # (atomics from several blocks on one address are the point of atomics; an atomic
            # against another block's plain access is not checked across blocks)
            m = np.flatnonzero((aid == root.aid) & ~isa)
            if not len(m):
                continue
            off = addr_id[m] & OFF_MASK
            w = isw[m]
            b = blin[m]
            uo, inv = _dense(off)
            big = np.iinfo(np.int64).max
            summary = []
            for sel, owner in ((w, root.wowner), (~w, root.rowner)):
                lo = np.full(len(uo), big, np.int64)
                hi = np.full(len(uo), -1, np.int64)
                np.minimum.at(lo, inv[sel], b[sel])
                np.maximum.at(hi, inv[sel], b[sel])
                new = np.where(hi < 0, -1, np.where(lo == hi, lo, -2))
                old = owner[uo].astype(np.int64)
                merged = np.where(old == -1, new,
                                  np.where((new == -1) | (new == old), old, -2))
                owner[uo] = merged
                summary.append(merged)
            wo, ro = summary
            bad = (wo == -2) | ((wo >= 0) & (ro != -1) & (ro != wo))
            if _mode >= 2 and root.first is None:
                root.first = np.full((root.elems, 4), -1, np.int64)   # block, tid, site, write
            if bad.any():
                if _mode < 2:
                    raise _NeedDetail(2)
                u = int(np.flatnonzero(bad)[0])
                ks = np.flatnonzero(inv == u)
                kw = ks[w[ks]]
                k = int(kw[-1]) if len(kw) else int(ks[-1])
                g = m[k]
                # the other side: an access from another block, in this batch or earlier
                other = None
                for k2 in ks.tolist():
                    if b[k2] != b[k] and (w[k2] or w[k]):
                        g2 = m[k2]
                        other = (int(b[k2]), int(tid[g2]), int(site[g2]), bool(isw[g2]))
                        break
                if other is None and root.first[uo[u], 0] >= 0:
                    other = tuple(int(v) for v in root.first[uo[u]])
                self._cross_block_race(root, int(uo[u]), tid[g], site[g],
                                       "write" if isw[g] else "read", int(b[k]), other)
            if _mode >= 2:
                _, firstk = np.unique(inv, return_index=True)
                new = root.first[uo, 0] < 0
                gk = m[firstk[new]]
                root.first[uo[new]] = np.stack([blin[gk], tid[gk], site[gk],
                                                isw[gk].astype(np.int64)], axis=1)

    def _check_candidates(self, cand, adiv, addr_id, tid, blin, wep, site, isw, isa=None,
                          ivs=None):
        sel = np.flatnonzero(np.isin(adiv, cand))
        sel = sel[np.argsort(adiv[sel], kind="stable")]
        groups = {}
        for k in sel.tolist():
            groups.setdefault(int(adiv[k]), []).append(k)
        for ks in groups.values():
            for x in range(len(ks)):
                k1 = ks[x]
                t1, w1, e1 = int(tid[k1]), bool(isw[k1]), int(wep[k1])
                for k2 in ks[x + 1:]:
                    w2 = bool(isw[k2])
                    if not (w1 or w2):
                        continue
                    t2 = int(tid[k2])
                    if t1 == t2:
                        continue
                    if isa is not None and isa[k1] and isa[k2]:
                        continue      # two atomics
                    e2 = int(wep[k2])
                    if t1 // WARP == t2 // WARP and e1 != e2:
                        # ordered if the later of the two threads' __syncwarp events named
                        # both lanes
                        m = self.wevents.get(max(e1, e2), 0)
                        if (m >> (t1 % WARP)) & 1 and (m >> (t2 % WARP)) & 1:
                            continue
                    if _mode != 3:
                        raise _NeedDetail(3)
                    a = int(addr_id[k1])
                    root = self.roots[a >> AID_SHIFT]
                    sp = "global" if root.space == "g" else "shared"
                    self._race(root, sp, a & OFF_MASK, (t1, w1, site[k1]),
                               (t2, w2, site[k2]), int(blin[k1]),
                               None if ivs is None else (k1, k2, tid, site, *ivs))

    def _race(self, root, sp, off, a1, a2, blin, where=None):
        """Raise the RaceError of two accesses ``a1``, ``a2`` = (tid, is_write, site) to one
        element in one barrier interval. ``where`` = (k1, k2, tid, site, iv, epoch, ctx):
        their indices in the analysed batch and its per-access arrays (``ctx``: mode 3's call
        contexts), to tell which access comes first in program order, whether a loop took
        the second one round to a later pass or it is in another call of a device function,
        and so where a syncthreads() must go."""
        def who(a):
            return (f"{'write' if a[1] else 'read'} by tid={_idx_str(self.thread_idx(a[0]))} at "
                    f"{self.site_where(a[2])}")
        head = (f"ctaid={_idx_str(self.block_idx(blin))}: race on {sp} array {root.name}"
                f"{_unravel(root, off)} (byte address {root.base + off * root.itemsize:#x}): ")
        if where is None:
            raise RaceError(f"{head}{who(a1)} and {who(a2)}, with no syncthreads() between them")
        k1, k2, tid, site, iv, epoch, ctx = where
        first, _, passes, loop, paths = self._program_order(k1, k2, tid, site, iv, ctx)
        if first == k2:
            a1, a2 = a2, a1
        ep = int(epoch[k1])
        both = (iv == iv[k1]) & ((site == site[k1]) | (site == site[k2]))
        warps = np.unique(tid[both] // WARP)
        warp = int(warps[0]) if len(warps) == 1 and self.nthreads > WARP else None
        raise RaceError(f"{head}{who(a1)} and {who(a2)}, {self._interval(ep)}: "
                        + _barrier_advice(self, a1, a2, passes, warp, paths, loop))

    def _interval(self, ep):
        """Where barrier interval ``ep`` (the count of syncthreads() the block had passed) lies,
        in words, with the lines of the barriers that open and close it."""
        bars = self.bar_sites

        def at(n):      # the n-th barrier of the block (1-based)
            return self.code_where(*bars[n - 1])
        if not bars:
            return "both in a block that reaches no syncthreads()"
        if ep == 0:
            return f"both before the block's first syncthreads() ({at(1)})"
        if ep == len(bars):
            return f"both after the block's last syncthreads() (the {_ordinal(ep)}, {at(ep)})"
        o, c = at(ep), at(ep + 1)
        if o == c:
            return (f"both after {ep} syncthreads() and before the {_ordinal(ep + 1)} (both "
                    f"at {o})")
        return (f"both after {ep} syncthreads() (the last at {o}) and before the "
                f"{_ordinal(ep + 1)} ({c})")

    def code_where(self, code, lasti):
        """``line N`` (the kernel's own code) or ``line N of FN`` (a device function)."""
        line = _line_of(code, lasti)
        return f"line {line}" if code is self.kcode else f"line {line} of {code.co_name}"

    def site_code(self, site):
        """The code object an access or call site lies in."""
        cid = int(site) >> 24
        return self.kcode if cid == 0 else _codes[cid]

    def _pos(self, site):
        """A site's place in its code: (line << 24) | instruction offset."""
        s_ = int(site)
        code = self.site_code(s_)
        lasti = s_ & 0xFFFFFF
        return (_line_of(code, lasti) << 24) | _instr_start(code, lasti)

    def _program_order(self, k1, k2, tid, site, iv, ctx=None):
        """(first, second, passes, loop, paths) for accesses ``k1``, ``k2`` of one barrier
        interval, in program order, from what each thread executed.

        An access's *path* is its call stack's sites, outermost first (the kernel's call of
        the first device function ... the access itself, from ``ctx``: mode 3's contexts),
        ordered by their places in the code (line, offset), compared left to right; its
        frames carry call instances. Each access is placed by (c, its path), c = how many
        times its thread went back (a loop's back edge) from past the earlier of the two
        paths to or before it since the interval began; ``passes`` = how many such passes
        separate the second from the first (0: straight-line code, or calls one after
        another), ``loop`` = the depth (0: the kernel) of the frame whose loop made the
        first of those passes (None when ``passes`` is 0), ``paths`` = the two paths' sites.
        """
        cx = ctx if ctx is not None else np.zeros(len(site), np.int64)
        comb = (cx << CTX_SHIFT) | site
        cache = {}

        def path(c):        # (sites, places, instances) of combined site-and-context c
            got = cache.get(c)
            if got is None:
                frames = _ctxs[c >> CTX_SHIFT] if (c >> CTX_SHIFT) < len(_ctxs) else ()
                sites = tuple(int(cs) for cs, _ in frames) + (c & SITE_MASK,)
                got = cache[c] = (sites, tuple(self._pos(v) for v in sites),
                                  tuple(n for _, n in frames))
            return got
        p1, p2 = path(int(comb[k1])), path(int(comb[k2]))
        x = min(p1[1], p2[1])

        def placed(k):      # the thread's back edges over x before access k, as indices
            mine = np.flatnonzero((iv == iv[k]) & (tid == tid[k]))
            mine = mine[mine <= k]
            u, inv = np.unique(comb[mine], return_inverse=True)
            after = np.array([path(int(v))[1] > x for v in u.tolist()], np.bool_)[inv.ravel()]
            return mine[1:][after[:-1] & ~after[1:]], mine

        def shared(a, b):   # the deepest frame of paths a, b that is one call in both
            d = 0
            while (d < len(a[2]) and d < len(b[2]) and a[1][d] == b[1][d]
                   and a[2][d] == b[2][d]):
                d += 1
            return d
        (e1, m1), (e2, m2) = placed(k1), placed(k2)
        if (len(e2), p2[1]) < (len(e1), p1[1]):
            k1, k2, e1, e2, m1, m2, p1, p2 = k2, k1, e2, e1, m2, m1, p2, p1
        passes = len(e2) - len(e1)
        loop = None
        if passes:
            # the back edge into the second access's pass: between two accesses of its
            # thread, adjacent in the thread's log (``mine`` holds only that thread's)
            loop = min(shared(path(int(comb[m2[np.searchsorted(m2, e) - 1]])),
                              path(int(comb[e])))
                       for e in e2[len(e1):][:64].tolist())
        return k1, k2, passes, loop, (p1[0], p2[0])

    def _cross_block_race(self, root, off, tid, site, what, blin, other=None):
        t = self.thread_idx(int(tid))
        both = " (at least one of them writing)"
        if other is not None:
            ob, ot, osite, ow = other
            by = (f"{'write' if ow else 'read'} by tid={_idx_str(self.thread_idx(ot))} "
                  f"ctaid={_idx_str(self.block_idx(ob))} at {self.site_where(osite)}")
            if ow and what.startswith("write"):
                # two blocks storing one element: usually a block index mapped to the same
                # output twice (a batch or head index left out of the mapping)
                both = (": two blocks store the same element -- check how blockIdx maps to "
                        "the part of the output each block owns")
        else:
            by = "an access by another block of the same launch"
        raise RaceError(
            f"race on global array {root.name}{_unravel(root, off)} (byte address "
            f"{root.base + off * root.itemsize:#x}): {what} by tid={_idx_str(t)} "
            f"ctaid={_idx_str(self.block_idx(blin))} at {self.site_where(site)} and {by}"
            f"{both}. Blocks run in no fixed order and cannot synchronise with each other "
            "inside one launch: no syncthreads() can order these two accesses (it orders the "
            "threads of one block); each block must store only the part of the output it "
            "owns, or the work that needs another block's result goes in a later launch")

    def block_idx(self, blin):
        gx, gy, _ = self.grid
        bz, rem = divmod(int(blin), gx * gy)
        by, bx = divmod(rem, gx)
        return (bx, by, bz)

    def thread_idx(self, tid):
        bx, by, _ = self.block
        tz, rem = divmod(tid, bx * by)
        ty, tx = divmod(rem, bx)
        return (tx, ty, tz)

    def finish(self):
        self.flush()
        c = self.counters
        c["blocks"] = self.nblocks
        c["threads"] = self.nblocks * self.nthreads
        c["warps"] = self.nblocks * ((self.nthreads + WARP - 1) // WARP)
        for root in self.groots:
            c["dram_read_bytes"] += int(root.dram_r.sum()) * SECTOR
            c["dram_write_bytes"] += int(root.dram_w.sum()) * SECTOR
        self.arrays = [{
            "name": str(r.name), "shape": [int(x) for x in r.arr.shape], "dtype": str(r.arr.dtype),
            "nbytes": int(r.arr.nbytes), "load_elements": r.nload, "store_elements": r.nstore,
            "atomics": r.natomic, "elements_stored": int(r.stored.sum()),
            "dram_read_bytes": int(r.dram_r.sum()) * SECTOR,
            "dram_write_bytes": int(r.dram_w.sum()) * SECTOR,
            "dram_atomic_bytes": int((r.dram_a & ~r.dram_r).sum()) * SECTOR,
            "digest_start": r.digest0,
            "digest_end": content_digest(r.arr) if r.digest0 is not None else None,
        } for r in self.groots]
        if self.want_trace:
            self.trace = _build_trace(self, self.trace_parts)
        if _mode >= 2:
            self.sites = [{
                "where": self.site_where(st), "line": self.site_line(st),
                "array": str(self.roots[ak >> 1].name), "kind": "store" if ak & 1 else "load",
                "requests": r, "bytes_moved": m, "bytes_asked": a, "bytes_used": u,
            } for (st, ak), (r, m, a, u) in sorted(self.site_acc.items())]
            self.shared_sites = [{
                "where": self.site_where(st), "line": self.site_line(st), "array": name,
                "kind": "store" if ak & 1 else "load", "requests": r, "wavefronts": w,
                "ideal_wavefronts": i, "worst_wavefronts": x,
            } for (st, ak), (name, r, w, i, x) in sorted(self.shared_site_acc.items())]


_line_cache: dict = {}
_name_cache: dict = {}


def _ordinal(n: int) -> str:
    n = int(n)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _barrier_advice(launch, a1, a2, passes, warp=None, paths=None, loop=None):
    """Where a syncthreads() must go to order access ``a1`` before ``a2`` ((tid, is_write,
    site), ``a1`` first in program order, ``passes`` passes of a loop apart), in words.
    ``warp``: the one warp whose threads made every access from the two lines in the
    interval (None: several), where a ``syncwarp`` orders them as well. ``paths``: the two
    accesses' call paths (sites, outermost first, the access last; default: the access
    alone), ``loop``: the depth in them of the frame whose loop separates the passes."""
    k1, k2 = ("write" if a1[1] else "read"), ("write" if a2[1] else "read")
    w1, w2 = launch.site_where(a1[2]), launch.site_where(a2[2])
    lanes = (f" (only warp {warp} runs these two lines here, so a cuda.syncwarp() is "
             "enough)" if warp is not None else "")
    s1, s2 = paths if paths is not None else ((int(a1[2]),), (int(a2[2]),))
    # d: the deepest frame both accesses are in (0: the kernel), by their call sites
    d = 0
    while (d < len(s1) - 1 and d < len(s2) - 1
           and launch._pos(s1[d]) == launch._pos(s2[d])):
        d += 1
    if passes and loop is not None:
        d = min(d, loop)
    in1, in2 = len(s1) - 1 > d, len(s2) - 1 > d      # inside a call made from frame d

    def call(sp):           # the call of a device function made at sp[d]
        return launch.site_code(sp[d + 1]).co_name, launch.site_where(sp[d])
    if not in1 and not in2 and int(a1[2]) == int(a2[2]):
        return (f"two threads {k1} the element from one instruction with no syncthreads() "
                "between them; check how the index maps threads to elements (each should "
                "own its own)")
    if passes:
        when = "the next pass" if passes == 1 else f"a later pass ({passes} passes on)"
        frame = launch.site_code(s2[d])
        lp = "the loop" if frame is launch.kcode else f"the loop in {frame.co_name}"
        if not in1 and not in2:
            return (f"the {k2} is in {when} of {lp}, and no syncthreads() separates it from "
                    f"the {k1} of the earlier pass. A syncthreads() is needed after the {k1} "
                    f"at {w1}, before the loop's next {k2} at {w2} \u2014 at the end of the "
                    "loop body" + lanes)
        if in1 and in2 and call(s1) == call(s2):
            f1, c1 = call(s1)
            nxt = "the next call" if passes == 1 else f"a later call ({passes} passes on)"
            return (f"the {k2} is in {nxt} of {f1} (from {c1}), made by {when} of {lp}, and "
                    f"no syncthreads() separates it from the {k1} of the call before. A "
                    f"syncthreads() is needed after the {k1} at {w1}, before {f1} returns "
                    "(or at the end of the loop body)" + lanes)
        t2 = f", in the call of {call(s2)[0]} from {call(s2)[1]}" if in2 else ""
        t1 = f" (in the call of {call(s1)[0]} from {call(s1)[1]})" if in1 else ""
        fix = (f"before {call(s1)[0]} returns (or at the end of the loop body)" if in1 else
               f"before the loop's next call of {call(s2)[0]} at {call(s2)[1]} \u2014 at the "
               "end of the loop body")
        return (f"the {k2} is in {when} of {lp}{t2}, and no syncthreads() separates it from "
                f"the {k1} of the earlier pass{t1}. A syncthreads() is needed after the {k1} "
                f"at {w1}, {fix}" + lanes)
    if in1 and in2:
        (f1, c1), (f2, c2) = call(s1), call(s2)
        if f1 == f2:
            said = (f"the {k2} is in a later call of {f2} (from {c2}) than the {k1} (from "
                    f"{c1})")
        else:
            said = (f"the {k1} is in the call of {f1} from {c1} and the {k2} in the later "
                    f"call of {f2} from {c2}")
        return (f"{said}, and no syncthreads() separates them. A syncthreads() is needed "
                f"after the {k1} at {w1}, before {f1} returns (or between the two calls)"
                + lanes)
    if in1:
        f1, c1 = call(s1)
        return (f"the {k1} is in the call of {f1} from {c1}, and no syncthreads() separates "
                f"it from the {k2} after that call. A syncthreads() is needed after the {k1} "
                f"at {w1}, before {f1} returns (or after the call, before the {k2} at {w2})"
                + lanes)
    if in2:
        f2, c2 = call(s2)
        return (f"the {k2} is in the call of {f2} from {c2}, after the {k1}, and no "
                f"syncthreads() separates them. A syncthreads() is needed after the {k1} at "
                f"{w1}, before the call of {f2} at {c2} (or in {f2}, before the {k2} at "
                f"{w2})" + lanes)
    if w1 == w2:
        return (f"no syncthreads() separates the {k1} from the {k2} on the same line. A "
                f"syncthreads() is needed between them: {k1} into a variable, syncthreads(), "
                f"then {k2}" + lanes)
    return (f"no syncthreads() comes between them. A syncthreads() is needed after the {k1} at "
            f"{w1}, before the {k2} at {w2}" + lanes)


def _assigned_name(code, lasti):
    """The variable the call at ``lasti`` is stored into (``sA = cuda.shared.array(...)``
    -> ``"sA"``), or None."""
    key = (code, lasti)
    if key not in _name_cache:
        name = None
        after = False
        for ins in dis.get_instructions(code):
            if after and ins.opname != "CACHE":
                if ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"):
                    name = ins.argval
                break
            if ins.offset >= _instr_start(code, lasti) and ins.opname.startswith(("CALL", "PRECALL")):
                after = ins.opname.startswith("CALL")
        _name_cache[key] = name
    return _name_cache[key]
_start_cache: dict = {}


def _instr_start(code, lasti):
    """Offset of the (non-cache) instruction that ``lasti`` belongs to."""
    table = _start_cache.get(code)
    if table is None:
        table = {}
        cur = 0
        for ins in dis.get_instructions(code, show_caches=True):
            if ins.opname != "CACHE":
                cur = ins.offset
            table[ins.offset] = cur
        _start_cache[code] = table
    return table.get(lasti, lasti)


def _line_of(code, lasti):
    """Source line of the instruction at byte offset ``lasti`` of ``code``."""
    table = _line_cache.get(code)
    if table is None:
        table = {}
        for ins in dis.get_instructions(code):
            ln = ins.positions.lineno if ins.positions is not None else None
            if ln is None:
                ln = ins.starts_line
            table[ins.offset] = ln
        _line_cache[code] = table
    if lasti in table and table[lasti] is not None:
        return table[lasti]
    best = None
    for o, ln in table.items():
        if o <= lasti and ln is not None:
            best = ln
    return best if best is not None else code.co_firstlineno


def _uniq(x):
    """Sorted distinct values of int array ``x`` (np.unique without its hash path, which is
    slower here for int64 keys)."""
    if len(x) == 0:
        return x
    y = np.sort(x)
    return y[np.r_[True, y[1:] != y[:-1]]]


def _dense(x):
    """(sorted distinct values, inverse index) of int array ``x``."""
    if len(x) == 0:
        return x, np.zeros(0, np.int64)
    order = np.argsort(x, kind="stable")
    y = x[order]
    new = np.r_[True, y[1:] != y[:-1]]
    inv = np.empty(len(x), np.int64)
    inv[order] = np.cumsum(new) - 1
    return y[new], inv


def _unravel(root, off):
    try:
        return str([int(v) for v in np.unravel_index(int(off), root.shape)])
    except ValueError:
        return f"[element {int(off)}]"


SHARED_KEYS = ("shared_load_requests", "shared_store_requests", "shared_load_elements",
               "shared_store_elements", "shared_load_wavefronts", "shared_store_wavefronts")

TRACE_DTYPE = np.dtype([("space", "U1"), ("kind", "U1"), ("array", "U16"), ("tid", np.int32),
                        ("warp", np.int32), ("lane", np.int32), ("offset", np.int64),
                        ("addr", np.int64), ("line", np.int32), ("request", np.int64)])


def _build_trace(launch, parts):
    if not parts:
        return np.zeros(0, TRACE_DTYPE)
    key = np.concatenate([p[0] for p in parts])
    tid = np.concatenate([p[1] for p in parts])
    req = np.concatenate([p[3] for p in parts])
    out = np.zeros(len(key), TRACE_DTYPE)
    aid = key >> AID_SHIFT
    off = key & OFF_MASK
    roots = launch.trace_roots
    out["space"] = [roots[a].space for a in aid.tolist()]
    out["array"] = [roots[a].name for a in aid.tolist()]
    out["kind"] = np.where((key >> W_SHIFT) & 1, "w", "r")
    out["tid"] = tid
    out["warp"] = tid // WARP
    out["lane"] = tid % WARP
    out["offset"] = off
    base = np.array([r.base for r in roots], np.int64)
    isz = np.array([r.itemsize for r in roots], np.int64)
    out["addr"] = base[aid] + off * isz[aid]
    out["line"] = -1
    if all(p[2] is not None for p in parts):
        site = np.concatenate([p[2] for p in parts])
        lines = {s_: launch.site_line(s_) for s_ in np.unique(site).tolist()}
        out["line"] = [lines[s_] for s_ in site.tolist()]
    out["request"] = req
    return out


# ----------------------------------------------------------------------------------------
# The scheduler of one block


#: ``LaunchStats.block_max`` keys: the busiest block's work
BLOCK_MAX_KEYS = ("global_sectors", "shared_wavefronts", "barriers")


def _block_work(c):
    """The launch's counted work so far, in the order of :data:`BLOCK_MAX_KEYS` (every block
    is flushed when it ends, so the difference across a block is that block's work)."""
    return (c["global_load_sectors"] + c["global_store_sectors"],
            c["shared_load_wavefronts"] + c["shared_store_wavefronts"], c["barriers"])


def _run_block(launch, fn, args, ctaid, blin, base_ctx, rng):
    global _cur, _sched, _log, _slog, _kcode
    _kcode = launch.kcode
    launch.ctaid = ctaid
    launch.ctaid3 = _kapi.Dim3(*ctaid)
    mod = launch.module
    mod.blockIdx = launch.ctaid3
    launch.blin = blin
    launch.shared_roots = {}
    launch.block_roots = []
    launch.roots = list(launch.groots)      # shared arrays' ids are reused block to block
    launch.epoch = 0
    launch.bar_sites = []
    launch.block_start_flush = True
    launch.block_open = True
    launch.block_event0 = launch.nwevents
    launch.shared_bytes = 0
    launch.shared_bytes_used = 0
    launch.dyn = None
    work0 = _block_work(launch.counters)
    bx, by, bz = launch.block
    threads = []
    for tz in range(bz):
        for ty in range(by):
            for tx in range(bx):
                t = _Thread(len(threads), (tx, ty, tz))
                t.idx3 = _kapi.Dim3(tx, ty, tz)
                threads.append(t)
    launch.threads = threads
    sched = getcurrent()
    _sched = sched
    workers = _workers(sched, len(threads))
    job = (fn, args)
    for t, w in zip(threads, workers):
        t.g = w
        w.gr_context = base_ctx.copy()
        t.resume = job
    runq = deque(threads)
    if rng is not None:
        rng.shuffle(runq)
    live = len(threads)
    at_bar = []
    warp_wait = {}
    stale = 0
    progress = False
    c = launch.counters
    deadline = launch.t0 + _OPTS["watchdog_s"]
    nsw = 0
    popleft = runq.popleft
    while True:
        while runq:
            t = popleft()
            _cur = t
            mod.threadIdx = t.idx3
            mod.laneid = t.lane
            _log = log = t.log
            _slog = t.slog
            n0 = len(log)
            res = t.g.switch(t.resume)
            if res.__class__ is tuple and res and res[0] is _FAIL:
                _pool.clear()        # other workers are suspended inside the kernel
                exc = res[1]
                if isinstance(exc, SimError):
                    if "ctaid=" not in str(exc):
                        raise type(exc)(f"{_where(t)}: {exc}") from exc.__cause__
                    raise exc
                tb = exc.__traceback__
                line = None
                while tb is not None:
                    if tb.tb_frame.f_code is fn.__code__ or line is None:
                        line = tb.tb_lineno
                    tb = tb.tb_next
                err = KernelError(f"{_where(t)}: {type(exc).__name__}: {exc}"
                                  + (f" (line {line})" if line else ""))
                err.where, err.line = _where(t), line  # the parts that are not the kernel's
                raise err from exc                     # own words (grader.worker quotes those)
            if log:
                launch.pending += len(t.log) - n0 if t.log is log else len(t.log)
            nsw += 1
            if not nsw & 255 and time.monotonic() > deadline:
                _stuck(launch, threads, f"ran past the watchdog ({_OPTS['watchdog_s']:.0f} s)")
            if t.state == 1:
                at_bar.append(t)
                continue
            if res is _EXIT:
                launch.close(t)
                t.state = 3
                t.exit_ep = launch.epoch
                live -= 1
                progress = True
                stale = 0
                wq = warp_wait.get(t.warp)
                if wq:
                    _warp_progress(launch, threads, wq, runq, exited=t)
                continue
            if t.state == 2:
                wq = warp_wait.setdefault(t.warp, [])
                wq.append(t)
                if _warp_progress(launch, threads, wq, runq):
                    progress = True
            else:
                why, changed = t.wait
                t.wait = None
                t.resume = None
                runq.append(t)
                if why == "slice":
                    # progress since the last slice: a store in any log, a barrier, an exit,
                    # or a thread that walks through memory (a long loop of loads) rather than
                    # re-reading a few addresses (a spin-wait)
                    launch.close(t)
                    if launch.stored_since_mark(threads):
                        progress = True
                    seg = np.frombuffer(launch.segs[-1][4], np.int64) if launch.segs else None
                    if seg is not None and len(_uniq(seg[-4096:])) > SPIN_ADDRESSES:
                        progress = True
                    if progress:
                        stale = 0
                    else:
                        stale += 1
                    progress = False
                    if stale >= STALE_SLICES:
                        _stuck(launch, threads, "only loaded from memory")
                else:
                    if changed:
                        progress = True
                        stale = 0
                    else:
                        stale += 1
                        if stale >= SLICE:
                            if launch.stored_since_mark(threads):
                                stale = 0
                            else:
                                _stuck(launch, threads,
                                       "only retried atomics that changed nothing")
        if live == 0:
            break
        if any(warp_wait.values()):
            for wq in list(warp_wait.values()):
                if wq:
                    _warp_progress(launch, threads, wq, runq, drain=True)
            if runq:
                continue
        # every live thread waits at a barrier
        f0 = at_bar[0].wait[2]
        code0, lasti0 = f0.f_code, f0.f_lasti
        sites = {(code0, lasti0): at_bar}
        for t in at_bar:
            f = t.wait[2]
            if f.f_lasti != lasti0 or f.f_code is not code0:
                sites = {}
                for u in at_bar:
                    sites.setdefault((u.wait[2].f_code, _instr_start(u.wait[2].f_code, u.wait[2].f_lasti)), []).append(u)
                break
        if len(sites) > 1:
            desc = "; ".join(f"{_thread_list(ts)} at line {_line_of(*s)}" for s, ts in sites.items())
            raise DivergenceError(
                f"ctaid={_idx_str(ctaid)}: threads wait at different syncthreads() calls ({desc}):"
                " a barrier inside a branch not taken by the whole block")
        kinds = {t.wait[0] for t in at_bar}
        if len(kinds) > 1:
            raise DivergenceError(f"ctaid={_idx_str(ctaid)}: threads wait at different barriers "
                                  f"({', '.join(sorted(kinds))}) at one line")
        kind = kinds.pop()
        for t in at_bar:
            if t.log:
                launch.close(t)
        launch.bar_sites.append((code0, lasti0))
        launch.epoch += 1
        progress = True
        if launch.pending > BLOCK_CAP:
            launch.flush()
        c["barriers"] += 1
        if kind == "plain":
            result = None
        else:
            vals = [bool(t.wait[1]) for t in at_bar]
            result = (sum(vals) if kind == "count" else int(all(vals)) if kind == "and"
                      else int(any(vals)))
        order = at_bar
        if rng is not None:
            order.sort(key=lambda u: u.tid)
            rng.shuffle(order)
        for t in order:
            t.state = 0
            t.resume = result
        runq.extend(order)
        at_bar = []
        stale = 0
    launch.block_open = False
    launch.flush()
    bm = launch.block_max
    for k, w1, w0 in zip(BLOCK_MAX_KEYS, _block_work(c), work0):
        bm[k] = max(bm[k], w1 - w0)
    _local_footprints(launch)
    c["shared_bytes_per_block"] = max(c["shared_bytes_per_block"],
                                      launch.shared_bytes + (launch.dynshared_size or 0))


_EXIT = object()
_FAIL = object()
_pool: dict = {}


def _worker_main(job):
    """Body of a pooled worker greenlet: run one CUDA thread's kernel call per job; report
    its end (or its exception) to the scheduler and wait for the next job. Starting a new
    greenlet costs several microseconds; switching to a waiting one, a fraction of one."""
    while True:
        fn, args = job
        try:
            fn(*args)
            msg = _EXIT
        except Exception as exc:
            msg = (_FAIL, exc)
        job = _sched.switch(msg)


def _workers(parent, n):
    """``n`` idle worker greenlets whose parent is the scheduler greenlet ``parent``."""
    if _pool.get("parent") is not parent:
        _pool.clear()
        _pool["parent"] = parent
        _pool["workers"] = []
    ws = _pool["workers"]
    while len(ws) < n:
        ws.append(greenlet(_worker_main, parent=parent))
    return ws[:n]


def _thread_list(ts):
    ids = sorted(t.tid for t in ts)
    if len(ids) > 6:
        return f"{len(ids)} threads (tid {_idx_str(ts[0].idx)}...)"
    return "threads " + ", ".join(_idx_str(t.idx) for t in sorted(ts, key=lambda u: u.tid))


ACTIVE = object()     # the "mask" of activemask(): every lane still converged here


def _divergent_warp(launch, group, mask, why):
    t = group[0]
    raise DivergenceError(
        f"ctaid={_idx_str(launch.ctaid)} warp {t.warp}: {t.wait[0]}_sync(mask={mask:#010x}) at "
        f"line {_line_of(*t.wait[4])}: {why}")


def _warp_progress(launch, threads, wq, runq, exited=None, drain=False):
    """Complete every collective of one warp whose lanes have all arrived; raise
    DivergenceError for one that can no longer complete. ``wq`` (the warp's waiting lanes) is
    updated in place. Returns True when a collective completed.

    Lanes are grouped by mask, so disjoint masks in one warp (lanes 0-15 and 16-31 each
    shuffling among themselves) are two collectives. ``activemask()`` waits for every lane of
    the warp that has not exited and is not waiting elsewhere; at a drain (no thread can run)
    it completes with the lanes that arrived.
    """
    done = False
    warp = wq[0].warp
    base = warp * WARP
    state = {}      # lane -> mask it waits with
    for u in wq:
        state[u.lane] = u.wait[1]
    groups = {}
    for u in wq:
        if u.wait[1] is ACTIVE:     # one activemask() collective per call site
            code, lasti = u.wait[4]
            key = ("active", code, _instr_start(code, lasti))
        else:
            key = u.wait[1]
        groups.setdefault(key, []).append(u)
    for key, group in groups.items():
        mask = group[0].wait[1]
        if mask is ACTIVE:
            live = 0
            for ln in range(WARP):
                k = base + ln
                if k < len(threads) and threads[k].state != 3 and ln not in state:
                    live |= 1 << ln
            if live and not drain:
                continue        # some live lane has yet to arrive (or waits elsewhere)
            arrived = 0
            for u in group:
                arrived |= 1 << u.lane
            _complete_group(launch, group, arrived, runq)
            done = True
            continue
        arrived = 0
        for u in group:
            arrived |= 1 << u.lane
        if arrived & mask == mask:
            _complete_group(launch, group, mask, runq)
            done = True
            continue
        for ln in range(WARP):
            if not (mask >> ln) & 1 or (arrived >> ln) & 1:
                continue
            k = base + ln
            if k >= len(threads):
                _divergent_warp(launch, group, mask,
                                f"lane {ln} named in the mask does not exist in this block")
            if threads[k].state == 3:
                _divergent_warp(launch, group, mask,
                                f"lane {ln} (tid={_idx_str(threads[k].idx)}) named in the mask "
                                "has exited")
            if ln in state:
                other = state[ln]
                _divergent_warp(launch, group, mask,
                                f"lane {ln} named in the mask waits at another collective "
                                f"({threads[k].wait[0]} at line {_line_of(*threads[k].wait[4])}"
                                + (f", mask {other:#010x})" if other is not ACTIVE else ")"))
            if drain:
                _divergent_warp(launch, group, mask,
                                f"lane {ln} named in the mask never arrived (it waits at a "
                                "barrier or has finished another way)")
    if done:
        wq[:] = [u for u in wq if u.state == 2]
    return done


def _complete_group(launch, wq, mask, runq):
    c = launch.counters
    first = wq[0]
    op = first.wait[0]
    for u in wq:
        if u.wait[0] != op:
            raise DivergenceError(
                f"ctaid={_idx_str(launch.ctaid)} warp {first.warp}: lanes call different warp "
                f"collectives with one mask ({op} at line {_line_of(*first.wait[4])} vs "
                f"{u.wait[0]} at line {_line_of(*u.wait[4])})")
    by_lane = {u.lane: u for u in wq}
    results = {}
    if op == "activemask":
        results = dict.fromkeys(by_lane, np.uint32(mask))     # numba-cuda: uint32
    elif op == "syncwarp":
        launch.nwevents += 1
        eid = launch.nwevents
        launch.wevents[eid] = mask
        for u in wq:
            launch.close(u)
            u.wep = eid
        c["warp_syncs"] += 1
        results = dict.fromkeys(by_lane)
    elif op.startswith("shfl"):
        c["shuffles"] += 1
        launch.shuffle_warps.add((launch.blin, first.warp))
        for ln, u in by_lane.items():
            arg = int(u.wait[3])
            if op == "shfl":
                src = arg % WARP
            elif op == "shfl_up":
                src = ln - arg if ln - arg >= 0 else ln
            elif op == "shfl_down":
                src = ln + arg if ln + arg < WARP else ln
            else:
                src = ln ^ arg if (ln ^ arg) < WARP else ln
            if src not in by_lane:
                raise DivergenceError(
                    f"ctaid={_idx_str(launch.ctaid)} warp {u.warp}: {op}_sync at line "
                    f"{_line_of(*u.wait[4])}: lane {ln} reads lane {src}, which is not in the mask "
                    f"{mask:#010x} (the value would be undefined on a GPU)")
            results[ln] = by_lane[src].wait[2]
    else:
        c["votes"] += 1
        vals = {ln: u.wait[2] for ln, u in by_lane.items()}
        if op == "ballot":
            b = 0
            for ln, v in vals.items():
                if v:
                    b |= 1 << ln
            results = dict.fromkeys(vals, np.uint32(b).view(np.int32))
        elif op == "all":       # numba-cuda types all/any/eq as boolean, ballot as int32
            results = dict.fromkeys(vals, all(bool(v) for v in vals.values()))
        elif op == "any":
            results = dict.fromkeys(vals, any(bool(v) for v in vals.values()))
        elif op == "eq":
            vs = [bool(v) for v in vals.values()]
            results = dict.fromkeys(vals, all(v == vs[0] for v in vs))
        elif op == "match_any":
            for ln, v in vals.items():
                m = 0
                for l2, v2 in vals.items():
                    if v2 == v:
                        m |= 1 << l2
                results[ln] = np.uint32(m).view(np.int32)
        elif op == "match_all":
            vs = list(vals.values())
            same = all(v == vs[0] for v in vs)
            results = dict.fromkeys(vals, (np.uint32(mask if same else 0).view(np.int32),
                                           same))
    for ln in sorted(by_lane):
        u = by_lane[ln]
        u.state = 0
        u.wait = None
        u.resume = results[ln]
    # resume the warp's lanes next, in lane order
    for ln in sorted(by_lane, reverse=True):
        runq.appendleft(by_lane[ln])


def _stuck(launch, threads, why):
    alive = [t for t in threads if t.state != 3]
    where = []
    for t in alive[:8]:
        fr = t.g.gr_frame
        while fr is not None and fr.f_code.co_filename.startswith(__file__):
            fr = fr.f_back
        where.append(f"tid={_idx_str(t.idx)} line {fr.f_lineno if fr is not None else '?'}")
    more = f" and {len(alive) - 8} more" if len(alive) > 8 else ""
    raise StuckKernelError(
        f"ctaid={_idx_str(launch.ctaid)}: the block cannot make progress: its threads "
        f"{why} ({'; '.join(where)}{more}). A thread spinning on memory another thread "
        "should write never sees the write here unless that thread can run: check for a wait "
        "on a value no thread will store")


# ----------------------------------------------------------------------------------------
# Launch entry point


def _arg_names(fn, n):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    names += [f"arg{i}" for i in range(len(names), n)]
    return names


def check_launch_config(grid, block, dynshared_size=0):
    """Raise :class:`LaunchConfigError` for a configuration a GPU would refuse."""
    if dynshared_size and dynshared_size > MAX_STATIC_SHARED:
        raise LaunchConfigError(
            f"{dynshared_size} bytes of dynamic shared memory a block; without an opt-in (which "
            f"numba-cuda does not expose) a GPU allows {MAX_STATIC_SHARED} bytes (48 KiB)")
    nthreads = block[0] * block[1] * block[2]
    if nthreads > MAX_THREADS:
        raise LaunchConfigError(
            f"block {tuple(block)} has {nthreads} threads; a GPU allows at most {MAX_THREADS}"
            " threads a block")
    for d, (b, mx) in enumerate(zip(block, MAX_BLOCK_DIM)):
        if b > mx:
            raise LaunchConfigError(f"block dimension {'xyz'[d]} = {b} exceeds {mx}")
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise LaunchConfigError(f"grid {tuple(grid)}: y and z may be at most {MAX_GRID_YZ}")
    if min(grid) < 1 or min(block) < 1:
        raise LaunchConfigError(f"empty launch: grid {tuple(grid)}, block {tuple(block)}")


def launch(kernel, args):
    """Run one launch of simulator kernel ``kernel`` (its grid/block already configured).

    Returns :class:`LaunchStats`. Raises the errors of :mod:`kernellab.sim.errors`. A race or
    uninitialised read found by the fast access log makes the launch run again from a copy of
    its arguments, logging source lines, so the error can name them. A recording capture
    records the launch (:class:`Relaunch`), not the copies of its numpy arguments.
    """
    global _copies_quiet
    recording = any(getattr(cap, "record", False) for cap in _listeners)
    if recording:
        bufs, bad = _launch_buffers(args)
        before = [(b, b.copy(), _digest(b)) for b in bufs]
    _copies_quiet += 1
    try:
        stats = _launch_once(kernel, args)
    finally:
        _copies_quiet -= 1
    if recording:
        _record(Refuse(f"a launch of {getattr(kernel.fn, '__name__', 'kernel')} with {bad}")
                if bad else Relaunch(kernel, tuple(args), before))
    return stats


def _digest(buf) -> str:
    import hashlib
    return hashlib.blake2b(np.ascontiguousarray(buf).tobytes(), digest_size=16).hexdigest()


def _plain_buffer(obj):
    """The numpy buffer of an exact ``np.ndarray`` or ``FakeCUDAArray`` (not a subclass: a
    replay must not run code a student attached to an array type), else None."""
    if type(obj) is np.ndarray:
        return obj
    if type(obj) is FakeCUDAArray and type(obj._ary) is np.ndarray:
        return obj._ary
    return None


def _launch_buffers(args):
    """(buffers, problem) of a launch's arguments: the numpy buffers of its arrays (in tuples
    and cuda.In/Out/InOut hints too) and None, or what cannot be replayed, in words."""
    out, todo = [], list(args)
    while todo:
        a = todo.pop()
        if isinstance(a, tuple):
            todo.extend(a)
        elif isinstance(a, ArgHint):
            todo.append(a.value)
        elif isinstance(a, (bool, int, float, complex, np.generic)) or a is None:
            continue
        else:
            b = _plain_buffer(a)
            if b is None:
                return out, (f"an argument of type {type(a).__name__}: pass numpy arrays, "
                             "numba device arrays and numbers")
            out.append(b)
    return out, None


#: > 0 while a launch copies its numpy arguments: those copies are part of the launch
_copies_quiet = 0


def _enter_mode3():
    """Log call contexts with each device-function site (the race re-run)."""
    global _site
    _ctx_ids.clear()
    del _ctxs[1:]
    _site = _site_ctx


def _leave_mode3():
    global _site
    _site = _site_plain
    _ctx_ids.clear()
    del _ctxs[1:]


def _launch_once(kernel, args):
    global _mode
    grid, block = normalize_kernel_dimensions(kernel.grid_dim, kernel.block_dim)
    grid, block = tuple(grid), tuple(block)
    check_launch_config(grid, block, kernel.dynshared_size or 0)
    fn = kernel.fn
    name = getattr(fn, "__name__", "kernel")
    depot = None
    if _OPTS["gpu_compile"]:
        from kernellab.sim import ptx
        compiled = ptx.compile_kernel(kernel, args)
        ptx_counts = compiled.counts
        depot = local_depot_bytes(compiled.ptx)
    else:
        ptx_counts = None
    want_trace = any(cap.trace for cap in _listeners)
    mode = 0 if _OPTS["checks"] == "fast" else 2 if want_trace or _OPTS["sites"] else 1
    retr = []
    dev_args = [_to_device(arg, retr) for arg in args]
    arrays = []
    _device_arrays(dev_args, arrays)
    outside = _arrays_outside_arguments(fn) if _listeners else []
    snapshot = [a.copy() for a in arrays] if mode in (1, 2) else None
    prev_mode = _mode
    alarm = _arm_alarm(name)
    try:
        _mode = mode
        while True:
            try:
                L = _run_launch(kernel, grid, block, name, dev_args, want_trace)
                break
            except _NeedDetail as need:
                if need.mode <= _mode:  # pragma: no cover - the re-run is deterministic
                    raise SimError(f"kernel {name}: a hazard was found but could not be "
                                   "located on the re-run") from None
                for a, saved in zip(arrays, snapshot):
                    np.copyto(a, saved)
                _mode = need.mode
                if _mode == 3:
                    _enter_mode3()
    finally:
        if _mode == 3:
            _leave_mode3()
        _mode = prev_mode
        _disarm_alarm(alarm)
    for wb in retr:
        wb()
    _local_counters(L, depot)
    stats = LaunchStats(name, grid, block, L.counters, ptx_counts, L.trace)
    stats.checks = _OPTS["checks"]
    stats.arrays = L.arrays
    stats.shuffle_warps = len(L.shuffle_warps)
    stats.sites = L.sites
    stats.shared_sites = L.shared_sites
    stats.block_max = dict(L.block_max)
    stats.outside = outside
    for cap in _listeners:
        cap.launches.append(stats)
    return stats


_DEPOT = re.compile(r"\.local\s+\.align\s+\d+\s+\.b8\s+__local_depot\d+\[(\d+)\]")


def local_depot_bytes(ptx_text: str) -> int:
    """Bytes of local memory a kernel's PTX reserves per thread: the sum of its
    ``__local_depot`` arrays (``.local .align A .b8 __local_depotN[bytes]``: the stack frame
    NVVM gives the local arrays it could not keep in registers; PTX ISA, "State Spaces: Local").
    ptxas may still spill registers there; that is not seen at the PTX level."""
    return sum(int(m) for m in _DEPOT.findall(ptx_text or ""))


def _local_counters(L, depot):
    """``local_frame_bytes``: the local frame of one thread -- the PTX local depot when the
    kernel was compiled for a GPU (arrays NVVM promoted to registers are not in it), else the
    bytes of ``cuda.local`` arrays of the thread that allocates the most (an upper bound);
    ``local_touched_bytes``: the bytes the threads stored to the arrays in that frame, taken
    largest first while they fit in it (registers hold small arrays indexed by constants; a
    frame of 0 -- everything in registers -- has none)."""
    frame = L.local_alloc_max if depot is None else depot
    touched = 0
    for arrays in L.local_threads:
        room = frame
        for nbytes, stored in arrays:
            if nbytes <= room:
                room -= nbytes
                touched += stored
    c = L.counters
    c["local_frame_bytes"] = int(frame)
    c["local_touched_bytes"] = int(touched)


class Relaunch:
    """A recorded launch (:func:`kernellab.sim.replay`): calling it launches ``kernel`` again
    with ``args`` and the grid, block and dynamic shared memory it had (numba's simulator
    configures a kernel object in place, so a later ``kernel[other, config]`` must not change
    what is replayed). Raises :class:`SimError` if a name the kernel or its device functions
    read from their globals or closures now refers to another object than when the launch
    was recorded: the simulator resolves those names at every run, so rebinding, say, a device
    function to plain Python between the call and its replay would run host code inside the
    replayed kernel."""

    def __init__(self, kernel, args, before=()):
        self.kernel, self.args = kernel, args
        self.config = (kernel.grid_dim, kernel.block_dim, 0, kernel.dynshared_size or 0)
        self.refs = _referenced_objects(kernel.fn)
        # arguments the host (not a recorded launch or copy) gave their content: the replay
        # restores that content, unless the argument is one of the refilled inputs -- a flag
        # the host flips after the call must not change what the replayed kernel does
        left = _left_by_recorded()
        self.restore = [(b, snap) for b, snap, dig in before if left.get(id(b)) != dig]
        for b, _, _ in before:
            _mark_left(b)

    def __call__(self, fresh=()):
        for b, snap in self.restore:
            if not any(np.may_share_memory(b, f) for f in fresh):
                np.copyto(b, snap)
        now = _referenced_objects(self.kernel.fn)
        changed = sorted(n for n in set(self.refs) | set(now) if self.refs.get(n) != now.get(n))
        if changed:
            raise SimError(f"kernel {getattr(self.kernel.fn, '__name__', 'kernel')}: "
                           f"{', '.join(changed)} now refer(s) to other objects than when it "
                           "was launched: a kernel's globals must not be rebound between "
                           "launches")
        self.kernel[self.config](*self.args)

    def arrays(self) -> list:
        """The numpy buffers of the arguments' arrays (inside tuples too), in order."""
        return _launch_buffers(self.args)[0][::-1]


class Refuse:
    """A recorded operation that cannot be replayed faithfully (``what``): replaying raises
    :class:`SimError` saying so."""

    def __init__(self, what):
        self.what = what

    def __call__(self, fresh=()):
        raise SimError(f"{self.what} cannot be run again")

    def arrays(self) -> list:
        return []


def _left_by_recorded() -> dict:
    """{id(buffer): digest} of what recorded launches and copies last left in each buffer (the
    first recording capture's)."""
    for cap in _listeners:
        if getattr(cap, "record", False):
            return cap.__dict__.setdefault("left", {})
    return {}


def _mark_left(buf) -> None:
    left = _left_by_recorded()
    left[id(buf)] = _digest(buf)


def _named_values(f) -> list:
    """[(name, object)] that function ``f`` reads from its globals (by the names its code,
    nested code included, uses) and from its closure."""
    code = f.__code__
    names, codes = set(), [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, _pytypes.CodeType))
    g = getattr(f, "__globals__", {})
    values = [(n, g[n]) for n in names if n in g]
    for n, cell in zip(code.co_freevars, f.__closure__ or ()):
        try:
            values.append((n, cell.cell_contents))
        except ValueError:      # an empty cell
            pass
    return values


def _referenced_objects(fn) -> dict:
    """{qualified name: id(object)} of what ``fn`` (a kernel's Python function) and the device
    functions it reaches read from their globals and closures, by the names their code uses."""
    out, seen, stack = {}, set(), [fn]
    while stack:
        f = stack.pop()
        if getattr(f, "__code__", None) is None or id(f) in seen:
            continue
        seen.add(id(f))
        for n, v in _named_values(f):
            out[f"{f.__name__}.{n}"] = id(v)
            if isinstance(v, _simkernel.FakeCUDAKernel):
                stack.append(v.fn)
    return out


class Resetitem:
    """A recorded ``device_array[key] = value`` (a host-to-device copy, or a fill): calling it
    assigns what ``value`` holds now again."""

    def __init__(self, dest, key, value):
        self.dest, self.key, self.source = dest, key, value

    def __call__(self, fresh=()):
        self.dest[self.key] = self.source

    def arrays(self) -> list:
        return [self.dest]


class Recopy:
    """A recorded host-device copy: calling it copies what ``source`` holds now into ``dest``
    (both numpy buffers: a host array, or a device array's); ``to_host``: a ``copy_to_host``."""

    def __init__(self, dest, source, to_host=False):
        self.dest, self.source, self.to_host = dest, source, to_host

    def __call__(self, fresh=()):
        np.copyto(self.dest, self.source.reshape(self.dest.shape))

    def arrays(self) -> list:
        return [self.dest]


def _recopy(dest, source, to_host=False):
    """A :class:`Recopy` of two arrays, or a :class:`Refuse` when either is not an exact numpy
    or device array."""
    d, s_ = _plain_buffer(dest), _plain_buffer(source)
    if d is None or s_ is None:
        bad = type(dest if d is None else source).__name__
        return Refuse(f"a copy involving an array of type {bad}")
    return Recopy(d, s_, to_host)


def _resetitem(dest, key, value):
    """A :class:`Resetitem`, or a :class:`Refuse` for a value that is neither a number nor an
    exact numpy or device array."""
    d = _plain_buffer(dest)
    if isinstance(value, (bool, int, float, complex, np.generic)):
        v = value
    else:
        v = _plain_buffer(value)
    if d is None or v is None:
        return Refuse(f"an assignment into a device array of a {type(value).__name__}")
    return Resetitem(d, key, v)


def _recording() -> bool:
    return not _copies_quiet and any(getattr(cap, "record", False) for cap in _listeners)


def _record(op) -> None:
    """Append ``op`` (a callable that repeats a launch or a host-device copy) to every
    capture that records (``capture(record=True)``; :func:`kernellab.sim.replay`)."""
    if _copies_quiet and not isinstance(op, (Relaunch, Refuse)):
        return
    recording = [cap for cap in _listeners if getattr(cap, "record", False)]
    for cap in recording:
        cap.recorded.append(op)
    if recording and isinstance(op, (Recopy, Resetitem)):
        _mark_left(op.dest)


def _install_copies(cuda_module) -> None:
    """Record host-device copies for :func:`kernellab.sim.replay`: ``cuda.to_device``,
    ``DeviceNDArray.copy_to_device`` and ``copy_to_host`` repeat, when replayed, from what
    their source holds at that time, into the same destination."""
    from numba.cuda import simulator as _simpkg
    from numba.cuda.simulator.cudadrv import devicearray as _da

    if getattr(_da.to_device, "_kernellab", False):
        return
    stock_to_device = _da.to_device
    stock_to_host = FakeCUDAArray.copy_to_host
    stock_to_dev = FakeCUDAArray.copy_to_device
    stock_setitem = FakeCUDAArray.__setitem__

    @functools.wraps(stock_to_device)
    def to_device(ary, stream=0, copy=True, to=None):
        out = stock_to_device(ary, stream, copy, to)
        if to is None and isinstance(out, FakeCUDAArray) and _recording():
            _record(_recopy(out, ary))
        return out

    @functools.wraps(stock_to_host)
    def copy_to_host(self, ary=None, stream=0):
        ret = stock_to_host(self, ary, stream)
        if _recording():
            _record(_recopy(ret, self, to_host=True))
        return ret

    @functools.wraps(stock_to_dev)
    def copy_to_device(self, ary, stream=0):
        stock_to_dev(self, ary, stream)
        if _recording():
            _record(_recopy(self, ary))

    @functools.wraps(stock_setitem)
    def setitem(self, idx, val):
        stock_setitem(self, idx, val)
        if _recording():
            _record(_resetitem(self, idx, val))

    to_device._kernellab = True
    for mod in (_da, _simpkg, cuda_module):
        if getattr(mod, "to_device", None) is stock_to_device:
            mod.to_device = to_device
    FakeCUDAArray.copy_to_host = copy_to_host
    FakeCUDAArray.copy_to_device = copy_to_device
    FakeCUDAArray.__setitem__ = setitem


def _to_device(arg, retr):
    """A launch argument as the kernel gets it: numpy arrays copied to the device (and back
    after the launch), also inside tuples, as numba-cuda passes a tuple of arrays on a GPU."""
    if isinstance(arg, np.ndarray) and arg.ndim > 0:
        return InOut(arg).to_device(retr)
    if isinstance(arg, ArgHint):
        return arg.to_device(retr)
    if isinstance(arg, tuple):
        return tuple(_to_device(a, retr) for a in arg)
    return arg


def _device_arrays(dev_args, out):
    for d in dev_args:
        if isinstance(d, FakeCUDAArray):
            out.append(d._ary)
        elif isinstance(d, tuple):
            _device_arrays(d, out)


def _wrap_arg(L, name, d):
    if isinstance(d, FakeCUDAArray):
        return L.global_root(name, d._ary)
    if isinstance(d, tuple):
        return tuple(_wrap_arg(L, f"{name}[{i}]", e) for i, e in enumerate(d))
    return d


def _arrays_outside_arguments(fn):
    """[{"name", "nbytes"}] of the numpy arrays a kernel (or a device function it calls) reads
    from its module's globals, its closure or its parameters' defaults (also inside tuples). On a GPU numba
    freezes them into the kernel as constants when it compiles; here they are read live and
    are neither counted nor checked. Names are matched as the code names them (an attribute
    name that is also a global's name is counted too)."""
    found, seen, stack = {}, set(), [fn]
    while stack:
        f = stack.pop()
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen:
            continue
        seen.add(id(f))
        values = _named_values(f)
        defaults = getattr(f, "__defaults__", None) or ()      # def dev(i, S=BUF)
        values += zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount],
                      defaults)
        values += (getattr(f, "__kwdefaults__", None) or {}).items()
        while values:
            n, v = values.pop()
            if isinstance(v, np.ndarray):
                found[n] = found.get(n, 0) + int(v.nbytes)
            elif isinstance(v, FakeCUDAArray):
                found[n] = found.get(n, 0) + int(v._ary.nbytes)
            elif isinstance(v, (tuple, list)):
                values.extend((n, e) for e in v)
            elif isinstance(v, _simkernel.FakeCUDAKernel):
                stack.append(v.fn)
    return [{"name": n, "nbytes": b} for n, b in sorted(found.items())]


def _cell_is(cell, obj):
    try:
        return cell.cell_contents is obj
    except ValueError:      # an empty cell
        return False


def _arm_alarm(name):
    """The wall-clock watchdog for code that never switches (``while True: pass``): a
    SIGALRM after ``watchdog_s`` raises StuckKernelError in whichever thread runs. Only in the
    main thread and only when nobody else handles SIGALRM; returns what to restore."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            return None
    except (AttributeError, ValueError):      # no SIGALRM (Windows)
        return None
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        return None
    limit = float(_OPTS["watchdog_s"])

    def on_alarm(signum, frame):
        raise StuckKernelError(
            f"kernel {name} ran past the watchdog ({limit:g} s of wall-clock): a thread may "
            "loop forever without touching memory")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    return True


def _disarm_alarm(alarm):
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


_math_swapped = {}      # id(globals) -> (globals, originals) during a launch


def _swap_math(globs):
    """Give a kernel's (or device function's) module globals the sim tier's ``math``."""
    if id(globs) not in _math_swapped:
        _math_swapped[id(globs)] = (globs, gpumath.swap_globals(globs))


def _restore_math():
    for globs, orig in _math_swapped.values():
        gpumath.restore_globals(globs, orig)
    _math_swapped.clear()


def _run_launch(kernel, grid, block, name, dev_args, want_trace):
    global _launch, _cur, _sched
    fn = kernel.fn
    L = _Launch(kernel, grid, block, kernel.dynshared_size, name)
    L.want_trace = want_trace
    names = _arg_names(fn, len(dev_args))
    fake_args = [_wrap_arg(L, nm, d) for nm, d in zip(names, dev_args)]
    module = SimCudaModule(L)
    L.module = module
    rng = random.Random(_OPTS["shuffle"]) if _OPTS["shuffle"] is not None else None
    prev = (_launch, _cur, _sched)
    _launch = L
    # the stock simulator swaps ``cuda`` in the kernel's globals only; a kernel defined inside
    # a function that imported ``cuda`` locally sees it through a closure cell
    import numba.cuda as _cuda_mod
    cells = [c for c in (fn.__closure__ or ()) if _cell_is(c, _cuda_mod)]
    for c in cells:
        c.cell_contents = module
    # ``math`` with CUDA's semantics (kernellab.sim.gpumath): float32 in, float32 out; inf and
    # NaN instead of OverflowError/ValueError; no floating-point warnings (a GPU has none)
    math_cells = [c for c in (fn.__closure__ or ()) if _cell_is(c, _math_mod)]
    for c in math_cells:
        c.cell_contents = gpumath.MODULE
    _swap_math(fn.__globals__)
    err_state = np.seterr(all="ignore")
    base_ctx = contextvars.copy_context()   # the threads run in copies: after seterr
    try:
        with _simkernel._push_kernel_context(module):
            with _kapi.swapped_cuda_module(fn, module):
                blin = 0
                for gz in range(grid[2]):
                    for gy in range(grid[1]):
                        for gx in range(grid[0]):
                            _run_block(L, fn, fake_args, (gx, gy, gz), blin, base_ctx, rng)
                            blin += 1
    except BaseException:
        _pool.clear()       # workers may be suspended inside the kernel: start afresh
        raise
    finally:
        np.seterr(**err_state)
        _restore_math()
        for c in math_cells:
            c.cell_contents = _math_mod
        for c in cells:
            c.cell_contents = _cuda_mod
        _launch, _cur, _sched = prev
    L.finish()
    return L


class LaunchStats:
    """What one sim-tier launch did: ``name``, ``grid``, ``block`` (3-tuples), ``counters``
    (dict of ints, keys :data:`COUNTER_KEYS`), ``ptx_counts`` (static PTX instruction counts,
    or None when the GPU-compile check is off), ``trace`` (first block's accesses, a numpy
    array of :data:`TRACE_DTYPE`, when captured with ``trace=True``), ``shuffle_warps`` (warps
    that executed at least one shuffle), ``arrays`` (one dict per global allocation among the
    arguments: ``name``, ``shape``, ``dtype``, ``nbytes``, ``load_elements``,
    ``store_elements`` (atomics included), ``atomics``, ``elements_stored`` (distinct
    elements stored to, atomics included), ``dram_read_bytes``, ``dram_write_bytes``
    (atomics: writes), ``dram_atomic_bytes`` (sectors atomics touched and no plain load
    read: a GPU reads them too), ``digest_start`` and ``digest_end``: its
    :func:`~kernellab.sim.content_digest` when the launch started and ended, while captured,
    else None) and ``outside`` (``[{"name", "nbytes"}]``: numpy arrays the kernel reads from
    globals or its closure, uncounted, see :func:`_arrays_outside_arguments`) and ``sites``
    (with the ``sites`` option or a trace, else None: one dict per global access site --
    source instruction -- and array: ``where`` ("line 12", "line 3 of dev"), ``line``,
    ``array``, ``kind`` (load/store; atomics: store), ``requests``, ``bytes_moved`` (32 per
    sector), ``bytes_asked`` and ``bytes_used``: the bytes asked, capped per request at the
    bytes its sectors moved), ``shared_sites`` (likewise per shared access site and array:
    ``where``, ``line``, ``array``, ``kind``, ``requests``, ``wavefronts``,
    ``ideal_wavefronts`` -- what the same requests need without bank conflicts,
    ceil(distinct 4-byte words / 32) each -- and ``worst_wavefronts``, the most one request
    took; wavefronts / ideal_wavefronts is the site's bank-conflict degree) and
    ``block_max`` (the busiest block's work, each a maximum over
    the blocks: ``global_sectors``, ``shared_wavefronts``, ``barriers``; zeros with
    ``checks="fast"``, which counts no traffic, except barriers))."""

    def __init__(self, name, grid, block, counters, ptx_counts, trace):
        self.name = name
        self.grid = grid
        self.block = block
        self.counters = counters
        self.ptx_counts = ptx_counts
        self.trace = trace
        self.arrays = []
        self.shuffle_warps = 0
        self.outside = []
        self.sites = None
        self.shared_sites = None
        self.block_max = None

    def __repr__(self):
        c = self.counters
        return (f"LaunchStats({self.name}, grid={self.grid}, block={self.block}, "
                f"global sectors={c['global_load_sectors'] + c['global_store_sectors']}, "
                f"shared wavefronts={c['shared_load_wavefronts'] + c['shared_store_wavefronts']})")


# ----------------------------------------------------------------------------------------
# Installation into numba-cuda's simulator

_stock_call = None


def install():
    """Route simulator launches through :func:`launch` (idempotent)."""
    global _stock_call
    if _stock_call is not None:
        return
    _stock_call = _simkernel.FakeCUDAKernel.__call__

    @functools.wraps(_stock_call)
    def __call__(self, *args):
        if self._device and _launch is not None:
            _swap_math(self.fn.__globals__)   # a device function from another module
        if (self._device or _simkernel._kernel_context is not None
                or _OPTS["executor"] == "stock" or self.extensions or _has_records(args)):
            if not self._device and _simkernel._kernel_context is None:
                for cap in _listeners:      # a launch the captures cannot see: say so
                    cap.unchecked.append(getattr(self.fn, "__name__", "kernel"))
            return _stock_call(self, *args)
        launch(self, args)

    _simkernel.FakeCUDAKernel.__call__ = __call__
    # warp intrinsics reachable as attributes of the simulator's top-level ``cuda`` module
    # too (host code that checks hasattr), raising a clear error outside a kernel
    import numba.cuda as _cuda
    _install_copies(_cuda)
    for nm in ("syncwarp", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
               "ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync", "match_all_sync",
               "activemask", "lanemask_lt", "dp4a"):
        if not hasattr(_cuda, nm):
            setattr(_cuda, nm, _outside_kernel(nm))


def _has_records(args):
    """Structured (record) arrays and scalars: the stock simulator's ``a[i].x`` attribute
    access is not reproduced by :class:`SimArray`, so such launches run on the stock executor
    (without the sim tier's checks and counters)."""
    for a in args:
        if isinstance(a, np.void):
            return True
        dt = getattr(a, "dtype", None)
        if dt is not None and getattr(dt, "names", None):
            return True
    return False


def _outside_kernel(nm):
    def f(*a, **k):
        raise RuntimeError(f"cuda.{nm} can only be called inside a kernel")
    f.__name__ = nm
    return f



install()
