# Known wrong (too slow): a correct, plain unblocked ikj loop with prange over rows. It must pass
# every correctness case and fail the performance rules.
import numba


@numba.njit(parallel=True, cache=True)
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in numba.prange(M):
        for j in range(N):
            C[i, j] = 0.0
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]
