"""Chapter 5, second part: FlashAttention-2's forward pass on tensor cores, partitioned as the
paper partitions it (T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and
Work Partitioning", arXiv:2307.08691, 2023, §3.1-3.3).

For each batch b and head h (the same operation as :mod:`kernellab.kernels.attention_cuda`)::

    S = Q K^T / sqrt(d)          (N, N)    S[i, j] = -inf for j > i when causal
    P = softmax(S) row by row    (N, N)
    O = P V                      (N, d)    lse[i] = logsumexp_j S[i, j]  (float32, optional)

Contract (:func:`attention_tc`, :func:`attention_tc_lse`):

* ``Q``, ``K``, ``V``, ``O``: one shape (B, H, N, d) and one dtype, float16 or bfloat16
  (``ml_dtypes``; the kernel sees the bits as uint16 and issues ``mma...f16`` or ``...bf16``);
  N >= 1 any length (tails masked), d in :data:`HEAD_DIMS` (a multiple of 16: the k extent of
  one ``mma.m16n8k16``). ``O`` has the inputs' dtype, written in place, rounded once from the
  float32 accumulator, what FlashAttention-2 returns; ``lse`` is float32. Scores, statistics
  and both products accumulate in float32; the probabilities P are rounded to the inputs'
  dtype before P V (the A operand of the ``mma``), as in FlashAttention-2 and in the plain
  same-dtype attention the error rule measures.
* numpy arguments are copied to the device and ``O`` back; numba device arrays are used as
  they are (on the sim tier and on a GPU alike). ``TypeError`` for an argument that is neither;
  ``ValueError`` for a wrong rank, shape or dtype, d not in :data:`HEAD_DIMS`, a read-only
  ``O`` or one that overlaps an input, or a key block ``Bc`` that is not a multiple of 16 or
  does not fit the 48 KiB of static shared memory.
* :func:`expected` is the check: the float64 golden output
  (``reference_kernels.attention.attention_golden``) and the rule chapter 5 and the
  flash-attention lab apply to float16 outputs (:func:`kernellab.numerics.flash_attention_rule`:
  twice the error of a plain same-dtype attention, one ulp, the float32 rounding bound).

The partition (one launch; grid (ceil(N / 64), B*H), 128 threads a block)::

    block  = 64 query rows (Br = 4 warps x 16 rows), streams every K/V block of Bc keys
    warp w = query rows q0 + 16 w .. q0 + 16 w + 15: the M = 16 rows of its MMA tiles
    lane   = groupID g = lane >> 2, thread-in-group t = lane % 4: in every 16 x 8 accumulator
             tile it holds rows g and g + 8, columns 2 t and 2 t + 1 (PTX ISA, "Matrix
             Fragments for mma.m16n8k16 with floating point type"; kernellab.sim.mma)

The warps of a block share the K/V tiles in shared memory and nothing else: FA2's "split-Q"
(§3.3), no exchange between warps. Per warp, for each K/V block j (Bc keys):

1. S = Q_w K_j^T on tensor cores: Bc / 8 accumulator tiles of 16 x 8, d / 16 k-steps each.
   Q's A fragments are loaded once (``ldmatrix.x4`` from the staged Q tile) and kept in
   registers; K_j's B fragments come from ``ldmatrix.x4`` (K stored [key, dim] is B = K^T
   "col"-major: no transpose).
2. The online softmax (Algorithm 1, lines 8-10): a row lives in the 4 lanes of one quad
   (same g), each holding 2 Bc / 8 of its scores. The tile's row max is each lane's max,
   then ``shfl_xor_sync`` with lane masks 1 and 2 (a butterfly inside the quad): all four
   hold the row's max. m_new = max(m, rowmax); O's accumulator and the lane's partial row sum
   l are rescaled by exp(m - m_new); P = exp(S - m_new). The sums stay per lane (each lane
   adds its own P's; the rescale factor is the same in all four, since m is) and are summed
   over the quad once, at the end, as FA2's own kernel does (Dao-AILab/flash-attention,
   ``csrc/flash_attn/src/softmax.h``: ``reduce_sum`` without the warp reduce in the loop,
   ``quad_allreduce_`` of the row sums in ``normalize_softmax_lse``); O stays unnormalised
   until then and is divided by l once (§3.1's first tweak).
3. P to FP16 in registers: the C fragment of two adjacent 16 x 8 tiles of S (keys 16 k ..
   16 k + 15) holds, lane by lane, exactly the elements of the A fragment of the 16 x 16 tile
   P[:, 16 k: 16 k + 16] (a0 a1 = c0 c1 of the first tile, a2 a3 = its c2 c3, a4..a7 the same
   of the second): two float32 round to float16 (bfloat16) and pack into one register,
   ``lo | (hi << 16)``; no shuffle, no shared memory (:func:`p_fragment_map` checks it).
4. O_w += P V_j on tensor cores: d / 8 tiles, Bc / 16 k-steps; V_j's B fragments from
   ``ldmatrix.x4.trans`` (V stored [key, dim] is B "row"-major: transposed on the fly).

At the end each quad sums its partial l (``shfl_xor_sync`` 1, 2), O = acc / l is rounded to
float16 into the warp's own rows of the Q tile (free since step 1) and stored row-contiguous
(coalesced), lse = m + log l by one lane a row. Rows past N are never stored.

Memory: the Q tile (64 x d) and two buffers of K_j and V_j (Bc x d each) in shared memory,
float16, every row padded by 16 bytes so that the 8 rows ``ldmatrix`` reads in one phase fall
in 8 different 16-byte bank groups (conflict-free; CUTLASS and FA2 swizzle instead, the same
effect without the padding). Tiles are copied with ``cp.async`` (16 bytes a thread, rows past
N zero-filled with ``cp_async_zfill``: no uninitialised read, and zero V rows contribute
P * 0 = 0), **double-buffered**: block j + 1's copy is issued before block j's MMAs, so it is
in flight across them (the sim model's ``cp_async_overlapped_bytes``); only the first block
(and Q) is waited for with nothing to overlap.

Masking: scores of keys >= N are -inf (a tile's zero-filled tail), and with ``causal`` keys
after the row; a warp skips K/V blocks that start after its last live row, a block stops at
its last row's block (Algorithm 1's causal skip, §3.1), a warp entirely past N computes
nothing (it still copies tiles and waits at the barriers with the others). Every live row sees
key 0 in the first block, so m is finite from then on; a block fully masked for a row leaves
its m and l as they are (the guard m_new = -inf -> exponent base 0 is kept anyway).

Registers: the fragment and accumulator arrays (``cuda.local`` arrays indexed only by loops
of compile-time trip counts, which the compiler unrolls) live in registers: ptxas reports no
local frame and no spills for every d of :data:`HEAD_DIMS` (``kernellab.sim.resources``). The
mask compares each element's constant offset 8 n + (i & 1) with a per-lane bound computed once
a block; written as ``k0 + 8 n + 2 t + (i & 1) >= N``, each of the unrolled elements kept its
own 64-bit key index and the kernel reached the 255 registers a thread may have and spilled.

Tensor-core work (:func:`mma_ops_expected`): per live warp and visited K/V block,
``Bc d / 128`` MMAs for S and as many for P V: ``Bc d / 64`` m16n8k16 instructions, 4096 FLOP
each.

Sources: T. Dao, "FlashAttention-2", arXiv:2307.08691, 2023, Algorithm 1, §3.1 (fewer
non-matmul FLOPs, causal block skipping), §3.2 (parallelism over query blocks), §3.3 (work
partitioning between warps, split-Q); NVIDIA PTX ISA 8.x, "Warp-level Matrix
Multiply-Accumulate Instructions: mma" (m16n8k16 fragments), "Data Movement and Conversion
Instructions: ldmatrix", "cp.async", "cvt" (cvt.rn.f16.f32); CUDA C++ Programming Guide,
"Warp Shuffle Functions" (``__shfl_xor_sync``).
"""

