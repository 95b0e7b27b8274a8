# KNOWN WRONG: coalesced but not tiled (chapter 2's v2): threadIdx.x -> column, 32 x 8 blocks,
# so a warp reads 32 consecutive floats of B and one (broadcast) element of A. 5 sectors per 32
# multiply-adds instead of 33: 6.6x over the naive kernel (with 16 x 16 blocks the same kernel
# moves 4 and reaches 8.25x: no_reuse.py).
# Expected: every case passes; "global traffic per FMA" fails (5.06 B > 1.5 B) and so does
# "modelled speedup over the naive kernel" (6.6x < 8x), while "global memory coalesced" passes.
import numpy as np
from numba import cuda, float32


@cuda.jit
def gemm_kernel(A, B, C):
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if i < M and j < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    grid = ((N + 31) // 32, (M + 7) // 8)
    gemm_kernel[grid, (32, 8)](A, B, C)
