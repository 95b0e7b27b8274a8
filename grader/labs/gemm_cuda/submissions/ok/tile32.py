# HONEST: 32 x 32 tiles, one 1024-thread block per tile of C (the largest block a GPU allows);
# a warp is one row of the tile. Expected: passes everything.
import numpy as np
from numba import cuda, float32

T = 32


@cuda.jit
def tiled(A, B, C):
    sA = cuda.shared.array((T, T), float32)
    sB = cuda.shared.array((T, T), float32)
    M, K = A.shape
    N = B.shape[1]
    r = cuda.threadIdx.y
    c = cuda.threadIdx.x
    row = cuda.blockIdx.y * T + r
    col = cuda.blockIdx.x * T + c
    s = float32(0)
    ntiles = (K + T - 1) // T
    for t in range(ntiles):
        k = t * T
        sA[r, c] = A[row, k + c] if row < M and k + c < K else float32(0)
        sB[r, c] = B[k + r, col] if k + r < K and col < N else float32(0)
        cuda.syncthreads()
        for q in range(T):
            s += sA[r, q] * sB[q, c]
        cuda.syncthreads()
    if row < M and col < N:
        C[row, col] = s


def gemm(A, B, C):
    M, N = C.shape
    tiled[((N + T - 1) // T, (M + T - 1) // T), (T, T)](A, B, C)
