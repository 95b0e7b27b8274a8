"""Mix kernels: the cube core and the two vector cores of one AI core group working on one
block, through GM and cross-core flags (re-exported by :mod:`kernellab.npu.asc`).

On the split A2 architecture an AI core group is 1 AIC + 2 AIV (the card's ``aiv_per_aic``);
a kernel declared ``@asc.kernel(core="mix")`` runs its body on all three cores of a group for
each block, ``block_dim`` groups at most ``n_aic`` at a time (Ascend C guide, kernel types,
atlas_ascendc_10_0014). The body branches on :func:`kernellab.npu.asc.core_type` (``"aic"``
or ``"aiv"``, Ascend C's ``ASCEND_IS_AIC``/``ASCEND_IS_AIV``) and, on a vector core, on
:func:`~kernellab.npu.asc.get_sub_block_idx` (0 or 1). There is no direct path between the
cores: the cube writes L0C to GM (``fixpipe``) and a vector core reads it (``data_copy``), and
back, through a GM workspace the host allocates.

Cross-core flags (Ascend C CrossCoreSetFlag / CrossCoreWaitFlag, atlasascendc_api_07_0273 /
0274): each core has a counter per flag ID (0 to :data:`CROSS_FLAG_IDS` - 1); a wait on a zero
counter blocks, else it takes one. ``mode=2`` (cube <-> vector in the group): a set on the AIC
counts one on each AIV; the AIC's counter counts one when both AIVs have set. ``mode=1``
(between the two AIVs): a core's counter counts one when both AIVs have set. ``mode=0`` (every
core of the chip) is not modelled. At most :data:`MAX_PENDING` sets may wait unconsumed on
one counter.

Phase A runs the three cores as greenlets, switching when one waits on a zero counter, so data
flows between them in the order the flags impose; every core waiting at once is a
:class:`~kernellab.npu.errors.DeadlockError`, and a set no wait has taken by the end of the
block an :class:`~kernellab.npu.errors.UnpairedFlagError`. The cores share one vector-clock
space: a set carries a snapshot of its pipe's clocks and the wait that takes it merges them, and
every GM access of the group is checked against the other cores' (:meth:`MixGroup.gm_access`):
GM bytes one core writes and another reads or writes, with no chain of flags between the two,
raise :class:`~kernellab.npu.errors.DataRaceError` naming both cores, pipes and lines. The
timing replay (:mod:`kernellab.npu.timing`) makes each wait wait for exactly the sets Phase A
matched it with, ``cross_flag_latency`` cycles after they fire, so a missing flag is reported,
never timed faster. Two accesses of one core to the same GM bytes are not checked against each
other (nor ordered by the replay: the simulator does not model ordering between one core's pipes
through GM). A core sets, and waits on, each flag ID from one pipe only (else EventError: the
counter is taken in the order sets arrive, which program order does not fix across pipes).
"""

from __future__ import annotations

import bisect
from collections import deque

from kernellab.npu import errors, runtime
from kernellab.npu.record import (PIPE_BY_NAME, PIPES, SET, WAIT, Record, caller_src,
                                  format_src)
from kernellab.npu.runtime import BlockContext, ctx, short
from kernellab.npu.sync import CORE_PIPES

__all__ = ["CROSS_FLAG_IDS", "MAX_PENDING", "MEMBERS", "MixGroup", "cross_core_set_flag",
           "cross_core_wait_flag", "run_block"]

CROSS_FLAG_IDS = 11
"""Cross-core flag IDs on A2/A3: 0 to 10 (atlasascendc_api_07_0273)."""

MAX_PENDING = 15
"""Sets of one flag ID a counter may hold unconsumed (atlasascendc_api_07_0273: "at most 15
times")."""

MEMBERS = ("aic", "aiv0", "aiv1")
"""A group's cores, by member index: the AIC, then the AIVs by sub-block index."""


