"""Chapter 5: scaled dot-product attention in CUDA, the materialised kernel and FlashAttention-2.

In the style of llm.c's ``dev/cuda`` kernels: one module, one harness, each version a step from
the one before. For each batch b and head h::

    S = Q K^T / sqrt(d)          (N, N)    S[i, j] = -inf for j > i when causal
    P = softmax(S) row by row    (N, N)
    O = P V                      (N, d)    lse[i] = logsumexp_j S[i, j]  (float32, optional)

Harness (every version, every launch function):

* ``Q``, ``K``, ``V``, ``O`` of one shape (B, H, N, d) and one dtype, float32 or float16;
  N >= 1 any length (tails of the tiles are masked), 1 <= d <= :data:`D_MAX`. ``O`` is written
  in place and rounded once to its dtype; Q, K, V are not modified. Scores, softmax statistics
  and both products accumulate in float32 (a float16 element is widened with ``float32(x)``
  when read: on numba's simulator ``0.0 + float16`` stays float16).
* ``attention_vN(Q, K, V, O, causal=False)`` returns None (the lab's signature);
  ``attention_vN_lse(...)`` also returns the row logsumexp, float32 (B, H, N).
* numpy arguments are copied to the device and ``O`` back; numba device arrays are used as they
  are (``O`` then stays on the device and the launches are asynchronous on a GPU).
* ``TypeError`` for an argument that is neither a numpy nor a device array; ``ValueError`` for
  wrong ranks, shapes, dtypes, d > D_MAX, a read-only O or an O that overlaps an input.

Versions::

    v1 materialised  what an unfused framework runs (Dao et al. 2022, Algorithm 0 "standard
                     attention"): three steps through global memory. (1) a tiled NT GEMM,
                     16 x 16 shared-memory tiles as in chapter 2's v3 (the K tile padded to 17
                     words: it is read down a column), writes S = scale Q K^T to a float32
                     (B, H, N, N) array, -inf above the diagonal when causal; (2) chapter 3's
                     online softmax normalises every row of S in place, one warp a row (the
                     (m, l) merge and shuffle butterfly of softmax_cuda; 32 lanes rather than
                     v3's 256 threads suit rows of a few hundred), and writes the row's
                     lse = m + log l; (3) a tiled NN GEMM, O = P V. O(N^2) extra memory and
                     Theta(N d + N^2) global traffic per head: S is written once, read twice
                     by the softmax, written once and read once more by P V. Every score is
                     computed, masked or not. The provided baseline the lab's modelled
                     speedup is measured against.
    v2 flash2        FlashAttention-2's forward pass (Dao 2023, Algorithm 1 and §3.1), one
                     launch. Grid (T_r = ceil(N / Br), B*H): one thread block per (b, h, block
                     of Br query rows), one thread per query row: a scalar fused kernel (FP32
                     FMAs, no tensor cores). FA2 itself (§3.3) gives each warp 16-row slices
                     on tensor-core tiles (mma.m16n8k16), each row spread over a quad of 4
                     lanes that combine max and sum with shuffles; its "split-Q" means the
                     warps exchange nothing. The block stages its Q tile
                     in shared memory (coalesced), each thread copies its row to ``q`` and
                     zeroes ``o`` (``cuda.local`` arrays indexed only by the unrolled t loop:
                     registers while they fit; at d = 128 they exceed the 255 registers a thread
                     may have and ptxas spills), then for every K/V block j of Bc rows: all
                     threads stage K_j and V_j in shared memory (coalesced), barrier, each
                     thread computes its Bc scores s = scale q.k (k broadcast from shared
                     memory) into ``sc``, a ``cuda.local`` array indexed with the runtime bound
                     jn: *local memory*, a 4 Bc-byte stack frame per thread in device memory,
                     cached in L1/L2 (ptxas's report; CUDA C++ Programming Guide, "Device Memory
                     Accesses", "Local Memory"), the tile's row
                     max, m_new = max(m, rowmax), rescales its unnormalised accumulator o and
                     its running sum l by exp(m - m_new) once per tile, adds sum_j p_j v_j with
                     p_j = exp(s_j - m_new); barrier before the next tile overwrites K_j, V_j.
                     At the end o / l (normalised once) goes through the Q tile's shared
                     memory to O (coalesced stores) and lse = m + log l to ``lse``.
                     No N x N array exists anywhere: the extra memory is the N statistics.
                     Causal: K/V blocks entirely above the diagonal are never loaded; the mask
                     is applied only in blocks that straddle it (each row's key loop stops at
                     the row), the others run unmasked. Tails: K/V rows past N are never loaded
                     nor used; threads of Q rows past N (the padded tail of the last Q block)
                     load and wait at the barriers with the others but compute nothing, so no
                     fully masked row exists to produce 0/0 = NaN (a tile whose scores are all
                     masked for a row -- possible on a diagonal block when Br > Bc -- leaves
                     its m and l untouched).

Global traffic (per (b, h), itemsize ``s``; :func:`flash_bytes_predicted` and
:func:`materialised_bytes_predicted` give the exact counts the sim tier measures)::

    v1   2 ceil(N/16) N d s  +  4 N^2          scores: Q and K tiles re-read; S stored
         8 N^2 + 4 N^2 + 4 N                   softmax: S read twice (second from L2), stored;
                                               lse stored
         ceil(d/16) 4 N^2 + ceil(N/16) N d s   P V: P and V tiles
         + N d s                               O stored
    v2   N d s (Q)  +  2 d s sum_i sum_{j visited} rows(K_j)  +  N d s (O)  +  4 N (lse)
         = 2 N d s + 4 N + 2 N d s T_r   without causal masking

so v2 moves Theta(N^2 d / Br) bytes. The block sizes come from a shared-memory budget ``M``
bytes (:func:`flash_block_sizes`): the tiles take s (Br (d + pad) + 2 Bc d) bytes, and with
Br = Bc that is about 3 Br d s, so Br ~ M / (3 d s) and the K/V re-reads cost
2 N^2 d s / Br ~ 6 N^2 d^2 s^2 / M: FlashAttention's Theta(N^2 d^2 / M) (Dao et al. 2022,
Theorem 2), which the chapter measures across N and across M. Two things the counts show:
v1's own 16 x 16 GEMM tiles re-read Q and K (2 N^2 d s / 16 bytes), also Theta(N^2 d), so in
global (L2) bytes v2 with Br = 32 beats v1 by at most ~5x however long N gets (4.5x at N = 256,
d = 64, float32); in DRAM bytes (each sector once a launch, the sim model's perfect L2) v1
moves Theta(N^2) -- S three times -- and v2 Theta(N d), the compulsory Q, K, V and O.

Shared-memory banks: the Q tile is padded by one 4-byte word per row (``pad`` = 4 / s
elements), because each thread reads its own row of it (lane stride d + pad elements, an odd
number of words: conflict-free); K and V tiles are read one row for the whole block at a time
(every lane the same word: a broadcast) and need no padding.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32
from numba.core.types import float16

from kernellab.kernels._cuda_args import is_device_array
from kernellab.kernels.softmax_cuda import _merge as _sm_merge, _warp_merge as _sm_warp_merge

__all__ = [
    "attention_v1", "attention_v1_lse", "attention_v2", "attention_v2_lse", "LADDER",
    "LADDER_LSE", "KERNELS", "ladder_case", "main",
    "D_MAX", "TILE", "DEFAULT_SMEM_BYTES", "MAX_BLOCK", "flash_block_sizes",
    "flash_shared_bytes", "flash_bytes_predicted", "materialised_bytes_predicted",
    "flash_kernel", "attention_flops", "FA2_A100_PEAK_SHARE", "FA1_A100_PEAK_SHARE",
]

#: Largest head dimension the kernels take (v2 keeps a thread's q and o rows in ``cuda.local``
#: arrays: registers while 2 d floats fit, spilled by ptxas at d = 128).
D_MAX = 128
#: Tile edge of v1's GEMMs (16 x 16 threads per block, chapter 2's v3).
TILE = 16
_TILE_PAD = TILE + 1        # a compile-time constant for the padded shared tile
#: Default shared-memory budget M of v2, bytes: the static shared memory a block may declare
#: (more needs dynamic shared memory and the cudaFuncSetAttribute opt-in
#: cudaFuncAttributeMaxDynamicSharedMemorySize, CUDA C++ Programming Guide, "Shared Memory",
#: which numba's static ``cuda.shared.array`` tiles cannot make: so Br = Bc = 32 at d = 128 fp16).
DEFAULT_SMEM_BYTES = 48 * 1024
#: Largest Br and Bc v2 picks by itself (Br threads a block; Bc scores in a thread's local frame,
#: 4 Bc bytes: the score array is indexed with a runtime bound, so it cannot live in registers).
MAX_BLOCK = 128
#: Published anchors, the range of the A100's theoretical maximum FLOP/s each kernel reaches in
#: its paper's benchmarks (T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism
#: and Work Partitioning", arXiv:2307.08691, 2023, abstract): FlashAttention-2 50-73%,
#: FlashAttention 25-40%. Quoted, not re-measured.
FA2_A100_PEAK_SHARE = (0.50, 0.73)
FA1_A100_PEAK_SHARE = (0.25, 0.40)

_NEG_INF = -math.inf
_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
_NB_TYPES = {np.dtype(np.float32): float32, np.dtype(np.float16): float16}


def attention_flops(B: int, H: int, N: int, d: int, causal: bool = False) -> int:
    """FLOPs of the forward pass by FlashAttention-2's convention (T. Dao,
    "FlashAttention-2", arXiv:2307.08691, 2023):
    4 N^2 d per head (two GEMMs), halved when causal."""
    f = 4 * B * H * N * N * d
    return f // 2 if causal else f


# ----------------------------------------------------------------------------------------------
# v1: materialised attention (scores GEMM -> softmax in place -> P V GEMM)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _scores_kernel(Q, K, S, scale, causal):
    """S[b, h, i, j] = scale * Q[b, h, i, :] . K[b, h, j, :] (float32), -inf for j > i when
    ``causal``. Grid (ceil(N/16), ceil(N/16), B*H), block (16, 16): threadIdx.x -> j."""
    Qs = cuda.shared.array((TILE, TILE), float32)
    Ks = cuda.shared.array((TILE, _TILE_PAD), float32)     # read down a column: padded
    H = Q.shape[1]
    N = Q.shape[2]
    d = Q.shape[3]
    b = cuda.blockIdx.z // H
    h = cuda.blockIdx.z % H
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i0 = cuda.blockIdx.y * TILE
    j0 = cuda.blockIdx.x * TILE
    acc = float32(0.0)
    for t0 in range(0, d, TILE):
        # row i0+ty of Q and row j0+ty of K, columns t0+tx: coalesced along d; zero outside
        if i0 + ty < N and t0 + tx < d:
            Qs[ty, tx] = float32(Q[b, h, i0 + ty, t0 + tx])
        else:
            Qs[ty, tx] = float32(0.0)
        if j0 + ty < N and t0 + tx < d:
            Ks[ty, tx] = float32(K[b, h, j0 + ty, t0 + tx])
        else:
            Ks[ty, tx] = float32(0.0)
        cuda.syncthreads()
        for t in range(TILE):
            acc += Qs[ty, t] * Ks[tx, t]
        cuda.syncthreads()
    i = i0 + ty
    j = j0 + tx
    if i < N and j < N:
        if causal and j > i:
            S[b, h, i, j] = float32(_NEG_INF)
        else:
            S[b, h, i, j] = acc * float32(scale)


@cuda.jit
def _pv_kernel(P, V, O):
    """O[b, h, i, t] = sum_j P[b, h, i, j] V[b, h, j, t], accumulated in float32 and rounded
    once to O's dtype. Grid (ceil(d/16), ceil(N/16), B*H), block (16, 16): threadIdx.x -> t."""
    Ps = cuda.shared.array((TILE, TILE), float32)
    Vs = cuda.shared.array((TILE, TILE), float32)
    H = V.shape[1]
    N = V.shape[2]
    d = V.shape[3]
    b = cuda.blockIdx.z // H
    h = cuda.blockIdx.z % H
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i0 = cuda.blockIdx.y * TILE
    c0 = cuda.blockIdx.x * TILE
    acc = float32(0.0)
    for j0 in range(0, N, TILE):
        if i0 + ty < N and j0 + tx < N:
            Ps[ty, tx] = P[b, h, i0 + ty, j0 + tx]
        else:
            Ps[ty, tx] = float32(0.0)
        if j0 + ty < N and c0 + tx < d:
            Vs[ty, tx] = float32(V[b, h, j0 + ty, c0 + tx])
        else:
            Vs[ty, tx] = float32(0.0)
        cuda.syncthreads()
        for j in range(TILE):
            acc += Ps[ty, j] * Vs[j, tx]
        cuda.syncthreads()
    if i0 + ty < N and c0 + tx < d:
        O[b, h, i0 + ty, c0 + tx] = acc


