"""Lab 2b ``gemm-tensor-core``, worker side: the timed calls of ``gemm(A, B, C)`` on float16
device arrays.

``measure_sim``: one call at M = N = K = ``plan["n"]`` captured with per-site counters, the
same call again with every MMA's product doubled (the share of C that is the MMAs' product),
and lab 2's tiled kernel (chapter 2's v3, FP32) at the same size in float32, from the baseline
cache (its counters do not depend on the values). ``measure_gpu``: interleaved rounds of the
submission and cupy.matmul in float16
(cuBLAS) timed by CUDA events, each submission call checked right after it returns (Freivalds,
:func:`grader.labs._gemm.probably_correct` on the float32 product of the same inputs). Both
write the last call for the grader's re-check. Imported by the worker only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import (DeviceTimedCalls, baseline_launches, captured_call,
                                      save_recheck)
from grader.labs._gemm import probably_correct


def operands(rng, n: int):
    """Fresh standard-normal A and B, (n, n) float16 each."""
    return (rng.standard_normal((n, n), dtype=np.float32).astype(np.float16),
            rng.standard_normal((n, n), dtype=np.float32).astype(np.float16))


def _params(n: int) -> dict:
    return {"M": n, "N": n, "K": n, "dtype": "float16", "scale_log2": 0}


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab.kernels.gemm_cuda import gemm_v3

    n = int(plan["n"])
    A, B = operands(np.random.default_rng(), n)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    dC = cuda.to_device(np.full((n, n), np.nan, np.float32))
    cap = captured_call(namespace["gemm"], (dA, dB, dC), "gemm(A, B, C)")
    C = dC.copy_to_host()
    from_mma = _share_from_mma(namespace["gemm"], dA, dB, C)
    recheck = save_recheck(workdir, _params(n), {"A": A, "B": B},
                           {"A": dA.copy_to_host(), "B": dB.copy_to_host(), "C": C},
                           ("A", "B"), ("C",))
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    baseline = baseline_launches(
        "gemm_v3", {"n": n}, gemm_v3,
        lambda: (cuda.to_device(A32), cuda.to_device(B32),
                 cuda.to_device(np.full((n, n), np.nan, np.float32))), sites=True)
    return {
        "tier": "sim", "profile": plan["profile"], "n": n,
        "submission": [launch_dict(s) for s in cap.launches],
        "baseline": baseline,
        "from_mma": from_mma,
        "setup": {"description": f"sim tier, float16 inputs, float32 C, M=N=K={n}, modelled "
                                 f"on the {plan['profile']} profile from counted traffic and "
                                 "MMAs (deterministic), device arrays"},
        "recheck": recheck,
    }


def _share_from_mma(gemm, dA, dB, C) -> float:
    """The share of C's elements that are the tensor cores' product: ``gemm`` runs again on the
    same inputs with every MMA computing ``2 A @ B + C`` (``kernellab.sim.configure(
    mma_scale=2)``). A product accumulated by MMAs doubles (exactly, when the kernel's order of
    accumulation is fixed: doubling commutes with float32 rounding); anything added to it another
    way (FP32 cores, the host, MMAs on zeros) does not. Tolerance: twice the lab's K-aware bound,
    for kernels whose accumulation order varies from run to run."""
    from numba import cuda

    from kernellab import sim

    dC = cuda.to_device(np.full(C.shape, np.nan, np.float32))
    old = sim.configure(mma_scale=2.0)
    try:
        gemm(dA, dB, dC)
    finally:
        sim.configure(**old)
    A = dA.copy_to_host().astype(np.float64)
    B = dB.copy_to_host().astype(np.float64)
    K = A.shape[1]
    absprod = np.abs(A) @ np.abs(B)
    u32 = 2.0 ** -24
    tol = 2 * (6 * np.sqrt(K) * (u32 + 2.0 ** -53) * 2 * absprod + u32 * np.abs(2 * C))
    twice = np.abs(dC.copy_to_host().astype(np.float64) - 2.0 * C) <= tol
    return float(np.mean(twice))


def _cupy_matmul():
    try:
        import cupy as cp
    except ImportError:
        return None, "cupy not installed: no cuBLAS baseline"

    def cublas(dA, dB, dC):
        cp.matmul(cp.asarray(dA), cp.asarray(dB))       # float16 out, float32 accumulation
    return cublas, "cupy.matmul (cuBLAS, float16)"


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str,
                cublas=None) -> dict:
    """``cublas`` (a ``f(dA, dB, dC)`` stand-in) lets tests run this path on the simulator."""
    from kernellab import timing

    n, rounds = int(plan["n"]), int(plan["rounds"])
    note = "cupy.matmul (cuBLAS, float16)"
    if cublas is None:
        cublas, note = _cupy_matmul()
    rng, check_rng = np.random.default_rng(), np.random.default_rng()
    calls = DeviceTimedCalls(
        ("A", "B"), ("C",),
        lambda ins, outs: probably_correct(ins[0].astype(np.float32),
                                           ins[1].astype(np.float32), outs[0], check_rng))
    fns = {"submission": namespace["gemm"]}
    if cublas is not None:
        fns["cublas"] = cublas
    g = timing.interleaved(
        fns, baseline="submission", warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: operands(rng, n),
                          lambda: (np.full((n, n), np.nan, np.float32),)))
    t = {k: v.times for k, v in g.timings.items()}
    flops = 2.0 * n ** 3
    return {
        "tier": "gpu", "n": n, "clock": clock,
        "gflops": [flops / x / 1e9 for x in t["submission"]],
        "gflops_cublas": [flops / x / 1e9 for x in t["cublas"]] if "cublas" in t else None,
        "setup": {"description": f"gpu tier, float16 inputs, float32 C, M=N=K={n}, {rounds} "
                                 f"interleaved rounds timed by {clock} clock; baseline {note}",
                  "timings": g.to_dict()["timings"]},
        "recheck": calls.save(workdir, _params(n)),
    }
