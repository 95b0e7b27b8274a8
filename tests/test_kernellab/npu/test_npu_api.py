"""The NPU student API, functional phase: results, records, queue lowering,
RunResult, trace exports."""

import json

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P
from kernellab.npu.examples import run_add, run_matmul
from kernellab.npu.record import PIPES, SET, WAIT


@pytest.mark.parametrize("n,blocks,tile,bufs", [
    (4096, 1, 1024, 1), (4096, 1, 1024, 2), (1, 1, 1024, 2), (33, 3, 16, 2),
    (1000, 7, 128, 2), (100_003, 48, 1024, 2), (5000, 8, 256, 1)])
def test_vector_add_is_exact_for_any_length(n, blocks, tile, bufs):
    res = run_add(n, blocks, tile_len=tile, buffer_num=bufs)  # asserts z == x + y
    assert res.cycles > 0 and res.block_dim == blocks


def test_vector_add_blocks_beyond_the_cores_run_in_waves():
    one = run_add(8 * 4096, 4, tile_len=1024, machine="tiny")
    two = run_add(8 * 4096, 8, tile_len=1024, machine="tiny")  # 8 blocks on 4 AIVs
    assert {e.core for e in two.trace} == {0, 1, 2, 3}
    blocks_on_0 = sorted({e.block for e in two.trace if e.core == 0})
    assert blocks_on_0 == [0, 4]
    assert two.cores_used == 4 and one.cores_used == 4


@pytest.mark.parametrize("M,N,K", [(128, 128, 128), (100, 70, 50), (16, 16, 16), (33, 200, 300)])
def test_cube_matmul_matches_float64(M, N, K):
    res = run_matmul(M, N, K, base_m=64, base_n=64, base_k=32, l1_k=64)
    assert res.flops["cube"] == 2 * M * N * K


def test_cube_matmul_multi_core():
    res = run_matmul(256, 256, 128, block_dim=4)
    assert res.cores_used == 4 and len({e.core for e in res.trace}) == 4


def _vec_kernel(op, n, dtype=np.float16):
    @asc.kernel(core="aiv")
    def k(x, y, z):
        pipe = asc.TPipe()
        qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, 2, n * 4)
        pipe.init_buffer(qo, 1, n * 4)
        a, b = qi.alloc_tensor(dtype), qi.alloc_tensor(dtype)
        asc.data_copy(a, x, n)
        asc.data_copy(b, y, n)
        qi.enque(a)
        a = qi.deque()
        qi.enque(b)
        b = qi.deque()
        c = qo.alloc_tensor(dtype)
        op(c, a, b)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, n)
        qo.free_tensor(c)
        qi.free_tensor(a)
        qi.free_tensor(b)
    return k


VEC_CASES = [
    ("add", lambda c, a, b: asc.add(c, a, b, 64), lambda x, y: x + y),
    ("sub", lambda c, a, b: asc.sub(c, a, b, 64), lambda x, y: x - y),
    ("mul", lambda c, a, b: asc.mul(c, a, b, 64), lambda x, y: x * y),
    ("div", lambda c, a, b: asc.div(c, a, b, 64), lambda x, y: x / y),
    ("max", lambda c, a, b: asc.max(c, a, b, 64), np.maximum),
    ("min", lambda c, a, b: asc.min(c, a, b, 64), np.minimum),
    ("adds", lambda c, a, b: asc.adds(c, a, 1.5, 64), lambda x, y: x + np.float16(1.5)),
    ("muls", lambda c, a, b: asc.muls(c, a, 3.0, 64), lambda x, y: x * np.float16(3)),
    ("exp", lambda c, a, b: asc.exp(c, a, 64), lambda x, y: np.exp(x.astype(np.float32))),
    ("abs", lambda c, a, b: asc.abs(c, a, 64), lambda x, y: np.abs(x)),
    ("relu", lambda c, a, b: asc.relu(c, a, 64), lambda x, y: np.maximum(x, 0)),
    ("sqrt", lambda c, a, b: asc.sqrt(c, b, 64), lambda x, y: np.sqrt(y.astype(np.float32))),
    ("rsqrt", lambda c, a, b: asc.rsqrt(c, b, 64), lambda x, y: 1 / np.sqrt(y.astype(np.float32))),
    ("ln", lambda c, a, b: asc.ln(c, b, 64), lambda x, y: np.log(y.astype(np.float32))),
    ("reciprocal", lambda c, a, b: asc.reciprocal(c, b, 64), lambda x, y: 1 / y.astype(np.float32)),
    ("duplicate", lambda c, a, b: asc.duplicate(c, 2.5, 64), lambda x, y: np.full(64, 2.5)),
]


