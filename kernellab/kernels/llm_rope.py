"""Chapter 8: rotary position embedding (RoPE) in BF16, applied in place to the Q and K heads of
a fused QKV projection output, one launch for both (the form of vLLM's ``rotary_embedding``
kernel, ``csrc/pos_encoding_kernels.cu``; fusing it further, into the QKV GEMM's epilogue or the
KV-cache write, would save that launch too).

What it computes (Su et al., "RoFormer", arXiv:2104.09864, §3.4; golden reference:
:func:`reference_kernels.llm_ops.rope_qkv_golden`): token ``t`` at position ``m = positions[t]``;
every Q and K head's pair ``i < rotary_dim/2`` of features ``(a, b)`` is rotated by the angle
``m theta_i``, ``theta_i = base**(-2i/rotary_dim)``::

    out_a = bf16(x_a cos - x_b sin),   out_b = bf16(x_b cos + x_a sin)        (float32)

    layout "neox": a = i, b = i + rotary_dim/2 (GPT-NeoX's rotate_half, HF LLaMA)
    layout "gptj": a = 2i, b = 2i + 1          (GPT-J's rotate_every_two, RoFormer eq. 34)

Features ``rotary_dim .. head_dim - 1`` of a head (partial rotary: GPT-NeoX ``rotary_pct``) and
the V heads are neither read nor written.

The kernel (one version; it is a gather of cos/sin and four loads and stores a pair)::

    v1_fused_qk  one block per token; thread k of the block handles pairs k, k + T, ... of the
                 token's (Hq + Hkv) * rotary_dim/2 pairs: head k // (rotary_dim/2), pair
                 k % (rotary_dim/2); cos and sin from the float32 cache row ``positions[t]``
                 (:func:`rope_cos_sin_cache`: (max_position, rotary_dim), ``[cos | sin]``, as
                 vLLM's ``cos_sin_cache``), then the rotation in float32 and one bf16 rounding
                 per stored value.

Angles: the cache is built from float64 angles (``m * theta_i`` exact to ~1e-12 rad at
m = 8192) and rounded once to float32. Computing the angle itself in a low precision is what
loses it at long positions: :func:`rope_angle_error` measures float32 (``|error| ~ u32 m``:
~5e-4 rad at 8192) against BF16 (the position and the product rounded to bf16: integers above
256 are not representable, and at m ~ 8000 one bf16 ulp of the angle is 32 rad).

Harness: ``qkv`` (T, (Hq + 2 Hkv) * head_dim) BF16 (``ml_dtypes.bfloat16`` or uint16 bits),
rows may be strided (:func:`kernellab.kernels.llm_ops.rows_arg`), updated in place;
``positions`` (T,) int32/int64, each in [0, max_position) (checked for numpy arrays);
``cos_sin`` (max_position, rotary_dim) float32. Raises TypeError / ValueError for wrong types,
shapes, dtypes, a layout that is not "neox"/"gptj", an odd rotary_dim or one above head_dim,
a position out of range.
"""

from __future__ import annotations

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda

from kernellab.bf16 import BF16, narrow, widen
from kernellab.kernels._cuda_args import is_device_array
from kernellab.kernels.llm_ops import as_bf16, rows_arg
from kernellab.numerics import Explicit, finfo, unit_roundoff
from reference_kernels.llm_ops import (MAX_POSITIONS, ROPE_BASE, ROPE_LAYOUTS, rope_cos_sin_golden,
                                       rope_inv_freq)

__all__ = ["rope_qkv", "rope_cos_sin_cache", "rope_angle_error", "rope_tolerance", "KERNELS",
           "MAX_TPB"]

#: the largest block (pairs beyond it loop)
MAX_TPB = 256


@cuda.jit
def _rope_qk_kernel(QKV, ld, Pos, CS, n_heads, head_dim, half, neox):
    """One block per token: rotate the first ``n_heads`` (= Hq + Hkv) heads of row t in place."""
    t = cuda.blockIdx.x
    p = Pos[t]
    row = t * ld
    for k in range(cuda.threadIdx.x, n_heads * half, cuda.blockDim.x):
        hd = k // half
        i = k - hd * half
        if neox:
            a = row + hd * head_dim + i
            b = a + half
        else:
            a = row + hd * head_dim + 2 * i
            b = a + 1
        c = CS[p, i]
        s = CS[p, half + i]
        xa = widen(QKV[a])
        xb = widen(QKV[b])
        QKV[a] = narrow(xa * c - xb * s)
        QKV[b] = narrow(xb * c + xa * s)


