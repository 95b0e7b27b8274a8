"""Grader self-tests for lab gemm-tensor-core (sim tier): the solution passes in budget with its
figures in the JSON, the untouched lab fails "not implemented", bfloat16 cases cross the worker
boundary, and the gpu rules judge their figures. Elsewhere: the known submissions' verdicts
(tests/test_grader/test_known_verdicts.py), chapter 2's tensor-core ladder bracketing every
threshold with the lab's own figures (chapter 2, section 18, under nbval) and the gpu-tier
measurement on the simulator (benchmarks/gpu_check.py --simulate, tests/test_benchmarks)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

import kernellab
from grader.labs.gemm_tensor_core import spec as lab

ROOT = Path(__file__).resolve().parents[4]
SOLUTION = ROOT / "solutions" / "02b_gemm_tensor_core.ipynb"
LAB = ROOT / "labs" / "02b_gemm_tensor_core.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the modelled verdicts are the sim tier's")

UTIL, SPEED, BANKS, OVERLAP = (lab.UTIL.name, lab.SPEED.name, lab.BANKS.name, lab.OVERLAP.name)


def test_solution_passes_in_budget_and_json_has_the_figures():
    t0 = time.perf_counter()
    r = cli("grade", "gemm-tensor-core", str(SOLUTION), "--json")
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 60, seconds        # the budget, 2 cores
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == 100
    assert d["cases_passed"] == d["cases_total"] == 2 * len(lab.VISIBLE_SHAPES) + len(lab.BIG_BF16)
    assert {c["params"]["dtype"] for c in d["cases"]} == {"float16", "bfloat16"}
    rules = {x["name"]: x for x in d["rules"]}
    assert [UTIL, SPEED, BANKS, OVERLAP] == list(rules)[:4]
    assert rules[lab.FROM_MMA.name]["measured"] == pytest.approx(1.0)
    assert all(x["passed"] for x in rules.values())
    # double buffering over 4 k-tiles of 32: 3 of 4 tiles' copies in flight across MMAs
    assert rules[OVERLAP]["measured"] == pytest.approx(75.0)
    assert rules[BANKS]["measured"] == pytest.approx(1.0)
    assert "mma.m16n8k16" in rules[UTIL]["detail"]
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("gemm-tensor-core", LAB)


def test_bfloat16_arrays_cross_the_worker_boundary(tmp_path):
    import ml_dtypes

    from grader import npz

    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    npz.save(tmp_path / "a.npz", {"A": x, "C": np.ones(2, np.float32)})
    back = npz.load(tmp_path / "a.npz")
    assert back["A"].dtype == x.dtype and np.array_equal(back["A"], x)
    assert back["C"].dtype == np.float32


def test_gpu_rules_flag_a_call_faster_than_cublas_allows():
    spec = lab.GemmTensorCore()
    base = {"tier": "gpu", "n": 4096, "gflops_cublas": [200000.0] * 5}
    honest = spec.perf_rules({**base, "gflops": [90000.0] * 5})
    assert all(r.passed for r in honest)
    cheat = spec.perf_rules({**base, "gflops": [90000.0] * 4 + [10 ** 7]})
    assert not cheat[1].passed and not cheat[1].scored
    slow = spec.perf_rules({**base, "gflops": [10000.0] * 5})
    assert not slow[0].passed
