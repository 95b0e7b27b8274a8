# KNOWN WRONG (a): the second cuda.syncthreads() of each k-step is removed. A thread that
# finishes its 16 FMAs first goes on to overwrite the shared tiles with the next k-step's
# values while slower threads of its block still read the current ones. On a GPU the result
# depends on the warps' timing (often right, sometimes not); the simulator runs the threads in
# a fixed order and may give the right answer too, so the race detector is what catches it.
# Expected: every case with K > 16 (two or more k-steps) fails with "race: ... shared array ...".
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
            As[ty, tx] = A[i, k0 + tx]
        else:
            As[ty, tx] = float32(0.0)
        if k0 + ty < K and j < N:
            Bs[ty, tx] = B[k0 + ty, j]
        else:
            Bs[ty, tx] = float32(0.0)
        cuda.syncthreads()
        for kk in range(TILE):
            acc += As[ty, kk] * Bs[kk, tx]
        # (the second cuda.syncthreads() belongs here)
    if i < M and j < N:
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    gemm_kernel[grid, (TILE, TILE)](A, B, C)
