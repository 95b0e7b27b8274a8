"""Raw synchronisation (kernellab.npu.sync): set_flag/wait_flag between pipes, one-pipe
barriers with ``auto_sync=False``, and the checks msSanitizer makes of them (contention check,
synchronisation check, allocated memory unused). Each faulty kernel has a correct twin that
runs; every message names the user's source lines."""

import warnings

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P

N = 128  # fp16 elements = 256 B
E = asc.HardEvent


def _x():
    return np.arange(N, dtype=np.float16)


def run(kernel, *args):
    return npu.launch(kernel, 1, args or (_x(), np.zeros(N, np.float16)))


def trips(exc, kernel, line):
    with pytest.raises(exc) as info:
        run(kernel)
    msg = str(info.value)
    assert "test_npu_sync.py:" in msg and line in msg, msg
    return msg


def _events(res, op, pipe):
    return [e for e in res.trace.events if e.op == op and e.pipe == pipe]


def copy_add(bad=None, event=E.MTE2_V, event_id=0):
    """x -> TBuf (MTE2) -> adds 1 (V) -> VECOUT queue -> z, the TBuf ordered by one raw
    MTE2 -> V event unless ``bad``."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECIN)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        a = tb.get(asc.half)
        if bad == "wait_first":
            asc.wait_flag(event, event_id)
        asc.data_copy(a, x, N)
        if bad != "missing":
            asc.set_flag(event, event_id)
        if bad not in ("missing", "unpaired"):
            asc.wait_flag(event, event_id)
        if bad == "unpaired":
            asc.pipe_barrier(asc.PIPE_ALL)
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, a, 1.0, N)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)
    return k


def test_a_raw_event_orders_a_tbuf_and_the_timing_waits_for_it():
    z = np.zeros(N, np.float16)
    res = run(copy_add(), _x(), z)
    np.testing.assert_array_equal(z, _x() + 1)
    (cp,), (add,) = _events(res, "data_copy", "MTE2"), _events(res, "adds", "V")
    assert add.start >= cp.visible + npu.get_machine().flag_latency > cp.end
    again = run(copy_add(), _x(), np.zeros(N, np.float16))
    assert (again.cycles, again.trace_hash) == (res.cycles, res.trace_hash)


def test_a_missing_event_is_a_race_naming_both_pipes_calls_and_lines():
    msg = trips(errors.DataRaceError, copy_add("missing"), "asc.adds(c, a, 1.0, N)")
    assert "V reads them in adds" in msg and "MTE2 wrote them in data_copy" in msg, msg
    assert "asc.data_copy(a, x, N)" in msg and msg.count("test_npu_sync.py:") == 2, msg
    assert "asc.set_flag(asc.HardEvent.MTE2_V, id)" in msg, msg


def test_an_event_on_the_wrong_pair_of_pipes_orders_nothing_here():
    msg = trips(errors.DataRaceError, copy_add(event=E.MTE2_MTE3), "asc.adds(c, a, 1.0, N)")
    assert "nothing orders MTE2 before V" in msg, msg


def test_a_set_never_waited_for_is_unpaired():
    msg = trips(errors.UnpairedFlagError, copy_add("unpaired"), "asc.set_flag(event, event_id)")
    assert "set_flag(MTE2_V, 0)" in msg and "never waited for" in msg, msg
    assert errors.UnpairedFlagError.kind == "unpaired-flag"


def test_a_wait_before_any_set_is_unpaired():
    msg = trips(errors.UnpairedFlagError, copy_add("wait_first"), "asc.wait_flag(event, event_id)")
    assert "with no set_flag(MTE2_V, 0) before it" in msg, msg


@pytest.mark.parametrize("event, event_id, words", [
    (E.MTE2_V, 8, "event IDs are ints from 0 to 7"),
    (E.MTE2_V, -1, "event IDs are ints from 0 to 7"),
    ("MTE2_V", 0, "takes an asc.HardEvent"),
    (E.S_V, 0, "scalar pipe"),
    (E.M_V, 0, "an AIV core has no M pipe"),
    (E.MTE1_MTE2, 0, "an AIV core has no MTE1 pipe"),
])
def test_events_that_cannot_exist_here_are_refused(event, event_id, words):
    msg = trips(errors.EventError, copy_add(event=event, event_id=event_id),
                "test_npu_sync.py")
    assert words in msg, msg


def test_a_cube_core_takes_its_own_events():
    @asc.kernel(core="aic")
    def k(x, z):
        asc.set_flag(E.MTE2_V, 0)

    msg = trips(errors.EventError, k, "asc.set_flag(E.MTE2_V, 0)")
    assert "an AIC core has no V pipe" in msg, msg


def chain(auto_sync=True, order=None, in_queue=False):
    """adds 1 into b, then muls 2 of b, both on V: with ``auto_sync=False`` the second needs a
    one-pipe barrier (``order``: "barrier" or "event") after the first."""

    @asc.kernel(core="aiv", auto_sync=auto_sync)
    def k(x, z):
        pipe = asc.TPipe()
        qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, 1, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        if not in_queue:
            tb = asc.TBuf(P.VECCALC)
            pipe.init_buffer(tb, N * 2)
        a = qi.alloc_tensor(asc.half)
        asc.data_copy(a, x, N)
        qi.enque(a)
        a = qi.deque()
        b = a if in_queue else tb.get(asc.half)
        asc.adds(b, a, 1.0, N)
        if order == "barrier":
            asc.pipe_barrier(asc.PIPE_V)
        elif order == "event":
            asc.set_flag(E.V_V, 0)
            asc.wait_flag(E.V_V, 0)
        c = qo.alloc_tensor(asc.half)
        asc.muls(c, b, 2.0, N)
        qi.free_tensor(a)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)
    return k


@pytest.mark.parametrize("in_queue", [False, True])
def test_without_auto_sync_one_pipe_needs_its_barrier(in_queue):
    msg = trips(errors.DataRaceError, chain(False, in_queue=in_queue), "asc.muls(c, b, 2.0, N)")
    assert "intra-pipeline race" in msg and "V reads them in muls" in msg, msg
    assert "V wrote them in adds" in msg and "asc.pipe_barrier(asc.PIPE_V)" in msg, msg
    for order in ("barrier", "event"):
        z = np.zeros(N, np.float16)
        run(chain(False, order, in_queue), _x(), z)
        np.testing.assert_array_equal(z, (_x() + 1) * 2)
    # with automatic synchronisation (the default) the barrier is the simulator's to insert
    z = np.zeros(N, np.float16)
    res = run(chain(True, in_queue=in_queue), _x(), z)
    np.testing.assert_array_equal(z, (_x() + 1) * 2)
    # the barrier costs no pipe time in the model: one pipe runs in order either way
    fenced = run(chain(False, "barrier", in_queue))
    assert [e.end - e.start for e in fenced.trace.events if e.pipe == "V"] == \
        [e.end - e.start for e in res.trace.events if e.pipe == "V"]


def test_pipe_barrier_of_the_scalar_pipe_or_a_missing_pipe_is_refused():
    @asc.kernel(core="aiv")
    def k(x, z):
        asc.pipe_barrier(asc.PIPE_S)

    assert "hardware error" in trips(errors.EventError, k, "asc.pipe_barrier(asc.PIPE_S)")

    @asc.kernel(core="aiv")
    def k2(x, z):
        asc.pipe_barrier(asc.PIPE_M)

    assert "no M pipe" in trips(errors.EventError, k2, "asc.pipe_barrier(asc.PIPE_M)")


def test_an_unused_buffer_is_reported_and_its_twin_is_not():
    def k_for(use):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            tb = asc.TBuf(P.VECCALC)
            pipe.init_buffer(tb, N * 2)
            if use:
                asc.duplicate(tb.get(asc.half), 0.0, N)
        return k

    with pytest.warns(errors.UnusedBufferWarning, match="VECCALC tbuf0 got memory"):
        run(k_for(False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(k_for(True))


def _v_then_v(order):
    """V writes a TBuf, then V reads it, with auto_sync=False and ``order`` between (or, for
    "early_v_v", a V_V event set before the write and waited for after it)."""

    @asc.kernel(core="aiv", auto_sync=False)
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECCALC)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        t = tb.get(asc.half)
        if order == "early_v_v":
            asc.set_flag(E.V_V, 0)
        asc.duplicate(t, 1.0, N)
        if order == "early_v_v":
            asc.wait_flag(E.V_V, 0)
        elif order == "through_mte3":
            asc.set_flag(E.V_MTE3, 0)
            asc.wait_flag(E.V_MTE3, 0)
            asc.set_flag(E.MTE3_V, 0)
            asc.wait_flag(E.MTE3_V, 0)
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, t, 1.0, N)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)
    return k


def test_an_event_orders_one_pipe_only_across_its_set_and_its_wait():
    """A V_V event set before V's write orders nothing of that write; a chain V -> MTE3 -> V
    set after it orders it (the vector clocks carry V's count through MTE3)."""
    msg = trips(errors.DataRaceError, _v_then_v("early_v_v"), "asc.adds(c, t, 1.0, N)")
    assert "intra-pipeline race" in msg, msg
    z = np.zeros(N, np.float16)
    run(_v_then_v("through_mte3"), _x(), z)
    assert (z == 2).all()
