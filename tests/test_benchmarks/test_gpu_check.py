"""``make gpu-check`` (benchmarks/gpu_check.py) on machines without a GPU: it says so and exits 0;
its whole code path runs on the simulator (``--simulate``); and the modules it loads on the gpu
tier need none of the packages a bare GPU machine lacks (greenlet, nbformat, threadpoolctl ...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kernellab

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

no_gpu = pytest.mark.skipif(kernellab.TIER == "gpu", reason="this machine has a GPU")


def run(*args, env=None, timeout=300):
    e = {k: v for k, v in os.environ.items() if k != "KERNELLAB_DEVICE"}
    e.update(env or {})
    e["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, env=e, timeout=timeout)


@no_gpu
@pytest.mark.parametrize("env", [{}, {"KERNELLAB_DEVICE": "gpu"}])
def test_without_a_gpu_it_says_so_and_exits_0(env):
    r = run(env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no usable NVIDIA GPU here" in r.stdout and "nothing to check" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.skipif(kernellab.TIER != "sim", reason="the simulated run needs the sim tier")
def test_simulated_run_covers_the_labs_and_the_ladder(tmp_path):
    out = tmp_path / "gpu_check.json"
    r = run("--simulate", "--json", str(out), env={"KERNELLAB_DEVICE": "sim"})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "gpu-check: PASS" in r.stdout and "% cuBLAS" in r.stdout
    d = json.loads(out.read_text())
    assert d["simulated"] is True and d["passed"] is True
    labs = {x["lab"]: x for x in d["labs"]}
    assert list(labs) == ["gemm-cuda", "gemm-tensor-core", "softmax-cuda", "flash-attention",
                          "moe", "decode-attention"]
    first_rule = {"gemm-cuda": "measured speedup over the naive kernel",
                  "gemm-tensor-core": "share of cuBLAS's FP16 GEMM",
                  "softmax-cuda": "bandwidth vs a device copy",
                  "flash-attention": "speedup over the materialised attention",
                  "moe": "speedup over one GEMM launch per expert",
                  "decode-attention": "bandwidth on K and V vs a device copy"}
    for name, labrep in labs.items():
        assert labrep["ok"] is True, labrep
        assert labrep["cases_passed"] == labrep["cases_total"] > 0
        assert labrep["performance"]["recheck_passed"] is True
        assert labrep["performance"]["rules"][0]["name"] == first_rule[name]
    assert "skipped" in d["reduction_ladder"]
    # the ladder runs through gemm_cuda's main (kernellab.kernels._ladder): modelled on the sim
    # tier, where cuBLAS has no counters and so no row
    lad = d["ladder"]
    kernels = [row["kernel"] for row in lad["rows"]]
    assert kernels == ["v1_naive", "v2_coalesced", "v3_shared_tiles", "v4_register_tiles",
                       "lab 2 solution"]
    assert lad["passed"] is True and lad["clock"] == "model a100"
    assert lad["checked"] == ["M=N=K=32", "M=N=K=1", "M=33 N=17 K=20"]
    assert all(row["ok"] and row["median_s"] > 0 and row["gflops"] > 0 for row in lad["rows"])
    # the sm_80 step: on the simulator the same kernels, against kernellab.sim.mma
    assert "sm_80 instructions (mma, ldmatrix, cp.async) vs kernellab.sim.mma:" in r.stdout
    sm80 = d["sm80"]
    assert sm80["passed"] is True, sm80
    names = [c["name"] for c in sm80["checks"]]
    assert names == ["ldmatrix x1/x2/x4, .trans", "mma.m16n8k16 f16 fragments",
                     "mma.m16n8k16 bf16 fragments", "cp.async + ldmatrix + mma f16 tile",
                     "cp.async + ldmatrix + mma bf16 tile",
                     "cp.async 4/8/16 B, zfill, groups; ld/st.v2/v4"]
    assert all(c["ok"] for c in sm80["checks"])
    assert all(f"pass  {name}" in r.stdout for name in names)


BLOCKER = r"""
import sys
BLOCKED = {"greenlet", "nbformat", "nbclient", "threadpoolctl", "psutil",
           "jupytext", "IPython", "jupyter_client", "ipykernel"}

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on this (pretend) GPU machine")
        return None

sys.meta_path.insert(0, Block())
import kernellab
from kernellab import device
# pretend the probe found a GPU: kernellab.TIER None (KERNELLAB_DEVICE=gpu failed) -> gpu
assert kernellab.TIER is None
device._error.clear()
device._chosen.update(tier="gpu", note="pretend", gpu_count=1)
kernellab.TIER = "gpu"
import importlib.util
spec = importlib.util.spec_from_file_location("gpu_check", sys.argv[1])
gc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gc)
from grader.labs import all_specs
import grader.runner, grader.labs.gemm_cuda, grader.labs.gemm_cpu, grader.labs.softmax_cuda
import grader.labs.flash_attention
from kernellab import machine, numerics, timing, threads
from kernellab.kernels import gemm_cuda, softmax_cuda, reduce_cuda, attention_cuda
from grader.labs._cuda import CudaLab
cuda_specs = [s for s in all_specs() if isinstance(s, CudaLab)]
assert [s.lab_id for s in cuda_specs] == ["gemm-cuda", "gemm-tensor-core", "softmax-cuda",
                                          "flash-attention", "moe", "decode-attention"]
assert all(s.tier == "gpu" and s.perf_plan()["tier"] == "gpu" for s in cuda_specs)
threads.status()
mod = gc.load_solution(gc.ROOT / "solutions" / "02_gemm_cuda.ipynb")
assert callable(mod.gemm)
mod2b = gc.load_solution(gc.ROOT / "solutions" / "02b_gemm_tensor_core.ipynb")
assert callable(mod2b.gemm)
mod3 = gc.load_solution(gc.ROOT / "solutions" / "03_softmax_cuda.ipynb")
assert callable(mod3.row_sum) and callable(mod3.softmax)
mod5 = gc.load_solution(gc.ROOT / "solutions" / "05_flash_attention.ipynb")
assert callable(mod5.flash_attention)
assert callable(reduce_cuda.measure_gpu)
import numba.cuda
from kernellab import cuda_ext
cuda_ext.install()   # what `import kernellab` arms on a real gpu tier (here the tier is pretend)
assert callable(numba.cuda.mma_m16n8k16_bf16)
assert len(gc._sm80_kernels()) == 4
mod8a = gc.load_solution(gc.ROOT / "solutions" / "08a_moe.ipynb")
assert callable(mod8a.grouped_gemm) and callable(mod8a.moe_align) and callable(mod8a.combine)
mod8b = gc.load_solution(gc.ROOT / "solutions" / "08b_decode_attention.ipynb")
assert callable(mod8b.decode_attention)
from numba.cuda.core import config
assert not config.ENABLE_CUDASIM
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("closure ok")
"""


@no_gpu
def test_gpu_path_imports_only_the_runtime():
    """numpy, numba, numba-cuda, ml_dtypes (the BF16 labs' cases) and cupy (imported lazily)
    are enough on the gpu tier."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("KERNELLAB_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    e.update(KERNELLAB_DEVICE="gpu", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", BLOCKER, str(SCRIPT)], capture_output=True,
                       text=True, cwd=ROOT, env=e, timeout=300)
    assert r.returncode == 0 and "closure ok" in r.stdout, r.stdout + r.stderr
