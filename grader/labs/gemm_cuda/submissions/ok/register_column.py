# HONEST: shared-memory tiles plus a 1-D register tile (S. Boehm's kernel 4): a block of 64 x 8
# threads computes a 64 x 64 tile of C, each thread 8 elements of one column, so each value of
# the B tile read from shared memory feeds 8 multiply-adds. Expected: passes everything, well
# above the speed threshold.
import numpy as np
from numba import cuda, float32

BM = 64
BN = 64
BK = 8
TM = 8


@cuda.jit
def kernel(A, B, C):
    As = cuda.shared.array((BM, BK), float32)
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array(TM, float32)
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    tid = cuda.threadIdx.x           # 512 threads: 64 columns x 8 row groups
    col = tid % BN
    rgrp = tid // BN
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    for r in range(TM):
        acc[r] = float32(0.0)
    for k0 in range(0, K, BK):
        ar = tid // BK               # A tile: 64 rows x 8 columns, one element per thread
        ac = tid % BK
        if row0 + ar < M and k0 + ac < K:
            As[ar, ac] = A[row0 + ar, k0 + ac]
        else:
            As[ar, ac] = float32(0.0)
        br = tid // BN               # B tile: 8 rows x 64 columns
        bc = tid % BN
        if k0 + br < K and col0 + bc < N:
            Bs[br, bc] = B[k0 + br, col0 + bc]
        else:
            Bs[br, bc] = float32(0.0)
        cuda.syncthreads()
        for kk in range(BK):
            b = Bs[kk, col]
            for r in range(TM):
                acc[r] += As[rgrp * TM + r, kk] * b
        cuda.syncthreads()
    for r in range(TM):
        i = row0 + rgrp * TM + r
        j = col0 + col
        if i < M and j < N:
            C[i, j] = acc[r]


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    kernel[((N + BN - 1) // BN, (M + BM - 1) // BM), BM * BK](A, B, C)
