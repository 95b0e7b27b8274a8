"""The repeat/mask form of the vector instructions (kernellab.npu.repeat): which elements a
mask, a repeat count and the strides select (checked against loops written from the Ascend C
description, atlasascendc_api_07_0011), what a repeat costs, the repeat-form reductions, and
the checks (ranges, bounds, uninitialised reads, races) on strided operands."""

import warnings

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P

UB_ELEMS = 2048          # fp16 elements in each of the kernel's UB buffers (4 KiB)


def harness(body, dtype=np.float16, n_out=UB_ELEMS):
    """A kernel: x and y (UB_ELEMS of dtype) copied into UB, ``body(asc, a, b, c)`` with c
    pre-filled with -7, then c copied to z (n_out elements)."""
    nbytes = UB_ELEMS * np.dtype(dtype).itemsize

    @asc.kernel(core="aiv")
    def k(x, y, z):
        pipe = asc.TPipe()
        qi, qo = asc.TQue(P.VECIN, 2), asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(qi, 2, nbytes)
        pipe.init_buffer(qo, 1, nbytes)
        a, b = qi.alloc_tensor(dtype), qi.alloc_tensor(dtype)
        asc.data_copy(a, x, UB_ELEMS)
        asc.data_copy(b, y, UB_ELEMS)
        qi.enque(a)
        qi.enque(b)
        a, b = qi.deque(), qi.deque()
        c = qo.alloc_tensor(dtype)
        asc.duplicate(c, -7.0, UB_ELEMS)
        body(asc, a, b, c)
        qi.free_tensor(a)
        qi.free_tensor(b)
        qo.enque(c)
        c = qo.deque()
        asc.data_copy(z, c, n_out)
        qo.free_tensor(c)
    return k


def run(body, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, UB_ELEMS).astype(dtype)
    y = rng.uniform(-2, 2, UB_ELEMS).astype(dtype)
    z = np.zeros(UB_ELEMS, dtype)
    res = npu.launch(harness(body, dtype), 1, (x, y, z))
    return x, y, z, res


def selected(lanes, n_rep, blk, rep, itemsize):
    """Element offsets by loops over repeats, blocks and lanes, as the Ascend C description
    reads: block b of repeat r starts (r * rep + b * blk) 32 B blocks in."""
    epb = 32 // itemsize
    out = []
    for r in range(n_rep):
        for lane in lanes:
            b, e = divmod(lane, epb)
            out.append((r * rep + b * blk) * epb + e)
    return np.array(out)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_full_mask_with_default_strides_is_the_count_form(dtype):
    per = 256 // np.dtype(dtype).itemsize
    _, _, z_rep, r_rep = run(lambda asc, a, b, c: asc.add(c, a, b, per, 3,
                                                           asc.BinaryRepeatParams()), dtype)
    x, y, z_cnt, r_cnt = run(lambda asc, a, b, c: asc.add(c, a, b, 3 * per), dtype)
    np.testing.assert_array_equal(z_rep, z_cnt)
    np.testing.assert_array_equal(z_rep[:3 * per], (x[:3 * per].astype(np.float32)
                                                    + y[:3 * per]).astype(dtype))
    assert r_rep.cycles == r_cnt.cycles


@pytest.mark.parametrize("mask, lanes", [
    (64, range(64)),
    (1, [0]),
    ([0b1011, 0], [0, 1, 3]),
    ([0, 1 << 63], [127]),
    ([(1 << 64) - 1, (1 << 64) - 1], range(128)),
])
def test_masks_and_strides_select_the_elements_the_loops_say(mask, lanes):
    params = asc.BinaryRepeatParams(2, 1, 1, 20, 8, 16)   # dst blk 2, rep 20; src1 rep 16
    x, y, z, _ = run(lambda asc, a, b, c: asc.mul(c, a, b, mask, 3, params))
    d = selected(list(lanes), 3, 2, 20, 2)
    s0 = selected(list(lanes), 3, 1, 8, 2)
    s1 = selected(list(lanes), 3, 1, 16, 2)
    want = np.full(UB_ELEMS, -7, np.float16)
    want[d] = (x[s0].astype(np.float32) * y[s1]).astype(np.float16)
    np.testing.assert_array_equal(z, want)          # lanes outside the mask untouched


