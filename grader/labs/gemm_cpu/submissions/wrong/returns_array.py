# Known wrong: computes a new array and returns it, leaving the caller's C untouched.
import numba
import numpy as np


@numba.njit(cache=True)
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    out = np.zeros((M, N), A.dtype)
    for i in range(M):
        for k in range(K):
            for j in range(N):
                out[i, j] += A[i, k] * B[k, j]
    return out
