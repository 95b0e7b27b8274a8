# KNOWN WRONG (c): the tile loads are bounds-checked, but the parts of a tile outside the
# matrices are left unwritten instead of being zero-filled, and the inner loop still runs over
# the whole tile. Shared memory is not zeroed at block start on a GPU: those reads see whatever
# an earlier block or kernel left there. The simulator fills shared memory with NaN and reports
# the first read of an element no thread has written.
# Expected: every case with a ragged tile fails with "uninitialised-read: ...".
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
        if i < M and k0 + tx < K:
            As[ty, tx] = A[i, k0 + tx]   # (no "else: As[ty, tx] = 0")
        if k0 + ty < K and j < N:
            Bs[ty, tx] = B[k0 + ty, j]   # (no "else: Bs[ty, tx] = 0")
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
