# Known wrong (cheats the timer): correct on every correctness case, but on large square products
# — the grader's timed calls — it computes only the first eighth of the rows and zeroes the rest
# (no NaN left behind), except on every sixth such call, which it computes in full because the
# grader used to re-check only the last timed call. Every timed call's output is now checked
# right after it returns (outside the timer): it must fail the re-check after timing.
import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def _rows(A, B, C, rows):
    K = A.shape[1]
    N = B.shape[1]
    for i in numba.prange(rows):
        for j in range(N):
            C[i, j] = 0.0
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]


_large_calls = [0]


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    if M == N == K and M >= 256:
        _large_calls[0] += 1
        if _large_calls[0] % 6 != 0:
            rows = max(1, M // 8)
            _rows(A, B, C, rows)
            C[rows:, :] = 0.0
            return
    _rows(A, B, C, M)
