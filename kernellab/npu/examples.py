"""Reference kernels for the tests, the chapter and the benchmarks: a tiled, multi-core vector
add (any length: the former/tail core split, ``data_copy_pad`` for an unaligned last tile) and a
tiled cube matmul (GM -> L1 with nd2nz, L1 -> L0 with load_data, mmad, fixpipe), both written
with queues in the CopyIn -> Compute -> CopyOut style (Ascend C guide, "Programming Based on
TPipe and TQue", hiascend.com atlas_ascendc_10_00032), and a mix kernel: the cube's matmul with
a ReLU epilogue on both vector cores of each group, through a GM workspace and cross-core flags
(:mod:`kernellab.npu.mix`).
"""

from __future__ import annotations

import numpy as np

from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P
from kernellab.npu.asc import tiling_struct

__all__ = ["AddTiling", "add_tiling", "share", "add_kernel", "run_add", "copy_kernel", "run_copy",
           "MatmulTiling",
           "matmul_tiling", "matmul_kernel", "run_matmul", "EpilogueTiling", "matmul_relu_kernel",
           "run_matmul_relu"]


@tiling_struct
class AddTiling:
    """``n`` elements dealt in aligned blocks of ``align`` elements, the vendor's former/tail
    split: the first ``former_num`` cores take ``former_len`` elements each, the others
    ``tail_len`` (one aligned block fewer); the last share is cut at ``n``. Each core works in
    tiles of ``tile_len`` with ``buffer_num`` blocks per queue."""

    n: int
    former_num: int
    former_len: int
    tail_len: int
    tile_len: int
    buffer_num: int


def add_tiling(n: int, block_dim: int, tile_len: int = 8192, buffer_num: int = 2,
               align_elems: int = 256) -> AddTiling:
    """Host tiling, as the Ascend C programming guide splits data that does not divide evenly
    ("Tail Core Tiling", ``atlas_ascendc_10_10008``: ``formerNum`` whole cores take one
    aligned block more than the tail cores): ``ceil(n / align_elems)`` blocks of
    ``align_elems`` elements (256 fp16 = 512 B keeps every share's GM start 512 B-aligned)
    over ``block_dim`` cores. Every core
    gets work while there are at least ``block_dim`` blocks (rounding each share up to the
    alignment instead idles cores: n = 12,289 would use 25 of 48)."""
    blocks = -(-n // align_elems)
    per, former = divmod(blocks, block_dim)
    return AddTiling(n=n, former_num=former, former_len=(per + 1) * align_elems,
                     tail_len=per * align_elems, tile_len=tile_len, buffer_num=buffer_num)


def share(t: AddTiling, block: int) -> tuple[int, int]:
    """``(start, length)`` of ``block``'s share under :func:`add_tiling` (length 0: no work)."""
    if block < t.former_num:
        start, length = block * t.former_len, t.former_len
    else:
        start = t.former_num * t.former_len + (block - t.former_num) * t.tail_len
        length = t.tail_len
    return start, max(0, min(length, t.n - start))


@asc.kernel(core="aiv")
def add_kernel(x, y, z, t: AddTiling):
    """``z = x + y`` (fp16), CopyIn -> Compute -> CopyOut per tile. The queues have depth 1
    (Ascend C TQue, ``atlasascendc_api_07_0137``: depth counts consecutive EnQue calls, "unrelated
    to double buffer", 1 recommended); ``buffer_num`` blocks per queue give the double
    buffering."""
    base, my_len = share(t, asc.get_block_idx())
    if my_len <= 0:
        return
    xg, yg, zg = x.sub(base, my_len), y.sub(base, my_len), z.sub(base, my_len)
    pipe = asc.TPipe()
    qx, qy = asc.TQue(P.VECIN, 1), asc.TQue(P.VECIN, 1)
    qz = asc.TQue(P.VECOUT, 1)
    for q in (qx, qy, qz):
        pipe.init_buffer(q, t.buffer_num, t.tile_len * 2)
    n_tiles = -(-my_len // t.tile_len)
    for i in range(n_tiles):
        off = i * t.tile_len
        cnt = min(t.tile_len, my_len - off)
        copy = asc.data_copy if (cnt * 2) % 32 == 0 else asc.data_copy_pad
        a, b = qx.alloc_tensor(asc.half), qy.alloc_tensor(asc.half)
        copy(a, xg[off:], cnt)
        copy(b, yg[off:], cnt)
        qx.enque(a)
        qy.enque(b)
        a, b, c = qx.deque(asc.half), qy.deque(asc.half), qz.alloc_tensor(asc.half)
        asc.add(c, a, b, cnt)
        qz.enque(c)
        qx.free_tensor(a)
        qy.free_tensor(b)
        c = qz.deque(asc.half)
        copy(zg[off:], c, cnt)
        qz.free_tensor(c)


def run_add(n: int, block_dim: int, tile_len: int = 8192, buffer_num: int = 2, machine=None,
            seed: int = 0, check: bool = True):
    """Launch :func:`add_kernel` on random fp16 data; return the RunResult (checks z = x + y)."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(np.float16)
    z = np.full(n, np.nan, dtype=np.float16)
    res = launch(add_kernel, block_dim, (x, y, z, add_tiling(n, block_dim, tile_len,
                                                             buffer_num)), machine=machine)
    if check:
        np.testing.assert_array_equal(z, x + y)
    return res


@tiling_struct
class MatmulTiling:
    """C (M x N, fp32) = A (M x K, fp16) @ B (K x N, fp16). Output blocks of ``base_m`` x
    ``base_n`` are dealt to blocks round-robin; K is staged through L1 in chunks of ``l1_k``
    and through L0 in steps of ``base_k``; ``l1_num``/``l0_num`` blocks per queue (2 =
    ping-pong)."""

    M: int
    N: int
    K: int
    base_m: int
    base_n: int
    base_k: int
    l1_k: int
    l1_num: int
    l0_num: int


def matmul_tiling(M, N, K, base_m=128, base_n=128, base_k=64, l1_k=256, l1_num=2,
                  l0_num=2) -> MatmulTiling:
    """Host tiling for :func:`matmul_kernel` (no heuristics: the caller's block sizes)."""
    return MatmulTiling(M, N, K, base_m, base_n, base_k, l1_k, l1_num, l0_num)


def _a16(x):
    return -(-x // 16) * 16


@asc.kernel(core="aic")
def matmul_kernel(a, b, c, t: MatmulTiling):
    """Tiled fp16 matmul on the cube: GM->A1/B1 (nd2nz), A1/B1->A2/B2 (load_data), mmad into
    CO1, fixpipe to GM."""
    pipe = asc.TPipe()
    qa1, qb1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
    qa2, qb2 = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1)
    qc = asc.TQue(P.CO1, 1)
    pipe.init_buffer(qa1, t.l1_num, t.base_m * t.l1_k * 2)
    pipe.init_buffer(qb1, t.l1_num, t.l1_k * t.base_n * 2)
    pipe.init_buffer(qa2, t.l0_num, t.base_m * t.base_k * 2)
    pipe.init_buffer(qb2, t.l0_num, t.base_k * t.base_n * 2)
    pipe.init_buffer(qc, 1, t.base_m * t.base_n * 4)
    mb, nb = -(-t.M // t.base_m), -(-t.N // t.base_n)
    for blk in range(asc.get_block_idx(), mb * nb, asc.get_block_num()):
        i0, j0 = (blk // nb) * t.base_m, (blk % nb) * t.base_n
        m, n = min(t.base_m, t.M - i0), min(t.base_n, t.N - j0)
        co = qc.alloc_tensor(asc.float32)
        first = True
        for k0 in range(0, t.K, t.l1_k):
            kl = min(t.l1_k, t.K - k0)
            a1, b1 = qa1.alloc_tensor(asc.half), qb1.alloc_tensor(asc.half)
            asc.data_copy(a1, a[i0 * t.K + k0:], nd2nz=(m, kl, t.K))
            asc.data_copy(b1, b[k0 * t.N + j0:], nd2nz=(kl, n, t.N))
            qa1.enque(a1)
            qb1.enque(b1)
            a1, b1 = qa1.deque(), qb1.deque()
            for kk in range(0, kl, t.base_k):
                ks = min(t.base_k, kl - kk)
                a2, b2 = qa2.alloc_tensor(asc.half), qb2.alloc_tensor(asc.half)
                asc.load_data(a2, a1, col=kk, cols=_a16(ks))
                asc.load_data(b2, b1, row=kk, rows=_a16(ks), transpose=True)
                qa2.enque(a2)
                qb2.enque(b2)
                a2, b2 = qa2.deque(), qb2.deque()
                asc.mmad(co, a2, b2, m, n, ks, init=first)
                first = False
                qa2.free_tensor(a2)
                qb2.free_tensor(b2)
            qa1.free_tensor(a1)
            qb1.free_tensor(b1)
        qc.enque(co)
        co = qc.deque()
        asc.fixpipe(c[i0 * t.N + j0:], co, m, n, dst_stride=t.N)
        qc.free_tensor(co)


def run_matmul(M, N, K, block_dim=1, machine=None, seed=0, check=True, **tiling):
    """Launch :func:`matmul_kernel` on random fp16 data; return the RunResult (checks C
    against a float64 reference within an fp32-accumulation tolerance)."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, dtype=np.float32)
    res = launch(matmul_kernel, block_dim, (A, B, C, matmul_tiling(M, N, K, **tiling)),
                 machine=machine)
    if check:
        ref = A.astype(np.float64) @ B.astype(np.float64)
        np.testing.assert_allclose(C, ref, rtol=1e-4, atol=1e-3 * np.sqrt(K))
    return res


@asc.kernel(core="aiv")
def copy_kernel(x, z, t: AddTiling):
    """``z = x`` streamed through UB (one read and one write per element; the vector unit
    only moves the tile from the VECIN to the VECOUT queue, as ``TQueBind`` would avoid)."""
    base, my_len = share(t, asc.get_block_idx())
    if my_len <= 0:
        return
    xg, zg = x.sub(base, my_len), z.sub(base, my_len)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
    pipe.init_buffer(qx, t.buffer_num, t.tile_len * 2)
    pipe.init_buffer(qz, t.buffer_num, t.tile_len * 2)
    for i in range(-(-my_len // t.tile_len)):
        off = i * t.tile_len
        cnt = min(t.tile_len, my_len - off)
        copy = asc.data_copy if (cnt * 2) % 32 == 0 else asc.data_copy_pad
        a = qx.alloc_tensor(asc.half)
        copy(a, xg[off:], cnt)
        qx.enque(a)
        a, c = qx.deque(asc.half), qz.alloc_tensor(asc.half)
        asc.adds(c, a, 0.0, cnt)
        qz.enque(c)
        qx.free_tensor(a)
        c = qz.deque(asc.half)
        copy(zg[off:], c, cnt)
        qz.free_tensor(c)


def run_copy(n: int, block_dim: int, tile_len: int = 8192, buffer_num: int = 2, machine=None):
    """Launch :func:`copy_kernel` on random fp16 data; return the RunResult (checks z = x)."""
    from kernellab.npu.launch import launch

    x = np.random.default_rng(0).standard_normal(n).astype(np.float16)
    z = np.full(n, np.nan, dtype=np.float16)
    res = launch(copy_kernel, block_dim, (x, z, add_tiling(n, block_dim, tile_len, buffer_num)),
                 machine=machine)
    np.testing.assert_array_equal(z, x)
    return res


# ---------------------------------------------------------------------------------------------
# a mix kernel: the cube's matmul, the vector cores' epilogue, through a GM workspace
# ---------------------------------------------------------------------------------------------
@tiling_struct
class EpilogueTiling:
    """``C = relu(A @ B)`` in ``base_m`` x ``base_n`` output tiles (M, N, K multiples of 16;
    ``base_m`` even); ``slots`` workspace tiles per group, each ``base_m * base_n`` float32."""

    M: int
    N: int
    K: int
    base_m: int
    base_n: int
    slots: int


#: cross-core flag IDs of :func:`matmul_relu_kernel`: a workspace tile is full / drained
TILE_FULL, TILE_FREE = 0, 1


@asc.kernel(core="mix")
def matmul_relu_kernel(a, b, c, ws, t: EpilogueTiling):
    """``C = relu(A @ B)`` (fp16 in, fp32 accumulation, fp16 out) as a mix kernel: the AIC
    computes each tile into a workspace slot of GM (fixpipe) and flags it full (mode 2, from
    FIX); each AIV reads its half of the tile's rows (MTE2), applies ReLU, writes C and flags
    the slot free (from MTE3), so the AIC may fill it again ``slots`` tiles later."""
    mb, nb = t.M // t.base_m, t.N // t.base_n
    tile = t.base_m * t.base_n
    my_ws = ws[asc.get_block_idx() * t.slots * tile:]
    tiles = range(asc.get_block_idx(), mb * nb, asc.get_block_num())
    pipe = asc.TPipe()
    if asc.core_type() == "aic":
        qa, qb = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
        qa2, qb2, qc = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1), asc.TQue(P.CO1, 1)
        pipe.init_buffer(qa, 1, t.base_m * t.K * 2)
        pipe.init_buffer(qb, 1, t.K * t.base_n * 2)
        pipe.init_buffer(qa2, 1, t.base_m * t.K * 2)
        pipe.init_buffer(qb2, 1, t.K * t.base_n * 2)
        pipe.init_buffer(qc, 1, tile * 4)
        for i, blk in enumerate(tiles):
            i0, j0 = (blk // nb) * t.base_m, (blk % nb) * t.base_n
            a1, b1 = qa.alloc_tensor(asc.half), qb.alloc_tensor(asc.half)
            asc.data_copy(a1, a[i0 * t.K:], nd2nz=(t.base_m, t.K, t.K))
            asc.data_copy(b1, b[j0:], nd2nz=(t.K, t.base_n, t.N))
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
            asc.mmad(co, a2, b2, t.base_m, t.base_n, t.K, init=True)
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)
            qc.enque(co)
            co = qc.deque()
            if i >= t.slots:  # the slot's last tile must be drained by both AIVs
                asc.cross_core_wait_flag(TILE_FREE, pipe=asc.PIPE_FIX)
            asc.fixpipe(my_ws[(i % t.slots) * tile:], co, t.base_m, t.base_n)
            asc.cross_core_set_flag(TILE_FULL, pipe=asc.PIPE_FIX)
            qc.free_tensor(co)
        for _ in range(min(t.slots, len(tiles))):  # the last flags the AIVs set
            asc.cross_core_wait_flag(TILE_FREE, pipe=asc.PIPE_FIX)
        return
    rows = t.base_m // 2
    r0 = asc.get_sub_block_idx() * rows
    qx, qy = asc.TQue(P.VECIN, 2), asc.TQue(P.VECOUT, 2)
    pipe.init_buffer(qx, 2, rows * t.base_n * 4)
    pipe.init_buffer(qy, 2, rows * t.base_n * 2)
    acc = asc.TBuf(P.VECCALC)
    pipe.init_buffer(acc, rows * t.base_n * 4)
    for i, blk in enumerate(tiles):
        i0, j0 = (blk // nb) * t.base_m, (blk % nb) * t.base_n
        x = qx.alloc_tensor(asc.float32)
        asc.cross_core_wait_flag(TILE_FULL, pipe=asc.PIPE_MTE2)
        asc.data_copy(x, my_ws[(i % t.slots) * tile + r0 * t.base_n:], rows * t.base_n)
        qx.enque(x)
        x = qx.deque()
        y = qy.alloc_tensor(asc.half)
        f = acc.get(asc.float32)
        asc.relu(f, x, rows * t.base_n)
        asc.cast(y, f, "rint", rows * t.base_n)
        qx.free_tensor(x)
        qy.enque(y)
        y = qy.deque()
        for r in range(rows):
            asc.data_copy(c[(i0 + r0 + r) * t.N + j0:], y[r * t.base_n:], t.base_n)
        asc.cross_core_set_flag(TILE_FREE, pipe=asc.PIPE_MTE3)
        qy.free_tensor(y)


def run_matmul_relu(M, N, K, block_dim=1, base_m=32, base_n=64, slots=2, machine=None, seed=0):
    """Launch :func:`matmul_relu_kernel` on random fp16 data; return the RunResult (checks C
    against relu of a float64 reference, rounded to fp16)."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, dtype=np.float16)
    ws = np.zeros(block_dim * slots * base_m * base_n, dtype=np.float32)
    t = EpilogueTiling(M, N, K, base_m, base_n, slots)
    res = launch(matmul_relu_kernel, block_dim, (A, B, C, ws, t), machine=machine)
    ref = np.maximum(A.astype(np.float64) @ B.astype(np.float64), 0)
    np.testing.assert_allclose(C.astype(np.float64), ref, rtol=2e-3, atol=1e-3 * np.sqrt(K))
    return res
