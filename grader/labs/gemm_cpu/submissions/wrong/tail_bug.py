# Known wrong: blocked over 32-row tiles, but the last (partial) tile of rows uses only the first
# K - 1 terms: wrong on the tail tile only (M = 33 exposes it).
import numba
import numpy as np


@numba.njit(cache=True)
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    MB = 32
    for i0 in range(0, M, MB):
        full = i0 + MB <= M
        kend = K if full else max(K - 1, 1)
        for i in range(i0, min(i0 + MB, M)):
            for j in range(N):
                C[i, j] = 0.0
            for k in range(kend):
                a = A[i, k]
                for j in range(N):
                    C[i, j] += a * B[k, j]
