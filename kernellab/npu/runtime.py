"""Per-block runtime context of Phase A: memories, the record stream and the access rules.

``launch`` runs a kernel once per block, one block at a time, with a :class:`BlockContext`
installed as the current context; every ``asc`` call finds it with :func:`ctx`. The context
owns the block's on-chip memories (created lazily), its instruction records, the scalar-issue
counter, the queues and the warnings.

:meth:`BlockContext.access` is the tensor state machine FREE -> ALLOCATED -> ENQUEUED -> DEQUEUED
-> FREE that Ascend C's AllocTensor / EnQue / DeQue / FreeTensor move a queue buffer through
(hiascend atlas_ascendc_10_0027; the events they stand for: atlas_ascendc_10_00019). Each queue
position has a fixed producer and consumer pipe (the pipes the Ascend C queue events connect):

========== ========= ========= ==============
position   producer  consumer  events
========== ========= ========= ==============
VECIN      MTE2      V         MTE2_V / V_MTE2
VECOUT     V         MTE3      V_MTE3 / MTE3_V
VECCALC    V         V         (none: one pipe)
A1, B1     MTE2      MTE1      MTE2_MTE1 / MTE1_MTE2
A2, B2     MTE1      M         MTE1_M / M_MTE1
CO1        M         FIX       M_FIX / FIX_M
========== ========= ========= ==============

The producer may read and write a tensor while it is ALLOCATED; the consumer may read and write
it while it is DEQUEUED; any other access raises (use before deque, write after enque, use after
free, or an illegal position for a pipe that is neither).

A ``TBuf`` has no queue, so nothing above orders its pipes: :meth:`BlockContext.access` checks
every TBuf access against the buffer's earlier ones with vector clocks (happens-before, as
msSanitizer's synccheck and ThreadSanitizer do; Flanagan & Freund, "FastTrack", PLDI 2009, §2).
Each pipe keeps a clock per pipe; every instruction ticks its own pipe's entry; a ``set_flag``
takes a snapshot of the setter's clocks and the ``wait_flag`` that consumes it (oldest first,
as the timing replay matches them) merges it into the waiter's. Pipe P's access is ordered
before pipe Q's later one iff Q's clock for P has reached it, which is exactly when the replay
makes Q wait for P (a set fires after everything earlier on its pipe has completed and is
visible). Accesses by one pipe are ordered by program order (a pipe runs in order). A write by
P then a read or write by Q != P, or a read by P then a write by Q, with no ordering between
them raises :class:`~kernellab.npu.errors.DataRaceError`. The orderings a kernel has: the queue
events (enque/deque, free_tensor/alloc_tensor, on every pipe pair a queue connects: the flags
order everything earlier on the setting pipe, TBuf accesses included), its own
``asc.set_flag``/``asc.wait_flag`` (:mod:`kernellab.npu.sync`; :meth:`BlockContext.user_set`)
and ``asc.pipe_barrier(asc.PIPE_ALL)``.

One pipe's accesses are ordered by program order, unless the kernel was declared
``auto_sync=False``: then two instructions of one pipe touching the same bytes, one writing,
are ordered only by a one-pipe barrier between them, or by an event set after the first and
waited for before the second (``V_V``, or a chain through another pipe) (``fence``), and
every queue tensor keeps a history too, so the check covers it.
"""

from __future__ import annotations

import warnings
from collections import deque

import numpy as np

from kernellab.npu import errors
from kernellab.npu.memory import Memory
from kernellab.npu.record import (FIX, M, MTE1, MTE2, MTE3, OP, PIPES, SET, V, WAIT, Record,
                                  format_src)
from kernellab.npu.tensors import ALLOCATED, DEQUEUED, FREE, TPosition

__all__ = ["BlockContext", "ctx", "current", "QUEUE_PIPES"]

