"""reference_kernels.moe: top-k routing (Mixtral's renormalised weights, Qwen2-MoE's plain ones,
ties to the lower expert id), the align invariants (each broken one named, the order inside an
expert free), and the grouped GEMM, combine and SwiGLU MoE forward against per-token loops."""

from __future__ import annotations

import numpy as np
import pytest

from reference_kernels import moe
from reference_kernels.llm_ops import silu_golden


def test_topk_route_mixtral_renormalises_and_qwen2_does_not():
    logits = np.array([[0.0, 2.0, 1.0, 2.0]])
    w, ids = moe.topk_route(logits, 2)
    assert ids.tolist() == [[1, 3]]                      # a tie: the lower id first
    assert w.tolist() == [[0.5, 0.5]]
    p = np.exp(logits[0]) / np.exp(logits[0]).sum()
    w2, ids2 = moe.topk_route(logits, 3, renormalize=False)
    assert ids2.tolist() == [[1, 3, 2]]
    np.testing.assert_allclose(w2[0], p[[1, 3, 2]], rtol=1e-15)
    # softmax over the top-k logits alone (Mixtral §2.1) equals the renormalised weights
    w3, ids3 = moe.topk_route(np.array([[0.3, -1.0, 2.5, 0.7]]), 2)
    top = np.array([2.5, 0.7])
    np.testing.assert_allclose(w3[0], np.exp(top) / np.exp(top).sum(), rtol=1e-15)
    with pytest.raises(ValueError, match="1 <= k <= E"):
        moe.topk_route(logits, 5)


def _ids(M=9, E=5, k=2, seed=0):
    return moe.topk_route(np.random.default_rng(seed).standard_normal((M, E)), k)[1]


@pytest.mark.parametrize("E,k,block", [(5, 2, 4), (257, 8, 16), (3, 1, 1), (64, 1, 16)])
def test_align_golden_obeys_the_invariants(E, k, block):
    ids = _ids(33, E, k)
    s, eb, n = moe.align_golden(ids, E, block)
    assert moe.align_problem(ids, E, block, s, eb, n) is None
    rows, blocks = moe.align_capacity(33, k, E, block)
    assert s.shape == (rows,) and eb.shape == (blocks,)
    counts, padded, total = moe.align_counts(ids, E, block)
    assert total == n[0] and (padded % block == 0).all() and (padded[counts == 0] == 0).all()


def test_align_problem_names_each_broken_invariant_and_accepts_any_order_inside_an_expert():
    ids, E, block = _ids(), 5, 4
    s, eb, n = moe.align_golden(ids, E, block)
    MK = ids.size
    # the order inside an expert (padding included) is free
    t = s.copy()
    t[:block] = t[:block][::-1]
    assert moe.align_problem(ids, E, block, t, eb, n) is None
    bad = n + 1
    assert "not a multiple of the block" in moe.align_problem(ids, E, block, s, eb, bad)
    assert "expected" in moe.align_problem(ids, E, block, s, eb, n + block)
    t = s.copy()
    t[np.flatnonzero(t == 0)[0]] = MK                    # index 0 lost
    assert "flat index 0 " in moe.align_problem(ids, E, block, t, eb, n)
    assert "is missing" in moe.align_problem(ids, E, block, t, eb, n)
    t = s.copy()
    i, j = np.flatnonzero(t < MK)[:2]
    t[j] = t[i]                                          # a duplicate
    assert "appears 2 times" in moe.align_problem(ids, E, block, t, eb, n)
    e2 = eb.copy()
    e2[0] = (e2[0] + 1) % E                              # a block assigned to another expert
    assert "routes to expert" in moe.align_problem(ids, E, block, s, e2, n)
    t = s.copy()
    t[0] = MK + 3
    assert "neither a flat index" in moe.align_problem(ids, E, block, t, eb, n)


def test_grouped_gemm_combine_and_moe_forward_match_per_token_loops():
    rng = np.random.default_rng(1)
    M, H, F, E, k = 4, 6, 5, 3, 2
    x = rng.standard_normal((M, H))
    Wr, Wg, Wu = rng.standard_normal((H, E)), rng.standard_normal((E, H, F)), \
        rng.standard_normal((E, H, F))
    Wd = rng.standard_normal((E, F, H))
    out, w, ids = moe.moe_ffn_golden(x, Wr, Wg, Wu, Wd, k)
    for m in range(M):
        want = sum(w[m, j] * ((silu_golden(x[m] @ Wg[ids[m, j]]) * (x[m] @ Wu[ids[m, j]]))
                              @ Wd[ids[m, j]]) for j in range(k))
        np.testing.assert_allclose(out[m], want, rtol=1e-12)
    G = moe.grouped_gemm_golden(x, Wg, ids)
    np.testing.assert_allclose(G[2 * 1 + 1], x[1] @ Wg[ids[1, 1]], rtol=1e-13)
    np.testing.assert_allclose(moe.combine_golden(G, w)[3], w[3, 0] * G[6] + w[3, 1] * G[7],
                               rtol=1e-13)
    assert (moe.grouped_abs_product(x, Wg, ids) >= np.abs(G)).all()
