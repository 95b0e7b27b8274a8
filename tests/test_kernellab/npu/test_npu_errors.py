"""The NPU error model: one small kernel per error class that must trip it, and
its correct twin that must not. Every message names the user's source line."""

import warnings

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P
from kernellab.npu.record import Record, WAIT
from kernellab.npu.timing import BlockStream, replay

N = 128  # fp16 elements = 256 B


def _x():
    return np.arange(N, dtype=np.float16)


def run(kernel, *args, **kw):
    args = args or (_x(), np.zeros(N, np.float16))
    return npu.launch(kernel, kw.pop("block_dim", 1), args, **kw)


def trips(exc, kernel, *args, line=None, **kw):
    with pytest.raises(exc) as info:
        run(kernel, *args, **kw)
    msg = str(info.value)
    assert isinstance(info.value, errors.NPUError)
    if line is not None:
        assert "test_npu_errors.py:" in msg and line in msg, msg
    return msg


def vec_copy(*, bad=None, nbytes=N * 2, num=1):
    """x -> VECIN -> (adds 0) -> VECOUT -> z, with one optional bug."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, num, nbytes)
        pipe.init_buffer(qo, 1, N * 2)
        a = qi.alloc_tensor(asc.half)
        asc.data_copy(a, x, N)
        if bad == "write_after_enque":
            qi.enque(a)
            asc.data_copy(a, x, N)  # BUG: write after enque
        if bad == "use_before_deque":
            c = qo.alloc_tensor(asc.half)
            asc.adds(c, a, 0.0, N)  # BUG: V reads a before enque/deque
        qi.enque(a) if bad != "write_after_enque" else None
        a = qi.deque()
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, a, 0.0, N)
        qi.free_tensor(a)
        if bad == "use_after_free":
            asc.adds(c, a, 1.0, N)  # BUG: a was freed
        if bad == "double_free":
            qi.free_tensor(a)  # BUG
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        if bad != "leak":
            qo.free_tensor(c)
        if bad == "deadlock":
            qi.alloc_tensor(asc.half)
            qi.alloc_tensor(asc.half)  # BUG: the only block is held, nothing can free it

    return k


def test_correct_twin_of_the_queue_kernels_runs():
    z = np.zeros(N, np.float16)
    res = run(vec_copy(), _x(), z)
    assert (z == _x()).all() and res.warnings == []


def test_ub_overflow_with_allocation_table():
    msg = trips(errors.UBOverflowError, vec_copy(nbytes=200_000), line="init_buffer")
    assert "allocation" in msg and "196352" in msg and "VECIN q0[0]" in msg
    trips(errors.UBOverflowError, vec_copy(nbytes=8192, num=2), machine="tiny")
    run(vec_copy(nbytes=4096, num=2), machine="tiny")  # twin: fits in 16 KiB


def test_l0a_overflow():
    def k_for(nbytes):
        @asc.kernel(core="aic")
        def k(x, z):
            pipe = asc.TPipe()
            q = asc.TQue(P.A2, 1)
            pipe.init_buffer(q, 2, nbytes)
        return k

    msg = trips(errors.L0AOverflowError, k_for(40_000))
    assert "L0A overflow" in msg and "65536" in msg
    run(k_for(32_768))
    assert issubclass(errors.L0COverflowError, errors.BufferOverflowError)


def test_alignment_data_copy_length_and_twin_with_pad():
    def k_for(copy):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            q = asc.TQue(P.VECIN, 1)
            pipe.init_buffer(q, 1, 256)
            t = q.alloc_tensor(asc.half)
            copy(t, x, 100)  # 200 B: not a multiple of 32 B
            q.free_tensor(t)
        return k

    msg = trips(errors.AlignmentError, k_for(asc.data_copy), line="copy(t, x, 100)")
    assert "data_copy_pad" in msg
    run(k_for(asc.data_copy_pad))


def test_alignment_vector_operand():
    def k_for(off):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            tb = asc.TBuf(P.VECCALC)
            pipe.init_buffer(tb, 1024)
            t = tb.get(asc.half)
            asc.duplicate(t, 1.0, 256)
            asc.adds(t[off:], t[off:], 1.0, 64)
        return k

    trips(errors.AlignmentError, k_for(3), line="adds")
    run(k_for(16))  # 32 B


def test_illegal_paths_and_positions():
    @asc.kernel(core="aic")
    def gm_to_l0(x, z):
        pipe = asc.TPipe()
        q = asc.TQue(P.A2, 1)
        pipe.init_buffer(q, 1, 512)
        t = q.alloc_tensor(asc.half)
        asc.data_copy(t, x, N)  # BUG: DataCopy has no GM->L0A path (Load2D has one)

    msg = trips(errors.PositionError, gm_to_l0, line="data_copy")
    assert "does not move GM->L0A" in msg and "Load2D" in msg and "not model" in msg

    @asc.kernel(core="aic")
    def gm_to_l1(x, z):
        pipe = asc.TPipe()
        q = asc.TQue(P.A1, 1)
        pipe.init_buffer(q, 1, 512)
        t = q.alloc_tensor(asc.half)
        asc.data_copy(t, x, N)
        q.free_tensor(t)

    run(gm_to_l1)

    @asc.kernel(core="aic")
    def ub_on_aic(x, z):
        pipe = asc.TPipe()
        q = asc.TQue(P.VECIN, 1)
        pipe.init_buffer(q, 1, 512)  # BUG: an AIC has no UB

    assert "AIV" in trips(errors.PositionError, ub_on_aic)


def test_use_before_deque():
    msg = trips(errors.UseBeforeDequeError, vec_copy(bad="use_before_deque"), line="adds")
    assert "ALLOCATED" in msg


def test_write_after_enque():
    trips(errors.WriteAfterEnqueError, vec_copy(bad="write_after_enque"),
          line="asc.data_copy(a, x, N)")


def test_use_after_free():
    msg = trips(errors.UseAfterFreeError, vec_copy(bad="use_after_free"), line="adds(c, a, 1.0")
    assert "freed at test_npu_errors.py:" in msg


def test_double_free():
    trips(errors.DoubleFreeError, vec_copy(bad="double_free"), line="free_tensor")


def test_queue_deadlock():
    msg = trips(errors.QueueDeadlockError, vec_copy(bad="deadlock"), line="alloc_tensor")
    assert "holders" in msg

    @asc.kernel(core="aiv")
    def empty_deque(x, z):
        pipe = asc.TPipe()
        q = asc.TQue(P.VECIN, 1)
        pipe.init_buffer(q, 1, 256)
        q.deque()  # BUG: nothing enqueued

    trips(errors.QueueDeadlockError, empty_deque, line="deque")


def test_leak():
    msg = trips(errors.LeakError, vec_copy(bad="leak"))
    assert "VECOUT" in msg and "test_npu_errors.py:" in msg


def test_multiple_pipes():
    @asc.kernel
    def k(x, z):
        asc.TPipe()
        asc.TPipe()

    trips(errors.MultiplePipeError, k, line="asc.TPipe()")


def _vec_kernel(count, dtype2):
    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECCALC)
        pipe.init_buffer(tb, 2048)
        a = tb.get_with_offset(asc.half, 128, 0)
        b = tb.get_with_offset(dtype2, 128, 1024)
        asc.duplicate(a, 1.0, 128)
        asc.duplicate(b, 1.0, 128)
        asc.add(a, a, b, count)
    return k


def test_shape_and_dtype():
    trips(errors.ShapeError, _vec_kernel(129, asc.half), line="asc.add")
    trips(errors.DTypeError, _vec_kernel(128, asc.float32), line="asc.add")
    run(_vec_kernel(128, asc.half))


def test_out_of_bounds_gm():
    def k_for(off):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            q = asc.TQue(P.VECIN, 1)
            pipe.init_buffer(q, 1, 256)
            t = q.alloc_tensor(asc.half)
            asc.data_copy(t, x[off:], 128)
            q.free_tensor(t)
        return k

    trips(errors.OutOfBoundsError, k_for(16), line="data_copy")
    run(k_for(0))


def test_multi_core_write_conflict():
    def k_for(stride):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            q = asc.TQue(P.VECOUT, 1)
            pipe.init_buffer(q, 1, 64)
            t = q.alloc_tensor(asc.half)
            asc.duplicate(t, float(asc.get_block_idx()), 32)
            q.enque(t)
            t = q.deque()
            asc.data_copy(z[asc.get_block_idx() * stride:], t, 32)
            q.free_tensor(t)
        return k

    z = np.zeros(N, np.float16)
    msg = trips(errors.MultiCoreWriteConflict, k_for(16), _x(), z, block_dim=4)
    assert "blocks 0 and 1" in msg and "'z'" in msg
    assert (z == 0).all()  # not written back
    run(k_for(32), _x(), z, block_dim=4)
    assert (z == np.repeat(np.arange(4), 32)).all()


def test_uninitialised_read_sentinel():
    def k_for(init):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            tb = asc.TBuf(P.VECCALC)
            qo = asc.TQue(P.VECOUT, 1)
            pipe.init_buffer(tb, N * 2)
            pipe.init_buffer(qo, 1, N * 2)
            t = tb.get(asc.half)
            if init:
                asc.duplicate(t, 0.0, N)
            c = qo.alloc_tensor(asc.half)
            asc.adds(c, t, 1.0, N)
            qo.enque(c)
            c = qo.deque()
            asc.data_copy(z, c, N)
            qo.free_tensor(c)
        return k

    z = np.zeros(N, np.float16)
    with pytest.warns(errors.UninitializedReadWarning, match="uninitialised"):
        res = run(k_for(False), _x(), z)
    assert np.isnan(z).all()  # the sentinel reads as NaN
    assert len(res.warnings) == 1
    trips(errors.UninitializedReadError, k_for(False), strict=True, line="adds")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(k_for(True), _x(), z, strict=True)
    assert (z == 1).all()


def test_phase_b_deadlock_names_the_pipe_heads():
    rec = Record(4, WAIT, "wait_flag", 1, key=("MTE2_V", 0, 0), src="k.py:7")
    with pytest.raises(errors.DeadlockError, match="pipe V: wait_flag"):
        replay([BlockStream(0, [rec], 1)], npu.get_machine(), 48)


def test_every_error_class_subclasses_npu_error():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.NPUError)


# ---- TBuf shared between pipes: the ordering check and the timing that honours it ------------
def _events(res, op, pipe):
    return [e for e in res.trace.events if e.op == op and e.pipe == pipe]


def tbuf_vec(bad=None):
    """x -> TBuf (MTE2) -> adds 1 (V) -> VECOUT -> z, ordered by a barrier unless ``bad``."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECIN)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        a = tb.get(asc.half)
        asc.data_copy(a, x, N)
        if bad != "no_barrier":
            asc.pipe_barrier(asc.PIPE_ALL)
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, a, 1.0, N)
        if bad == "overwrite":
            asc.data_copy(a, x, N)  # BUG: MTE2 refills the TBuf V just read, unordered
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)
    return k