class MixGroup:
    """The shared state of one block of a mix kernel in Phase A: its three
    :class:`~kernellab.npu.runtime.BlockContext` (``members``), their flag counters, the GM
    access history and the cross-core set IDs the timing replay matches."""

    size = len(MEMBERS)

    def __init__(self, bufs):
        self.members: list[BlockContext] = []
        #: (member, flag) -> deque of (vector-clock snapshot, set IDs): the counter
        self._counter: dict = {}
        #: (mode, source member, destination member, flag) -> deque of (snapshot, set ID): sets
        #: waiting for their partner (mode 2 towards the AIC, mode 1: both AIVs)
        self._half: dict = {}
        self._uid = 0
        self._bufs = sorted(bufs, key=lambda b: b.base)
        self._bases = [b.base for b in self._bufs]
        #: buffer index -> ([writes], [reads]): (lo, hi, member, pipe, clock, src, what)
        self._hist: dict = {}
        self._sets_src: dict = {}
        self.blocked: dict[int, tuple] = {}
        #: ("set" | "wait", member, flag) -> (pipe, source line) of its first use
        self._pipe_of: dict = {}

    def _one_pipe(self, what: str, c: BlockContext, pipe: int, flag: int, src) -> None:
        """A core sets (waits on) each flag ID from one pipe only: the sets of one ID fire in
        the order their pipes finish, which program order does not give when two pipes set
        it, and a wait's pairing with its set would then differ from the hardware's. Raises
        EventError."""
        first = self._pipe_of.setdefault((what, c.member, flag), (pipe, src))
        if first[0] != pipe:
            verb = "cross_core_set_flag" if what == "set" else "cross_core_wait_flag"
            raise errors.EventError(
                f"{format_src(src)}\n{verb}({flag}, pipe=asc.PIPE_{PIPES[pipe]}) on the "
                f"{MEMBERS[c.member].upper()}, which already used flag {flag} on PIPE_"
                f"{PIPES[first[0]]} at {format_src(first[1])}: give each pipe its own flag ID "
                f"(the counter is taken in the order the sets arrive, which program order does "
                f"not fix across pipes)")

    # ---- flags --------------------------------------------------------------------------
    def set(self, c: BlockContext, mode: int, pipe: int, flag: int, src) -> None:
        self._one_pipe("set", c, pipe, flag, src)
        snap = tuple(c.vc[pipe])
        self._uid += 1
        uid = self._uid
        self._sets_src[uid] = src
        c.records.append(Record(pipe, SET, "cross_core_set_flag", c.calls, None,
                                ("XSET", uid), src=short(src)))
        me = c.member
        if mode == 2 and me == 0:
            for d in (1, 2):
                self._push(d, flag, snap, (uid,), src)
        elif mode == 2:
            self._pair((2, me, 0, flag), (2, 3 - me, 0, flag), 0, flag, snap, uid, src)
        else:  # mode 1, from an AIV: both AIVs count one once both have set
            for d in (1, 2):
                self._pair((1, me, d, flag), (1, 3 - me, d, flag), d, flag, snap, uid, src)

    def _pair(self, mine, other, dest, flag, snap, uid, src):
        q = self._half.get(other)
        if q:
            osnap, ouid = q.popleft()
            merged = tuple(a if a > b else b for a, b in zip(snap, osnap))
            self._push(dest, flag, merged, (ouid, uid), src)
        else:
            self._half.setdefault(mine, deque()).append((snap, uid))

    def _push(self, dest, flag, snap, uids, src):
        q = self._counter.setdefault((dest, flag), deque())
        if len(q) >= MAX_PENDING:
            raise errors.EventError(
                f"{format_src(src)}\ncross_core_set_flag({flag}): the {MEMBERS[dest].upper()}'s "
                f"counter for flag {flag} already holds {MAX_PENDING} sets nobody waited for "
                f"(the hardware counts at most {MAX_PENDING}): wait for them on that core")
        q.append((snap, uids))

    def wait(self, c: BlockContext, pipe: int, flag: int, src) -> None:
        self._one_pipe("wait", c, pipe, flag, src)
        key = (c.member, flag)
        while not self._counter.get(key):
            self.blocked[c.member] = (flag, src)
            self._yield()
        self.blocked.pop(c.member, None)
        snap, uids = self._counter[key].popleft()
        c.merge(pipe, snap)
        c.records.append(Record(pipe, WAIT, "cross_core_wait_flag", c.calls, None,
                                ("XWAIT", uids), src=short(src)))

    def _yield(self):
        self._parent.switch()

    # ---- GM ---------------------------------------------------------------------------------
    def gm_access(self, c: BlockContext, pipe: int, write: bool, segs, src, what) -> None:
        """Check one DMA's GM segments (absolute byte addresses) against the other cores'
        accesses (module docstring). Raises DataRaceError."""
        clk = c.vc[pipe][c.g + pipe]
        vc = c.vc[pipe]
        for addr, nb in segs:
            k = bisect.bisect_right(self._bases, addr) - 1
            if k < 0:
                continue
            writes, reads = self._hist.setdefault(k, ([], []))
            lo, hi = addr, addr + nb
            for lst in ((writes, reads) if write else (writes,)):
                for e in lst:
                    elo, ehi, em, ep, eclk, esrc, ewhat = e
                    if em != c.member and ehi > lo and elo < hi and vc[7 * em + ep] < eclk:
                        self._race(c, pipe, write, src, what, e, lst is writes,
                                   max(lo, elo), min(hi, ehi), self._bufs[k])
            entry = (lo, hi, c.member, pipe, clk, src, what)
            if write:  # what this write covers and is ordered after races with nothing new
                for lst in (writes, reads):
                    lst[:] = [e for e in lst if not (e[0] >= lo and e[1] <= hi and
                                                     vc[7 * e[2] + e[3]] >= e[4])]
                writes.append(entry)
            else:
                reads[:] = [e for e in reads if not (e[2] == c.member and e[3] == pipe
                                                     and e[0] >= lo and e[1] <= hi)]
                reads.append(entry)

    def _race(self, c, pipe, write, src, what, e, ewrite, lo, hi, buf):
        elo, ehi, em, ep, eclk, esrc, ewhat = e
        me, other = MEMBERS[c.member].upper(), MEMBERS[em].upper()
        P, Q = PIPES[ep], PIPES[pipe]
        verb = "writes" if write else "reads"
        if ewrite and write:
            risk = f"the {other}'s write may land after the {me}'s"
        elif ewrite:
            risk = f"the {me} may read them before the {other}'s data is there"
        else:
            risk = f"the {me} may overwrite them before the {other} has read them"
        rel = lo - buf.base
        raise errors.DataRaceError(
            f"{format_src(src)}\n"
            f"cross-core data race on GM {buf.name!r} (bytes {rel}..{rel + hi - lo - 1}) in "
            f"block {c.block_idx}: the {me}'s {Q} {verb} them in {what} here, but the "
            f"{other}'s {P} {'wrote' if ewrite else 'read'} them in {ewhat} at "
            f"{format_src(esrc)}, and no cross-core flag orders that before this: the cube and "
            f"vector cores run in parallel, so {risk}.\n"
            f"Order them: asc.cross_core_set_flag(id, pipe=asc.PIPE_{P}) on the {other} after "
            f"its {ewhat} and asc.cross_core_wait_flag(id, pipe=asc.PIPE_{Q}) on the {me} "
            f"before its {what}.")

    # ---- running the block ----------------------------------------------------------------
    def run(self, fn, args) -> None:
        """Run ``fn(*args)`` on each member, switching at waits; each member's ``finish`` at
        its end. Raises what a member raises, or DeadlockError when all remaining wait."""
        from greenlet import greenlet  # here: a GPU machine runs the course without greenlet

        self._parent = greenlet.getcurrent()
        done = [False] * self.size

        def body(c):
            def go():
                runtime.install(c)
                fn(*args)
                c.finish()
                done[c.member] = True
            return go

        lets = [greenlet(body(c)) for c in self.members]
        try:
            while not all(done):
                progressed = False
                for m, g in enumerate(lets):
                    if done[m]:
                        continue
                    before = self.blocked.get(m)
                    if before is not None and not self._counter.get((m, before[0])):
                        continue
                    runtime.install(self.members[m])
                    g.switch()
                    progressed = True
                if not progressed:
                    lines = "\n".join(
                        f"  {MEMBERS[m].upper()} waits for cross-core flag {f} at "
                        f"{format_src(s)}" for m, (f, s) in sorted(self.blocked.items()))
                    ended = [MEMBERS[m].upper() for m in range(self.size) if done[m]]
                    raise errors.DeadlockError(
                        f"block {self.members[0].block_idx}: every core of the group still "
                        f"running waits on a cross-core flag that nothing will set"
                        + (f" ({', '.join(ended)} already ended)" if ended else "")
                        + f":\n{lines}\n(mode 2: an AIC's set counts on both AIVs, and the "
                        f"AIC's counter counts one only when both AIVs have set; mode 1: an "
                        f"AIV's counter counts one when both AIVs have set)")
        finally:
            runtime.install(None)
            for g in lets:
                if not g.dead:
                    g.throw(greenlet.GreenletExit)
        left = [(dest, flag, uids) for (dest, flag), q in self._counter.items()
                for _, uids in q]
        half = {}  # a mode-1 set waits for its partner once per destination: list it once
        for (_, _, dest, flag), q in self._half.items():
            for _, uid in q:
                half.setdefault(uid, (dest, flag, (uid,)))
        left += list(half.values())
        if left:
            lines = "\n".join(
                f"  flag {flag} for the {MEMBERS[dest].upper()}, set at "
                f"{format_src(self._sets_src[uids[-1]])}" for dest, flag, uids in sorted(left))
            raise errors.UnpairedFlagError(
                f"block {self.members[0].block_idx}: {len(left)} cross-core set(s) never waited "
                f"for by the end of the kernel (a count left on a core's flag desynchronises "
                f"the next kernel there; with mode 2 an AIC's set counts on both AIVs, and the "
                f"AIC's wait takes one set from each AIV):\n{lines}")


