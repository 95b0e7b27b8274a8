"""Chapter 4's error study: how much accuracy Winograd F(m, 3) loses, measured, in FP32 and FP16.

Every arithmetic operation is rounded to the dtype under study (numpy float16/float32
arithmetic), the transforms applied as left-to-right sums of their exact matrices' non-zero
entries (:func:`kernellab.kernels.conv_cpu.apply_rounded`), and the result compared with a
float64 direct convolution of the same rounded inputs. The direct convolution in the same dtype
(products and a sequential sum, each rounded) is measured alongside: Winograd's error is quoted
as a multiple of it.

* :func:`error_1d` — one output tile of F(m, 3) in 1-D over many random (d, g) pairs, the
  set-up of the anchors' measurement (N(0, 1) data and filter, error normalised by
  max|d| max|g|), whose ratios are :data:`REFERENCE_1D_RATIOS`;
* :func:`error_2d` — a whole layer, F(m x m, 3 x 3) with the channel sum, through
  :func:`kernellab.kernels.conv_cpu.winograd_reference` /
  ``reference_kernels.conv.conv2d_direct_rounded``;
* :func:`study` — both over m in (2, 4, 6) x {standard, alternative points} x {FP32, FP16};
* :func:`plot_errors` — the chart.

Why the error grows with m (Barabasz, Anderson, Soodhalter & Gregg, "Error Analysis and
Improving the Accuracy of Winograd Convolution for Deep Neural Networks", ACM TOMS 46(4), 2020,
§5): the bound on the error grows with the norms of A^T, G and B^T, and those grow quickly
with the number and size of the interpolation points that larger tiles need.
"""

from __future__ import annotations

import numpy as np

from kernellab.kernels.conv_cpu import apply_rounded, winograd_reference
from kernellab.topics.winograd import ALT_POINTS, POINTS, cook_toom
from reference_kernels.conv import conv2d_direct_rounded, conv2d_golden

__all__ = ["REFERENCE_1D_RATIOS", "TILES", "DTYPES", "error_1d", "error_2d", "study",
           "plot_errors"]

#: Output tile sizes m of F(m, 3) studied.
TILES = (2, 4, 6)
#: Dtypes studied.
DTYPES = ("float32", "float16")

#: Winograd's 1-D error as a multiple of the direct convolution's in the same dtype, as
#: the course's authors measured it when the chapter was designed (2000 trials, N(0, 1) data and
#: filter, every operation rounded to the dtype): their own figures, not a publication's; the
#: anchors the chapter's own measurement is compared with. (m, dtype) -> ratio.
REFERENCE_1D_RATIOS = {(2, "float32"): 1.3, (4, "float32"): 3.5, (6, "float32"): 6.0,
                       (2, "float16"): 1.3, (4, "float16"): 3.0, (6, "float16"): 4.8}


def _transforms(m: int, points):
    pts = POINTS[(m, 3)] if points is None else points
    return cook_toom(m, 3, pts)


def error_1d(m: int, dtype="float32", points=None, trials: int = 2000, seed: int = 0) -> dict:
    """1-D F(m, 3) on ``trials`` random tiles: d (alpha,) and g (3,) drawn N(0, 1) and rounded
    to ``dtype``; output y (m,) by Winograd and by the direct sum y_i = g_0 d_i + g_1 d_{i+1} +
    g_2 d_{i+2}, both with every operation rounded to ``dtype``, against the float64 result.
    Errors are normalised by max|d| max|g| of their trial. ``points``: finite interpolation
    points (default :data:`kernellab.topics.winograd.POINTS`).

    Returns {"m", "dtype", "winograd_max", "winograd_mean", "direct_max", "direct_mean",
    "ratio_mean" (winograd_mean / direct_mean), "ratio_max"}.
    """
    dt = np.dtype(dtype)
    t = _transforms(m, points)
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((trials, t.alpha)).astype(dt)
    g = rng.standard_normal((trials, 3)).astype(dt)
    d64, g64 = d.astype(np.float64), g.astype(np.float64)
    exact = sum(g64[:, j, None] * d64[:, j:j + m] for j in range(3))
    direct = np.zeros((trials, m), dt)
    for j in range(3):
        direct = (direct + (g[:, j, None] * d[:, j:j + m]).astype(dt)).astype(dt)
    Gg = apply_rounded(t.G, g, 1, dt)
    Bd = apply_rounded(t.BT, d, 1, dt)
    wino = apply_rounded(t.AT, (Gg * Bd).astype(dt), 1, dt)
    scale = (np.abs(d64).max(axis=1) * np.abs(g64).max(axis=1))[:, None]
    ew = np.abs(wino.astype(np.float64) - exact) / scale
    ed = np.abs(direct.astype(np.float64) - exact) / scale
    return {"m": m, "dtype": dt.name, "winograd_max": float(ew.max()),
            "winograd_mean": float(ew.mean()), "direct_max": float(ed.max()),
            "direct_mean": float(ed.mean()), "ratio_mean": float(ew.mean() / ed.mean()),
            "ratio_max": float(ew.max() / ed.max())}


