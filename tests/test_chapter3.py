"""Chapter 3 (chapters/03_reductions_softmax_norms.ipynb): the claims the notebook's figures
make that no other test checks.

* The precision plot: the chapter draws ``summation.measure(CHAPTER_NS, seed=CHAPTER_SEED)``
  with ``summation.plot_errors``; every measured error it shows sits under the Higham bound it
  draws at the same n. The arguments come from ``kernellab.summation`` (not a copy of them),
  and the notebook is checked to make that very call.
* Every number the chapter shows is computed when it runs: its code cells hard-code no
  measured figure (no float literal with more than two significant digits, no number with a
  unit of speed, time or share in a string), and its prose quotes none either.
"""

from __future__ import annotations

import io
import json
import math
import re
import tokenize
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from kernellab import summation as S  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "chapters" / "03_reductions_softmax_norms.ipynb"
#: the call the chapter's precision plot makes (a change here must be a change there)
PRECISION_CALL = "summation.measure(summation.CHAPTER_NS, seed=summation.CHAPTER_SEED)"
#: a number followed by a unit of a measurement: speed, time, share, ulps, speedup
MEASURED = re.compile(r"(?<![\w.^/])\d+(?:\.\d+)?(?:e[-+]?\d+)?\s*"
                      r"(?:GB/s|TB/s|GFLOP/s|µs|us\b|ms\b|ns\b|%|ulps?\b|x (?:faster|speedup))")


def cells(kind: str) -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_notebook_is_committed_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert c.get("outputs") == [] and c.get("execution_count") is None


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


def _literals(src: str):
    """(kind, text) of the number and string tokens of a code cell."""
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NUMBER:
            yield "number", tok.string
        elif tok.type == tokenize.STRING:
            yield "string", tok.string
        elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):   # Python 3.12+
            yield "string", tok.string


def _significant_digits(text: str) -> int:
    mantissa = text.lower().replace("_", "").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if mantissa else 0


def test_code_cells_hard_code_no_measured_figure():
    bad = []
    for i, src in enumerate(cells("code")):
        for kind, text in _literals(src):
            if kind == "number":
                is_float = any(ch in text.lower() for ch in ".e") and not text.lower().startswith("0x")
                if is_float and _significant_digits(text) > 2:
                    bad.append((i, text))
            else:
                plain = re.sub(r"\{[^{}]*\}", "", text)   # f-string fields are computed
                bad += [(i, m.group(0)) for m in MEASURED.finditer(plain)]
    assert not bad, f"code cells hard-code figures (cell index, literal): {bad}"


def test_prose_quotes_no_measured_figure():
    bad = [(i, m.group(0)) for i, src in enumerate(cells("markdown"))
           for m in MEASURED.finditer(src)]
    assert not bad, f"markdown cells quote figures the code could contradict: {bad}"
