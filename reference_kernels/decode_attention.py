"""Paged decode attention: the float64 golden reference, the log-sum-exp merge of split partial
results, and the "plain implementation in the kernel's own dtype" FlashAttention's test rule
measures a kernel's error against (numpy only; a case's operands:
:func:`kernellab.kernels.decode_attention.paged_operands`).

One new token per sequence attends to that sequence's cached keys and values (Kwon et al.,
"Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP 2023,
§4.1-4.2: the KV cache in fixed-size blocks, a per-sequence block table)::

    q            (B, Hq, d)                         the new token's queries
    k_cache      (num_blocks, block_size, Hkv, d)   keys, in physical blocks
    v_cache      (num_blocks, block_size, Hkv, d)   values, same layout
    block_table  (B, max_blocks) int32              sequence b's logical block j is physical
                                                    block block_table[b, j]
    seq_lens     (B,) int32                         sequence b has keys t = 0 .. seq_lens[b] - 1,
                                                    key t in slot t % block_size of physical
                                                    block block_table[b, t // block_size]

Grouped-query attention (Ainslie et al., "GQA", EMNLP 2023, §2): Hq is a multiple of Hkv and
query head h reads kv head ``h // (Hq // Hkv)``. For each (b, h)::

    s_t = scale * q[b, h] . k_t      o = sum_t softmax(s)_t v_t      lse = log sum_t exp(s_t)

Slots past ``seq_lens[b]`` and block-table entries past ``ceil(seq_lens[b] / block_size)`` are
never read (the lab poisons them with NaN and garbage indices). A sequence of length 0 has no
softmax: its output is zeros and its lse -inf (chapter 3's convention for a fully masked row).

Split-KV (Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context inference", 2023): the
keys of a sequence are cut into parts, each part's normalised output o_i and lse_i computed
alone, and the parts merged by :func:`merge_lse`.
"""

from __future__ import annotations

import math

import numpy as np

from reference_kernels.attention import _seq_matmul

__all__ = ["check_shapes", "gather_kv", "decode_golden", "merge_lse",
           "decode_plain", "plain_error"]


def check_shapes(q, k_cache, v_cache, block_table, seq_lens):
    """Validate the paged-decode operands (module docstring). Returns (B, Hq, Hkv, d,
    block_size). Raises ValueError naming the first inconsistency."""
    q, k_cache, v_cache = (np.asarray(x) for x in (q, k_cache, v_cache))
    block_table, seq_lens = np.asarray(block_table), np.asarray(seq_lens)
    if q.ndim != 3:
        raise ValueError(f"q must be (B, Hq, d), got shape {q.shape}")
    B, Hq, d = q.shape
    if k_cache.ndim != 4 or k_cache.shape != v_cache.shape or k_cache.shape[3] != d:
        raise ValueError(f"k_cache and v_cache must share one (num_blocks, block_size, Hkv, {d}) "
                         f"shape, got {k_cache.shape} and {v_cache.shape}")
    _, bs, Hkv, _ = k_cache.shape
    if Hkv < 1 or Hq % Hkv:
        raise ValueError(f"Hq = {Hq} must be a multiple of Hkv = {Hkv}")
    if block_table.ndim != 2 or block_table.shape[0] != B or seq_lens.shape != (B,):
        raise ValueError(f"block_table must be (B={B}, max_blocks) and seq_lens (B,), got "
                         f"{block_table.shape} and {seq_lens.shape}")
    if seq_lens.min(initial=0) < 0 or (seq_lens.max(initial=0)
                                       > block_table.shape[1] * bs):
        raise ValueError(f"seq_lens must lie in 0 .. max_blocks * block_size = "
                         f"{block_table.shape[1] * bs}")
    return B, Hq, Hkv, d, bs


