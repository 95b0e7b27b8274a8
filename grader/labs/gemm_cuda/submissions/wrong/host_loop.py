# KNOWN WRONG: computes C on the host with Python loops and launches no kernel at all.
# Expected: every case fails with "no kernel was launched".
import numpy as np


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc
