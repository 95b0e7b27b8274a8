"""kernellab.codegen's ``full_width`` profile: the CPU labs are graded at the vector width that
numpy/OpenBLAS and the measured FMA peak (kernellab.machine.fma_peak) run at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import codegen

ROOT = Path(__file__).resolve().parents[2]

# fma_peak's kernel compiled in a child under the profile named in argv: the widest register of
# its FMAs, the profile the child reports, and the stack references in its unrolled loop body
# (fma_peak.hot_loop_stack_refs: an accumulator spilled there; None off x86)
CHILD = r"""
import json, sys
import numpy as np
import kernellab
from kernellab import codegen
codegen.apply(sys.argv[1])
from kernellab.machine import fma_peak
_, one, _, (chains, _) = fma_peak._kernels()
one(np.ones((chains, 64), np.float32), np.float32(0.5), np.float32(0.25), 1)
asm = one.inspect_asm(one.signatures[0])
print(json.dumps({"bits": fma_peak._vector_bits(asm), "active": codegen.active(),
                  "spills": fma_peak.hot_loop_stack_refs(asm)}))
"""


def _width(profile: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", CHILD, profile], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_full_width_profile_emits_the_peaks_width():
    full, default = _width("full_width"), _width("default")
    assert full["active"] == "full_width" and default["active"] == "default"
    # fast_gemm runs at the same width (and the FMA peak is measured under full_width)
    assert codegen.FULL_WIDTH["NUMBA_CPU_FEATURES"] == codegen.FAST_GEMM["NUMBA_CPU_FEATURES"]
    assert codegen.FULL_WIDTH["NUMBA_SLP_VECTORIZE"] == codegen.DEFAULT["NUMBA_SLP_VECTORIZE"]
    if full["bits"] is not None:
        assert full["bits"] >= (default["bits"] or 0)
        if "+avx512f" in codegen.host_cpu_features().split(","):
            assert full["bits"] == 512, full
        # every chain stays in a register (fma_peak.shape): a spilled accumulator's store and
        # reload sit in its chain, and the peak comes out below what a BLAS kernel reaches
        assert full["spills"] in (0, None), full


@pytest.mark.parametrize("machine,features,expect", [
    ("x86_64", "+avx,+avx2,+fma,-avx512f", (8, 16)),     # 16 ymm registers
    ("x86_64", "+avx2,+fma,+avx512f,+avx512bw", (16, 8)),  # 32 zmm registers
    ("aarch64", "+neon", (16, 8)),                         # 32 vector registers
])
def test_fma_peak_chains_fit_the_register_file(machine, features, expect):
    from kernellab.machine import fma_peak

    chains, steps = fma_peak.shape(features, machine)
    assert (chains, steps) == expect
    assert chains * steps == fma_peak.FMAS_PER_ELEMENT
    src = fma_peak.kernel_source(chains, steps)
    assert src.count(" * m + c") == chains and f"range({steps})" in src


def test_cpu_labs_are_graded_at_full_width():
    from grader.labs import all_specs

    cpu = [spec for spec in all_specs() if spec.tier == "cpu"]
    assert {spec.lab_id for spec in cpu} >= {"gemm-cpu", "winograd", "int8-linear"}
    for spec in cpu:
        assert spec.codegen == "full_width", (spec.lab_id, spec.codegen)


def test_local_check_warns_when_the_notebook_compiles_otherwise():
    from grader.labs import get_spec_class
    from grader.local import codegen_note

    spec = get_spec_class("gemm-cpu")()
    note = codegen_note(spec)
    # this process never applied a profile: the note appears exactly where the settings differ
    assert (note is None) == (spec.codegen in codegen.matching())
    if note:
        assert "codegen.apply('full_width')" in note
    assert codegen_note(get_spec_class("gemm-cuda")()) is None     # not a CPU lab


def test_chains_past_the_register_file_spill():
    """Chapter 1's register lesson on this host: the fitting shape keeps every chain in a
    register; twice as many chains (same steps) spill on x86, and the FLOP/s figures are
    measured (positive, at the FMA width the profile emits)."""
    from kernellab.machine import fma_peak

    fit, _ = fma_peak.shape()
    steps = fma_peak.FMAS_PER_ELEMENT // (2 * fit)
    a, b = fma_peak.chains_rate(fit, steps), fma_peak.chains_rate(2 * fit, steps)
    assert a["gflops"] > 0 and b["gflops"] > 0
    if b["stack_refs"] is not None:  # x86: the listing can be read for stack slots
        assert a["stack_refs"] == 0 and b["stack_refs"] > 0, (a, b)
