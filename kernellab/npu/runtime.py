"""Per-block runtime context of Phase A: memories, the record stream and the access rules.

``launch`` runs a kernel once per block, one block at a time, with a :class:`BlockContext`
installed as the current context; every ``asc`` call finds it with :func:`ctx`. The context
owns the block's on-chip memories (created lazily), its instruction records, the scalar-issue
counter, the queues and the warnings.

:meth:`BlockContext.access` is the tensor state machine of NPU.md §3.5. Each queue position has
a fixed producer and consumer pipe (the pipes the Ascend C queue events connect):

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
"""

from __future__ import annotations

import warnings

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

    def __init__(self, machine, block_idx, block_num, core_type, strict=False):
        self.machine = machine
        self.block_idx = block_idx
        self.block_num = block_num
        self.core_type = core_type
        self.strict = strict
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
        self.records.append(Record(pipe, OP, op, self.issue(), cost, None, nbytes, flops, path,
                                   short(src)))

    def set_flag(self, pipe, key, src) -> None:
        self.records.append(Record(pipe, SET, "set_flag", self.calls, None, key, src=short(src)))

    def wait_flag(self, pipe, key, src) -> None:
        self.records.append(Record(pipe, WAIT, "wait_flag", self.calls, None, key,
                                   src=short(src)))

    # ---- the state machine ----------------------------------------------------------------
    def check_core(self, position: TPosition, what: str, src) -> None:
        need = position.core
        if need is not None and need != self.core_type:
            raise errors.PositionError(
                f"{format_src(src)}\n{what}: position {position.name} lives in "
                f"{position.memory}, which an {self.core_type.upper()} core does not have "
                f"(split architecture: UB is on AIV cores, L1/L0A/L0B/L0C on AIC cores). "
                f"Declare the kernel with @asc.kernel(core=\"{need}\").")

    def access(self, t, pipe: int, write: bool, src, n: int | None = None) -> None:
        """Check that ``pipe`` may read (``write=False``) or write ``t`` now; track bytes.
        ``n`` elements from the view's start (default: all)."""
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
        nb = (t._n if n is None else n) * t.dtype.itemsize
        lo = t._boff
        if write:
            mem.written[lo:lo + nb] = True
        elif not mem.written[lo:lo + nb].all():
            self._uninit(t, lo, nb, src)

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
        raise errors.PositionError(
            f"{format_src(src)}\n{PIPES[pipe]} {verb} a {pos} tensor ({a.label}, {state}); "
            f"{pos} queues connect {PIPES[prod]} (producer) to {PIPES[cons]} (consumer) "
            f"only. Vector ops read VECIN/VECCALC and write VECOUT/VECCALC; data_copy "
            f"GM->UB fills VECIN, UB->GM drains VECOUT.")

    def _uninit(self, t, lo, nb, src):
        w = t._mem.written[lo:lo + nb]
        first = int((~w).argmax())
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
        """Leak check at kernel end: every queue tensor freed, nothing left enqueued."""
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
