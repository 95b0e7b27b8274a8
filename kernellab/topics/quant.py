"""Chapter 6's library: affine INT8 quantisation, integer GEMM and integer-only requantisation.

Affine quantisation (Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018, arXiv:1712.05877, §2.1, eq. (1); gemmlowp
``doc/quantization.md``, https://github.com/google/gemmlowp): a real value r is stored as an
integer q with a real scale S > 0 and an integer zero point Z that represents real 0 exactly, r = S
(q - Z).

* **symmetric**: Z = 0 on the narrow int8 range [-127, 127], S = max|x| / 127 — the course's
  rule of :mod:`reference_kernels.quant` (``rint`` of a float32 ``x / S``, half to even),
  which this module calls rather than repeats;
* **asymmetric**: the calibrated range [lo, hi] (widened to contain 0) is mapped onto
  [qmin, qmax] (uint8 [0, 255] or int8 [-128, 127]): S = (hi - lo) / (qmax - qmin),
  Z = qmin - rint(lo / S), clipped to [qmin, qmax];
* **granularity**: per-tensor (one S, Z), per-channel (weights W (N_out, K): one per output
  channel, a row) and per-token (activations X (M, K): one per row). Both factor out of the
  GEMM's sum over K; a per-*input*-channel activation scale does not (which is why SmoothQuant
  exists: :mod:`kernellab.topics.quant_study`);
* **calibration**: min-max, or percentile (clip the range at the p-th percentile of |x|, or of
  x at p and 100 - p; Wu, Judd, Zhang, Isaev & Micikevicius, "Integer Quantization for Deep
  Learning Inference: Principles and Empirical Evaluation", arXiv:2004.09602, §4.1).

Integer GEMM: int8 x int8 products summed exactly in int32 (:func:`int32_safe_k` says up to
which K that cannot overflow); the zero points' cross terms are separate, precomputable sums
(Jacob et al. §2.3, eq. (7)-(8)): :func:`cross_terms`, :func:`affine_int_gemm`.

Requantisation (Jacob et al. §2.2; gemmlowp ``fixedpoint/fixedpoint.h`` and ``doc/output.md``,
https://github.com/google/gemmlowp; TFLite ``QuantizeMultiplier`` /
``MultiplyByQuantizedMultiplier``): the int32 accumulator (plus an int32 bias at scale S_a S_w) is
multiplied by the real number M = S_a S_w / S_out, held as a Q31 int32 mantissa M0 in [2^30, 2^31)
and a power-of-two shift (:func:`quantize_multiplier`), with a *saturating rounding doubling high
multiply* (:func:`srdhm`) and a *rounding right shift* (:func:`rounding_divide_by_pot`); then the
output zero point is added and the result clamped. Everything here is exact integer arithmetic in
numpy int64 on values that fit int32, so it does what int32 hardware does, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference_kernels.quant import quantize_symmetric, symmetric_scale

__all__ = ["QRANGES", "CALIBRATION_PERCENTILES", "QTensor", "calibrate", "quantize",
           "dequantize", "int32_safe_k",
           "int_gemm_exact", "cross_terms", "affine_int_gemm", "quantize_multiplier", "srdhm",
           "rounding_divide_by_pot", "multiply_by_quantized_multiplier", "quantize_bias",
           "requantize", "requantize_float", "cosine_similarity", "INT32_MIN", "INT32_MAX"]

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1

#: percentiles for percentile calibration, as in Wu et al. (arXiv:2004.09602) §4.1
#: (99.9, 99.99, 99.999 and 99.9999 were studied there)
CALIBRATION_PERCENTILES = (99.9, 99.99, 99.999)

#: integer ranges (qmin, qmax, numpy dtype): narrow symmetric int8, full int8, uint8
QRANGES = {"int8_narrow": (-127, 127, np.int8), "int8": (-128, 127, np.int8),
           "uint8": (0, 255, np.uint8)}


# ----------------------------------------------------------------------------------------------
# Quantise / dequantise
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QTensor:
    """A quantised tensor: ``q`` (int8 or uint8, the input's shape), ``scale`` (float32) and
    ``zero_point`` (int32), both of shape () for per-tensor or (rows, 1) for per-channel /
    per-token, broadcastable against ``q``; ``qmin``, ``qmax`` the integer range."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    qmin: int
    qmax: int

    def dequantize(self) -> np.ndarray:
        """S (q - Z) in float64, the input's shape."""
        return dequantize(self.q, self.scale, self.zero_point)


def _ranges(x: np.ndarray, granularity: str, calibration: str, percentile: float,
            symmetric: bool):
    """(lo, hi) of the calibrated range, float32, of shape () or (rows, 1)."""
    if granularity == "tensor":
        axis, keep = None, False
    elif granularity in ("channel", "token"):
        if x.ndim != 2:
            raise ValueError(f"per-{granularity} scales need a 2-D array (rows, K), "
                             f"got shape {x.shape}")
        axis, keep = 1, True
    else:
        raise ValueError(f"granularity must be 'tensor', 'channel' or 'token', got {granularity!r}")
    if x.size == 0:
        z = np.zeros((x.shape[0], 1) if keep else (), np.float32)
        return z, z
    if calibration == "minmax":
        if symmetric:
            hi = np.abs(x).max(axis=axis, keepdims=keep)
            return -hi, hi
        return x.min(axis=axis, keepdims=keep), x.max(axis=axis, keepdims=keep)
    if calibration == "percentile":
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        if symmetric:
            hi = np.percentile(np.abs(x), percentile, axis=axis, keepdims=keep)
            return -hi, hi
        return (np.percentile(x, 100 - percentile, axis=axis, keepdims=keep),
                np.percentile(x, percentile, axis=axis, keepdims=keep))
    raise ValueError(f"calibration must be 'minmax' or 'percentile', got {calibration!r}")


def calibrate(x: np.ndarray, *, granularity: str = "tensor", scheme: str = "symmetric",
              calibration: str = "minmax", percentile: float = 99.99,
              dtype: str = "int8") -> tuple[np.ndarray, np.ndarray, int, int]:
    """Scale and zero point for ``x`` (float32 array; 2-D for per-channel / per-token).

    ``granularity``: ``"tensor"`` (one S, Z), ``"channel"`` (W (N_out, K): one per output
    channel = row) or ``"token"`` (X (M, K): one per row). ``scheme``: ``"symmetric"`` (Z = 0,
    range [-127, 127], S = max|x| / 127, S = 1 for an all-zero group:
    :func:`reference_kernels.quant.symmetric_scale`) or ``"asymmetric"`` (``dtype`` ``"uint8"``
    [0, 255] or ``"int8"`` [-128, 127]; see the module docstring; lo is raised to at most 0 and
    hi lowered to at least 0 so that real 0 is exact, Jacob et al. §2.1). ``calibration``:
    ``"minmax"`` or ``"percentile"`` (at ``percentile``, e.g. 99.99).

    Returns (scale float32, zero_point int32, qmin, qmax); scale and zero point have shape ()
    or (rows, 1). Raises ValueError for an unknown option or a bad shape.
    """
    x = np.asarray(x, np.float32)
    if scheme == "symmetric":
        qmin, qmax, _ = QRANGES["int8_narrow"]
        _, hi = _ranges(x, granularity, calibration, percentile, True)
        s = symmetric_scale(np.asarray(hi, np.float32))
        return s, np.zeros(s.shape, np.int32), qmin, qmax
    if scheme != "asymmetric":
        raise ValueError(f"scheme must be 'symmetric' or 'asymmetric', got {scheme!r}")
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"asymmetric dtype must be 'int8' or 'uint8', got {dtype!r}")
    qmin, qmax, _ = QRANGES[dtype]
    lo, hi = _ranges(x, granularity, calibration, percentile, False)
    lo = np.minimum(np.asarray(lo, np.float32), np.float32(0))
    hi = np.maximum(np.asarray(hi, np.float32), np.float32(0))
    width = hi - lo
    s = np.where(width > 0, width / np.float32(qmax - qmin), np.float32(1)).astype(np.float32)
    z = np.clip(qmin - np.rint(lo / s), qmin, qmax).astype(np.int32)
    return s, z, qmin, qmax