@pytest.mark.parametrize("name,op,ref", VEC_CASES, ids=[c[0] for c in VEC_CASES])
def test_vector_ops_round_like_numpy(name, op, ref):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(64).astype(np.float16)
    y = (rng.random(64) + 0.5).astype(np.float16)
    z = np.zeros(64, np.float16)
    npu.launch(_vec_kernel(op, 64), 1, (x, y, z))
    np.testing.assert_array_equal(z, np.asarray(ref(x, y)).astype(np.float16))


def test_cast_and_reductions():
    n = 256

    @asc.kernel(core="aiv")
    def k(x, s, out32, out16):
        pipe = asc.TPipe()
        qi = asc.TQue(P.VECIN, 1)
        pipe.init_buffer(qi, 1, n * 2)
        tb = asc.TBuf(P.VECCALC)
        pipe.init_buffer(tb, n * 4 + 64)
        qo, qo2 = asc.TQue(P.VECOUT, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qo, 1, n * 4)
        pipe.init_buffer(qo2, 1, 32)
        a = qi.alloc_tensor(asc.half)
        asc.data_copy(a, x, n)
        qi.enque(a)
        a = qi.deque()
        w = tb.get(asc.float32, n)
        asc.cast(w, a, "none", n)
        o = qo.alloc_tensor(asc.float32)
        asc.muls(o, w, 2.0, n)
        qo.enque(o)
        o = qo.deque()
        asc.data_copy(out32, o, n)
        qo.free_tensor(o)
        r = qo2.alloc_tensor(asc.half)
        asc.duplicate(r, 0.0, 16)
        asc.reduce_max(r, a, tb.get_with_offset(asc.half, 16, n * 4), n)   # dst, src, tmp
        qo2.enque(r)
        r = qo2.deque()
        asc.data_copy(out16, r, 16)
        qo2.free_tensor(r)
        qi.free_tensor(a)

    x = np.random.default_rng(2).standard_normal(n).astype(np.float16)
    out32 = np.zeros(n, np.float32)
    out16 = np.zeros(16, np.float16)
    npu.launch(k, 1, (x, None, out32, out16))
    np.testing.assert_array_equal(out32, x.astype(np.float32) * 2)
    assert out16[0] == x.max()


def test_records_lower_queues_to_the_four_vector_events():
    res = run_add(4096, 1, tile_len=1024, buffer_num=2)
    recs = res._blocks[0].records
    sets = {(PIPES[r.pipe], r.key[0]) for r in recs if r.kind == SET}
    waits = {(PIPES[r.pipe], r.key[0]) for r in recs if r.kind == WAIT}
    assert sets == {("MTE2", "MTE2_V"), ("V", "V_MTE2"), ("V", "V_MTE3"), ("MTE3", "MTE3_V")}
    assert waits == {("V", "MTE2_V"), ("MTE2", "V_MTE2"), ("MTE3", "V_MTE3"), ("V", "MTE3_V")}
    ops = [r for r in recs if r.kind == 0]
    assert {PIPES[r.pipe] for r in ops} == {"MTE2", "V", "MTE3"}
    assert all(r.src.startswith("examples.py:") for r in ops)


def test_cube_records_use_the_cube_events():
    res = run_matmul(64, 64, 64, base_m=64, base_n=64, base_k=32, l1_k=64)
    keys = {r.key[0] for r in res._blocks[0].records if r.kind == SET}
    assert {"MTE2_MTE1", "MTE1_M", "M_FIX", "M_MTE1", "MTE1_MTE2"} <= keys
    assert {e.pipe for e in res.trace if e.op != "wait_flag"} >= {"MTE2", "MTE1", "M", "FIX"}


