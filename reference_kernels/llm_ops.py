"""The element-wise and row-wise operators of an LLM decoder: golden references (numpy, float64).

* **Fused add + RMSNorm** (the pre-norm residual stream of LLaMA-style decoders)::

      h   = x + residual                      # the updated residual stream
      out = h / sqrt(mean(h**2) + eps) * weight

  :func:`fused_add_rmsnorm_golden` returns ``(out, h)``; the RMSNorm is
  :func:`reference_kernels.norms.rmsnorm_golden` (Zhang & Sennrich 2019, eq. 4).
* **RoPE** (Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding",
  arXiv:2104.09864, §3.4, eq. 34): for a position ``m`` and the frequencies
  ``theta_i = base**(-2i / rotary_dim)``, ``i = 0 .. rotary_dim/2 - 1``, each pair of a head's
  first ``rotary_dim`` features is rotated by the angle ``m * theta_i``::

      out_a = x_a cos(m theta_i) - x_b sin(m theta_i)
      out_b = x_b cos(m theta_i) + x_a sin(m theta_i)

  The two conventions differ only in which features form pair ``i``:

  - ``"neox"`` (GPT-NeoX's ``rotate_half``; Hugging Face LLaMA, vLLM ``is_neox_style=True``):
    ``a = i``, ``b = i + rotary_dim/2`` (the two halves);
  - ``"gptj"`` (GPT-J's ``rotate_every_two``, RoFormer's own eq. 34; vLLM
    ``is_neox_style=False``): ``a = 2i``, ``b = 2i + 1`` (interleaved pairs).

  Partial rotary (GPT-NeoX ``rotary_pct``, GPT-J ``rotary_dim``): only the first ``rotary_dim``
  features of a head rotate, features ``rotary_dim .. head_dim - 1`` pass through unchanged.
  ``base`` 10000 (RoFormer §3.4). Angles and their cos/sin are float64 here
  (:func:`rope_cos_sin_golden`); a position times a frequency is exact to about 2**-53
  relative, so even at position 8192 the angle is within ~1e-12 rad.
* **SwiGLU** (Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202, 2020, eq. 6 with
  ``Swish_1 = SiLU``): ``out = silu(gate) * up``, ``silu(g) = g / (1 + exp(-g))``.

Every input of any float dtype (bfloat16 through the casts ``ml_dtypes`` registers with numpy)
is widened exactly to float64 first, so a reference sees the rounded values the kernel saw.
This module imports numpy only, like all of reference_kernels.
"""

from __future__ import annotations

import math

import numpy as np

from reference_kernels.norms import _widen, rmsnorm_golden

__all__ = ["fused_add_rmsnorm_golden", "fused_add_rmsnorm_backward_golden", "rope_inv_freq",
           "rope_cos_sin_golden", "rope_golden",
           "rope_qkv_golden", "rope_pairs", "swiglu_golden", "silu_golden", "ROPE_LAYOUTS",
           "ROPE_BASE", "MAX_POSITIONS"]

#: the pairings of :func:`rope_golden` (module docstring)
ROPE_LAYOUTS = ("neox", "gptj")
#: RoFormer's base (Su et al. 2021, §3.4)
ROPE_BASE = 10000.0
#: the default cache length (LLaMA-2-class context windows are 4096, many models 8192)
MAX_POSITIONS = 8192


def fused_add_rmsnorm_golden(x, residual, weight=None, eps: float = 1e-6):
    """``(out, h)``: ``h = x + residual`` and ``out = rmsnorm(h) * weight``, float64.

    ``x``, ``residual``: (..., N) float arrays of one shape; ``weight``: (N,) or None;
    ``eps`` finite > 0. Raises ValueError for shapes that differ, and whatever
    :func:`reference_kernels.norms.rmsnorm_golden` raises (non-float dtypes, an empty row, a
    bad eps or weight)."""
    x64 = _widen(x, "x")
    r64 = _widen(residual, "residual")
    if x64.shape != r64.shape:
        raise ValueError(f"x {x64.shape} and residual {r64.shape} must have the same shape")
    h = x64 + r64
    return rmsnorm_golden(h, weight, eps), h


