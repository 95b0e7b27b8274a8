# Honest: an eagerly compiled kernel with explicit signatures (numba refuses to compile more
# later); a plain ikj loop, so it is correct but not fast.
from numba import njit, float32, float64, void


@njit([void(float32[:, ::1], float32[:, ::1], float32[:, ::1]),
       void(float64[:, ::1], float64[:, ::1], float64[:, ::1])])
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            C[i, j] = 0.0
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]
