"""Lab 8a ``moe``, worker side: the timed grouped GEMM.

``measure_sim``: one call of ``grouped_gemm`` at the plan's small batch on device arrays,
captured with per-site counters, and the course's per-expert baseline
(:func:`kernellab.kernels.moe.gemm_per_expert`: one launch per expert with tokens) on the same
routing, from the baseline cache (its counters depend on the routing, which is seeded, not on
the values). ``measure_gpu``: interleaved rounds of the submission and the per-expert baseline
timed by CUDA events, each submission call checked right after it returns. Both write the last
call for the grader's re-check. Imported by the worker only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import (DeviceTimedCalls, baseline_launches, captured_call,
                                      save_recheck)
from grader.labs.moe.spec import bf16_bits, bf16_values, golden_from_align, routing, timed_params
from reference_kernels import moe as ref

#: the timed routing's seed: the per-expert baseline's launches (one per expert with tokens)
#: depend on it, so it is fixed; A and W are fresh on every run
ROUTING_SEED = 20261206
_NAMES = ("A", "W", "sorted_ids", "expert_ids", "num_post_pad")


def _align(p: dict):
    _, ids = routing(np.random.default_rng(ROUTING_SEED), p["M"], p["E"], p["k"])
    return ref.align_golden(ids, p["E"], p["block"])


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab import sim
    from kernellab.kernels.moe import gemm_per_expert

    p = timed_params(plan)
    M, K, N, E, k, block = (p[x] for x in ("M", "K", "N", "E", "k", "block"))
    rng = np.random.default_rng()
    s, eb, npp = _align(p)
    host = {"A": bf16_bits(rng, (M, K)), "W": bf16_bits(rng, (E, K, N)), "sorted_ids": s,
            "expert_ids": eb, "num_post_pad": npp}
    dev = [cuda.to_device(host[n]) for n in _NAMES]
    dC = cuda.to_device(np.zeros((M * k, N), np.uint16))
    cap = captured_call(namespace["grouped_gemm"], (*dev, block, dC),
                        "grouped_gemm(A, W, sorted_ids, expert_ids, num_post_pad, block, C)")
    C = dC.copy_to_host()
    recheck = save_recheck(workdir, p, host,
                           {**{n: d.copy_to_host() for n, d in zip(_NAMES, dev)}, "C": C},
                           _NAMES, ("C",), scalars={"block": block})
    base = baseline_launches(
        "moe_gemm_per_expert", {**p, "seed": ROUTING_SEED}, gemm_per_expert,
        lambda: (*[cuda.to_device(host[n]) for n in _NAMES], block,
                 cuda.to_device(np.zeros((M * k, N), np.uint16))))
    return {
        "tier": "sim", "profile": plan["profile"], **{x: p[x] for x in ("M", "K", "N", "E",
                                                                         "k", "block")},
        "submission": [launch_dict(x) for x in cap.launches],
        "unchecked": list(cap.unchecked),
        "per_expert": base,
        "a_bytes": int(host["A"].nbytes), "a_digest": sim.content_digest(host["A"]),
        "c_digest": sim.content_digest(C),
        "setup": {"description": f"sim tier, grouped GEMM of {M} tokens, top{k} of {E} "
                                 f"experts, K={K}, N={N}, BF16 in and out, modelled on the "
                                 f"{plan['profile']} profile from counted traffic "
                                 "(deterministic), device arrays"},
        "recheck": recheck,
    }


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str) -> dict:
    from kernellab import timing
    from kernellab.kernels.moe import gemm_per_expert
    from kernellab.numerics import compare

    from grader.labs.moe.spec import bf16_sum_policy

    p = timed_params(plan)
    M, K, N, E, k, block = (p[x] for x in ("M", "K", "N", "E", "k", "block"))
    rounds = int(plan["rounds"])
    rng = np.random.default_rng()
    s, eb, npp = _align(p)

    def correct(ins, outs) -> bool:
        C, S = golden_from_align(ins[0], ins[1], ins[2], ins[3], ins[4], block, M * k)
        return compare(bf16_values(outs[0]), C, bf16_sum_policy(K, S, C), out_dtype="bfloat16",
                       tile=None).ok

    def reorder(fn):
        return lambda A, W, s_, e_, n_, C, b: fn(A, W, s_, e_, n_, b, C)

    calls = DeviceTimedCalls(_NAMES, ("C",), correct, is_unwritten=lambda outs: False,
                             scalars=(block,))
    g = timing.interleaved(
        {"submission": reorder(namespace["grouped_gemm"]),
         "per_expert": reorder(gemm_per_expert)},
        baseline="submission", warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: (bf16_bits(rng, (M, K)), bf16_bits(rng, (E, K, N)), s, eb,
                                   npp),
                          lambda: (np.zeros((M * k, N), np.uint16),)))
    t = {name: v.times for name, v in g.timings.items()}
    return {
        "tier": "gpu", **{x: p[x] for x in ("M", "K", "N", "E", "k", "block")}, "clock": clock,
        "seconds": t["submission"], "seconds_per_expert": t["per_expert"],
        "speedup": [b / x for x, b in zip(t["submission"], t["per_expert"])],
        "setup": {"description": f"gpu tier, grouped GEMM of {M} tokens, top{k} of {E} "
                                 f"experts, K={K}, N={N}, {rounds} interleaved rounds timed by "
                                 f"{clock} clock against one launch per expert",
                  "timings": g.to_dict()["timings"]},
        "recheck": {**calls.save(workdir, p), "scalars": {"block": block}},
    }
