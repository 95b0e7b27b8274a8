"""Lab 6 ``int8-linear``: the golden checks of its three functions and their diagnoses (grader
side; the rules and their reasons: ``README.md``).

* :func:`check_quantize`: Wq and scales bit-exact against
  :func:`reference_kernels.quant.quantize_per_channel_golden`;
* :func:`check_gemm`: C exact against the int64 product;
* :func:`check_linear`: Y within ``DEQUANT_ROUNDINGS`` u32 (|acc| s_x s_w + |bias|) of the
  reference integer pipeline, and, on layers of at least ``SQNR_MIN_OUTPUTS`` outputs of the
  ``SQNR_KINDS``, SQNR >= the uniform-noise prediction less ``SQNR_MARGIN_DB``.

Each failed comparison gets a plain-words guess at the cause (another rounding, one scale for
all rows, a wrapped or float32 accumulator, an unquantised X ...).
"""

from __future__ import annotations

import numpy as np

from kernellab.numerics import Comparison, Exact, Explicit, compare, unit_roundoff
from reference_kernels.quant import (QMAX, int_gemm_golden, linear_golden, predicted_sqnr_db,
                                     quantize_per_channel_golden, quantize_per_token_golden,
                                     quantize_symmetric, sqnr_db, symmetric_scale)

SQNR_MARGIN_DB = 3.0
SQNR_KINDS = ("gaussian", "outlier")
#: the SQNR rule needs many outputs: the prediction is an average (with a handful of outputs,
#: one near zero decides the ratio; measured: the reference fails 3 dB on 12-40% of seeds at
#: M N <= 16, never at M N >= 64)
SQNR_MIN_OUTPUTS = 1024
DEQUANT_ROUNDINGS = 6


def _bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).view(np.uint32) == b.astype(np.float32).view(np.uint32)


def check_quantize(W: np.ndarray, Wq: np.ndarray, scales: np.ndarray) -> Comparison:
    ref_q, ref_s = quantize_per_channel_golden(W)
    cmp = compare(Wq, ref_q, Exact(), tile=(32, 32))
    same_s = _bits_equal(scales, ref_s)
    if not same_s.all():
        n = int(np.argmin(same_s))
        cmp.ok = False
        msg = (f"{int((~same_s).sum())} of {len(ref_s)} scales differ; scales[{n}] = "
               f"{float(scales[n]):.9g}, expected {float(ref_s[n]):.9g} "
               f"(S = max|W[n, :]| / 127 in float32; 1 for an all-zero row)")
        cmp.message = msg if cmp.mismatches == 0 else f"{cmp.message}; {msg}"
    if not cmp.ok:
        hint = _quantize_hint(W, Wq, scales, ref_q, ref_s)
        if hint:
            cmp.message += "; " + hint
    return cmp


def _quantize_hint(W, Wq, scales, ref_q, ref_s) -> str:
    with np.errstate(all="ignore"):  # the alternatives overflow on subnormal rows (1 / S = inf)
        return _quantize_hint_quiet(W, Wq, scales, ref_q, ref_s)


def _quantize_hint_quiet(W, Wq, scales, ref_q, ref_s) -> str:
    if len(scales) > 1 and np.all(scales == scales[0]) and not np.all(ref_s == ref_s[0]):
        Wd = Wq.astype(np.float64) * float(scales[0])
        Wr = ref_q.astype(np.float64) * ref_s.astype(np.float64)[:, None]
        worst = min(sqnr_db(W[n], Wd[n]) for n in range(len(W)))
        best = min(sqnr_db(W[n], Wr[n]) for n in range(len(W)))
        zeros = int(sum(1 for n in range(len(W)) if not Wq[n].any() and ref_q[n].any()))
        return (f"one scale for the whole weight: the worst row's SQNR is {worst:.1f} dB "
                f"against {best:.1f} dB with one scale per output channel"
                + (f"; {zeros} row(s) quantised to all zeros" if zeros else ""))
    bad = Wq.astype(np.int64) != ref_q.astype(np.int64)
    if bad.any() and _bits_equal(scales, ref_s).all():
        W32, S32 = W.astype(np.float32), ref_s[:, None]
        ratio = W32 / S32
        tie = np.abs(ratio - np.trunc(ratio)) == 0.5
        for why, q in other_roundings(W32, ref_s):
            if np.array_equal(Wq, q):
                return why
        away = np.trunc(ratio + np.copysign(np.float32(0.5), ratio))
        if tie[bad].all() and np.array_equal(Wq[bad], np.clip(away, -QMAX, QMAX)[bad]):
            return ("every wrong element is an exact tie (x / S = k + 1/2): round half to "
                    "even (np.rint), not half away from zero")
        if (np.abs(ref_q[bad]) == QMAX).all():
            return "the wrong elements are at +-127: clamp to [-127, 127]"
    return ""