def fused_add_rmsnorm_backward_golden(x, residual, weight, grad_out, grad_h,
                                      eps: float = 1e-6):
    """``(dx, dresidual, dweight)`` of :func:`fused_add_rmsnorm_golden`'s ``(out, h)`` for the
    upstream gradients ``grad_out`` and ``grad_h`` (shape of x; ``grad_h`` None: zero),
    float64. With ``rstd = 1 / sqrt(mean(h**2) + eps)``, ``n = h rstd`` and ``g = grad_out
    weight`` (the chain rule through eq. 4 of Zhang & Sennrich 2019)::

        dh        = rstd (g - n mean(g n)) + grad_h       # per row, mean over the N features
        dx        = dresidual = dh                        # h = x + residual
        dweight   = sum over rows of grad_out n

    ``x``, ``residual``, ``grad_out``, ``grad_h``: (R, N) float arrays; ``weight`` (N,).
    Raises what :func:`fused_add_rmsnorm_golden` raises, and ValueError for a gradient of
    another shape."""
    _, h = fused_add_rmsnorm_golden(x, residual, weight, eps)
    w = _widen(weight, "weight")
    gy = _widen(grad_out, "grad_out")
    gh = np.zeros_like(h) if grad_h is None else _widen(grad_h, "grad_h")
    if gy.shape != h.shape or gh.shape != h.shape:
        raise ValueError(f"gradients {gy.shape}, {gh.shape} must have h's shape {h.shape}")
    _, rstd = rmsnorm_golden(h, None, eps, return_rstd=True)
    n = h * rstd[..., None]
    g = gy * w
    dh = rstd[..., None] * (g - n * np.mean(g * n, axis=-1, keepdims=True)) + gh
    dw = np.sum((gy * n).reshape(-1, h.shape[-1]), axis=0)
    return dh, dh.copy(), dw


def _check_rotary(rotary_dim, head_dim=None) -> int:
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer)):
        raise TypeError(f"rotary_dim must be an int, got {type(rotary_dim).__name__}")
    rd = int(rotary_dim)
    if rd < 2 or rd % 2:
        raise ValueError(f"rotary_dim must be even and >= 2, got {rd}")
    if head_dim is not None and rd > head_dim:
        raise ValueError(f"rotary_dim {rd} exceeds the head dimension {head_dim}")
    return rd


def _check_base(base) -> float:
    b = float(base)
    if not (math.isfinite(b) and b > 1.0):
        raise ValueError(f"base must be finite and > 1, got {base!r}")
    return b


def rope_inv_freq(rotary_dim: int, base: float = ROPE_BASE) -> np.ndarray:
    """The frequencies ``theta_i = base**(-2i / rotary_dim)``, i < rotary_dim/2, float64
    (RoFormer §3.4). Raises TypeError / ValueError for a rotary_dim that is not an even int
    >= 2, or a base that is not finite and > 1."""
    rd = _check_rotary(rotary_dim)
    b = _check_base(base)
    return b ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)


def rope_cos_sin_golden(max_position: int = MAX_POSITIONS, rotary_dim: int = 128,
                        base: float = ROPE_BASE) -> tuple[np.ndarray, np.ndarray]:
    """The cos/sin cache: ``(cos, sin)``, each (max_position, rotary_dim/2) float64, row ``m``
    holding ``cos(m theta_i)``, ``sin(m theta_i)`` of float64 angles. Raises ValueError for
    max_position < 1 and as :func:`rope_inv_freq`."""
    if isinstance(max_position, bool) or not isinstance(max_position, (int, np.integer)) \
            or max_position < 1:
        raise ValueError(f"max_position must be an int >= 1, got {max_position!r}")
    ang = np.outer(np.arange(int(max_position), dtype=np.float64), rope_inv_freq(rotary_dim, base))
    return np.cos(ang), np.sin(ang)