from __future__ import annotations

import math

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32, uint16, uint32
from numba.core.types import float16

from kernellab import bf16
from kernellab.kernels._cuda_args import is_device_array

__all__ = [
    "attention_tc", "attention_tc_lse", "tc_kernel", "expected", "mma_ops_expected",
    "tc_block_sizes", "tc_shared_bytes", "p_fragment_map", "HEAD_DIMS", "WARPS", "ROWS",
    "BR", "PAD", "SMEM_LIMIT",
]

#: Head dimensions the kernel takes: multiples of 16 (one mma's k) up to 128.
HEAD_DIMS = (16, 32, 64, 128)
#: Warps a block; each owns ROWS query rows (the M of mma.m16n8k16).
WARPS = 4
ROWS = 16
#: Query rows a block (Br).
BR = WARPS * ROWS
#: float16 elements of padding a shared-memory row: 16 bytes (ldmatrix conflict-free).
PAD = 8
#: Static shared memory a block may declare, bytes (attention_cuda.DEFAULT_SMEM_BYTES).
SMEM_LIMIT = 48 * 1024

_FULL = 0xFFFFFFFF
_NEG_INF = -math.inf
_F16 = np.dtype(np.float16)


def _dtype(dtype) -> np.dtype:
    """float16 or bfloat16 as a numpy dtype; ValueError otherwise."""
    dt = np.dtype(dtype)
    if dt not in (_F16, bf16.BF16):
        raise ValueError(f"the tensor-core kernel takes float16 or bfloat16, got {dt}")
    return dt