_FLOAT64_DIVISION = ("x / S was computed in float64 (in Numba, amax / 127.0 or a float64 "
                     "literal makes it so): the rule is one float32 division")
_RECIPROCAL = "x * (1 / S) rounds differently from x / S: divide, in float32"


def other_roundings(X32: np.ndarray, S: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The usual wrong quantisations of the rows of X32 (float32) under the reference scales
    S (one per row), as int8 arrays, each with what it did wrong: x / S in float64 (with S in
    float32, and with S = amax / 127 in float64), and x * (1 / S) in float32."""
    S32 = S.astype(np.float32)[:, None]
    with np.errstate(all="ignore"):  # 1 / S overflows on subnormal rows
        amax64 = np.abs(X32.astype(np.float64)).max(axis=1, keepdims=True)
        S64 = np.where(amax64 > 0, amax64 / QMAX, 1.0)
        qs = [(_FLOAT64_DIVISION, X32.astype(np.float64) / S32.astype(np.float64)),
              (_FLOAT64_DIVISION, X32.astype(np.float64) / S64),
              (_RECIPROCAL, X32 * (np.float32(1) / S32))]
        return [(why, np.clip(np.rint(np.nan_to_num(q)), -QMAX, QMAX).astype(np.int8))
                for why, q in qs]


def check_gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> Comparison:
    """C against the int64 product A @ B, exactly, with a guess at the cause when it differs."""
    cmp = compare(C, int_gemm_golden(A, B), Exact(), tile=(32, 32))
    if not cmp.ok:
        cmp.message += "; " + _gemm_hint(A, B, C)
    return cmp


def _gemm_hint(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> str:
    if (C == 0).all():
        return "C is all zeros"
    if (C == np.iinfo(np.int32).min).any():
        return "some of C was never written (it still holds the fill value -2^31)"
    diff = C.astype(np.int64) - int_gemm_golden(A, B)
    for bits in (16, 8):  # wrapping arithmetic is exact modulo 2^bits
        if np.all(diff % (1 << bits) == 0):
            return (f"every wrong element is off by a multiple of 2^{bits}: the sum wrapped in "
                    f"int{bits}; accumulate in int32 (widen each int8 before the multiply)")
    ref = int_gemm_golden(A, B)
    bad = C.astype(np.int64) != ref
    if (np.abs(ref[bad]) > 2 ** 24).all() and (
            C[bad].astype(np.float32).astype(np.int64) == C[bad]).all():
        return ("every wrong element is a sum beyond 2^24 that came out a float32 value: "
                "float32 holds integers exactly only up to 2^24; accumulate in int32")
    if (np.abs(ref[bad]) > 2 ** 24).all() and (
            np.abs(diff[bad]) <= np.abs(ref[bad]) * 2.0 ** -20).all():
        return ("every wrong element is a sum beyond 2^24, off by a few units: a float32 "
                "partial sum passed 2^24 and rounded (float32 holds integers exactly only up to "
                "2^24): accumulate in int32, or in float32 over at most 1024 products (each "
                "|a b| <= 2^14)")
    return "compare with A @ B computed in int64"


def check_linear(inp: dict, Y: np.ndarray, kind: str) -> Comparison:
    X, Wq, sw, bias = inp["X"], inp["Wq"], inp["w_scales"], inp["bias"]
    Xq, sx = quantize_per_token_golden(X)
    acc = int_gemm_golden(Xq, Wq.T).astype(np.float64)
    scale = sx.astype(np.float64)[:, None] * sw.astype(np.float64)[None, :]
    ref = acc * scale + bias.astype(np.float64)[None, :]
    u = unit_roundoff("float32")
    bound = DEQUANT_ROUNDINGS * u * (np.abs(acc) * scale + np.abs(bias.astype(np.float64)))
    cmp = compare(Y, ref, Explicit(bound, f"{DEQUANT_ROUNDINGS} u32 (|acc| s_x s_w + |bias|): "
                                          "the float32 dequantisation's roundings"),
                  tile=(32, 32))
    layer = linear_golden(X, Wq.astype(np.float64) * sw.astype(np.float64)[:, None], bias)
    sq = sqnr_db(layer, Y) if np.isfinite(Y).all() else float("-inf")
    notes = []
    if kind in SQNR_KINDS and Y.size >= SQNR_MIN_OUTPUTS:
        pred = predicted_sqnr_db(X)
        need = pred - SQNR_MARGIN_DB
        if not sq >= need:
            if cmp.ok:
                cmp.message = ""
            cmp.ok = False
            notes.append(f"SQNR {sq:.1f} dB against the float64 layer < {need:.1f} dB (per-token "
                         f"quantisation of this X predicts {pred:.1f} dB, less {SQNR_MARGIN_DB:g})")
        else:
            cmp.message += f"; SQNR {sq:.1f} dB (>= {need:.1f}, predicted {pred:.1f})"
    if not cmp.ok:
        notes.append(_linear_hint(X, Wq, sw, bias, Y, acc, scale))
    notes = [n for n in notes if n]
    if notes:
        cmp.message = "; ".join(([cmp.message] if cmp.message else []) + notes)
    return cmp


def _linear_hint(X, Wq, sw, bias, Y, acc, scale) -> str:
    Y64 = Y.astype(np.float64)
    if not np.isfinite(Y64).all():
        return ""
    b = bias.astype(np.float64)[None, :]
    W64 = Wq.astype(np.float64) * sw.astype(np.float64)[:, None]
    unquantised = X.astype(np.float64) @ W64.T + b
    if np.allclose(Y64, unquantised, rtol=1e-5, atol=1e-6 * np.abs(unquantised).max()):
        return ("Y matches the layer with X not quantised: quantise X per token (the rule of "
                "quantize_per_channel, applied to the rows of X) before the int8 GEMM")
    _, sx_ref = quantize_per_token_golden(X)
    for why, Xq in other_roundings(X.astype(np.float32), sx_ref):
        acc_o = int_gemm_golden(Xq, Wq.T).astype(np.float64)
        Y_o = acc_o * scale + b
        bound = DEQUANT_ROUNDINGS * unit_roundoff("float32") * (np.abs(acc_o) * scale
                                                                 + np.abs(b))
        if not np.array_equal(acc_o, acc) and (np.abs(Y64 - Y_o) <= bound).all():
            return f"quantising X (per token): {why}"
    amax_rows = np.abs(X).max(axis=1)
    if np.all(amax_rows == amax_rows[0]):
        return ""  # per-token and per-tensor scales coincide (one row, or equal row maxima)
    # one scale for all of X (per-tensor)
    st = symmetric_scale(np.abs(X).max())
    Xt = quantize_symmetric(X, st).astype(np.float64)
    per_tensor = (Xt @ Wq.T.astype(np.float64)) * float(st) * sw.astype(np.float64)[None, :] + b
    if np.allclose(Y64, per_tensor, rtol=1e-5, atol=1e-6 * np.abs(per_tensor).max()):
        return "X was quantised with one scale for all tokens: use one scale per row (token)"
    mask = np.abs(acc * scale) > 1e-3 * np.abs(acc * scale).max()
    if mask.any():
        r = (Y64 - b)[mask] / (acc * scale)[mask]
        med = float(np.median(r))
        if np.allclose(r, med, rtol=1e-3) and abs(med - 1) > 1e-3:
            return (f"Y - bias is {med:.4g} x acc s_x[m] s_w[n]: check the dequantisation "
                    "scale (the product of the token's scale and the channel's)")
    return ""
