"""Scaled dot-product attention: the float64 golden reference and the "plain implementation in the
kernel's own dtype" that FlashAttention's tests measure a kernel's error against (numpy only).

Shapes: Q, K, V and O are (B, H, N, d) — batch, heads, sequence length, head dimension — with
the same N for queries and keys. For each (b, h)::

    S = Q K^T * scale            (N, N), scale = 1 / sqrt(d) unless given
    S[i, j] = -inf for j > i     when causal (a query attends to itself and earlier keys)
    P = softmax(S) row by row    (max subtracted first)
    O = P V                      (N, d)

``lse[i] = m_i + log(sum_j exp(S[i, j] - m_i))`` is the row's logsumexp, what FlashAttention
saves for its backward pass (Dao et al., "FlashAttention", NeurIPS 2022, Algorithm 1;
Dao, "FlashAttention-2", 2023, Algorithm 1). A row whose every key is masked has no softmax; the
course defines its output as zeros and its lse as -inf (chapter 3's convention for a fully masked
softmax row). With causal masking and equal query/key lengths no row is fully masked.
"""

from __future__ import annotations

import math

import numpy as np


def _check(Q, K, V):
    Q, K, V = (np.asarray(x) for x in (Q, K, V))
    if Q.ndim != 4 or Q.shape != K.shape or Q.shape != V.shape:
        raise ValueError(f"Q, K, V must share one (B, H, N, d) shape; got {Q.shape}, {K.shape}, "
                         f"{V.shape}")
    return Q, K, V


def causal_mask(N: int) -> np.ndarray:
    """(N, N) bool: True where key j is masked for query i (j > i)."""
    return np.triu(np.ones((N, N), bool), k=1)


def attention_golden(Q, K, V, causal: bool = False, scale: float | None = None):
    """Attention in float64 from the inputs exactly as the kernel saw them (float16 / float32
    widened without rounding). Returns (O float64 (B, H, N, d), lse float64 (B, H, N)).
    Raises ValueError unless Q, K, V share one 4-D shape."""
    Q, K, V = (x.astype(np.float64) for x in _check(Q, K, V))
    d = Q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) * scale
    if causal:
        S = np.where(causal_mask(Q.shape[2]), -np.inf, S)
    m = S.max(axis=-1, keepdims=True)
    finite = np.isfinite(m)
    E = np.exp(np.where(finite, S - np.where(finite, m, 0.0), -np.inf))
    den = E.sum(axis=-1, keepdims=True)
    P = np.divide(E, den, out=np.zeros_like(E), where=den > 0)
    O = np.matmul(P, V)
    with np.errstate(divide="ignore"):
        lse = np.where(finite[..., 0], m[..., 0] + np.log(np.where(den[..., 0] > 0,
                                                                    den[..., 0], 1.0)), -np.inf)
    return O, lse


def _seq_matmul(A, B) -> np.ndarray:
    """A @ B over the last two axes in float32, summed left to right: one rounding per product
    and per addition, as a plain loop (or a one-pass kernel) does; BLAS and numpy's pairwise
    sums would be more accurate than the kernels this baseline is compared with."""
    A = A.astype(np.float32)
    B = B.astype(np.float32)
    acc = np.zeros(A.shape[:-1] + B.shape[-1:], np.float32)
    for k in range(A.shape[-1]):
        acc = acc + A[..., :, k, None] * B[..., k, None, :]
    return acc


def attention_plain(Q, K, V, causal: bool = False, dtype=None) -> np.ndarray:
    """A plain (non-fused) attention in ``dtype`` (default: the inputs' dtype, float16 or
    float32) *with its operations reordered*, as FlashAttention's tests build their baseline
    (``attention_ref(..., upcast=False, reorder_ops=True)``: references.md §4.4): K is scaled
    before the product, ``Q (K / sqrt(d))^T`` instead of ``(Q / sqrt(d)) K^T``. Each operation's
    result is rounded to ``dtype``: the scaled K, S, the row max, exp(S - m), the row sum, P, and
    O = P V. The two products and the row sum accumulate in float32 *left to right*, one rounding
    per term (GPU libraries' float16 GEMMs accumulate in float32; a plain loop sums in order),
    so in float32 the baseline makes the errors a one-pass kernel makes, not those of a pairwise
    or blocked BLAS sum. Returns O of ``dtype`` (B, H, N, d). Fully masked rows give zeros."""
    Q, K, V = _check(Q, K, V)
    dt = np.dtype(dtype or Q.dtype)
    r = lambda x: np.asarray(x).astype(dt)  # noqa: E731  (round to the dtype)
    f32 = np.float32
    d = Q.shape[-1]
    Ks = r(K.astype(dt) * dt.type(1.0 / math.sqrt(d)))
    S = r(_seq_matmul(Q.astype(dt), np.swapaxes(Ks, -1, -2)))
    if causal:
        S = np.where(causal_mask(Q.shape[2]), dt.type(-np.inf), S)
    m = S.max(axis=-1, keepdims=True)
    finite = np.isfinite(m)
    with np.errstate(invalid="ignore", over="ignore"):
        E = r(np.exp(np.where(finite, S - np.where(finite, m, 0), -np.inf).astype(f32)))
        den = r(_seq_matmul(E, np.ones(E.shape[-1:] + (1,), f32)))
        P = r(np.where(den > 0, E.astype(f32) / np.where(den > 0, den, 1).astype(f32), 0))
    return r(_seq_matmul(P, V.astype(dt)))
