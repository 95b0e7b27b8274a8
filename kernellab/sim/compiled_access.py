"""The compiled path's element access (:mod:`kernellab.sim.compiled`): inside a Numba-compiled
thread, ``_ld(a, L, idx)`` / ``_st(a, L, v, idx)`` bounds-check an element index (negative
indices included: ``IndexError``, which sends the launch to the greenlet re-run that names the
thread and line), append the element's byte address (with :data:`_W62` for a store) to the
block's log ``L`` and load or store; ``_mark(L)`` records the log position at a yield.
``L``: (log int64[LOG_CAP], pos int64[2]: next entry and overflow flag, seg int64[...]: the
log position at each yield, nseg int64[1]). The log is written modulo :data:`LOG_CAP`; the
driver sees ``pos > LOG_CAP`` and re-runs the launch on the greenlet executor."""

from __future__ import annotations

from numba import njit, types as _nbt
from numba.extending import overload

LOG_CAP = 1 << 21           # log entries a block may write (8 bytes each) before the re-run
_MASK = LOG_CAP - 1          # the log is written modulo its size; the driver sees pos > cap
_JIT = {"error_model": "numpy"}

_W62 = 1 << 62              # the helper's write bit (a byte address is below 2**48)
_A61 = 1 << 61              # the helper's atomic bit
_RAW = _A61 - 1

def _ld(a, L, idx):  # pragma: no cover - replaced by the overload inside compiled code
    raise NotImplementedError


def _st(a, L, v, idx):  # pragma: no cover
    raise NotImplementedError


def _mark(L):  # pragma: no cover
    raise NotImplementedError


@njit
def _too_long():
    raise RuntimeError("a loop in a device function ran long")


@overload(_mark, jit_options=_JIT)
def _ov_mark(L):
    def impl(L):
        seg, nseg = L[2], L[3]
        n = nseg[0]
        seg[n] = L[1][0]
        nseg[0] = n + 1
    return impl


def _index_kind(a, idx):
    """'elem' (one element of array a), 'view' (fewer integer indices than dimensions),
    'plain' (not an array: a tuple's item) or None (not handled)."""
    if not isinstance(a, _nbt.Array):
        return "plain"
    ts = tuple(idx) if isinstance(idx, _nbt.BaseTuple) else (idx,)
    if not all(isinstance(t, _nbt.Integer) for t in ts):
        return None
    if len(ts) == a.ndim and (a.ndim <= 3 or isinstance(idx, _nbt.UniTuple)):
        return "elem"
    return "view" if len(ts) < a.ndim else None


# The bounds check and the log write are spelled out in each implementation on purpose: an
# overload that calls another jitted function measured ~30x slower per access here.
@overload(_ld, jit_options=_JIT)
def _ov_ld(a, L, idx):
    kind = _index_kind(a, idx)
    if kind == "plain":
        return lambda a, L, idx: a[idx]
    if kind == "view":     # a row (or plane) view: bounds-checked, logged when its elements are
        if not isinstance(idx, _nbt.BaseTuple):
            def impl(a, L, idx):
                if idx < 0 or idx >= a.shape[0]:
                    raise IndexError("index out of bounds")
                return a[idx]
            return impl
        n = len(idx)

        def impl(a, L, idx):
            for k in range(n):
                if idx[k] < 0 or idx[k] >= a.shape[k]:
                    raise IndexError("index out of bounds")
            return a[idx]
        return impl
    if kind is None:
        return None
    nd = a.ndim
    if nd == 1:
        if isinstance(idx, _nbt.BaseTuple):
            def impl(a, L, idx):
                return _ld(a, L, idx[0])
            return impl

        def impl(a, L, idx):
            if idx < 0 or idx >= a.shape[0]:
                raise IndexError("index out of bounds")
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = (a.ctypes.data + idx * a.strides[0])
            pos[0] = p + 1
            return a[idx]
        return impl
    if nd == 2:
        def impl(a, L, idx):
            i, j = idx
            if i < 0 or i >= a.shape[0] or j < 0 or j >= a.shape[1]:
                raise IndexError("index out of bounds")
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = (a.ctypes.data + i * a.strides[0] + j * a.strides[1])
            pos[0] = p + 1
            return a[i, j]
        return impl

    if nd > 3:
        def impl(a, L, idx):
            off = 0                 # bytes from the start (int64: a uint64 sum would widen)
            for d in range(nd):
                i = idx[d]
                if i < 0 or i >= a.shape[d]:
                    raise IndexError("index out of bounds")
                off += i * a.strides[d]
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = a.ctypes.data + off
            pos[0] = p + 1
            return a[idx]
        return impl

    def impl(a, L, idx):
        i, j, k = idx
        if i < 0 or i >= a.shape[0] or j < 0 or j >= a.shape[1] or k < 0 or k >= a.shape[2]:
            raise IndexError("index out of bounds")
        lg, pos = L[0], L[1]
        p = pos[0]
        lg[p & _MASK] = (a.ctypes.data + i * a.strides[0] + j * a.strides[1]
                        + k * a.strides[2])
        pos[0] = p + 1
        return a[i, j, k]
    return impl


@overload(_st, jit_options=_JIT)
def _ov_st(a, L, v, idx):
    if _index_kind(a, idx) != "elem":
        return None
    nd = a.ndim
    if nd == 1:
        if isinstance(idx, _nbt.BaseTuple):
            def impl(a, L, v, idx):
                _st(a, L, v, idx[0])
            return impl

        def impl(a, L, v, idx):
            if idx < 0 or idx >= a.shape[0]:
                raise IndexError("index out of bounds")
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = (a.ctypes.data + idx * a.strides[0]) | _W62
            pos[0] = p + 1
            a[idx] = v
        return impl
    if nd == 2:
        def impl(a, L, v, idx):
            i, j = idx
            if i < 0 or i >= a.shape[0] or j < 0 or j >= a.shape[1]:
                raise IndexError("index out of bounds")
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = (a.ctypes.data + i * a.strides[0] + j * a.strides[1]) | _W62
            pos[0] = p + 1
            a[i, j] = v
        return impl

    if nd > 3:
        def impl(a, L, v, idx):
            off = 0                 # bytes from the start (int64: a uint64 sum would widen)
            for d in range(nd):
                i = idx[d]
                if i < 0 or i >= a.shape[d]:
                    raise IndexError("index out of bounds")
                off += i * a.strides[d]
            lg, pos = L[0], L[1]
            p = pos[0]
            lg[p & _MASK] = (a.ctypes.data + off) | _W62
            pos[0] = p + 1
            a[idx] = v
        return impl

    def impl(a, L, v, idx):
        i, j, k = idx
        if i < 0 or i >= a.shape[0] or j < 0 or j >= a.shape[1] or k < 0 or k >= a.shape[2]:
            raise IndexError("index out of bounds")
        lg, pos = L[0], L[1]
        p = pos[0]
        lg[p & _MASK] = (a.ctypes.data + i * a.strides[0] + j * a.strides[1]
                        + k * a.strides[2]) | _W62
        pos[0] = p + 1
        a[i, j, k] = v
    return impl
