"""The student-facing kernel API: Ascend-C-style names in snake_case (as Huawei's pyasc writes
them), re-implemented from the public concepts (Ascend C programming guide on hiascend.com: "Basic
Architecture" atlas_ascendc_10_0007, "Memory Management and Synchronization Control"
atlas_ascendc_10_0027; pyasc's ``docs/python-api/language/fwk.md``,
https://github.com/hicann/pyasc). Import it as ``from kernellab.npu import asc``.

Every call (1) checks its legality and raises a :mod:`kernellab.npu.errors` error naming your
source line, (2) does its work on NumPy-backed memories immediately, in program order, and
(3) appends an instruction record for the timing replay. Calls outside a kernel run by
:func:`kernellab.npu.launch` raise :class:`~kernellab.npu.errors.LaunchError`.

Runtime: :func:`get_block_idx`, :func:`get_block_num`, :func:`get_sub_block_idx`,
:func:`core_type`, :func:`platform_info`; :func:`kernel`
(``@asc.kernel(core="aiv"|"aic"|"mix")``), :func:`tiling_struct`.

Memory: :class:`TPipe` (``init_buffer``), :class:`TQue` (``alloc_tensor``, ``enque``,
``deque``, ``free_tensor``, ``has_idle_buffer``), :class:`TBuf` (``get``,
``get_with_offset``), GM tensors (:class:`GlobalTensor`: ``sub``, slicing).

Ordering: the queues; beneath them the raw events of :mod:`kernellab.npu.sync`
(:class:`HardEvent`, :func:`set_flag`, :func:`wait_flag`) and :func:`pipe_barrier`
(``asc.PIPE_ALL`` or one pipe); between the cores of a mix kernel's group,
:func:`cross_core_set_flag` / :func:`cross_core_wait_flag` (:mod:`kernellab.npu.mix`). An
unordered cross-pipe TBuf access raises DataRaceError, and so, in a kernel declared
``auto_sync=False``, does a same-pipe dependency with no barrier; so do GM bytes two cores of
a mix group touch, one writing, with no cross-core flag between them.

Data movement: :func:`data_copy` (GM->UB and GM->L1 on MTE2, UB->GM on MTE3; ``nd2nz=`` for a
2-D block into L1), :func:`data_copy_pad` (any length, GM<->UB), :func:`load_data` (L1->L0A/L0B
on MTE1: a block, or a :class:`LoadData2DParams` fractal walk as in Ascend C), :func:`fixpipe`
(L0C->GM on FIX).

Vector (count form, on the V pipe; operands in UB, 32 B-aligned; reductions take (dst, src,
tmp, count); the element-wise ones also take the repeat/mask form ``(dst, src..., mask,
repeat_times, repeat_params)`` with :class:`BinaryRepeatParams` / :class:`UnaryRepeatParams`,
beside the repeat-form reductions :func:`whole_reduce_sum`, :func:`whole_reduce_max`,
:func:`block_reduce_sum`, :func:`block_reduce_max` and the broadcast :func:`brcb`:
:mod:`kernellab.npu.repeat`):
:func:`add`, :func:`sub`,
:func:`mul`, :func:`div`, :func:`max`, :func:`min`, :func:`adds`, :func:`muls`, :func:`maxs`,
:func:`mins`, :func:`exp`, :func:`ln`, :func:`sqrt`, :func:`rsqrt`, :func:`reciprocal`,
:func:`abs`, :func:`relu`, :func:`cast`, :func:`duplicate`, :func:`reduce_sum`,
:func:`reduce_max`. Element-wise arithmetic is done in float32 (float64 for the cube) and
rounded to the destination dtype: a modelling choice (``reduce_sum`` instead adds in the
operand type, in the order the ReduceSum page gives); real Ascend fp16 vector units may round
transcendental functions differently, which the graders' tolerances allow for.

Cube: :func:`mmad` (C = A·B or C += A·B, fp16/bf16 -> fp32, int8 -> int32); operands in the
hardware's fractal layouts (:mod:`kernellab.npu.fractal`): B reaches L0B as ZN only through
``load_data(..., transpose=True)``.

Not modelled (so no lesson here depends on them): UB bank conflicts, scalar-unit cost beyond a
fixed issue cost per call, overlap of one pipe's instructions (see :func:`pipe_barrier`).
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
from collections import deque as _deque
from dataclasses import dataclass

import numpy as np

from kernellab.npu import errors, runtime
from kernellab.npu.machine import platform_info as _platform_info
from kernellab.npu.record import PIPE_BY_NAME, PIPES, caller_src, format_src
from kernellab.npu.runtime import QUEUE_PIPES, ctx, short
from kernellab.npu.repeat import (BinaryRepeatParams, BrcbRepeatParams, UnaryRepeatParams,
                                  block_reduce_max, block_reduce_sum, brcb, whole_reduce_max,
                                  whole_reduce_sum)
from kernellab.npu.mix import CROSS_FLAG_IDS, cross_core_set_flag, cross_core_wait_flag
from kernellab.npu.sync import CORE_PIPES, EVENT_IDS, HardEvent, set_flag, wait_flag
from kernellab.npu.tensors import (ALLOCATED, DEQUEUED, ENQUEUED, FREE, Alloc, GlobalTensor,
                                   LocalTensor, TPosition, as_dtype, bfloat16, float16,
                                   float32, half, int8, int16, int32, uint8)

__all__ = [
    "TPosition", "GlobalTensor", "LocalTensor", "GM", "half", "float16", "float32", "bfloat16",
    "int8", "int16", "int32", "uint8", "TPipe", "TQue", "TBuf", "Nd2NzParams", "LoadData2DParams",
    "kernel",
    "Kernel", "tiling_struct", "get_block_idx", "get_block_num", "get_sub_block_idx",
    "core_type", "platform_info", "data_copy", "data_copy_pad", "load_data", "mmad", "fixpipe",
    "add", "sub", "mul", "div", "adds", "muls", "maxs", "mins", "exp", "ln",
    "sqrt", "rsqrt", "reciprocal", "relu", "cast", "duplicate", "reduce_sum",
    "reduce_max", "pipe_barrier", "PIPE_ALL", "PIPE_S", "PIPE_MTE2", "PIPE_MTE1", "PIPE_M",
    "PIPE_V",
    "PIPE_MTE3", "PIPE_FIX", "HardEvent", "EVENT_IDS", "set_flag", "wait_flag",
    "BinaryRepeatParams", "UnaryRepeatParams", "BrcbRepeatParams", "whole_reduce_sum",
    "whole_reduce_max", "block_reduce_sum", "block_reduce_max", "brcb",
    "cross_core_set_flag", "cross_core_wait_flag", "CROSS_FLAG_IDS",
    # max, min and abs too, but not star-exported (they shadow builtins)
]

GM = GlobalTensor
"""Annotation alias for GM kernel parameters."""


# ---------------------------------------------------------------------------------------------
# kernels and tiling structs
# ---------------------------------------------------------------------------------------------
class Kernel:
    """A kernel function marked with :func:`kernel`: ``fn``, ``name``, ``core``
    (``"aiv"`` vector core, ``"aic"`` cube core, ``"mix"`` an AI core group:
    :mod:`kernellab.npu.mix`), ``auto_sync``, ``params`` (parameter names)."""

    def __init__(self, fn, core: str, auto_sync: bool = True):
        if core not in ("aiv", "aic", "mix"):
            raise errors.LaunchError(f"@asc.kernel(core=...) must be 'aiv', 'aic' or 'mix', "
                                     f"got {core!r}")
        if not isinstance(auto_sync, bool):
            raise errors.LaunchError(f"@asc.kernel(auto_sync=...) must be True or False, got "
                                     f"{auto_sync!r}")
        self.fn = fn
        self.core = core
        self.auto_sync = auto_sync
        self.name = fn.__name__
        self.params = list(inspect.signature(fn).parameters)
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__

    def __call__(self, *a, **k):
        raise errors.LaunchError(
            f"kernel {self.name} runs on the simulated NPU: call "
            f"kernellab.npu.launch({self.name}, block_dim, args)")

    def __repr__(self):
        return f"<npu kernel {self.name} core={self.core}>"


def kernel(fn=None, *, core: str = "aiv", auto_sync: bool = True):
    """Mark a function as a device kernel: ``@asc.kernel(core="aiv")`` (vector core, UB),
    ``core="aic"`` (cube core, L1/L0) or ``core="mix"`` (the body runs on the AIC and both AIVs
    of a group, which meet through GM and cross-core flags: :mod:`kernellab.npu.mix`). Bare
    ``@asc.kernel`` means ``core="aiv"``.
    ``auto_sync=False``: no barrier between dependent instructions of one pipe is inserted for
    the kernel, as with the compiler's automatic synchronisation off; the kernel writes
    ``asc.pipe_barrier(asc.PIPE_V)`` ... itself (:mod:`kernellab.npu.sync`)."""
    if fn is not None:
        return Kernel(fn, core, auto_sync)
    return lambda f: Kernel(f, core, auto_sync)


def tiling_struct(cls):
    """Make a host tiling struct: a frozen dataclass whose fields must be ints, floats or
    bools (what a device struct can hold); NumPy scalars are converted, and ints given to a
    field annotated ``float`` become floats. Raises TypeError for other values."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if want == "float" and isinstance(v, (int, np.integer)) and \
                    not isinstance(v, (bool, np.bool_)):
                v = float(v)
            if isinstance(v, (bool, np.bool_)):
                object.__setattr__(self, f.name, builtins.bool(v))
            elif isinstance(v, (int, np.integer)):
                object.__setattr__(self, f.name, int(v))
            elif isinstance(v, (float, np.floating)):
                object.__setattr__(self, f.name, float(v))
            else:
                raise TypeError(f"tiling field {cls.__name__}.{f.name} must be an int, float or "
                                f"bool, got {type(v).__name__}")

    cls.__post_init__ = __post_init__
    return dataclass(frozen=True)(cls)


# ---------------------------------------------------------------------------------------------
# runtime queries
# ---------------------------------------------------------------------------------------------
def get_block_idx() -> int:
    """This block's index in ``[0, block_dim)`` (Ascend C ``GetBlockIdx``). In a mix kernel,
    the group's block: the same on its AIC and both AIVs (tell the AIVs apart with
    :func:`get_sub_block_idx`)."""
    return ctx().block_idx


def get_block_num() -> int:
    """The launch's ``block_dim`` (Ascend C ``GetBlockNum``)."""
    return ctx().block_num


def get_sub_block_idx() -> int:
    """Index of this AIV in its group in a mix kernel (0 or 1; Ascend C ``GetSubBlockIdx``);
    0 on an AIC and in a kernel of one kind of core."""
    c = ctx()
    return c.member - 1 if c.member else 0


def core_type() -> str:
    """``"aiv"`` or ``"aic"``: the kind of core running this code (in a mix kernel, Ascend C's
    ``ASCEND_IS_AIV`` / ``ASCEND_IS_AIC``)."""
    return ctx().core_type


def platform_info():
    """:class:`~kernellab.npu.machine.PlatformInfo` of the running machine (inside a kernel) or
    of the default card (on the host)."""
    c = runtime.current()
    return _platform_info(c.machine if c is not None else None)


# ---------------------------------------------------------------------------------------------
# pipe, queues, buffers
# ---------------------------------------------------------------------------------------------
class TPipe:
    """Manages a kernel's on-chip memory; exactly one per kernel (Ascend C ``TPipe``)."""

    def __init__(self):
        c = ctx()
        src = caller_src()
        if c.pipe is not None:
            raise errors.MultiplePipeError(
                f"{format_src(src)}\na kernel must create exactly one TPipe (the first one was "
                f"created at {short(c.pipe._src)})")
        c.pipe = self
        self._src = src

    def init_buffer(self, buf, num: int | None = None, nbytes: int | None = None) -> None:
        """Carve memory: ``init_buffer(que, num, nbytes)`` gives a queue ``num`` blocks of
        ``nbytes`` bytes; ``init_buffer(tbuf, nbytes)`` gives a TBuf ``nbytes`` bytes.
        Raises the buffer's overflow error (with the allocation table), PositionError for a
        position this core does not have."""
        c = ctx()
        src = caller_src()
        if isinstance(buf, TBuf):
            if nbytes is None:
                num, nbytes = 1, num
            buf._init(c, int(nbytes), src)
        elif isinstance(buf, TQue):
            if num is None or nbytes is None:
                raise errors.ShapeError(f"{format_src(src)}\ninit_buffer(que, num, nbytes) "
                                        "needs both num and nbytes")
            buf._init(c, int(num), int(nbytes), src)
        else:
            raise errors.ShapeError(f"{format_src(src)}\ninit_buffer takes a TQue or a TBuf, "
                                    f"got {type(buf).__name__}")
        c.issue()