def tbuf_tiles(order_refills):
    """Four tiles through one TBuf: copy in (MTE2), a barrier, add (V), copy out. With
    ``order_refills`` a barrier before each refill orders it after the previous tile's add, and
    after the loop one last refill is read with nothing ordering it; without, the second
    tile's refill races with the first tile's add."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECIN)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        a = tb.get(asc.half)
        for _ in range(4):
            if order_refills:
                asc.pipe_barrier(asc.PIPE_ALL)
            asc.data_copy(a, x, N)
            asc.pipe_barrier(asc.PIPE_ALL)
            c = qo.alloc_tensor(asc.half)
            asc.adds(c, a, 1.0, N)
            qo.enque(c)
            c = qo.deque()
            asc.data_copy(z, c, N)
            qo.free_tensor(c)
        if order_refills:
            asc.pipe_barrier(asc.PIPE_ALL)
            asc.data_copy(a, x, N)
            c = qo.alloc_tensor(asc.half)
            asc.adds(c, a, 2.0, N)                   # BUG: no barrier after this refill
            qo.free_tensor(c)
    return k


def test_tbuf_read_after_write_across_pipes_needs_ordering():
    msg = trips(errors.DataRaceError, tbuf_vec("no_barrier"), line="asc.adds(c, a, 1.0, N)")
    # both pipes, both calls, both source lines (with their code)
    assert "V reads them in adds" in msg and "MTE2 wrote them in data_copy" in msg, msg
    assert "asc.data_copy(a, x, N)" in msg and msg.count("test_npu_errors.py:") == 2, msg
    assert "pipe_barrier(asc.PIPE_ALL)" in msg and errors.DataRaceError.kind == "data-race"
    z = np.zeros(N, np.float16)
    res = run(tbuf_vec(), _x(), z)
    np.testing.assert_array_equal(z, _x() + 1)
    # the timing waits for the producer: the add starts after the copy's data is visible
    (cp,), (add,) = [e for e in _events(res, "data_copy", "MTE2")], _events(res, "adds", "V")
    assert add.start >= cp.visible > cp.end


def test_tbuf_write_after_read_across_pipes_needs_ordering():
    msg = trips(errors.DataRaceError, tbuf_vec("overwrite"), line="asc.data_copy(a, x, N)")
    assert "MTE2 writes them in data_copy" in msg and "V read them in adds" in msg, msg
    assert "overwrite them before V has read them" in msg and "free_tensor" in msg, msg


def test_tbuf_race_between_two_passes_of_a_loop_names_the_passes():
    k = tbuf_tiles(order_refills=False)
    msg = trips(errors.DataRaceError, k, line="asc.data_copy(a, x, N)")
    assert "MTE2 writes them in data_copy here (pass 2 of this line in block 0)" in msg, msg
    assert "V read them in adds at" in msg and "(pass 1)" in msg, msg
    assert ("The data_copy here is a later run of its line than the adds (a loop's next "
            "pass, or another call): it is not ordered after the earlier run's adds.") in msg, msg
    # one pass, the same race shape: no word of passes
    one = trips(errors.DataRaceError, tbuf_vec("overwrite"), line="asc.data_copy(a, x, N)")
    assert "a later run of its line" not in one, one


def test_tbuf_write_by_v_then_copy_out_by_mte3_needs_ordering():
    def k_for(barrier):
        @asc.kernel(core="aiv")
        def k(x, z):
            pipe = asc.TPipe()
            qi = asc.TQue(P.VECIN, 1)
            tb = asc.TBuf(P.VECOUT)
            pipe.init_buffer(qi, 1, N * 2)
            pipe.init_buffer(tb, N * 2)
            a = qi.alloc_tensor(asc.half)
            asc.data_copy(a, x, N)
            qi.enque(a)
            a = qi.deque()
            c = tb.get(asc.half)
            asc.muls(c, a, 2.0, N)
            qi.free_tensor(a)
            if barrier:
                asc.pipe_barrier(asc.PIPE_ALL)
            asc.data_copy(z, c, N)
        return k

    msg = trips(errors.DataRaceError, k_for(False), line="asc.data_copy(z, c, N)")
    assert "MTE3 reads them in data_copy" in msg and "V wrote them in muls" in msg, msg
    assert "asc.muls(c, a, 2.0, N)" in msg, msg
    z = np.zeros(N, np.float16)
    res = run(k_for(True), _x(), z)
    np.testing.assert_array_equal(z, _x() * 2)
    (mul,), (out,) = _events(res, "muls", "V"), _events(res, "data_copy", "MTE3")
    assert out.start >= mul.end


def test_a_queue_event_orders_a_tbuf_too():
    """A set_flag fires after everything earlier on its pipe: a TBuf written by MTE2 before a
    VECIN enque is ordered before V's reads after the deque (no error, and the add waits)."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECIN)
        qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 2)
        pipe.init_buffer(qi, 1, N * 2)
        pipe.init_buffer(qo, 1, N * 2)
        b = tb.get(asc.half)
        asc.data_copy(b, x, N)            # MTE2 -> TBuf, before the enque
        a = qi.alloc_tensor(asc.half)
        asc.data_copy(a, x, N)
        qi.enque(a)
        a = qi.deque()
        c = qo.alloc_tensor(asc.half)
        asc.add(c, a, b, N)               # V reads the TBuf after the deque: ordered
        qi.free_tensor(a)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)

    z = np.zeros(N, np.float16)
    res = run(k, _x(), z)
    np.testing.assert_array_equal(z, _x() * 2)
    first = _events(res, "data_copy", "MTE2")[0]
    assert _events(res, "add", "V")[0].start >= first.visible


