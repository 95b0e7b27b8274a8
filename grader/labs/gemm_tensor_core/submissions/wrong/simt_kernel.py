# Known-wrong (gemm-tensor-core): a SIMT kernel handed in: lab 2's shared-memory tiles on
# float32 copies of A and B, no tensor core. Correct; expect: the share of the tensor-core
# peak, the speedup over lab 2's tiled kernel (it is that kernel), the overlap and the gate
# "C is the tensor cores' product" fail.
import numpy as np
from numba import cuda, float32

TILE = 16


@cuda.jit
def gemm_tiled(A, B, C):
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
        cuda.syncthreads()
    if i < M and j < N:
        C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    if not isinstance(A, np.ndarray):
        A = A.copy_to_host()
        B = B.copy_to_host()
    dA = cuda.to_device(np.asarray(A).astype(np.float32))
    dB = cuda.to_device(np.asarray(B).astype(np.float32))
    grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    gemm_tiled[grid, (TILE, TILE)](dA, dB, C)