#: version name -> its kernels
KERNELS = {"v1_fused_qk": (_rope_qk_kernel,)}


def rope_cos_sin_cache(max_position: int = MAX_POSITIONS, rotary_dim: int = 128,
                       base: float = ROPE_BASE) -> np.ndarray:
    """The kernel's cache: (max_position, rotary_dim) float32, row m ``[cos(m theta_i) |
    sin(m theta_i)]`` for i < rotary_dim/2, from float64 angles rounded once to float32
    (:func:`reference_kernels.llm_ops.rope_cos_sin_golden`). Raises as that function."""
    c, s = rope_cos_sin_golden(max_position, rotary_dim, base)
    return np.concatenate([c, s], axis=1).astype(np.float32)


def _ints(name, v, lo=1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def _rope_args(qkv, positions, cos_sin, num_q_heads, num_kv_heads, head_dim, layout, threads):
    hq, hkv = _ints("num_q_heads", num_q_heads), _ints("num_kv_heads", num_kv_heads)
    d = _ints("head_dim", head_dim, 2)
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
    q = rows_arg("qkv", qkv, writable=True)
    T, width = q.shape
    if width != (hq + 2 * hkv) * d:
        raise ValueError(f"qkv has {width} columns, expected (num_q_heads + 2 num_kv_heads) * "
                         f"head_dim = {(hq + 2 * hkv) * d}")
    if not (isinstance(cos_sin, np.ndarray) or is_device_array(cos_sin)):
        raise TypeError(f"cos_sin must be a numpy or device array, got {type(cos_sin).__name__}")
    if len(cos_sin.shape) != 2 or np.dtype(cos_sin.dtype) != np.float32:
        raise ValueError(f"cos_sin must be (max_position, rotary_dim) float32, got "
                         f"{tuple(cos_sin.shape)} {np.dtype(cos_sin.dtype).name}")
    P, rd = (int(s) for s in cos_sin.shape)
    if rd < 2 or rd % 2 or rd > d:
        raise ValueError(f"rotary_dim = cos_sin.shape[1] = {rd} must be even, >= 2 and <= "
                         f"head_dim {d}")
    if not (isinstance(positions, np.ndarray) or is_device_array(positions)):
        raise TypeError(f"positions must be a numpy or device array, got "
                        f"{type(positions).__name__}")
    if np.dtype(positions.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"positions must be int32 or int64, got {np.dtype(positions.dtype)}")
    if tuple(positions.shape) != (T,):
        raise ValueError(f"positions must have shape ({T},), got {tuple(positions.shape)}")
    if isinstance(positions, np.ndarray) and T and (positions.min() < 0 or positions.max() >= P):
        raise ValueError(f"positions must lie in [0, {P}) (the cache's rows), got "
                         f"[{positions.min()}, {positions.max()}]")
    half = rd // 2
    work = (hq + hkv) * half
    if threads is None:
        threads = min(MAX_TPB, -(-work // 32) * 32)
    elif isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or \
            threads < 32 or threads > 1024 or threads % 32:
        raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {threads!r}")
    return q, hq + hkv, d, half, int(threads)


def rope_qkv(qkv, positions, cos_sin, num_q_heads: int, num_kv_heads: int, head_dim: int,
             layout: str = "neox", *, threads: int | None = None) -> None:
    """RoPE on the Q and K heads of ``qkv`` in place (module docstring); ``rotary_dim`` is
    ``cos_sin.shape[1]`` (<= head_dim: the rest of each head passes through), V untouched.
    ``threads``: block size (default: the token's pairs rounded up to a warp, at most
    :data:`MAX_TPB`). Returns None; numpy ``qkv`` is copied back, device arrays stay."""
    q, nh, d, half, T_blk = _rope_args(qkv, positions, cos_sin, num_q_heads, num_kv_heads,
                                       head_dim, layout, threads)
    T = q.shape[0]
    if T == 0:
        return None
    pos = positions if is_device_array(positions) else cuda.to_device(positions)
    cs = cos_sin if is_device_array(cos_sin) else cuda.to_device(np.ascontiguousarray(cos_sin))
    _rope_qk_kernel[T, T_blk](q.dev, q.ld, pos, cs, nh, d, half, 1 if layout == "neox" else 0)
    q.copy_back()
    return None


def rope_tolerance(qkv, positions, num_q_heads: int, num_kv_heads: int, head_dim: int,
                   rotary_dim: int, layout: str = "neox") -> Explicit:
    """Bound on |kernel - rope_qkv_golden| per element of qkv: a rotated feature
    ``2 u_bf16 |ref| + 4 u32 (|x_a| + |x_b|)`` (cos/sin rounded to float32, two products and
    the add or subtract: 1 u32 each of at most ``|x_a| + |x_b|``; the store faithful) plus
    half the smallest bf16 subnormal; 0 elsewhere (pass-through features and V are unchanged,
    bit for bit)."""
    from reference_kernels.llm_ops import rope_pairs, rope_qkv_golden

    qkv = as_bf16(qkv)
    x = qkv.astype(np.float64)
    ref = rope_qkv_golden(qkv, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim,
                          layout)
    T = x.shape[0]
    nh = num_q_heads + num_kv_heads
    xh = x[:, :nh * head_dim].reshape(T, nh, head_dim)
    rh = ref[:, :nh * head_dim].reshape(T, nh, head_dim)
    a, b = rope_pairs(rotary_dim, layout)
    pair = np.abs(xh[..., a]) + np.abs(xh[..., b])
    u32, ub = unit_roundoff(np.float32), unit_roundoff(BF16)
    floor = 0.5 * float(finfo(BF16).smallest_subnormal)
    bh = np.zeros_like(xh)
    bh[..., a] = 2 * ub * np.abs(rh[..., a]) + 4 * u32 * pair + floor
    bh[..., b] = 2 * ub * np.abs(rh[..., b]) + 4 * u32 * pair + floor
    bound = np.zeros_like(x)
    bound[:, :nh * head_dim] = bh.reshape(T, nh * head_dim)
    return Explicit(bound, "rope: |err| <= 2u_bf16|ref| + 4u_fp32(|x_a|+|x_b|) on rotated "
                           "features, 0 (bit-exact) on the others and on V")


def rope_angle_error(positions, rotary_dim: int = 128, base: float = ROPE_BASE,
                     dtypes=("float32", "bfloat16")) -> dict:
    """The error of computing RoPE's angles ``m * theta_i`` in a low precision, per position.

    For each dtype: the position and the frequencies rounded to it, their product computed in
    float32 and rounded to it (what ``positions.to(dtype) * inv_freq.to(dtype)`` computes in
    PyTorch); against float64 angles. Returns ``{dtype: {"angle": (P,), "cos_sin": (P,)}}``:
    the max over the frequencies of |angle - exact| (radians) and of the resulting
    |cos - exact cos| and |sin - exact sin| (the rotation's error per unit of |x|), as float64
    arrays aligned with ``positions``. Raises ValueError for negative positions or an unknown
    dtype, and as :func:`reference_kernels.llm_ops.rope_inv_freq`."""
    from kernellab.numerics import _BF16

    pos = np.asarray(positions, dtype=np.int64)
    if pos.ndim != 1 or (pos.size and pos.min() < 0):
        raise ValueError("positions must be a 1-D array of ints >= 0")
    f64 = rope_inv_freq(rotary_dim, base)
    exact = np.outer(pos.astype(np.float64), f64)
    out = {}
    for name in dtypes:
        if name not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, got {name!r}")
        dt = _BF16 if name == "bfloat16" else np.dtype(name)
        with np.errstate(over="ignore"):
            p = pos.astype(dt).astype(np.float32)
            f = f64.astype(dt).astype(np.float32)
            ang = np.outer(p, f).astype(dt).astype(np.float64)
        err = np.abs(ang - exact)
        cs = np.maximum(np.abs(np.cos(ang) - np.cos(exact)), np.abs(np.sin(ang) - np.sin(exact)))
        out[name] = {"angle": err.max(axis=1), "cos_sin": cs.max(axis=1)}
    return out