def gather_kv(k_cache, v_cache, block_table, seq_lens, b: int):
    """The keys and values of sequence ``b`` in order, (seq_lens[b], Hkv, d) each, read through
    its block table (only the blocks and slots it uses)."""
    bs = k_cache.shape[1]
    L = int(seq_lens[b])
    t = np.arange(L)
    blocks = np.asarray(block_table)[b, t // bs]
    return k_cache[blocks, t % bs], v_cache[blocks, t % bs]


def decode_golden(q, k_cache, v_cache, block_table, seq_lens, scale: float):
    """Paged decode attention in float64 from the inputs as the kernel saw them (bfloat16
    widened exactly). Returns (o float64 (B, Hq, d), lse float64 (B, Hq)). Raises ValueError
    for inconsistent shapes (:func:`check_shapes`)."""
    B, Hq, Hkv, d, _ = check_shapes(q, k_cache, v_cache, block_table, seq_lens)
    G = Hq // Hkv
    q64 = np.asarray(q).astype(np.float64)
    o = np.zeros((B, Hq, d))
    lse = np.full((B, Hq), -np.inf)
    for b in range(B):
        K, V = (x.astype(np.float64) for x in gather_kv(k_cache, v_cache, block_table,
                                                         seq_lens, b))
        if K.shape[0] == 0:
            continue
        for h in range(Hq):
            s = float(scale) * (K[:, h // G] @ q64[b, h])
            m = s.max()
            e = np.exp(s - m)
            o[b, h] = (e @ V[:, h // G]) / e.sum()
            lse[b, h] = m + math.log(e.sum())
    return o, lse


def merge_lse(o_parts, lse_parts):
    """Merge split partial results (Flash-Decoding's reduction step): ``o_parts`` (S, ..., d),
    each part's normalised output, and ``lse_parts`` (S, ...), each part's log-sum-exp, -inf
    for a part with no keys (its o is ignored, NaN or not). With M = max_i lse_i::

        lse = M + log sum_i exp(lse_i - M)      o = sum_i exp(lse_i - lse) o_i

    Subtracting M keeps every exponent <= 0 (exp(lse_i) alone overflows float32 once lse_i
    exceeds 88.7). All parts empty: o = 0, lse = -inf. Returns (o float64, lse float64)."""
    o_parts = np.asarray(o_parts, dtype=np.float64)
    lse_parts = np.asarray(lse_parts, dtype=np.float64)
    M = lse_parts.max(axis=0)
    live = np.isfinite(M)
    Ms = np.where(live, M, 0.0)
    w = np.exp(lse_parts - Ms)                      # exp(-inf) = 0 for an empty part
    den = w.sum(axis=0)
    with np.errstate(divide="ignore"):
        lse = np.where(live, Ms + np.log(np.where(live, den, 1.0)), -np.inf)
    o = np.where(w[..., None] > 0, o_parts, 0.0)    # an empty part's o never enters
    o = (w[..., None] * o).sum(axis=0) / np.where(live, den, 1.0)[..., None]
    return np.where(live[..., None], o, 0.0), lse


def decode_plain(q, k_cache, v_cache, block_table, seq_lens, scale: float, dtype=None):
    """A plain (non-fused) decode attention in ``dtype`` (default: q's, e.g. bfloat16) with its
    operations reordered, as FlashAttention's tests build their baseline
    (``attention_ref(..., upcast=False, reorder_ops=True)`` in Dao-AILab/flash-attention
    ``tests/test_flash_attn.py``; the same steps as
    :func:`reference_kernels.attention.attention_plain`): K is scaled first, and each
    operation's result is rounded to ``dtype``: the scaled K, the scores, the max,
    exp(s - m), the sum, the probabilities and o; the products and the sum accumulate in
    float32 left to right. Returns o of ``dtype`` (B, Hq, d), zeros for an empty sequence."""
    B, Hq, Hkv, d, _ = check_shapes(q, k_cache, v_cache, block_table, seq_lens)
    dt = np.dtype(dtype or np.asarray(q).dtype)
    r = lambda x: np.asarray(x).astype(dt)  # noqa: E731  (round to the dtype)
    G = Hq // Hkv
    out = np.zeros((B, Hq, d), dt)
    for b in range(B):
        K, V = gather_kv(k_cache, v_cache, block_table, seq_lens, b)
        if K.shape[0] == 0:
            continue
        Kh = np.repeat(np.swapaxes(K, 0, 1), G, axis=0)          # (Hq, L, d), GQA
        Vh = np.repeat(np.swapaxes(V, 0, 1), G, axis=0)
        Ks = r(Kh.astype(dt) * dt.type(scale))
        S = r(_seq_matmul(np.asarray(q)[b, :, None, :].astype(dt),
                          np.swapaxes(Ks, -1, -2)))              # (Hq, 1, L)
        m = S.max(axis=-1, keepdims=True)
        E = r(np.exp((S - m).astype(np.float32)))
        den = r(_seq_matmul(E, np.ones(E.shape[-1:] + (1,), np.float32)))
        P = r(E.astype(np.float32) / den.astype(np.float32))
        out[b] = r(_seq_matmul(P, Vh.astype(dt)))[:, 0, :]
    return out


def plain_error(q, k_cache, v_cache, block_table, seq_lens, scale: float, ref) -> float:
    """max |decode_plain(...) - ref| in float64: the measured error of a plain same-dtype decode
    attention that FlashAttention's rule scales (``ref``: the float64 golden o,
    :func:`decode_golden`)."""
    o = decode_plain(q, k_cache, v_cache, block_table, seq_lens, scale).astype(np.float64)
    return float(np.abs(o - np.asarray(ref, dtype=np.float64)).max()) if o.size else 0.0
