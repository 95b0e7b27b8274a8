# Known wrong: accumulates in float16 (must fail the K-aware tolerance). Numba has no float16 on
# the CPU, so this one is plain numpy, a row at a time.
import numpy as np


def gemm(A, B, C):
    M, K = A.shape
    for i in range(M):
        acc = np.zeros(B.shape[1], np.float16)
        for k in range(K):
            acc = (acc + (A[i, k] * B[k]).astype(np.float16)).astype(np.float16)
        C[i] = acc
