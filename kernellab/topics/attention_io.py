"""Chapter 5's IO-complexity study: the global-memory (HBM) traffic of materialised attention and
of FlashAttention-2, counted by the sim tier, against the laws of Dao et al. 2022, Theorem 2.

For one head of sequence length N and head dimension d, with an SRAM (shared-memory) budget of
M bytes per thread block, Theorem 2 of Dao, Fu, Ermon, Rudra & Ré, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness" (NeurIPS 2022, arXiv:2205.14135) says::

    standard (materialised) attention   Theta(N d + N^2)       HBM accesses
    FlashAttention                      Theta(N^2 d^2 / M)     for d <= M <= N d

``kernellab.kernels.attention_cuda`` v2 re-reads every K/V block once per Q block of Br rows,
and Br grows in proportion to M (:func:`~kernellab.kernels.attention_cuda.flash_block_sizes`),
so the bytes *beyond the compulsory traffic* (Q, K, V read once, O and the logsumexp written
once: :func:`compulsory_bytes`) are ``2 N d s (T_r - 1)``, T_r = ceil(N / Br): slope 2 against N
and -1 against M on a log-log plot, up to the ``- 1``. The ``- 1`` bends the local slopes away
from the law by at most ``1 / (T_r - 1)`` (:func:`slope_bias_bound`), so a least-squares slope
over points with T_r >= T lies within ``1 / (T - 1)`` of 2 (or -1), on the far side of zero.

* :func:`tile_grid` — which (Q block, K/V block) tiles v2 skips, masks or runs whole;
* :func:`compulsory_bytes`, :func:`loglog_slope`, :func:`slope_bias_bound` — the pieces of the
  law;
* :func:`count_bytes` — one kernel run on the sim tier, its counted global bytes;
* :func:`measure` — the chapter's study: v1 and v2 across N, v2 across M, with fitted slopes;
* :func:`plot_io` — the log-log chart; :func:`plot_tile_grid` — the causal tile map.

Counts are in bytes, summed over every launch of a call (``global_load_bytes`` +
``global_store_bytes``: each access counted, the L2 view; ``dram_*``: each 32-byte sector once
per launch, the sim model's perfect L2). They equal
:func:`~kernellab.kernels.attention_cuda.flash_bytes_predicted` and
:func:`~kernellab.kernels.attention_cuda.materialised_bytes_predicted` exactly
(``tests/test_kernellab/kernels/test_attention_cuda_ladder.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SKIPPED", "DIAGONAL", "FULL", "CHAPTER_D", "CHAPTER_DTYPE", "CHAPTER_NS",
           "CHAPTER_BLOCKS", "CHAPTER_N_FOR_M", "tile_grid", "compulsory_bytes", "budget_bytes",
           "loglog_slope", "slope_bias_bound", "count_bytes", "measure", "plot_io",
           "plot_tile_grid"]

#: :func:`tile_grid` codes: a tile v2 never loads, one it masks (it straddles the diagonal),
#: one it runs without a mask.
SKIPPED, DIAGONAL, FULL = 0, 1, 2

#: The chapter's study: head dimension, dtype, sequence lengths, Br = Bc of the budgets swept
#: (M = the shared bytes of those tiles) and the N at which M is swept. Small, because the
#: simulator interprets every thread (v2's cost grows as N^2 d); every N a multiple of 16 and
#: of every Br, so v1's tiles and v2's blocks have no tails and the counts are pure
#: polynomials in N; T_r = N / Br >= 8 at every point, so the slopes sit within 1/7 of the law.
CHAPTER_D = 16
CHAPTER_DTYPE = "float32"
CHAPTER_NS = (32, 64, 96, 128)
CHAPTER_BLOCKS = (4, 8, 16)
CHAPTER_N_FOR_M = 128


def tile_grid(N: int, Br: int, Bc: int, causal: bool = True) -> np.ndarray:
    """(T_r, T_c) int array, T_r = ceil(N / Br), T_c = ceil(N / Bc): for Q block i (rows
    i Br ...) and K/V block j (rows j Bc ...), :data:`SKIPPED` if v2 never loads the K/V block
    for that Q block (causal and its first key comes after the Q block's last row),
    :data:`DIAGONAL` if it is loaded and masked (its last key comes after the Q block's first
    row), :data:`FULL` otherwise. Without ``causal`` every tile is FULL. The same tests as the
    kernel's (``attention_cuda.flash_kernel``). Raises ValueError for N, Br or Bc < 1."""
    if min(N, Br, Bc) < 1:
        raise ValueError(f"N, Br and Bc must be >= 1, got {N}, {Br}, {Bc}")
    Tr, Tc = -(-N // Br), -(-N // Bc)
    grid = np.full((Tr, Tc), FULL, dtype=np.int8)
    if not causal:
        return grid
    for i in range(Tr):
        q0 = i * Br
        q_last = min(N, q0 + Br) - 1
        for j in range(Tc):
            k0 = j * Bc
            k_last = min(N, k0 + Bc) - 1
            if k0 > q_last:
                grid[i, j] = SKIPPED
            elif k_last > q0:
                grid[i, j] = DIAGONAL
    return grid


def compulsory_bytes(N: int, d: int, itemsize: int, heads: int = 1) -> int:
    """Bytes every exact attention forward pass with a saved logsumexp must move through global
    memory: Q, K and V read once and O written once (N d ``itemsize`` bytes each) and the
    float32 logsumexp written once (4 N), per head, times ``heads`` (= B H)."""
    return heads * (4 * N * d * itemsize + 4 * N)


def budget_bytes(Br: int, d: int, dtype) -> int:
    """The shared-memory budget M, bytes, at which v2 picks Br = Bc = ``Br`` (a power of two
    <= ``attention_cuda.MAX_BLOCK``): exactly the bytes of its Q, K and V tiles."""
    from kernellab.kernels import attention_cuda as ac

    M = ac.flash_shared_bytes(Br, Br, d, dtype)
    if ac.flash_block_sizes(d, dtype, M) != (Br, Br):
        raise ValueError(f"no budget gives Br = Bc = {Br} (a power of two <= {ac.MAX_BLOCK})")
    return M


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x (numpy.polyfit, degree 1): the exponent p of
    y ~ x^p. ``x`` and ``y``: sequences of positive numbers, same length >= 2."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.size < 2 or (x <= 0).any() or (y <= 0).any():
        raise ValueError("need two or more positive (x, y) pairs")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def slope_bias_bound(T_min: int) -> float:
    """How far a log-log slope of v2's bytes beyond the compulsory, 2 N d s (T_r - 1), can sit
    from the law's 2 (against N) or -1 (against M) when every point has T_r >= ``T_min``: the
    local slope against N is 1 + T_r / (T_r - 1) = 2 + 1 / (T_r - 1), against Br (and M) it
    is -T_r / (T_r - 1) = -1 - 1 / (T_r - 1); a least-squares slope is a positively weighted
    mean of such slopes. Exact when Br divides N; ValueError if T_min < 2."""
    if T_min < 2:
        raise ValueError("the bound needs at least two Q blocks")
    return 1.0 / (T_min - 1)


def _qkv(N, d, dtype, seed, heads=1):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, heads, N, d)).astype(dtype) for _ in range(3))