def run_block(fn, args, machine, block_idx, block_num, bufs, strict, auto_sync):
    """Phase A of one block of a mix kernel: returns its three contexts (AIC, AIV0, AIV1)."""
    group = MixGroup(bufs)
    for m, kind in enumerate(("aic", "aiv", "aiv")):
        group.members.append(BlockContext(machine, block_idx, block_num, kind, strict=strict,
                                          auto_sync=auto_sync, group=group, member=m))
    group.run(fn, args)
    return group.members


def _check(c, flag_id, pipe, what, src) -> int:
    """The pipe index of ``pipe`` (``asc.PIPE_FIX`` ...). Raises EventError (module
    docstring)."""
    if c.group is None:
        raise errors.EventError(
            f"{format_src(src)}\n{what} synchronises the cores of an AI core group: it needs a "
            f"mix kernel (@asc.kernel(core=\"mix\")); within one core use asc.set_flag / "
            f"asc.wait_flag")
    if isinstance(flag_id, bool) or not isinstance(flag_id, int) or \
            not 0 <= flag_id < CROSS_FLAG_IDS:
        raise errors.EventError(f"{format_src(src)}\n{what}({flag_id!r}): cross-core flag IDs "
                                f"are ints from 0 to {CROSS_FLAG_IDS - 1}")
    have = CORE_PIPES[c.core_type]
    p = PIPE_BY_NAME.get(pipe) if isinstance(pipe, str) else None
    if p not in have:
        raise errors.EventError(
            f"{format_src(src)}\n{what}({flag_id}, pipe={pipe!r}): the pipe must be one of an "
            f"{c.core_type.upper()} core's: {', '.join('asc.PIPE_' + PIPES[q] for q in have)} "
            f"(not PIPE_S or PIPE_ALL)")
    return p


