"""Lab 1's speed verdicts hold whatever kernel OpenBLAS runs and whatever /proc says the clock
is: the performance phase of the reference solution and of plain ikj + prange, in a child
process per environment (the variables change in the child only, never here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from known import Folder  # tests/known.py: where each known submission is

ROOT = Path(__file__).resolve().parents[4]
SOLUTION = ROOT / "solutions" / "01_gemm_cpu.ipynb"
IKJ = Folder("gemm-cpu", "wrong") / "ikj_plain.py"

pytestmark = pytest.mark.timed   # wall-clock ratios: make test runs it last, alone

# The lab's performance phase (GemmCPU.measure, then perf_rules) as the grader's worker runs it,
# outside the sandbox, for each submission given. The naive group is timed at 64 instead of 512:
# only the rules on the M=N=K=1024 group (fraction of numpy, plausibility) are asserted here.
CHILD = r"""
import importlib.util, json, pathlib, sys, tempfile
import kernellab
from kernellab import codegen
from grader.labs.gemm_cpu import GemmCPU
codegen.apply(GemmCPU.codegen)
from grader.runner import _store_submission
from grader import notebook
spec, out = GemmCPU(), {}
for path in sys.argv[1:]:
    sub = _store_submission("gemm-cpu", notebook.submission_source(pathlib.Path(path)))
    # the file and module name the grader's worker uses: Numba's cache of a parallel=True
    # function records its module by name and imports it by that name when it loads
    ms = importlib.util.spec_from_file_location("submission", sub)
    mod = importlib.util.module_from_spec(ms)
    sys.modules["submission"] = mod
    ms.loader.exec_module(mod)
    with tempfile.TemporaryDirectory() as d:
        m = spec.measure(vars(mod), dict(spec.perf_plan(), n_naive=64), pathlib.Path(d))
    out[pathlib.Path(path).name] = {
        "rules": {r.name: {"passed": r.passed, "measured": r.measured, "threshold": r.threshold,
                           "detail": r.detail} for r in spec.perf_rules(m)},
        "blas": m["blas"]}
print(json.dumps(out))
"""

FRACTION = "fraction of numpy.matmul (OpenBLAS)"
PLAUSIBLE = "fastest timed call is plausible"


def _speed_phase(env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(SOLUTION), str(IKJ)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _said(what: str, rule: dict) -> str:
    return f"{what}: measured {rule['measured']} vs {rule['threshold']}; {rule['detail']}"


def test_speed_verdicts_hold_with_any_blas_kernel_and_any_proc_clock():
    as_is = dict(os.environ)
    unset = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    slow_clock = dict(os.environ, KERNELLAB_CPU_GHZ="0.8")
    runs = {"as is": _speed_phase(as_is), "OPENBLAS_CORETYPE/L2_SIZE unset": _speed_phase(unset),
            "KERNELLAB_CPU_GHZ=0.8": _speed_phase(slow_clock)}
    for what, res in runs.items():
        sol, ikj = res[SOLUTION.name]["rules"], res[IKJ.name]["rules"]
        # short messages: pytest cuts a long one before the figures that explain it
        assert sol[FRACTION]["passed"], _said(what, sol[FRACTION])
        assert sol[PLAUSIBLE]["passed"], _said(what, sol[PLAUSIBLE])
        assert not ikj[FRACTION]["passed"], _said(what, ikj[FRACTION])
        # the floor came from the FMA probe in the same rounds, not from a fallback
        assert "in the same rounds" in sol[FRACTION]["detail"], _said(what, sol[FRACTION])
        # the limit is the measured peak (or numpy's fastest call), never /proc's clock
        assert "measured FMA peak" in sol[PLAUSIBLE]["detail"], sol[PLAUSIBLE]
    # the same limit with /proc's clock far too low: it does not come from the nominal peak
    a, c = runs["as is"], runs["KERNELLAB_CPU_GHZ=0.8"]
    assert ("0.80 GHz" in c[SOLUTION.name]["rules"][PLAUSIBLE]["detail"]
            and "0.80 GHz" not in a[SOLUTION.name]["rules"][PLAUSIBLE]["detail"])
    # which kernel OpenBLAS ran in each child (threadpoolctl): forced differs from its own
    # choice where the forced one is not already what it picks for this CPU
    forced = os.environ.get("OPENBLAS_CORETYPE")
    b = runs["OPENBLAS_CORETYPE/L2_SIZE unset"]
    arch_a, arch_b = a[SOLUTION.name]["blas"], b[SOLUTION.name]["blas"]
    assert arch_b.get("forced_by", "") == ""
    if forced and arch_a.get("internal_api") == "openblas" and arch_b.get("architecture") and \
            arch_b["architecture"].lower() != forced.lower():
        assert arch_a["architecture"].lower() == forced.lower(), (arch_a, arch_b)
        assert "OPENBLAS_CORETYPE" in arch_a["forced_by"]