def count_bytes(version: str, N: int, d: int, dtype="float32", *, causal: bool = False,
                Br: int | None = None, Bc: int | None = None, smem_bytes: int | None = None,
                seed: int = 0) -> dict:
    """Run ``attention_cuda`` ``version`` ("v1_materialised" or "v2_flash2") once on random
    (1, 1, N, d) inputs of ``dtype`` on the sim tier and return its counters summed over its
    launches: {"load", "store", "total"} (global bytes, every access), {"dram"} (DRAM bytes
    read + written, each sector once a launch), {"kv"} (bytes of K and V loaded), and for v2
    {"Br", "Bc"}. ``Br``/``Bc``/``smem_bytes`` go to v2 (ignored by v1). Raises RuntimeError
    off the sim tier (the counters exist only there), KeyError for an unknown version."""
    import kernellab

    if kernellab.TIER != "sim":
        raise RuntimeError(f"byte counts need the sim tier; this process runs on {kernellab.TIER}"
                           " (set KERNELLAB_DEVICE=sim before importing kernellab)")
    from numba import cuda

    from kernellab import sim
    from kernellab.kernels import attention_cuda as ac

    f = ac.LADDER[version]
    dt = np.dtype(dtype)
    kw = {}
    out = {}
    if version == "v2_flash2":
        if Br is None or Bc is None:
            br, bc = ac.flash_block_sizes(d, dt, smem_bytes)
            Br, Bc = (br if Br is None else Br), (bc if Bc is None else Bc)
        kw = {"Br": Br, "Bc": Bc}
        out.update(Br=Br, Bc=Bc)
    Q, K, V = (cuda.to_device(x) for x in _qkv(N, d, dt, seed))
    with sim.capture() as cap:
        f(Q, K, V, cuda.device_array((1, 1, N, d), dt), causal, **kw)
    t = cap.total()
    kv = sum(a["load_elements"] for s in cap.launches for a in s.arrays
             if a["name"] in ("K", "V")) * dt.itemsize
    out.update(load=t["global_load_bytes"], store=t["global_store_bytes"],
               total=t["global_load_bytes"] + t["global_store_bytes"],
               dram=t["dram_read_bytes"] + t["dram_write_bytes"], kv=kv)
    return out


