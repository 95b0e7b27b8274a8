"""Phase B: deterministic event-driven timing replay of the recorded streams.

The per-pipe replay of a recorded trace follows the structure of Huawei PTO-ISA's perf-sim
design (``include/pto/costmodel/PERF_SIM_DESIGN.md`` in https://gitcode.com/cann/pto-isa); the
constants are the machine card's.

The model
---------
* **Pipes.** Each core has seven in-order pipes (S, MTE2, MTE1, M, V, MTE3, FIX). A pipe runs
  its records one after another; pipes run in parallel and are ordered only by flags. The
  scalar unit issues one API call every ``scalar_issue_cycles``; a record cannot start before
  its issue time.
* **Flags.** A ``set_flag`` fires ``flag_latency`` cycles after everything earlier on its pipe
  has *completed* (for a DMA: its data is visible), and a ``wait_flag`` blocks its pipe until the
  matching set has fired. Flags are counting semaphores: each set is consumed by one wait,
  oldest first. They come from the queue calls and from ``pipe_barrier(PIPE_ALL)`` (a pair
  between every two pipes of the core); Phase A's TBuf ordering check follows the same
  flags, so an access it accepts as ordered is one this replay makes wait.
* **Costs** (integers, cycles; constants from the machine card):

  ============================ ====== =================================================
  record                       pipe   occupancy
  ============================ ====== =================================================
  vector op                    V      vec_fixed + ceil(bytes / repeat_bytes) x cpr(class)
  load_data L1->L0A / L0B      MTE1   mte1_fixed + ceil(bytes / l1_to_l0{a,b}_bpc)
  mmad m, n, k                 M      mmad_fixed + ceil(m/16) ceil(n/16) ceil(k/k0)
  data_copy GM->UB/L1          MTE2   dma_fixed + dma_burst x (bursts-1) + transfer
                                      (bursts: 1, or one per 16-row band of a 2-D copy)
  data_copy UB->GM / fixpipe   MTE3 / dma_fixed + dma_burst x (bursts-1) + transfer
                               FIX
  ============================ ====== =================================================

  A DMA's data is visible ``dma_latency_miss`` cycles after its transfer ends
  (``dma_latency_hit`` for a read served entirely by L2).
* **Transfers and HBM sharing.** A read is served in two phases: its L2-miss bytes (capped at
  ``gm_read_miss_bpc`` per transfer, consuming HBM bandwidth) then its L2-hit bytes (capped at
  ``gm_read_hit_bpc``, no HBM). Writes are write-through to HBM (capped at ``gm_write_bpc``,
  ``fix_write_bpc`` for FIX). Whenever the set of HBM transfers changes, their rates are
  recomputed by water-filling: each gets ``min(cap, level)`` with the level chosen so the rates
  sum to at most the sustained HBM bandwidth (``hbm_gbps x hbm_efficiency_pct``). A
  transfer whose first GM address is not
  ``gm_align_bytes``-aligned moves its bytes at ``gm_misaligned_eff_pct`` % efficiency: the
  best-practice guide's figure for a 32 B-aligned start (its worst case) charged to every
  misaligned start, so the model's penalty is an upper bound, not a measured rate.
* **L2.** LRU over ``l2_line``-byte lines of ``l2_bytes``, looked up when a transfer starts;
  reads allocate on miss, writes allocate their lines (write-through). GM is cold at launch.
* **Blocks.** Block ``i`` runs on physical core ``i mod n`` (n = cores of the kernel's type);
  a core starts its next block when the previous one has finished and its writes are visible.
  A mix kernel's block runs on a group (1 AIC + 2 AIV, ``n_aic`` groups), which starts its
  next block when all three cores have finished; a cross-core wait waits for the sets Phase A
  matched it with (:mod:`kernellab.npu.mix`), ``cross_flag_latency`` cycles after they fire.

Exactness: times are integer cycles; bytes and rates are integers in units of 2^-16 B, rates
are floored and a transfer's end time is rounded up to a whole cycle. There is no floating
point and no randomness, and events are ordered by ``(time, core, pipe, sequence)``, so the same
records on the same card give the same trace on every run and platform.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

from kernellab.npu import errors
from kernellab.npu.record import PIPES, S, SET, WAIT

__all__ = ["replay", "Timing", "SCALE", "BlockStream"]

SCALE = 1 << 16
"""Fixed-point scale of bytes in the transfer model (rates floor to 2^-16 B/cycle)."""

_INF = float("inf")


class BlockStream:
    """One core's recorded records of one block, its scalar-call count and, in a mix kernel,
    its member of the group (0 the AIC, 1 and 2 the AIVs)."""

    __slots__ = ("block", "records", "calls", "member")

    def __init__(self, block, records, calls, member=0):
        self.block = block
        self.records = records
        self.calls = calls
        self.member = member


class Timing:
    """What the replay measured.

    Attributes:
        cycles: makespan: the last core's last block end (data visible), cycles.
        events: trace tuples ``(core, block, pipe, op, start, end, visible, bytes, hit_bytes,
            flops, src)``; ``op == "wait_flag"`` rows are waits (not busy time).
        busy: ``busy[core][pipe]`` cycles.
        core_end: ``core_end[core]`` cycles.
        hbm_read, hbm_write, l2_hit: bytes.
        hbm_saturated: cycles during which the HBM transfers in flight asked for more than
            the sustained bandwidth (the water-filling level was binding), so HBM, not a
            core's own DMA rate cap, set their pace.
    """

    def __init__(self, n_cores):
        self.cycles = 0
        self.events = []
        self.busy = [[0] * 7 for _ in range(n_cores)]
        self.core_end = [0] * n_cores
        self.hbm_read = 0
        self.hbm_write = 0
        self.l2_hit = 0
        self.hbm_saturated = 0


class _L2:
    __slots__ = ("lines", "cap", "line")

    def __init__(self, nbytes, line):
        self.lines = OrderedDict()
        self.cap = max(1, nbytes // line)
        self.line = line

    def touch(self, segments, is_write):
        """Look up (and allocate) the lines of ``segments``; return the bytes that hit."""
        L = self.line
        od = self.lines
        hit = 0
        for addr, n in segments:
            end = addr + n
            first, last = addr // L, (end - 1) // L
            for ln in range(first, last + 1):
                if ln in od:
                    od.move_to_end(ln)
                    if not is_write:
                        hit += min(end, (ln + 1) * L) - builtins_max(addr, ln * L)
                else:
                    od[ln] = None
        while len(od) > self.cap:
            od.popitem(last=False)
        return hit


def builtins_max(a, b):
    return a if a > b else b


class _Transfer:
    __slots__ = ("core", "pipe", "rec", "start", "phases", "left", "cap", "hbm", "rate", "t_set",
                 "finish", "order", "hit", "miss", "is_write")


class _Core:
    __slots__ = ("idx", "group", "block", "t0", "streams", "pos", "free", "vis", "wait_since",
                 "flags", "waiters", "inflight", "calls", "done", "finished")

    def __init__(self, idx, group):
        self.idx = idx
        self.group = group
        self.block = None
        self.done = False
        self.finished = True


class _Group:
    """The cores that run one block together (one core, or a mix kernel's AIC and AIVs), the
    blocks left for them, and the cross-core flags of the block they run."""

    __slots__ = ("cores", "blocks", "left", "xfired", "xwaiters")

    def __init__(self, blocks):
        self.cores = []
        self.blocks = deque(blocks)
        self.left = 0
        self.xfired = {}
        self.xwaiters = {}


def replay(blocks, machine, n_cores, group_size=1) -> Timing:
    """Time the recorded blocks on ``machine`` with ``n_cores`` physical cores (groups of
    ``group_size`` cores for a mix kernel).

    ``blocks`` is a list of :class:`BlockStream` in block order (for a mix kernel,
    ``group_size`` streams per block, by member); block ``i`` runs on core (group)
    ``i % n_cores``, and a group starts its next block when all its cores have finished the
    last. A cross-core wait (key ``("XWAIT", set IDs)``) waits for the sets Phase A matched it
    with (key ``("XSET", ID)``), ``cross_flag_latency`` cycles after each fired. Returns
    :class:`Timing` (core ``k * group_size + m`` is member m of group k). Raises
    :class:`~kernellab.npu.errors.DeadlockError` if some pipe waits forever.
    """
    mc = machine
    n_blocks = len(blocks) // group_size
    n_groups = min(n_cores, n_blocks)
    n_used = n_groups * group_size
    tm = Timing(n_used)
    xlat = mc.cross_flag_latency
    sic = mc.scalar_issue_cycles
    flag_lat = mc.flag_latency
    cpr = {"unary": mc.vec_cpr_unary, "binary": mc.vec_cpr_binary,
           "transcendental": mc.vec_cpr_transcendental, "div": mc.vec_cpr_div,
           "reduce": mc.vec_cpr_reduce}
    rep = mc.vec_repeat_bytes
    hbm_bw = mc.hbm_gbps * 1000 * SCALE * mc.hbm_efficiency_pct // (100 * mc.freq_mhz)
    cap_miss = mc.gm_read_miss_bpc * SCALE
    cap_hit = mc.gm_read_hit_bpc * SCALE
    cap_w = mc.gm_write_bpc * SCALE
    cap_fix = mc.fix_write_bpc * SCALE
    eff = mc.gm_misaligned_eff_pct
    galign = mc.gm_align_bytes
    l2 = _L2(mc.l2_bytes, mc.l2_line)
    events = tm.events

    per_block = [blocks[i * group_size:(i + 1) * group_size] for i in range(n_blocks)]
    groups = [_Group([bs for j, bs in enumerate(per_block) if j % n_cores == k])
              for k in range(n_groups)]
    cores = []
    for grp in groups:
        for _ in range(group_size):
            core = _Core(len(cores), grp)
            grp.cores.append(core)
            cores.append(core)
    heap = []
    counter = [0]
    active: list[_Transfer] = []
    sat = [False, 0]                     # HBM saturated now?, since when

    def push(t, core, pipe, kind=0, payload=None):
        counter[0] += 1
        heapq.heappush(heap, (t, core.idx, pipe, counter[0], kind, payload))

    def start_group(grp, t0):
        bs = grp.blocks.popleft()
        grp.left = len(grp.cores)
        grp.xfired = {}
        grp.xwaiters = {}
        for core, b in zip(grp.cores, bs):
            start_block(core, b, t0)
        for core in grp.cores:
            check_done(core, t0)

    def start_block(core, b, t0):
        core.finished = False
        core.block = b
        core.t0 = t0
        core.streams = [[] for _ in range(7)]
        for r in b.records:
            core.streams[r.pipe].append(r)
        core.pos = [0] * 7
        core.free = [t0] * 7
        core.vis = [t0] * 7
        core.wait_since = [None] * 7
        core.flags = {}
        core.waiters = {}
        core.inflight = 0
        core.calls = b.calls
        if b.calls:
            s_end = t0 + b.calls * sic
            core.free[S] = s_end
            core.vis[S] = s_end
            tm.busy[core.idx][S] += b.calls * sic
            events.append((core.idx, b.block, S, "issue", t0, s_end, s_end, 0, 0, 0, ""))
        for p in range(1, 7):
            if core.streams[p]:
                push(t0, core, p)

    def check_done(core, t):
        if core.finished or core.inflight:
            return
        for p in range(1, 7):
            if core.pos[p] < len(core.streams[p]):
                return
        end = builtins_max(max(core.free), max(core.vis))
        tm.core_end[core.idx] = end
        core.finished = True
        grp = core.group
        grp.left -= 1
        if grp.left:
            return
        end = max(tm.core_end[c.idx] for c in grp.cores)
        if grp.blocks:
            start_group(grp, end)
        else:
            for c in grp.cores:
                c.done = True

    def cost(r):
        c = r.cost
        fam = c[0]
        if fam == "vec":
            return mc.vec_fixed_cycles + -(-c[2] // rep) * cpr[c[1]]
        if fam == "load":
            rate = mc.l1_to_l0a_bpc if c[1] == "L0A" else mc.l1_to_l0b_bpc
            return mc.mte1_fixed_cycles + -(-c[2] // rate)
        if fam == "mmad":
            k0 = mc.cube_k_int8 if c[4] == "i8" else mc.cube_k
            return mc.mmad_fixed_cycles + (-(-c[1] // mc.cube_m)) * (-(-c[2] // mc.cube_n)) * \
                (-(-c[3] // k0))
        raise AssertionError(fam)

    def end_wait(core, p, t, r):
        """A wait of pipe ``p`` satisfied at ``t``: its blocked span (if any) into the trace."""
        ws = core.wait_since[p]
        if ws is not None and t > ws:
            events.append((core.idx, core.block.block, p, "wait_flag", ws, t, t, 0, 0, 0, r.src))
        core.wait_since[p] = None

    def advance(core, p, t):
        if core.done or core.block is None:
            return
        st = core.streams[p]
        i = core.pos[p]
        if core.free[p] > t:
            return
        t0 = core.t0
        while i < len(st):
            r = st[i]
            ready = t0 + r.issue * sic
            if ready > t:
                push(ready, core, p)
                break
            kind = r.kind
            if kind == WAIT and r.key[0] == "XWAIT":
                fired = core.group.xfired
                pending = [u for u in r.key[1] if u not in fired]
                when = max((fired[u] for u in r.key[1] if u in fired), default=t)
                if not pending and when <= t:
                    end_wait(core, p, t, r)
                    i += 1
                    continue
                if core.wait_since[p] is None:
                    core.wait_since[p] = t
                if pending:
                    core.group.xwaiters.setdefault(pending[0], []).append((core, p))
                else:
                    push(when, core, p)
                break
            if kind == SET and r.key[0] == "XSET":
                fire = builtins_max(t, core.vis[p]) + xlat
                core.group.xfired[r.key[1]] = fire
                for wc, wp in core.group.xwaiters.pop(r.key[1], ()):
                    push(fire, wc, wp)
                i += 1
                continue
            if kind == WAIT:
                q = core.flags.get(r.key)
                if q and q[0] <= t:
                    q.popleft()
                    end_wait(core, p, t, r)
                    i += 1
                    continue
                if core.wait_since[p] is None:
                    core.wait_since[p] = t
                if q:
                    push(q[0], core, p)
                else:
                    core.waiters[r.key] = p
                break
            if kind == SET:
                fire = builtins_max(t, core.vis[p]) + flag_lat
                core.flags.setdefault(r.key, deque()).append(fire)
                w = core.waiters.pop(r.key, None)
                if w is not None:
                    push(fire, core, w)
                i += 1
                continue
            if r.cost[0] == "dma":
                ov = mc.dma_fixed_cycles + mc.dma_burst_cycles * (r.cost[4] - 1)
                core.free[p] = _INF
                core.inflight += 1
                push(t + ov, core, p, 1, (r, t))
                i += 1
                break
            c = cost(r)
            end = t + c
            core.free[p] = end
            if end > core.vis[p]:
                core.vis[p] = end
            tm.busy[core.idx][p] += c
            events.append((core.idx, core.block.block, p, r.op, t, end, end, r.nbytes, 0,
                           r.flops, r.src))
            i += 1
            push(end, core, p)
            break
        core.pos[p] = i
        check_done(core, t)

    def join(core, p, t, payload):
        r, t_start = payload
        _, is_write, segs, is_fix, _bursts = r.cost
        nbytes = r.nbytes
        hit = l2.touch(segs, is_write)
        miss = nbytes - hit
        mis = segs[0][0] % galign != 0
        phases = []
        if is_write:
            phases.append((nbytes, cap_fix if is_fix else cap_w, True))
            tm.hbm_write += nbytes
        else:
            if miss:
                phases.append((miss, cap_miss, True))
            if hit:
                phases.append((hit, cap_hit, False))
            tm.hbm_read += miss
            tm.l2_hit += hit
        tr = _Transfer()
        tr.core, tr.pipe, tr.rec, tr.start = core, p, r, t_start
        tr.hit, tr.miss, tr.is_write = hit, miss, is_write
        tr.phases = deque()
        for nb, cap, hbm in phases:
            sb = nb * SCALE
            if mis:
                sb = -(-sb * 100 // eff)
            tr.phases.append((sb, cap, hbm))
        counter[0] += 1
        tr.order = (core.idx, p, counter[0])
        if not tr.phases:
            tr.phases.append((0, cap_hit, False))
        _next_phase(tr, t)
        active.append(tr)

    def _next_phase(tr, t):
        sb, cap, hbm = tr.phases.popleft()
        tr.left, tr.cap, tr.hbm = sb, cap, hbm
        tr.rate = 0
        tr.t_set = t
        tr.finish = _INF if sb > 0 else t

    def set_rates(t):
        users = [tr.cap for tr in active if tr.hbm]
        level = None
        now = sum(users) > hbm_bw
        if now != sat[0]:
            if sat[0]:
                tm.hbm_saturated += t - sat[1]
            sat[0], sat[1] = now, t
        if now:
            users.sort()
            rem, n = hbm_bw, len(users)
            for cp in users:
                if cp * n <= rem:
                    rem -= cp
                    n -= 1
                else:
                    level = rem // n
                    break
        for tr in active:
            new = tr.cap if (not tr.hbm or level is None or tr.cap <= level) else level
            if new != tr.rate:
                if tr.rate:
                    tr.left -= tr.rate * (t - tr.t_set)
                tr.t_set = t
                tr.rate = new
                tr.finish = t + (-(-tr.left // new) if tr.left > 0 else 0)

    def complete(tr, t):
        core, p, r = tr.core, tr.pipe, tr.rec
        lat = mc.dma_latency_hit if (not tr.is_write and tr.miss == 0) else mc.dma_latency_miss
        vis = t + lat
        core.free[p] = t
        if vis > core.vis[p]:
            core.vis[p] = vis
        core.inflight -= 1
        tm.busy[core.idx][p] += t - tr.start
        events.append((core.idx, core.block.block, p, r.op, tr.start, t, vis, r.nbytes, tr.hit,
                       r.flops, r.src))
        push(t, core, p)

    for grp in groups:
        start_group(grp, 0)

    while True:
        t_heap = heap[0][0] if heap else _INF
        t_dma = min((tr.finish for tr in active), default=_INF)
        t = t_heap if t_heap < t_dma else t_dma
        if t == _INF:
            break
        changed = False
        if t_dma <= t:
            still = []
            for tr in active:
                if tr.finish <= t:
                    changed = True
                    if tr.phases:
                        _next_phase(tr, t)
                        still.append(tr)
                    else:
                        complete(tr, t)
                else:
                    still.append(tr)
            active[:] = still
        while heap and heap[0][0] <= t:
            _, ci, p, _, kind, payload = heapq.heappop(heap)
            core = cores[ci]
            if kind == 1:
                join(core, p, t, payload)
                changed = True
            else:
                advance(core, p, t)
        if changed:
            set_rates(t)

    stuck = [c for c in cores if not c.done]
    if stuck:
        lines = []
        for c in stuck:
            for p in range(1, 7):
                st = c.streams[p]
                if c.pos[p] < len(st):
                    r = st[c.pos[p]]
                    lines.append(f"  core {c.idx} block {c.block.block} pipe {PIPES[p]}: "
                                 f"{r.op} {r.key or ''} at {r.src}")
        raise errors.DeadlockError("timing replay deadlocked; pipe heads:\n" + "\n".join(lines))
    tm.cycles = max(tm.core_end) if tm.core_end else 0
    return tm

