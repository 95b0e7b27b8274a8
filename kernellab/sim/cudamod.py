"""The in-kernel ``cuda`` module of a sim-tier launch (:class:`SimCudaModule`).

The stock simulator's ``FakeCUDAModule`` with thread and block indices set by the scheduler,
barriers, warp collectives (CUDA C++ Programming Guide, "Warp Shuffle Functions", "Warp Vote
Functions", "__syncwarp"; numba-cuda docs "Warp Intrinsics"), atomics (bounds-checked, logged
with the atomic bit, a switch point), ``cuda.shared`` / ``cuda.local`` arrays (poisoned: NaN
for floats, bytes ``0xCD`` for integers), and :func:`dp4a` (PTX ISA, "Integer Arithmetic
Instructions: dp4a"). The running thread and launch are read from
:mod:`kernellab.sim.arrays` (``_a._cur``, ``_a._launch``).
"""

from __future__ import annotations

import numpy as np

from numba.cuda.simulator import kernelapi as _kapi
from numba.cuda import types as _nbtypes
from numba.cuda.np import numpy_support as _npsupport

from kernellab.sim import arrays as _a
from kernellab.sim import sm80 as _sm80
from kernellab.sim.arrays import (
    ACTIVE, ATOMIC_BIT, SimArray, _barrier, _getframe, _narrow, _warp_op, _where, _yield,
)
from kernellab.sim.errors import DivergenceError, OutOfBoundsError
from kernellab.sim.settings import INT_POISON


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
        if _a._launch is not None and _a._cur is not None:
            _a._launch.block_locals.append((_a._cur.tid, a))    # its footprint, at the block's end
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
            if _a._mode:      # logged as a write with the atomic bit: races with plain accesses
                _a._log.append(array._kw + off + ATOMIC_BIT)
                if _a._mode >= 2:
                    _a._slog.append(f.f_lasti if f.f_code is _a._kcode else _a._site(f))
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
        _a._launch.counters["atomics"] += 1
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
        if _a._launch.nblocks != 1:
            raise DivergenceError(
                f"{_where()}: grid.sync() with {_a._launch.nblocks} blocks: the sim tier runs "
                "blocks one after another and can only synchronise a one-block grid")
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
        t = _a._cur.idx
        b = _a._launch.ctaid
        bd = _a._launch.block
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
        t = _a._cur
        t.state = 1
        t.wait = ("plain", 0, _getframe(1))
        _a._sched.switch()

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
        return np.uint32((1 << _a._cur.lane) - 1)

    def dp4a(self, a, b, c):
        return dp4a(a, b, c)

    # sm_80: tensor cores, ldmatrix, cp.async, vector accesses (kernellab.cuda_ext for the GPU;
    # kernellab.sim.sm80 evaluates them here)
    def mma_m16n8k16_f16(self, a, b, c):
        return _sm80.mma("f16", a, b, c, _getframe(1))

    def mma_m16n8k16_bf16(self, a, b, c):
        return _sm80.mma("bf16", a, b, c, _getframe(1))

    def ldmatrix_x1(self, arr, idx):
        return _sm80.ldmatrix(1, False, arr, idx, _getframe(1))

    def ldmatrix_x2(self, arr, idx):
        return _sm80.ldmatrix(2, False, arr, idx, _getframe(1))

    def ldmatrix_x4(self, arr, idx):
        return _sm80.ldmatrix(4, False, arr, idx, _getframe(1))

    def ldmatrix_x1_trans(self, arr, idx):
        return _sm80.ldmatrix(1, True, arr, idx, _getframe(1))

    def ldmatrix_x2_trans(self, arr, idx):
        return _sm80.ldmatrix(2, True, arr, idx, _getframe(1))

    def ldmatrix_x4_trans(self, arr, idx):
        return _sm80.ldmatrix(4, True, arr, idx, _getframe(1))

    def cp_async(self, dst, di, src, si, nbytes):
        _sm80.cp_async(dst, di, src, si, nbytes, None, _getframe(1))

    def cp_async_zfill(self, dst, di, src, si, nbytes, src_bytes):
        _sm80.cp_async(dst, di, src, si, nbytes, src_bytes, _getframe(1))

    def cp_async_commit_group(self):
        _sm80.commit_group()

    def cp_async_wait_group(self, n):
        _sm80.wait_group(n, _getframe(1))

    def cp_async_wait_all(self):
        _sm80.wait_all(_getframe(1))

    def ld_v2(self, arr, idx):
        return _sm80.ld_vec(arr, idx, 2, _getframe(1))

    def ld_v4(self, arr, idx):
        return _sm80.ld_vec(arr, idx, 4, _getframe(1))

    def st_v2(self, arr, idx, vals):
        _sm80.st_vec(arr, idx, vals, 2, _getframe(1))

    def st_v4(self, arr, idx, vals):
        _sm80.st_vec(arr, idx, vals, 4, _getframe(1))


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
