"""Lab 2 ``gemm-cuda``, worker side: the timed calls of ``gemm(A, B, C)`` on device arrays.

``measure_sim``: one call at M = N = K = ``plan["n"]`` captured with per-site counters, and the
naive kernel's launches (chapter 2's v1, from the baseline cache). ``measure_gpu``: interleaved
rounds of the submission, the naive kernel and cupy.matmul (cuBLAS) timed by CUDA events, each
submission call checked right after it returns (Freivalds:
:func:`grader.labs._gemm.probably_correct`).
Both write the last call for the grader's re-check. Imported by the worker only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import (DeviceTimedCalls, baseline_launches, captured_call,
                                      save_recheck)
from grader.labs._gemm import probably_correct
from grader.labs.gemm_cuda.spec import DTYPE


def operands(rng, n: int):
    """Fresh standard-normal float32 A and B, (n, n) each."""
    return (rng.standard_normal((n, n), dtype=np.float32),
            rng.standard_normal((n, n), dtype=np.float32))


def _params(n: int) -> dict:
    return {"M": n, "N": n, "K": n, "dtype": DTYPE}


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab.kernels.gemm_cuda import gemm_v1

    n = int(plan["n"])
    A, B = operands(np.random.default_rng(), n)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    dC = cuda.to_device(np.full((n, n), np.nan, np.float32))
    cap = captured_call(namespace["gemm"], (dA, dB, dC), "gemm(A, B, C)")
    C = dC.copy_to_host()
    recheck = save_recheck(workdir, _params(n), {"A": A, "B": B},
                           {"A": dA.copy_to_host(), "B": dB.copy_to_host(), "C": C},
                           ("A", "B"), ("C",))
    naive = baseline_launches(
        "gemm_v1", {"n": n}, gemm_v1,
        lambda: (dA, dB, cuda.to_device(np.full((n, n), np.nan, np.float32))), sites=True)
    return {
        "tier": "sim", "profile": plan["profile"], "n": n,
        "submission": [launch_dict(s) for s in cap.launches],
        "naive": naive,
        "setup": {"description": f"sim tier, float32, M=N=K={n}, modelled on the "
                                 f"{plan['profile']} profile from counted traffic "
                                 "(deterministic), device arrays"},
        "recheck": recheck,
    }


def _cupy_matmul():
    """cupy.matmul (cuBLAS) as ``f(dA, dB, dC)``, and how the report names the baseline; None
    without cupy."""
    try:
        import cupy as cp
    except ImportError:
        return None, "cupy not installed: no cuBLAS baseline"

    def cublas(dA, dB, dC):
        cp.matmul(cp.asarray(dA), cp.asarray(dB), out=cp.asarray(dC))
    return cublas, "cupy.matmul (cuBLAS)"


def _gpu_facts():
    """The GPU's nominal FP32 peak (FLOP/s), its formula and its name; unknown on the
    simulator (tests) or an unknown device."""
    try:
        from kernellab import machine
        info = machine.gpu_info()
        return (info.peak_flops(), info.formula(),
                f"{info.name} (cc {info.cc[0]}.{info.cc[1]})")
    except Exception as exc:  # noqa: BLE001 - the simulator in tests; an unknown device
        return None, f"unknown ({exc})", "unknown"


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str,
                cublas=None) -> dict:
    """``cublas`` (a ``f(dA, dB, dC)`` standing in for cupy.matmul) lets tests run this path on
    the simulator (``clock="wall"``)."""
    from kernellab import timing
    from kernellab.kernels.gemm_cuda import gemm_v1

    n, rounds = int(plan["n"]), int(plan["rounds"])
    cublas_note = "cupy.matmul (cuBLAS)"
    if cublas is None:
        cublas, cublas_note = _cupy_matmul()
    rng, check_rng = np.random.default_rng(), np.random.default_rng()
    calls = DeviceTimedCalls(("A", "B"), ("C",),
                             lambda ins, outs: probably_correct(*ins, outs[0], check_rng))
    fns = {"submission": namespace["gemm"], "naive": gemm_v1}
    if cublas is not None:
        fns["cublas"] = cublas
    g = timing.interleaved(
        fns, baseline="submission", warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: operands(rng, n),
                          lambda: (np.full((n, n), np.nan, np.float32),)))
    t = {k: v.times for k, v in g.timings.items()}
    flops = 2.0 * n ** 3
    peak, formula, gpu = _gpu_facts()
    return {
        "tier": "gpu", "n": n, "clock": clock, "gpu": gpu,
        "speedup_naive": [a / b for a, b in zip(t["naive"], t["submission"])],
        "gflops": [flops / x / 1e9 for x in t["submission"]],
        "gflops_naive": [flops / x / 1e9 for x in t["naive"]],
        "gflops_cublas": [flops / x / 1e9 for x in t["cublas"]] if "cublas" in t else None,
        "peak_gflops": None if peak is None else peak / 1e9, "peak_formula": formula,
        "setup": {"description": f"gpu tier ({gpu}), float32, M=N=K={n}, {rounds} "
                                 f"interleaved rounds timed by {clock} clock, fresh device "
                                 f"inputs per call; baseline {cublas_note}",
                  "timings": g.to_dict()["timings"]},
        "recheck": calls.save(workdir, _params(n)),
    }
