"""The sm_80 instructions of :mod:`kernellab.cuda_ext` on the sim tier, a thread's side:
``mma.m16n8k16`` and ``ldmatrix`` (warp collectives, completed by
:mod:`kernellab.sim.scheduler` with :mod:`kernellab.sim.mma`), ``cp.async`` with its groups,
and 64/128-bit vector loads and stores.

What is checked, as a GPU or NVIDIA's Compute Sanitizer would fail it (PTX ISA, "mma",
"ldmatrix", "cp.async", "Vectors"):

* ``mma`` and ``ldmatrix`` are ``.sync.aligned``: every lane of the warp executes the same
  instruction, else :class:`DivergenceError`. A fragment has 4 (A), 2 (B) and 4 (C) registers.
* ``ldmatrix`` reads 16 bytes (a row of 8 16-bit elements) at a 16-byte-aligned address of a
  *shared* array, for lanes ``0 .. 8 n - 1`` of ``.xn``; ``cp.async`` copies 4, 8 or 16 bytes
  from a global to a shared array, both addresses aligned to the size; ``ld_v*``/``st_v*``
  access 8 or 16 bytes at an address aligned to the size. A misaligned address or one past the
  end of the row raises :class:`OutOfBoundsError` (a GPU raises "misaligned address" or reads
  another row).
* ``cp.async`` completes only at ``cp_async_wait_group(n)`` / ``cp_async_wait_all()`` of the
  thread that issued it (its group, and every older one, once at most ``n`` newer groups are in
  flight): until then any thread's read or write of a destination element raises
  :class:`RaceError` naming both sides. After the wait, other threads see the data only after
  a barrier, as for a plain store (the race detector: the copy is logged as the issuing
  thread's store when it is issued, and again, uncounted, at the wait that completes it).

Each access is logged once at its full width (an alias of the allocation with elements of that
width: :func:`kernellab.sim.wide.wide_root`), so global sectors and shared-memory
phases and wavefronts are those of a 64- or 128-bit request (8 or 16 lanes a phase). Known
limit: within one barrier interval, mixing ``ldmatrix`` of different widths (``.x1``/``.x2``,
where only some lanes give addresses) on one array can merge requests differently from a GPU.
"""

from __future__ import annotations

import numpy as np

from kernellab.sim import arrays as _a
from kernellab.sim import wide as _wide
from kernellab.sim.arrays import (
    SLICE, WRITE_BIT, SimArray, _getframe, _narrow, _warp_op, _where,
)
from kernellab.sim.errors import DivergenceError, OutOfBoundsError, RaceError

FULL = 0xFFFFFFFF


def _line(f):
    return f.f_lineno


def _located(arr, idx, nbytes, f, what, space=None, span=None):
    """``(root, element offset in the allocation)`` of a ``nbytes``-wide access at ``arr[idx]``,
    checked: a global or shared array (``space`` "g" or "s" when only one will do), the index
    an element, the ``span`` bytes it reads (default ``nbytes``) within the row and the address
    aligned to ``nbytes``."""
    if not isinstance(arr, SimArray):
        raise OutOfBoundsError(
            f"{_where()}: {what} at line {_line(f)} needs a global or shared array, got "
            f"{type(arr).__name__} (a cuda.local array or a value)")
    root = arr._root
    if space is not None and root.space != space:
        want = "shared" if space == "s" else "global"
        raise OutOfBoundsError(
            f"{_where()}: {what} at line {_line(f)}: {root.name} is a "
            f"{'shared' if root.space == 's' else 'global'} array; this operand must be "
            f"{want} memory")
    off = arr._offset(idx, f)
    if off is None:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)}: index {idx!r} into "
                               f"{root.name} must name one element")
    isz = root.itemsize
    span = nbytes if span is None else span
    n = span // isz
    if span % isz or nbytes % isz or nbytes < isz:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)}: {span} bytes is not "
                               f"a whole number of {root.name}'s {isz}-byte elements")
    last = (idx[-1] if isinstance(idx, tuple) else idx)
    inner = arr.shape[-1] if arr.ndim else 1
    step = arr._st[-1] if arr.ndim else 1
    if n > 1 and step != 1:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)}: the {n} elements of "
                               f"{root.name} from {idx!r} are not adjacent in memory")
    if int(last) + n > inner:
        raise OutOfBoundsError(
            f"{_where()}: {what} at line {_line(f)}: {span} bytes from {root.name}"
            f"{list(idx) if isinstance(idx, tuple) else [idx]} run past the end of its row "
            f"({inner} elements): handle the tail with a narrower access or zero fill")
    pos = arr._o + off
    addr = root.base + pos * isz
    if addr % nbytes:
        raise OutOfBoundsError(
            f"{_where()}: misaligned address: {what} at line {_line(f)} moves {nbytes} bytes "
            f"from {root.name}{list(idx) if isinstance(idx, tuple) else [idx]}, "
            f"{addr % nbytes} bytes past a {nbytes}-byte boundary (a GPU raises 'misaligned "
            "address'); the row pitch and the index must keep every such access aligned")
    return root, pos


