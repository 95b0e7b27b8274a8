"""Chapter 2, second part: GEMM on tensor cores, C (float32) = A @ B with A, B in FP16 or BF16,
every version side by side (llm.c ``dev/cuda`` style, like :mod:`kernellab.kernels.gemm_cuda`).

Contract of every ``gemm_tcN(A, B, C)``: A (M, K) and B (K, N) numpy arrays of one dtype,
``float16`` or ``ml_dtypes.bfloat16``; C (M, N) float32, written in place; any M, N, K >= 1
(tails zero-filled); accumulation in float32 on tensor cores. Raises ValueError for bad shapes
or dtypes. The kernels see the inputs' bits as uint16 (numba has no bfloat16 type) and a flag
``bf16`` choosing ``mma...bf16`` or ``mma...f16``.

The instruction: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` (PTX ISA, "Warp-level
Matrix Multiply-Accumulate Instructions"): a warp multiplies a 16 x 16 tile of A by a 16 x 8
tile of B into a 16 x 8 float32 tile, 4096 FLOP an instruction; each lane holds 4 registers of
A, 2 of B and 4 accumulators in the fragment layouts of :mod:`kernellab.sim.mma`.

Versions::

    tc1 mma from global  one warp a 16 x 8 tile of C; each lane reads its own fragment
                         elements of A and B straight from global memory (2 halves a
                         register, zero past the edges) and issues one mma per 16 of K. No
                         reuse: every element of A is read N/8 times.
    tc2 ldmatrix         a 64 x 64 tile of C per block of 4 warps (each warp 32 x 32: 2 x 4
                         mma tiles, 32 float32 accumulators a lane), K in steps of 32. The
                         block stages a 64 x 32 tile of A and a 32 x 64 tile of B in shared
                         memory; each warp loads its fragments with ldmatrix.x4 (A) and
                         ldmatrix.x2.trans (B, stored k-major) and issues 8 mma a 16 of K.
                         The rows of the tiles are 64 and 128 bytes apart, so the 8 rows an
                         ldmatrix phase reads share banks: 4-way (A) and 8-way (B) conflicts.
    tc3 swizzled         tc2 with each row's 16-byte chunks permuted, chunk c of row r stored
                         at chunk c ^ f(r) (an XOR swizzle: CUTLASS's "Swizzle" layouts; NVIDIA
                         GTC 2020, "Developing CUDA kernels to push Tensor Cores to the
                         Absolute Limit on NVIDIA A100"): the 8 rows of every ldmatrix phase
                         fall in 8 different 16-byte bank groups, conflict-free, with no padding.
    tc4 cp.async         tc3 with the tiles copied by cp.async (16 bytes a copy, zero-filled
                         past M or N) into two buffers: the copy of tile k+1 is in flight while
                         the warps run the MMAs of tile k (cp.async.wait_group 1: double
                         buffering, the PTX ISA's "cp.async" example pattern). Copies need
                         16-byte aligned rows: K (A) or N (B) a multiple of 8; otherwise that
                         operand takes tc3's element loads.

Sources: PTX ISA 8.x ("mma", "ldmatrix", "cp.async"); NVIDIA A100 Tensor Core GPU
Architecture whitepaper (2020), "Asynchronous copy"; the swizzle talk above.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numba import cuda

from kernellab.kernels import _ladder

BM, BN, BK = 64, 64, 32          # block tile of tc2-tc4 (4 warps of 32 x 32)
WM, WN = 32, 32                  # warp tile

__all__ = ["gemm_tc1", "gemm_tc2", "gemm_tc3", "gemm_tc4", "LADDER", "KERNELS",
           "launch_config", "ladder_case", "gemm_flops", "mma_count", "BM", "BN", "BK"]


def gemm_flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


# ----------------------------------------------------------------------------------------------
# tc1: mma from global memory, one warp per 16 x 8 tile
# ----------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _ld16(X, i, j, R, S):
    """X[i, j] as uint32 bits, 0 outside R x S."""
    if i < R and j < S:
        return np.uint32(X[i, j])
    return np.uint32(0)


@cuda.jit
def gemm_tc1_kernel(A, B, C, bf16):
    M, K = A.shape
    N = B.shape[1]
    lane = cuda.threadIdx.x
    g = lane >> 2
    t = lane % 4
    m0 = cuda.blockIdx.y * 16
    n0 = cuda.blockIdx.x * 8
    c0 = np.float32(0.0)
    c1 = np.float32(0.0)
    c2 = np.float32(0.0)
    c3 = np.float32(0.0)
    for k0 in range(0, K, 16):
        r = m0 + g
        k = k0 + 2 * t
        a0 = _ld16(A, r, k, M, K) | (_ld16(A, r, k + 1, M, K) << 16)
        a1 = _ld16(A, r + 8, k, M, K) | (_ld16(A, r + 8, k + 1, M, K) << 16)
        a2 = _ld16(A, r, k + 8, M, K) | (_ld16(A, r, k + 9, M, K) << 16)
        a3 = _ld16(A, r + 8, k + 8, M, K) | (_ld16(A, r + 8, k + 9, M, K) << 16)
        n = n0 + g
        b0 = _ld16(B, k, n, K, N) | (_ld16(B, k + 1, n, K, N) << 16)
        b1 = _ld16(B, k + 8, n, K, N) | (_ld16(B, k + 9, n, K, N) << 16)
        if bf16:
            c0, c1, c2, c3 = cuda.mma_m16n8k16_bf16((a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))
        else:
            c0, c1, c2, c3 = cuda.mma_m16n8k16_f16((a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))
    r = m0 + g
    n = n0 + 2 * t
    if r < M and n < N:
        C[r, n] = c0
    if r < M and n + 1 < N:
        C[r, n + 1] = c1
    if r + 8 < M and n < N:
        C[r + 8, n] = c2
    if r + 8 < M and n + 1 < N:
        C[r + 8, n + 1] = c3


# ----------------------------------------------------------------------------------------------
# tc2-tc4: a 64 x 64 block tile, 4 warps of 32 x 32, shared tiles read by ldmatrix
# ----------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _swz_a(r, c, on):
    """Column of element (r, c) of the 64 x 32 A tile (4 chunks of 8 a row) when swizzled:
    chunk c // 8 moves to chunk (c // 8) ^ ((r >> 1) & 3)."""
    if on:
        return ((((c >> 3) ^ (r >> 1)) & 3) << 3) | (c & 7)
    return c