def test_gm_tensors_are_opaque_and_views_checked():
    seen = {}

    @asc.kernel
    def k(x):
        seen["len"] = len(x)
        seen["sub"] = len(x.sub(16, 32))
        seen["slice"] = len(x[10:])
        with pytest.raises(npu.errors.PositionError):
            np.asarray(x)
        with pytest.raises(npu.errors.OutOfBoundsError):
            x.sub(100, 1)

    npu.launch(k, 1, (np.zeros(64, np.float16),))
    assert seen == {"len": 64, "sub": 32, "slice": 54}


def test_outputs_are_written_back_and_inputs_untouched_on_error():
    x = np.arange(64, dtype=np.float16)
    z = np.zeros(64, np.float16)

    @asc.kernel
    def copy(x, z):
        pipe = asc.TPipe()
        q = asc.TQue(P.VECIN, 1)
        pipe.init_buffer(q, 1, 128)
        t = q.alloc_tensor()
        asc.data_copy(t, x, 64)
        q.free_tensor(t)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        npu.launch(copy, 1, (x, z))
    assert (z == 0).all()


def test_tiling_struct_and_platform_info_inside_a_kernel():
    @npu.tiling_struct
    class T:
        n: int
        scale: float

    t = T(np.int64(3), 2)
    assert t == T(3, 2.0) and isinstance(t.n, int) and isinstance(t.scale, float)
    with pytest.raises(TypeError):
        T("x", 1.0)
    got = {}

    @asc.kernel(core="aic")
    def k(t):
        got["info"] = asc.platform_info()
        got["idx"] = (asc.get_block_idx(), asc.get_block_num(), asc.core_type())

    npu.launch(k, 1, (t,), machine="tiny")
    assert got["info"].cube_core_num == 2 and got["idx"] == (0, 1, "aic")
    with pytest.raises(npu.errors.LaunchError):
        asc.get_block_idx()
    with pytest.raises(npu.errors.LaunchError):
        k(t)


def test_run_result_summary_chrome_and_gantt(tmp_path):
    res = run_add(48 * 4096, 48, tile_len=2048)
    s = res.summary()
    assert "ascend910b-like@1" in s and "bottleneck" in s and res.trace_hash[:16] in s
    assert set(res.pipe_busy_pct) == set(PIPES) and res.bottleneck in PIPES
    assert res.time_us == pytest.approx(res.cycles / 1850)
    d = res.as_dict()
    json.dumps(d)
    path = tmp_path / "t.json"
    doc = res.trace.to_chrome(path)
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(doc))
    xs = [e for e in loaded["traceEvents"] if e["ph"] == "X"]
    assert xs and all({"name", "pid", "tid", "ts", "dur"} <= e.keys() for e in xs)
    assert {e["pid"] for e in xs} == set(range(48))
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    import matplotlib

    matplotlib.use("Agg")
    ax = res.trace.gantt("aiv0")
    assert [t.get_text() for t in ax.get_yticklabels()] == list(PIPES)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_former_tail_split_uses_every_core():
    """The reference tiling deals 256-element blocks former/tail (Ascend C "Tail Core
    Tiling"): n = 12,289 is 49 blocks, so one core takes two and 47 take one; all 48 work
    (rounding each share up to 512 elements would have used 25). Shares tile [0, n)."""
    from kernellab.npu.examples import add_tiling, share

    n, cores = 12_289, 48
    t = add_tiling(n, cores)
    shares = [share(t, b) for b in range(cores)]
    used = sum(1 for _, length in shares if length > 0)
    print(f"n = {n:,} on {cores} vector cores: {used} cores used, "
          f"{t.former_num} former x {t.former_len} + tail {t.tail_len}")
    assert used == cores and t.former_num == 1
    assert [s for s, _ in shares] == list(np.cumsum([0] + [ln for _, ln in shares[:-1]]))
    assert sum(ln for _, ln in shares) == n and all(s % 256 == 0 for s, _ in shares)
    res = run_add(n, cores, tile_len=1024)              # asserts z == x + y
    assert res.cores_used == cores
