# WRONG: the grid is capped at 9 x 9 blocks of 16 x 16: C beyond row or column 144 is never written
import numpy as np
from numba import cuda, float32

TILE = 16  # a TILE x TILE block of threads computes a TILE x TILE tile of C


@cuda.jit
def gemm_tiled(A, B, C):
    """C = A @ B, one element of C per thread. A (M, K), B (K, N), C (M, N), float32.
    Launch: grid (ceil(N / TILE), ceil(M / TILE)), block (TILE, TILE)."""
    ### BEGIN SOLUTION: per k-step, stage a TILE x TILE tile of A and of B in shared memory (zero outside the matrices), syncthreads, multiply-add from the tiles, syncthreads
    # one cuda.shared.array call per line (the stock simulator merges two calls on one line)
    As = cuda.shared.array((TILE, TILE), float32)
    Bs = cuda.shared.array((TILE, TILE), float32)
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty       # this thread's row of C
    j = cuda.blockIdx.x * TILE + tx       # this thread's column of C: consecutive in a warp
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        if i < M and k0 + tx < K:         # a row of A, lanes along k: coalesced
            As[ty, tx] = A[i, k0 + tx]
        else:
            As[ty, tx] = float32(0.0)     # outside A: contributes nothing
        if k0 + ty < K and j < N:         # a row of B, lanes along j: coalesced
            Bs[ty, tx] = B[k0 + ty, j]
        else:
            Bs[ty, tx] = float32(0.0)
        cuda.syncthreads()                # the tiles are complete
        for kk in range(TILE):
            acc += As[ty, kk] * Bs[kk, tx]
        cuda.syncthreads()                # everyone is done with them
    if i < M and j < N:
        C[i, j] = acc
    ### END SOLUTION


def gemm(A, B, C):
    """C = A @ B into the caller's C: numpy arrays or numba device arrays, float32."""
    ### BEGIN SOLUTION: one block of TILE x TILE threads per tile of C; launch on the arrays you were given
    M, K = A.shape
    N = B.shape[1]
    grid = (min(9, (N + TILE - 1) // TILE), min(9, (M + TILE - 1) // TILE))   # WRONG: capped at 9 x 9 blocks
    gemm_tiled[grid, (TILE, TILE)](A, B, C)
    ### END SOLUTION