def cross_core_set_flag(flag_id: int, *, pipe: int, mode: int = 2) -> None:
    """Ascend C ``CrossCoreSetFlag<mode, pipe>(flagId)``: count one on the flag's counter of
    the cores ``mode`` names, once everything issued before it on ``pipe`` has completed
    (module docstring). Raises EventError."""
    c = ctx()
    src = caller_src()
    p = _check(c, flag_id, pipe, "cross_core_set_flag", src)
    if mode == 0:
        raise errors.EventError(
            f"{format_src(src)}\ncross_core_set_flag(mode=0) synchronises every core of a kind "
            f"on the chip, which this simulator does not model; mode=2 (cube <-> vector) and "
            f"mode=1 (the two AIVs) work within a group")
    if mode not in (1, 2):
        raise errors.EventError(f"{format_src(src)}\ncross_core_set_flag: mode is 0, 1 or 2, "
                                f"got {mode!r}")
    if mode == 1 and c.member == 0:
        raise errors.EventError(f"{format_src(src)}\ncross_core_set_flag(mode=1) synchronises "
                                f"the two AIVs; the AIC takes no part")
    c.issue()
    c.group.set(c, mode, p, flag_id, src)


def cross_core_wait_flag(flag_id: int, *, pipe: int) -> None:
    """Ascend C ``CrossCoreWaitFlag(flagId)``: ``pipe`` (and the core's later instructions on
    it) waits until this core's counter for the flag is above zero, then takes one (module
    docstring). Raises EventError, or DeadlockError when no core of the group can go on."""
    c = ctx()
    src = caller_src()
    p = _check(c, flag_id, pipe, "cross_core_wait_flag", src)
    c.issue()
    c.group.wait(c, p, flag_id, src)
