# Known wrong: accumulates in float16 (must fail the K-aware tolerance).
import numba
import numpy as np


@numba.njit(cache=True)
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.float16(0.0)
            for k in range(K):
                acc = np.float16(acc + np.float16(A[i, k]) * np.float16(B[k, j]))
            C[i, j] = acc