@cuda.jit(device=True)
def _swz_b(r, c, on):
    """Column of element (r, c) of the 32 x 64 B tile (8 chunks a row) when swizzled: chunk
    c // 8 moves to chunk (c // 8) ^ (r & 7)."""
    if on:
        return ((((c >> 3) ^ r) & 7) << 3) | (c & 7)
    return c


@cuda.jit(device=True)
def _stage_elements(A, B, sA, sB, m0, n0, k0, swz, do_a, do_b):
    """The block's 128 threads copy the A tile (64 x 32) and the B tile (32 x 64) element by
    element (zero outside the matrices), swizzled when ``swz``."""
    M, K = A.shape
    N = B.shape[1]
    tid = cuda.threadIdx.x
    if do_a:
        for e in range(tid, BM * BK, 128):
            r = e // BK
            c = e % BK
            v = np.uint16(0)
            if m0 + r < M and k0 + c < K:
                v = A[m0 + r, k0 + c]
            sA[r, _swz_a(r, c, swz)] = v
    if do_b:
        for e in range(tid, BK * BN, 128):
            r = e // BN
            c = e % BN
            v = np.uint16(0)
            if k0 + r < K and n0 + c < N:
                v = B[k0 + r, n0 + c]
            sB[r, _swz_b(r, c, swz)] = v


