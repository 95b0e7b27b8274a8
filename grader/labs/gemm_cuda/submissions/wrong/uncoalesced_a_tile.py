# KNOWN WRONG (d): correct, but the A tile is loaded with threadIdx.x walking DOWN a column of A
# (As[tx, ty] = A[row0 + tx, k0 + ty]): the 16 consecutive lanes of a half-warp read 16
# different rows, 16 sectors of 32 bytes for 64 useful bytes, instead of one row's 64 bytes
# (2 sectors). The transposed store into shared memory is also 8-way bank-conflicted.
# Expected: every case passes; the performance rule "global memory coalesced" fails (about 43%
# of the bytes moved are used; the modelled speedup, about 8.8x, is below the coalesced 10.6x).
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
    row0 = cuda.blockIdx.y * TILE
    i = row0 + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        if row0 + tx < M and k0 + ty < K:
            As[tx, ty] = A[row0 + tx, k0 + ty]    # lanes walk down a column of A
        else:
            As[tx, ty] = float32(0.0)
        if k0 + ty < K and j < N:
            Bs[ty, tx] = B[k0 + ty, j]
        else:
            Bs[ty, tx] = float32(0.0)
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
