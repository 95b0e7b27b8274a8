"""Chapter 6's accuracy study: a W8A8 linear layer on Gaussian data, with and without an
LLM-like outlier input channel, and the two remedies the field uses.

* :func:`layer_data` — X (M, K) and W (N_out, K), N(0, 1), optionally one input channel of X
  scaled by ``outlier_factor`` (the *systematic outlier features* of large language models:
  Dettmers et al., "LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale",
  NeurIPS 2022, arXiv:2208.07339, §3.2 and §4);
* :func:`w8a8_linear` — symmetric int8, per-output-channel weights, per-tensor or per-token
  activations, the integer GEMM exact, dequantised in float64;
* :func:`smoothquant_scales` / :func:`smooth` — SmoothQuant's per-input-channel migration
  (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training Quantization for Large
  Language Models", ICML 2023, arXiv:2211.10438, §4, eq. (4)):
  s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), Y = (X diag(s)^-1)(diag(s) W^T);
* :func:`llm_int8_linear` — LLM.int8()'s mixed-precision decomposition (Dettmers et al. §3.2):
  the input channels where some |x| >= 6.0 multiplied in float16, the rest int8 vector-wise
  (per-token X, per-output-channel W);
* :func:`study` — all of them as SQNR (dB) and cosine similarity against the float64 layer,
  next to :data:`REFERENCE_SQNR_DB`, anchors the course's authors measured on the same set-up;
* :func:`plot_channel_absmax` — max |X_j| per input channel before and after smoothing.
"""

from __future__ import annotations

import numpy as np

from kernellab.topics.quant import cosine_similarity, int_gemm_exact, quantize
from reference_kernels.quant import OUTLIER_FACTOR as _OUTLIER_FACTOR
from reference_kernels.quant import linear_golden, sqnr_db

__all__ = ["REFERENCE_SQNR_DB", "REFERENCE_SIZES", "LLM_INT8_THRESHOLD", "OUTLIER_FACTOR",
           "layer_data", "w8a8_linear", "smoothquant_scales", "smooth", "outlier_channels",
           "llm_int8_linear", "study", "plot_channel_absmax"]

#: SQNR (dB) of the dequantised W8A8 output against float64, as the course's authors measured it
#: when the chapter was designed (X 256 x 4096 and W 4096 x 512, N(0, 1); symmetric int8,
#: per-output-channel W, exact integer accumulation; one input channel x 60 for the outlier
#: rows): the authors' own figures, not a publication's. The chapter re-measures them and prints
#: its values next to these anchors. setting -> dB.
REFERENCE_SQNR_DB = {"per-tensor": 36.9, "per-token": 38.3, "outlier, per-tensor": 10.9,
                     "outlier, per-token": 19.7, "outlier, SmoothQuant a=0.5": 34.4,
                     "outlier, SmoothQuant a=0.75": 29.6}
#: (M, K, N_out) of the anchors' measurement.
REFERENCE_SIZES = (256, 4096, 512)
#: LLM.int8()'s outlier threshold on |x| (Dettmers et al. §3.2; bitsandbytes/transformers
#: ``llm_int8_threshold=6.0``).
LLM_INT8_THRESHOLD = 6.0
#: the outlier channel's scale factor in the anchors' measurement.
OUTLIER_FACTOR = _OUTLIER_FACTOR  # defined in reference_kernels.quant


def layer_data(M: int = 256, K: int = 4096, N: int = 512, *, outlier_factor: float | None = None,
               outlier_channel: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """X (M, K) and W (N, K), float32, N(0, 1) from ``seed``; with ``outlier_factor``, column
    ``outlier_channel`` of X is multiplied by it (the same X otherwise)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((M, K), dtype=np.float32)
    W = rng.standard_normal((N, K), dtype=np.float32)
    if outlier_factor is not None:
        X[:, outlier_channel] *= np.float32(outlier_factor)
    return X, W


def w8a8_linear(X: np.ndarray, W: np.ndarray, x_granularity: str = "tensor") -> np.ndarray:
    """Y ~= X W^T through int8: W symmetric per output channel, X symmetric per tensor
    (``"tensor"``) or per token (``"token"``); the int8 GEMM exact
    (:func:`kernellab.topics.quant.int_gemm_exact`), then scaled by S_x[m] S_w[n] in float64
    (the same arithmetic as :func:`reference_kernels.quant.dequantize_linear_golden`). X (M, K),
    W (N, K) float32; returns float64 (M, N)."""
    xq = quantize(X, granularity=x_granularity)
    wq = quantize(W, granularity="channel")
    acc = int_gemm_exact(xq.q, wq.q.T).astype(np.float64)
    xs = np.broadcast_to(np.asarray(xq.scale, np.float64).reshape(-1, 1), (X.shape[0], 1))
    ws = np.asarray(wq.scale, np.float64).reshape(1, -1)
    return acc * xs * ws


def smoothquant_scales(x_absmax: np.ndarray, W: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """SmoothQuant's smoothing factors (Xiao et al. §4, eq. (4)):
    s_j = max|X_j|^alpha / max_n |W[n, j]|^(1 - alpha) for each input channel j. ``x_absmax``
    (K,) is max|X_j| from calibration data, W (N, K). Channels where either maximum is 0 get
    s_j = 1. Returns float64 (K,). Raises ValueError unless 0 <= alpha <= 1 and the shapes
    agree."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha (the migration strength) must be in [0, 1], got {alpha}")
    xa = np.asarray(x_absmax, np.float64)
    wa = np.abs(np.asarray(W, np.float64)).max(axis=0)
    if xa.shape != wa.shape:
        raise ValueError(f"x_absmax has shape {xa.shape}, W has {wa.shape[0]} input channels")
    ok = (xa > 0) & (wa > 0)
    s = np.ones_like(xa)
    s[ok] = xa[ok] ** alpha / wa[ok] ** (1.0 - alpha)
    return s


