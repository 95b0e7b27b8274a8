"""The cube's fractal layouts, byte for byte: NZ in L1 (after ND->NZ) and L0C, ZZ in L0A, ZN in
L0B (Ascend C API reference, Mmad ``atlasascendc_api_07_0249`` and Load2D
``atlasascendc_api_07_0238``), checked against the Mmad page's own example and against
fractals laid out by hand; and ``load_data``'s transpose flag as the hardware's (it reorders
bytes inside each fractal, not the matrix)."""

import numpy as np
import pytest

from kernellab import npu
from kernellab.npu import asc, errors
from kernellab.npu.asc import TPosition as P
from kernellab.npu.fractal import decode, encode
from kernellab.numerics import KAware, compare
from reference_kernels.gemm import gemm_abs_product, gemm_golden


@pytest.mark.parametrize("layout, order", [
    # the Mmad page's 4 x 4 example with 2 x 2 fractals: element ids in memory order
    ("ZZ", [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]),
    ("ZN", [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]),
    ("NZ", [0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15]),
])
def test_layouts_match_the_mmad_page_example(layout, order):
    mat = np.arange(16).reshape(4, 4)
    assert encode(mat, layout, 2, 2).tolist() == order
    assert np.array_equal(decode(encode(mat, layout, 2, 2), layout, 4, 4, 2, 2), mat)


def _by_hand(mat, fr, fc, big, small):
    """The memory image of ``mat`` written out fractal by fractal with plain loops: ``big`` Z
    walks the fractals row by row, N column by column; ``small`` the same inside one."""
    r1, c1 = mat.shape[0] // fr, mat.shape[1] // fc
    grid = [(i, j) for i in range(r1) for j in range(c1)] if big == "Z" else \
        [(i, j) for j in range(c1) for i in range(r1)]
    out = []
    for i, j in grid:
        f = mat[i * fr:(i + 1) * fr, j * fc:(j + 1) * fc]
        cells = [(r, c) for r in range(fr) for c in range(fc)] if small == "z" else \
            [(r, c) for c in range(fc) for r in range(fr)]
        out += [f[r, c] for r, c in cells]
    return np.array(out, dtype=mat.dtype)