def tc_shared_bytes(d: int, Bc: int) -> int:
    """Bytes of shared memory one block declares: the Q tile (BR rows) and two buffers of the
    K and V tiles (Bc rows each), float16, rows of d + PAD elements."""
    return 2 * (d + PAD) * (BR + 4 * Bc)


def tc_block_sizes(d: int) -> tuple[int, int]:
    """(Br, Bc): Br = :data:`BR`; Bc = the largest of 64, 32, 16 whose double-buffered tiles
    fit :data:`SMEM_LIMIT` (64 for d <= 64, 16 at d = 128). Raises ValueError for d not in
    :data:`HEAD_DIMS`."""
    if d not in HEAD_DIMS:
        raise ValueError(f"head dimension d={d}: the tensor-core kernel takes {HEAD_DIMS}")
    for bc in (64, 32, 16):
        if tc_shared_bytes(d, bc) <= SMEM_LIMIT:
            return BR, bc
    raise ValueError(f"d={d}: no key block fits {SMEM_LIMIT} bytes")  # pragma: no cover


def _check_bc(d: int, Bc) -> int:
    Bc = tc_block_sizes(d)[1] if Bc is None else int(Bc)
    if Bc < 16 or Bc % 16:
        raise ValueError(f"Bc={Bc}: the key block must be a positive multiple of 16 (the k of "
                         "the P V mma)")
    if tc_shared_bytes(d, Bc) > SMEM_LIMIT:
        raise ValueError(f"Bc={Bc} at d={d} needs {tc_shared_bytes(d, Bc)} bytes of shared "
                         f"memory, more than the {SMEM_LIMIT} a block may declare")
    return Bc


@cuda.jit(device=True)
def _f16_bits(x):
    """float32 -> the uint16 bits of the nearest float16 (cvt.rn.f16.f32)."""
    return float16(x).view(np.uint16)


@cuda.jit(device=True)
def _pack(lo, hi):
    """Two float32 rounded to float16 (cvt.rn.f16.f32) and packed into one .f16x2 register:
    ``lo`` in the low half (the element with the lower column index)."""
    a = uint32(_f16_bits(lo))
    b = uint32(_f16_bits(hi))
    return a | (b << uint32(16))


@cuda.jit(device=True)
def _mma_f16(a, b, c):
    """``mma...f32.f16.f16.f32`` (a device function, so that a kernel can pick its kind)."""
    return cuda.mma_m16n8k16_f16(a, b, c)


