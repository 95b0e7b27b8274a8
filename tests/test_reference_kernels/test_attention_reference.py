"""reference_kernels.attention: the float64 golden attention (with causal masking and the
logsumexp) against a per-row loop, and the plain same-dtype baseline FlashAttention's error rule
is measured against (Dao-AILab/flash-attention tests/test_flash_attn.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference_kernels.attention import attention_golden, attention_plain, causal_mask


def _qkv(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def _loop(Q, K, V, causal):
    B, H, N, d = Q.shape
    O = np.zeros(Q.shape)
    lse = np.zeros((B, H, N))
    for b in range(B):
        for h in range(H):
            for i in range(N):
                keys = range(i + 1) if causal else range(N)
                s = np.array([math.fsum(float(Q[b, h, i, t]) * float(K[b, h, j, t])
                                        for t in range(d)) / math.sqrt(d) for j in keys])
                m = s.max()
                e = np.exp(s - m)
                O[b, h, i] = (e / e.sum()) @ V[b, h, :len(s)].astype(np.float64)
                lse[b, h, i] = m + math.log(e.sum())
    return O, lse


@pytest.mark.parametrize("causal", [False, True])
def test_golden_matches_a_row_by_row_loop(causal):
    Q, K, V = _qkv((2, 2, 17, 32))
    O, lse = attention_golden(Q, K, V, causal)
    O2, lse2 = _loop(Q, K, V, causal)
    assert O.dtype == np.float64 and O.shape == Q.shape and lse.shape == Q.shape[:3]
    assert np.abs(O - O2).max() < 1e-13 and np.abs(lse - lse2).max() < 1e-12


def test_causal_first_row_is_its_own_value_row():
    Q, K, V = _qkv((1, 1, 5, 8), seed=1)
    O, lse = attention_golden(Q, K, V, causal=True)
    assert np.array_equal(O[0, 0, 0], V[0, 0, 0].astype(np.float64))
    assert causal_mask(3).tolist() == [[False, True, True], [False, False, True],
                                       [False, False, False]]


def test_large_scores_do_not_overflow():
    Q, K, V = _qkv((1, 1, 9, 16), seed=2)
    O, lse = attention_golden(Q * 1e3, K * 1e3, V)
    assert np.isfinite(O).all() and np.isfinite(lse).all()


@pytest.mark.parametrize("causal", [False, True])
def test_plain_baseline_rounds_in_its_dtype(causal):
    Q, K, V = _qkv((1, 2, 33, 64), seed=3)
    err = {}
    for dt in (np.float32, np.float16):
        q, k, v = (x.astype(dt) for x in (Q, K, V))
        out = attention_plain(q, k, v, causal)
        assert out.dtype == dt
        ref, _ = attention_golden(q, k, v, causal)
        err[dt] = float(np.abs(out.astype(np.float64) - ref).max())
    # float16's unit roundoff is 2^13 times float32's; the errors follow (not a tolerance: both
    # are far from the other's scale)
    assert 0 < err[np.float32] < 1e-5 and 1e-4 < err[np.float16] < 1e-2
    assert err[np.float16] > 100 * err[np.float32]


def test_shapes_are_checked():
    Q, K, V = _qkv((1, 1, 4, 8))
    with pytest.raises(ValueError, match="share one"):
        attention_golden(Q, K[:, :, :3], V)
    with pytest.raises(ValueError, match="share one"):
        attention_plain(Q[0], K[0], V[0])
