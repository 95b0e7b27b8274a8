"""GEMM: the golden reference and the naive baseline.

C = A @ B with A (M, K), B (K, N), C (M, N): 2*M*N*K floating-point operations.
"""

from __future__ import annotations

import numpy as np


def gemm_golden(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Golden reference: A @ B computed in float64 from the inputs exactly as the kernel saw
    them (float16/bfloat16/float32 inputs are widened without rounding).

    Shapes A (M, K), B (K, N) -> (M, N) float64. Accumulation in float64 by the BLAS (dgemm),
    whose own rounding error is at most about sqrt(K) * 2**-53 relative to |A||B| (Higham &
    Mary 2019): the tolerance policy accounts for it. Raises ValueError on mismatched shapes.
    """
    A = np.asarray(A)
    B = np.asarray(B)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"cannot multiply shapes {A.shape} and {B.shape}")
    return np.matmul(A.astype(np.float64), B.astype(np.float64))


def gemm_abs_product(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """|A| @ |B| in float64, shape (M, N): the scale of the rounding-error bound of each C[i, j]."""
    return np.matmul(np.abs(A.astype(np.float64)), np.abs(B.astype(np.float64)))


def gemm_naive(A, B, C):
    """Naive baseline: the textbook triple loop i, j, k with a scalar accumulator.

    A (M, K), B (K, N), C (M, N), one float dtype; writes C in place and returns nothing.
    Accumulates in C's dtype. Plain Python, so this module stays numpy-only: the harness compiles
    it with ``numba.njit`` (see ``kernellab.kernels.gemm_cpu``). The inner loop walks B down a
    column (stride N elements), the access pattern chapter 1 starts from.
    """
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = C.dtype.type(0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc
