"""Pictures the chapters and labs share. matplotlib is imported lazily (COURSE.md §3).

* :func:`blis_blocking` — the BLIS loop structure: which panel of A and B is packed, which
  MR x NR tile of C the micro-kernel holds (Van Zee & van de Geijn, "BLIS", ACM TOMS 41(3),
  2015, Fig. 1; Goto & van de Geijn, ACM TOMS 34(3), 2008).
* :func:`roofline` — attainable FLOP/s = min(peak, intensity x bandwidth) with measured points
  (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009).
* :func:`loop_order_access` — which elements of B, and which cache lines, one run of the
  innermost loop touches in the ijk and the ikj loop orders.
* :func:`rate_vs_size` — achieved FLOP/s of several kernels against the problem size.
"""

from __future__ import annotations


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() in ("", "agg") or not _interactive():
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _interactive() -> bool:
    try:
        from IPython import get_ipython

        return get_ipython() is not None
    except ImportError:
        return False


def blis_blocking(M=12, N=16, K=10, mc=6, nc=8, kc=4, mr=2, nr=4):
    """Draw C (M x N) = A (M x K) @ B (K x N) with one nc-wide/kc-deep panel of B, one mc x kc
    block of A, and one mr x nr register tile of C highlighted. Units are matrix elements.

    Returns the matplotlib Figure.
    """
    plt = _plt()
    from matplotlib.patches import Rectangle

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6),
                             gridspec_kw={"width_ratios": [K, N, N]})
    specs = [
        ("A  (M x K)", K, M, [((0, 0), kc, mc, "#f4a261", "mc x kc block\n(packed, L2)"),
                              ((0, 0), kc, mr, "#e76f51", "mr sliver")]),
        ("B  (K x N)", N, K, [((0, 0), nc, kc, "#2a9d8f", "kc x nc panel\n(packed, L3)"),
                              ((0, 0), nr, kc, "#264653", "kc x nr sliver\n(L1/L2)")]),
        ("C  (M x N)", N, M, [((0, 0), nc, mc, "#e9c46a", "mc x nc block"),
                              ((0, 0), nr, mr, "#d62828", "mr x nr tile\n(registers)")]),
    ]
    for ax, (title, w, h, rects) in zip(axes, specs):
        ax.add_patch(Rectangle((0, 0), w, h, fill=False, lw=1.5))
        for (x, y), rw, rh, color, label in rects:
            ax.add_patch(Rectangle((x, h - y - rh), rw, rh, color=color, alpha=0.85))
            ax.text(x + rw + 0.2, h - y - rh / 2, label, va="center", fontsize=8)
        ax.set_xlim(-0.5, w + 0.5)
        ax.set_ylim(-0.5, h + 0.5)
        ax.set_aspect("equal")
        ax.set_title(title)
        ax.axis("off")
    fig.suptitle("BLIS loops: jc (nc) → pc (kc, pack B) → ic (mc, pack A) → jr (nr) → ir (mr) "
                 "→ micro-kernel over kc", fontsize=10)
    fig.tight_layout()
    return fig


def loop_order_access(n: int = 8, line: int = 4):
    """B (n x n, row-major) as the innermost loop of C = A @ B reads it, for the loop orders
    ijk (inner loop over k: down a column of B) and ikj (inner loop over j: along a row).
    Cells are numbered in access order; a cache line holds ``line`` consecutive elements of a
    row, and the lines the run must bring in are shaded. Returns the Figure."""
    plt = _plt()
    from matplotlib.patches import Rectangle

    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    cases = [("ijk: for k: acc += A[i,k]*B[k,j]\nB read down a column (stride N)",
              [(k, 0) for k in range(n)]),
             ("ikj: for j: C[i,j] += A[i,k]*B[k,j]\nB read along a row (stride 1)",
              [(0, j) for j in range(n)])]
    for ax, (title, cells) in zip(axes, cases):
        touched = {(r, c // line) for r, c in cells}
        for r in range(n):
            for c0 in range(0, n, line):
                hit = (r, c0 // line) in touched
                ax.add_patch(Rectangle((c0, n - r - 1), line, 1, facecolor="#8ecae6" if hit
                                       else "white", edgecolor="k", lw=1.5))
                for c in range(c0 + 1, c0 + line):
                    ax.plot([c, c], [n - r - 1, n - r], color="0.8", lw=0.6)
        for order, (r, c) in enumerate(cells):
            ax.text(c + 0.5, n - r - 0.5, str(order), ha="center", va="center", fontsize=9)
        ax.set_xlim(0, n)
        ax.set_ylim(0, n)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"{title}\n{len(touched)} cache lines for {len(cells)} multiply-adds",
                     fontsize=9)
    fig.suptitle(f"one run of the innermost loop over B ({n} x {n}; boxes: cache lines of "
                 f"{line} elements)", fontsize=10)
    fig.tight_layout()
    return fig


def roofline(peak_flops: float, bandwidth: float, points: dict[str, tuple[float, float]],
             *, title: str = "Roofline", ceilings: dict[str, float] | None = None):
    """Log-log roofline. ``points``: name -> (arithmetic intensity FLOP/byte, achieved FLOP/s).
    ``ceilings``: extra horizontal lines (e.g. the BLAS's measured rate). Returns the Figure."""
    import numpy as np

    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    ai = np.logspace(-2, 3, 200)
    ax.loglog(ai, np.minimum(peak_flops, ai * bandwidth) / 1e9, "k-", lw=2,
              label=f"roofline: peak {peak_flops / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.1f} GB/s")
    styles = ["--", ":", "-.", (0, (5, 1, 1, 1))]
    for i, (name, level) in enumerate((ceilings or {}).items()):
        # named in the legend: text on the plot would collide with the roof or the points
        ax.axhline(level / 1e9, ls=styles[i % len(styles)], lw=1, color="gray",
                   label=f"ceiling: {name} ({level / 1e9:.0f} GFLOP/s)")
    markers = "osD^vP*X"  # points at the same place stay distinguishable
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.loglog([x], [y / 1e9], markers[i % len(markers)], ms=7, alpha=0.85,
                  label=f"{name}: {y / 1e9:.1f} GFLOP/s")
    ax.axvline(peak_flops / bandwidth, color="gray", lw=0.8, ls=":",
               label=f"ridge point: {peak_flops / bandwidth:.1f} FLOP/byte")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # hides no point
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def rate_vs_size(series: dict[str, tuple[list, list]], *, title: str = "GFLOP/s against N",
                 xlabel: str = "N  (M = N = K)", ceilings: dict[str, float] | None = None):
    """Achieved GFLOP/s against problem size, one line per kernel.

    ``series``: name -> (sizes, FLOP/s at those sizes); ``ceilings``: name -> FLOP/s drawn as
    dashed horizontal lines (e.g. the nominal peak). Log-2 x axis, log y axis. Returns the Figure.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    for name, (sizes, rates) in series.items():
        ax.plot(sizes, [r / 1e9 for r in rates], "o-", ms=4, label=name)
    for name, level in (ceilings or {}).items():
        ax.axhline(level / 1e9, ls="--", lw=1, color="gray")
        ax.text(0.01, level / 1e9 * 1.08, name, fontsize=8, color="gray",
                transform=ax.get_yaxis_transform())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({s for sizes, _ in series.values() for s in sizes})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