def quantize(x: np.ndarray, *, granularity: str = "tensor", scheme: str = "symmetric",
             calibration: str = "minmax", percentile: float = 99.99,
             dtype: str = "int8") -> QTensor:
    """Calibrate (:func:`calibrate`, same options) and quantise ``x`` (float32):
    q = clip(rint(x / S) + Z, qmin, qmax), ``x / S`` one float32 division and ``rint`` half to
    even (the symmetric case *is* :func:`reference_kernels.quant.quantize_symmetric`). Returns a
    :class:`QTensor` (q int8, or uint8 for asymmetric ``dtype="uint8"``)."""
    x = np.asarray(x, np.float32)
    s, z, qmin, qmax = calibrate(x, granularity=granularity, scheme=scheme,
                                 calibration=calibration, percentile=percentile, dtype=dtype)
    if scheme == "symmetric":
        q = quantize_symmetric(x, s)
    else:
        out_dtype = QRANGES[dtype][2]
        q = np.clip(np.rint(x / s) + z, qmin, qmax).astype(out_dtype)
    return QTensor(q, s, z, qmin, qmax)


def dequantize(q: np.ndarray, scale, zero_point=0) -> np.ndarray:
    """r = S (q - Z) in float64; ``scale`` and ``zero_point`` broadcast against ``q``."""
    return (np.asarray(q, np.int64) - np.asarray(zero_point, np.int64)) * \
        np.asarray(scale, np.float64)


