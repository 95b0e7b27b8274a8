"""Chapter 3 (chapters/03_reductions_softmax_norms.ipynb): the claims the notebook's figures
make that no other test checks.

* The precision plot: the chapter draws ``summation.measure(CHAPTER_NS, seed=CHAPTER_SEED)``
  with ``summation.plot_errors``; every measured error it shows sits under the Higham bound it
  draws at the same n. The arguments come from ``kernellab.topics.summation`` (not a copy of them),
  and the notebook is checked to make that very call.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import notebook_rules as rules  # noqa: E402

from kernellab.topics import summation as S  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[2] / "chapters" / "03_reductions_softmax_norms.ipynb"
#: the call the chapter's precision plot makes (a change here must be a change there)
PRECISION_CALL = "summation.measure(summation.CHAPTER_NS, seed=summation.CHAPTER_SEED)"
def cells(kind: str) -> list[str]:
    return rules.cells(NOTEBOOK, kind)


def test_precision_plot_errors_sit_under_the_bounds_it_draws():
    assert any(PRECISION_CALL in src for src in cells("code")), \
        f"the chapter no longer calls {PRECISION_CALL}: update this test with it"
    rows = S.measure(S.CHAPTER_NS, seed=S.CHAPTER_SEED)
    assert {r["n"] for r in rows} == set(S.CHAPTER_NS)
    for r in rows:
        assert math.isfinite(r["rel_error"]), r              # FP16 data scaled: no overflow
        assert r["rel_error"] <= r["bound"], r
    fig = S.plot_errors(rows)
    checked = 0
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for m in S.METHODS:
            markers = lines[m]
            bl = lines.get(f"{m} bound")
            bound = dict(zip(bl.get_xdata(), bl.get_ydata())) if bl is not None else {}
            for n, err in zip(markers.get_xdata(), markers.get_ydata()):
                if n in bound:                                # no line where the bound is inf
                    assert err <= bound[n], (ax.get_title(), m, n, err, bound[n])
                    checked += 1
    assert checked >= len(S.CHAPTER_NS) * len(S.DTYPES) * 2   # at least pairwise and numpy
