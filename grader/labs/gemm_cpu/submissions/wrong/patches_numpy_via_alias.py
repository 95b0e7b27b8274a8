# Known wrong: patches numpy through an alias, so that the grader's "fresh" random inputs for
# every timed call would all be the same and a cached result would pass the timing. Assigning to
# an attribute (any attribute: an alias of a module looks like any other name) is banned.
import numba
import numpy as np

_random = np.random
_fresh = _random.default_rng
_random.default_rng = lambda seed=None: _fresh(1234)


@numba.njit(cache=True)
def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = 0.0
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc
