"""Chapter 5 (chapters/05_flash_attention.ipynb): the claims the notebook's figures and prose make
that no other test checks (the kernels' correctness and their byte formulas against the
counters: tests/test_kernellab/kernels/test_attention_cuda_ladder.py).

* Section 4, the slope test: the chapter calls ``attention_io.measure(attention_io.CHAPTER_NS,
  attention_io.CHAPTER_BLOCKS)``; v2's counted bytes beyond the compulsory traffic follow
  Theta(N^2 d^2 / M) — log-log slope 2 against N and -1 against M — within the bound the "- 1"
  of 2 N d s (T_r - 1) allows (derived, not fitted: ``attention_io.slope_bias_bound``); v1's and
  v2's totals grow as N^2, less the linear share of their smallest point; at the smallest
  budget v2 moves about as many bytes as v1; DRAM bytes: v2 exactly the compulsory ones, v1
  those plus 16 N^2. The chart draws exactly the study's numbers and the law.
* Section 3: the tile map classifies tiles as the kernel does (its K/V bytes are the visited
  tiles'), and causal masking reads K and V (T + 1) / (2T) as often.
* Section 2: bigger budgets, smaller d and narrower dtypes give bigger blocks.
* Section 5: a kernel exactly as accurate as the baseline uses half of the rule's budget.
* Section 2 (issue 18): v2's scores are a local frame of exactly 4 Bc bytes in ptxas's report
  (and in the resource table the chapter prints), d = 128 spills, Lab 5's GPU shape is
  register-limited, and the 48 KiB static shared-memory limit is what forces 32 x 32 tiles at
  d = 128 in float16.
* Section 7 (issue 20, the tensor-core kernel): the two pictures it draws are one layout (S's
  accumulator fragments are P's A fragment, lane by lane) and the quad's two shuffles reach the
  row max; v2's default blocks at the section's d and dtype are the tensor-core kernel's, so the
  global traffic it calls equal is the same formula; the profile's tensor-core peak over its
  shared-memory bandwidth is the 16 rows a warp owns; ptxas keeps the kernel's fragments in
  registers (no local frame, no spills). Its correctness and counters:
  tests/test_kernellab/kernels/test_attention_tc.py.
* Section 6: the tiled backward with recomputation equals the materialised gradient in float64,
  which equals finite differences; on float16 inputs (float32 arithmetic) it meets the forward's
  rule, under half its budget; in float32 throughout the rule can be stricter than it.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import notebook_rules as rules  # noqa: E402
import pytest  # noqa: E402

import kernellab  # noqa: E402
from kernellab.topics import attention_backward as AB  # noqa: E402
from kernellab.topics import attention_io as AIO  # noqa: E402
from kernellab import numerics  # noqa: E402
from kernellab.kernels import attention_cuda as ac  # noqa: E402
from kernellab.kernels import attention_tc as tc  # noqa: E402
from reference_kernels.attention import attention_golden  # noqa: E402
from kernellab import sim  # noqa: E402
from kernellab.sim import ptx  # noqa: E402
from kernellab.sim.resources import occupancy, resource_table  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[2] / "chapters" / "05_flash_attention.ipynb"
STUDY_CALL = "attention_io.measure(attention_io.CHAPTER_NS, attention_io.CHAPTER_BLOCKS)"
sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")


@pytest.fixture(scope="module")
def study():
    assert any(STUDY_CALL in src for src in rules.cells(NOTEBOOK, "code")), \
        f"the chapter no longer calls {STUDY_CALL}: update this test with it"
    return AIO.measure(AIO.CHAPTER_NS, AIO.CHAPTER_BLOCKS)


def _rows(study, version, sweep):
    return [r for r in study["rows"] if r["version"] == version and r["sweep"] == sweep]


def _linear_share(total, N):
    """Share of the linear term in a count a N^2 + b N at N (from the count at N and 2N)."""
    bN = (4 * total(N) - total(2 * N)) / 2
    return bN / total(N)


# ----------------------------------------------------------------------------------------------
# section 4: the slopes
# ----------------------------------------------------------------------------------------------

@sim_only
def test_flash_bytes_follow_n2_d2_over_m(study):
    """v2's bytes beyond Q, K, V, O and lse once are 2 N d s (T_r - 1): the local slope is
    2 + 1/(T_r - 1) against N and -1 - 1/(T_r - 1) against M (Br proportional to M), so a
    least-squares slope over points with T_r >= T_min lies in [2, 2 + 1/(T_min - 1)] and
    [-1 - 1/(T_min - 1), -1]: the tolerance is that bias, derived, on one side only."""
    sl, bias = study["slopes"], study["bias_bound"]
    assert study["T_min"] >= 8 and bias == pytest.approx(1 / (study["T_min"] - 1))
    assert 2.0 <= sl["v2_excess_vs_N"] <= 2.0 + bias, sl
    assert -1.0 - bias <= sl["v2_excess_vs_M"] <= -1.0, sl
    d, s = study["d"], study["itemsize"]
    for r in _rows(study, "v2_flash2", "N") + _rows(study, "v2_flash2", "M"):
        assert r["M"] == AIO.budget_bytes(r["Br"], d, study["dtype"])
        assert r["excess"] == 2 * r["N"] * d * s * (r["T_r"] - 1), r
        p = ac.flash_bytes_predicted(1, 1, r["N"], d, r["Br"], r["Br"], s)
        assert (r["load"], r["store"]) == (p["load"], p["store"])


@sim_only
def test_totals_grow_as_n_squared(study):
    """Both totals are a N^2 + b N (every N a multiple of 16 and of Br): the local slope is 2
    less the linear term's share, so the fit lies in [2 - share at the smallest N, 2]."""
    d, s = study["d"], study["itemsize"]
    v1, v2 = _rows(study, "v1_materialised", "N"), _rows(study, "v2_flash2", "N")
    Br = v2[0]["Br"]
    v1_total = lambda N: ac.materialised_bytes_predicted(1, 1, N, d, s)["total"]     # noqa: E731
    v2_total = lambda N: ac.flash_bytes_predicted(1, 1, N, d, Br, Br, s)["total"]  # noqa: E731
    for r in v1:
        assert r["total"] == v1_total(r["N"])
    n0 = min(AIO.CHAPTER_NS)
    for name, total in (("v1_total_vs_N", v1_total), ("v2_total_vs_N", v2_total)):
        share = _linear_share(total, n0)
        assert 0 < share < 0.25
        assert 2.0 - share <= study["slopes"][name] < 2.0, (name, study["slopes"][name], share)