def test_tbuf_halves_used_by_two_pipes_at_once_are_fine():
    """Ping-pong inside one TBuf: MTE2 fills half 1 while V reads half 0 (ordered by the
    barrier before), only byte ranges that overlap are compared."""

    @asc.kernel(core="aiv")
    def k(x, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECCALC)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, N * 4)
        pipe.init_buffer(qo, 1, N * 2)
        h0, h1 = tb.get_with_offset(asc.half, N, 0), tb.get_with_offset(asc.half, N, N * 2)
        asc.data_copy(h0, x, N)
        asc.pipe_barrier(asc.PIPE_ALL)
        asc.data_copy(h1, x, N)           # MTE2 on half 1 ...
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, h0, 0.0, N)           # ... while V reads half 0
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, N)
        qo.free_tensor(c)

    z = np.zeros(N, np.float16)
    run(k, _x(), z)
    np.testing.assert_array_equal(z, _x())


def tbuf_mm(where, barrier):
    """A 16x16x16 fp16 matmul with the L1 (``where="L1"``) or L0 (``"L0"``) operands in TBufs,
    ordered by a barrier or not."""
    nb = 16 * 16 * 2

    @asc.kernel(core="aic")
    def k(a, b, c):
        pipe = asc.TPipe()
        if where == "L1":
            ta, tb = asc.TBuf(P.A1), asc.TBuf(P.B1)
            qa, qb = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1)
        else:
            qa, qb = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
            ta, tb = asc.TBuf(P.A2), asc.TBuf(P.B2)
        qc = asc.TQue(P.CO1, 1)
        for buf in (ta, tb):
            pipe.init_buffer(buf, nb)
        for q in (qa, qb):
            pipe.init_buffer(q, 1, nb)
        pipe.init_buffer(qc, 1, 16 * 16 * 4)
        if where == "L1":
            a1, b1 = ta.get(asc.half), tb.get(asc.half)
            asc.data_copy(a1, a, nd2nz=(16, 16, 16))
            asc.data_copy(b1, b, nd2nz=(16, 16, 16))
            if barrier:
                asc.pipe_barrier(asc.PIPE_ALL)
            a2, b2 = qa.alloc_tensor(asc.half), qb.alloc_tensor(asc.half)
            asc.load_data(a2, a1)
            asc.load_data(b2, b1, transpose=True)
            qa.enque(a2)
            qb.enque(b2)
            a2, b2 = qa.deque(), qb.deque()
        else:
            a1, b1 = qa.alloc_tensor(asc.half), qb.alloc_tensor(asc.half)
            asc.data_copy(a1, a, nd2nz=(16, 16, 16))
            asc.data_copy(b1, b, nd2nz=(16, 16, 16))
            qa.enque(a1)
            qb.enque(b1)
            a1, b1 = qa.deque(), qb.deque()
            a2, b2 = ta.get(asc.half), tb.get(asc.half)
            asc.load_data(a2, a1)
            asc.load_data(b2, b1, transpose=True)
            if barrier:
                asc.pipe_barrier(asc.PIPE_ALL)
        co = qc.alloc_tensor(asc.float32)
        asc.mmad(co, a2, b2, 16, 16, 16)
        if where == "L1":
            qa.free_tensor(a2)
            qb.free_tensor(b2)
        else:
            qa.free_tensor(a1)
            qb.free_tensor(b1)
        qc.enque(co)
        co = qc.deque()
        asc.fixpipe(c, co, 16, 16)
        qc.free_tensor(co)
    return k


@pytest.mark.parametrize("where,line,now,before", [
    ("L1", "asc.load_data(a2, a1)", "MTE1 reads them in load_data", "MTE2 wrote them in data_copy"),
    ("L0", "asc.mmad(co, a2, b2, 16, 16, 16)", "M reads them in mmad",
     "MTE1 wrote them in load_data"),
])
def test_cube_operands_in_a_tbuf_need_ordering(where, line, now, before):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    C = np.zeros((16, 16), np.float32)
    msg = trips(errors.DataRaceError, tbuf_mm(where, False), A, B, C, line=line)
    assert now in msg and before in msg, msg
    res = run(tbuf_mm(where, True), A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-3,
                               atol=1e-3)
    # the cube starts after both operands' loads (and the L1 copies) are done
    mm = _events(res, "mmad", "M")[0]
    assert mm.start >= max(e.end for e in _events(res, "load_data", "MTE1"))
    assert mm.start >= max(e.visible for e in _events(res, "data_copy", "MTE2"))


def test_pipe_barrier_arguments():
    @asc.kernel(core="aiv")
    def k(x, z):
        asc.pipe_barrier(asc.PIPE_V)       # one pipe: in order already, accepted
        asc.pipe_barrier("PIPE_EVERYTHING")

    trips(errors.ShapeError, k, line='asc.pipe_barrier("PIPE_EVERYTHING")')


