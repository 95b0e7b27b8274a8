# KNOWN WRONG (b): the tiles are loaded without a bounds check. In the last (tail) tile along k,
# and in blocks past the last row or column of C, threads index A and B past their ends. On a
# GPU that reads whatever lies beyond the array (or faults); the simulator stops at the first
# such access and names the thread, the array and the index.
# Expected: every case whose M, N or K is not a multiple of 16 fails with "out-of-bounds: ...".
import numpy as np
from numba import cuda, float32

TILE = 16


@cuda.jit
def gemm_kernel(A, B, C):
    As = cuda.shared.array((TILE, TILE), float32)
    Bs = cuda.shared.array((TILE, TILE), float32)
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        As[ty, tx] = A[i, k0 + tx]       # no "if i < M and k0 + tx < K"
        Bs[ty, tx] = B[k0 + ty, j]       # no "if k0 + ty < K and j < N"
        cuda.syncthreads()
        for kk in range(TILE):
            acc += As[ty, kk] * Bs[kk, tx]
        cuda.syncthreads()
    if i < M and j < N:
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    gemm_kernel[grid, (TILE, TILE)](A, B, C)
