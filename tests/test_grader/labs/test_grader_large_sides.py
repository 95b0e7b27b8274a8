"""Sizes past every blocking: a kernel whose code path changes with the problem size (a last
partial panel dropped past 512 columns, a grid capped at 9 x 9 tiles, K summed only up to
1536) is correct on small cases and on the timed size; each lab's visible cases now reach
past such limits in one dimension at a time, and these known-wrong submissions fail exactly
there. Graded on those cases and one small one (a partial grading keeps the test cheap).
Each case carries its own lab's marker."""

from __future__ import annotations

import pytest

from grader.runner import grade
from known import Folder  # tests/known.py: where each known submission is

SUBS = Folder()  # "<lab_module>/<name>.py"

#: lab, submission, the visible cases that must fail, a small case that must pass
LARGE = [
    ("gemm-cpu", "gemm_cpu/drops_last_column_panel.py",
     {"3x1100x5 float32", "3x1100x5 float64"}, "31x33x65 float32"),
    ("gemm-cuda", "gemm_cuda/grid_capped.py", {"1x2000x3", "2000x1x3"}, "17x17x17"),
    ("npu-matmul", "npu_matmul/k_capped.py", {"20x24x2100"}, "15x17x31"),
]


@pytest.mark.parametrize("lab, sub, large, small", [
    pytest.param(*x, id=x[1], marks=getattr(pytest.mark, x[0].replace("-", "_"))) for x in LARGE])
def test_a_kernel_that_changes_past_some_size_fails_the_large_cases(lab, sub, large, small):
    names = large | {small}
    rep = grade(lab, SUBS / sub, run_performance=False, only=lambda c: c.name in names)
    got = {c.case: c for c in rep.cases}
    assert set(got) == names, sorted(got)
    assert {n for n, c in got.items() if not c.passed} == large, rep.to_text()
