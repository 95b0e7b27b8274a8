# Known wrong: a compiled kernel that never returns (its loop bound never moves): it must time
# out, be killed, and be reported; grading goes on.
import numba


@numba.njit
def gemm(A, B, C):
    k = 0
    while k < A.shape[1]:
        C[0, 0] = A[0, k]
