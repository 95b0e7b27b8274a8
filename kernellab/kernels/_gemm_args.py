"""Argument checks the GEMM ladders share: ``C = A @ B`` with A (M, K), B (K, N), C (M, N) (float,
and the int8 x int8 -> int32 ladders of chapter 6)."""

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


def int8_gemm_operands(A, B, C):
    """Check an int8 GEMM call C = A @ B (A (M, K) int8, B (K, N) int8, C (M, N) int32 numpy,
    written in place) and return (A, B) as numpy arrays and (M, N, K). Raises TypeError if C is
    not a numpy array; ValueError for bad shapes or dtypes, a read-only C, or a C overlapping
    A/B."""
    import numpy as np

    if not isinstance(C, np.ndarray):
        raise TypeError(f"C must be a numpy array (it is written in place), got {type(C).__name__}")
    A = np.asarray(A)
    B = np.asarray(B)
    M, N, K = gemm_shapes(A, B, C)
    if A.dtype != np.int8 or B.dtype != np.int8 or C.dtype != np.int32:
        raise ValueError(f"dtypes must be A int8, B int8, C int32; got {A.dtype}, {B.dtype}, "
                         f"{C.dtype}")
    if not C.flags.writeable:
        raise ValueError("C is read-only")
    if np.may_share_memory(C, A) or np.may_share_memory(C, B):
        raise ValueError("C must not overlap A or B")
    return A, B, (M, N, K)