def _mm_kernel(seen, transpose_b=True, transpose_a=False, scale=None):
    @asc.kernel(core="aic")
    def mm(a, b, c, m: int, n: int, k: int):
        pipe = asc.TPipe()
        q_a1, q_b1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
        q_a2, q_b2, q_c = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1), asc.TQue(P.CO1, 1)
        isz = a.dtype.itemsize
        p32 = lambda v: -(-v // 32) * 32                      # noqa: E731 - room for padding
        for q, nb in ((q_a1, m * p32(k) * isz), (q_b1, k * p32(n) * isz),
                      (q_a2, m * p32(k) * isz), (q_b2, k * p32(n) * isz), (q_c, m * n * 4)):
            pipe.init_buffer(q, 1, nb)
        a1, b1 = q_a1.alloc_tensor(a.dtype), q_b1.alloc_tensor(a.dtype)
        asc.data_copy(a1, a, nd2nz=(m, k, k))
        asc.data_copy(b1, b, nd2nz=(k, n, n))
        seen["a1"], seen["b1"] = a1.np(m * k).copy(), b1.np(k * n).copy()
        q_a1.enque(a1)
        q_b1.enque(b1)
        a1, b1 = q_a1.deque(), q_b1.deque()
        a2, b2 = q_a2.alloc_tensor(a.dtype), q_b2.alloc_tensor(a.dtype)
        asc.load_data(a2, a1, transpose=transpose_a)
        asc.load_data(b2, b1, transpose=transpose_b)      # "transform nz to zn"
        seen["a2"], seen["b2"] = a2.np(m * k).copy(), b2.np(k * n).copy()
        q_a2.enque(a2)
        q_b2.enque(b2)
        q_a1.free_tensor(a1)
        q_b1.free_tensor(b1)
        a2, b2 = q_a2.deque(), q_b2.deque()
        co = q_c.alloc_tensor(asc.int32 if a.dtype == asc.int8 else asc.float32)
        asc.mmad(co, a2, b2, m, n, k, init=True)
        seen["c"] = co.np(m * n).copy()
        q_c.enque(co)
        q_a2.free_tensor(a2)
        q_b2.free_tensor(b2)
        co = q_c.deque()
        asc.fixpipe(c, co, m, n, quant_scale=scale)
        q_c.free_tensor(co)

    return mm


def test_fp16_bytes_in_every_buffer_match_fractals_laid_out_by_hand():
    """A 32 x 48 A and a 48 x 32 B of distinct values (exact in fp16): L1 holds them NZ, L0A
    ZZ, L0B (after the transpose flag) ZN, L0C NZ; C is right."""
    m, k, n = 32, 48, 32
    A = np.arange(m * k, dtype=np.float16).reshape(m, k) / 64
    B = (np.arange(k * n, dtype=np.float16).reshape(k, n) - 700) / 64
    C = np.full((m, n), np.nan, np.float32)
    seen = {}
    npu.launch(_mm_kernel(seen), 1, (A, B, C, m, n, k))
    assert np.array_equal(seen["a1"], _by_hand(A, 16, 16, "N", "z"))
    assert np.array_equal(seen["b1"], _by_hand(B, 16, 16, "N", "z"))
    assert np.array_equal(seen["a2"], _by_hand(A, 16, 16, "Z", "z"))
    assert np.array_equal(seen["b2"], _by_hand(B, 16, 16, "Z", "n"))
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.array_equal(seen["c"], _by_hand(ref.astype(np.float32), 16, 16, "N", "z"))
    assert np.array_equal(C, ref.astype(np.float32))


def test_int8_b_in_l0b_has_32_by_16_fractals():
    """int8: L1 fractals are 16 x 32, a ZN fractal of B 32 x 16 (Mmad page: (32 B/sizeof) x
    16); the product is exact in int32."""
    m, k, n = 16, 64, 32
    rng = np.random.default_rng(8)
    A = rng.integers(-128, 128, (m, k), dtype=np.int8)
    B = rng.integers(-128, 128, (k, n), dtype=np.int8)
    C = np.zeros((m, n), np.int32)
    seen = {}
    npu.launch(_mm_kernel(seen), 1, (A, B, C, m, n, k))
    assert np.array_equal(seen["b1"], _by_hand(B, 16, 32, "N", "z"))
    assert np.array_equal(seen["a2"], _by_hand(A, 16, 32, "Z", "z"))
    assert np.array_equal(seen["b2"], _by_hand(B, 32, 16, "Z", "n"))
    assert np.array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


def test_int8_transposed_load_needs_rows_in_32s():
    m, k, n = 16, 48, 32
    A, B = np.ones((m, k), np.int8), np.ones((k, n), np.int8)
    with pytest.raises(errors.AlignmentError, match="rows must be a multiple of 32"):
        npu.launch(_mm_kernel({}), 1, (A, B, np.zeros((m, n), np.int32), m, n, k))


def test_forgetting_the_transpose_flag_on_b_is_a_layout_error():
    """Without the flag L0B holds L1's row-major fractals: the cube, reading ZN, would use
    every 16 x 16 block of B transposed. The simulator stops at mmad and says so."""
    m = k = n = 32
    A, B = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    with pytest.raises(errors.LayoutError) as exc:
        npu.launch(_mm_kernel({}, transpose_b=False), 1,
                   (A, B, np.zeros((m, n), np.float32), m, n, k))
    msg = str(exc.value)
    assert "reads B from L0B as ZN" in msg and "transpose=True" in msg
    # the fix is named at the load, not at mmad: "B was loaded at <file:line> without ..."
    first = msg.splitlines()[1]
    assert first.startswith("B was loaded at test_npu_fractal.py:") and \
        first.endswith("without transpose=True; add transpose=True to that call."), msg
    assert exc.value.kind == "layout"


def test_a_loaded_with_the_flag_is_a_layout_error():
    m = k = n = 16
    A, B = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    with pytest.raises(errors.LayoutError, match="reads A from L0A as ZZ"):
        npu.launch(_mm_kernel({}, transpose_a=True), 1,
                   (A, B, np.zeros((m, n), np.float32), m, n, k))


def test_int8_matmul_with_per_channel_dequantisation_in_fixpipe():
    """W8A8: int8 x int8 -> int32 in L0C, then Fixpipe multiplies column j by scale[j] and
    writes fp16 (the VDEQF16 path of the Fixpipe page). The int32 sums are exact, so the only
    rounding is the final fp16 one."""
    m, k, n = 16, 64, 32
    rng = np.random.default_rng(6)
    A = rng.integers(-128, 128, (m, k), dtype=np.int8)
    B = rng.integers(-128, 128, (k, n), dtype=np.int8)
    scale = rng.uniform(1e-4, 1e-3, n)
    C = np.zeros((m, n), np.float16)
    npu.launch(_mm_kernel({}, scale=scale), 1, (A, B, C, m, n, k))
    exact = (A.astype(np.int64) @ B.astype(np.int64)) * scale[None, :]
    assert np.array_equal(C, exact.astype(np.float16))


def _ported_kernel(b_transpose, sample_split_b=False):
    """LoadData2DParams walks over 512 B fractals ("transform nz to zz" for A, "transform nz
    to zn" for B), generalised from the vendor matmul sample's SplitA / SplitB to tiles more
    than one fractal wide: one call per fractal row. With ``sample_split_b`` B is loaded as
    the sample's SplitB does, exactly: one call, ``repeatTimes = kBlocks``, ``srcStride = 1``,
    ``ifTranspose = true`` (right for a B slab one fractal wide, n = 16: its k1 fractals are
    contiguous in L1's NZ and L0B's ZN alike)."""

    @asc.kernel(core="aic")
    def mm(a, b, c, m: int, n: int, k: int):
        m1, k1, n1 = m // 16, k // 16, n // 16
        pipe = asc.TPipe()
        q_a1, q_b1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
        q_a2, q_b2, q_c = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1), asc.TQue(P.CO1, 1)
        for q, nb in ((q_a1, m * k * 2), (q_b1, k * n * 2), (q_a2, m * k * 2),
                      (q_b2, k * n * 2), (q_c, m * n * 4)):
            pipe.init_buffer(q, 1, nb)
        a1, b1 = q_a1.alloc_tensor(asc.half), q_b1.alloc_tensor(asc.half)
        asc.data_copy(a1, a, nd2nz=(m, k, k))
        asc.data_copy(b1, b, nd2nz=(k, n, n))
        q_a1.enque(a1)
        q_b1.enque(b1)
        a1, b1 = q_a1.deque(), q_b1.deque()
        a2, b2 = q_a2.alloc_tensor(asc.half), q_b2.alloc_tensor(asc.half)
        for i in range(m1):                               # row i of A's fractals -> ZZ
            asc.load_data(a2[i * 16 * k:], a1, asc.LoadData2DParams(
                start_index=i, repeat_times=k1, src_stride=m1))
        if sample_split_b:                                # the sample's SplitB, as it is
            assert n1 == 1
            asc.load_data(b2, b1, asc.LoadData2DParams(
                repeat_times=k1, src_stride=1, if_transpose=b_transpose))
        else:
            for i in range(k1):                           # row i of B's fractals -> ZN
                asc.load_data(b2[i * 16 * n:], b1, asc.LoadData2DParams(
                    start_index=i, repeat_times=n1, src_stride=k1, if_transpose=b_transpose))
        q_a2.enque(a2)
        q_b2.enque(b2)
        q_a1.free_tensor(a1)
        q_b1.free_tensor(b1)
        a2, b2 = q_a2.deque(), q_b2.deque()
        co = q_c.alloc_tensor(asc.float32)
        asc.mmad(co, a2, b2, m, n, k, init=True)
        q_c.enque(co)
        q_a2.free_tensor(a2)
        q_b2.free_tensor(b2)
        co = q_c.deque()
        asc.fixpipe(c, co, m, n)
        q_c.free_tensor(co)

    return mm


