"""Chapter 4 (chapters/04_winograd.ipynb): the claims the notebook's figures and prose make that
no other test checks.

* Section 4's error study: the chapter calls ``winograd_error.study(seed=4)`` and states that,
  with the standard points, the error grows with the tile in FP32 and FP16; that F(2x2, 3x3) is
  about as accurate as the direct sum; that the alternative points are worse at every size,
  one-sided 0..4 for F(4x4) worse than the standard F(6x6), overflowing in FP16; in 1-D, that
  the ratio to the direct error rises with m and lies within a factor of 2 of
  winograd_error.REFERENCE_1D_RATIOS. The chart draws exactly the study's numbers.
* Section 3: Winograd's magnitude term (winograd.abs_bound) exceeds |X| ⋆ |W| and grows with m.
* Section 6, at the chapter's sizes: the non-fused Winograd moves fewer bytes through L2 than
  the direct kernel but several times its DRAM bytes.

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

from kernellab.topics import winograd_error as WE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "chapters" / "04_winograd.ipynb"
STUDY_CALL = "winograd_error.study(seed=4)"


def cells(kind: str) -> list[str]:
    return rules.cells(NOTEBOOK, kind)


@pytest.fixture(scope="module")
def study():
    assert any(STUDY_CALL in src for src in cells("code")), \
        f"the chapter no longer calls {STUDY_CALL}: update this test with it"
    return WE.study(seed=4)


def _row(rows, dtype, m, points):
    (r,) = [r for r in rows if r["dtype"] == dtype and r["m"] == m and r["points"] == points]
    return r


@pytest.mark.parametrize("dtype", WE.DTYPES)
def test_error_grows_with_the_tile_for_the_standard_points(study, dtype):
    means = [_row(study, dtype, m, "standard")["winograd_mean"] for m in WE.TILES]
    maxes = [_row(study, dtype, m, "standard")["winograd_max"] for m in WE.TILES]
    assert means == sorted(means) and means[0] < means[-1] / 4, means
    assert maxes[0] < maxes[1] and maxes[0] < maxes[2], maxes


@pytest.mark.parametrize("dtype", WE.DTYPES)
def test_f2x2_is_about_as_accurate_as_direct(study, dtype):
    assert _row(study, dtype, 2, "standard")["ratio_mean"] < 1.5


@pytest.mark.parametrize("dtype", WE.DTYPES)
def test_alternative_points_are_worse(study, dtype):
    for m in WE.TILES:
        std, alt = _row(study, dtype, m, "standard"), _row(study, dtype, m, "alternative")
        assert alt["winograd_mean"] > 2 * std["winograd_mean"], (m, std, alt)
    assert _row(study, dtype, 4, "alternative")["winograd_mean"] > \
        _row(study, dtype, 6, "standard")["winograd_mean"]


def test_one_sided_points_overflow_in_fp16_only(study):
    assert _row(study, "float16", 4, "alternative")["nonfinite"] > 0
    assert all(r["nonfinite"] == 0 for r in study if r["dtype"] == "float32")
    assert all(r["nonfinite"] == 0 for r in study if r["points"] == "standard")


def test_error_chart_draws_the_study(study):
    fig = WE.plot_errors(study)
    assert len(fig.axes) == len(WE.DTYPES)
    for ax, dtype in zip(fig.axes, WE.DTYPES):
        mine = [r for r in study if r["dtype"] == dtype]
        heights = [p.get_height() for p in ax.patches]
        assert heights == [mine[0]["direct_mean"]] + [r["winograd_mean"] for r in mine]
        (markers,) = ax.get_lines()
        assert list(markers.get_ydata()) == [mine[0]["direct_max"]] + \
            [r["winograd_max"] for r in mine]


@pytest.mark.parametrize("dtype", WE.DTYPES)
def test_1d_ratios_rise_with_m_and_sit_near_the_anchors(dtype):
    ratios = [WE.error_1d(m, dtype)["ratio_mean"] for m in WE.TILES]
    assert ratios == sorted(ratios), ratios
    for m, r in zip(WE.TILES, ratios):
        anchor = WE.REFERENCE_1D_RATIOS[(m, dtype)]
        assert anchor / 2 <= r <= 2 * anchor, (m, r, anchor)


def test_winograd_magnitude_term_grows_with_the_tile():
    from kernellab.topics import winograd
    from reference_kernels.conv import conv2d_abs

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 5, 7, 9)).astype(np.float32)
    Wt = rng.standard_normal((3, 5, 3, 3)).astype(np.float32)
    base = conv2d_abs(X, Wt)
    med = [float(np.median(winograd.abs_bound(X, Wt, m) / base)) for m in (2, 4, 6)]
    assert 1 < med[0] < med[1] < med[2], med


@pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
def test_sim_section_traffic_claims():
    from kernellab import sim
    from kernellab.kernels import conv_cuda

    src = "\n".join(cells("code"))
    assert "NS, CS, KS, HS = 1, 8, 8, 16" in src, "the chapter's sim-tier layer changed"
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    Wt = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    tot = {}
    for name, f in conv_cuda.LADDER.items():
        with sim.capture() as cap:
            f(X, Wt, np.empty((1, 8, 16, 16), np.float32))
        tot[name] = cap.total()
    d, w = tot["v1_direct"], tot["v2_winograd_nonfused"]
    l2 = lambda t: t["global_load_sectors"] + t["global_store_sectors"]      # noqa: E731
    dram = lambda t: t["dram_read_bytes"] + t["dram_write_bytes"]            # noqa: E731
    assert l2(w) < l2(d)
    assert dram(w) > 4 * dram(d)