#: Rows of S per block of v1's softmax: one warp a row.
_ROWS_PER_BLOCK = 4


@cuda.jit
def _row_softmax_kernel(S, lse):
    """Chapter 3's online softmax (Milakov & Gimelshein 2018) of each row of S (R, N) float32,
    in place, one warp per row, and the row's logsumexp lse[r] = m + log l (float32, (R,)).
    Each lane folds its elements (j = lane, lane + 32, ...) into a running (m, l) with chapter
    3's merge rule (an element x is the pair (x, 1)), the warp's pairs are merged by the
    shuffle butterfly of softmax_cuda, then a second sweep writes exp(x - m) / l. A fully
    masked row (-inf everywhere) becomes zeros with lse = -inf. Block 32 * _ROWS_PER_BLOCK."""
    lane = cuda.threadIdx.x % 32
    r = cuda.blockIdx.x * _ROWS_PER_BLOCK + cuda.threadIdx.x // 32
    if r < S.shape[0]:                          # the same for every lane of a warp
        m = float32(_NEG_INF)
        l = float32(0.0)
        for j in range(lane, S.shape[1], 32):
            m, l = _sm_merge(m, l, S[r, j], float32(1.0))
        m, l = _sm_warp_merge(m, l)
        for j in range(lane, S.shape[1], 32):
            S[r, j] = float32(0.0) if m == _NEG_INF else math.exp(S[r, j] - m) / l
        if lane == 0:
            lse[r] = m + math.log(l) if m != _NEG_INF else float32(_NEG_INF)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _v1_launches(dQ, dK, dV, dO, causal, dlse=None):
    B, H, N, d = dQ.shape
    scale = 1.0 / math.sqrt(d)
    if dlse is None:
        dlse = cuda.device_array((B, H, N), np.float32)
    S = cuda.device_array((B, H, N, N), np.float32)        # the O(N^2) intermediate
    _scores_kernel[(_cdiv(N, TILE), _cdiv(N, TILE), B * H), (TILE, TILE)](
        dQ, dK, S, scale, bool(causal))
    R = B * H * N
    _row_softmax_kernel[_cdiv(R, _ROWS_PER_BLOCK), 32 * _ROWS_PER_BLOCK](
        S.reshape(R, N), dlse.reshape(R))
    _pv_kernel[(_cdiv(d, TILE), _cdiv(N, TILE), B * H), (TILE, TILE)](S, dV, dO)