def rope_pairs(rotary_dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices (a, b) of each pair i < rotary_dim/2 of features (module docstring), int arrays.
    Raises ValueError for an unknown layout."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
    half = rotary_dim // 2
    i = np.arange(half)
    return (i, i + half) if layout == "neox" else (2 * i, 2 * i + 1)


def _positions(positions, T: int) -> np.ndarray:
    p = np.asarray(positions)
    if p.dtype.kind not in "iu":
        raise TypeError(f"positions must be integers, got {p.dtype}")
    if p.shape != (T,):
        raise ValueError(f"positions must have shape ({T},) (one per token), got {p.shape}")
    if T and p.min() < 0:
        raise ValueError("positions must be >= 0")
    return p.astype(np.int64)


def rope_golden(x, positions, rotary_dim: int | None = None, layout: str = "neox",
                base: float = ROPE_BASE) -> np.ndarray:
    """RoPE of ``x`` (T, H, head_dim) at ``positions`` (T,) ints >= 0, float64 (module
    docstring). ``rotary_dim`` (default head_dim): the rotated features, even, <= head_dim; the
    rest pass through. ``layout``: ``"neox"`` or ``"gptj"``. Angles ``m * theta_i`` in
    float64. Raises TypeError for non-float x or non-integer positions, ValueError for bad
    shapes, layout, rotary_dim or base."""
    x64 = _widen(x, "x")
    if x64.ndim != 3:
        raise ValueError(f"x must have shape (T, H, head_dim), got {x64.shape}")
    T, _, d = x64.shape
    rd = _check_rotary(d if rotary_dim is None else rotary_dim, d)
    pos = _positions(positions, T)
    a, b = rope_pairs(rd, layout)
    ang = np.outer(pos.astype(np.float64), rope_inv_freq(rd, base))[:, None, :]  # (T, 1, rd/2)
    c, s = np.cos(ang), np.sin(ang)
    out = x64.copy()
    xa, xb = x64[..., a], x64[..., b]
    out[..., a] = xa * c - xb * s
    out[..., b] = xb * c + xa * s
    return out


def rope_qkv_golden(qkv, positions, num_q_heads: int, num_kv_heads: int, head_dim: int,
                    rotary_dim: int | None = None, layout: str = "neox",
                    base: float = ROPE_BASE) -> np.ndarray:
    """RoPE applied to the Q and K heads of a fused QKV projection output ``qkv``
    (T, (num_q_heads + 2 num_kv_heads) * head_dim), laid out ``[Q heads | K heads | V heads]``
    (grouped-query attention: Ainslie et al. 2023); V is returned unchanged (widened). float64,
    shape of qkv. Raises ValueError for a width that does not match, and as
    :func:`rope_golden`."""
    q64 = _widen(qkv, "qkv")
    hq, hkv, d = int(num_q_heads), int(num_kv_heads), int(head_dim)
    if hq < 1 or hkv < 1 or d < 1:
        raise ValueError(f"need num_q_heads, num_kv_heads, head_dim >= 1, got {hq}, {hkv}, {d}")
    if q64.ndim != 2 or q64.shape[1] != (hq + 2 * hkv) * d:
        raise ValueError(f"qkv must have shape (T, {(hq + 2 * hkv) * d}), got {q64.shape}")
    T = q64.shape[0]
    nrot = (hq + hkv) * d
    out = q64.copy()
    out[:, :nrot] = rope_golden(q64[:, :nrot].reshape(T, hq + hkv, d), positions, rotary_dim,
                                layout, base).reshape(T, nrot)
    return out


def silu_golden(gate) -> np.ndarray:
    """``silu(g) = g / (1 + exp(-g))`` in float64 (``exp`` overflowing to inf gives -0.0 for
    very negative g, the limit)."""
    g = _widen(gate, "gate")
    with np.errstate(over="ignore"):
        return g / (1.0 + np.exp(-g))


def swiglu_golden(gate, up=None) -> np.ndarray:
    """``silu(gate) * up`` in float64 (Shazeer 2020, eq. 6). Two arrays of one shape, or, with
    ``up=None``, one array (..., 2F) holding ``[gate | up]`` on its last axis (the fused
    gate/up projection's output). Raises ValueError for shapes that do not match or an odd last
    axis, TypeError for non-float inputs."""
    if up is None:
        gu = _widen(gate, "gate_up")
        if gu.shape[-1] % 2:
            raise ValueError(f"gate_up's last axis must be even ([gate | up]), got {gu.shape}")
        F = gu.shape[-1] // 2
        return silu_golden(gu[..., :F]) * gu[..., F:]
    g, u = _widen(gate, "gate"), _widen(up, "up")
    if g.shape != u.shape:
        raise ValueError(f"gate {g.shape} and up {u.shape} must have the same shape")
    return silu_golden(g) * u
