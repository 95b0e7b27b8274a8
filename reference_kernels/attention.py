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


def causal_mask(N: int, offset: int = 0) -> np.ndarray:
    """(N, N) bool: True where key j is masked for query i: j > i + ``offset`` (0: the causal
    mask; -1 also masks the diagonal, +1 lets each query see the next key -- the two off-by-one
    mistakes the grader names)."""
    return np.triu(np.ones((N, N), bool), k=1 + int(offset))


def _probabilities(Q, K, causal, scale, causal_offset):
    """(S, P, m, den) in float64: scores, softmax rows (zeros for a fully masked row), row max
    and the row sum of exp(S - m)."""
    d = Q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) * scale
    if causal:
        S = np.where(causal_mask(Q.shape[2], causal_offset), -np.inf, S)
    m = S.max(axis=-1, keepdims=True) if S.size else np.zeros(S.shape[:-1] + (1,))
    finite = np.isfinite(m)
    E = np.exp(np.where(finite, S - np.where(finite, m, 0.0), -np.inf))
    den = E.sum(axis=-1, keepdims=True)
    P = np.divide(E, den, out=np.zeros_like(E), where=den > 0)
    return S, P, m, den


def attention_golden(Q, K, V, causal: bool = False, scale: float | None = None,
                     causal_offset: int = 0):
    """Attention in float64 from the inputs exactly as the kernel saw them (float16 / float32
    widened without rounding). Returns (O float64 (B, H, N, d), lse float64 (B, H, N)).
    ``scale`` defaults to 1/sqrt(d); ``causal_offset`` shifts the causal mask's diagonal
    (:func:`causal_mask`; only with ``causal``). Raises ValueError unless Q, K, V share one
    4-D shape."""
    Q, K, V = (x.astype(np.float64) for x in _check(Q, K, V))
    _, P, m, den = _probabilities(Q, K, causal, scale, causal_offset)
    finite = np.isfinite(m)
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
    (``attention_ref(..., upcast=False, reorder_ops=True)`` in Dao-AILab/flash-attention
    ``tests/test_flash_attn.py``): K is scaled
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


def plain_error(Q, K, V, causal: bool, ref) -> float:
    """max |attention_plain(Q, K, V, causal) - ref| in float64: the measured error of a plain
    same-dtype attention that FlashAttention's rule scales (``ref``: the float64 golden output
    of the same inputs, :func:`attention_golden`)."""
    O = attention_plain(Q, K, V, causal).astype(np.float64)
    return float(np.abs(O - np.asarray(ref, dtype=np.float64)).max()) if O.size else 0.0


#: Tail factor of the probabilistic rounding bounds (Higham & Mary, SIAM J. Sci. Comput. 41(5),
#: 2019), as kernellab.numerics.KAware and RowSoftmax use it.
C_PROB = 6.0


def fused_rounding_bound(Q, K, V, causal: bool = False, u: float = 2.0 ** -24) -> np.ndarray:
    """First-order bound (float64, (B, H, N, d)) on the rounding error of a fused attention
    kernel that computes in float32 (unit roundoff ``u``) from inputs it widened exactly: the
    float32 rounding a FlashAttention kernel cannot avoid, whatever its loop order and block
    sizes. For row i, with p_j = P[i, j], s_j its score and t_j = m_i - s_j >= 0::

        u * [ sum_j p_j (c sqrt(d) scale a_j + 2 |s_j| + 4 + 3.35 t_j) |v_j - O_i|
              + 2 c sqrt(N) (sum_j p_j |v_j| + |O_i|) + 3 |O_i| ]

    * a score s_j = scale (q . k_j): a dot product of d float32 terms is off by c sqrt(d) u a_j
      at most with high probability, a_j = scale sum_t |q_t k_jt| (the probabilistic bound of
      Higham & Mary, c = :data:`C_PROB`; the worst case would be d u a_j), the scaling and the
      rounded 1/sqrt(d) add 2 u |s_j| (an exp2-based kernel that folds log2(e) into the scale
      rounds once more: the c sqrt(d) term, six times the typical error, absorbs it);
    * exp(s_j - m) carries a relative error u (4 + 3.35 t_j) (:class:`kernellab.numerics.
      RowSoftmax`'s derivation: the subtraction and expf within 2 ulp);
    * a relative perturbation e_j of p_j (or a perturbation e_j of s_j) moves the normalised
      output by sum_j p_j e_j (v_j - O_i): softmax renormalises, so only the spread of V
      around the output counts;
    * the running sums o = sum p_j v_j and l = sum p_j each add c sqrt(N) u relative to their
      terms' magnitudes (same probabilistic bound) for the products p_j v_j and the
      additions, and as much again for the rescalings by exp(m_old - m_new) (one rounding
      each, at most N of them; the rounded factor itself is the same for o and l and cancels
      in o / l);
    * o / l: a reciprocal and a multiply, plus the float64 reference: 3 u |O_i|.

    The output's own rounding to its dtype is not included (FlashAttention's rule has a
    one-ulp floor for it). The bound is a worst case over the terms' signs, so on random data
    a float32 kernel's error sits far below it, and below FlashAttention's measured part (2 x a
    plain float32 attention's error) too: the bound is in effect the float32 tolerance, which a
    float32 kernel that keeps P, or reads V, in float16 still misses
    (``tests/test_grader/labs/flash_attention/test_grader_flash_attention.py``). Fully masked rows
    contribute nothing. Raises
    ValueError unless Q, K, V share one 4-D shape."""
    Q, K, V = (x.astype(np.float64) for x in _check(Q, K, V))
    B, H, N, d = Q.shape
    scale = 1.0 / math.sqrt(d)
    S, P, m, _ = _probabilities(Q, K, causal, None, 0)
    O = np.matmul(P, V)
    a = np.matmul(np.abs(Q), np.swapaxes(np.abs(K), -1, -2)) * scale
    live = P > 0
    t = np.where(live, m - np.where(live, S, 0.0), 0.0)
    w = P * (C_PROB * math.sqrt(d) * a + 2.0 * np.abs(np.where(live, S, 0.0)) + 4.0 + 3.35 * t)
    # sum_j w_j |v_jt - O_it|: the absolute value keeps it from being a matrix product, and an
    # (N, N, d) array would be large, so one key at a time
    spread = np.zeros_like(O)
    for j in range(N):
        spread += w[..., :, j, None] * np.abs(V[..., j, None, :] - O)
    mag = np.matmul(P, np.abs(V))
    return u * (spread + 2.0 * C_PROB * math.sqrt(max(N, 1)) * (mag + np.abs(O))
                + 3.0 * np.abs(O))
