"""Chapter 5 on the CPU: FlashAttention's tiled loop with the online softmax, in Numba, to read
before the CUDA kernel (:mod:`kernellab.kernels.attention_cuda` v2 has the same loop nest and
the same semantics, with a thread block where this has an iteration of the outer loop).

``flash_attention_cpu(Q, K, V, O, causal=False, Br=32, Bc=32)``: Q, K, V, O (B, H, N, d), one
dtype, float32 or float16; O written in place (rounded once to its dtype); returns the row
logsumexp, float32 (B, H, N). Scores, statistics and the output accumulate in float32 (float16
inputs are widened exactly before the loop nest).

Loop nest (Dao 2023, Algorithm 1; the parallel loop is over (b, h, Q block), as FA2's grid)::

    for (b, h, Q block of Br rows) in parallel:
        m = -inf, l = 0, o = 0                       per row, float32
        for each K/V block of Bc rows (causal: only those not entirely above the diagonal):
            s = scale * Q_blk K_blk^T                (Br, Bc); causal: masked on the diagonal
            m_new = max(m, rowmax(s))
            o, l *= exp(m - m_new)                   rescale once per block
            p = exp(s - m_new); l += rowsum(p); o += p V_blk
            m = m_new
        O_blk = o / l; lse = m + log(l)              normalise once, at the end

Raises ValueError for mismatched shapes or dtypes, Br/Bc < 1, and a read-only O.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

__all__ = ["flash_attention_cpu"]


@njit(cache=True, parallel=True)
def _flash_cpu(Q, K, V, O, lse, causal, Br, Bc):
    B, H, N, d = Q.shape
    scale = np.float32(1.0 / math.sqrt(d))
    Tr = (N + Br - 1) // Br
    for task in prange(B * H * Tr):
        b = task // (H * Tr)
        h = (task // Tr) % H
        q0 = (task % Tr) * Br
        nq = min(Br, N - q0)
        q = Q[b, h, q0:q0 + nq]
        o = np.zeros((nq, d), np.float32)
        m = np.full(nq, -np.inf, np.float32)
        l = np.zeros(nq, np.float32)
        s = np.empty(Bc, np.float32)
        kend = q0 + nq if causal else N
        for k0 in range(0, kend, Bc):
            nk = min(Bc, N - k0)
            kb = K[b, h, k0:k0 + nk]
            vb = V[b, h, k0:k0 + nk]
            diag = causal and k0 + nk - 1 > q0
            for r in range(nq):
                jn = min(nk, q0 + r - k0 + 1) if diag else nk
                if jn <= 0:
                    continue
                mt = np.float32(-np.inf)
                for j in range(jn):
                    acc = np.float32(0.0)
                    for t in range(d):
                        acc += q[r, t] * kb[j, t]
                    s[j] = acc * scale
                    mt = max(mt, s[j])
                m_new = max(m[r], mt)
                alpha = np.float32(math.exp(m[r] - m_new))
                l[r] *= alpha
                for t in range(d):
                    o[r, t] *= alpha
                for j in range(jn):
                    p = np.float32(math.exp(s[j] - m_new))
                    l[r] += p
                    for t in range(d):
                        o[r, t] += p * vb[j, t]
                m[r] = m_new
        for r in range(nq):
            inv = np.float32(1.0) / l[r]
            for t in range(d):
                O[b, h, q0 + r, t] = o[r, t] * inv
            lse[b, h, q0 + r] = m[r] + np.float32(math.log(l[r]))


def flash_attention_cpu(Q, K, V, O, causal=False, Br=32, Bc=32):
    """Tiled attention with the online softmax (module docstring); returns lse (B, H, N)."""
    arrs = [np.asarray(x) for x in (Q, K, V)]
    if not isinstance(O, np.ndarray):
        raise ValueError("O must be a numpy array")
    if any(a.ndim != 4 or a.shape != arrs[0].shape or a.dtype != arrs[0].dtype
           for a in (*arrs, O)):
        raise ValueError("Q, K, V, O must share one (B, H, N, d) shape and one dtype")
    if arrs[0].dtype not in (np.float32, np.float16):
        raise ValueError(f"dtype must be float32 or float16, got {arrs[0].dtype}")
    if int(Br) < 1 or int(Bc) < 1:
        raise ValueError(f"Br and Bc must be >= 1, got {Br}, {Bc}")
    if not O.flags.writeable:
        raise ValueError("O is read-only")
    B, H, N, d = O.shape
    lse = np.zeros((B, H, N), np.float32)
    if O.size == 0:
        return lse
    # float16 is widened exactly before the loop (Numba's CPU backend has no float16
    # arithmetic) and the float32 result rounded once into O
    out = np.empty(O.shape, np.float32)
    _flash_cpu(*(np.ascontiguousarray(a, dtype=np.float32) for a in arrs), out, lse,
               bool(causal), int(Br), int(Bc))
    O[...] = out
    return lse
