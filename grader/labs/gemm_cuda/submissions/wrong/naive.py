# KNOWN WRONG (e): the naive kernel handed in (chapter 2's v1, rewritten): one thread per
# element of C, threadIdx.x -> row, a dot product straight from global memory. Correct, but no
# shared-memory tiling: 33 sectors per 32 multiply-adds, a quarter of them used.
# Expected: every case passes; both performance rules fail (modelled speedup 1.0x < 8x,
# coalesced about 24% < 50%).
import numpy as np
from numba import cuda, float32


@cuda.jit
def gemm_kernel(A, B, C):
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    j = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if i < M and j < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    grid = ((M + 31) // 32, (N + 7) // 8)
    gemm_kernel[grid, (32, 8)](A, B, C)