def _fp16_operands(m, k, n, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


def _is_product(C, A, B) -> bool:
    """C is A @ B within the float32-accumulation bound (fp16 products are exact in fp32;
    kernellab.numerics.KAware against the float64 golden product)."""
    policy = KAware(K=A.shape[1], acc_dtype=np.float32, out_dtype=np.float32,
                    abs_product=gemm_abs_product(A, B))
    return bool(compare(C, gemm_golden(A, B), policy).ok)


def test_a_kernel_ported_from_ascend_c_is_right_and_without_the_flag_wrong():
    m, k, n = 32, 48, 64
    A, B = _fp16_operands(m, k, n, 4)
    C = np.full((m, n), np.nan, np.float32)
    npu.launch(_ported_kernel(True), 1, (A, B, C, m, n, k))
    assert _is_product(C, A, B)
    wrong = np.full((m, n), np.nan, np.float32)
    npu.launch(_ported_kernel(False), 1, (A, B, wrong, m, n, k))   # the hardware's wrong C
    blockwise_t = B.reshape(k // 16, 16, n // 16, 16).transpose(0, 3, 2, 1).reshape(k, n)
    assert _is_product(wrong, A, blockwise_t)
    assert not _is_product(wrong, A, B)


def test_the_vendor_samples_split_b_one_call_is_right_for_one_fractal_column():
    m, k, n = 32, 48, 16
    A, B = _fp16_operands(m, k, n, 5)
    C = np.full((m, n), np.nan, np.float32)
    npu.launch(_ported_kernel(True, sample_split_b=True), 1, (A, B, C, m, n, k))
    assert _is_product(C, A, B)
