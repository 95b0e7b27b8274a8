"""2-D convolution (as deep-learning layers compute it: cross-correlation): the golden reference
and the direct baseline kernel.

Layouts: input X (N, C, H, W) "NCHW", filters W (K, C, R, S) "KCRS", output Y (N, K, P, Q) with
stride 1 and zero padding ``pad`` on every side: P = H + 2 pad - R + 1, Q = W + 2 pad - S + 1
(P = H, Q = W for 3x3 filters with pad 1, the "same" convolution)::

    Y[n, k, p, q] = sum_{c, r, s} X[n, c, p + r - pad, q + s - pad] * W[k, c, r, s]

(X outside [0, H) x [0, W) reads as 0). 2 N K P Q C R S floating-point operations
(:func:`conv2d_flops`), the "direct-convolution FLOPs" effective GFLOP/s figures divide by.
"""

from __future__ import annotations

import numpy as np


def conv2d_flops(N: int, C: int, K: int, P: int, Q: int, R: int = 3, S: int = 3) -> int:
    """Multiply-adds x 2 of the direct convolution: 2 N K P Q C R S."""
    return 2 * N * K * P * Q * C * R * S


def _check_shapes(X: np.ndarray, Wt: np.ndarray, pad: int) -> tuple[int, int]:
    if X.ndim != 4 or Wt.ndim != 4:
        raise ValueError(f"X must be (N, C, H, W) and W (K, C, R, S); got {X.shape} and {Wt.shape}")
    if X.shape[1] != Wt.shape[1]:
        raise ValueError(f"channel mismatch: X has C={X.shape[1]}, W has C={Wt.shape[1]}")
    P = X.shape[2] + 2 * pad - Wt.shape[2] + 1
    Q = X.shape[3] + 2 * pad - Wt.shape[3] + 1
    if P < 1 or Q < 1 or pad < 0:
        raise ValueError(f"empty output: H, W = {X.shape[2:]}, R, S = {Wt.shape[2:]}, pad = {pad}")
    return P, Q


def _correlate(X: np.ndarray, Wt: np.ndarray, pad: int) -> np.ndarray:
    P, Q = _check_shapes(X, Wt, pad)
    N, C, H, Wd = X.shape
    K, _, R, S = Wt.shape
    Xp = np.zeros((N, C, H + 2 * pad, Wd + 2 * pad), dtype=np.float64)
    Xp[:, :, pad:pad + H, pad:pad + Wd] = X
    Y = np.zeros((N, K, P, Q), dtype=np.float64)
    for r in range(R):
        for s in range(S):
            # (N, C, P, Q) x (K, C) summed over C, for one filter tap
            Y += np.einsum("ncpq,kc->nkpq", Xp[:, :, r:r + P, s:s + Q], Wt[:, :, r, s],
                           optimize=True)
    return Y


def conv2d_golden(X: np.ndarray, Wt: np.ndarray, pad: int = 1) -> np.ndarray:
    """Golden reference in float64 from the inputs exactly as the kernel saw them (float16 /
    float32 inputs are widened without rounding).

    X (N, C, H, W), Wt (K, C, R, S) -> (N, K, P, Q) float64 (module docstring). Its own rounding
    is that of float64 sums of C R S terms: ~sqrt(C R S) 2**-53 relative to :func:`conv2d_abs`,
    negligible against any float32 kernel. Raises ValueError on mismatched or empty shapes.
    """
    return _correlate(np.asarray(X).astype(np.float64), np.asarray(Wt).astype(np.float64), pad)


def conv2d_abs(X: np.ndarray, Wt: np.ndarray, pad: int = 1) -> np.ndarray:
    """``|X| ⋆ |W|`` in float64, shape (N, K, P, Q): the scale of each output's rounding error
    (the convolution analogue of GEMM's |A| @ |B|)."""
    return _correlate(np.abs(np.asarray(X).astype(np.float64)),
                      np.abs(np.asarray(Wt).astype(np.float64)), pad)


def conv2d_direct(X, Wt, Y):
    """The direct baseline kernel: stride 1, "same" zero padding (R // 2, S // 2), R and S odd.

    X (N, C, H, W), Wt (K, C, R, S), Y (N, K, H, W), one float dtype; writes Y in place, returns
    nothing. Accumulates into Y in its dtype, over c, then r, then s (the order of the sum in
    the module docstring), so each output is a sequential sum of C R S products. Loop order
    n, k, c, r, s, p, q: the innermost loop runs along a row of Y and a row of X, both as 1-D
    views with stride 1 whose clipped bounds are computed outside it (no padding branch, no
    negative index), so LLVM vectorises it; the tap W[k, c, r, s] stays in a register. Plain
    Python, so this module stays numpy-only: the harness compiles it with ``numba.njit`` (the
    grader and ``kernellab.kernels.conv_cpu``).
    """
    N, C, H, Wd = X.shape
    K, _, R, S = Wt.shape
    ph, pw = R // 2, S // 2
    zero = Y.dtype.type(0)
    for n in range(N):
        for k in range(K):
            Yk = Y[n, k]
            for p in range(H):
                for q in range(Wd):
                    Yk[p, q] = zero
            for c in range(C):
                Xc = X[n, c]
                for r in range(R):
                    p0 = max(0, ph - r)
                    p1 = min(H, H + ph - r)
                    for s in range(S):
                        w = Wt[k, c, r, s]
                        q0 = max(0, pw - s)
                        q1 = min(Wd, Wd + pw - s)
                        for p in range(p0, p1):
                            yrow = Yk[p, q0:q1]
                            xrow = Xc[p + r - ph, q0 + s - pw:q1 + s - pw]
                            for q in range(q1 - q0):
                                yrow[q] += w * xrow[q]


def conv2d_direct_rounded(X: np.ndarray, Wt: np.ndarray, dtype=np.float32) -> np.ndarray:
    """:func:`conv2d_direct` in numpy, every product and partial sum rounded to ``dtype``
    (float16 or float32; numpy rounds each float16/float32 operation), in the same order: each
    output a sequential sum over c, then r, then s, without fused multiply-adds. X (N, C, H, W)
    and Wt (K, C, R, S) are first rounded to ``dtype``; stride 1, "same" padding (R, S odd).
    Returns (N, K, H, W) of ``dtype``. Used for the error a plain direct convolution makes in
    that precision (the ``winograd`` lab's tolerance, chapter 4's error study)."""
    dtype = np.dtype(dtype)
    X = np.asarray(X).astype(dtype)
    Wt = np.asarray(Wt).astype(dtype)
    P, Q = _check_shapes(X, Wt, Wt.shape[2] // 2)
    N, C, H, Wd = X.shape
    K, _, R, S = Wt.shape
    ph, pw = R // 2, S // 2
    Xp = np.zeros((N, C, H + 2 * ph, Wd + 2 * pw), dtype)
    Xp[:, :, ph:ph + H, pw:pw + Wd] = X
    Y = np.zeros((N, K, P, Q), dtype)
    for c in range(C):
        for r in range(R):
            for s in range(S):
                win = Xp[:, None, c, r:r + P, s:s + Q]                       # N 1 P Q
                prod = (Wt[None, :, c, r, s, None, None] * win).astype(dtype)
                Y = (Y + prod).astype(dtype)
    return Y
