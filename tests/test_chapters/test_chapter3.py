"""Chapter 3 (chapters/03_reductions_softmax_norms.ipynb): the claims the notebook's figures
make that no other test checks.

* The precision plot: the chapter draws ``summation.measure(CHAPTER_NS, seed=CHAPTER_SEED)``
  with ``summation.plot_errors``; every measured error it shows sits under the Higham bound it
  draws at the same n. The arguments come from ``kernellab.topics.summation`` (not a copy of them),
  and the notebook is checked to make that very call.

* Issue 18: v2's bank-conflict degrees as its comment states them equal the simulator's bank
  counter, stride by stride; the ladder's, softmax's and norms' machine code as the chapter
  reads its resource tables (ptxas via the sim tier); Harris's quoted table is self-consistent;
  the two-pass variance is the most accurate method of the chapter's demo.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import notebook_rules as rules  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kernellab  # noqa: E402
from kernellab import sim  # noqa: E402
from kernellab.kernels import norms_cuda, reduce_cuda, softmax_cuda  # noqa: E402
from kernellab.sim import ptx  # noqa: E402
from kernellab.sim.resources import occupancy  # noqa: E402
from kernellab.sim.trace import bank_counts  # noqa: E402
from kernellab.topics import summation as S  # noqa: E402
from kernellab.topics import welford  # noqa: E402

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


# ----------------------------------------------------------------------------------------------
# issue 18: what the chapter says of the ladder's bank conflicts, machine code and anchors
# ----------------------------------------------------------------------------------------------

sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
_ptx_ok, _ptx_why = ptx.ptx_available() if kernellab.TIER == "sim" else (False, "not sim")
needs_ptxas = pytest.mark.skipif(not _ptx_ok, reason=f"no GPU compile here: {_ptx_why}")


def _v2_degrees_counted() -> dict:
    """{s: wavefronts} of v2's tree reads in one block, from the simulator's bank counter (a
    request at stride s reads the words 2 s k or 2 s k + s of its lanes k; one lane: s = 128)."""
    kern = reduce_cuda.KERNELS["v2_interleaved_strided"]
    src, first = inspect.getsourcelines(kern.py_func)
    line = first + next(i for i, s in enumerate(src) if "+= sdata[" in s)
    x = np.random.default_rng(3).standard_normal(reduce_cuda.BLOCK).astype(np.float32)
    with sim.capture(trace=True) as cap:
        kern[1, reduce_cuda.BLOCK](x, np.zeros(1, np.float32))
    tr = cap.launches[0].trace
    reqs, _, counts = bank_counts(tr, kind="r", line=line)
    rows = tr[(tr["space"] == "s") & (tr["kind"] == "r") & (tr["line"] == line)]
    out = {}
    for rq, wave in zip(reqs, counts.max(axis=1)):
        words = np.unique(rows["addr"][rows["request"] == rq]) // 4
        s = int(words[1] - words[0]) // 2 if len(words) > 1 else reduce_cuda.BLOCK // 2
        out[s] = max(out.get(s, 0), int(wave))
    return out


@sim_only
def test_v2_conflict_degrees_the_kernel_states_are_the_counted_ones():
    """The v2 kernel's comment, ``v2_conflict_degrees`` and the bank counter agree stride by
    stride (2, 4, 8, 8, 8, 4, 2, 1: not (2s mod 32)), and the chapter prints both."""
    src = inspect.getsource(reduce_cuda.KERNELS["v2_interleaved_strided"].py_func)
    comment = " ".join(ln.strip().lstrip("#") for ln in src.splitlines()
                       if ln.strip().startswith("#"))
    m = re.search(r"a ([\d, ]+)-way conflict at s = 1 \.\.\. 128", " ".join(comment.split()))
    assert m, "the v2 kernel no longer states its conflict degrees: update this test"
    stated = [int(t) for t in m.group(1).split(",")]
    closed = reduce_cuda.v2_conflict_degrees()
    assert list(closed) == [1 << k for k in range(8)]
    assert stated == list(closed.values())
    assert _v2_degrees_counted() == closed
    assert any("reduce_cuda.v2_conflict_degrees()" in c for c in cells("code"))


def _resources(cap):
    out = []
    for s in cap.launches:
        assert s.resources is not None, s.resources_note
        bx, by, bz = s.block
        out.append((s.name, bx * by * bz, s.resources))
    return out


@sim_only
@needs_ptxas
def test_ladder_kernels_keep_everything_in_registers_and_are_thread_limited():
    """Section 4's reading of the resource table: no local frame, no spills, and every
    256-thread kernel limited by threads per SM (the zeroing kernel by blocks per SM)."""
    x = np.random.default_rng(0).standard_normal(2 * reduce_cuda.BLOCK).astype(np.float32)
    with sim.capture() as cap:
        for launch in reduce_cuda.LADDER.values():
            launch(x, np.zeros(1, np.float32))
    rows = _resources(cap)
    assert {n for n, _, _ in rows} >= {k.py_func.__name__ for k in reduce_cuda.KERNELS.values()}
    for name, tpb, res in rows:
        assert (res.stack_frame_bytes, res.spill_store_bytes, res.spill_load_bytes) == (0, 0, 0)
        want = "threads" if tpb == reduce_cuda.BLOCK else "blocks"
        assert occupancy(res, tpb).limiter == want, (name, res)


@sim_only
@needs_ptxas
def test_softmax_and_norm_kernels_need_no_frame_and_some_are_register_limited():
    X = np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32)
    with sim.capture() as cap:
        for launch in softmax_cuda.LADDER.values():
            launch(X, np.empty_like(X))
        norms_cuda.layernorm(X, None, None, np.empty_like(X))
        norms_cuda.rmsnorm(X, None, np.empty_like(X))
    rows = _resources(cap)
    assert all(res.stack_frame_bytes == 0 for _, _, res in rows)
    limiters = [occupancy(res, tpb).limiter for _, tpb, res in rows]
    assert limiters.count("registers") >= 2, limiters


def test_harris_anchors_are_consistent_with_his_problem_size():
    """The quoted table: each bandwidth is 4 bytes x 2^22 elements over its time (to the
    table's 4 digits), kernel 1 at 2.4% of the G80's 86.4 GB/s and kernel 7 at 72.5%."""
    assert sorted(reduce_cuda.HARRIS_G80) == list(range(1, 8))
    for k, (t, bw) in reduce_cuda.HARRIS_G80.items():
        assert bw == pytest.approx(4 * reduce_cuda.HARRIS_N / t, rel=2e-3), k
    peak = reduce_cuda.HARRIS_G80_PEAK_BYTES_PER_S
    assert round(100 * reduce_cuda.HARRIS_G80[1][1] / peak, 1) == 2.4
    assert round(100 * reduce_cuda.HARRIS_G80[7][1] / peak, 1) == 72.5
    mapped = [k for k in reduce_cuda.HARRIS_KERNEL.values() if k is not None]
    assert 6 not in mapped and sorted(mapped) == [1, 2, 3, 4, 5, 7]
    assert set(reduce_cuda.HARRIS_KERNEL) == set(reduce_cuda.LADDER)


def test_two_pass_variance_is_the_most_accurate_of_the_chapters_methods():
    """Section 8: a two-pass variance over an on-chip row beats every one-pass method in the
    chapter's own float32 demo (mean 1e4), by orders of magnitude over Welford."""
    errs = welford.cancellation_demo(n=4096, mean=1e4, std=1.0, seed=1).rel_errors
    assert errs["two-pass"] == min(errs.values())
    assert errs["Welford"] > 100 * errs["two-pass"], errs