QUEUE_PIPES = {
    TPosition.VECIN: (MTE2, V),
    TPosition.VECOUT: (V, MTE3),
    TPosition.VECCALC: (V, V),
    TPosition.A1: (MTE2, MTE1),
    TPosition.B1: (MTE2, MTE1),
    TPosition.A2: (MTE1, M),
    TPosition.B2: (MTE1, M),
    TPosition.CO1: (M, FIX),
}
"""Position -> (producer pipe, consumer pipe) of a queue at that position."""

_current: BlockContext | None = None


def current() -> BlockContext | None:
    """The installed context, or ``None`` outside a kernel."""
    return _current


def ctx() -> BlockContext:
    """The installed context. Raises LaunchError outside a kernel launched with ``launch``."""
    if _current is None:
        raise errors.LaunchError(
            "this asc call only works inside a kernel run by kernellab.npu.launch(kernel, "
            "block_dim, args)")
    return _current


def install(c: BlockContext | None) -> None:
    global _current
    _current = c


def short(src) -> str:
    return format_src(src, code=False)


class BlockContext:
    """State of one block while Phase A runs it.

    Attributes:
        machine: the :class:`~kernellab.npu.machine.MachineConfig`.
        block_idx, block_num: this block and the launch's block_dim.
        core_type: ``"aiv"`` or ``"aic"``.
        records: the block's instruction records, in program order.
        calls: scalar-issue counter (one per API call).
        strict: uninitialised reads raise instead of warning.
        warnings: messages of uninitialised reads (deduplicated by line).
    """

    def __init__(self, machine, block_idx, block_num, core_type, strict=False, auto_sync=True,
                 group=None, member=0):
        self.machine = machine
        self.block_idx = block_idx
        self.block_num = block_num
        self.core_type = core_type
        #: the mix group this core belongs to (:class:`kernellab.npu.mix.MixGroup`), or None;
        #: ``member``: its place in the group (0 the AIC, 1 and 2 the AIVs)
        self.group = group
        self.member = member
        #: this core's first column in the vector clocks (a group's cores share one clock
        #: space, seven columns a core)
        self.g = 7 * member
        self.strict = strict
        #: False: no barrier is inserted between dependent instructions of one pipe (the
        #: kernel's ``auto_sync``; :mod:`kernellab.npu.sync`)
        self.auto_sync = auto_sync
        self.records: list[Record] = []
        self.calls = 0
        self.memories: dict[str, Memory] = {}
        self.pipe = None
        self.queues = []
        self.tbufs = []
        self.outstanding: dict[TPosition, int] = {}
        self.warnings: list[str] = []
        self._warned: set = set()
        self._tid = 0
        # vc[p][g + q]: how many of pipe q's instructions pipe p is ordered after (vc[p][g + p]:
        # p's own); in a mix group, columns 7m..7m+6 are member m's pipes
        width = len(PIPES) * (group.size if group is not None else 1)
        self.vc = [[0] * width for _ in PIPES]
        self._flag_vc: dict = {}
        #: fence[p]: how many of pipe p's instructions a later one of p is ordered after (a
        #: one-pipe barrier, PIPE_ALL, or an event whose setter was ordered after them)
        self.fence = [0] * len(PIPES)
        #: a kernel's own set_flag calls not yet waited for: key -> the sets' source lines
        self._user_sets: dict = {}
        self.barriers = 0
        #: (source line, write, TBuf) -> how many times that line has accessed that TBuf in this
        #: block: a loop's pass, which a race message names
        self._passes: dict = {}

    # ---- memories -------------------------------------------------------------------------
    def memory(self, name: str) -> Memory:
        m = self.memories.get(name)
        if m is None:
            mc = self.machine
            cap, align = {
                "UB": (mc.ub_usable, mc.align_ub),
                "L1": (mc.l1_usable, mc.align_l1),
                "L0A": (mc.l0a_bytes, mc.align_l0ab),
                "L0B": (mc.l0b_bytes, mc.align_l0ab),
                "L0C": (mc.l0c_bytes, mc.align_l0c),
            }[name]
            m = self.memories[name] = Memory(name, cap, align)
        return m

    def next_tid(self) -> int:
        self._tid += 1
        return self._tid

    # ---- records --------------------------------------------------------------------------
    def issue(self) -> int:
        """Count one scalar-issued API call; return its issue index."""
        self.calls += 1
        return self.calls

    def op(self, pipe, op, cost, src, nbytes=0, flops=0, path=None) -> None:
        self.vc[pipe][self.g + pipe] += 1
        if self.group is not None and cost is not None and cost[0] == "dma":
            self.group.gm_access(self, pipe, cost[1], cost[2], src, op)
        self.records.append(Record(pipe, OP, op, self.issue(), cost, None, nbytes, flops, path,
                                   short(src)))

    def set_flag(self, pipe, key, src) -> None:
        self._flag_vc.setdefault(key, deque()).append(tuple(self.vc[pipe]))
        self.records.append(Record(pipe, SET, "set_flag", self.calls, None, key, src=short(src)))

    def wait_flag(self, pipe, key, src) -> None:
        snaps = self._flag_vc.get(key)
        if snaps:
            self.merge(pipe, snaps.popleft())
        self.records.append(Record(pipe, WAIT, "wait_flag", self.calls, None, key,
                                   src=short(src)))

    def merge(self, pipe, snap) -> None:
        """``pipe`` waited for a set whose setter's clocks were ``snap`` (this core's or, in a
        mix group, another core's): it is ordered after everything they count."""
        v = self.vc[pipe]
        for q, clk in enumerate(snap):
            if clk > v[q]:
                v[q] = clk
        # what the setter was ordered after of this pipe's own instructions (V_V, or a chain
        # V -> MTE3 -> V, or through another core) is ordered before this pipe's later ones
        if snap[self.g + pipe] > self.fence[pipe]:
            self.fence[pipe] = snap[self.g + pipe]

    def user_set(self, pipe, key, src) -> None:
        """A kernel's own ``set_flag`` (:mod:`kernellab.npu.sync`)."""
        self._user_sets.setdefault(key, deque()).append(src)
        self.set_flag(pipe, key, src)

    def user_wait(self, pipe, key, src) -> None:
        """A kernel's own ``wait_flag``. Raises UnpairedFlagError with no set before it."""
        sets = self._user_sets.get(key)
        if not sets:
            raise errors.UnpairedFlagError(
                f"{format_src(src)}\nwait_flag({key[1]}, {key[2]}) with no set_flag({key[1]}, "
                f"{key[2]}) before it in program order: {PIPES[pipe]} would wait for "
                f"an event nothing has set (set it first; each set is consumed by one wait)")
        sets.popleft()
        self.wait_flag(pipe, key, src)

    def fence_pipe(self, pipe) -> None:
        """Order ``pipe``'s later instructions after every earlier one of it (a one-pipe
        ``pipe_barrier``)."""
        self.fence[pipe] = self.vc[pipe][self.g + pipe]

    def barrier(self, pipes, src) -> None:
        """Order every pipe of ``pipes`` after everything issued so far on all of them (Ascend C
        ``PipeBarrier<PIPE_ALL>``), lowered to one set_flag/wait_flag pair per ordered pair of
        pipes, so the timing replay waits as the ordering check assumes."""
        self.barriers += 1
        n = self.barriers
        for p in pipes:
            for q in pipes:
                if q != p:
                    self.set_flag(p, ("BARRIER", n, PIPES[p], PIPES[q]), src)
        for q in pipes:
            for p in pipes:
                if p != q:
                    self.wait_flag(q, ("BARRIER", n, PIPES[p], PIPES[q]), src)
        for p in pipes:
            self.fence_pipe(p)

    # ---- the state machine ----------------------------------------------------------------
    def check_core(self, position: TPosition, what: str, src) -> None:
        need = position.core
        if need is not None and need != self.core_type:
            raise errors.PositionError(
                f"{format_src(src)}\n{what}: position {position.name} lives in "
                f"{position.memory}, which an {self.core_type.upper()} core does not have "
                f"(split architecture: UB is on AIV cores, L1/L0A/L0B/L0C on AIC cores). "
                f"Declare the kernel with @asc.kernel(core=\"{need}\").")

    def access(self, t, pipe: int, write: bool, src, n: int | None = None,
               what: str = "", elems=None) -> None:
        """Check that ``pipe`` may read (``write=False``) or write ``t`` now, in the API call
        ``what``; track bytes. ``n`` elements from the view's start (default: all), or
        ``elems``, the element offsets a strided instruction touches (the repeat form): the
        written and uninitialised checks take exactly those, the ordering check their span.
        Raises the queue state errors, or DataRaceError for an unordered access."""
        a = t._alloc
        st = a.state
        if a.queue is not None:
            if st is FREE:
                raise errors.UseAfterFreeError(
                    f"{format_src(src)}\n{PIPES[pipe]} {'writes' if write else 'reads'} tensor "
                    f"{a.label}, which was freed at {short(a.srcs.get('free'))} "
                    f"(allocated at {short(a.srcs['alloc'])}).")
            prod, cons = a.queue.pipes
            if st is ALLOCATED:
                if pipe != prod:
                    self._role_error(t, pipe, write, src, "ALLOCATED", prod, cons)
            elif st is DEQUEUED:
                if pipe != cons:
                    self._role_error(t, pipe, write, src, "DEQUEUED", prod, cons)
            else:  # ENQUEUED
                if write and pipe == prod:
                    raise errors.WriteAfterEnqueError(
                        f"{format_src(src)}\n{PIPES[pipe]} writes tensor {a.label} after it was "
                        f"enque'd at {short(a.srcs.get('enque'))}: the consumer "
                        f"({PIPES[cons]}) may already be reading it. Write first, then enque.")
                raise errors.UseBeforeDequeError(
                    f"{format_src(src)}\n{PIPES[pipe]} {'writes' if write else 'reads'} tensor "
                    f"{a.label} while it is ENQUEUED (enque at {short(a.srcs.get('enque'))}); "
                    f"deque it first: t = queue.deque(dtype).")
        mem = t._mem
        isz = t.dtype.itemsize
        lo = t._boff
        if elems is not None:
            if not len(elems):
                return
            first, nb = int(elems.min()) * isz, (int(elems.max()) + 1) * isz
            lo += first
            nb -= first
        else:
            nb = (t._n if n is None else n) * isz
        if a.hist is not None:
            key = (src, write, a.label)
            self._passes[key] = self._passes.get(key, 0) + 1
            self._order(t, pipe, write, src, what, lo, lo + nb, self._passes[key])
        if elems is not None:
            byte = (t._boff + np.asarray(elems, np.int64)[:, None] * isz
                    + np.arange(isz)[None, :]).ravel()
            if write:
                mem.written[byte] = True
            elif not mem.written[byte].all():
                self._uninit(t, lo, nb, src, first=int(byte[~mem.written[byte]][0]) - lo)
        elif write:
            mem.written[lo:lo + nb] = True
        elif not mem.written[lo:lo + nb].all():
            self._uninit(t, lo, nb, src)

    def _order(self, t, pipe, write, src, what, lo, hi, npass: int = 1) -> None:
        """The vector-clock check of a TBuf access of bytes ``[lo, hi)`` (module docstring).
        The history keeps, per byte range, the accesses a later one could race with: an access
        ordered before a write that covers it is dropped (a later access unordered with it is
        unordered with that write too), and so is a read by the same pipe covered by a newer
        read."""
        a = t._alloc
        if hi <= lo:
            return
        vc = self.vc[pipe]
        g = self.g
        keep = []
        for e in a.hist:
            elo, ehi, epipe, eclk, ewrite, esrc, ewhat, _ = e
            if ehi <= lo or elo >= hi:
                keep.append(e)
                continue
            if epipe != pipe:
                ordered = vc[g + epipe] >= eclk
            else:  # one pipe: the same instruction, the compiler's barriers, or the kernel's
                ordered = (eclk == vc[g + pipe] + 1 or self.auto_sync
                           or self.fence[pipe] >= eclk)
            if not ordered and (write or ewrite):
                self._race(t, (pipe, write, src, what, npass), e, max(lo, elo), min(hi, ehi))
            if elo >= lo and ehi <= hi and (write or (epipe == pipe and not ewrite)):
                continue
            keep.append(e)
        keep.append((lo, hi, pipe, vc[g + pipe] + 1, write, src, what, npass))
        a.hist = keep

    def _race(self, t, now, before, lo, hi):
        pipe, write, src, what, npass = now
        _, _, epipe, _, ewrite, esrc, ewhat, epass = before
        P, Q = PIPES[epipe], PIPES[pipe]
        verb = "writes" if write else "reads"
        if epipe == pipe:
            raise errors.DataRaceError(
                f"{format_src(src)}\n"
                f"intra-pipeline race on {t._alloc.label} ({t._mem.name} bytes {lo}..{hi - 1}): "
                f"{Q} {verb} them in {what or 'this call'} here (pass {npass} of this line in "
                f"block {self.block_idx}), but {P} {'wrote' if ewrite else 'read'} them in "
                f"{ewhat or 'a call'} at {format_src(esrc)} (pass {epass}), and the kernel has "
                f"auto_sync=False: nothing orders two instructions of one pipe, which may "
                f"overlap on hardware. Put asc.pipe_barrier(asc.PIPE_{P}) between the two "
                f"calls (Ascend C PipeBarrier<PIPE_{P}>).")
        if ewrite and write:
            risk = f"{P}'s write may land after {Q}'s"
        elif ewrite:
            risk = f"{Q} may read them before {P} has written them"
        else:
            risk = f"{Q} may overwrite them before {P} has read them"
        # a later run of a line above the earlier access (a loop's next pass, or a helper
        # called again): the race is between two runs (this tile's access against the last)
        later = (npass > epass and src and esrc and src[0] == esrc[0] and src[1] < esrc[1])
        passes = (f" The {what or 'call'} here is a later run of its line than the "
                  f"{ewhat or 'call'} (a loop's next pass, or another call): it is not ordered "
                  f"after the earlier run's {ewhat or 'call'}."
                  if later else "")
        raise errors.DataRaceError(
            f"{format_src(src)}\n"
            f"data race on {t._alloc.label} ({t._mem.name} bytes {lo}..{hi - 1}): {Q} {verb} "
            f"them in {what or 'this call'} here (pass {npass} of this line in block "
            f"{self.block_idx}), but {P} {'wrote' if ewrite else 'read'} them in "
            f"{ewhat or 'a call'} at {format_src(esrc)} (pass {epass}), and nothing orders {P} "
            f"before {Q} (a TBuf has no queue): on hardware the two pipes run in parallel and "
            f"{risk}.{passes}\n"
            f"Order them: asc.set_flag(asc.HardEvent.{P}_{Q}, id) after the first call and "
            f"asc.wait_flag(asc.HardEvent.{P}_{Q}, id) before the second, "
            f"asc.pipe_barrier(asc.PIPE_ALL) between them, or " + (
                f"move the data through a TQue (enque on {P}, deque on {Q})." if ewrite else
                f"use a TQue, whose free_tensor (on {P}) and alloc_tensor (on {Q}) hand the "
                f"buffer back."))

    def _role_error(self, t, pipe, write, src, state, prod, cons):
        a = t._alloc
        verb = "writes" if write else "reads"
        pos = t.position.name
        if state == "ALLOCATED" and pipe == cons:
            raise errors.UseBeforeDequeError(
                f"{format_src(src)}\n{PIPES[pipe]} {verb} {pos} tensor {a.label} that is still "
                f"ALLOCATED (alloc at {short(a.srcs['alloc'])}): the producer must enque it "
                f"and the consumer deque it before {PIPES[cons]} may use it "
                f"(missing enque/deque).")
        if state == "DEQUEUED" and pipe == prod:
            if write:
                raise errors.WriteAfterEnqueError(
                    f"{format_src(src)}\n{PIPES[pipe]} writes {pos} tensor {a.label} after it was "
                    f"handed to {PIPES[cons]} (enque at {short(a.srcs.get('enque'))}, deque at "
                    f"{short(a.srcs.get('deque'))}).")
            raise errors.QueueStateError(
                f"{format_src(src)}\n{PIPES[pipe]} reads {pos} tensor {a.label} after it was "
                f"handed to {PIPES[cons]} (deque at {short(a.srcs.get('deque'))}).")
        raise errors.QueueRoleError(
            f"{format_src(src)}\n{PIPES[pipe]} {verb} a {pos} tensor ({a.label}, {state}), "
            f"but a {pos} queue orders {PIPES[prod]} (producer) before {PIPES[cons]} "
            f"(consumer) only: nothing orders this {PIPES[pipe]} access against them. The "
            f"data path is not the problem (a DMA may move GM<->UB at any UB position); the "
            f"queue protocol is: take the tensor from a queue whose producer is "
            f"{PIPES[pipe]} (data_copy GM->UB fills a VECIN queue's tensor, vector ops write "
            f"VECOUT's, MTE3 drains VECOUT's).")

    def _uninit(self, t, lo, nb, src, first=None):
        if first is None:
            first = int((~t._mem.written[lo:lo + nb]).argmax())
        msg = (f"{format_src(src)}\nread of uninitialised {t._mem.name} bytes: tensor "
               f"{t._alloc.label}, byte {first} of the {nb} read was never written (fresh "
               f"memory holds the sentinel 0xFF: NaN for floats)")
        if self.strict:
            raise errors.UninitializedReadError(msg)
        key = short(src)
        if key not in self._warned:
            self._warned.add(key)
            self.warnings.append(msg)
            warnings.warn(msg, errors.UninitializedReadWarning, stacklevel=4)

    # ---- end of block ---------------------------------------------------------------------
    def finish(self) -> None:
        """Checks at kernel end: every queue tensor freed, nothing left enqueued (LeakError);
        every set_flag of the kernel's own waited for (UnpairedFlagError); every buffer given
        memory used (UnusedBufferWarning)."""
        unpaired = [(key, s) for key, sets in self._user_sets.items() for s in sets]
        if unpaired:
            raise errors.UnpairedFlagError(
                f"block {self.block_idx}: {len(unpaired)} set_flag call(s) never waited for by "
                f"the end of the kernel (SetFlag/WaitFlag must be paired: a flag left set "
                f"desynchronises the next kernel on this core):\n" + "\n".join(
                    f"  set_flag({k[1]}, {k[2]}) at {format_src(s)}" for k, s in unpaired))
        for b in [*self.queues, *self.tbufs]:
            if not b._used:
                msg = (f"{short(b._src)}: {b._label} got memory from init_buffer but the "
                       f"kernel never used it: memory another buffer could have had")
                if msg not in self._warned:
                    self._warned.add(msg)
                    self.warnings.append(msg)
                    warnings.warn(msg, errors.UnusedBufferWarning, stacklevel=2)
        leaks = []
        for q in self.queues:
            for a in q.live():
                leaks.append(f"  {a.label} ({q.position.name} queue #{q.qid}) state {a.state}, "
                             f"allocated at {short(a.srcs['alloc'])}")
        if leaks:
            raise errors.LeakError(
                f"block {self.block_idx}: {len(leaks)} tensor(s) never freed at kernel end "
                f"(free_tensor every tensor you alloc_tensor; a leak deadlocks the next "
                f"alloc on hardware):\n" + "\n".join(leaks))


__all__ += ["install", "short"]
