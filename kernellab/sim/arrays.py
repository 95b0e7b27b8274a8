"""The array layer of the ``sim`` executor and its hot-path access log.

A kernel's global and shared arrays are :class:`SimArray` views (1-D and 2-D contiguous ones a
class generated per logging mode, :func:`_wrap`): every element access is bounds-checked and
appended as one int64 to the running thread's log (:data:`_log`, layout at ``OFF_BITS``). The
per-launch state the access path reads (``_log``, ``_slog``, ``_mode``, ``_kcode``, ``_site``,
``_cur``, ``_launch``, ``_sched``, ``SLICE``) are module globals of THIS module, because a
global lookup is the cheapest one on the hot path: the scheduler and the launch set them here
(:mod:`kernellab.sim.scheduler`, :mod:`kernellab.sim.launch`); other modules read them as
attributes of this module, never by ``from ... import`` (they are rebound). Also here: a
thread's side of a switch (barrier, warp collective, atomic, forced switch after ``SLICE``
log entries) and the source site of an access (mode 2; mode 3 adds the call context).
"""

from __future__ import annotations

from array import array as _array
import operator
import os
import sys

import numpy as np

from numba.cuda.simulator import kernel as _simkernel

from kernellab.sim.errors import DivergenceError, OutOfBoundsError
from kernellab.sim.settings import WARP

SLICE = 1 << 20            # a thread's log entries (2 an access) before a forced switch

_getframe = sys._getframe
_index = operator.index


def _new_log():
    """An access log: a typed int64 array (8 bytes an entry, read by numpy without a copy)."""
    return _array("q")


def _join(logs):
    out = _array("q")
    for lg in logs:
        out.extend(lg)
    return out


# ----------------------------------------------------------------------------------------
# Per-launch state. Globals of this module, because the hot path (an array access) must be
# cheap; the scheduler and the launch set them here (never copy them with ``from ... import``).

_log = _new_log()       # the running thread's access log (one int64 an access, see _Root)
_slog = _new_log()      # modes 2, 3: the running thread's access sites, parallel to _log
_mode = 1                # 0 no log (checks="fast"), 1 log, 2 log with sites, 3 sites with
                         # call contexts (the re-run that explains a race)
_kcode = None            # code object of the running kernel (sites in it need no lookup)
_cur = None              # the running _Thread
_launch = None           # the running _Launch
_listeners: list = []    # capture() stacks
_sched = None            # the scheduler greenlet of the running block


class _Thread:
    __slots__ = ("g", "tid", "idx", "idx3", "warp", "lane", "state", "wep", "wait", "resume",
                 "log", "slog", "segs", "live", "exit_ep", "cpg")

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
        self.cpg = None      # cp.async groups (kernellab.sim.sm80), once the thread issues one


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
                 "nload", "nstore", "natomic", "digest0", "stored", "dram_a", "wide", "alias",
                 "wrapper", "pending", "npending", "views", "check_only")

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
        self.wide = None        # access width (bytes) -> the alias root of that width
        self.alias = None       # an alias root: (the allocation's root, elements per access)
        self.wrapper = None     # shared: the SimArray the block's threads index
        self.pending = None     # shared: cp.async copies not yet waited for, per element
        self.npending = 0
        self.views = None       # shared: the views (slices) of it the block's threads made
        self.check_only = False  # an alias whose log entries only the checks see


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
        v = _wrap(sub, self._root, off0)
        root = self._root
        if root.space == "s":       # views of a shared array: checked for in-flight cp.async
            if root.views is None:
                root.views = []
            root.views.append(v)
            if root.npending:
                v.__class__ = pending_class(type(v))
        return v

    def __getitem__(self, idx):
        return self._general_get(idx, _getframe(1))

    def __setitem__(self, idx, val):
        self._general_set(idx, val, _getframe(1))

    # numpy interop (ufuncs on whole arrays; rare inside kernels): untracked
    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def __getattr__(self, name):
        return getattr(self._a, name)


#: the checking subclass of a view class while cp.async copies into its array are in flight
#: (set by :mod:`kernellab.sim.sm80`, which owns the check)
pending_class = None


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
# Thread switching: the running thread's side (the scheduler's: kernellab.sim.scheduler)

ACTIVE = object()     # the "mask" of activemask(): every lane still converged here


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
