"""Mixture-of-experts (MoE) golden references in float64: top-k routing, the align/sort step's
invariants, the grouped GEMM, the weighted combine and a SwiGLU MoE FFN forward.

Shapes: M tokens, hidden size K, expert output width N, E experts, top-k ``k``. A token's k
choices are *flat* indices ``i = m * k + j`` (token m, choice j) into ``topk_ids.ravel()``.

Routing follows Mixtral (A. Jiang et al., "Mixtral of Experts", arXiv:2401.04088, 2024, §2.1:
``softmax(TopK(x W_g))``; Hugging Face ``MixtralSparseMoeBlock`` computes the same as a softmax
over all E logits, the top k, then the weights divided by their sum). ``renormalize=False`` is
Qwen2-MoE's convention (Hugging Face ``Qwen2MoeConfig.norm_topk_prob`` defaults to False: the
top-k softmax probabilities as they are). Ties between equal logits go to the lower expert id.

The align/sort step is vLLM's ``moe_align_block_size`` (vllm/model_executor/layers/fused_moe):
the flat indices grouped by expert, each expert's group padded with the sentinel ``M * k`` to a
multiple of the GEMM's block of rows, so that each block of rows belongs to one expert. The
order of the indices inside an expert's group is free (the GEMM computes each row alone);
:func:`align_problem` checks what is not.
"""

from __future__ import annotations

import numpy as np

from reference_kernels.llm_ops import silu_golden

__all__ = ["topk_route", "align_counts", "align_problem", "align_golden", "align_capacity",
           "grouped_gemm_golden", "grouped_abs_product", "combine_golden", "combine_abs",
           "moe_ffn_golden"]


def topk_route(logits, k: int, renormalize: bool = True):
    """Top-k routing of ``logits`` (M, E): softmax over the E experts in float64, the k largest
    probabilities (equal ones: lower expert id first), optionally renormalised to sum to 1.
    Returns (weights (M, k) float64, ids (M, k) int32), each row in descending weight.
    Raises ValueError unless 1 <= k <= E."""
    x = np.asarray(logits, dtype=np.float64)
    M, E = x.shape
    if not 1 <= k <= E:
        raise ValueError(f"top-k needs 1 <= k <= E = {E}, not {k}")
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :k]     # stable: lower id first on ties
    w = np.take_along_axis(p, ids, axis=1)
    if renormalize:
        w = w / w.sum(axis=1, keepdims=True)
    return w, ids.astype(np.int32)


def align_counts(topk_ids, E: int, block: int):
    """Per expert: its number of flat indices and its group padded to a multiple of ``block``
    (0 for an expert with none). Returns (counts (E,), padded (E,), num_post_pad), int64."""
    ids = np.asarray(topk_ids).ravel()
    counts = np.bincount(ids, minlength=E).astype(np.int64)
    padded = (counts + block - 1) // block * block
    return counts, padded, int(padded.sum())


def align_capacity(M: int, k: int, E: int, block: int) -> tuple[int, int]:
    """The lengths of sorted_token_ids and expert_ids that fit any routing: M k + E (block - 1)
    rows (every expert padded by at most block - 1), and that many rows over ``block``."""
    rows = M * k + E * (block - 1)
    return rows, (rows + block - 1) // block


def align_golden(topk_ids, E: int, block: int):
    """One valid align result (ascending flat index inside each expert, experts in id order,
    padding at the end of each group): (sorted_ids (rows,) int32 filled with the sentinel past
    num_post_pad, expert_ids (blocks,) int32 (-1 past the used blocks), num_post_pad (1,)
    int32), with the lengths of :func:`align_capacity`."""
    ids = np.asarray(topk_ids)
    M, k = ids.shape
    counts, padded, total = align_counts(ids, E, block)
    rows, blocks = align_capacity(M, k, E, block)
    sorted_ids = np.full(rows, M * k, np.int32)
    expert_ids = np.full(blocks, -1, np.int32)
    flat = ids.ravel()
    start = 0
    for e in range(E):
        mine = np.flatnonzero(flat == e)
        sorted_ids[start:start + mine.size] = mine
        expert_ids[start // block:(start + padded[e]) // block] = e
        start += int(padded[e])
    return sorted_ids, expert_ids, np.array([total], np.int32)


def align_problem(topk_ids, E: int, block: int, sorted_ids, expert_ids,
                  num_post_pad) -> str | None:
    """None if an align result obeys every invariant, else the first one broken, in plain
    words: num_post_pad is the sum over experts of their counts rounded up to ``block``; each
    used block of rows holds indices of the expert ``expert_ids`` names for it, or the sentinel
    ``M k``; every flat index 0 .. M k - 1 appears exactly once; each expert has exactly
    ceil(count / block) blocks. The order inside an expert, and of the experts, is free."""
    ids = np.asarray(topk_ids)
    M, k = ids.shape
    MK = M * k
    counts, padded, total = align_counts(ids, E, block)
    got = int(np.asarray(num_post_pad).ravel()[0])
    if got % block:
        return (f"num_tokens_post_pad is {got}, not a multiple of the block of {block} rows: "
                "each expert's group is padded to a multiple of the block")
    if got != total:
        return (f"num_tokens_post_pad is {got}, expected {total}: the sum over experts of "
                f"their counts rounded up to a multiple of {block} (an expert with no tokens "
                "gets no block)")
    s = np.asarray(sorted_ids).ravel()[:total].astype(np.int64)
    nb = total // block
    eb = np.asarray(expert_ids).ravel()[:nb].astype(np.int64)
    if ((eb < 0) | (eb >= E)).any():
        b = int(np.flatnonzero((eb < 0) | (eb >= E))[0])
        return f"expert_ids[{b}] is {eb[b]}, not an expert id in 0..{E - 1}"
    bad = (s < 0) | (s > MK)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return (f"sorted_token_ids[{i}] is {s[i]}: neither a flat index 0..{MK - 1} nor the "
                f"sentinel {MK}")
    valid = s[s < MK]
    seen = np.bincount(valid, minlength=MK)
    if (seen > 1).any():
        i = int(np.flatnonzero(seen > 1)[0])
        return f"flat index {i} (token {i // k}, choice {i % k}) appears {seen[i]} times"
    if (seen == 0).any():
        i = int(np.flatnonzero(seen == 0)[0])
        return (f"flat index {i} (token {i // k}, choice {i % k}) is missing from "
                "sorted_token_ids: every one of the M k indices appears once")
    flat = ids.ravel()
    owner = np.repeat(eb, block)
    wrong = (s < MK) & (flat[np.minimum(s, MK - 1)] != owner)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        return (f"sorted_token_ids[{i}] = {s[i]} routes to expert {flat[s[i]]} but lies in "
                f"block {i // block}, which expert_ids assigns to expert {owner[i]}")
    blocks_of = np.bincount(eb, minlength=E)
    need = padded // block
    if (blocks_of != need).any():
        e = int(np.flatnonzero(blocks_of != need)[0])
        return (f"expert {e} has {blocks_of[e]} block(s) of {block} rows for its {counts[e]} "
                f"index(es), expected {need[e]}: its group is padded to the next multiple of "
                "the block, no further")
    return None


def grouped_gemm_golden(A, W, topk_ids):
    """Row ``i = m k + j`` of the result is ``A[m] @ W[topk_ids[m, j]]``: A (M, K), W (E, K,
    N), topk_ids (M, k). Returns (M k, N) float64."""
    A64, W64 = np.asarray(A, np.float64), np.asarray(W, np.float64)
    ids = np.asarray(topk_ids)
    k = ids.shape[1]
    rows = A64[np.arange(ids.size) // k]
    return np.einsum("ik,ikn->in", rows, W64[ids.ravel()])


def grouped_abs_product(A, W, topk_ids):
    """|A| and |W| through :func:`grouped_gemm_golden`: the scale of the K-aware bound."""
    return grouped_gemm_golden(np.abs(np.asarray(A, np.float64)),
                               np.abs(np.asarray(W, np.float64)), topk_ids)


def combine_golden(Y, weights):
    """``out[m] = sum_j weights[m, j] * Y[m k + j]``: Y (M k, N), weights (M, k). Returns (M,
    N) float64."""
    w = np.asarray(weights, np.float64)
    M, k = w.shape
    Y64 = np.asarray(Y, np.float64).reshape(M, k, -1)
    return np.einsum("mj,mjn->mn", w, Y64)


def combine_abs(Y, weights):
    """:func:`combine_golden` of the absolute values (the scale of the K-aware bound)."""
    return combine_golden(np.abs(np.asarray(Y, np.float64)),
                          np.abs(np.asarray(weights, np.float64)))


def moe_ffn_golden(x, W_router, W_gate, W_up, W_down, k: int, renormalize: bool = True):
    """A MoE FFN forward in float64: route ``x`` (M, H) with logits ``x @ W_router`` (H, E)
    (:func:`topk_route`), then ``sum_j w_j down_e(silu(gate_e(x)) * up_e(x))`` with W_gate,
    W_up (E, H, F) and W_down (E, F, H) (SwiGLU: N. Shazeer, "GLU Variants Improve
    Transformer", arXiv:2002.05202, 2020). Returns (out (M, H), weights, ids)."""
    x64 = np.asarray(x, np.float64)
    w, ids = topk_route(x64 @ np.asarray(W_router, np.float64), k, renormalize)
    h = silu_golden(grouped_gemm_golden(x64, W_gate, ids)) * grouped_gemm_golden(x64, W_up, ids)
    y = np.einsum("if,ifh->ih", h, np.asarray(W_down, np.float64)[ids.ravel()])
    return combine_golden(y, w), w, ids
