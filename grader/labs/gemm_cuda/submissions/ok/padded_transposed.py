# HONEST: the A tile is stored transposed in shared memory (At[k, row], as float4 loads would
# want) with one word of padding per row, so the transposed store has at most 2-way bank
# conflicts instead of 8-way; global loads stay coalesced. Uses numba.types for the dtype. Expected: passes everything.
import numpy as np
from numba import cuda, types

TILE = 16
PADDED = TILE + 1   # a module constant: numba-cuda needs a constant shape (TILE + 1 written
                    # inside the kernel is typed as a run-time int64 and the GPU compile fails)


@cuda.jit
def gemm_kernel(A, B, C):
    At = cuda.shared.array((TILE, PADDED), types.float32)   # At[k, row]: padded
    Bs = cuda.shared.array((TILE, TILE), types.float32)
    M, K = A.shape
    N = B.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = types.float32(0.0)
    for k0 in range(0, K, TILE):
        v = types.float32(0.0)
        if i < M and k0 + tx < K:
            v = A[i, k0 + tx]              # coalesced: lanes walk along a row of A
        At[tx, ty] = v
        w = types.float32(0.0)
        if k0 + ty < K and j < N:
            w = B[k0 + ty, j]
        Bs[ty, tx] = w
        cuda.syncthreads()
        for kk in range(TILE):
            acc += At[kk, ty] * Bs[kk, tx]
        cuda.syncthreads()
    if i < M and j < N:
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    gemm_kernel[((N + TILE - 1) // TILE, (M + TILE - 1) // TILE), (TILE, TILE)](A, B, C)