def test_load_data_needs_nz_bytes_in_l1():
    """A 1-D data_copy into L1 leaves ND rows; an L1 view that an earlier nd2nz copy shaped
    must not let load_data read them as fractals (that skips the nd2nz bursts' cost)."""

    def k_for(one_d):
        @asc.kernel(core="aic")
        def k(a, z):
            pipe = asc.TPipe()
            tb = asc.TBuf(P.A1)
            qa = asc.TQue(P.A2, 1)
            pipe.init_buffer(tb, 32 * 16 * 2)
            pipe.init_buffer(qa, 1, 32 * 16 * 2)
            a1 = tb.get(asc.half)
            asc.data_copy(a1, a, nd2nz=(32, 16, 16))
            if one_d:
                asc.data_copy(a1, a, 32 * 16)        # BUG: ND rows into the NZ-shaped view
            else:
                asc.data_copy(a1, a, nd2nz=(32, 16, 16))
            asc.pipe_barrier(asc.PIPE_ALL)
            a2 = qa.alloc_tensor(asc.half)
            asc.load_data(a2, a1)
            qa.free_tensor(a2)
        return k

    a = np.arange(32 * 16, dtype=np.float16)
    msg = trips(errors.ShapeError, k_for(True), a, np.zeros(1, np.float16),
                line="asc.load_data(a2, a1)")
    assert "1-D data_copy" in msg and "nd2nz" in msg
    run(k_for(False), a, np.zeros(1, np.float16))


