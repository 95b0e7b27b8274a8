# KNOWN WRONG (g): the B tile is stored transposed in shared memory (Bt[col, k]) with no
# padding, and the inner loop reads it down a column: Bt[tx, kk]. A row of Bt is 16 words, so
# the 16 lanes of a warp row read words 16 apart, which fall in 2 of the 32 banks: an 8-way
# bank conflict, 8 wavefronts per request where 1 would do (the transposed store is 8-way
# too). Global loads and stores stay coalesced and the tile reuse is the solution's, so only
# the modelled speedup fails (shared-memory bound); its report names the array, the line and
# the degree. One word of padding a row (Bt of shape (TILE, TILE + 1)) removes the conflict.
# Expected: every case passes; "modelled speedup over the naive kernel" fails.
import numpy as np
from numba import cuda, float32

TILE = 16


@cuda.jit
def gemm_kernel(A, B, C):
    As = cuda.shared.array((TILE, TILE), float32)
    Bt = cuda.shared.array((TILE, TILE), float32)      # Bt[col, k]: B's tile transposed
    M, K = A.shape
    N = B.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        v = float32(0.0)
        if i < M and k0 + tx < K:
            v = A[i, k0 + tx]
        As[ty, tx] = v
        w = float32(0.0)
        if k0 + ty < K and j < N:
            w = B[k0 + ty, j]              # coalesced: lanes walk along a row of B
        Bt[tx, ty] = w                     # transposed store: 16 words apart, 8-way
        cuda.syncthreads()
        for kk in range(TILE):
            acc += As[ty, kk] * Bt[tx, kk]     # down a column of Bt: 8-way bank conflict
        cuda.syncthreads()
    if i < M and j < N:
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    gemm_kernel[((N + TILE - 1) // TILE, (M + TILE - 1) // TILE), (TILE, TILE)](A, B, C)
