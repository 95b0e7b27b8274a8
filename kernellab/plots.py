"""Pictures the chapters and labs share. matplotlib is imported lazily.

* :func:`blis_blocking` — the BLIS loop structure: which panel of A and B is packed, which
  MR x NR tile of C the micro-kernel holds (Van Zee & van de Geijn, "BLIS", ACM TOMS 41(3),
  2015, Fig. 1; Goto & van de Geijn, ACM TOMS 34(3), 2008).
* :func:`roofline` — attainable FLOP/s = min(peak, intensity x bandwidth) with measured points
  (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009).
* :func:`loop_order_access` — which elements of B, and which cache lines, one run of the
  innermost loop touches in the ijk and the ikj loop orders.
* :func:`rate_vs_size` — achieved FLOP/s of several kernels against the problem size.
* :func:`winograd_tiles` — the output tiles of Winograd F(m x m, 3 x 3) on an image, partial
  tiles at odd edges, and one input tile with its overlap (Lavin & Gray, CVPR 2016, §4).

For the CUDA chapter, from a sim-tier trace (``kernellab.sim.capture(trace=True)``: the first
block's accesses, one row per element access with its thread, warp, lane, address and warp-level
request; the queries on it are :mod:`kernellab.sim.trace`):

* :func:`access_map` — which thread (or warp, lane; or how many accesses)
  touched each element of an array, optionally for one warp request with the 32-byte sectors it
  moves (CUDA C++ Programming Guide, "Device Memory Accesses");
* :func:`bank_heatmap` — distinct 4-byte words per shared-memory bank in
  each warp request: the bank conflicts (CUDA C++ Programming Guide, "Compute Capabilities",
  "Shared Memory" for compute capability 5.x and later: 32 banks of 4 bytes);
* :func:`roofline_levels` — a hierarchical roofline: one roof per memory level and, for each
  kernel, one point per level at the same performance (Yang, Kurth & Williams, "Hierarchical
  Roofline analysis for GPUs", Concurrency Computat. Pract. Exper. 32(20):e5547, 2020).
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


# ----------------------------------------------------------------------------------------------
# CUDA chapter: pictures from sim-tier traces
# ----------------------------------------------------------------------------------------------

def _n(count: int, noun: str) -> str:
    """'1 sector', '4 sectors'."""
    return f"{count} {noun}" + ("" if count == 1 else ("es" if noun.endswith("s") else "s"))



def access_map(trace, array, shape, *, by="lane", kind="r", space=None, warp=None,
               request=None, line=None, tid=None, sectors=None, annotate=None, itemsize=4,
               ax=None, title=None, label=None, window=None, vmax=None, categorical=False):
    """Draw :func:`kernellab.sim.trace.access_grid` as an image: colour = ``by`` of the
    accessing thread (grey: several different ones; white: untouched). Returns the Figure.

    ``sectors`` (default: on when ``request`` is given) shades the cells that share a 32-byte
    sector with an accessed one but were not asked for — bytes the memory system moves for
    nothing — and the title counts the sectors. ``annotate`` (a ``by`` name) writes that value
    in each cell (small arrays). ``itemsize``: bytes per element. ``ax``: draw into this Axes.
    ``window``: ``((row0, row1), (col0, col1))`` draws only that part (axis labels stay the
    array's indices). ``vmax``: top of the colour scale (to share one scale between panels).
    ``categorical``: one distinct colour per value present (for a few threads). Filters as in
    :func:`kernellab.sim.trace.access_grid`. The (windowed) grid drawn is
    ``ax.images[0].get_array()``.
    """
    import numpy as np

    plt = _plt()
    from matplotlib.colors import ListedColormap

    from kernellab.sim.trace import access_grid, sector_mask, select

    grid = access_grid(trace, array, shape, by=by, kind=kind, space=space, warp=warp,
                       request=request, line=line, tid=tid)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 5 * min(2.0, max(0.3, shape[0] / shape[1]))))
    fig = ax.figure
    sel = trace[select(trace, array, kind=kind, space=space, warp=warp, request=request,
                        line=line, tid=tid)]
    (r0, r1), (c0, c1) = window if window is not None else ((0, shape[0]), (0, shape[1]))
    extent = (c0 - 0.5, c1 - 0.5, r1 - 0.5, r0 - 0.5)
    shown = grid[r0:r1, c0:c1]
    finite = grid[np.isfinite(grid) & (grid >= 0)]
    if vmax is None:
        vmax = max(1.0, float(finite.max())) if finite.size else 1.0
    vmin = 1.0 if by == "count" else 0.0
    norm, ticks = None, None
    if categorical and finite.size:
        from matplotlib.colors import BoundaryNorm

        ticks = np.unique(finite)
        cmap = ListedColormap([plt.get_cmap("tab10")(i % 10) for i in range(len(ticks))])
        edges = np.concatenate([[ticks[0] - 0.5], (ticks[:-1] + ticks[1:]) / 2,
                                [ticks[-1] + 0.5]])
        norm = BoundaryNorm(edges, len(ticks))
    else:
        cmap = plt.get_cmap("viridis" if by != "count" else "magma_r")
    cmap = cmap.with_extremes(under="0.55", bad=(0.0, 0.0, 0.0, 0.0))
    # the grid is the Axes' first image (readers and tests can take it back); the sector
    # shading goes underneath it
    scale = {"norm": norm} if norm is not None else {"vmin": vmin,
                                                      "vmax": max(vmax, vmin + 1)}
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, interpolation="nearest",
                   aspect="auto", extent=extent, zorder=2, **scale)
    nsec = None
    if sectors is None:
        sectors = request is not None
    if sectors and len(sel):
        smask, nsec = sector_mask(trace, array, shape, sel, itemsize)
        moved = np.where(smask & np.isnan(grid), 1.0, np.nan)[r0:r1, c0:c1]
        ax.imshow(np.ma.masked_invalid(moved), cmap=ListedColormap(["#f4a261"]), vmin=0,
                  vmax=1, interpolation="nearest", aspect="auto", extent=extent, zorder=1)
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02, ticks=ticks,
                      extend="min" if (grid == -1).any() and norm is None else "neither")
    cb.set_label(label or (f"{by} of the accessing thread (grey: several)" if by != "count"
                           else "accesses per element"), fontsize=8)
    if annotate is not None:
        from matplotlib import patheffects

        outline = [patheffects.withStroke(linewidth=1.5, foreground="black")]
        ann = access_grid(trace, array, shape, by=annotate, kind=kind, space=space, warp=warp,
                          request=request, line=line, tid=tid)
        for (r, c), v in np.ndenumerate(ann[r0:r1, c0:c1]):
            if np.isfinite(v):
                ax.text(c0 + c, r0 + r, "*" if v < 0 else str(int(v)), ha="center", va="center",
                        fontsize=6, color="white", zorder=3, path_effects=outline)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    if title is None:
        what = {"r": "read", "w": "write", None: "access"}[kind]
        title = (f"{array}: {_n(int(np.isfinite(grid).sum()), 'element')}, "
                 f"{_n(len(sel), what)}")
        if nsec is not None:
            title += f", {_n(nsec, 'sector')}"
    ax.set_title(title, fontsize=9)
    return fig


def bank_heatmap(trace, *, array=None, kind="r", line=None, warp=None, itemsize=4, ax=None,
                 title=None, vmax=None):
    """Heat map of :func:`kernellab.sim.trace.bank_counts`: one row per shared-memory warp request
    (per phase of one, for 8- and 16-byte elements), one column per bank, colour = distinct
    words that row touches in that bank (1 everywhere: no conflict; a column of 32: a 32-way
    conflict). Returns the Figure; the title gives the wavefronts (sum of the row maxima)
    against the requests. ``vmax``: top of the colour scale (default: the largest count, at
    least 2). The counts drawn are
    ``ax.images[0].get_array()`` (0 shown blank)."""
    import numpy as np

    from kernellab.sim.trace import BANKS, bank_counts

    plt = _plt()
    reqs, warps, counts = bank_counts(trace, array=array, kind=kind, line=line, warp=warp,
                                      itemsize=itemsize)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 0.18 * max(len(reqs), 8) + 1.2))
    fig = ax.figure
    shown = np.where(counts > 0, counts, np.nan)
    cmap = plt.get_cmap("YlOrRd").with_extremes(bad="white")
    top = vmax if vmax is not None else max(2, int(counts.max()) if counts.size else 2)
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=0, vmax=top,
                   interpolation="nearest", aspect="auto")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).set_label("distinct words in the bank",
                                                                fontsize=8)
    ax.set_xlabel("bank")
    ax.set_ylabel("request (warp)")
    step = max(1, len(reqs) // 16)
    ax.set_yticks(range(0, len(reqs), step), [str(w) for w in warps[::step]])
    ax.set_xticks(range(0, BANKS, 4))
    wave = int(counts.max(axis=1).sum()) if len(reqs) else 0
    if title is None:
        title = f"{array or 'shared'}: {len(set(reqs.tolist()))} requests, {wave} wavefronts"
    ax.set_title(title, fontsize=9)
    return fig


def roofline_levels(peak_flops: float, bandwidths: dict, points: dict, *,
                    title: str = "Hierarchical roofline", ax=None):
    """A roofline with one roof per memory level (Yang, Kurth & Williams 2020).

    ``bandwidths``: level -> bytes/s (e.g. ``{"DRAM": 1.555e12, "L2": 7.2e12}``); each roof is
    ``min(peak_flops, intensity x bandwidth)``. ``points``: kernel -> ``(FLOP/s, {level:
    intensity})``, intensity in FLOP per byte *of that level's traffic*; a kernel's points sit
    at one height, joined by a dotted line, one colour per level, one marker per kernel.
    Returns the Figure.
    """
    import numpy as np

    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(9.5, 4.8))
    fig = ax.figure
    colours = {lv: f"C{i}" for i, lv in enumerate(bandwidths)}
    xs = [x for _, lv in points.values() for x in lv.values()]
    xs += [peak_flops / bw for bw in bandwidths.values()]
    lo = 10 ** np.floor(np.log10(min(xs) / 2))
    hi = 10 ** np.ceil(np.log10(max(xs) * 2))
    ai = np.logspace(np.log10(lo), np.log10(hi), 256)
    for lv, bw in bandwidths.items():
        ax.loglog(ai, np.minimum(peak_flops, ai * bw) / 1e9, "-", lw=2, color=colours[lv],
                  label=f"{lv} roof: {bw / 1e12:.2f} TB/s (ridge {peak_flops / bw:.2g} FLOP/B)")
    ax.axhline(peak_flops / 1e9, color="k", lw=0.8, ls="--",
               label=f"FP32 peak: {peak_flops / 1e12:.1f} TFLOP/s")
    markers = "osD^vP*X"
    for i, (name, (perf, lvs)) in enumerate(points.items()):
        m = markers[i % len(markers)]
        order = sorted(lvs, key=lvs.get)
        ax.plot([lvs[lv] for lv in order], [perf / 1e9] * len(order), ":", color="0.4", lw=1)
        for lv in order:
            ax.plot([lvs[lv]], [perf / 1e9], m, ms=8, color=colours.get(lv, "k"), mec="k",
                    mew=0.6, zorder=3)
        ax.plot([], [], m, color="0.7", mec="k", label=f"{name}: {perf / 1e9:,.0f} GFLOP/s")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the level's traffic)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def winograd_tiles(H: int = 7, W: int = 9, m: int = 2, r: int = 3, tile: tuple = (1, 1)):
    """The tiling of Winograd F(m x m, r x r) on an H x W image, stride 1, padding (r - 1) / 2:
    left, the output tiles (m x m; those that hang over the bottom or right edge dashed — only
    their inside part is written); right, the (m + r - 1)^2 input tile of output tile ``tile``
    (row, column) and of its right-hand neighbour, which overlap by r - 1 columns, over the
    image with its zero padding (Lavin & Gray, CVPR 2016, §4). Returns the figure."""
    import matplotlib.patches as mp

    plt = _plt()
    pad = (r - 1) // 2
    alpha = m + r - 1
    th, tw = -(-H // m), -(-W // m)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax in axes:
        ax.set_xlim(-pad - 1, tw * m + pad + 0.5)
        ax.set_ylim(th * m + pad + 0.5, -pad - 1)
        ax.set_aspect("equal")
        ax.set_xticks(range(W))
        ax.set_yticks(range(H))
        ax.add_patch(mp.Rectangle((-0.5, -0.5), W, H, fill=True, color="0.88", zorder=0))
    ax = axes[0]
    for ty in range(th):
        for tx in range(tw):
            partial = (ty + 1) * m > H or (tx + 1) * m > W
            ax.add_patch(mp.Rectangle((tx * m - 0.5, ty * m - 0.5), m, m, fill=False,
                                      ls="--" if partial else "-",
                                      color="tab:red" if partial else "tab:blue", lw=1.5))
    ax.set_title(f"{H}x{W} output (grey) in {th}x{tw} tiles of {m}x{m}\n"
                 "red dashed: partial tiles, written only inside")
    ax = axes[1]
    ax.add_patch(mp.Rectangle((-pad - 0.5, -pad - 0.5), W + 2 * pad, H + 2 * pad, fill=False,
                              ls=":", color="0.4"))
    ty, tx = tile
    for dx, color in ((0, "tab:green"), (1, "tab:orange")):
        x0 = (tx + dx) * m - pad - 0.5
        ax.add_patch(mp.Rectangle((x0, ty * m - pad - 0.5), alpha, alpha, fill=True, alpha=0.25,
                                  color=color))
        ax.add_patch(mp.Rectangle(((tx + dx) * m - 0.5, ty * m - 0.5), m, m, fill=False,
                                  color=color, lw=2))
    ax.set_title(f"input tiles ({alpha}x{alpha}) of output tiles {tile} and "
                 f"{(ty, tx + 1)}:\noverlap {r - 1} columns; dotted: the zero padding")
    fig.tight_layout()
    return fig