def _log(root, pos, nbytes, write, f, check_only=False):
    """Log one ``nbytes``-wide access of the allocation ``root`` at element ``pos``
    (``check_only``: seen by the race and uninitialised-read checks, not counted as traffic)."""
    if not _a._mode:
        return
    wide = (root if nbytes == root.itemsize and not check_only
            else _wide.wide_root(_a._launch, root, nbytes, check_only))
    log = _a._log
    log.append(wide.key + (pos * root.itemsize) // nbytes + (WRITE_BIT if write else 0))
    if _a._mode >= 2:
        _a._slog.append(f.f_lasti if f.f_code is _a._kcode else _a._site(f))
    if len(log) > SLICE:
        _a._slice()


def _check_pending(root, pos, n, f, write):
    p = root.pending
    if p is None or not root.npending:
        return
    hit = np.flatnonzero(p[pos:pos + n])
    if len(hit):
        _pending_error(root, pos + int(hit[0]), f, write)


def _pending_error(root, pos, f, write):
    issuer = _PENDING_BY.get(id(root), {}).get(pos, ("?", "?"))
    from kernellab.sim.sites import _unravel
    raise RaceError(
        f"{_where()}: {'write to' if write else 'read of'} shared {root.name}"
        f"{_unravel(root, pos)} at line {_line(f)} while the cp.async that writes it "
        f"(issued at line {issuer[1]} by tid={issuer[0]}) has not completed: the issuing "
        "thread must wait for its group (cuda.cp_async_wait_group(n) or "
        "cuda.cp_async_wait_all()) and the block pass cuda.syncthreads() before the data is "
        "read")


# ---------------------------------------------------------------------------------------------
# reads and writes of a shared array while cp.async copies into it are in flight

_PENDING_CLS: dict = {}


def _pending_class(cls):
    got = _PENDING_CLS.get(cls)
    if got is None:
        def __getitem__(self, idx):
            f = _getframe(1)
            off = self._offset(idx, f)
            if off is not None and self._root.pending[self._o + off]:
                _pending_error(self._root, self._o + off, f, False)
            return self._general_get(idx, f)

        def __setitem__(self, idx, v):
            f = _getframe(1)
            off = self._offset(idx, f)
            if off is not None and self._root.pending[self._o + off]:
                _pending_error(self._root, self._o + off, f, True)
            self._general_set(idx, v, f)

        got = type(cls.__name__ + "Pending", (cls,), {
            "__slots__": (), "__getitem__": __getitem__, "__setitem__": __setitem__,
            "_plain": cls})
        _PENDING_CLS[cls] = got
    return got


def _add_pending(root, pos, n, f):
    if root.pending is None:
        root.pending = np.zeros(root.elems, np.int32)
        _PENDING_BY[id(root)] = {}
    root.pending[pos:pos + n] += 1
    root.npending += n
    by = _PENDING_BY[id(root)]
    who = ("(" + ", ".join(str(v) for v in _a._cur.idx) + ")", _line(f))
    for k in range(pos, pos + n):
        by[k] = who
    for w in _wrappers(root):
        if not hasattr(type(w), "_plain"):
            w.__class__ = _pending_class(type(w))


def _drop_pending(root, pos, n):
    root.pending[pos:pos + n] -= 1
    root.npending -= n
    if not root.npending:
        for w in _wrappers(root):
            if hasattr(type(w), "_plain"):
                w.__class__ = type(w)._plain


def _wrappers(root):
    """The SimArrays over shared allocation ``root``: the one its ``cuda.shared.array`` call
    returns and every view sliced from it since."""
    return ([root.wrapper] if root.wrapper is not None else []) + (root.views or [])


_PENDING_BY: dict = {}      # id(root) -> element -> (issuing thread, line)
_a.pending_class = _pending_class


class _Groups:
    """One thread's ``cp.async`` copies: the open group and the committed ones, oldest first;
    each copy ``(root, pos, elements, bytes read, mma count of its warp when issued, line)``;
    ``done``: ``(bytes, MMAs its warp issued while it was in flight)`` of each completed group
    that read bytes (:func:`block_overlap`)."""

    __slots__ = ("open", "committed", "done")

    def __init__(self):
        self.open = []
        self.committed = []
        self.done = []


def _groups():
    t = _a._cur
    if t.cpg is None:
        t.cpg = _Groups()
    return t.cpg


def _complete(group, f):
    """The thread's wait completes ``group``: its destinations are no longer pending, and are
    logged again as this thread's stores *now* (a copy lands by the wait, so another thread may
    read it only after a barrier that follows the wait; the log entry is for the race detector
    only: it is not counted as traffic)."""
    L = _a._launch
    warp = _a._cur.warp
    mmas = L.warp_mma.get(warp, 0)
    nbytes_g, mma0_g = 0, None
    for root, pos, n, nbytes, mma0 in group:
        _drop_pending(root, pos, n)
        nbytes_g += nbytes
        mma0_g = mma0 if mma0_g is None else min(mma0_g, mma0)
        _log(root, pos, n * root.itemsize, True, f, check_only=True)
    if nbytes_g:
        _a._cur.cpg.done.append((nbytes_g, mmas - mma0_g))


def block_overlap(launch, threads) -> None:
    """Fold the finished block's completed ``cp.async`` groups into
    ``cp_async_overlapped_bytes``: a group's bytes count in the share of the MMAs a tile needs
    that ran while it was in flight, ``min(1, MMAs in flight / (warp's MMAs / thread's groups))``
    -- the MMAs of one pipeline stage. Double buffering over n tiles credits n - 1 groups fully;
    one MMA between a copy and its wait credits a fraction; a group that copies nothing counts
    nothing."""
    total = 0.0
    for t in threads:
        g = t.cpg
        if g is None or not g.done:
            continue
        per_group = launch.warp_mma.get(t.warp, 0) / len(g.done)
        if per_group > 0:
            total += sum(b * min(1.0, m / per_group) for b, m in g.done)
    launch.counters["cp_async_overlapped_bytes"] += int(round(total))


# ---------------------------------------------------------------------------------------------
# the instructions


def _regs(v, n, what, f, kind):
    if not isinstance(v, (tuple, list)) or len(v) != n:
        raise DivergenceError(
            f"{_where()}: {what} at line {_line(f)} takes {n} {kind} registers as a tuple, got "
            f"{v!r}")
    return v


def mma(kind, a, b, c, f):
    what = f"mma_m16n8k16_{kind}"
    a = tuple(int(x) & FULL for x in _regs(a, 4, what, f, "uint32 (A)"))
    b = tuple(int(x) & FULL for x in _regs(b, 2, what, f, "uint32 (B)"))
    c = tuple(np.float32(x) for x in _regs(c, 4, what, f, "float32 (C)"))
    return _warp_op("mma", FULL, (kind, a, b, c), None, f)


def ldmatrix(n, trans, arr, idx, f):
    what = f"ldmatrix_x{n}{'_trans' if trans else ''}"
    row = None
    if _a._cur.lane < 8 * n:
        root, pos = _located(arr, idx, 16, f, what, "s")
        if root.itemsize != 2:
            raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)} loads 16-bit "
                                   f"elements; {root.name} has {root.itemsize}-byte ones")
        _check_pending(root, pos, 8, f, False)
        _log(root, pos, 16, False, f)
        row = root.flat[pos:pos + 8].view(np.uint16).copy()
    return _warp_op("ldmatrix", FULL, (n, trans, row), None, f)


def cp_async(dst, di, src, si, nbytes, src_bytes, f):
    what = "cp_async" if src_bytes is None else "cp_async_zfill"
    nbytes = int(nbytes)
    if nbytes not in (4, 8, 16):
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)}: copies 4, 8 or 16 "
                               f"bytes, not {nbytes}")
    sb = nbytes if src_bytes is None else int(src_bytes)
    if not 0 <= sb <= nbytes:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)}: src_bytes {sb} must "
                               f"be 0..{nbytes}")
    droot, dpos = _located(dst, di, nbytes, f, what + " (destination)", "s")
    if sb:      # the source is aligned to the copy's size and read for src_bytes
        sroot, spos = _located(src, si, nbytes, f, what + " (source)", "g", span=sb)
    _check_pending(droot, dpos, nbytes // droot.itemsize, f, True)
    dbytes = droot.flat.view(np.uint8)
    d0 = dpos * droot.itemsize
    if sb:
        _log_src(sroot, spos, sb, nbytes, f)
        s0 = spos * sroot.itemsize
        dbytes[d0:d0 + sb] = sroot.flat.view(np.uint8)[s0:s0 + sb]
    dbytes[d0 + sb:d0 + nbytes] = 0
    _log(droot, dpos, nbytes, True, f)
    n = nbytes // droot.itemsize
    _add_pending(droot, dpos, n, f)
    L = _a._launch
    warp = _a._cur.warp
    # the bytes read from global memory (a zero fill reads nothing), in flight until the wait
    L.counters["cp_async_bytes"] += sb
    _groups().open.append((droot, dpos, n, sb, L.warp_mma.get(warp, 0)))


def _log_src(root, pos, sb, nbytes, f):
    if sb == nbytes:
        _log(root, pos, sb, False, f)
        return
    for k in range(sb // root.itemsize):      # a partial source: its elements, one by one
        _log(root, pos + k, root.itemsize, False, f)


def commit_group():
    g = _groups()
    g.committed.append(g.open)
    g.open = []


def wait_group(n, f):
    n = int(n)
    if not 0 <= n <= 7:
        raise OutOfBoundsError(f"{_where()}: cp_async_wait_group({n}) at line {_line(f)}: n "
                               "is 0..7, a constant")
    g = _groups()
    while len(g.committed) > n:
        _complete(g.committed.pop(0), f)


def wait_all(f):
    commit_group()
    g = _groups()
    while g.committed:
        _complete(g.committed.pop(0), f)


def ld_vec(arr, idx, n, f):
    what = f"ld_v{n}"
    isz = arr._root.itemsize if isinstance(arr, SimArray) else 0
    if isz != 4:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)} loads 4-byte elements "
                               "(float32, int32, uint32)" + (f"; {arr._root.name} has {isz}-byte "
                                                             "ones" if isz else ""))
    root, pos = _located(arr, idx, 4 * n, f, what)
    if root.space == "s":
        _check_pending(root, pos, n, f, False)
    _log(root, pos, 4 * n, False, f)
    v = root.flat[pos:pos + n]
    return tuple(v[k] for k in range(n))


def st_vec(arr, idx, vals, n, f):
    what = f"st_v{n}"
    isz = arr._root.itemsize if isinstance(arr, SimArray) else 0
    if isz != 4:
        raise OutOfBoundsError(f"{_where()}: {what} at line {_line(f)} stores 4-byte elements "
                               "(float32, int32, uint32)" + (f"; {arr._root.name} has {isz}-byte "
                                                             "ones" if isz else ""))
    vals = _regs(vals, n, what, f, "values")
    root, pos = _located(arr, idx, 4 * n, f, what)
    if root.space == "s":
        _check_pending(root, pos, n, f, True)
    _log(root, pos, 4 * n, True, f)
    for k, v in enumerate(vals):     # as a GPU store: an integer wraps to the element's width
        try:
            root.flat[pos + k] = v
        except OverflowError:
            root.flat[pos + k] = _narrow(v, root.flat.dtype)
