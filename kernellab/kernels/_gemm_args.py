"""Argument checks the GEMM ladders share: ``C = A @ B`` with A (M, K), B (K, N), C (M, N)."""

from __future__ import annotations


def gemm_shapes(A, B, C) -> tuple[int, int, int]:
    """(M, N, K) of a GEMM call. Works for numpy and numba device arrays (anything with
    ``.shape``). Raises ``ValueError`` when an operand is not 2-D, the inner dimensions differ or
    C is not (M, N)."""
    for name, X in (("A", A), ("B", B), ("C", C)):
        if len(X.shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(X.shape)}")
    M, K = A.shape
    K2, N = B.shape
    if K2 != K:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    if tuple(C.shape) != (M, N):
        raise ValueError(f"C has shape {tuple(C.shape)}, expected (M, N) = {(M, N)}")
    return M, N, K
