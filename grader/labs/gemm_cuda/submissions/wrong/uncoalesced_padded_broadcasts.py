# KNOWN WRONG: uncoalesced_a_tile.py (the A tile loaded down a column of A: a warp's 16 rows x 2
# floats, 8 of each sector's 32 bytes used) plus two broadcast loads of A[0, 0] per tile step. A
# broadcast asks for 128 bytes and moves one 32-byte sector; over all requests together its
# surplus offset the column loads' waste (74%, a pass, with nothing made coalesced). Judged per
# access site, each request capped at the bytes its sectors moved, the column load stays at 25%
# and moves 70% of the sectors.
# Expected: every case passes; "global memory coalesced" fails, naming the column load's line.
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
        pad = A[0, 0]                             # broadcasts: 128 B asked, 1 sector
        pad += A[0, 0]
        acc += pad * float32(0.0)
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
