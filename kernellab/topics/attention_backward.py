"""Chapter 5, section 6: the attention backward pass in numpy, materialised and FlashAttention's
tiled recomputation.

One head: Q, K, V, O, dO of shape (N, d), the same N for queries and keys; scale = 1 / sqrt(d);
S = scale Q K^T, P = softmax(S) row by row (S[i, j] = -inf for j > i when causal), O = P V, and
dO = dL/dO for a scalar loss L. Then::

    dV = P^T dO,   dP = dO V^T,   dS = P o (dP - D),   D_i = rowsum(P_i o dP_i) = rowsum(dO_i o O_i)
    dQ = scale dS K,   dK = scale dS^T Q

(the softmax's Jacobian applied row by row). FlashAttention never stores P: its backward pass
recomputes each tile P_ij = exp(S_ij - lse_i) from Q, K and the logsumexp the forward pass saved,
and takes D from O and dO (Dao et al., NeurIPS 2022, Algorithm 4 / Appendix B; Dao 2023,
Algorithm 2: K/V blocks in the outer loop, Q blocks in the inner).

* :func:`attention_backward` — the materialised gradient in any float dtype (float64: the golden
  analytic gradient; float32: the plain baseline of FlashAttention's test rule);
* :func:`flash_attention_backward` — the tiled recomputation.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["attention_backward", "flash_attention_backward"]


def _two_d(*arrays):
    shape = np.shape(arrays[0])
    if len(shape) != 2 or any(np.shape(a) != shape for a in arrays):
        raise ValueError("Q, K, V, dO (and O) must share one (N, d) shape, got "
                         f"{[np.shape(a) for a in arrays]}")


def attention_backward(Q, K, V, dO, causal: bool = False, dtype=np.float64):
    """(dQ, dK, dV), each (N, d) of ``dtype``, of one head's attention O = softmax(QK^T/sqrt(d)) V
    with upstream gradient dO, computed with P materialised (max subtracted), every operation in
    ``dtype`` (numpy's matmul: BLAS sums). Raises ValueError for mismatched shapes."""
    _two_d(Q, K, V, dO)
    dt = np.dtype(dtype).type
    Q, K, V, dO = (np.asarray(x, dt) for x in (Q, K, V, dO))
    scale = dt(1 / math.sqrt(Q.shape[1]))
    S = (Q @ K.T) * scale
    if causal:
        S = np.where(np.triu(np.ones(S.shape, bool), 1), dt(-np.inf), S)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    dP = dO @ V.T
    dS = P * (dP - (P * dP).sum(axis=1, keepdims=True))
    return (dS @ K) * scale, (dS.T @ Q) * scale, P.T @ dO


def flash_attention_backward(Q, K, V, O, dO, lse, Br: int, Bc: int, causal: bool = False,
                             dtype=np.float32):
    """FlashAttention's backward pass for one head, every operation in ``dtype``: Q, K, V, O, dO
    (N, d) and the forward pass's logsumexp ``lse`` (N,). K/V blocks of ``Bc`` rows in the outer
    loop, Q blocks of ``Br`` rows in the inner; per tile P = exp(scale Q_i K_j^T - lse_i) is
    recomputed (masked above the diagonal when ``causal``; tiles entirely above it skipped),
    dV_j += P^T dO_i, dS = P o (dO_i V_j^T - D_i) with D = rowsum(dO o O), dQ_i += scale dS K_j,
    dK_j += scale dS^T Q_i. Returns (dQ, dK, dV), each (N, d) of ``dtype``. Raises ValueError
    for mismatched shapes or Br/Bc < 1."""
    _two_d(Q, K, V, O, dO)
    if int(Br) < 1 or int(Bc) < 1:
        raise ValueError(f"Br and Bc must be >= 1, got {Br}, {Bc}")
    dt = np.dtype(dtype).type
    Q, K, V, O, dO = (np.asarray(x, dt) for x in (Q, K, V, O, dO))
    lse = np.asarray(lse, dt).reshape(-1)
    N, d = Q.shape
    scale = dt(1 / math.sqrt(d))
    D = (dO * O).sum(axis=1)
    dQ, dK, dV = (np.zeros((N, d), dt) for _ in range(3))
    for k0 in range(0, N, Bc):
        kj, vj = K[k0:k0 + Bc], V[k0:k0 + Bc]
        for q0 in range(0, N, Br):
            q_last = min(N, q0 + Br) - 1
            if causal and k0 > q_last:
                continue                                    # the tile lies above the diagonal
            S = (Q[q0:q0 + Br] @ kj.T) * scale
            if causal:
                above = np.arange(k0, k0 + len(kj)) > np.arange(q0, q_last + 1)[:, None]
                S = np.where(above, dt(-np.inf), S)
            P = np.exp(S - lse[q0:q0 + Br, None])
            dV[k0:k0 + Bc] += P.T @ dO[q0:q0 + Br]
            dS = P * (dO[q0:q0 + Br] @ vj.T - D[q0:q0 + Br, None])
            dQ[q0:q0 + Br] += (dS @ kj) * scale
            dK[k0:k0 + Bc] += (dS.T @ Q[q0:q0 + Br]) * scale
    return dQ, dK, dV
