"""Mix kernels (:mod:`kernellab.npu.mix`): the AIC and both AIVs of a group through a GM
workspace and cross-core flags. One small kernel with a switch per fault: each fault is reported
for its reason, naming both cores and both lines; its correct twin passes and is timed."""

import dataclasses

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P
from kernellab.npu.examples import run_matmul_relu
from kernellab.npu.mix import CROSS_FLAG_IDS

FULL, FREE = 3, 4
TILES, ROWS, COLS = 3, 16, 32


def make(fault=None, slots=1):
    """``out[t] = 2 * (A @ B_t)`` for TILES tiles: the AIC writes each 16 x 32 float32 tile into
    one of ``slots`` workspace slots, each AIV doubles its 8 rows."""

    @asc.kernel(core="mix")
    def k(a, b, out, ws):
        pipe = asc.TPipe()
        if asc.core_type() == "aic":
            qa, qb = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
            qa2, qb2, qc = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1), asc.TQue(P.CO1, 1)
            for q, n in ((qa, 16 * 16 * 2), (qb, 16 * COLS * 2), (qa2, 16 * 16 * 2),
                         (qb2, 16 * COLS * 2), (qc, ROWS * COLS * 4)):
                pipe.init_buffer(q, 1, n)
            for t in range(TILES):
                a1, b1 = qa.alloc_tensor(asc.half), qb.alloc_tensor(asc.half)
                asc.data_copy(a1, a, nd2nz=(16, 16, 16))
                asc.data_copy(b1, b[t * 16 * COLS:], nd2nz=(16, COLS, COLS))
                qa.enque(a1)
                qb.enque(b1)
                a1, b1 = qa.deque(), qb.deque()
                a2, b2 = qa2.alloc_tensor(asc.half), qb2.alloc_tensor(asc.half)
                asc.load_data(a2, a1)
                asc.load_data(b2, b1, transpose=True)
                qa.free_tensor(a1)
                qb.free_tensor(b1)
                qa2.enque(a2)
                qb2.enque(b2)
                a2, b2 = qa2.deque(), qb2.deque()
                co = qc.alloc_tensor(asc.float32)
                asc.mmad(co, a2, b2, ROWS, COLS, 16, init=True)
                qa2.free_tensor(a2)
                qb2.free_tensor(b2)
                qc.enque(co)
                co = qc.deque()
                if t >= slots and fault != "no_free_wait":
                    asc.cross_core_wait_flag(FREE, pipe=asc.PIPE_FIX)
                asc.fixpipe(ws[(t % slots) * ROWS * COLS:], co, ROWS, COLS)
                if fault != "never_set":
                    asc.cross_core_set_flag(FULL, pipe=asc.PIPE_FIX)
                qc.free_tensor(co)
            if fault == "extra_set":
                asc.cross_core_set_flag(FULL, pipe=asc.PIPE_FIX)
            for _ in range(min(slots, TILES)):
                asc.cross_core_wait_flag(FREE, pipe=asc.PIPE_FIX)
            return
        half = ROWS // 2
        r0 = asc.get_sub_block_idx() * half
        qx, qy = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qx, 1, half * COLS * 4)
        pipe.init_buffer(qy, 1, half * COLS * 4)
        for t in range(TILES):
            x = qx.alloc_tensor(asc.float32)
            if fault != "no_full_wait":
                asc.cross_core_wait_flag(FULL, pipe=asc.PIPE_MTE2)
            asc.data_copy(x, ws[(t % slots) * ROWS * COLS + r0 * COLS:], half * COLS)
            qx.enque(x)
            x, y = qx.deque(), qy.alloc_tensor(asc.float32)
            asc.muls(y, x, 2.0, half * COLS)
            qx.free_tensor(x)
            qy.enque(y)
            y = qy.deque()
            asc.data_copy(out[(t * ROWS + r0) * COLS:], y, half * COLS)
            if not (fault == "one_aiv_frees" and asc.get_sub_block_idx() == 1):
                asc.cross_core_set_flag(FREE, pipe=asc.PIPE_MTE3)
            qy.free_tensor(y)
    return k


