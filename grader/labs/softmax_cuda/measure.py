"""Lab 3 ``softmax-cuda``, worker side: the timed calls of ``softmax(X, Y)`` on device arrays.

``measure_sim``: one float32 call on ``plan["M"]`` x ``plan["N"]`` captured with per-site
counters, the content digests the work gate needs, and the launches of chapter 3's three-pass
softmax (from the baseline cache). ``measure_gpu``: interleaved rounds of the submission, the
three-pass softmax and a device-to-device copy of the same bytes timed by CUDA events, each
submission call checked on 32 random rows right after it returns. Both write the last call for
the grader's re-check. Imported by the worker only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import (DeviceTimedCalls, baseline_launches, captured_call,
                                      save_recheck)
from grader.labs.softmax_cuda.spec import softmax_inputs, timed_params
from kernellab.numerics import RowSoftmax, compare
from reference_kernels.reductions import softmax_golden, softmax_shift


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab import sim
    from kernellab.kernels.softmax_cuda import softmax_v2

    M, N = int(plan["M"]), int(plan["N"])
    X = softmax_inputs(np.random.default_rng(), M, N, "float32")
    dX = cuda.to_device(X)
    dY = cuda.to_device(np.full((M, N), np.nan, np.float32))
    cap = captured_call(namespace["softmax"], (dX, dY), "softmax(X, Y)")
    Y = dY.copy_to_host()
    recheck = save_recheck(workdir, timed_params(M, N), {"X": X},
                           {"X": dX.copy_to_host(), "Y": Y}, ("X",), ("Y",))
    return {
        "tier": "sim", "profile": plan["profile"], "M": M, "N": N,
        "submission": [launch_dict(s) for s in cap.launches],
        "unchecked": list(cap.unchecked),
        # what the work gate needs: X's content and the output's (grader/labs/_cuda.py)
        "x_digest": sim.content_digest(X), "y_digest": sim.content_digest(Y),
        "three_pass": baseline_launches(
            "softmax_v2", {"M": M, "N": N}, softmax_v2,
            lambda: (dX, cuda.to_device(np.full((M, N), np.nan, np.float32)))),
        "setup": {"description": f"sim tier, float32 softmax of {M} x {N}, modelled on the "
                                 f"{plan['profile']} profile from counted traffic "
                                 "(deterministic), device arrays"},
        "recheck": recheck,
    }


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str) -> dict:
    from kernellab import timing
    from kernellab.kernels.softmax_cuda import softmax_v2

    M, N, rounds = int(plan["M"]), int(plan["N"]), int(plan["rounds"])
    rng, check_rng = np.random.default_rng(), np.random.default_rng()

    def correct(ins, outs) -> bool:
        rows = check_rng.choice(M, size=min(M, 32), replace=False)
        Xs = ins[0][rows]
        return compare(outs[0][rows], softmax_golden(Xs),
                       RowSoftmax(N=N, acc_dtype="float32", out_dtype="float32",
                                  shift=softmax_shift(Xs)), tile=None).ok

    def copy(dX, dY):
        dY.copy_to_device(dX)

    calls = DeviceTimedCalls(("X",), ("Y",), correct)
    g = timing.interleaved(
        {"submission": namespace["softmax"], "three_pass": softmax_v2, "copy": copy},
        baseline="submission", warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: (softmax_inputs(rng, M, N, "float32"),),
                          lambda: (np.full((M, N), np.nan, np.float32),)))
    t = {k: v.times for k, v in g.timings.items()}
    nbytes = 2.0 * M * N * 4          # X read once, Y written once

    def gbs(xs):
        return [nbytes / x / 1e9 for x in xs]

    return {
        "tier": "gpu", "M": M, "N": N, "clock": clock,
        "gbs": gbs(t["submission"]), "gbs_three_pass": gbs(t["three_pass"]),
        "gbs_copy": gbs(t["copy"]),
        "copy_fraction": [c / s for s, c in zip(t["submission"], t["copy"])],
        "speedup_three_pass": [b / s for s, b in zip(t["submission"], t["three_pass"])],
        "setup": {"description": f"gpu tier, float32 softmax of {M} x {N}, {rounds} "
                                 f"interleaved rounds timed by {clock} clock, fresh device "
                                 "inputs per call; bandwidth = (bytes of X + bytes of Y) / "
                                 "time, the copy moving the same bytes",
                  "timings": g.to_dict()["timings"]},
        "recheck": calls.save(workdir, timed_params(M, N)),
    }