@cuda.jit(device=True)
def _stage_async(A, B, sA, sB, m0, n0, k0, do_a, do_b):
    """cp.async of the A and B tiles in 16-byte chunks (8 halves), swizzled; a chunk past M or
    N (or K) is zero-filled (src_bytes 0, the source address clamped into the matrix)."""
    M, K = A.shape
    N = B.shape[1]
    tid = cuda.threadIdx.x
    if do_a:
        for e in range(tid, BM * BK // 8, 128):        # 256 chunks: 2 a thread
            r = e // (BK // 8)
            c = (e % (BK // 8)) * 8
            ok = m0 + r < M and k0 + c < K
            cuda.cp_async_zfill(sA, (r, _swz_a(r, c, True)), A,
                                (m0 + r if ok else 0, k0 + c if ok else 0), 16, 16 if ok else 0)
    if do_b:
        for e in range(tid, BK * BN // 8, 128):
            r = e // (BN // 8)
            c = (e % (BN // 8)) * 8
            ok = k0 + r < K and n0 + c < N
            cuda.cp_async_zfill(sB, (r, _swz_b(r, c, True)), B,
                                (k0 + r if ok else 0, n0 + c if ok else 0), 16, 16 if ok else 0)


@cuda.jit(device=True)
def _warp_mmas(sA, sB, acc, wm, wn, lane, swz, bf16):
    """One BK deep step of a warp's 32 x 32 tile: per 16 of K, ldmatrix.x4 of its two A
    fragments and ldmatrix.x2.trans of its four B fragments, then 2 x 4 mma."""
    for kk in range(0, BK, 16):
        ar = lane % 16
        ac = kk + (lane // 16) * 8
        a0 = cuda.ldmatrix_x4(sA, (wm + ar, _swz_a(wm + ar, ac, swz)))
        a1 = cuda.ldmatrix_x4(sA, (wm + 16 + ar, _swz_a(wm + 16 + ar, ac, swz)))
        br = kk + lane % 16
        for ni in range(4):
            bc = wn + ni * 8
            b = cuda.ldmatrix_x2_trans(sB, (br, _swz_b(br, bc, swz)))
            for mi in range(2):
                a = a0 if mi == 0 else a1
                c = (acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
                if bf16:
                    d = cuda.mma_m16n8k16_bf16(a, b, c)
                else:
                    d = cuda.mma_m16n8k16_f16(a, b, c)
                acc[mi, ni, 0] = d[0]
                acc[mi, ni, 1] = d[1]
                acc[mi, ni, 2] = d[2]
                acc[mi, ni, 3] = d[3]


@cuda.jit(device=True)
def _store_c(C, acc, m0, n0, wm, wn, lane):
    M, N = C.shape
    g = lane >> 2
    t = lane % 4
    for mi in range(2):
        for ni in range(4):
            for i in range(4):
                r = m0 + wm + mi * 16 + g + 8 * (i >> 1)
                c = n0 + wn + ni * 8 + 2 * t + (i & 1)
                if r < M and c < N:
                    C[r, c] = acc[mi, ni, i]


@cuda.jit(device=True)
def _warp_tile(acc):
    """Zero the warp's accumulators; (lane, the warp tile's row and column in the block tile,
    the block tile's row and column in C)."""
    for mi in range(2):
        for ni in range(4):
            for i in range(4):
                acc[mi, ni, i] = 0.0
    warp = cuda.threadIdx.x // 32
    return (cuda.threadIdx.x % 32, (warp // 2) * WM, (warp % 2) * WN, cuda.blockIdx.y * BM,
            cuda.blockIdx.x * BN)


@cuda.jit
def gemm_tc2_kernel(A, B, C, bf16, swz):
    """tc2 (``swz`` 0) and tc3 (``swz`` 1)."""
    K = A.shape[1]
    sA = cuda.shared.array((BM, BK), np.uint16)
    sB = cuda.shared.array((BK, BN), np.uint16)
    acc = cuda.local.array((2, 4, 4), np.float32)
    lane, wm, wn, m0, n0 = _warp_tile(acc)
    for k0 in range(0, K, BK):
        _stage_elements(A, B, sA, sB, m0, n0, k0, swz, True, True)
        cuda.syncthreads()
        _warp_mmas(sA, sB, acc, wm, wn, lane, swz, bf16)
        cuda.syncthreads()
    _store_c(C, acc, m0, n0, wm, wn, lane)


@cuda.jit
def gemm_tc4_kernel(A, B, C, bf16):
    M, K = A.shape
    N = B.shape[1]
    sA = cuda.shared.array((2, BM, BK), np.uint16)
    sB = cuda.shared.array((2, BK, BN), np.uint16)
    acc = cuda.local.array((2, 4, 4), np.float32)
    lane, wm, wn, m0, n0 = _warp_tile(acc)
    async_a = K % 8 == 0            # 16-byte aligned rows: cp.async; else element loads
    async_b = N % 8 == 0
    nk = (K + BK - 1) // BK
    _stage_async(A, B, sA[0], sB[0], m0, n0, 0, async_a, async_b)
    _stage_elements(A, B, sA[0], sB[0], m0, n0, 0, True, not async_a, not async_b)
    cuda.cp_async_commit_group()
    for kt in range(nk):
        buf = kt % 2
        if kt + 1 < nk:             # the next tile's copy, in flight during this tile's MMAs
            k1 = (kt + 1) * BK
            _stage_async(A, B, sA[1 - buf], sB[1 - buf], m0, n0, k1, async_a, async_b)
            _stage_elements(A, B, sA[1 - buf], sB[1 - buf], m0, n0, k1, True, not async_a,
                            not async_b)
        cuda.cp_async_commit_group()
        cuda.cp_async_wait_group(1)     # all but the newest group: tile kt has landed
        cuda.syncthreads()
        _warp_mmas(sA[buf], sB[buf], acc, wm, wn, lane, True, bf16)
        cuda.syncthreads()          # before the next iteration's copy overwrites this buffer
    cuda.cp_async_wait_all()
    _store_c(C, acc, m0, n0, wm, wn, lane)


# ----------------------------------------------------------------------------------------------
# launch functions
# ----------------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def launch_config(version: str, M: int, N: int, K: int):
    """(grid, block) of a version for C (M, N)."""
    if version.startswith("tc1"):
        return (_cdiv(N, 8), _cdiv(M, 16)), (32,)
    return (_cdiv(N, BN), _cdiv(M, BM)), (128,)


def mma_count(version: str, M: int, N: int, K: int) -> int:
    """Warp-level mma instructions a version issues for C (M, N) = A (M, K) @ B (K, N)."""
    if version.startswith("tc1"):
        return _cdiv(N, 8) * _cdiv(M, 16) * _cdiv(K, 16)
    return _cdiv(N, BN) * _cdiv(M, BM) * 4 * 8 * (_cdiv(K, BK) * BK // 16)


def _kind(A, B, C) -> int:
    import ml_dtypes

    if A.ndim != 2 or B.ndim != 2 or C.ndim != 2:
        raise ValueError("A, B and C must be 2-D")
    M, K = A.shape
    K2, N = B.shape
    if K2 != K or C.shape != (M, N):
        raise ValueError(f"shapes do not match: A {A.shape}, B {B.shape}, C {C.shape}")
    if A.dtype != B.dtype or A.dtype not in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        raise ValueError(f"A and B must both be float16 or bfloat16, got {A.dtype}, {B.dtype}")
    if C.dtype != np.float32:
        raise ValueError(f"C must be float32, got {C.dtype}")
    if min(M, N, K) < 1:
        raise ValueError(f"need M, N, K >= 1, got {M}, {N}, {K}")
    return int(A.dtype != np.float16)


def _launcher(name: str, kernel, extra=()):
    def launch(A, B, C):
        bf16 = _kind(A, B, C)
        M, K = A.shape
        N = B.shape[1]
        grid, block = launch_config(name, M, N, K)
        dA = cuda.to_device(np.ascontiguousarray(A).view(np.uint16))
        dB = cuda.to_device(np.ascontiguousarray(B).view(np.uint16))
        dC = cuda.device_array((M, N), np.float32)
        kernel[grid, block](dA, dB, dC, bf16, *extra)
        C[...] = dC.copy_to_host()

    launch.__name__ = launch.__qualname__ = f"gemm_{name.split('_')[0]}"
    launch.ladder_name = name
    launch.kernel = kernel
    return launch


gemm_tc1 = _launcher("tc1_mma_global", gemm_tc1_kernel)
gemm_tc2 = _launcher("tc2_ldmatrix", gemm_tc2_kernel, (0,))
gemm_tc3 = _launcher("tc3_swizzled", gemm_tc2_kernel, (1,))
gemm_tc4 = _launcher("tc4_cp_async", gemm_tc4_kernel)

#: name -> launch function ``f(A, B, C)``, in ladder order
LADDER: "OrderedDict[str, object]" = OrderedDict(
    (f.ladder_name, f) for f in (gemm_tc1, gemm_tc2, gemm_tc3, gemm_tc4))

#: name -> the raw ``@cuda.jit`` kernel
KERNELS: "OrderedDict[str, object]" = OrderedDict(
    (name, f.kernel) for name, f in LADDER.items())


def ladder_case(M: int, N: int, K: int, *, dtype: str = "float16", seed: int = 0) -> _ladder.Case:
    """A (M, K), B (K, N) standard normal rounded to ``dtype`` (float16 or bfloat16), C (M, N)
    float32, checked against the float64 product of the rounded inputs under
    ``numerics.KAware(K, float32, float32, |A| @ |B|)`` (float32 accumulation)."""
    import ml_dtypes

    from kernellab import numerics
    from reference_kernels.gemm import gemm_abs_product, gemm_golden

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(dt)
    B = rng.standard_normal((K, N)).astype(dt)
    ref = gemm_golden(A, B)
    policy = numerics.KAware(K, "float32", "float32", gemm_abs_product(A, B))
    return _ladder.Case(
        label=f"M={M} N={N} K={K} {dt.name}", inputs={"A": A, "B": B},
        outputs={"C": ((M, N), np.float32)},
        check=lambda _name, out: numerics.compare(out["C"], ref, policy),
        work=gemm_flops(M, N, K), work_unit="FLOP", flops=gemm_flops(M, N, K))
