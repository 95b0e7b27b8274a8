"""Grader self-tests for lab gemm-tensor-core (sim tier): the solution passes in budget with its
figures in the JSON, the untouched lab fails "not implemented", chapter 2's tensor-core ladder
brackets every threshold (the README's table), bfloat16 cases cross the worker boundary, and
the gpu-tier measurement runs (on the simulator, with a wall clock and a numpy stand-in for
cuBLAS). The known-wrong submissions' verdicts: tests/test_grader/test_known_verdicts.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kernellab
from grader.labs._cuda import launch_dict
from grader.labs.gemm_tensor_core import spec as lab
from grader.runner import recheck

ROOT = Path(__file__).resolve().parents[4]
KERNELLAB = Path(sys.executable).parent / "kernellab"
SOLUTION = ROOT / "solutions" / "02b_gemm_tensor_core.ipynb"
LAB = ROOT / "labs" / "02b_gemm_tensor_core.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the modelled verdicts are the sim tier's")

UTIL, SPEED, BANKS, OVERLAP = (lab.UTIL.name, lab.SPEED.name, lab.BANKS.name, lab.OVERLAP.name)


def cli(*args):
    return subprocess.run([str(KERNELLAB), *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=600)


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
    r = cli("grade", "gemm-tensor-core", str(LAB), "--quiet")
    assert r.returncode == 1
    assert "not implemented" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


@pytest.fixture(scope="module")
def ladder_figures():
    """The lab's sim figures (``spec.figures``) for chapter 2's tensor-core kernels tc2-tc4 and
    for v4 (FP32 register tiles) at PERF_N, with lab 2's tiled kernel (v3) as the baseline."""
    from numba import cuda

    from kernellab import sim
    from kernellab.kernels import gemm_cuda, gemm_tc

    n = lab.PERF_N
    rng = np.random.default_rng(3)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)

    def launches(f, a, b):
        with sim.capture(sites=True) as cap:
            f(cuda.to_device(a), cuda.to_device(b), cuda.to_device(np.zeros((n, n), np.float32)))
        return [launch_dict(s) for s in cap.launches]

    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    base = launches(gemm_cuda.gemm_v3, A32, B32)
    out = {"v4": lab.figures(launches(gemm_cuda.gemm_v4, A32, B32), base, n)}
    for name, f in gemm_tc.LADDER.items():
        if name.startswith("tc1"):      # no shared tiles: slow to simulate, brackets nothing
            continue
        out[name] = lab.figures(
            launches(lambda a, b, c, f=f: f(a.copy_to_host(), b.copy_to_host(), c), A, B),
            base, n)
    return out


def test_the_ladder_brackets_every_threshold(ladder_figures):
    f = ladder_figures
    tc2, tc3, tc4, v4 = f["tc2_ldmatrix"], f["tc3_swizzled"], f["tc4_cp_async"], f["v4"]
    # no FP32-core kernel can pass the speedup or the peak-share rule: the FP32 roof
    assert v4["fp32_roof_speedup"] < lab.MIN_SPEEDUP and 19.5 / 312 < lab.MIN_PEAK_SHARE
    assert v4["speedup"] <= v4["fp32_roof_speedup"] and v4["peak_share"] < lab.MIN_PEAK_SHARE
    # the conflicted ldmatrix kernel beats any FP32 kernel but fails the peak share and banks
    assert tc2["speedup"] >= lab.MIN_SPEEDUP
    assert tc2["peak_share"] < lab.MIN_PEAK_SHARE <= tc3["peak_share"]
    assert tc2["conflict"] > lab.MAX_CONFLICT >= tc3["conflict"]
    # only cp.async double buffering passes the overlap rule
    assert tc3["overlap"] == 0.0 < lab.MIN_OVERLAP <= tc4["overlap"]
    assert tc4["peak_share"] > tc3["peak_share"] and tc4["speedup"] > tc3["speedup"]


def test_bfloat16_arrays_cross_the_worker_boundary(tmp_path):
    import ml_dtypes

    from grader import npz

    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    npz.save(tmp_path / "a.npz", {"A": x, "C": np.ones(2, np.float32)})
    back = npz.load(tmp_path / "a.npz")
    assert back["A"].dtype == x.dtype and np.array_equal(back["A"], x)
    assert back["C"].dtype == np.float32


def test_gpu_tier_measurement_runs_on_the_simulator_with_a_wall_clock(tmp_path):
    from grader import notebook

    ns: dict = {}
    exec(compile(notebook.submission_source(SOLUTION), str(SOLUTION), "exec"), ns)

    def fake_cublas(dA, dB, dC):
        np.matmul(dA.copy_to_host().astype(np.float32), dB.copy_to_host().astype(np.float32))

    spec = lab.GemmTensorCore()
    plan = {"tier": "gpu", "n": 24, "rounds": 2}
    m = spec.measure({"gemm": ns["gemm"]}, plan, tmp_path, clock="wall", cublas=fake_cublas)
    assert m["tier"] == "gpu" and m["clock"] == "wall" and len(m["gflops"]) == 2
    rules = spec.perf_rules(json.loads(json.dumps(m)))
    assert [r.name for r in rules] == [lab.GPU_SPEED.name, lab.PLAUSIBLE.name]
    after = recheck(spec, plan, m["recheck"], tmp_path)
    assert after.passed, after.error


def test_gpu_rules_flag_a_call_faster_than_cublas_allows():
    spec = lab.GemmTensorCore()
    base = {"tier": "gpu", "n": 4096, "gflops_cublas": [200000.0] * 5}
    honest = spec.perf_rules({**base, "gflops": [90000.0] * 5})
    assert all(r.passed for r in honest)
    cheat = spec.perf_rules({**base, "gflops": [90000.0] * 4 + [10 ** 7]})
    assert not cheat[1].passed and not cheat[1].scored
    slow = spec.perf_rules({**base, "gflops": [10000.0] * 5})
    assert not slow[0].passed