def test_tbuf_history_through_a_loop():
    """Ordered refills of one TBuf, tile after tile, then one unordered read: found."""
    k = tbuf_tiles(order_refills=True)
    msg = trips(errors.DataRaceError, k, line="asc.adds(c, a, 2.0, N)")
    # the race is with the last refill, not an older, ordered one
    assert "MTE2 wrote them in data_copy" in msg, msg


def test_dma_into_a_vecout_tensor_is_a_queue_protocol_error_not_a_path_error():
    """GM->UB is one path whatever the UB position; MTE2 writing a VECOUT queue's tensor
    breaks the queue protocol (that queue orders V before MTE3 only)."""

    @asc.kernel(core="aiv")
    def gm_into_vecout(x, z):
        pipe = asc.TPipe()
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qo, 1, N * 2)
        c = qo.alloc_tensor(asc.half)
        asc.data_copy(c, x, N)  # BUG: MTE2 writes what the VECOUT queue hands V -> MTE3

    msg = trips(errors.QueueRoleError, gm_into_vecout, line="asc.data_copy(c, x, N)")
    assert "MTE2 writes a VECOUT tensor" in msg and "not the problem" in msg
    assert errors.QueueRoleError.kind == "queue-role"


def test_a_scalar_operand_is_one_number_never_an_array():
    """An array where a scalar register goes would move data the vector unit never read."""
    for call in (lambda o, a: asc.duplicate(o, np.ones(16, np.float16), 16),
                 lambda o, a: asc.adds(o, a, np.ones(16, np.float16), 16),
                 lambda o, a: asc.muls(o, a, np.ones(16, np.float16), 16, 1,
                                       asc.UnaryRepeatParams())):
        @asc.kernel(core="aiv")
        def k(x, fn=call):
            pipe = asc.TPipe()
            t = asc.TBuf(P.VECCALC)
            pipe.init_buffer(t, 64)
            a, o = t.get(asc.half, 16), t.get_with_offset(asc.half, 16, 32)
            asc.duplicate(a, np.float16(1.5), 16)          # a NumPy scalar is one number
            fn(o, a)

        with pytest.raises(errors.ShapeError, match="the scalar operand is one number"):
            npu.launch(k, 1, (np.zeros(16, np.float16),))


def test_only_the_dtypes_own_nan_counts_as_a_blank_array():
    from kernellab.npu.launch import ArrayInfo

    assert ArrayInfo(0, "w", np.full(8, np.nan, np.float32)).blank_start
    assert ArrayInfo(0, "w", np.zeros(8, np.float16)).blank_start
    payload = (np.arange(8, dtype=np.uint32) | 0x7F810000).view(np.float32)  # NaNs with data
    assert np.isnan(payload).all() and not ArrayInfo(0, "w", payload).blank_start
