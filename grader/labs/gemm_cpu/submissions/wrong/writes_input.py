# Known wrong: correct product, but scales A in place afterwards (inputs must stay unchanged).
import numba


@numba.njit(cache=True)
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
    for i in range(M):
        A[i, 0] = 0.0