# ----------------------------------------------------------------------------------------------
# v2: FlashAttention-2 forward
# ----------------------------------------------------------------------------------------------

def _pad(dtype) -> int:
    """Elements of padding per row of v2's Q tile: one 4-byte word."""
    return 4 // np.dtype(dtype).itemsize


def flash_shared_bytes(Br: int, Bc: int, d: int, dtype) -> int:
    """Bytes of shared memory one v2 block declares: the Q tile Br x (d + pad) and the K and
    V tiles Bc x d, in the inputs' dtype."""
    s = np.dtype(dtype).itemsize
    return s * (Br * (d + _pad(dtype)) + 2 * Bc * d)


def flash_block_sizes(d: int, dtype, smem_bytes: int | None = None) -> tuple[int, int]:
    """(Br, Bc) v2 uses for head dimension ``d`` and ``dtype`` under a shared-memory budget of
    ``smem_bytes`` (default :data:`DEFAULT_SMEM_BYTES`): square tiles, Br = Bc = the largest
    power of two <= :data:`MAX_BLOCK` whose tiles fit (:func:`flash_shared_bytes`), so Br
    grows in proportion to the budget: Br ~ M / (3 d s). Raises ValueError when even
    Br = Bc = 1 does not fit or the budget exceeds the GPU's 48 KiB static limit."""
    M = DEFAULT_SMEM_BYTES if smem_bytes is None else int(smem_bytes)
    if M > DEFAULT_SMEM_BYTES:
        raise ValueError(f"smem_bytes={M} exceeds the 48 KiB of static shared memory a block "
                         "may declare")
    if flash_shared_bytes(1, 1, d, dtype) > M:
        raise ValueError(f"smem_bytes={M} cannot hold even one row of Q, K and V "
                         f"(d={d}, {np.dtype(dtype).name})")
    B = 1
    while 2 * B <= MAX_BLOCK and flash_shared_bytes(2 * B, 2 * B, d, dtype) <= M:
        B *= 2
    return B, B


_FLASH = {}


def flash_kernel(Br: int, Bc: int, d: int, dtype):
    """The v2 kernel for block sizes (Br, Bc), head dimension d and input dtype (shared arrays
    need their shapes at compile time: one kernel per combination, cached). Launch it with
    grid (ceil(N / Br), B*H) and Br threads: ``k(Q, K, V, O, lse, scale, causal)``."""
    key = (int(Br), int(Bc), int(d), np.dtype(dtype))
    if key in _FLASH:
        return _FLASH[key]
    BR, BC, D, dt = key
    DQ = D + _pad(dt)
    nbt = _NB_TYPES[dt]

    @cuda.jit
    def flash2_fwd(Q, K, V, O, lse, scale, causal):
        Qs = cuda.shared.array((BR, DQ), nbt)
        Ks = cuda.shared.array((BC, D), nbt)
        Vs = cuda.shared.array((BC, D), nbt)
        q = cuda.local.array(D, float32)        # this thread's query row (registers: unrolled t)
        o = cuda.local.array(D, float32)        # its unnormalised output row (idem)
        sc = cuda.local.array(BC, float32)      # its scores: indexed j < jn, local memory
        H = Q.shape[1]
        N = Q.shape[2]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * BR
        nq = min(BR, N - q0)                    # rows of this Q block inside the sequence
        row = q0 + tid
        live = tid < nq                         # False on the padded tail of the last block
        sc_scale = float32(scale)

        for e in range(tid, nq * D, BR):        # Q tile: consecutive threads, consecutive t
            Qs[e // D, e % D] = Q[b, h, q0 + e // D, e % D]
        cuda.syncthreads()
        m = float32(_NEG_INF)                   # running row max
        l = float32(0.0)                        # running sum of exp(s - m)
        if live:
            for t in range(D):
                q[t] = float32(Qs[tid, t])
                o[t] = float32(0.0)

        kend = N
        if causal:                              # keys after the block's last row: never needed
            kend = q0 + nq
        for k0 in range(0, kend, BC):
            nk = min(BC, N - k0)
            cuda.syncthreads()                  # everyone is done with the previous K_j, V_j
            for e in range(tid, nk * D, BR):
                Ks[e // D, e % D] = K[b, h, k0 + e // D, e % D]
                Vs[e // D, e % D] = V[b, h, k0 + e // D, e % D]
            cuda.syncthreads()
            if live:
                jn = nk
                if causal and k0 + nk - 1 > q0:  # the block straddles the diagonal: mask
                    jn = min(nk, row - k0 + 1)
                mt = float32(_NEG_INF)
                for j in range(jn):
                    acc = float32(0.0)
                    for t in range(D):
                        acc += q[t] * float32(Ks[j, t])
                    sc[j] = acc * sc_scale
                    mt = max(mt, sc[j])
                m_new = max(m, mt)
                if m_new != _NEG_INF:           # else every score so far is masked: skip
                    alpha = math.exp(m - m_new)     # 0 on the first tile (m = -inf)
                    l *= alpha
                    for t in range(D):
                        o[t] *= alpha
                    for j in range(jn):
                        p = math.exp(sc[j] - m_new)
                        l += p
                        for t in range(D):
                            o[t] += p * float32(Vs[j, t])
                    m = m_new

        cuda.syncthreads()                      # Q tile no longer read: reuse it for O
        if live:
            inv = float32(1.0) / l
            for t in range(D):
                Qs[tid, t] = o[t] * inv         # rounded once to the output dtype
            lse[b, h, row] = m + math.log(l)
        cuda.syncthreads()
        for e in range(tid, nq * D, BR):        # coalesced stores of the O tile
            O[b, h, q0 + e // D, e % D] = Qs[e // D, e % D]

    flash2_fwd.block_sizes = (BR, BC)
    _FLASH[key] = flash2_fwd
    return flash2_fwd


def _resolve_blocks(d, dtype, Br, Bc, smem_bytes):
    if Br is None or Bc is None:
        br, bc = flash_block_sizes(d, dtype, smem_bytes)
        Br = br if Br is None else Br
        Bc = bc if Bc is None else Bc
    Br, Bc = int(Br), int(Bc)
    if not (1 <= Br <= 1024 and Bc >= 1):
        raise ValueError(f"need 1 <= Br <= 1024 and Bc >= 1, got Br={Br}, Bc={Bc}")
    if flash_shared_bytes(Br, Bc, d, dtype) > DEFAULT_SMEM_BYTES:
        raise ValueError(f"Br={Br}, Bc={Bc} need {flash_shared_bytes(Br, Bc, d, dtype)} bytes "
                         "of shared memory, more than the 48 KiB a block may declare")
    return Br, Bc


def _v2_launches(dQ, dK, dV, dO, causal, dlse=None, Br=None, Bc=None, smem_bytes=None):
    B, H, N, d = dQ.shape
    Br, Bc = _resolve_blocks(d, dQ.dtype, Br, Bc, smem_bytes)
    if dlse is None:
        dlse = cuda.device_array((B, H, N), np.float32)
    k = flash_kernel(Br, Bc, d, dQ.dtype)
    k[(_cdiv(N, Br), B * H), Br](dQ, dK, dV, dO, dlse, 1.0 / math.sqrt(d), bool(causal))


# ----------------------------------------------------------------------------------------------
# predicted traffic
# ----------------------------------------------------------------------------------------------

def flash_bytes_predicted(B: int, H: int, N: int, d: int, Br: int, Bc: int, itemsize: int,
                          causal: bool = False) -> dict:
    """Global bytes v2 moves (what the sim tier counts as ``global_load_bytes`` and
    ``global_store_bytes``), exactly: Q once, K and V once per Q block for every K/V block it
    visits (only the rows inside the sequence), O once, lse once (float32). Returns
    {"q", "kv", "o", "lse", "load", "store", "total"} in bytes, summed over B*H heads.
    Without causal masking ``kv = 2 N d s ceil(N / Br)`` per head."""
    kv_rows = 0
    for q0 in range(0, N, Br):
        kend = min(N, q0 + Br) if causal else N
        for k0 in range(0, kend, Bc):
            kv_rows += min(Bc, N - k0)
    heads = B * H
    out = {"q": heads * N * d * itemsize, "kv": heads * 2 * kv_rows * d * itemsize,
           "o": heads * N * d * itemsize, "lse": heads * 4 * N}
    out["load"] = out["q"] + out["kv"]
    out["store"] = out["o"] + out["lse"]
    out["total"] = out["load"] + out["store"]
    return out


def materialised_bytes_predicted(B: int, H: int, N: int, d: int, itemsize: int) -> dict:
    """Global bytes v1 (:func:`attention_v1`) moves, exactly: per head the scores
    GEMM reads each Q row once per column tile of S and each K row once per row tile
    (2 ceil(N/16) N d s) and stores S (4 N^2); the online softmax reads S twice and stores it
    and lse (12 N^2 + 4 N); the P V GEMM reads P once per column tile of O (ceil(d/16) 4 N^2)
    and V once per row tile (ceil(N/16) N d s) and stores O (N d s). Returns {"scores",
    "softmax", "pv", "load", "store", "total"}, each of the first three a (load, store) pair.
    Independent of causal masking (v1 computes every score)."""
    t_n, t_d = _cdiv(N, TILE), _cdiv(d, TILE)
    hd = B * H
    scores = (hd * 2 * t_n * N * d * itemsize, hd * 4 * N * N)
    softmax = (hd * 8 * N * N, hd * (4 * N * N + 4 * N))
    pv = (hd * (t_d * 4 * N * N + t_n * N * d * itemsize), hd * N * d * itemsize)
    load = scores[0] + softmax[0] + pv[0]
    store = scores[1] + softmax[1] + pv[1]
    return {"scores": scores, "softmax": softmax, "pv": pv, "load": load, "store": store,
            "total": load + store}


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
        if np.dtype(a.dtype) not in _DTYPES:
            raise ValueError(f"{name} must be float32 or float16, got {a.dtype}")
    for name, a in (("K", K), ("V", V), ("O", O)):
        if a.shape != Q.shape or np.dtype(a.dtype) != np.dtype(Q.dtype):
            raise ValueError(f"{name} must match Q: Q {Q.shape} {Q.dtype}, "
                             f"{name} {a.shape} {a.dtype}")
    if not 1 <= Q.shape[3] <= D_MAX:
        raise ValueError(f"head dimension d={Q.shape[3]} outside 1..{D_MAX}")
    if isinstance(O, np.ndarray):
        if not O.flags.writeable:
            raise ValueError("O is read-only")
        for name, a in (("Q", Q), ("K", K), ("V", V)):
            if isinstance(a, np.ndarray) and np.shares_memory(a, O):
                raise ValueError(f"O overlaps {name}")


def _run(launches, Q, K, V, O, want_lse, **kw):
    """Copy numpy arguments to the device, run ``launches(dQ, dK, dV, dO, causal, dlse)``, copy
    O (and lse) back. Returns the lse (host float32 array, or the device array when O is one)
    if ``want_lse``, else None."""
    _check(Q, K, V, O)
    B, H, N, d = Q.shape
    if B * H * N == 0:
        return np.zeros((B, H, N), np.float32) if want_lse else None
    def dev(a):
        return cuda.to_device(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a

    host_o = isinstance(O, np.ndarray)
    dQ, dK, dV, dO = dev(Q), dev(K), dev(V), dev(O)
    dlse = cuda.device_array((B, H, N), np.float32) if want_lse else None
    launches(dQ, dK, dV, dO, dlse=dlse, **kw)
    if host_o:
        O[...] = dO.copy_to_host()
    if want_lse:
        return dlse.copy_to_host() if host_o else dlse
    return None


def attention_v1(Q, K, V, O, causal=False):
    """v1 materialised attention: S = QK^T/sqrt(d) to a float32 (B, H, N, N) array, softmax
    in place (chapter 3's online softmax, one warp a row), O = P V. Q, K, V, O (B, H, N, d)
    float32/float16; O written in place. The lab's baseline."""
    _run(lambda *a, dlse: _v1_launches(*a, causal), Q, K, V, O, False)


def attention_v1_lse(Q, K, V, O, causal=False):
    """:func:`attention_v1` that also returns the row logsumexp (float32 (B, H, N)), which its
    softmax kernel writes anyway (lse = m + log l from the row's online statistics)."""
    return _run(lambda *a, dlse: _v1_launches(*a, causal, dlse), Q, K, V, O, True)


def attention_v2(Q, K, V, O, causal=False, *, Br=None, Bc=None, smem_bytes=None):
    """v2 FlashAttention-2 forward (Dao 2023, Algorithm 1): one launch, no N x N array.
    Q, K, V, O (B, H, N, d) float32/float16; O written in place. ``Br``/``Bc``: rows of a Q
    block (= threads a block) and of a K/V block; by default both from the shared-memory
    budget ``smem_bytes`` (:func:`flash_block_sizes`)."""
    _run(lambda *a, dlse: _v2_launches(*a, causal, dlse, Br, Bc, smem_bytes), Q, K, V, O,
         False)


def attention_v2_lse(Q, K, V, O, causal=False, *, Br=None, Bc=None, smem_bytes=None):
    """:func:`attention_v2` that also returns the logsumexp lse = m + log l (float32
    (B, H, N)), what FlashAttention-2 saves for its backward pass."""
    return _run(lambda *a, dlse: _v2_launches(*a, causal, dlse, Br, Bc, smem_bytes),
                Q, K, V, O, True)


#: version name -> launch function with the lab's signature, in ladder order.
LADDER = OrderedDict([("v1_materialised", attention_v1), ("v2_flash2", attention_v2)])

#: version name -> launch function that also returns lse.
LADDER_LSE = OrderedDict([("v1_materialised", attention_v1_lse), ("v2_flash2", attention_v2_lse)])

#: version name -> its kernels (v2: the factory :func:`flash_kernel` makes one per block size).
KERNELS = {"v1_materialised": (_scores_kernel, _row_softmax_kernel, _pv_kernel),
           "v2_flash2": (flash_kernel,)}


# ----------------------------------------------------------------------------------------------
# main: validate every version, then time it (kernellab.kernels._ladder)
# ----------------------------------------------------------------------------------------------

#: default (B, H, N, d) of :func:`main`'s case, per tier.
DEFAULT_SHAPE = {"sim": (1, 1, 48, 32), "gpu": (1, 8, 1024, 64)}


def ladder_case(B: int, H: int, N: int, d: int, dtype="float32", causal: bool = False, *,
                seed: int = 0):
    """The case ``python -m kernellab.kernels.attention_cuda`` validates and times: Q, K, V
    (B, H, N, d) seeded standard normal in ``dtype`` (float32 or float16), O like Q, checked
    against ``reference_kernels.attention.attention_golden`` under FlashAttention's rule as the
    flash-attention lab applies it (:func:`kernellab.numerics.flash_attention_rule` with
    ``plain_error`` and ``fused_rounding_bound``). Work: :func:`attention_flops`. Raises
    ValueError for sizes < 1, d > D_MAX or another dtype."""
    from kernellab import numerics
    from kernellab.kernels import _ladder
    from reference_kernels.attention import attention_golden, fused_rounding_bound, plain_error

    B, H, N, d, dt = int(B), int(H), int(N), int(d), np.dtype(dtype)
    if min(B, H, N, d) < 1 or d > D_MAX:
        raise ValueError(f"need B, H, N >= 1 and 1 <= d <= {D_MAX}, got {(B, H, N, d)}")
    if dt not in _DTYPES:
        raise ValueError(f"dtype must be float32 or float16, got {dt}")
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((B, H, N, d)).astype(dt) for _ in range(3))
    ref, _ = attention_golden(Q, K, V, causal)
    rule = numerics.flash_attention_rule(plain_error(Q, K, V, causal, ref), ref, dt,
                                         rounding=fused_rounding_bound(Q, K, V, causal))
    return _ladder.Case(
        label=f"B={B} H={H} N={N} d={d} {dt.name}{' causal' if causal else ''}",
        inputs={"Q": Q, "K": K, "V": V}, outputs={"O": ((B, H, N, d), dt)},
        kwargs={"causal": bool(causal)},
        check=lambda _n, out: numerics.compare(out["O"], ref, rule, tile=None),
        work=attention_flops(B, H, N, d, causal), work_unit="FLOP")


def main(argv=None) -> int:
    """``python -m kernellab.kernels.attention_cuda [--shape B H N d] [--dtype float16]
    [--causal]``: every version checked, then timed (modelled on the sim tier, CUDA events on
    the gpu tier); see :func:`kernellab.kernels._ladder.cli`."""
    from kernellab.kernels import _ladder

    def add(ap, tier):
        s = DEFAULT_SHAPE.get(tier, DEFAULT_SHAPE["sim"])
        ap.add_argument("--shape", type=int, nargs=4, metavar=("B", "H", "N", "d"), default=s,
                        help=f"sizes (default {' '.join(map(str, s))} here)")
        ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
        ap.add_argument("--causal", action="store_true", help="mask keys after the query")
        ap.add_argument("--seed", type=int, default=0, help="the inputs' seed (default 0)")

    return _ladder.cli(argv, prog="python -m kernellab.kernels.attention_cuda",
                       doc="Chapter 5's attention ladder: validate every version, then time "
                       "it.", versions=LADDER,
                       make_case=lambda a: ladder_case(*a.shape, a.dtype, a.causal,
                                                       seed=a.seed),
                       add_arguments=add)


if __name__ == "__main__":
    import sys

    sys.exit(main())
