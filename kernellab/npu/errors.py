"""Errors of the NPU simulator.

Every error is raised while the kernel runs functionally (Phase A) at the API call that breaks
the rule, unless noted, and its message names the user's source line (``file.py:42: <code>``),
so a student can read it without a debugger. The classes mirror what Huawei's msSanitizer
reports on real hardware (memcheck: illegal read/write, misalignment, multi-core corruption,
leaks, illegal free, allocated memory unused; contention check; initcheck; synchronisation
check), so the vocabulary transfers.

All of them subclass :class:`NPUError`; ``kind`` is a short machine-readable name the grader
prints (``"ub-overflow"``, ``"use-before-deque"`` ...).
"""

from __future__ import annotations


class NPUError(Exception):
    """Base class of every simulator error. ``kind`` is a short machine-readable name."""

    kind = "npu-error"


class BufferOverflowError(NPUError):
    """``init_buffer`` / ``TBuf`` allocations (after alignment) exceed an on-chip buffer.
    The message carries the allocation table (name, offset, bytes) and the budget."""

    kind = "buffer-overflow"


class UBOverflowError(BufferOverflowError):
    """Unified Buffer (VECIN/VECOUT/VECCALC) overflow."""

    kind = "ub-overflow"


class L1OverflowError(BufferOverflowError):
    """L1 buffer (A1/B1) overflow."""

    kind = "l1-overflow"


class L0AOverflowError(BufferOverflowError):
    """L0A buffer (A2) overflow."""

    kind = "l0a-overflow"


class L0BOverflowError(BufferOverflowError):
    """L0B buffer (B2) overflow."""

    kind = "l0b-overflow"


class L0COverflowError(BufferOverflowError):
    """L0C buffer (CO1) overflow."""

    kind = "l0c-overflow"


class AlignmentError(NPUError):
    """An address or length breaks an alignment rule: UB/L1 32 B, L0A/L0B 512 B, L0C 64 B,
    ``data_copy`` lengths a multiple of 32 B (use ``data_copy_pad`` for tails)."""

    kind = "alignment"


class PositionError(NPUError):
    """An illegal data path or operand position (GM->A2 by ``data_copy``, a vector op on an
    L1 tensor, ``mmad`` operands not in A2/B2/CO1, a cube buffer on a vector core ...)."""

    kind = "illegal-position"


class QueueStateError(NPUError):
    """Base of the queue state-machine errors (FREE -> ALLOCATED -> ENQUEUED -> DEQUEUED)."""

    kind = "queue-state"


class UseBeforeDequeError(QueueStateError):
    """A consumer pipe read a tensor that was not ``deque``-d yet (missing enque/deque)."""

    kind = "use-before-deque"


class WriteAfterEnqueError(QueueStateError):
    """A tensor was written after it was ``enque``-d (the consumer may already be reading it)."""

    kind = "write-after-enque"


class UseAfterFreeError(QueueStateError):
    """A tensor was accessed after ``free_tensor``."""

    kind = "use-after-free"


class DoubleFreeError(QueueStateError):
    """``free_tensor`` of a tensor that is already free."""

    kind = "double-free"


class QueueDeadlockError(QueueStateError):
    """A queue call that would wait forever: ``alloc_tensor`` with every block held (no free can
    happen, the program runs in order), ``deque`` of an empty queue, ``enque`` beyond the
    queue's depth, more than 8 outstanding allocations per position."""

    kind = "queue-deadlock"


class QueueRoleError(QueueStateError):
    """A pipe touches a queue tensor in a role its queue does not order: MTE2 writing a VECOUT
    tensor (whose queue orders V -> MTE3 only), V writing a VECIN one ... The path itself may
    be legal (a DMA may write UB at any position); the queue protocol is broken: nothing
    orders that pipe against the queue's producer and consumer."""

    kind = "queue-role"


class LeakError(QueueStateError):
    """At kernel end, tensors were never freed (or never dequeued)."""

    kind = "leak"


class MultiplePipeError(NPUError):
    """More than one ``TPipe`` in one kernel."""

    kind = "multiple-pipe"


class ShapeError(NPUError, ValueError):
    """A count, shape or size is wrong: count larger than a tensor, mmad shapes beyond the L0
    tensors, a GM sub-tensor of negative length ..."""

    kind = "shape"


class LayoutError(NPUError):
    """A cube operand is in the wrong fractal layout: ``mmad`` reads A from L0A as ZZ and B
    from L0B as ZN (Ascend C API reference, Mmad, ``atlasascendc_api_07_0249``); L1's ND->NZ
    copy leaves B's fractals row-major, and only ``load_data(..., transpose=True)`` (the
    ``ifTranspose`` flag of LoadData) turns them column-major."""

    kind = "layout"


class DTypeError(NPUError, TypeError):
    """Operand dtypes that do not match, or a dtype the operation does not support."""

    kind = "dtype"


class OutOfBoundsError(NPUError, IndexError):
    """A GM access (sub-tensor, slice or copy) beyond the global tensor."""

    kind = "out-of-bounds"


class MultiCoreWriteConflict(NPUError):
    """Two blocks wrote overlapping bytes of one GM argument (checked after Phase A; mirrors
    msSanitizer's "multi-core corruption")."""

    kind = "multi-core-write-conflict"


class UninitializedReadError(NPUError):
    """A read of on-chip bytes never written since the buffer was carved (``strict=True``)."""

    kind = "uninitialized-read"


class UninitializedReadWarning(NPUError, UserWarning):
    """The warning form of :class:`UninitializedReadError` (the default, ``strict=False``)."""

    kind = "uninitialized-read"


class DataRaceError(NPUError):
    """Two accesses to the same on-chip bytes with nothing ordering them (msSanitizer's
    contention check, inter- and intra-pipeline: ``atlasopdev_16_0039``). Across pipes: a
    write by one pipe, then a read or write by another, or a read, then a write by another,
    in a ``TBuf`` (queue tensors are ordered by their state machine); a kernel orders its
    pipes through a queue's enque/deque (or free/alloc), ``asc.set_flag``/``asc.wait_flag``
    on the pair of pipes, or ``asc.pipe_barrier(asc.PIPE_ALL)``. Within one pipe, in a kernel
    with ``auto_sync=False`` only: two instructions of the pipe on the same bytes, one of them
    writing, with no ``asc.pipe_barrier`` of that pipe between them. The message names both
    pipes, both calls and both source lines. Raised in Phase A at the second access. In a mix
    kernel also GM bytes one core of a group writes and another reads or writes with no
    cross-core flag ordering them (:mod:`kernellab.npu.mix`)."""

    kind = "data-race"


class UnpairedFlagError(NPUError):
    """A raw ``asc.set_flag`` never consumed by a ``wait_flag`` of the same event and ID by the
    end of the block, or a ``wait_flag`` with no ``set_flag`` before it in program order
    (msSanitizer's synchronisation check: "unpaired SetFlag/WaitFlag", ``atlasopdev_16_0039``;
    Ascend C: SetFlag/WaitFlag must be paired, ``atlasascendc_api_07_0270``)."""

    kind = "unpaired-flag"


class EventError(NPUError, ValueError):
    """A raw event or barrier that cannot exist here: not an ``asc.HardEvent``, an event ID
    outside the card's range, a pipe this kind of core does not have, or a barrier of the scalar
    pipe (``PipeBarrier<PIPE_S>`` is a hardware error)."""

    kind = "event"


class UnusedBufferWarning(NPUError, UserWarning):
    """A buffer given memory by ``init_buffer`` that the block never used (msSanitizer's
    "allocated memory unused", ``atlasopdev_16_0042``; there for GM, here for on-chip
    buffers): memory another buffer of the kernel could have had."""

    kind = "unused-buffer"


class DeadlockError(NPUError):
    """Phase B: a ``wait_flag`` that never fires (the pipe heads are in the message); Phase A
    of a mix kernel: every core of a group waits on a cross-core flag nothing will set."""

    kind = "deadlock"


class LaunchError(NPUError, ValueError):
    """A bad ``launch`` call: block_dim out of range, an argument of an unsupported type, an
    API call outside a kernel."""

    kind = "launch"


__all__ = [name for name, obj in dict(globals()).items()
           if isinstance(obj, type) and issubclass(obj, NPUError)]