@cuda.jit(device=True)
def _mma_bf16(a, b, c):
    """``mma...f32.bf16.bf16.f32``."""
    return cuda.mma_m16n8k16_bf16(a, b, c)


@cuda.jit(device=True)
def _pack_bf16(lo, hi):
    """:func:`_pack` for a .bf16x2 register (cvt.rn.bf16.f32: :func:`kernellab.bf16.narrow`)."""
    a = uint32(bf16.narrow(lo))
    b = uint32(bf16.narrow(hi))
    return a | (b << uint32(16))


_KERNELS = {}


def tc_kernel(d: int, Bc: int, dtype=_F16):
    """The kernel for head dimension ``d``, key block ``Bc`` and element type ``dtype``
    (float16 or bfloat16: the mma kind and the rounding of P and O; shared arrays and register
    arrays need their shapes at compile time: one kernel per triple, cached). Launch with grid
    (ceil(N / BR), B*H) and WARPS * 32 = 128 threads: ``k(Q, K, V, O, lse, scale, causal)`` with
    Q, K, V, O uint16 views of (B, H, N, d) arrays of ``dtype`` and lse float32 (B, H, N)."""
    key = (int(d), int(Bc), _dtype(dtype))
    if key in _KERNELS:
        return _KERNELS[key]
    D, BC, DT = key
    is_bf16 = DT == bf16.BF16
    mma = _mma_bf16 if is_bf16 else _mma_f16
    pack = _pack_bf16 if is_bf16 else _pack
    to_bits = bf16.narrow if is_bf16 else _f16_bits
    DP = D + PAD                # padded row of every shared tile, elements
    CH = D // 8                 # 16-byte chunks a row
    KD = D // 16                # k-steps of S = Q K^T (over d)
    NS = BC // 8                # 16 x 8 tiles of S (over keys)
    KP = BC // 16               # k-steps of O += P V (over keys)
    NO = D // 8                 # 16 x 8 tiles of O (over d)
    THREADS = WARPS * 32

    @cuda.jit
    def flash2_tc_fwd(Q, K, V, O, lse, scale, causal):
        sQ = cuda.shared.array((BR, DP), uint16)
        sK = cuda.shared.array((2, BC, DP), uint16)
        sV = cuda.shared.array((2, BC, DP), uint16)
        qa = cuda.local.array((KD, 4), uint32)      # Q's A fragments (registers: unrolled)
        acc_s = cuda.local.array((NS, 4), float32)  # S, then P, of one K/V block
        acc_o = cuda.local.array((NO, 4), float32)  # unnormalised O
        H = Q.shape[1]
        N = Q.shape[2]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        w = tid >> 5
        lane = tid & 31
        g = lane >> 2               # groupID: rows g and g + 8 of every tile
        t = lane & 3                # thread in group: columns 2t, 2t + 1
        q0 = cuda.blockIdx.x * BR
        m0 = q0 + ROWS * w          # this warp's first query row
        row0 = m0 + g
        row1 = m0 + g + 8
        live = m0 < N               # the same in the whole warp
        last = min(m0 + ROWS, N) - 1    # the warp's last live row
        kend = N
        if causal:                  # keys after the block's last row: never loaded
            kend = min(N, q0 + BR)
        sc = float32(scale)

        # Q tile and the first K/V block: one cp.async group
        for e in range(tid, BR * CH, THREADS):
            r = e // CH
            c = (e % CH) * 8
            if q0 + r < N:
                cuda.cp_async(sQ, (r, c), Q, (b, h, q0 + r, c), 16)
            else:
                cuda.cp_async_zfill(sQ, (r, c), Q, (b, h, 0, c), 16, 0)
        for e in range(tid, BC * CH, THREADS):
            r = e // CH
            c = (e % CH) * 8
            if r < N:
                cuda.cp_async(sK, (0, r, c), K, (b, h, r, c), 16)
                cuda.cp_async(sV, (0, r, c), V, (b, h, r, c), 16)
            else:
                cuda.cp_async_zfill(sK, (0, r, c), K, (b, h, 0, c), 16, 0)
                cuda.cp_async_zfill(sV, (0, r, c), V, (b, h, 0, c), 16, 0)
        cuda.cp_async_commit_group()

        m_0 = float32(_NEG_INF)     # running max of rows row0 and row1 (scaled scores)
        m_1 = float32(_NEG_INF)
        l_0 = float32(0.0)          # this lane's share of their running sums
        l_1 = float32(0.0)
        for n in range(NO):
            for i in range(4):
                acc_o[n, i] = float32(0.0)

        it = 0
        for k0 in range(0, kend, BC):
            buf = it & 1
            # prefetch block j + 1 into the other buffer (free since the barrier that ended
            # block j - 1); an empty group past the last block keeps wait_group(1) exact
            k1 = k0 + BC
            if k1 < kend:
                for e in range(tid, BC * CH, THREADS):
                    r = e // CH
                    c = (e % CH) * 8
                    if k1 + r < N:
                        cuda.cp_async(sK, (1 - buf, r, c), K, (b, h, k1 + r, c), 16)
                        cuda.cp_async(sV, (1 - buf, r, c), V, (b, h, k1 + r, c), 16)
                    else:
                        cuda.cp_async_zfill(sK, (1 - buf, r, c), K, (b, h, 0, c), 16, 0)
                        cuda.cp_async_zfill(sV, (1 - buf, r, c), V, (b, h, 0, c), 16, 0)
            cuda.cp_async_commit_group()
            cuda.cp_async_wait_group(1)         # block j (and Q) landed, j + 1 in flight
            cuda.syncthreads()

            if it == 0 and live:                # Q's A fragments, once: rows 16w.., 16 k..
                for kk in range(KD):
                    a4 = cuda.ldmatrix_x4(sQ, (ROWS * w + ((lane >> 3) & 1) * 8 + (lane & 7),
                                               16 * kk + (lane >> 4) * 8))
                    for i in range(4):
                        qa[kk, i] = a4[i]

            if live and not (causal and k0 > last):
                # 1. S = Q_w K_j^T: B[k = dim, n = key] = K[key, dim], no transpose
                for n in range(NS):
                    for i in range(4):
                        acc_s[n, i] = float32(0.0)
                for n2 in range(NS // 2):
                    for kk in range(KD):
                        b4 = cuda.ldmatrix_x4(sK, (buf, 16 * n2 + (lane >> 4) * 8 + (lane & 7),
                                                   16 * kk + ((lane >> 3) & 1) * 8))
                        a = (qa[kk, 0], qa[kk, 1], qa[kk, 2], qa[kk, 3])
                        c = mma(
                            a, (b4[0], b4[1]),
                            (acc_s[2 * n2, 0], acc_s[2 * n2, 1], acc_s[2 * n2, 2],
                             acc_s[2 * n2, 3]))
                        for i in range(4):
                            acc_s[2 * n2, i] = c[i]
                        c = mma(
                            a, (b4[2], b4[3]),
                            (acc_s[2 * n2 + 1, 0], acc_s[2 * n2 + 1, 1], acc_s[2 * n2 + 1, 2],
                             acc_s[2 * n2 + 1, 3]))
                        for i in range(4):
                            acc_s[2 * n2 + 1, i] = c[i]

                # 2. scale, mask, the tile's row max: this lane's, then its quad's. Element
                # (n, i) is key k0 + 2t + 8n + (i & 1): masked when 8n + (i & 1) reaches
                # lim (the sequence's end) or passes the row (causal), a constant against a
                # per-lane bound once the loops are unrolled
                lim_0 = N - k0 - 2 * t
                lim_1 = lim_0
                if causal:
                    lim_0 = min(lim_0, row0 - k0 - 2 * t + 1)
                    lim_1 = min(lim_1, row1 - k0 - 2 * t + 1)
                x_0 = float32(_NEG_INF)
                x_1 = float32(_NEG_INF)
                for n in range(NS):
                    for i in range(4):
                        s = acc_s[n, i] * sc
                        if 8 * n + (i & 1) >= (lim_0 if i < 2 else lim_1):
                            s = float32(_NEG_INF)
                        acc_s[n, i] = s
                        if i < 2:
                            x_0 = max(x_0, s)
                        else:
                            x_1 = max(x_1, s)
                x_0 = max(x_0, cuda.shfl_xor_sync(_FULL, x_0, 1))
                x_0 = max(x_0, cuda.shfl_xor_sync(_FULL, x_0, 2))
                x_1 = max(x_1, cuda.shfl_xor_sync(_FULL, x_1, 1))
                x_1 = max(x_1, cuda.shfl_xor_sync(_FULL, x_1, 2))
                mn_0 = max(m_0, x_0)
                mn_1 = max(m_1, x_1)
                base_0 = mn_0 if mn_0 != _NEG_INF else float32(0.0)     # the -inf guard
                base_1 = mn_1 if mn_1 != _NEG_INF else float32(0.0)
                alpha_0 = math.exp(m_0 - base_0)        # 0 on the first block (m = -inf)
                alpha_1 = math.exp(m_1 - base_1)
                m_0 = mn_0
                m_1 = mn_1
                l_0 *= alpha_0
                l_1 *= alpha_1
                for n in range(NO):
                    acc_o[n, 0] *= alpha_0
                    acc_o[n, 1] *= alpha_0
                    acc_o[n, 2] *= alpha_1
                    acc_o[n, 3] *= alpha_1
                for n in range(NS):
                    for i in range(4):
                        p = math.exp(acc_s[n, i] - (base_0 if i < 2 else base_1))
                        acc_s[n, i] = p
                        if i < 2:
                            l_0 += p
                        else:
                            l_1 += p

                # 3.-4. O += P V_j: P's A fragment for keys 16 kk .. 16 kk + 15 is the C
                # fragment of S tiles 2 kk and 2 kk + 1, rounded to float16 and packed
                for kk in range(KP):
                    pa = (pack(acc_s[2 * kk, 0], acc_s[2 * kk, 1]),
                          pack(acc_s[2 * kk, 2], acc_s[2 * kk, 3]),
                          pack(acc_s[2 * kk + 1, 0], acc_s[2 * kk + 1, 1]),
                          pack(acc_s[2 * kk + 1, 2], acc_s[2 * kk + 1, 3]))
                    for n2 in range(NO // 2):
                        b4 = cuda.ldmatrix_x4_trans(
                            sV, (buf, 16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7),
                                 16 * n2 + (lane >> 4) * 8))
                        c = mma(
                            pa, (b4[0], b4[1]),
                            (acc_o[2 * n2, 0], acc_o[2 * n2, 1], acc_o[2 * n2, 2],
                             acc_o[2 * n2, 3]))
                        for i in range(4):
                            acc_o[2 * n2, i] = c[i]
                        c = mma(
                            pa, (b4[2], b4[3]),
                            (acc_o[2 * n2 + 1, 0], acc_o[2 * n2 + 1, 1], acc_o[2 * n2 + 1, 2],
                             acc_o[2 * n2 + 1, 3]))
                        for i in range(4):
                            acc_o[2 * n2 + 1, i] = c[i]
            cuda.syncthreads()                  # block j read by all: its buffer is free
            it += 1

        if live:
            # the quad's partial sums: one butterfly, once
            l_0 += cuda.shfl_xor_sync(_FULL, l_0, 1)
            l_0 += cuda.shfl_xor_sync(_FULL, l_0, 2)
            l_1 += cuda.shfl_xor_sync(_FULL, l_1, 1)
            l_1 += cuda.shfl_xor_sync(_FULL, l_1, 2)
            inv_0 = float32(1.0) / l_0
            inv_1 = float32(1.0) / l_1
            r0 = ROWS * w + g
            for n in range(NO):                 # O in the inputs' dtype into the warp's rows of sQ
                c0 = 8 * n + 2 * t
                sQ[r0, c0] = to_bits(acc_o[n, 0] * inv_0)
                sQ[r0, c0 + 1] = to_bits(acc_o[n, 1] * inv_0)
                sQ[r0 + 8, c0] = to_bits(acc_o[n, 2] * inv_1)
                sQ[r0 + 8, c0 + 1] = to_bits(acc_o[n, 3] * inv_1)
            if t == 0:
                if row0 < N:
                    lse[b, h, row0] = m_0 + math.log(l_0)
                if row1 < N:
                    lse[b, h, row1] = m_1 + math.log(l_1)
            cuda.syncwarp()
            for e in range(lane, ROWS * D, 32):     # row-contiguous stores, live rows only
                r = e // D
                if m0 + r < N:
                    O[b, h, m0 + r, e % D] = sQ[ROWS * w + r, e % D]

    flash2_tc_fwd.block_sizes = (BR, BC)
    _KERNELS[key] = flash2_tc_fwd
    return flash2_tc_fwd


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _visited(N: int, Bc: int, causal: bool):
    """(block start q0, warp's first row m0, [k0 of each K/V block the warp computes]) of
    every live warp: what the kernel's loops visit."""
    out = []
    for q0 in range(0, N, BR):
        kend = min(N, q0 + BR) if causal else N
        for w in range(WARPS):
            m0 = q0 + ROWS * w
            if m0 >= N:
                continue
            last = min(m0 + ROWS, N) - 1
            ks = [k0 for k0 in range(0, kend, Bc) if not (causal and k0 > last)]
            out.append((q0, m0, ks))
    return out


def mma_ops_expected(B: int, H: int, N: int, d: int, Bc: int | None = None,
                     causal: bool = False) -> int:
    """The ``mma.m16n8k16`` instructions one launch issues (the sim tier's ``mma_ops``): per
    live warp (first row < N) and K/V block it computes, Bc / 8 x d / 16 for S = Q K^T and
    d / 8 x Bc / 16 for P V, ``Bc d / 64`` in all; causal: the block's key loop stops at its
    last row and a warp skips blocks that start after its own last row."""
    Bc = _check_bc(d, Bc)
    blocks = sum(len(ks) for _, _, ks in _visited(N, Bc, causal))
    return B * H * blocks * (Bc * d // 64)


def p_fragment_map(lane: int) -> list[tuple[int, int]]:
    """For each half a0..a7 of ``lane``'s A fragment of P over keys 16 k .. 16 k + 15 of a
    block: (S tile, element), the accumulator element of the *same lane* that holds that
    entry of P (tile 0 is S's 16 x 8 tile of keys 16 k .. 16 k + 7, tile 1 the next; element
    c0..c3), found by matching the PTX ISA's coordinates (:mod:`kernellab.sim.mma`'s
    ``a_coords`` and ``c_coords``). That every half is found in the lane itself is why P
    goes from the S accumulators to the next mma's A operand in registers, with no shuffle;
    the kernel packs exactly this map: ``[(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1),
    (1, 2), (1, 3)]`` for every lane. Raises ValueError for a lane outside 0..31 (and
    RuntimeError if an entry were held by another lane)."""
    from kernellab.sim.mma import a_coords, c_coords

    if not 0 <= int(lane) < 32:
        raise ValueError(f"lane {lane} outside 0..31")
    held = {(r, 8 * tile + col): (tile, i) for tile in (0, 1)
            for i, (r, col) in enumerate(c_coords(int(lane)))}
    out = []
    for rc in a_coords(int(lane)):
        if rc not in held:
            raise RuntimeError(f"P{rc} of lane {lane}'s A fragment is not in its C fragment")
        out.append(held[rc])
    return out


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------

def _check(Q, K, V, O):
    for name, a in (("Q", Q), ("K", K), ("V", V), ("O", O)):
        if not (isinstance(a, np.ndarray) or is_device_array(a)):
            raise TypeError(f"{name} must be a numpy array or a numba device array, "
                            f"got {type(a).__name__}")
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, d), got shape {a.shape}")
        if np.dtype(a.dtype) not in (_F16, bf16.BF16):
            raise ValueError(f"{name} must be float16 or bfloat16 (the tensor-core kernel's "
                             f"inputs and output), got {a.dtype}")
    for name, a in (("K", K), ("V", V), ("O", O)):
        if a.shape != Q.shape:
            raise ValueError(f"{name} must match Q's shape: Q {Q.shape}, {name} {a.shape}")
        if np.dtype(a.dtype) != np.dtype(Q.dtype):
            raise ValueError(f"{name} must have Q's dtype: Q {Q.dtype}, {name} {a.dtype}")
    if Q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"head dimension d={Q.shape[3]}: the tensor-core kernel takes "
                         f"{HEAD_DIMS}")
    if isinstance(O, np.ndarray):
        if not O.flags.writeable:
            raise ValueError("O is read-only")
        for name, a in (("Q", Q), ("K", K), ("V", V)):
            if isinstance(a, np.ndarray) and np.shares_memory(a, O):
                raise ValueError(f"O overlaps {name}")


