"""The access-log analysis of a sim-tier launch (:class:`_Launch`).

A launch's wrapped arguments and shared arrays (:meth:`_Launch.global_root`,
:meth:`_Launch.shared_array`), and the numpy analysis of the threads' closed log segments
(:meth:`_Launch.flush`): traffic counters (warp-level requests, 32-byte global sectors,
shared-memory wavefronts per bank), races within a barrier interval and across blocks,
reads of uninitialised shared memory, per-site traffic (mode 2), the first block's trace
(:data:`TRACE_DTYPE`). A hazard found without source sites raises :class:`_NeedDetail` so the
launch re-runs with them. Rules: CUDA C++ Programming Guide, § "Device Memory Accesses"
(sectors, coalescing) and § "Compute Capability 5.x+ / Shared Memory" (banks); NVIDIA Compute
Sanitizer manual (racecheck, initcheck).
"""

from __future__ import annotations

import time

import numpy as np

from numba.cuda import types as _nbtypes
from numba.cuda.np import numpy_support as _npsupport

from kernellab.sim import arrays as _a
from kernellab.sim import content_digest
from kernellab.sim import racecheck as _racecheck
from kernellab.sim import wide as _wide
from kernellab.sim.sm80 import block_overlap as _sm80_block_overlap
from kernellab.sim.arrays import (
    AID_SHIFT, ATOMIC_BIT, CTX_SHIFT, OFF_BITS, OFF_MASK, SITE_MASK, W_SHIFT, WRITE_BIT,
    _STORE_BITS, SimArray, _codes, _ctx_ids, _ctxs, _idx_str, _join, _listeners, _new_log, _Root,
    _where, _wrap,
)
from kernellab.sim.banks import (
    MAX_PHASES, _bank_words, _phase_of, _phase_wavefronts, _uniq, run_starts,
)
from kernellab.sim.counters import COUNTER_KEYS
from kernellab.sim.cudamod import _local_footprints, _poisoned
from kernellab.sim.errors import LaunchConfigError, UninitialisedReadError
from kernellab.sim.settings import _OPTS, ALIGN, MAX_STATIC_SHARED, SECTOR, WARP
from kernellab.sim.sites import _assigned_name, _Explain, _instr_start, _unravel

MEMO_ENTRIES = 32         # distinct per-block shared-memory logs remembered a launch

#: ``LaunchStats.block_max`` keys: the busiest block's work
BLOCK_MAX_KEYS = ("global_sectors", "shared_wavefronts", "barriers")


class _NeedDetail(Exception):
    """A hazard was found by a log without the detail to explain it: re-run the launch in
    ``mode`` (2: logging source sites, so the error can name lines; 3: with call contexts
    too, so a race can be put in program order)."""

    def __init__(self, mode=2):
        super().__init__(mode)
        self.mode = mode


def _block_work(c):
    """The launch's counted work so far, in the order of :data:`BLOCK_MAX_KEYS` (every block
    is flushed when it ends, so the difference across a block is that block's work)."""
    return (c["global_load_sectors"] + c["global_store_sectors"],
            c["shared_load_wavefronts"] + c["shared_store_wavefronts"], c["barriers"])