@sim_only
def test_smallest_budget_moves_about_what_v1_moves(study):
    """The chapter: with M of the order of d^2 elements v2's traffic is of v1's order."""
    v1 = {r["N"]: r["total"] for r in _rows(study, "v1_materialised", "N")}
    for r in _rows(study, "v2_flash2", "N"):
        assert 0.8 <= r["total"] / v1[r["N"]] <= 1.25, r
        assert r["M"] / study["itemsize"] <= study["d"] ** 2


@sim_only
def test_dram_bytes(study):
    for r in study["rows"]:
        extra = 16 * r["N"] ** 2 if r["version"] == "v1_materialised" else 0
        assert r["dram"] == r["compulsory"] + extra, r


@sim_only
def test_chart_draws_the_study_and_the_law(study):
    fig = AIO.plot_io(study)
    ax1, ax2 = fig.axes
    v1, v2n = _rows(study, "v1_materialised", "N"), _rows(study, "v2_flash2", "N")
    v2m = _rows(study, "v2_flash2", "M")
    lines = {ln.get_label(): ln for ln in ax1.get_lines()}
    by_prefix = lambda ls, p: next(ln for k, ln in ls.items() if k.startswith(p))  # noqa: E731
    assert list(by_prefix(lines, "v1 materialised").get_ydata()) == [r["total"] for r in v1]
    assert list(by_prefix(lines, "v2 flash, total").get_ydata()) == [r["total"] for r in v2n]
    assert list(by_prefix(lines, "v2 beyond").get_ydata()) == [r["excess"] for r in v2n]
    assert f"{study['slopes']['v2_excess_vs_N']:.2f}" in by_prefix(lines, "v2 beyond").get_label()
    lines2 = {ln.get_label(): ln for ln in ax2.get_lines()}
    assert list(by_prefix(lines2, "v2 beyond").get_ydata()) == [r["excess"] for r in v2m]
    d, s, N = study["d"], study["itemsize"], v2m[0]["N"]
    law = by_prefix(lines2, "law")
    assert np.allclose(law.get_ydata(), [6 * N**2 * d**2 * s**2 / r["M"] for r in v2m])
    # the law with no constant fitted against the counted bytes: exactly the ratio the counts
    # imply, excess / law = (T_r - 1) M / (3 N d s) = (T_r - 1) / T_r * M / (3 Br d s), the
    # first factor the "- 1" of the compulsory Q read, the second the Q tile's padding word
    for r, y in zip(v2m, law.get_ydata()):
        T_r = -(-N // r["Br"])
        want = (T_r - 1) / T_r * r["M"] / (3 * r["Br"] * d * s)
        assert r["excess"] / y == pytest.approx(want, rel=1e-12), (r, y, want)


def test_slope_helpers():
    x = np.array([3.0, 7.0, 20.0])
    assert AIO.loglog_slope(x, 5 * x**2) == pytest.approx(2.0)
    assert AIO.loglog_slope(x, 1 / x) == pytest.approx(-1.0)
    for bad in (([1.0], [1.0]), ([1.0, 2.0], [1.0, 0.0]), ([1.0, 2.0], [1.0])):
        with pytest.raises(ValueError):
            AIO.loglog_slope(*bad)
    with pytest.raises(ValueError):
        AIO.slope_bias_bound(1)
    # the bias bound holds for the exact excess at every T_r >= T_min, against N and Br
    for T_min in (2, 3, 8):
        b = AIO.slope_bias_bound(T_min)
        Br = 4
        Ns = [Br * T for T in range(T_min, T_min + 6)]
        sN = AIO.loglog_slope(Ns, [N * (N // Br - 1) for N in Ns])
        assert 2.0 <= sN <= 2.0 + b
        Brs = [2, 4, 8]
        N = Brs[-1] * T_min
        sB = AIO.loglog_slope(Brs, [N // br - 1 for br in Brs])
        assert -1.0 - b <= sB <= -1.0
    assert AIO.compulsory_bytes(10, 16, 2, heads=3) == 3 * (4 * 10 * 16 * 2 + 40)
    with pytest.raises(ValueError):
        AIO.budget_bytes(3, 16, "float32")                   # not a power of two


def test_count_bytes_needs_the_sim_tier(monkeypatch):
    monkeypatch.setattr(kernellab, "TIER", "gpu")
    with pytest.raises(RuntimeError, match="sim tier"):
        AIO.count_bytes("v2_flash2", 8, 16)


# ----------------------------------------------------------------------------------------------
# section 3: the tile map and causal masking
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("N, Br, Bc", [(100, 16, 16), (100, 32, 8), (33, 8, 32), (1, 4, 4),
                                       (128, 16, 16), (45, 16, 8)])
def test_tile_grid_is_the_kernels(N, Br, Bc):
    """The tiles the map calls visited are exactly the K/V bytes the kernel's formula (equal to
    the counters: test_attention_cuda) moves; masked tiles straddle the diagonal."""
    g = AIO.tile_grid(N, Br, Bc, True)
    rows = sum(min(Bc, N - j * Bc) for i, j in zip(*np.nonzero(g != AIO.SKIPPED)))
    assert ac.flash_bytes_predicted(1, 1, N, 16, Br, Bc, 4, True)["kv"] == 2 * rows * 16 * 4
    for i, j in np.ndindex(g.shape):
        qs = np.arange(i * Br, min(N, (i + 1) * Br))
        ks = np.arange(j * Bc, min(N, (j + 1) * Bc))
        masked = ks[None, :] > qs[:, None]
        want = AIO.SKIPPED if masked.all() else AIO.DIAGONAL if masked.any() else AIO.FULL
        assert g[i, j] == want, (i, j)
    assert (AIO.tile_grid(N, Br, Bc, False) == AIO.FULL).all()
    with pytest.raises(ValueError):
        AIO.tile_grid(0, Br, Bc)


@pytest.mark.parametrize("T", [1, 2, 8, 13])
def test_causal_reads_k_and_v_t_plus_1_over_2t_as_often(T):
    full = ac.flash_bytes_predicted(1, 1, 16 * T, 16, 16, 16, 4, False)["kv"]
    causal = ac.flash_bytes_predicted(1, 1, 16 * T, 16, 16, 16, 4, True)["kv"]
    assert causal / full == (T + 1) / (2 * T)


def test_tile_grid_plot_counts():
    ax = AIO.plot_tile_grid(100, 32, 8)
    g = AIO.tile_grid(100, 32, 8)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [f"skipped: {(g == AIO.SKIPPED).sum()}",
                      f"diagonal, masked: {(g == AIO.DIAGONAL).sum()}",
                      f"full, no mask: {(g == AIO.FULL).sum()}"]
    assert len(ax.patches) == g.size


# ----------------------------------------------------------------------------------------------
# sections 2 and 5
# ----------------------------------------------------------------------------------------------

def test_bigger_budget_smaller_d_narrower_dtype_bigger_blocks():
    budgets = (8 * 1024, 16 * 1024, 32 * 1024, ac.DEFAULT_SMEM_BYTES)
    ds = (16, 32, 64, 128)
    br = {(d, dt, M): ac.flash_block_sizes(d, dt, M)[0]
          for d in ds for dt in ("float32", "float16") for M in budgets}
    for d in ds:
        for M in budgets:
            assert br[d, "float16", M] >= br[d, "float32", M]
            for M2 in budgets:
                if M2 > M:
                    assert br[d, "float32", M2] >= br[d, "float32", M]
            for d2 in ds:
                if d2 > d:
                    assert br[d2, "float32", M] <= br[d, "float32", M]
    # and where MAX_BLOCK does not cap it, double the budget is double Br
    assert br[128, "float32", 16 * 1024] == 2 * br[128, "float32", 8 * 1024]


def test_as_accurate_as_the_baseline_is_half_the_budget():
    ref = np.linspace(-1, 1, 50)
    err = 1e-4
    out = ref + err * np.sign(np.sin(np.arange(50)))
    rule = numerics.MeasuredBaseline(err, kappa=2.0, floor=0.0)
    assert numerics.compare(out, ref, rule, tile=None).budget_used == pytest.approx(0.5)
    floored = numerics.MeasuredBaseline(err, kappa=2.0, floor=1e-6)
    assert numerics.compare(out, ref, floored, tile=None).budget_used < 0.5


# ----------------------------------------------------------------------------------------------
# section 6: the backward pass
# ----------------------------------------------------------------------------------------------

def _inputs(N, d, seed):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((N, d)).astype(np.float32) for _ in range(4))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_materialised_gradient_matches_finite_differences(causal):
    Q, K, V, dO = _inputs(13, 8, seed=3)
    grads = AB.attention_backward(Q, K, V, dO, causal)
    h = 1e-6
    rng = np.random.default_rng(0)
    for which in range(3):
        for _ in range(3):
            i, t = rng.integers(13), rng.integers(8)
            E = np.zeros((13, 8))
            E[i, t] = h
            L = []
            for sgn in (1, -1):
                args = [x.astype(np.float64) for x in (Q, K, V)]
                args[which] = args[which] + sgn * E
                O, _ = attention_golden(*(a[None, None] for a in args), causal)
                L.append(float((O[0, 0] * dO).sum()))
            fd = (L[0] - L[1]) / (2 * h)
            assert abs(fd - grads[which][i, t]) < 1e-7 * max(1.0, abs(fd)), (which, i, t)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, Br, Bc", [(45, 16, 8), (45, 8, 16), (1, 4, 4), (32, 32, 32)])
def test_tiled_backward_in_float64_is_the_materialised_gradient(causal, N, Br, Bc):
    Q, K, V, dO = _inputs(N, 16, seed=N + Br)
    O, lse = attention_golden(Q[None, None], K[None, None], V[None, None], causal)
    golden = AB.attention_backward(Q, K, V, dO, causal)
    f64 = AB.flash_attention_backward(Q, K, V, O[0, 0], dO, lse[0, 0], Br, Bc, causal,
                                      dtype=np.float64)
    for g, a in zip(golden, f64):
        assert np.abs(a - g).max() <= 1e-12 * max(1.0, np.abs(g).max())


def _rule_f16(Q, K, V, dO, causal, Br, Bc):
    """The chapter's section 6: float16 inputs, O rounded to float16, lse float32; the tiled
    backward in float32 against 2 x the plain float16 materialised gradient's error + one ulp."""
    O, lse = attention_golden(Q[None, None], K[None, None], V[None, None], causal)
    golden = AB.attention_backward(Q, K, V, dO, causal)
    plain = AB.attention_backward(Q, K, V, dO, causal, dtype=np.float16)
    tiled = AB.flash_attention_backward(Q, K, V, O[0, 0].astype(np.float16), dO,
                                        lse[0, 0].astype(np.float32), Br, Bc, causal)
    out = []
    for g, p, t in zip(golden, plain, tiled):
        assert t.dtype == np.float32
        floor = float(numerics.ulp(np.array(np.abs(g).max()), np.float16))
        rule = numerics.MeasuredBaseline(float(np.abs(p.astype(np.float64) - g).max()),
                                         kappa=2.0, floor=floor)
        out.append(numerics.compare(t.astype(np.float16), g, rule, tile=None))
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, Br, Bc", [(45, 16, 8), (45, 8, 16), (32, 32, 32), (100, 16, 16)])
@pytest.mark.parametrize("seed", [0, 1])
def test_tiled_backward_meets_the_rule_in_float16(causal, N, Br, Bc, seed):
    """(N = 1 is left out: every exact dQ and dK is 0 there, and so the rule's floor; the
    tiled D = rowsum(dO o O) leaves rounding noise where P o dP cancels exactly.)"""
    Q, K, V, dO = (x.astype(np.float16) for x in _inputs(N, 16, seed=N + Br + seed))
    for r in _rule_f16(Q, K, V, dO, causal, Br, Bc):
        assert r.ok, r.message
        assert r.budget_used < 0.5


def test_float32_baseline_is_stricter_than_the_recomputation():
    """The chapter: in float32 throughout the tiled gradient can exceed twice a float32
    materialised baseline's error (found with the seeds of the float16 test above)."""
    Q, K, V, dO = _inputs(45, 16, seed=45 + 16)
    O, lse = attention_golden(Q[None, None], K[None, None], V[None, None], True)
    golden = AB.attention_backward(Q, K, V, dO, True)
    plain = AB.attention_backward(Q, K, V, dO, True, dtype=np.float32)
    tiled = AB.flash_attention_backward(Q, K, V, O[0, 0], dO, lse[0, 0], 16, 8, True)
    over = [np.abs(t - g).max() > 2 * np.abs(p - g).max()
            + float(numerics.ulp(np.array(np.abs(g).max()), np.float32))
            for g, p, t in zip(golden, plain, tiled)]
    assert any(over)


def test_backward_checks_its_arguments():
    Q, K, V, dO = _inputs(4, 8, seed=0)
    with pytest.raises(ValueError, match="share one"):
        AB.attention_backward(Q, K[:3], V, dO)
    with pytest.raises(ValueError, match="Br and Bc"):
        AB.flash_attention_backward(Q, K, V, Q, dO, np.zeros(4), 0, 4)
    with pytest.raises(ValueError, match="share one"):
        AB.flash_attention_backward(Q[None], K, V, Q, dO, np.zeros(4), 4, 4)


def test_chapter_sizes_keep_the_simulator_cheap():
    """Section 4's sizes: every N a multiple of 16 and of each Br (no tails: the counts are pure
    polynomials), the budgets within Theorem 2's range d <= M <= N d (in elements)."""
    for N in AIO.CHAPTER_NS:
        assert N % 16 == 0 and all(N % br == 0 for br in AIO.CHAPTER_BLOCKS)
    s = np.dtype(AIO.CHAPTER_DTYPE).itemsize
    elements = {br: AIO.budget_bytes(br, AIO.CHAPTER_D, AIO.CHAPTER_DTYPE) / s
                for br in AIO.CHAPTER_BLOCKS}
    smallest = elements[min(AIO.CHAPTER_BLOCKS)]              # the N sweep's budget
    assert AIO.CHAPTER_D <= smallest <= min(AIO.CHAPTER_NS) * AIO.CHAPTER_D
    for M in elements.values():                               # the M sweep's, at N_for_M
        assert AIO.CHAPTER_D <= M <= AIO.CHAPTER_N_FOR_M * AIO.CHAPTER_D


# ----------------------------------------------------------------------------------------------
# issue 18: the scores live in local memory; registers, occupancy and the 48 KiB limit
# ----------------------------------------------------------------------------------------------

_ptx_ok, _ptx_why = ptx.ptx_available() if kernellab.TIER == "sim" else (False, "not sim")
needs_ptxas = pytest.mark.skipif(not _ptx_ok, reason=f"no GPU compile here: {_ptx_why}")


def _flash_resources(d, dtype, Br=None):
    """(Br, Bc, KernelResources, resource_table text) of v2 launched at head dimension d."""
    Q = np.random.default_rng(d).standard_normal((1, 1, 4, d)).astype(dtype)
    with sim.capture() as cap:
        ac.attention_v2(Q, Q, Q, np.empty_like(Q), Br=Br, Bc=Br)
    (stats,) = cap.launches
    assert stats.resources is not None, stats.resources_note
    br, bc = (Br, Br) if Br else ac.flash_block_sizes(d, dtype)
    assert stats.block == (br, 1, 1)
    return br, bc, stats.resources, resource_table(cap)


@sim_only
@needs_ptxas
@pytest.mark.parametrize("d, dtype, Br", [(16, np.float32, 16), (64, np.float16, None),
                                          (128, np.float16, None)],
                         ids=["section-2", "lab5-gpu-shape", "d128-fp16"])
def test_flash_scores_are_a_local_frame_of_4_bc_bytes(d, dtype, Br):
    """ptxas puts the score array ``sc`` (indexed with a runtime bound) in local memory: a
    frame of exactly 4 Bc bytes while nothing spills, and the table the chapter prints shows it;
    at d = 128 the registers reach 255 and ptxas spills on top of the frame."""
    br, bc, res, table = _flash_resources(d, dtype, Br)
    row = next(ln.split() for ln in table.splitlines()
               if ln.startswith("flash2_fwd") and ln.split()[1] == str(br))
    assert int(row[3]) == res.stack_frame_bytes
    if d < ac.D_MAX:
        assert (res.spill_store_bytes, res.spill_load_bytes) == (0, 0)
        assert res.stack_frame_bytes == 4 * bc
        assert res.registers < 255
    else:
        assert res.registers == 255 and res.spill_store_bytes > 0
        assert res.stack_frame_bytes > 4 * bc             # the scores and the spill slots


@sim_only
@needs_ptxas
def test_lab5_gpu_shape_is_register_limited():
    """Section 2: at Lab 5's GPU shape (its d and dtype, the default blocks) registers limit
    the warps an SM holds on an A100 (cc 8.0): as many whole blocks as the register file holds
    at ptxas's register count, allocated per warp in units of 256 from each of the 4
    sub-partitions' quarter of the 65536 registers (CUDA Occupancy Calculator,
    cuda_occupancy.h), fewer than the 64 warps the SM could hold."""
    from grader.labs.flash_attention.spec import GPU_SHAPE, PERF_DTYPE

    from kernellab.sim import resources as kres

    br, _, res, _ = _flash_resources(GPU_SHAPE[3], np.dtype(PERF_DTYPE))
    occ = occupancy(res, br, cc=(8, 0))
    assert occ.limiter == "registers"
    warps = -(-br // 32)
    per_warp = -(-res.registers * 32 // kres.REGISTER_ALLOCATION_UNIT) \
        * kres.REGISTER_ALLOCATION_UNIT
    lim = kres.SM_LIMITS[(8, 0)]
    warps_per_part = lim.registers_per_sm // kres.SUB_PARTITIONS // per_warp
    blocks = warps_per_part * kres.SUB_PARTITIONS // warps
    assert blocks >= 1
    assert occ.blocks_per_sm == blocks and occ.warps_per_sm == blocks * warps
    assert occ.max_warps_per_sm == 64 and occ.warps_per_sm < occ.max_warps_per_sm


def test_static_shared_limit_forces_br_32_at_d128_fp16():
    """Section 2: 48 KiB of static shared memory holds v2 to 32 x 32 tiles at d = 128 in
    float16 (64 x 64 miss it by the padding); the opt-in maximum a block may have on cc 8.0
    (kernellab.sim.resources, 163 KiB) would take 128 x 128; the chapter says so and reads
    that maximum from kernellab.sim.resources."""
    from kernellab.sim.resources import SM_LIMITS

    opt_in = SM_LIMITS[(8, 0)].max_shared_per_block_optin
    assert ac.flash_block_sizes(ac.D_MAX, np.float16) == (32, 32)
    assert ac.flash_shared_bytes(64, 64, ac.D_MAX, np.float16) > ac.DEFAULT_SMEM_BYTES
    assert ac.flash_shared_bytes(ac.MAX_BLOCK, ac.MAX_BLOCK, ac.D_MAX, np.float16) <= opt_in
    assert any("max_shared_per_block_optin" in c for c in rules.cells(NOTEBOOK, "code"))
    prose = " ".join(" ".join(rules.cells(NOTEBOOK, "markdown")).split())
    assert "Br = Bc = 32 at d = 128 in float16" in prose
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in prose


# ----------------------------------------------------------------------------------------------
# section 7 (issue 20): FlashAttention-2 on tensor cores
# ----------------------------------------------------------------------------------------------

SECTION7_D, SECTION7_DTYPE = 64, np.float16


def test_section7_runs_the_tensor_core_kernel_at_its_d():
    code = "\n".join(rules.cells(NOTEBOOK, "code"))
    assert "attention_tc.attention_tc" in code and "N7, D7 = 72, 64" in code
    assert "qkv((1, 1, N7, D7), F16)" in code


def test_section7_pictures_are_one_layout_and_the_quad_reaches_the_max():
    """The figure: for the 16 keys of two accumulator tiles, the lane holding S[r, c] (C
    layout) is the lane holding P[r, c] (A layout), each row is held by the 4 lanes of one quad
    (rows g and g + 8), and max over lane ^ 1 then lane ^ 2 gives all four the row max."""
    from kernellab.sim.mma import a_coords, c_coords

    s_lane = np.full((16, 16), -1)
    p_lane = np.full((16, 16), -1)
    for lane in range(32):
        for tile in (0, 1):
            for r, c in c_coords(lane):
                s_lane[r, 8 * tile + c] = lane
        for r, c in a_coords(lane):
            p_lane[r, c] = lane
    assert (s_lane == p_lane).all() and (s_lane >= 0).all()
    for r in range(16):
        assert set(s_lane[r]) == {4 * (r % 8) + t for t in range(4)}
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = list(rng.standard_normal(4))
        for mask in (1, 2):
            x = [max(x[i], x[i ^ mask]) for i in range(4)]
        assert len(set(x)) == 1


def test_section7_same_blocks_same_global_traffic():
    """'The global sectors and DRAM bytes are equal': at the section's d and dtype v2's
    default blocks are the tensor-core kernel's (Br, Bc), and the kernel's loads and stores are
    v2's formula at those blocks (test_attention_tc checks it against the counters)."""
    assert ac.flash_block_sizes(SECTION7_D, SECTION7_DTYPE) == tc.tc_block_sizes(SECTION7_D)


def test_section7_balance_is_the_rows_a_warp_owns():
    """A warp's FLOP per shared byte is its 16 rows (2 x 2 x 16 x Bc x d FLOP for 2 x Bc x d
    float16 elements); the A100 profile's FP16 tensor-core peak over its shared-memory
    bandwidth is the same number, within 1% (the chapter: 'sits at that balance point'); the
    tensor-core peak is 16 times the FP32 one."""
    from kernellab.sim import model

    p = model.get_profile("a100")
    _, bc = tc.tc_block_sizes(SECTION7_D)
    per_byte = (2 * 2 * tc.ROWS * bc * SECTION7_D) / (2 * bc * SECTION7_D * 2)
    assert per_byte == tc.ROWS == 16
    balance = p.fp16_tensor_flops / (p.shared_bytes_per_s_per_sm * p.sm_count)
    assert balance == pytest.approx(per_byte, rel=0.01)
    assert p.fp16_tensor_flops / p.fp32_flops == pytest.approx(16.0)


@sim_only
@needs_ptxas
def test_section7_fragments_live_in_registers():
    """ptxas: no local frame and no spills for the tensor-core kernel at the section's d (and
    at every head dimension it takes)."""
    for d in tc.HEAD_DIMS:
        Q = np.zeros((1, 1, 1, d), np.float16)
        with sim.capture() as cap:
            tc.attention_tc(Q, Q, Q, np.empty_like(Q))
        res = cap.launches[0].resources
        assert res is not None, cap.launches[0].resources_note
        assert (res.stack_frame_bytes, res.spill_store_bytes, res.spill_load_bytes) == (0, 0, 0)
        assert res.registers < 255