def measure(Ns=CHAPTER_NS, blocks=CHAPTER_BLOCKS, *, N_for_M: int = CHAPTER_N_FOR_M,
            d: int = CHAPTER_D, dtype=CHAPTER_DTYPE, seed: int = 0) -> dict:
    """The chapter's measurement on the sim tier (non-causal, one head):

    * v1 (materialised) at every N in ``Ns``;
    * v2 at every N in ``Ns`` with the smallest budget, M = :func:`budget_bytes` (min(blocks));
    * v2 at ``N_for_M`` with each budget M of ``blocks`` (Br = Bc = each).

    Returns {"d", "dtype", "itemsize", "rows", "slopes", "T_min", "bias_bound"}: ``rows`` a list
    of dicts {"version", "sweep" ("N" or "M"), "N", "M" (bytes; None for v1), "Br", "T_r",
    "load", "store", "total", "dram", "compulsory", "excess" (= total - compulsory)}, bytes;
    ``slopes`` the least-squares log-log slopes {"v1_total_vs_N", "v2_total_vs_N",
    "v2_excess_vs_N", "v2_excess_vs_M"}; ``T_min`` the fewest Q blocks of any v2 point and
    ``bias_bound`` = :func:`slope_bias_bound` (T_min). Raises RuntimeError off the sim tier."""
    dt = np.dtype(dtype)
    s = dt.itemsize
    M_small = budget_bytes(min(blocks), d, dt)
    rows = []

    def row(version, sweep, N, M):
        c = count_bytes(version, N, d, dt, smem_bytes=M, seed=seed)
        comp = compulsory_bytes(N, d, s)
        Br = c.get("Br")
        return {"version": version, "sweep": sweep, "N": N, "M": M, "Br": Br,
                "T_r": -(-N // Br) if Br else None, "load": c["load"], "store": c["store"],
                "total": c["total"], "dram": c["dram"], "compulsory": comp,
                "excess": c["total"] - comp}

    for N in Ns:
        rows.append(row("v1_materialised", "N", N, None))
    for N in Ns:
        rows.append(row("v2_flash2", "N", N, M_small))
    for Br in blocks:
        M = budget_bytes(Br, d, dt)
        done = [r for r in rows if r["version"] == "v2_flash2" and r["N"] == N_for_M
                and r["M"] == M]
        rows.append(dict(done[0], sweep="M") if done else row("v2_flash2", "M", N_for_M, M))

    def pick(version, sweep):
        return [r for r in rows if r["version"] == version and r["sweep"] == sweep]

    v1, v2n, v2m = pick("v1_materialised", "N"), pick("v2_flash2", "N"), pick("v2_flash2", "M")
    slopes = {
        "v1_total_vs_N": loglog_slope([r["N"] for r in v1], [r["total"] for r in v1]),
        "v2_total_vs_N": loglog_slope([r["N"] for r in v2n], [r["total"] for r in v2n]),
        "v2_excess_vs_N": loglog_slope([r["N"] for r in v2n], [r["excess"] for r in v2n]),
        "v2_excess_vs_M": loglog_slope([r["M"] for r in v2m], [r["excess"] for r in v2m]),
    }
    T_min = min(r["T_r"] for r in v2n + v2m)
    return {"d": d, "dtype": dt.name, "itemsize": s, "rows": rows, "slopes": slopes,
            "T_min": T_min, "bias_bound": slope_bias_bound(T_min)}


def plot_io(study: dict):
    """Two log-log panels of :func:`measure`'s ``study``, bytes on y. Left, against N: v1's
    counted total, v2's counted total and its bytes beyond the compulsory, the compulsory bytes,
    and dashed reference lines of slope 2 through v1's and v2's first points. Right, against
    M (bytes) at the swept N: v2's bytes beyond the compulsory and the law 6 N^2 d^2 s^2 / M
    (Br ~ M / (3 d s), each of the N / Br passes over K and V moving 2 N d s bytes). Fitted
    slopes in the legends. Returns the Figure."""
    from kernellab.plots import _plt

    plt = _plt()
    rows, sl = study["rows"], study["slopes"]
    d, s = study["d"], study["itemsize"]
    v1 = [r for r in rows if r["version"] == "v1_materialised"]
    v2n = [r for r in rows if r["version"] == "v2_flash2" and r["sweep"] == "N"]
    v2m = [r for r in rows if r["version"] == "v2_flash2" and r["sweep"] == "M"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    N1 = np.array([r["N"] for r in v1], dtype=float)
    N2 = np.array([r["N"] for r in v2n], dtype=float)
    ax1.plot(N1, [r["total"] for r in v1], "o-", color="tab:red",
             label=f"v1 materialised, total (slope {sl['v1_total_vs_N']:.2f})")
    ax1.plot(N2, [r["total"] for r in v2n], "s-", color="tab:blue",
             label=f"v2 flash, total, M = {v2n[0]['M']} B (slope {sl['v2_total_vs_N']:.2f})")
    ax1.plot(N2, [r["excess"] for r in v2n], "s--", color="tab:blue", mfc="none",
             label=f"v2 beyond the compulsory (slope {sl['v2_excess_vs_N']:.2f})")
    ax1.plot(N2, [r["compulsory"] for r in v2n], ":", color="0.4",
             label="compulsory: Q, K, V, O once + lse (slope 1)")
    for series, color in ((v1, "tab:red"), (v2n, "tab:blue")):
        y0 = series[0]["total"]
        ax1.plot(N2, y0 * (N2 / N2[0]) ** 2, color=color, lw=0.8, alpha=0.4)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("sequence length N")
    ax1.set_ylabel("global bytes (counted on the sim tier)")
    ax1.set_title(f"against N (d = {d}, {study['dtype']}); faint lines: slope 2", fontsize=9)
    ax1.legend(fontsize=7, loc="upper left")
    M = np.array([r["M"] for r in v2m], dtype=float)
    N = v2m[0]["N"]
    ax2.plot(M, [r["excess"] for r in v2m], "s-", color="tab:blue",
             label=f"v2 beyond the compulsory (slope {sl['v2_excess_vs_M']:.2f})")
    ax2.plot(M, 6 * N**2 * d**2 * s**2 / M, "--", color="0.3",
             label="law: 6 N² d² s² / M (slope −1)")
    for r in v2m:
        ax2.annotate(f"Br = {r['Br']}", (r["M"], r["excess"]), textcoords="offset points",
                     xytext=(4, 4), fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("shared-memory budget M per block, bytes")
    ax2.set_title(f"against M (N = {N})", fontsize=9)
    ax2.legend(fontsize=7, loc="upper right")
    return fig


_KIND_COLORS = {SKIPPED: "0.92", DIAGONAL: "tab:orange", FULL: "tab:blue"}


def plot_tile_grid(N: int, Br: int, Bc: int, ax=None):
    """Draw :func:`tile_grid` (N, Br, Bc, causal=True) on the (query, key) plane: each tile a
    rectangle of its true size (tails included) coloured skipped / diagonal / full, and the
    diagonal key = query. Returns the Axes."""
    from matplotlib.patches import Patch, Rectangle

    from kernellab.plots import _plt

    if ax is None:
        _, ax = _plt().subplots(figsize=(4.5, 4.5), layout="constrained")
    g = tile_grid(N, Br, Bc, True)
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            h, w = min(Br, N - i * Br), min(Bc, N - j * Bc)
            ax.add_patch(Rectangle((j * Bc, i * Br), w, h, fc=_KIND_COLORS[int(g[i, j])],
                                   ec="white", lw=1.2))
    ax.plot([0, N], [0, N], color="k", lw=0.8)
    ax.set_xlim(0, N)
    ax.set_ylim(N, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("key j (K/V blocks of Bc)")
    ax.set_ylabel("query i (Q blocks of Br)")
    counts = {k: int((g == k).sum()) for k in (SKIPPED, DIAGONAL, FULL)}
    ax.legend(handles=[Patch(fc=_KIND_COLORS[k], label=f"{name}: {counts[k]}")
                       for k, name in ((SKIPPED, "skipped"), (DIAGONAL, "diagonal, masked"),
                                       (FULL, "full, no mask"))],
              fontsize=7, loc="upper right")
    ax.set_title(f"causal tiles, N = {N}, Br = {Br}, Bc = {Bc}", fontsize=9)
    return ax
