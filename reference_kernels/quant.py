"""INT8 quantisation: the golden references and the naive integer baseline (numpy only).

Affine quantisation (Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018, arXiv:1712.05877, §2.1; gemmlowp
``doc/quantization.md``, https://github.com/google/gemmlowp): a real value r is represented by an
integer q with a real scale S > 0 and an integer zero point Z, r = S (q - Z). *Symmetric*
quantisation has Z = 0 and, on the narrow int8 range [-127, 127], S = max|x| / 127.

The course's exact rounding rule (the ``int8-linear`` lab grades it bit for bit):
``q = clip(rint(x / S), -127, 127)`` with ``x / S`` computed in float32 (one IEEE division,
correctly rounded) and ``rint`` rounding half to even (numpy's and IEEE 754's default mode;
C's ``round`` and Python 2's rounded half away from zero). A row whose max |x| is 0 gets S = 1
(every q is 0 either way).

Integer GEMM: int8 x int8 products accumulated exactly. The golden reference widens to int64
first: numpy's ``int8 @ int8`` returns int8 and wraps (matmul keeps the operands' integer
dtype).
"""

from __future__ import annotations

import numpy as np

QMAX = 127  # narrow (symmetric) int8 range [-127, 127]
#: The LLM-like outlier of chapter 6's W8A8 study: one input channel of X scaled 60x.
OUTLIER_FACTOR = 60.0


def symmetric_scale(amax: np.ndarray) -> np.ndarray:
    """Scales S = amax / 127 in float32 (amax: float32 array of max |x| per group, >= 0);
    S = 1 where amax is 0."""
    amax = np.asarray(amax, dtype=np.float32)
    s = amax / np.float32(QMAX)
    return np.where(amax > 0, s, np.float32(1.0)).astype(np.float32)


def quantize_symmetric(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``clip(rint(x / scale), -127, 127)`` as int8; x float32, scale float32 broadcastable to
    x (e.g. (K, 1) per row). The division is float32, the rounding half to even."""
    x = np.asarray(x, dtype=np.float32)
    q = np.rint(x / np.asarray(scale, dtype=np.float32))
    return np.clip(q, -QMAX, QMAX).astype(np.int8)


def quantize_per_channel_golden(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel quantisation of a weight matrix W (N_out, K) float32: one
    scale per row, S_n = max_k |W[n, k]| / 127. Returns (Wq int8 (N_out, K), scales float32
    (N_out,)). Raises ValueError unless W is 2-D."""
    W = np.asarray(W, dtype=np.float32)
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D (N_out, K), got shape {W.shape}")
    s = symmetric_scale(np.abs(W).max(axis=1) if W.shape[1] else np.zeros(W.shape[0], np.float32))
    return quantize_symmetric(W, s[:, None]), s


def quantize_per_token_golden(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-token (per-row) quantisation of activations X (M, K) float32: the same rule
    as :func:`quantize_per_channel_golden`, one scale per row. Returns (Xq int8, scales (M,))."""
    return quantize_per_channel_golden(X)


def int_gemm_golden(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Exact integer product A @ B for integer A (M, K) and B (K, N): widened to int64 first
    (exact while K * max|a| * max|b| < 2^63). Returns int64 (M, N)."""
    A = np.asarray(A)
    B = np.asarray(B)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"cannot multiply shapes {A.shape} and {B.shape}")
    return np.matmul(A.astype(np.int64), B.astype(np.int64))


def linear_golden(X: np.ndarray, W: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The float64 linear layer Y = X W^T + bias: X (M, K), W (N_out, K), bias (N_out,) or None;
    computed in float64 from the inputs as given. Returns float64 (M, N_out)."""
    Y = np.matmul(np.asarray(X, np.float64), np.asarray(W, np.float64).T)
    if bias is not None:
        Y = Y + np.asarray(bias, np.float64)
    return Y


def dequantize_linear_golden(Xq, x_scales, Wq, w_scales, bias) -> np.ndarray:
    """What a W8A8 linear layer computes from its quantised operands, exactly: the int64 product
    Xq Wq^T scaled by x_scales[m] * w_scales[n] (each row scale times each channel scale), plus
    bias, in float64. Xq (M, K) int8, x_scales (M,), Wq (N_out, K) int8, w_scales (N_out,),
    bias (N_out,). Returns float64 (M, N_out)."""
    acc = int_gemm_golden(Xq, np.asarray(Wq).T).astype(np.float64)
    x_s = np.asarray(x_scales, np.float64)[:, None]
    w_s = np.asarray(w_scales, np.float64)[None, :]
    return acc * x_s * w_s + np.asarray(bias, np.float64)[None, :]


def sqnr_db(ref: np.ndarray, approx: np.ndarray) -> float:
    """Signal-to-quantisation-noise ratio 10 log10(||ref||^2 / ||ref - approx||^2) in dB
    (float64; inf when equal). About 6.02 dB per bit for a full-scale uniform quantiser."""
    ref = np.asarray(ref, np.float64)
    err = ref - np.asarray(approx, np.float64)
    num, den = float(np.sum(ref * ref)), float(np.sum(err * err))
    if den == 0.0:
        return float("inf")
    if num == 0.0:
        return float("-inf")
    return 10.0 * np.log10(num / den)


def int8_gemm_naive(A, B, C):
    """The naive integer baseline: C = A @ B with A (M, K) int8, B (K, N) int8, C (M, N) int32;
    the textbook i, j, k loop with a scalar accumulator (each int8 widened to int32 before the
    multiply; under Numba the product of two int32 scalars, and so the accumulator, is int64 —
    exact, stored to int32).
    Writes C in place, returns nothing. Plain Python, so this module stays numpy-only: the
    harness compiles it with ``numba.njit``."""
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.int32(0)
            for k in range(K):
                acc += np.int32(A[i, k]) * np.int32(B[k, j])
            C[i, j] = acc


def predicted_sqnr_db(X: np.ndarray) -> float:
    """The SQNR (dB) per-token symmetric int8 quantisation of X (M, K) should reach, by the
    uniform-noise model of a rounding quantiser (Widrow & Kollár, "Quantization Noise",
    Cambridge UP 2008, ch. 4-5: error uniform on [-S/2, S/2], variance S^2 / 12, independent of
    the signal): 10 log10(sum x^2 / (K sum_m S_m^2 / 12)), S_m = max|X[m, :]| / 127. For a layer
    Y = X W^T with weights of equal variance across k the output's SQNR is the same (noise and
    signal pass through W alike). Gaussian rows of K = 4096: about 41 dB (the 6.02 dB/bit rule
    less the crest factor max|x| / sigma ~ 4)."""
    S = symmetric_scale(np.abs(np.asarray(X, np.float32)).max(axis=1)).astype(np.float64)
    X = np.asarray(X, np.float64)
    noise = X.shape[1] * float(np.sum(S * S)) / 12.0
    return 10.0 * float(np.log10(float(np.sum(X * X)) / noise))
