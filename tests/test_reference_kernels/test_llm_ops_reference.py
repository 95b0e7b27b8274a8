"""reference_kernels.llm_ops: the float64 golden fused add + RMSNorm, RoPE (both layouts, partial
rotary, the cos/sin cache) and SwiGLU, each against an independent formulation: exactly rounded
sums (math.fsum), RoPE as a complex multiplication (RoFormer §3.4.2, eq. 12/34) and as
Hugging Face's ``x * cos + rotate_half(x) * sin``, RoPE's relative-position property, and
SiLU element by element with math.exp."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference_kernels.llm_ops import (fused_add_rmsnorm_golden, rope_cos_sin_golden,
                                       rope_golden, rope_inv_freq, rope_qkv_golden,
                                       silu_golden, swiglu_golden)
from reference_kernels.norms import rmsnorm_golden

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:                           # pragma: no cover - a base dependency
    BF16 = None


def _normal(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------------ add + RMSNorm

def test_fused_add_rmsnorm_is_the_sum_then_rmsnorm():
    x, r = _normal((3, 37), 0, BF16), _normal((3, 37), 1, BF16)
    w = _normal(37, 2, BF16)
    out, h = fused_add_rmsnorm_golden(x, r, w, eps=1e-5)
    assert out.dtype == h.dtype == np.float64 and out.shape == h.shape == (3, 37)
    np.testing.assert_array_equal(h, x.astype(np.float64) + r.astype(np.float64))  # exact
    for i in range(3):
        ms = math.fsum(h[i] ** 2) / 37
        np.testing.assert_allclose(out[i], h[i] / math.sqrt(ms + 1e-5) * w.astype(np.float64),
                                   rtol=1e-13)
    np.testing.assert_array_equal(out, rmsnorm_golden(h, w, 1e-5))
    with pytest.raises(ValueError, match="same shape"):
        fused_add_rmsnorm_golden(x, r[:2], w)
    with pytest.raises(TypeError):
        fused_add_rmsnorm_golden(x.astype(np.int32), r, w)


# ------------------------------------------------------------------------------ RoPE

def test_frequencies_and_cache():
    f = rope_inv_freq(8, 10000.0)
    np.testing.assert_allclose(f, [1.0, 0.1, 0.01, 0.001], rtol=1e-15)   # 10000**(-2i/8)
    c, s = rope_cos_sin_golden(8192, 64)
    assert c.shape == s.shape == (8192, 32) and c.dtype == np.float64
    np.testing.assert_array_equal(c[0], 1.0)
    np.testing.assert_array_equal(s[0], 0.0)
    np.testing.assert_allclose(c ** 2 + s ** 2, 1.0, atol=1e-15)
    m = 8191
    np.testing.assert_allclose(s[m], [math.sin(m * 10000.0 ** (-2 * i / 64)) for i in range(32)],
                               rtol=1e-12, atol=1e-12)
    for bad in (0, 7, -2):
        with pytest.raises(ValueError):
            rope_inv_freq(bad)
    with pytest.raises(ValueError, match="base"):
        rope_inv_freq(8, 1.0)
    with pytest.raises(ValueError, match="max_position"):
        rope_cos_sin_golden(0, 8)


def _complex_rope(x, pos, rd, interleaved):
    """RoPE as a complex multiplication (RoFormer eq. 12): pair (a, b) -> (a + ib) e^{i m t}."""
    out = x.astype(np.float64).copy()
    half = rd // 2
    th = 10000.0 ** (-np.arange(half) * 2.0 / rd)
    for t in range(x.shape[0]):
        rot = np.exp(1j * pos[t] * th)
        for h in range(x.shape[1]):
            v = out[t, h]
            a, b = (v[0:rd:2], v[1:rd:2]) if interleaved else (v[:half], v[half:rd])
            z = (a + 1j * b) * rot
            if interleaved:
                v[0:rd:2], v[1:rd:2] = z.real, z.imag
            else:
                v[:half], v[half:rd] = z.real, z.imag
    return out


def _rotate_half_rope(x, pos, rd):
    """Hugging Face LLaMA's form: x * cos + rotate_half(x) * sin, cos/sin duplicated halves."""
    x = x.astype(np.float64)
    half = rd // 2
    th = 10000.0 ** (-np.arange(half) * 2.0 / rd)
    ang = np.concatenate([np.outer(pos, th)] * 2, axis=1)[:, None, :]
    xr = x[..., :rd]
    rh = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    return np.concatenate([xr * np.cos(ang) + rh * np.sin(ang), x[..., rd:]], axis=-1)


