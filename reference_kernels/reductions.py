"""Reductions and softmax: golden references (float64) and the three-pass baseline's maths.

Every function widens its input exactly to float64 first (float16, bfloat16 and float32 values
are all float64 values), so the reference sees the *same rounded inputs* the kernel saw.
numpy only.
"""

from __future__ import annotations

import math

import numpy as np


def _as_float64(X, name: str = "X", ndim: int | None = None) -> np.ndarray:
    X = np.asarray(X)
    if X.dtype.kind not in "fiu" and X.dtype.name != "bfloat16":
        raise ValueError(f"{name} must hold numbers, got dtype {X.dtype}")
    if ndim is not None and X.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {X.shape}")
    return X.astype(np.float64)


def sum_golden(x) -> float:
    """Exactly rounded sum of the elements of ``x`` (any shape, any float dtype, bfloat16
    included), as a Python float: ``math.fsum`` (Shewchuk's algorithm; Python docs,
    ``math.fsum``), correct to within half an ulp of float64. Raises ValueError for non-numeric
    input."""
    return math.fsum(_as_float64(x, "x").ravel().tolist())


def row_sum_golden(X) -> np.ndarray:
    """Exactly rounded sum of each row of a 2-D ``X`` (M, N): float64 (M,), one
    ``math.fsum`` per row. Raises ValueError unless X is 2-D and numeric."""
    X64 = _as_float64(X, "X", ndim=2)
    return np.array([math.fsum(r) for r in X64.tolist()], dtype=np.float64)


def softmax_golden(X, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` in float64: ``y_i = exp(x_i - m) / sum_j exp(x_j - m)`` with
    ``m = max_j x_j`` (the "safe" softmax: subtracting the max changes nothing mathematically
    and keeps every exponent <= 0, so nothing overflows and the denominator is >= 1).

    ``-inf`` entries (masked positions) give 0. A slice whose every entry is ``-inf`` has no
    defined softmax (0/0); this course defines its output as a slice of **zeros** — what
    FlashAttention's kernels write for a fully masked row, and what makes a masked row
    contribute nothing downstream (PyTorch's ``torch.softmax`` returns NaN there). ``+inf`` or
    NaN inputs raise ValueError (no kernel in the course is asked to handle them).

    Shapes: any ``X`` with at least one dimension; returns float64 of the same shape.
    """
    X64 = _as_float64(X, "X")
    if X64.ndim == 0:
        raise ValueError("softmax needs at least one dimension")
    if np.isnan(X64).any() or np.isposinf(X64).any():
        raise ValueError("softmax_golden: inputs must be finite or -inf (masked)")
    m = X64.max(axis=axis, keepdims=True)
    masked_row = np.isneginf(m)
    m = np.where(masked_row, 0.0, m)
    e = np.exp(X64 - m)                       # exp(-inf) = 0
    s = e.sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(masked_row, 0.0, e / np.where(masked_row, 1.0, s))
    return y


def softmax_shift(X, axis: int = -1) -> np.ndarray:
    """``m - x_i`` in float64 (>= 0), the argument of each exponential measured from the row
    max: the softmax tolerance grows with it (:class:`kernellab.numerics.SoftmaxBound`).
    Masked (-inf) entries and fully masked rows give 0."""
    X64 = _as_float64(X, "X")
    m = X64.max(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        t = m - X64
    return np.where(np.isfinite(t), t, 0.0)


def softmax_three_pass_traffic(M: int, N: int, itemsize: int) -> dict:
    """Global-memory bytes of the three-pass softmax over an (M, N) matrix (the safe softmax
    of Milakov & Gimelshein, arXiv:1805.02867):
    pass 1 reads X (row max), pass 2 reads X (sum of exponentials), pass 3 reads X and writes
    Y: 3 loads + 1 store per element, plus the per-row statistics (float32). A fused kernel
    that keeps the row on chip needs 1 load + 1 store; the online softmax (Milakov &
    Gimelshein, arXiv:1805.02867) 2 loads + 1 store."""
    x = M * N * itemsize
    return {"three_pass": 4 * x + 4 * 4 * M, "online": 3 * x, "fused": 2 * x}
