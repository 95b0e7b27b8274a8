"""Raw synchronisation between the pipes of one core, beneath the queue API: Ascend C's
``SetFlag``/``WaitFlag`` events and ``PipeBarrier`` (re-exported by :mod:`kernellab.npu.asc`).

* :class:`HardEvent` names an ordered pair of pipes, source first: ``MTE2_V`` is set on MTE2
  and waited for on V (Ascend C API reference, SetFlag/WaitFlag, ``atlasascendc_api_07_0270``).
* ``set_flag(event, event_id)`` fires once everything issued before it on the source pipe has
  completed and its data is visible; ``wait_flag(event, event_id)`` stops the destination pipe
  until it has. The timing replay (:mod:`kernellab.npu.timing`) makes the waiter wait exactly
  so, and the race detector (:meth:`kernellab.npu.runtime.BlockContext.access`) orders exactly
  the accesses the pair orders: an access the detector accepts is one the replay orders, so a
  kernel that leaves out an event is reported, never timed faster.
* Each set is consumed by one wait of the same event and ID, oldest first; a set never waited
  for by the end of the block, or a wait with no set before it in program order, raises
  :class:`~kernellab.npu.errors.UnpairedFlagError` (msSanitizer's synchronisation check).
* IDs run from 0 to :data:`EVENT_IDS` - 1 on A2 (``atlasascendc_api_07_0270``). On the hardware
  the queues draw their events from the same IDs, which is why Ascend C asks for
  ``AllocEventID``/``FetchEventID``; here the queues' events are kept apart from a kernel's own,
  so any ID in range is safe.
* Events with the scalar pipe (``S_V``, ``V_S`` ...) order ``GetValue``/``SetValue``, which
  the simulator does not have; they raise :class:`~kernellab.npu.errors.EventError`, as does an
  event between pipes the kernel's kind of core lacks (``M_V`` on the split A2 cores: the cube
  and the vector units are different cores).

One pipe: ``pipe_barrier(asc.PIPE_V)`` (and the ``V_V`` event) orders the pipe's later
instructions after its earlier ones. On the hardware two instructions of one pipe that depend
on each other need it (Ascend C API reference, PipeBarrier, ``atlasascendc_api_07_0271``); the
compiler's automatic synchronisation inserts it, and so does the simulator by default. A kernel
declared with ``@asc.kernel(..., auto_sync=False)`` gets no such help: an access that depends on
an earlier one of the same pipe with no barrier between them raises
:class:`~kernellab.npu.errors.DataRaceError` (msSanitizer's intra-pipeline contention). The
timing model runs one pipe's instructions one after another either way, so a missing barrier
never models faster.
"""

from __future__ import annotations

import enum

from kernellab.npu import errors
from kernellab.npu.record import FIX, M, MTE1, MTE2, MTE3, PIPES, S, V, caller_src, format_src
from kernellab.npu.runtime import ctx

__all__ = ["HardEvent", "EVENT_IDS", "CORE_PIPES", "set_flag", "wait_flag"]

EVENT_IDS = 8
"""Event IDs per event on A2/A3: 0 to 7 (``atlasascendc_api_07_0270``)."""

CORE_PIPES = {"aiv": (MTE2, V, MTE3), "aic": (MTE2, MTE1, M, FIX)}
"""The pipes of each kind of core on the split (A2) architecture, scalar aside: a vector core
moves GM<->UB and computes on V, a cube core moves GM->L1 (MTE2), L1->L0A/L0B (MTE1), computes
on M and writes L0C out through FIX."""

class HardEvent(enum.Enum):
    """An event from one pipe to another, named ``SOURCE_DESTINATION`` as Ascend C's
    ``HardEvent`` (``atlasascendc_api_07_0270``). ``value``: ``(source, destination)`` pipe
    indices (:data:`kernellab.npu.record.PIPES`)."""

    MTE2_MTE1 = (MTE2, MTE1)
    MTE1_MTE2 = (MTE1, MTE2)
    MTE1_M = (MTE1, M)
    M_MTE1 = (M, MTE1)
    MTE2_V = (MTE2, V)
    V_MTE2 = (V, MTE2)
    MTE3_V = (MTE3, V)
    V_MTE3 = (V, MTE3)
    M_V = (M, V)
    V_M = (V, M)
    V_V = (V, V)
    MTE3_MTE1 = (MTE3, MTE1)
    MTE1_MTE3 = (MTE1, MTE3)
    MTE1_V = (MTE1, V)
    MTE2_M = (MTE2, M)
    M_MTE2 = (M, MTE2)
    V_MTE1 = (V, MTE1)
    M_FIX = (M, FIX)
    FIX_M = (FIX, M)
    MTE3_MTE2 = (MTE3, MTE2)
    MTE2_MTE3 = (MTE2, MTE3)
    S_V = (S, V)
    V_S = (V, S)
    S_MTE2 = (S, MTE2)
    MTE2_S = (MTE2, S)
    S_MTE3 = (S, MTE3)
    MTE3_S = (MTE3, S)
    MTE2_FIX = (MTE2, FIX)
    FIX_MTE2 = (FIX, MTE2)
    FIX_S = (FIX, S)
    M_S = (M, S)
    FIX_MTE3 = (FIX, MTE3)

    @property
    def pipes(self) -> tuple[int, int]:
        """``(source, destination)`` pipe indices."""
        return self.value


def _check(c, event, event_id, what, src) -> tuple[int, int]:
    where = format_src(src)
    if not isinstance(event, HardEvent):
        raise errors.EventError(f"{where}\n{what} takes an asc.HardEvent (asc.HardEvent.MTE2_V "
                                f"...), got {event!r}")
    if isinstance(event_id, bool) or not isinstance(event_id, int) or \
            not 0 <= event_id < EVENT_IDS:
        raise errors.EventError(f"{where}\n{what}({event.name}, {event_id!r}): event IDs are "
                                f"ints from 0 to {EVENT_IDS - 1}")
    p, q = event.pipes
    if S in (p, q):
        raise errors.EventError(
            f"{where}\n{what}({event.name}): events with the scalar pipe order GetValue/"
            f"SetValue on a local tensor, which this simulator does not have")
    have = CORE_PIPES[c.core_type]
    missing = [PIPES[x] for x in (p, q) if x not in have]
    if missing:
        raise errors.EventError(
            f"{where}\n{what}({event.name}): an {c.core_type.upper()} core has no "
            f"{' or '.join(dict.fromkeys(missing))} pipe (its pipes: "
            f"{', '.join(PIPES[x] for x in have)}); on the split architecture the cube (M, "
            f"MTE1, FIX) and the vector unit (V, MTE3) are different cores")
    return p, q


def set_flag(event: HardEvent, event_id: int = 0) -> None:
    """Ascend C ``SetFlag<event>(eventID)``: the event fires on the source pipe once everything
    issued there before it has completed. Raises EventError (module docstring)."""
    c = ctx()
    src = caller_src()
    p, _ = _check(c, event, event_id, "set_flag", src)
    c.issue()
    c.user_set(p, ("EVENT", event.name, event_id), src)


def wait_flag(event: HardEvent, event_id: int = 0) -> None:
    """Ascend C ``WaitFlag<event>(eventID)``: the destination pipe waits for the oldest
    unconsumed ``set_flag`` of the same event and ID. Raises EventError, or
    UnpairedFlagError when no such set was issued before it."""
    c = ctx()
    src = caller_src()
    _, q = _check(c, event, event_id, "wait_flag", src)
    c.issue()
    c.user_wait(q, ("EVENT", event.name, event_id), src)