def _pos(pos) -> TPosition:
    if isinstance(pos, TPosition):
        return pos
    try:
        return TPosition[str(pos).upper()]
    except KeyError as exc:
        raise errors.PositionError(f"unknown position {pos!r}; positions: "
                                   f"{', '.join(p.name for p in TPosition)}") from exc


class TQue:
    """A queue of ``num`` equal blocks at one position (Ascend C ``TQue<pos, depth>``).

    ``depth`` is how many tensors may be enqueued at once. The queue calls are lowered to the
    hardware events of the position (``MTE2_V`` ... see :mod:`kernellab.npu.runtime`).
    """

    def __init__(self, pos, depth: int = 1):
        self.position = _pos(pos)
        if self.position not in QUEUE_PIPES:
            raise errors.PositionError(
                f"{format_src(caller_src())}\nno queue at {self.position.name}: on the split "
                f"architecture CO2 and GM are global memory; write L0C results to GM with "
                f"fixpipe")
        self.depth = int(depth)
        if self.depth < 1:
            raise errors.ShapeError(f"TQue depth must be >= 1, got {depth}")
        self.pipes = QUEUE_PIPES[self.position]
        self.qid = None
        self._slots = []          # (offset, nbytes)
        self._free = _deque()
        self._held: dict[int, Alloc] = {}
        self._queued = _deque()
        self._pending: dict[int, tuple] = {}
        self._mem = None
        self._ctx = None
        self._used = False      # an alloc_tensor happened (the unused-buffer check)
        self._src = None
        self._label = f"{self.position.name} queue"

    def _init(self, c, num, nbytes, src):
        c.check_core(self.position, "init_buffer", src)
        if self._ctx is not None:
            raise errors.ShapeError(f"{format_src(src)}\ninit_buffer called twice for one queue")
        if num < 1 or nbytes < 1:
            raise errors.ShapeError(f"{format_src(src)}\ninit_buffer(que, num={num}, "
                                    f"nbytes={nbytes}): both must be >= 1")
        self._ctx = c
        self._src = src
        self.qid = len(c.queues)
        self._label = f"{self.position.name} queue #{self.qid}"
        c.queues.append(self)
        mem = self._mem = c.memory(self.position.memory)
        for s in range(num):
            label = f"{self.position.name} q{self.qid}[{s}]"
            off = mem.alloc(nbytes, label, short(src), format_src(src))
            self._slots.append((off, nbytes))
            self._free.append(s)

    def _check(self, what):
        if self._ctx is None:
            raise errors.ShapeError(f"{format_src(caller_src())}\n{what} on a "
                                    f"{self.position.name} queue before pipe.init_buffer")
        if self._ctx is not runtime.current():
            raise errors.LaunchError("a queue belongs to the kernel invocation that created it")
        return self._ctx

    def has_idle_buffer(self) -> bool:
        """True when ``alloc_tensor`` would succeed."""
        return bool(self._free)

    def alloc_tensor(self, dtype=half) -> LocalTensor:
        """Take a free block as a tensor of ``dtype`` (its contents are whatever was there).
        Raises QueueDeadlockError when every block is held or more than 8 tensors are
        outstanding at this position."""
        c = self._check("alloc_tensor")
        src = caller_src()
        dtype = as_dtype(dtype)
        out = c.outstanding.get(self.position, 0)
        limit = c.machine.max_alloc_per_position
        if out >= limit:
            raise errors.QueueDeadlockError(
                f"{format_src(src)}\nmore than {limit} tensors outstanding from alloc_tensor at "
                f"{self.position.name} (hardware limit); free some first")
        if not self._free:
            holders = "\n".join(f"  {a.label}: {a.state}, allocated at {short(a.srcs['alloc'])}"
                                for a in self._held.values())
            raise errors.QueueDeadlockError(
                f"{format_src(src)}\nalloc_tensor on {self.position.name} queue #{self.qid}: all "
                f"{len(self._slots)} block(s) are held and the kernel runs in program order, "
                f"so none can be freed -- this waits forever on hardware. Free a tensor "
                f"(free_tensor) before allocating again, or give the queue more blocks.\n"
                f"holders:\n{holders}")
        slot = self._free.popleft()
        self._used = True
        c.outstanding[self.position] = out + 1
        prod, cons = self.pipes
        c.issue()
        key = self._pending.pop(slot, None)
        if key is not None:
            c.wait_flag(prod, key, src)
        off, nbytes = self._slots[slot]
        a = Alloc(self, slot, f"{self.position.name} q{self.qid}[{slot}]#{c.next_tid()}",
                  None, src)
        if not c.auto_sync:  # one pipe's accesses to it are checked for their barriers
            a.hist = []
        self._held[slot] = a
        return LocalTensor(self._mem, off, nbytes // dtype.itemsize, dtype, self.position, a)

    def _own(self, t, what, src):
        if not isinstance(t, LocalTensor):
            raise errors.ShapeError(f"{format_src(src)}\n{what} takes a LocalTensor, got "
                                    f"{type(t).__name__}")
        a = t._alloc
        if a.queue is not self:
            raise errors.QueueStateError(
                f"{format_src(src)}\n{what}: tensor {a.label} does not belong to this "
                f"{self.position.name} queue #{self.qid}")
        return a

    def enque(self, t: LocalTensor) -> bool:
        """Hand a tensor from the producer pipe to the consumer pipe (``set_flag`` on the
        producer). Raises QueueDeadlockError beyond ``depth`` enqueued tensors."""
        c = self._check("enque")
        src = caller_src()
        a = self._own(t, "enque", src)
        if a.state is FREE:
            raise errors.UseAfterFreeError(f"{format_src(src)}\nenque of tensor {a.label} "
                                           f"freed at {short(a.srcs.get('free'))}")
        if a.state is not ALLOCATED:
            raise errors.QueueStateError(f"{format_src(src)}\nenque of tensor {a.label} in "
                                         f"state {a.state} (enque at {short(a.srcs.get('enque'))})")
        if len(self._queued) >= self.depth:
            raise errors.QueueDeadlockError(
                f"{format_src(src)}\nenque beyond the queue depth {self.depth} of "
                f"{self.position.name} queue #{self.qid}: nothing dequeues in between, so this "
                "waits forever on hardware")
        c.issue()
        a.state = ENQUEUED
        a.srcs["enque"] = src
        prod, cons = self.pipes
        if prod != cons:
            c.set_flag(prod, (f"{PIPES[prod]}_{PIPES[cons]}", self.qid, a.slot), src)
        self._queued.append(t)
        return True

    def deque(self, dtype=None) -> LocalTensor:
        """Take the oldest enqueued tensor (``wait_flag`` on the consumer pipe). Raises
        QueueDeadlockError on an empty queue."""
        c = self._check("deque")
        src = caller_src()
        if not self._queued:
            raise errors.QueueDeadlockError(
                f"{format_src(src)}\ndeque of an empty {self.position.name} queue #{self.qid}: "
                f"nothing was enque'd, so this waits forever on hardware")
        c.issue()
        t = self._queued.popleft()
        a = t._alloc
        a.state = DEQUEUED
        a.srcs["deque"] = src
        prod, cons = self.pipes
        if prod != cons:
            c.wait_flag(cons, (f"{PIPES[prod]}_{PIPES[cons]}", self.qid, a.slot), src)
        if dtype is not None and as_dtype(dtype) != t.dtype:
            t = t.reinterpret_cast(dtype)
        return t

    def free_tensor(self, t: LocalTensor) -> None:
        """Give the block back (``set_flag`` consumer -> producer, waited for by the next
        ``alloc_tensor`` of this block). Raises DoubleFreeError for a free tensor."""
        c = self._check("free_tensor")
        src = caller_src()
        a = self._own(t, "free_tensor", src)
        if a.state is FREE:
            raise errors.DoubleFreeError(
                f"{format_src(src)}\nfree_tensor of tensor {a.label}, already freed at "
                f"{short(a.srcs.get('free'))}")
        if a.state is ENQUEUED:
            raise errors.QueueStateError(
                f"{format_src(src)}\nfree_tensor of tensor {a.label} while it is ENQUEUED "
                f"(enque at {short(a.srcs.get('enque'))}): deque it first")
        c.issue()
        prod, cons = self.pipes
        if a.state is DEQUEUED and prod != cons:
            key = (f"{PIPES[cons]}_{PIPES[prod]}", self.qid, a.slot)
            c.set_flag(cons, key, src)
            self._pending[a.slot] = key
        a.state = FREE
        a.srcs["free"] = src
        del self._held[a.slot]
        self._free.append(a.slot)
        c.outstanding[self.position] -= 1

    def live(self):
        """Allocations not freed yet (for the leak check)."""
        return list(self._held.values())


class TBuf:
    """Untyped scratch memory at one position (usually VECCALC): no queue semantics, so the
    programmer owns synchronisation (Ascend C ``TBuf``). Bytes one pipe wrote may be read or
    written by another pipe (and bytes one pipe read overwritten by another) only when
    something orders the two: a queue's enque/deque or free/alloc between those pipes later in
    program order than the first access, or :func:`pipe_barrier`; otherwise the second access
    raises :class:`~kernellab.npu.errors.DataRaceError`. One pipe's own accesses are ordered
    (a pipe runs in order)."""

    def __init__(self, pos=TPosition.VECCALC):
        self.position = _pos(pos)
        if self.position.memory == "GM":
            raise errors.PositionError(f"TBuf at {self.position.name}: TBuf is on-chip memory")
        self._off = None
        self._nbytes = 0
        self._mem = None
        self._alloc = None
        self._used = False      # a get happened (the unused-buffer check)
        self._src = None
        self._label = f"{self.position.name} TBuf"

    def _init(self, c, nbytes, src):
        c.check_core(self.position, "init_buffer", src)
        if nbytes < 1:
            raise errors.ShapeError(f"{format_src(src)}\nTBuf size must be >= 1 byte")
        self._mem = c.memory(self.position.memory)
        label = f"{self.position.name} tbuf{len(c.tbufs)}"
        self._src, self._label = src, label
        self._off = self._mem.alloc(nbytes, label, short(src), format_src(src))
        self._nbytes = nbytes
        self._alloc = Alloc(None, 0, label, None, src)
        self._alloc.hist = []      # checked for unordered cross-pipe accesses (runtime)
        c.tbufs.append(self)

    def get(self, dtype=half, n: int | None = None) -> LocalTensor:
        """The buffer as ``n`` elements of ``dtype`` (default: all of it)."""
        return self.get_with_offset(dtype, n, 0)

    def get_with_offset(self, dtype, n: int | None, offset: int) -> LocalTensor:
        """``n`` elements of ``dtype`` starting ``offset`` bytes into the buffer."""
        if self._mem is None:
            raise errors.ShapeError(f"{format_src(caller_src())}\nTBuf.get before "
                                    "pipe.init_buffer(tbuf, nbytes)")
        dtype = as_dtype(dtype)
        self._used = True
        avail = (self._nbytes - offset) // dtype.itemsize
        n = avail if n is None else int(n)
        if offset < 0 or n < 0 or n > avail:
            raise errors.ShapeError(f"{format_src(caller_src())}\nTBuf of {self._nbytes} B has "
                                    f"no room for {n} x {dtype} at offset {offset}")
        return LocalTensor(self._mem, self._off + offset, n, dtype, self.position, self._alloc)


PIPE_ALL = "PIPE_ALL"
PIPE_S, PIPE_MTE2, PIPE_MTE1, PIPE_M, PIPE_V, PIPE_MTE3, PIPE_FIX = (
    "PIPE_S", "PIPE_MTE2", "PIPE_MTE1", "PIPE_M", "PIPE_V", "PIPE_MTE3", "PIPE_FIX")
_ONE_PIPE = {k: v for k, v in PIPE_BY_NAME.items() if k != PIPE_S}   # a barrier's one pipe


def pipe_barrier(pipe=PIPE_ALL) -> None:
    """Ascend C ``PipeBarrier<pipe>`` (API reference, ``atlasascendc_api_07_0271``).
    ``asc.PIPE_ALL``: every pipe of this core waits until everything issued before it, on
    every pipe, has completed and its data is visible; lowered to set_flag/wait_flag pairs
    between every two pipes of the core, so it costs what it orders in the timing replay. One
    pipe (``asc.PIPE_V`` ...): that pipe's later instructions are ordered after its earlier
    ones, which a kernel with ``auto_sync=False`` needs between two dependent instructions of
    one pipe (:mod:`kernellab.npu.sync`); the timing model runs a pipe's instructions one after
    another anyway, so it costs nothing there. Raises EventError for ``asc.PIPE_S`` (the
    hardware orders the scalar pipe itself; PipeBarrier<PIPE_S> is a hardware error) and for a
    pipe this kind of core lacks, ShapeError for anything else."""
    c = ctx()
    src = caller_src()
    names = (PIPE_ALL, *_ONE_PIPE)
    if pipe == PIPE_S:
        raise errors.EventError(f"{format_src(src)}\npipe_barrier(asc.PIPE_S): the hardware "
                                f"orders the scalar pipe itself, and PipeBarrier<PIPE_S> "
                                f"raises a hardware error")
    if pipe not in names:
        raise errors.ShapeError(f"{format_src(src)}\npipe_barrier takes one of "
                                f"{', '.join('asc.' + n for n in names)}; got {pipe!r}")
    c.issue()
    if pipe == PIPE_ALL:
        c.barrier(CORE_PIPES[c.core_type], src)
        return
    p = _ONE_PIPE[pipe]
    if p not in CORE_PIPES[c.core_type]:
        raise errors.EventError(f"{format_src(src)}\npipe_barrier(asc.{pipe}): an "
                                f"{c.core_type.upper()} core has no {PIPES[p]} pipe")
    c.fence_pipe(p)


# the instructions, one module per unit (re-exported: students write asc.data_copy, asc.add ...)
from kernellab.npu.cube import LoadData2DParams, fixpipe, load_data, mmad  # noqa: E402
from kernellab.npu.dma import Nd2NzParams, data_copy, data_copy_pad  # noqa: E402
from kernellab.npu.vector import (abs, add, adds, cast, div, duplicate, exp, ln, max,  # noqa: E402,F401
                                  maxs, min, mins, mul, muls, reciprocal, reduce_max,
                                  reduce_sum, relu, rsqrt, sqrt, sub)
