# WRONG: for N > 512 with N % 512 != 0 the last partial column panel of C is never written
import numpy as np
import numba
from numba import njit, prange

MR, NR = 6, 64      # the tile of C a thread accumulates: MR rows x NR columns
KC, NC = 512, 512   # the panel of B packed at a time: KC deep x NC wide


@njit(parallel=True, cache=True, fastmath={"contract"})
def gemm(A, B, C):
    """C = A @ B into the caller's C. A (M, K), B (K, N), C (M, N), one float dtype."""
    ### BEGIN SOLUTION: pack a KC x NC panel of B, then accumulate MR x NR tiles of C in prange
    M, K = A.shape
    N = B.shape[1]
    npanels = N // NC if N >= NC else 1             # BUG: drops a partial last panel when N > NC
    for jc in range(0, npanels * NC, NC):           # column panels of B and C
        nc = min(NC, N - jc)
        nbs = (nc + NR - 1) // NR
        for pc in range(0, K, KC):                  # depth panels
            kc = min(KC, K - pc)
            Bp = np.zeros((nbs, kc, NR), A.dtype)   # packed panel, zero-padded at the edge
            for t in prange(nbs):
                for k in range(kc):
                    for j in range(min(NR, nc - t * NR)):
                        Bp[t, k, j] = B[pc + k, jc + t * NR + j]
            for s in prange((M + MR - 1) // MR):    # MR-row slivers of A, across threads
                i0 = s * MR
                mr = min(MR, M - i0)
                T = np.empty((MR, NR), A.dtype)     # the MR x NR tile of C, stays in L1
                for t in range(nbs):                # NR-column slivers of the panel
                    for i in range(MR):
                        for j in range(NR):
                            T[i, j] = 0
                    for k in range(kc):             # kc rank-1 updates of the tile
                        for i in range(MR):
                            a = A[min(i0 + i, M - 1), pc + k]   # clamp: rows past M are dropped
                            for j in range(NR):     # the vectorised loop
                                T[i, j] += a * Bp[t, k, j]
                    j0 = jc + t * NR
                    nr = min(NR, N - j0)
                    for i in range(mr):
                        if pc == 0:
                            for j in range(nr):
                                C[i0 + i, j0 + j] = T[i, j]
                        else:
                            for j in range(nr):
                                C[i0 + i, j0 + j] += T[i, j]
    ### END SOLUTION