class _Launch(_Explain):
    """One launch's state and the bulk analysis of its access logs (see the module docstring)."""

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
        self.has_wide = False       # an alias root exists (kernellab.sim.sm80's accesses)
        self.warp_mma = {}          # warp -> mma instructions it issued (the running block)

    # -- a block (both executors)
    def begin_block(self, ctaid, blin):
        """Reset the per-block state for block ``ctaid`` (linear index ``blin``); returns the
        work counted so far, for :meth:`end_block`."""
        self.ctaid = ctaid
        self.blin = blin
        self.shared_roots = {}
        self.block_roots = []
        # shared arrays' ids are reused block to block; global aliases stay (renumbered)
        self.roots = _wide.global_roots(self.groots, self.roots)
        self.epoch = 0
        self.bar_sites = []
        self.warp_mma = {}
        self.block_start_flush = True
        self.block_open = True
        self.block_event0 = self.nwevents
        self.shared_bytes = 0
        self.shared_bytes_used = 0
        self.dyn = None
        return _block_work(self.counters)

    def end_block(self, work0):
        """Close the block: analyse what is left, fold its work into ``block_max``, its
        ``cuda.local`` arrays into the local-memory figures and its shared bytes."""
        self.block_open = False
        self.flush()
        c = self.counters
        bm = self.block_max
        for k, w1, w0 in zip(BLOCK_MAX_KEYS, _block_work(c), work0):
            bm[k] = max(bm[k], w1 - w0)
        _local_footprints(self)
        _sm80_block_overlap(self, self.threads)
        c["shared_bytes_per_block"] = max(c["shared_bytes_per_block"],
                                          self.shared_bytes + (self.dynshared_size or 0))

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
        root.wrapper = _wrap(arr, root, 0)
        return root.wrapper

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
        if _a._mode >= 2:
            site = np.frombuffer(_join([sg[5] for sg in segs]), np.int64)
            if _a._mode == 3:
                ctx = site >> CTX_SHIFT
                site = site & SITE_MASK
            site = self._canonical(site)
        else:
            site = None
        return self.analyse(key, blin, epoch, tid, wep, site, ctx)

    def analyse(self, key, blin, epoch, tid, wep, site=None, ctx=None):
        """Analyse log entries (int64 arrays, one element an access: the entry, its block,
        barrier interval, thread and warp-sync epoch; ``site``/``ctx`` in modes 2 and 3): the
        counters, races and uninitialised reads. Returns True when any entry is a store. The
        greenlet executor's :meth:`flush` and the compiled path
        (:mod:`kernellab.sim.compiled`) both end here."""
        nep = int(epoch.max()) + 1
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
        whole_block = self.block_start_flush and not self.block_open
        for sel, glob in parts:
            if sel is None:
                k, t, b, i, w, e = key, tid, blin, iv, wep, epoch
                st, cx = site, ctx
            else:
                k, t, b, i, w, e = key[sel], tid[sel], blin[sel], iv[sel], wep[sel], epoch[sel]
                st = site[sel] if site is not None else None
                cx = ctx[sel] if ctx is not None else None
            memo_key = None
            if not glob and whole_block and _a._mode:
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
            if self.has_wide:       # wide accesses: counted at their width, checked per element
                cnt = _wide.for_count(self.roots, k, t, b, i, st)
                if cnt is not None:
                    self._count(*cnt[:5], xkey=cnt[5])
                k, (t, b, i, w, st, e, cx) = _wide.expand(self.roots, k, [t, b, i, w, st, e, cx])
            else:
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
        if _a._mode == 3:      # every log is closed at a flush: the contexts can go
            _ctx_ids.clear()
            del _ctxs[1:]
        return bool(((key >> W_SHIFT) & 1).any())

    def _count(self, key, tid, blin, iv, site, xkey=None):
        """Traffic counters. An access's warp-level request is (array, load/store, barrier
        interval, warp, n-th access of that kind to that array by the thread in the interval):
        the lanes of a warp run one instruction stream, so their n-th accesses are one
        instruction. ``xkey``: ``key`` with alias entries expanded (:meth:`_expand`), for the
        per-element bookkeeping of the global allocations."""
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
            xk = key[isg] if xkey is None else xkey[self.isg_by_aid[xkey >> AID_SHIFT]]
            gaid = xk >> AID_SHIFT
            goff = xk & OFF_MASK
            gw = ((xk >> W_SHIFT) & 1).astype(np.bool_)
            gat = (xk & ATOMIC_BIT) != 0
            for root in self.groots:
                m = gaid == root.aid
                if not m.any():
                    continue
                o = goff[m] * root.itemsize
                w = gw[m]
                root.stored[goff[m][w]] = True
                # an atomic is a read-modify-write: counted as a store, its sectors also
                # reported apart (``LaunchStats.arrays``: dram_atomic_bytes)
                for bm, sel in ((root.dram_r, ~w), (root.dram_w, w), (root.dram_a, gat[m])):
                    if sel.any():
                        bm[o[sel] // SECTOR] = True
                        bm[(o[sel] + root.itemsize - 1) // SECTOR] = True
        if (~isg).any():
            sa, sr, si = addr[~isg], rinv[~isg], isz[~isg]
            phase = _phase_of(tid[~isg], si)
            if site is not None:
                self._count_shared_sites(sa, sr, si, site[~isg], req_ak, aid[~isg], phase)
            ur, sinv = _dense(sr)
            preq, word = _bank_words(sinv * MAX_PHASES + phase, sa, si)
            waves, _ = _phase_wavefronts(preq, word, len(ur))
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

    def _count_shared_sites(self, sa, sr, si, ssite, req_ak, said, phase):
        """Per access site and shared array: requests, wavefronts, the wavefronts the same
        requests need without bank conflicts (ceil(distinct 4-byte words / 32) each phase,
        :func:`_phase_of`), and the
        worst request's wavefronts. A site's request is the accesses of one warp-level request
        made from that site (as :meth:`_count_sites`). Mode 2 only: the bank-conflict detail
        of a speed rule (CUDA C++ Programming Guide, "Shared Memory" of compute capability
        5.x+: an n-way conflict takes n wavefronts where one would do)."""
        us, sinv = _dense(ssite)
        usub, subinv = _dense(sr * len(us) + sinv)
        nsub = len(usub)
        first = np.zeros(nsub, np.int64)        # an access of each sub-request: its array
        first[subinv] = np.arange(len(subinv))
        preq, word = _bank_words(subinv * MAX_PHASES + phase, sa, si)
        waves, ideal = _phase_wavefronts(preq, word, nsub)
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
            if _a._mode < 2:
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
                f"tid={_idx_str(th)} ctaid={_idx_str(self.block_idx(blin[idx][k]))}: read of "
                f"shared array {root.name}{_unravel(root, int(ua_off[ad[k]]))} at "
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
            if _a._mode >= 2 and root.first is None:
                root.first = np.full((root.elems, 4), -1, np.int64)   # block, tid, site, write
            if bad.any():
                if _a._mode < 2:
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
            if _a._mode >= 2:
                _, firstk = np.unique(inv, return_index=True)
                new = root.first[uo, 0] < 0
                gk = m[firstk[new]]
                root.first[uo[new]] = np.stack([blin[gk], tid[gk], site[gk],
                                                isw[gk].astype(np.int64)], axis=1)

    def _check_candidates(self, cand, adiv, addr_id, tid, blin, wep, site, isw, isa=None,
                          ivs=None):
        """Race test of the accesses of candidate groups ``cand`` (address, barrier interval),
        vectorised (:mod:`kernellab.sim.racecheck`); the race reported is the first pair in
        group order, then log order."""
        sel = np.flatnonzero(np.isin(adiv, cand))
        sel = sel[np.argsort(adiv[sel], kind="stable")]
        _, grp = _dense(adiv[sel])
        cls = isw[sel].astype(np.int64)
        if isa is not None:
            cls |= isa[sel].astype(np.int64) << 1
        args = (grp, tid[sel], wep[sel], cls, self.wevents)
        if not _racecheck.racy_accesses(*args).any():
            return
        if _a._mode != 3:
            raise _NeedDetail(3)
        p, q = _racecheck.first_pair(*args)
        k1, k2 = int(sel[p]), int(sel[q])
        t1, w1, t2, w2 = int(tid[k1]), bool(isw[k1]), int(tid[k2]), bool(isw[k2])
        a = int(addr_id[k1])
        root = self.roots[a >> AID_SHIFT]
        sp = "global" if root.space == "g" else "shared"
        self._race(root, sp, a & OFF_MASK, (t1, w1, site[k1]), (t2, w2, site[k2]),
                   int(blin[k1]), None if ivs is None else (k1, k2, tid, site, *ivs))

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
        if _a._mode >= 2:
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


def _dense(x):
    """(sorted distinct values, inverse index) of int array ``x``."""
    if len(x) == 0:
        return x, np.zeros(0, np.int64)
    order = np.argsort(x, kind="stable")
    y = x[order]
    new = run_starts(y)
    inv = np.empty(len(x), np.int64)
    inv[order] = np.cumsum(new) - 1
    return y[new], inv


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