def error_2d(m: int, dtype="float32", points=None, *, N: int = 1, C: int = 16, K: int = 8,
             H: int = 24, W: int = 24, seed: int = 0) -> dict:
    """F(m x m, 3 x 3) on one random layer: X (N, C, H, W) and Wt (K, C, 3, 3) drawn N(0, 1)
    and rounded to ``dtype``; absolute errors of Winograd (every operation rounded to dtype,
    channel sum sequential) and of the direct convolution in the same dtype against the float64
    direct convolution of the same rounded inputs. Non-finite outputs (an FP16 overflow) are
    counted in ``nonfinite`` and left out of the errors.

    Returns {"m", "dtype", "points" ("standard" or "alternative" or the points given),
    "winograd_max", "winograd_mean", "direct_max", "direct_mean", "ratio_mean", "ratio_max",
    "nonfinite"}.
    """
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C, H, W)).astype(dt)
    Wt = rng.standard_normal((K, C, 3, 3)).astype(dt)
    ref = conv2d_golden(X, Wt)
    with np.errstate(over="ignore", invalid="ignore"):
        wino = winograd_reference(X, Wt, m, dt, points=points).astype(np.float64)
        direct = conv2d_direct_rounded(X, Wt, dt).astype(np.float64)
    fin = np.isfinite(wino)
    ew = np.abs(wino[fin] - ref[fin])
    ed = np.abs(direct - ref)
    label = ("standard" if points is None or tuple(points) == POINTS[(m, 3)] else
             "alternative" if tuple(points) == ALT_POINTS[(m, 3)] else str(points))
    nan = float("nan")
    return {"m": m, "dtype": dt.name, "points": label,
            "winograd_max": float(ew.max()) if ew.size else nan,
            "winograd_mean": float(ew.mean()) if ew.size else nan,
            "direct_max": float(ed.max()), "direct_mean": float(ed.mean()),
            "ratio_mean": float(ew.mean() / ed.mean()) if ew.size else nan,
            "ratio_max": float(ew.max() / ed.max()) if ew.size else nan,
            "nonfinite": int((~fin).sum())}


def study(*, seed: int = 0, **layer) -> list[dict]:
    """:func:`error_2d` for every m in :data:`TILES`, standard and alternative points
    (:data:`kernellab.topics.winograd.ALT_POINTS`), every dtype in :data:`DTYPES`, on the same layer
    (``layer``: N, C, K, H, W). Rows in that order."""
    rows = []
    for dt in DTYPES:
        for m in TILES:
            for pts in (None, ALT_POINTS[(m, 3)]):
                rows.append(error_2d(m, dt, pts, seed=seed, **layer))
    return rows


def plot_errors(rows: list[dict]):
    """Max (hollow marker) and mean (bar) absolute error of each (m, points) in ``rows``
    (:func:`study`), one panel per dtype, log scale, with the direct convolution in the same
    dtype as the first bar group. Returns the Figure."""
    from kernellab.plots import _plt

    plt = _plt()
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(11, 4), layout="constrained",
                             squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        mine = [r for r in rows if r["dtype"] == dt]
        labels = ["direct"]
        means = [mine[0]["direct_mean"]]
        maxes = [mine[0]["direct_max"]]
        colors = ["0.5"]
        for r in mine:
            labels.append(f"F({r['m']}×{r['m']})\n{r['points'][:3]}")
            means.append(r["winograd_mean"])
            maxes.append(r["winograd_max"])
            colors.append("tab:blue" if r["points"] == "standard" else "tab:orange")
        x = np.arange(len(labels))
        ax.bar(x, means, color=colors, alpha=0.8, label="mean |error|")
        ax.plot(x, maxes, "kv", mfc="none", label="max |error|")
        ax.set_yscale("log")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel("absolute error vs float64")
        ax.set_title(f"{dt}: blue standard points, orange alternative", fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return fig