def test_the_scalar_and_unary_forms_take_unary_params():
    params = asc.UnaryRepeatParams(1, 2, 8, 16)
    x, _, z, _ = run(lambda asc, a, b, c: (asc.adds(c, a, 0.5, 32, 2, params),
                                            asc.exp(c[512:], a, 16, 1)))
    d, s = selected(range(32), 2, 1, 8, 2), selected(range(32), 2, 2, 16, 2)
    want = np.full(UB_ELEMS, -7, np.float16)
    want[d] = (x[s].astype(np.float32) + np.float16(0.5)).astype(np.float16)
    want[512:528] = np.exp(x[:16].astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(z, want)


def test_a_repeat_costs_the_same_whatever_its_mask():
    def v_busy(res):
        return sum(e.end - e.start for e in res.trace.events if e.pipe == "V" and e.op == "add")

    full = v_busy(run(lambda asc, a, b, c: asc.add(c, a, b, 128, 4, None))[3])
    one = v_busy(run(lambda asc, a, b, c: asc.add(c, a, b, 1, 4, None))[3])
    assert one == full > v_busy(run(lambda asc, a, b, c: asc.add(c, a, b, 128, 2, None))[3])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_whole_reduce_sum_is_one_tree_per_repeat(dtype):
    per = 256 // np.dtype(dtype).itemsize
    u = 2.0 ** -11 if dtype == np.float16 else 2.0 ** -24
    m = per * 3 // 4                                            # a continuous mask

    def body(asc, a, b, c):
        asc.whole_reduce_sum(c, a, per, 5, 1, 1, 8)           # one sum per row
        asc.whole_reduce_sum(c[64:], a, m, 5, 2, 1, 8)        # m lanes, every other slot
        tmp = b                                                 # only 1 partial is written
        for r in range(5):                                      # the count form, row by row
            asc.reduce_sum(c[128 + 16 * r:], a[per * r:], tmp, per)
            asc.reduce_sum(c[256 + 16 * r:], a[per * r:], tmp, m)

    x, _, z, _ = run(body, dtype)
    rows = x[:5 * per].reshape(5, per).astype(np.float64)
    np.testing.assert_array_equal(z[:5], z[128:208:16])            # the same adds, in order
    np.testing.assert_array_equal(z[64:74:2], z[256:336:16])
    for got, row in ((z[:5], rows), (z[64:74:2], rows[:, :m])):
        # pairwise summation: |error| <= ceil(log2 n) u sum|x| (Higham, Accuracy and
        # Stability of Numerical Algorithms, 2nd ed., §4.2)
        bound = np.ceil(np.log2(row.shape[1])) * u * np.abs(row).sum(axis=1)
        assert (np.abs(got.astype(np.float64) - row.sum(axis=1)) <= bound).all()
    assert (z[65:74:2] == -7).all()                        # the skipped slots are untouched


def test_block_reduce_max_writes_one_value_per_block_with_a_lane_in_the_mask():
    mask = [0xFFFF | (0xFFFF << 32), 0]                  # blocks 0 and 2 of each repeat
    x, _, z, _ = run(lambda asc, a, b, c: (asc.block_reduce_max(c, a, 3, mask, 1, 1, 8),
                                            asc.block_reduce_sum(c[64:], a, 1, 128, 1, 1, 8)))
    blocks = x[:3 * 128].reshape(3, 8, 16)
    want = np.full((3, 8), -7, np.float16)
    want[:, [0, 2]] = blocks[:, [0, 2]].max(axis=2)
    np.testing.assert_array_equal(z[:24].reshape(3, 8), want)
    sums = blocks[0].astype(np.float64).sum(axis=1)
    assert np.allclose(z[64:72].astype(np.float64), sums, atol=4 * 2.0 ** -11 * 32)


@pytest.mark.parametrize("call, words", [
    (lambda asc, a, b, c: asc.add(c, a, b, 129, 1, None), "1 to 128"),
    (lambda asc, a, b, c: asc.add(c, a, b, 0, 1, None), "1 to 128"),
    (lambda asc, a, b, c: asc.add(c, a, b, [0, 0], 1, None), "not both 0"),
    (lambda asc, a, b, c: asc.add(c, a, b, 128, 256, None), "repeat_times is an int from 0"),
    (lambda asc, a, b, c: asc.add(c, a, b, 128, 1, asc.UnaryRepeatParams()),
     "takes an asc.BinaryRepeatParams"),
    (lambda asc, a, b, c: asc.add(c, a, b, 128, 9, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 255)),
     "past its 2048 elements"),
    (lambda asc, a, b, c: asc.whole_reduce_sum(c, a[8:], 128, 1, 1, 1, 8), "32 B"),
])
def test_out_of_range_forms_are_refused_naming_the_line(call, words):
    with pytest.raises(errors.NPUError) as info:
        run(call)
    assert words in str(info.value) and "test_npu_repeat.py:" in str(info.value), info.value