def run(fault=None, slots=1, machine=None):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((TILES, 16, COLS)).astype(np.float16)
    out = np.full((TILES, ROWS, COLS), np.nan, np.float32)
    ws = np.zeros(slots * ROWS * COLS, np.float32)
    res = npu.launch(make(fault, slots), 1, (A, B, out, ws), machine=machine)
    ref = 2 * np.einsum("ik,tkj->tij", A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    return res


@pytest.mark.parametrize("slots", [1, 2])
def test_the_correct_kernel_computes_and_shows_both_kinds_of_core(slots):
    res = run(slots=slots)
    assert res.core_type == "mix" and res.cores_used == 1
    assert res.trace.core_names() == ["aic0", "aiv0", "aiv1"]
    busy = {pc["core"]: pc["busy"] for pc in res.per_core}
    assert busy["aic0"]["M"] > 0 and busy["aic0"]["V"] == 0
    assert busy["aiv0"]["V"] > 0 and busy["aiv1"]["V"] > 0 and busy["aiv0"]["M"] == 0
    assert 0 < res.cube_busy_pct < 100 and 0 < res.vector_busy_pct < 100
    assert "mix: 1 group(s) of 1 AIC + 2 AIV" in res.summary()
    # the three cores' records, and each one alone
    assert len(res.records(0)) == sum(len(res.records(0, c)) for c in ("aic", "aiv0", "aiv1"))
    with pytest.raises(ValueError):
        res.records(0, "aiv2")


def test_two_runs_give_the_same_cycles_and_trace_hash():
    a, b = run(slots=2), run(slots=2)
    assert (a.cycles, a.trace_hash) == (b.cycles, b.trace_hash)


def test_each_vector_read_waits_for_the_cube_s_flag_in_the_timing():
    res = run()
    ev = res.trace.events
    fix = sorted(e for e in ev if e.core == 0 and e.op == "fixpipe")
    for core in (1, 2):
        reads = sorted(e for e in ev if e.core == core and e.op == "data_copy"
                       and e.pipe == "MTE2")
        assert len(reads) == TILES
        for f, r in zip(fix, reads):
            # the set fires once the fixpipe's data is visible, and travels cross_flag_latency
            assert r.start >= f.visible + res.machine.cross_flag_latency


def test_a_second_slot_lets_the_cube_run_ahead():
    assert run(slots=2).cycles < run(slots=1).cycles


def test_a_slower_cross_core_flag_never_makes_the_kernel_faster():
    res = run(slots=2)
    slow = npu.retime(res, dataclasses.replace(res.machine, cross_flag_latency=1500))
    fast = npu.retime(res, dataclasses.replace(res.machine, cross_flag_latency=0))
    assert fast.cycles <= res.cycles < slow.cycles


def test_a_vector_read_with_no_flag_is_a_cross_core_race_naming_both_lines():
    with pytest.raises(errors.DataRaceError) as e:
        run("no_full_wait")
    msg = str(e.value)
    assert "cross-core data race on GM 'ws'" in msg
    assert "the AIV0's MTE2 reads them in data_copy" in msg
    assert "the AIC's FIX wrote them in fixpipe at test_npu_mix.py:" in msg
    assert "asc.cross_core_set_flag(id, pipe=asc.PIPE_FIX)" in msg


def test_refilling_a_slot_before_the_vector_drained_it_is_a_race():
    with pytest.raises(errors.DataRaceError, match="cross-core data race on GM 'ws'"):
        run("no_free_wait")


@pytest.mark.parametrize("fault", ["never_set", "one_aiv_frees"])
def test_a_wait_nothing_will_satisfy_is_a_deadlock_naming_the_waits(fault):
    with pytest.raises(errors.DeadlockError, match="waits for cross-core flag"):
        run(fault)


def test_a_set_never_waited_for_is_unpaired():
    with pytest.raises(errors.UnpairedFlagError, match=r"flag 3 for the AIV0, set at"):
        run("extra_set")


def test_one_flag_id_is_set_and_waited_on_from_one_pipe_each():
    @asc.kernel(core="mix")
    def two_pipes(x):
        if asc.core_type() == "aiv":
            asc.cross_core_set_flag(5, pipe=asc.PIPE_MTE3)
            asc.cross_core_set_flag(5, pipe=asc.PIPE_MTE2)
        else:
            asc.cross_core_wait_flag(5, pipe=asc.PIPE_FIX)
            asc.cross_core_wait_flag(5, pipe=asc.PIPE_FIX)

    with pytest.raises(errors.EventError, match="already used flag 5 on PIPE_MTE3"):
        npu.launch(two_pipes, 1, (np.zeros(16, np.float32),))


def test_cross_core_flags_that_cannot_exist_are_refused():
    @asc.kernel(core="aiv")
    def plain(x):
        asc.cross_core_set_flag(0, pipe=asc.PIPE_MTE3)

    with pytest.raises(errors.EventError, match="needs a mix kernel"):
        npu.launch(plain, 1, (np.zeros(16, np.float32),))
    for kwargs, words in (({"flag_id": CROSS_FLAG_IDS, "pipe": asc.PIPE_MTE3}, "0 to 10"),
                          ({"flag_id": 0, "pipe": asc.PIPE_M}, "must be one of an AIV"),
                          ({"flag_id": 0, "pipe": asc.PIPE_ALL}, "not PIPE_S or PIPE_ALL"),
                          ({"flag_id": 0, "pipe": asc.PIPE_MTE3, "mode": 0}, "not model")):
        @asc.kernel(core="mix")
        def bad(x, kw=kwargs):
            if asc.core_type() == "aiv":
                asc.cross_core_set_flag(**kw)

        with pytest.raises(errors.EventError, match=words):
            npu.launch(bad, 1, (np.zeros(16, np.float32),))


def test_the_example_mix_kernel_is_checked_and_its_profile_has_both_kinds(tmp_path):
    res = run_matmul_relu(64, 128, 64, block_dim=2)
    assert res.trace.core_names() == ["aic0", "aiv0", "aiv1", "aic1", "aiv2", "aiv3"]
    from kernellab.npu import profile

    info = profile.op_basic_info(res)[0]
    assert info["Op Type"] == "MIX_AIC" and info["Mix Block Dim"] == 4
    rows = profile.pipe_utilization(res)
    assert [r["sub_block_id"] for r in rows] == ["aic0", "aiv0", "aiv1", "aic1", "aiv2", "aiv3"]
    assert rows[0]["aic_cube_ratio"] > 0 and rows[1]["aiv_vec_ratio"] > 0
    mem = profile.memory(res)
    assert mem[0]["L0C_to_GM_datas(KB)"] > 0 and mem[1]["GM_to_UB_datas(KB)"] > 0
    assert len(res.profile_csv(tmp_path)) == 3
