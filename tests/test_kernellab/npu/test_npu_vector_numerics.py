"""ReduceSum as Atlas A2/A3 compute it (Ascend C API reference, ReduceSum,
``atlasascendc_api_07_0078``): a binary tree of pairwise adds within each 256 B repeat, the
repeats' sums then added in order, every add in the operand type, half partial sums kept at
65504; signature (dst, src, tmp, count)."""

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P


def _reduce(x, tmp_elems=None):
    n = x.size
    dt = asc.half if x.dtype == np.float16 else asc.float32
    isz = x.dtype.itemsize

    @asc.kernel(core="aiv")
    def k(x, out):
        pipe = asc.TPipe()
        qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, 1, -(-n * isz // 32) * 32)
        pipe.init_buffer(qo, 1, 32)
        tb = asc.TBuf(P.VECCALC)
        work = tmp_elems if tmp_elems is not None else 64
        pipe.init_buffer(tb, work * isz)
        a = qi.alloc_tensor(dt)
        asc.data_copy_pad(a, x, n)
        qi.enque(a)
        a = qi.deque(dt)
        r = qo.alloc_tensor(dt)
        asc.duplicate(r, 0.0, 32 // isz)
        asc.reduce_sum(r, a, tb.get(dt, work), n)
        qo.enque(r)
        qi.free_tensor(a)
        r = qo.deque(dt)
        asc.data_copy(out, r, 32 // isz)
        qo.free_tensor(r)

    out = np.zeros(32 // isz, x.dtype)
    npu.launch(k, 1, (x, out))
    return out[0]


def _by_hand(x):
    """The vendor's order written out with scalar fp16/fp32 adds (saturating fp16 at 65504)."""
    dt = x.dtype.type

    def add(a, b):
        s = float(a) + float(b)
        if dt is np.float16:
            s = min(max(s, -65504.0), 65504.0)
        return dt(s)

    per = 256 // x.dtype.itemsize
    total = None
    for i in range(0, x.size, per):
        level = list(x[i:i + per])
        while len(level) > 1:
            if len(level) % 2:
                level.append(dt(0))
            level = [add(level[j], level[j + 1]) for j in range(0, len(level), 2)]
        total = level[0] if total is None else add(total, level[0])
    return total


def test_half_partial_sums_saturate_at_65504_as_the_reducesum_page_says():
    """The page's own example, [60000, 60000, -30000, 100]: 60000 + 60000 is kept at 65504,
    then added to -30000 + 100 (rounded to fp16). A float32 sum would be 90100: inf in fp16."""
    x = np.array([60000, 60000, -30000, 100], np.float16)
    got = _reduce(x)
    assert np.isfinite(got) and got == _by_hand(x)
    assert got == np.float16(65504.0 + float(np.float16(-29900.0)))
    assert x.astype(np.float32).sum() > 65504                 # a float32 sum overflows fp16


@pytest.mark.parametrize("dtype, n", [(np.float16, 1000), (np.float32, 777), (np.float16, 128)])
def test_tree_within_repeats_then_in_order(dtype, n):
    x = (np.random.default_rng(n).standard_normal(n) * 50).astype(dtype)
    assert _reduce(x) == _by_hand(x)


def test_tmp_too_small_is_a_shape_error():
    x = np.ones(4096, np.float16)                     # 32 repeats: tmp needs 32 halves
    with pytest.raises(errors.ShapeError, match="needs at least 32"):
        _reduce(x, tmp_elems=16)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max"])
def test_minimum_tmp_never_written_past_its_end(op):
    """2049 halves: the page's minimum tmp is floor(2049/128) = 16 halves, but there are 17
    repeats. The tail repeat enters the result, never the next buffer (all 7s stay 7)."""
    n = 2049

    @asc.kernel(core="aiv")
    def k(x, out, nb_out):
        pipe = asc.TPipe()
        qi, qo, qn = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, 1, -(-n * 2 // 32) * 32)
        pipe.init_buffer(qo, 1, 32)
        pipe.init_buffer(qn, 1, 32)
        tb, nb = asc.TBuf(P.VECCALC), asc.TBuf(P.VECCALC)
        pipe.init_buffer(tb, 32)
        pipe.init_buffer(nb, 32)
        nbt = nb.get(asc.half, 16)
        asc.duplicate(nbt, 7.0, 16)
        a = qi.alloc_tensor(asc.half)
        asc.data_copy_pad(a, x, n)
        qi.enque(a)
        a = qi.deque(asc.half)
        r = qo.alloc_tensor(asc.half)
        asc.duplicate(r, 0.0, 16)
        getattr(asc, op)(r, a, tb.get(asc.half, 16), n)
        asc.pipe_barrier(asc.PIPE_ALL)
        m = qn.alloc_tensor(asc.half)
        asc.adds(m, nbt, 0.0, 16)
        qo.enque(r)
        qn.enque(m)
        qi.free_tensor(a)
        r, m = qo.deque(asc.half), qn.deque(asc.half)
        asc.data_copy(out, r, 16)
        asc.data_copy(nb_out, m, 16)
        qo.free_tensor(r)
        qn.free_tensor(m)

    x = np.ones(n, np.float16)
    x[-1] = 3.0                                # the tail repeat's element: it must count
    out, nb_out = np.zeros(16, np.float16), np.zeros(16, np.float16)
    npu.launch(k, 1, (x, out, nb_out))
    assert (nb_out == 7).all()
    assert out[0] == (_by_hand(x) if op == "reduce_sum" else 3.0)


def test_negative_half_sums_clamp_at_minus_65504_assumed():
    """[A] assumed: the ReduceSum page documents only the positive clamp (65504); the model
    clamps negative sums symmetrically. This pins the assumption, it does not confirm it."""
    x = np.array([-60000, -60000, 30000, -100], np.float16)
    assert _reduce(x) == np.float16(-65504.0 + float(np.float16(29900.0)))