def test_a_32_bit_bitwise_mask_uses_its_first_word_only():
    with pytest.raises(errors.ShapeError, match="second word of a bitwise mask must be 0"):
        run(lambda asc, a, b, c: asc.add(c, a, b, [1, 1], 1, None), np.float32)


def test_strided_reads_check_exactly_the_elements_read():
    """Only every other block of a fresh buffer is written, then read with block stride 2:
    no uninitialised read; reading the gaps is one."""

    def k_for(blk):
        @asc.kernel(core="aiv")
        def k(x, y, z):
            pipe = asc.TPipe()
            tb = asc.TBuf(P.VECCALC)
            qo = asc.TQue(P.VECOUT, 1)
            pipe.init_buffer(tb, 512)
            pipe.init_buffer(qo, 1, 512)
            t = tb.get(asc.half)
            asc.duplicate(t, 1.0, 128, 1, 2, 16)      # blocks 0, 2, ... 14 of 16
            c = qo.alloc_tensor(asc.half)
            asc.adds(c, t, 1.0, 128, 1, asc.UnaryRepeatParams(1, blk, 8, 8))
            qo.enque(c)
            c = qo.deque()
            asc.data_copy(z, c, 128)
            qo.free_tensor(c)
        return k

    args = (np.zeros(1, np.float16), np.zeros(1, np.float16), np.zeros(128, np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        npu.launch(k_for(2), 1, args)
    assert (args[2] == 2).all()
    with pytest.warns(errors.UninitializedReadWarning, match="never written"):
        npu.launch(k_for(1), 1, args)


def test_a_strided_tbuf_read_is_ordered_like_any_other():
    @asc.kernel(core="aiv")
    def k(x, y, z):
        pipe = asc.TPipe()
        tb = asc.TBuf(P.VECIN)
        qo = asc.TQue(P.VECOUT, 1)
        pipe.init_buffer(tb, 512)
        pipe.init_buffer(qo, 1, 512)
        t = tb.get(asc.half)
        asc.data_copy(t, x, 256)
        c = qo.alloc_tensor(asc.half)
        asc.adds(c, t, 1.0, 128, 1, asc.UnaryRepeatParams(1, 2, 8, 8))   # no ordering
        qo.free_tensor(c)

    with pytest.raises(errors.DataRaceError, match="V reads them in adds"):
        npu.launch(k, 1, (np.zeros(256, np.float16), np.zeros(1, np.float16),
                          np.zeros(1, np.float16)))


def test_brcb_broadcasts_each_element_to_a_block_and_a_zero_stride_reads_it_everywhere():
    """A row's scalar in UB times a whole row: brcb fills a 32 B block with it, and a second
    source with block and repeat strides 0 reads that block in every lane."""

    def body(asc, a, b, c):
        asc.brcb(c, a, 2, asc.BrcbRepeatParams(1, 8))          # 16 elements -> 16 blocks
        asc.mul(c[512:], b, c, 128, 3, asc.BinaryRepeatParams(1, 1, 0, 8, 8, 0))

    x, y, z, _ = run(body)
    np.testing.assert_array_equal(z[:256], np.repeat(x[:16], 16))
    want = (y[:384].astype(np.float32) * x[0]).astype(np.float16)
    np.testing.assert_array_equal(z[512:896], want)
    with pytest.raises(errors.ShapeError, match="overlap"):
        run(lambda asc, a, b, c: asc.brcb(a[16:], a, 3, None))     # reads a[0:24]
    run(lambda asc, a, b, c: asc.brcb(a[16:], a, 1, None))          # reads a[0:8] only
