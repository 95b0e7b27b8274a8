"""The paged decode-attention reference: against Lab 5's dense attention, GQA head mapping,
poisoned slots ignored, the log-sum-exp merge (empty parts, large lse), the plain BF16
baseline."""

import math

import numpy as np
import pytest

from kernellab.kernels.decode_attention import paged_operands
from reference_kernels.attention import attention_golden
from reference_kernels.decode_attention import (
    check_shapes, decode_golden, decode_plain, gather_kv, merge_lse, plain_error,
)


def _ops(lens=(37, 1, 20), Hq=8, Hkv=2, d=16, seed=0, shift=0.0):
    return paged_operands(np.random.default_rng(seed), list(lens), Hq, Hkv, d, shift=shift)


def test_matches_dense_attention_with_gqa_mapping():
    q, k, v, bt, sl = _ops()
    scale = 1.0 / math.sqrt(16)
    o, lse = decode_golden(q, k, v, bt, sl, scale)
    for b in range(3):
        K, V = gather_kv(k, v, bt, sl, b)
        for h in range(8):
            kvh = h // 4                      # G = 4
            L = int(sl[b])
            Q = np.zeros((1, 1, L, 16))
            Q[0, 0, -1] = q[b, h].astype(np.float64)
            Kd = K[:, kvh].astype(np.float64)[None, None]
            Vd = V[:, kvh].astype(np.float64)[None, None]
            ref, ref_lse = attention_golden(Q, Kd, Vd, causal=False)
            np.testing.assert_allclose(o[b, h], ref[0, 0, -1], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(lse[b, h], ref_lse[0, 0, -1], rtol=1e-12)


def test_poisoned_slots_and_table_entries_are_not_read():
    q, k, v, bt, sl = _ops()
    assert np.isnan(k.astype(np.float32)).any() and (bt < 0).any()
    o, lse = decode_golden(q, k, v, bt, sl, 0.25)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert np.isfinite(decode_plain(q, k, v, bt, sl, 0.25).astype(np.float32)).all()


def test_one_key_is_its_value_and_empty_sequence_is_zero():
    q, k, v, bt, sl = _ops(lens=(1, 0))
    o, lse = decode_golden(q, k, v, bt, sl, 0.25)
    K, V = gather_kv(k, v, bt, sl, 0)
    np.testing.assert_array_equal(o[0], np.repeat(V[0].astype(np.float64), 4, axis=0))
    assert (o[1] == 0).all() and np.isneginf(lse[1]).all()


def test_merge_of_parts_equals_the_whole_and_empty_parts_add_nothing():
    q, k, v, bt, sl = _ops(lens=(50,), Hq=4, Hkv=1)
    scale = 0.25
    whole, whole_lse = decode_golden(q, k, v, bt, sl, scale)
    parts_o, parts_lse = [], []
    for t0, t1 in ((0, 16), (16, 16), (16, 48), (48, 50), (50, 50)):
        # a part: the keys t0 .. t1 - 1 as a sequence of their own (block-aligned starts)
        bt_p = np.full_like(bt, -1)
        n = -(-(t1 - t0) // 16)
        bt_p[0, :n] = bt[0, t0 // 16:t0 // 16 + n]
        o_p, lse_p = decode_golden(q, k, v, bt_p, np.array([t1 - t0], np.int32), scale)
        if t1 == t0:
            o_p = np.full_like(o_p, np.nan)   # an empty part's o is never looked at
        parts_o.append(o_p)
        parts_lse.append(lse_p)
    o, lse = merge_lse(parts_o, parts_lse)
    np.testing.assert_allclose(o, whole, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, whole_lse, rtol=1e-12)


def test_merge_large_lse_and_all_empty():
    o_parts = np.array([[[1.0, 2.0]], [[3.0, 4.0]]])
    lse = np.array([[1000.0], [1000.0 + math.log(3.0)]])   # exp(1000) overflows
    o, out_lse = merge_lse(o_parts, lse)
    np.testing.assert_allclose(o, [[2.5, 3.5]])
    np.testing.assert_allclose(out_lse, [1000.0 + math.log(4.0)])
    o, out_lse = merge_lse(np.full((2, 1, 2), np.nan), np.full((2, 1), -np.inf))
    assert (o == 0).all() and np.isneginf(out_lse).all()


def test_plain_bf16_error_is_bf16_sized():
    q, k, v, bt, sl = _ops(d=64)
    ref, _ = decode_golden(q, k, v, bt, sl, 0.125)
    err = plain_error(q, k, v, bt, sl, 0.125, ref)
    assert 2.0 ** -12 < err < 2.0 ** -3      # rounding of a few BF16 steps, not float32's
    assert decode_plain(q, k, v, bt, sl, 0.125).dtype == q.dtype


def test_bad_shapes_are_refused():
    q, k, v, bt, sl = _ops()
    with pytest.raises(ValueError, match="multiple"):
        check_shapes(q[:, :3], k, v, bt, sl)
    with pytest.raises(ValueError, match="seq_lens"):
        check_shapes(q, k, v, bt, sl * 100)