# ----------------------------------------------------------------------------------------------
# Integer GEMM
# ----------------------------------------------------------------------------------------------

def int32_safe_k(a_range: tuple[int, int] = (-128, 127),
                 b_range: tuple[int, int] = (-128, 127)) -> int:
    """The largest K for which a sum of K products a*b, a in ``a_range`` and b in ``b_range``
    (inclusive integer (min, max) pairs), always fits int32 [-2^31, 2^31 - 1]: int8 x int8
    (-128 * -128 = 2^14) gives 131071; uint8 x int8 (VNNI's operand types) 65793."""
    prods = [a * b for a in a_range for b in b_range]
    pmax, pmin = max(prods), min(prods)
    ks = []
    if pmax > 0:
        ks.append(INT32_MAX // pmax)
    if pmin < 0:
        ks.append((-INT32_MIN) // (-pmin))
    if not ks:
        raise ValueError("every product is 0: any K is safe")
    return min(ks)


def int_gemm_exact(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Exact A @ B for integer A (M, K) and B (K, N), through float64 BLAS: every product and
    partial sum is an integer below 2^53 in magnitude when K * max|a| * max|b| < 2^53
    (K up to 2^53 / 128^2, about 5 * 10^11, for int8), so float64 arithmetic
    makes no rounding error. Returns int64 (M, N), equal to
    :func:`reference_kernels.quant.int_gemm_golden` (tested) and much faster than numpy's
    integer matmul, which uses no BLAS. Raises ValueError for bad shapes, non-integer inputs,
    or a bound at or above 2^53."""
    A = np.asarray(A)
    B = np.asarray(B)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"cannot multiply shapes {A.shape} and {B.shape}")
    if A.dtype.kind not in "iu" or B.dtype.kind not in "iu":
        raise ValueError(f"integer inputs expected, got {A.dtype} and {B.dtype}")
    amax = int(np.abs(A.astype(np.int64)).max()) if A.size else 0
    bmax = int(np.abs(B.astype(np.int64)).max()) if B.size else 0
    if A.shape[1] * amax * bmax >= 2 ** 53:
        raise ValueError("K * max|a| * max|b| >= 2^53: float64 would round; use int_gemm_golden")
    return np.matmul(A.astype(np.float64), B.astype(np.float64)).astype(np.int64)


def cross_terms(A: np.ndarray, za, B: np.ndarray, zb) -> np.ndarray:
    """The zero points' part of sum_k (a_ik - za)(b_kj - zb) = sum_k a b + cross terms:
    ``- zb * sum_k a_ik - za * sum_k b_kj + K * za * zb`` (Jacob et al. §2.3, eq. (7)).
    A (M, K), B (K, N) integer; ``za`` a scalar or (M, 1) (per-token), ``zb`` a scalar or
    (1, N) (per-channel). The column sums of B (the weights) are computed once, offline; the row
    sums of A cost O(MK), not O(MNK). Returns int64 (M, N)."""
    A = np.asarray(A, np.int64)
    B = np.asarray(B, np.int64)
    za = np.asarray(za, np.int64)
    zb = np.asarray(zb, np.int64)
    K = A.shape[1]
    row_a = A.sum(axis=1, keepdims=True)          # (M, 1)
    col_b = B.sum(axis=0, keepdims=True)          # (1, N): precomputed with the weights
    return -zb * row_a - za * col_b + K * za * zb


def affine_int_gemm(A: np.ndarray, za, B: np.ndarray, zb) -> np.ndarray:
    """sum_k (a_ik - za)(b_kj - zb), exactly: :func:`int_gemm_exact` (A @ B on the raw stored
    integers, what an int8 GEMM unit does) plus :func:`cross_terms`. Returns int64 (M, N)."""
    return int_gemm_exact(A, B) + cross_terms(A, za, B, zb)


# ----------------------------------------------------------------------------------------------
# Requantisation: fixed-point multiplier, gemmlowp's rounding primitives
# ----------------------------------------------------------------------------------------------

def quantize_multiplier(real) -> tuple[np.ndarray, np.ndarray]:
    """A real multiplier M > 0 as (M0, shift) with M ~= M0 * 2^(shift - 31): M0 an int32 in
    [2^30, 2^31) (a Q31 mantissa in [0.5, 1)), ``shift`` the power of two (negative: a right
    shift, the usual case M < 1). TFLite's ``QuantizeMultiplier``: ``frexp`` splits M into a
    mantissa in [0.5, 1) and an exponent, the mantissa is rounded to 31 fractional bits, and a
    mantissa that rounds up to 2^31 is halved with the exponent raised. Relative error at most
    2^-31. ``real``: float or array; returns int64 arrays of its shape. Raises ValueError unless
    every M is finite with 2^-31 <= M < 2^31 (a shift in [-31, 31])."""
    real = np.asarray(real, np.float64)
    if not np.all(np.isfinite(real)) or np.any(real < 2.0 ** -31) or np.any(real >= 2.0 ** 31):
        raise ValueError("real multipliers must be finite and in [2^-31, 2^31)")
    mant, exp = np.frexp(real)
    m0 = np.rint(mant * 2.0 ** 31).astype(np.int64)
    up = m0 == 2 ** 31
    m0 = np.where(up, m0 // 2, m0)
    exp = np.where(up, exp + 1, exp).astype(np.int64)
    return m0, exp


def _int32(x, name: str) -> np.ndarray:
    x = np.asarray(x, np.int64)
    if np.any(x < INT32_MIN) or np.any(x > INT32_MAX):
        raise OverflowError(f"{name} does not fit int32")
    return x


def srdhm(a, b) -> np.ndarray:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` on int32 values (given as int64 arrays):
    the high 32 bits of 2ab, rounded to nearest — exactly floor(ab / 2^31 + 1/2), ties toward
    +inf — except that a = b = -2^31 (whose result 2^31 does not fit) saturates to 2^31 - 1.
    C's version adds a nudge of 2^30 (or 1 - 2^30 for a negative product) and divides by 2^31
    truncating toward zero; this is the same integer function. Raises OverflowError for
    arguments outside int32. Returns int64 with int32 values."""
    a = _int32(a, "a")
    b = _int32(b, "b")
    ab = a * b                                  # |ab| <= 2^62: exact in int64
    nudge = np.where(ab >= 0, 2 ** 30, 1 - 2 ** 30)
    s = ab + nudge
    q = np.where(s >= 0, s // 2 ** 31, -((-s) // 2 ** 31))       # truncate toward zero
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, q)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp's ``RoundingDivideByPOT``: x / 2^exponent rounded to nearest, ties away from
    zero, by an arithmetic shift plus a correction from the remainder (exponent 0..31;
    x int32 values as int64). Raises ValueError for an exponent outside [0, 31], OverflowError
    for x outside int32."""
    x = _int32(x, "x")
    e = np.asarray(exponent, np.int64)
    if np.any(e < 0) or np.any(e > 31):
        raise ValueError("exponent must be in [0, 31]")
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, m0, shift) -> np.ndarray:
    """x * M for int32 x and M = (m0, shift) from :func:`quantize_multiplier`, as TFLite's
    ``MultiplyByQuantizedMultiplier``: a left shift by max(shift, 0) (saturated to int32 here,
    where C would overflow), :func:`srdhm` by m0, then :func:`rounding_divide_by_pot` by
    max(-shift, 0). ``m0``, ``shift`` broadcast against x (per-channel: shape (N,) along the
    last axis). Returns int64 with int32 values."""
    x = _int32(x, "x")
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = np.clip(x << left, INT32_MIN, INT32_MAX)
    return rounding_divide_by_pot(srdhm(x, m0), right)


def quantize_bias(bias, s_a, s_w) -> np.ndarray:
    """Bias (float, (N,)) stored as int32 at scale S_a * S_w (Jacob et al. §2.4): so it adds
    straight into the int32 accumulator, zero point 0. ``s_a`` scalar, ``s_w`` scalar or (N,)
    (per-channel). rint in float64 (half to even). Raises OverflowError beyond int32. Returns
    int64 with int32 values."""
    q = np.rint(np.asarray(bias, np.float64) /
                (np.asarray(s_a, np.float64) * np.asarray(s_w, np.float64)))
    return _int32(q, "the quantised bias")


def requantize(acc, m0, shift, out_zero_point=0, bias=None, qmin: int = -128,
               qmax: int = 127) -> np.ndarray:
    """Integer-only output stage: clamp(MBQM(acc + bias, m0, shift) + Z_out, qmin, qmax).

    ``acc`` (M, N) int32 accumulator values (int64 array), ``bias`` (N,) int32 at scale
    S_a S_w (:func:`quantize_bias`) or None, ``m0``/``shift`` scalars or (N,) per output channel
    (:func:`quantize_multiplier` of S_a S_w[n] / S_out), ``out_zero_point`` Z_out, [qmin, qmax]
    the output range ([-128, 127] int8 or [0, 255] uint8). Returns int8 (uint8 when qmin >= 0).
    Raises OverflowError if acc + bias leaves int32 (hardware would wrap)."""
    v = _int32(acc, "acc")
    if bias is not None:
        v = _int32(v + np.asarray(bias, np.int64), "acc + bias")
    y = multiply_by_quantized_multiplier(v, m0, shift) + np.int64(out_zero_point)
    return np.clip(y, qmin, qmax).astype(np.uint8 if qmin >= 0 else np.int8)


def requantize_float(acc, real_multiplier, out_zero_point=0, bias=None, qmin: int = -128,
                     qmax: int = 127) -> np.ndarray:
    """The float path :func:`requantize` approximates: clip(rint((acc + bias) * M) + Z_out) with
    M the real multiplier(s) and everything in float64 (rint: half to even). Same shapes and
    return dtype as :func:`requantize`."""
    v = np.asarray(acc, np.float64)
    if bias is not None:
        v = v + np.asarray(bias, np.float64)
    y = np.rint(v * np.asarray(real_multiplier, np.float64)) + out_zero_point
    return np.clip(y, qmin, qmax).astype(np.uint8 if qmin >= 0 else np.int8)


# ----------------------------------------------------------------------------------------------
# Accuracy
# ----------------------------------------------------------------------------------------------

def cosine_similarity(ref: np.ndarray, approx: np.ndarray) -> float:
    """<ref, approx> / (||ref|| ||approx||) over all elements, in float64 (nan if either is
    zero). The SQNR's companion: :func:`reference_kernels.quant.sqnr_db`."""
    a = np.asarray(ref, np.float64).ravel()
    b = np.asarray(approx, np.float64).ravel()
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / den if den > 0 else float("nan")