@pytest.mark.parametrize("rd", [64, 16])
def test_rope_both_layouts_against_two_other_formulations(rd):
    x = _normal((4, 3, 64), 3, BF16)
    pos = np.array([0, 1, 4097, 8191])
    neox = rope_golden(x, pos, rd, "neox")
    gptj = rope_golden(x, pos, rd, "gptj")
    np.testing.assert_allclose(neox, _complex_rope(x, pos, rd, False), rtol=0, atol=1e-12)
    np.testing.assert_allclose(neox, _rotate_half_rope(x, pos, rd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(gptj, _complex_rope(x, pos, rd, True), rtol=0, atol=1e-12)
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(neox[..., rd:], x64[..., rd:])       # partial: passes through
    np.testing.assert_array_equal(neox[0], x64[0])                     # position 0: identity
    assert np.abs(neox - gptj)[1:, :, :rd].max() > 0.1                 # the layouts differ
    np.testing.assert_allclose(np.linalg.norm(neox, axis=-1), np.linalg.norm(x64, axis=-1),
                               rtol=1e-13)                             # a rotation


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_rope_scores_depend_on_the_relative_position_only(layout):
    """<RoPE(q, m), RoPE(k, n)> is a function of m - n (RoFormer §3.4.1, eq. 16)."""
    q, k = _normal((1, 1, 32), 4), _normal((1, 1, 32), 5)
    rope = lambda v, m: rope_golden(v, np.array([m]), None, layout)[0, 0]   # noqa: E731
    dots = [rope(q, m + 5) @ rope(k, m) for m in (0, 100, 8000)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-9)


def test_rope_qkv_rotates_q_and_k_and_leaves_v():
    hq, hkv, d, rd = 4, 2, 16, 8
    qkv = _normal((3, (hq + 2 * hkv) * d), 6, BF16)
    pos = np.array([5, 0, 8191])
    out = rope_qkv_golden(qkv, pos, hq, hkv, d, rd, "gptj")
    heads = qkv.astype(np.float64).reshape(3, hq + 2 * hkv, d)
    np.testing.assert_array_equal(out.reshape(3, -1, d)[:, :hq + hkv],
                                  rope_golden(heads[:, :hq + hkv], pos, rd, "gptj"))
    np.testing.assert_array_equal(out.reshape(3, -1, d)[:, hq + hkv:], heads[:, hq + hkv:])
    with pytest.raises(ValueError, match="shape"):
        rope_qkv_golden(qkv[:, :-1], pos, hq, hkv, d, rd)


def test_rope_errors():
    x = _normal((2, 1, 8), 7)
    with pytest.raises(ValueError, match="layout"):
        rope_golden(x, np.array([0, 1]), layout="llama")
    with pytest.raises(ValueError, match="even"):
        rope_golden(x, np.array([0, 1]), 5)
    with pytest.raises(ValueError, match="exceeds"):
        rope_golden(x, np.array([0, 1]), 10)
    with pytest.raises(ValueError, match=">= 0"):
        rope_golden(x, np.array([0, -1]))
    with pytest.raises(TypeError, match="integers"):
        rope_golden(x, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        rope_golden(x, np.array([0, 1, 2]))


# ------------------------------------------------------------------------------ SwiGLU

def test_swiglu_element_by_element():
    g, u = _normal((3, 11), 8, BF16), _normal((3, 11), 9, BF16)
    want = np.array([[float(a) / (1.0 + math.exp(-float(a))) * float(b) for a, b in zip(ga, ua)]
                     for ga, ua in zip(g, u)])
    np.testing.assert_allclose(swiglu_golden(g, u), want, rtol=1e-15)
    gu = np.concatenate([g, u], axis=1)                       # the fused [gate | up] form
    np.testing.assert_array_equal(swiglu_golden(gu), swiglu_golden(g, u))
    s = silu_golden(np.array([-800.0, 0.0, 800.0]))             # exp overflows: the limits
    assert s[0] == 0.0 and s[1] == 0.0 and s[2] == 800.0
    with pytest.raises(ValueError, match="even"):
        swiglu_golden(gu[:, 1:])
    with pytest.raises(ValueError, match="same shape"):
        swiglu_golden(g, u[:, 1:])