def smooth(X: np.ndarray, W: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(X diag(s)^-1, W diag(s)) in float32 — X (M, K), W (N, K), s (K,): the product
    X W^T is unchanged in exact arithmetic (in a network the division is folded into the
    preceding LayerNorm, the multiplication into W offline)."""
    s = np.asarray(s, np.float64)
    return ((np.asarray(X, np.float64) / s).astype(np.float32),
            (np.asarray(W, np.float64) * s).astype(np.float32))


def outlier_channels(X: np.ndarray, threshold: float = LLM_INT8_THRESHOLD) -> np.ndarray:
    """Indices of the input channels (columns of X (M, K)) holding some |x| >= threshold:
    LLM.int8()'s outlier feature dimensions (Dettmers et al. §3.2). Returns int64 (n_outliers,)."""
    return np.flatnonzero((np.abs(np.asarray(X)) >= threshold).any(axis=0))


def llm_int8_linear(X: np.ndarray, W: np.ndarray,
                    threshold: float = LLM_INT8_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """LLM.int8()'s mixed-precision decomposition (Dettmers et al. §3.2): Y = X_O W_O^T in
    float16 (operands rounded to float16, products summed in float32, as a half-precision
    GEMM with float32 accumulation) + the other channels through int8 *vector-wise*
    quantisation (per-token X, per-output-channel W, :func:`w8a8_linear`). X (M, K), W (N, K)
    float32. Returns (Y float64 (M, N), the outlier channel indices)."""
    X = np.asarray(X, np.float32)
    W = np.asarray(W, np.float32)
    cols = outlier_channels(X, threshold)
    rest = np.setdiff1d(np.arange(X.shape[1]), cols)
    Y = w8a8_linear(np.ascontiguousarray(X[:, rest]), np.ascontiguousarray(W[:, rest]), "token")
    if cols.size:
        xo = X[:, cols].astype(np.float16).astype(np.float32)
        wo = W[:, cols].astype(np.float16).astype(np.float32)
        Y = Y + np.matmul(xo, wo.T).astype(np.float64)
    return Y, cols


def _row(name, ref, Y):
    return {"setting": name, "sqnr_db": float(sqnr_db(ref, Y)), "cosine": cosine_similarity(ref, Y),
            "anchor_db": REFERENCE_SQNR_DB.get(name)}


def study(M: int = 256, K: int = 4096, N: int = 512, seed: int = 0,
          alphas: tuple[float, ...] = (0.5, 0.75)) -> list[dict]:
    """The W8A8 accuracy study on :func:`layer_data` (Gaussian; then with one input channel
    x :data:`OUTLIER_FACTOR`). Settings: per-tensor and per-token X; with the outlier: per-tensor,
    per-token, SmoothQuant at each alpha (factors from this X; then per-token X and
    per-channel W, the setting of the anchors' measurement), and LLM.int8(). Returns a list of
    {"setting", "sqnr_db", "cosine", "anchor_db" (the :data:`REFERENCE_SQNR_DB` value, or None)}."""
    rows = []
    X, W = layer_data(M, K, N, seed=seed)
    ref = linear_golden(X, W)
    for g in ("tensor", "token"):
        rows.append(_row(f"per-{g}", ref, w8a8_linear(X, W, g)))
    X, W = layer_data(M, K, N, outlier_factor=OUTLIER_FACTOR, seed=seed)
    ref = linear_golden(X, W)
    for g in ("tensor", "token"):
        rows.append(_row(f"outlier, per-{g}", ref, w8a8_linear(X, W, g)))
    absmax = np.abs(X).max(axis=0)
    for a in alphas:
        Xs, Ws = smooth(X, W, smoothquant_scales(absmax, W, a))
        rows.append(_row(f"outlier, SmoothQuant a={a:g}", ref, w8a8_linear(Xs, Ws, "token")))
    rows.append(_row("outlier, LLM.int8()", ref, llm_int8_linear(X, W)[0]))
    return rows


def plot_channel_absmax(X: np.ndarray, W: np.ndarray, alpha: float = 0.5):
    """max |X_j| and max |W_j| per input channel j, before and after SmoothQuant's migration
    (two panels, log y). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    xa = np.abs(X).max(axis=0)
    Xs, Ws = smooth(X, W, smoothquant_scales(xa, W, alpha))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained", sharey=True)
    panels = ((X, W, "before"), (Xs, Ws, f"after smoothing, α = {alpha:g}"))
    for ax, (x, w, title) in zip(axes, panels):
        ch = np.arange(X.shape[1])
        ax.plot(ch, np.abs(x).max(axis=0), lw=0.6, label="max |X_j| (activations)")
        ax.plot(ch, np.abs(w).max(axis=0), lw=0.6, label="max |W_j| (weights)")
        ax.set_yscale("log")
        ax.set_xlabel("input channel j")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=8)
    return fig