def _run(Q, K, V, O, causal, Bc, want_lse):
    _check(Q, K, V, O)
    B, H, N, d = Q.shape
    Bc = _check_bc(d, Bc)
    if B * H * N == 0:
        return np.zeros((B, H, N), np.float32) if want_lse else None

    def dev(a):
        return cuda.to_device(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a

    host_o = isinstance(O, np.ndarray)
    dQ, dK, dV, dO = dev(Q), dev(K), dev(V), dev(O)
    dlse = cuda.device_array((B, H, N), np.float32)
    k = tc_kernel(d, Bc, Q.dtype)
    k[(_cdiv(N, BR), B * H), WARPS * 32](
        dQ.view(np.uint16), dK.view(np.uint16), dV.view(np.uint16), dO.view(np.uint16), dlse,
        1.0 / math.sqrt(d), bool(causal))
    if host_o:
        O[...] = dO.copy_to_host()
    if want_lse:
        return dlse.copy_to_host() if host_o else dlse
    return None


def attention_tc(Q, K, V, O, causal=False, *, Bc=None):
    """FlashAttention-2's forward pass on tensor cores (module docstring): Q, K, V, O
    (B, H, N, d) float16 or bfloat16, d in :data:`HEAD_DIMS`; O written in place. ``Bc``: keys
    a K/V block, a multiple of 16 (default :func:`tc_block_sizes`). Returns None."""
    _run(Q, K, V, O, causal, Bc, False)


def attention_tc_lse(Q, K, V, O, causal=False, *, Bc=None):
    """:func:`attention_tc` that also returns the row logsumexp lse = m + log l (float32
    (B, H, N); the device array when O is one)."""
    return _run(Q, K, V, O, causal, Bc, True)


def expected(Q, K, V, causal: bool = False):
    """(ref, rule): the float64 golden output (``reference_kernels.attention.attention_golden``
    of the inputs as they are) and the error rule chapter 5 and the flash-attention lab apply
    to a float16 (bfloat16) attention output: :func:`kernellab.numerics.flash_attention_rule`
    with the measured error of a plain same-dtype attention (``plain_error``), one ulp at
    max|O|, and the float32 rounding bound of a fused kernel (``fused_rounding_bound``). Check
    an output with ``kernellab.numerics.compare(O, ref, rule, tile=None)``."""
    from kernellab import numerics
    from reference_kernels.attention import attention_golden, fused_rounding_bound, plain_error

    ref, _ = attention_golden(Q, K, V, causal)
    rule = numerics.flash_attention_rule(plain_error(Q, K, V, causal, ref), ref,
                                         np.dtype(Q.dtype),
                                         rounding=fused_rounding_bound(Q, K, V, causal))
    return ref, rule
