"""The scheduler of one sim-tier block, and the watchdog.

:func:`_run_block` runs a block's threads on pooled greenlets (``greenlet`` package) without
preemption, switching at a barrier, a warp collective, an atomic, thread exit, or after
``SLICE`` log entries; completes barriers (every live thread at one ``syncthreads`` call, else
:class:`~kernellab.sim.errors.DivergenceError`) and warp collectives (every lane the mask
names; CUDA C++ Programming Guide, "Warp Shuffle Functions", "Warp Vote Functions"). The
watchdog: ``STALE_SLICES`` slices in a row of loads only, or ``watchdog_s`` of wall-clock
(:func:`_arm_alarm`: SIGALRM for code that never switches), raise
:class:`~kernellab.sim.errors.StuckKernelError`. It sets the running thread's globals in
:mod:`kernellab.sim.arrays`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque

import numpy as np
from greenlet import greenlet, getcurrent

from numba.cuda.simulator import kernelapi as _kapi

from kernellab.sim import arrays as _a
from kernellab.sim import cudamod as _cudamod
from kernellab.sim.banks import _uniq
from kernellab.sim.arrays import ACTIVE, SLICE, _idx_str, _Thread, _where
from kernellab.sim.errors import DivergenceError, KernelError, SimError, StuckKernelError
from kernellab.sim.settings import _OPTS, WARP
from kernellab.sim.sites import _instr_start, _line_of
from kernellab.sim import mma as _mma
from kernellab.sim.warp import SHFL, shfl_source

BLOCK_CAP = 1 << 23        # logged accesses kept before an analysis (8 bytes each)
STALE_SLICES = 4
SPIN_ADDRESSES = 64       # a slice re-reading at most this many addresses is a spin-wait


def _run_block(launch, fn, args, ctaid, blin, base_ctx, rng):
    _a._kcode = launch.kcode
    work0 = launch.begin_block(ctaid, blin)
    launch.ctaid3 = _kapi.Dim3(*ctaid)
    mod = launch.module
    mod.blockIdx = launch.ctaid3
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
    _a._sched = sched
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
    active_warps = set()    # warps where a lane has waited at activemask()
    stale = 0
    progress = False
    c = launch.counters
    deadline = launch.t0 + _OPTS["watchdog_s"]
    nsw = 0
    popleft = runq.popleft
    ns = _a.__dict__    # the hot-path globals: a dict store each switch, as cheap as a global's
    while True:
        while runq:
            t = popleft()
            ns["_cur"] = t
            mod.threadIdx = t.idx3
            mod.laneid = t.lane
            ns["_log"] = log = t.log
            ns["_slog"] = t.slog
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
                m = t.wait[1]
                if m is ACTIVE:
                    active_warps.add(t.warp)
                elif len(wq) < m.bit_count() and t.warp not in active_warps:
                    # fewer lanes wait than this mask names: no collective of the warp can
                    # complete yet (only an activemask() one could, through a lane that went
                    # to wait elsewhere); a mask that never completes is named at the drain
                    continue
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
                    fu = u.wait[2]
                    sites.setdefault((fu.f_code, _instr_start(fu.f_code, fu.f_lasti)),
                                     []).append(u)
                break
        if len(sites) > 1:
            desc = "; ".join(f"{_thread_list(ts)} at line {_line_of(*s)}"
                             for s, ts in sites.items())
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
    launch.end_block(work0)


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
        job = _a._sched.switch(msg)


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
    for group in groups.values():
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
    if op in ("mma", "ldmatrix"):       # .sync.aligned: one instruction, the same for every lane
        sites = {_instr_start(*u.wait[4]) for u in wq}
        if len(sites) != 1:
            raise DivergenceError(
                f"ctaid={_idx_str(launch.ctaid)} warp {first.warp}: the lanes reach {op} at "
                f"{len(sites)} different places (line {_line_of(*first.wait[4])} and others): "
                f"{op}.sync.aligned must be executed by every lane at the same instruction")
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
    elif op == "mma":
        kinds = {u.wait[2][0] for u in wq}
        if len(kinds) != 1:
            raise DivergenceError(
                f"ctaid={_idx_str(launch.ctaid)} warp {first.warp}: lanes execute different "
                f"mma instructions ({', '.join(sorted(kinds))}) at line "
                f"{_line_of(*first.wait[4])}")
        lanes = sorted(by_lane)
        d = _mma.mma_m16n8k16(np.array([by_lane[ln].wait[2][1] for ln in lanes], np.uint32),
                              np.array([by_lane[ln].wait[2][2] for ln in lanes], np.uint32),
                              np.array([by_lane[ln].wait[2][3] for ln in lanes], np.float32),
                              kinds.pop(), _OPTS["mma_scale"])
        for i, ln in enumerate(lanes):
            results[ln] = tuple(d[i])
        c["mma_ops"] += 1
        launch.warp_mma[first.warp] = launch.warp_mma.get(first.warp, 0) + 1
    elif op == "ldmatrix":
        shapes = {u.wait[2][:2] for u in wq}
        if len(shapes) != 1:
            raise DivergenceError(
                f"ctaid={_idx_str(launch.ctaid)} warp {first.warp}: lanes execute different "
                f"ldmatrix shapes at line {_line_of(*first.wait[4])}")
        n, trans = shapes.pop()
        rows = np.stack([by_lane[ln].wait[2][2] for ln in range(8 * n)])
        regs = _mma.ldmatrix(rows, trans)
        for ln in by_lane:
            results[ln] = np.uint32(regs[ln, 0]) if n == 1 else tuple(
                np.uint32(x) for x in regs[ln])
    elif op.startswith("shfl"):
        c["shuffles"] += 1
        launch.shuffle_warps.add((launch.blin, first.warp))
        code = SHFL[op + "_sync"]
        for ln, u in by_lane.items():
            src = shfl_source(code, ln, int(u.wait[3]))
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
        while fr is not None and fr.f_code.co_filename.startswith(_OWN_FILES):
            fr = fr.f_back
        where.append(f"tid={_idx_str(t.idx)} line {fr.f_lineno if fr is not None else '?'}")
    more = f" and {len(alive) - 8} more" if len(alive) > 8 else ""
    raise StuckKernelError(
        f"ctaid={_idx_str(launch.ctaid)}: the block cannot make progress: its threads "
        f"{why} ({'; '.join(where)}{more}). A thread spinning on memory another thread "
        "should write never sees the write here unless that thread can run: check for a wait "
        "on a value no thread will store")


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


#: the executor's own source files: frames a stuck thread's line is looked for below
_OWN_FILES = (_a.__file__, _cudamod.__file__, __file__)
