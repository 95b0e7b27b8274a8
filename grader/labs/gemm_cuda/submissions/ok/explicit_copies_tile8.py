# HONEST: 8 x 8 tiles with explicit device copies: numpy arguments are copied in and C back,
# device arrays (the performance phase's) are used as they are. Expected: passes everything.
import math

import numpy as np
from numba import cuda, float32

TILE = 8


@cuda.jit
def tile_kernel(A, B, C):
    a_tile = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    b_tile = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    x, y = cuda.grid(2)          # x: column of C, y: row of C
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range(math.ceil(A.shape[1] / TILE)):
        k = t * TILE
        a_tile[ty, tx] = 0.0
        b_tile[ty, tx] = 0.0
        if y < A.shape[0] and k + tx < A.shape[1]:
            a_tile[ty, tx] = A[y, k + tx]
        if k + ty < B.shape[0] and x < B.shape[1]:
            b_tile[ty, tx] = B[k + ty, x]
        cuda.syncthreads()
        for q in range(TILE):
            acc += a_tile[ty, q] * b_tile[q, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc


def gemm(A, B, C):
    dA = cuda.to_device(A)       # a device array comes back unchanged, without a copy
    dB = cuda.to_device(B)
    on_host = isinstance(C, np.ndarray)
    dC = cuda.device_array(C.shape, np.float32) if on_host else C
    blocks = (math.ceil(C.shape[1] / TILE), math.ceil(C.shape[0] / TILE))
    tile_kernel[blocks, (TILE, TILE)](dA, dB, dC)
    if on_host:
        dC.copy_to_host(C)
