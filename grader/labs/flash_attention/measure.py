"""Lab 5 ``flash-attention``, worker side: the timed calls of ``flash_attention(Q, K, V, O,
causal)`` on device arrays.

``measure_sim``: one call on the planned shape captured with per-site counters and recorded,
then replayed on new Q, K, V (:meth:`grader.labs._cuda.CudaLab.replay`: the kernels must
recompute O), the content digests the work gate needs, and the launches of chapter 5's
materialised attention (from the baseline cache). ``measure_gpu``: interleaved rounds of the
submission, the materialised attention and a device-to-device copy timed by CUDA events, each
submission call checked on two heads right after it returns. Both write the last call for the
grader's re-check. Imported by the worker only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import (DeviceTimedCalls, baseline_launches, captured_call,
                                      save_recheck)
from grader.labs.flash_attention.spec import attention_inputs, rule, timed_params
from kernellab.numerics import compare
from reference_kernels.attention import attention_golden

_CALL = "flash_attention(Q, K, V, O, causal)"


def _shape(plan: dict) -> tuple:
    return tuple(int(plan[k]) for k in ("B", "H", "N", "d"))


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab import sim
    from kernellab.kernels.attention_cuda import attention_v1

    shape, dt, causal = _shape(plan), np.dtype(plan["dtype"]), bool(plan["causal"])
    Q, K, V = attention_inputs(np.random.default_rng(), *shape, dt.name)
    dQ, dK, dV = (cuda.to_device(x) for x in (Q, K, V))
    dO = cuda.to_device(np.full(shape, np.nan, dt))
    cap = captured_call(namespace["flash_attention"], (dQ, dK, dV, dO, causal), _CALL,
                        record=True)
    after = {"Q": dQ.copy_to_host(), "K": dK.copy_to_host(), "V": dV.copy_to_host(),
             "O": dO.copy_to_host()}
    O = after["O"]
    # the timed call's launches and copies again, on new Q, K, V (the device buffers
    # refilled in place): the kernels must recompute O
    buffers = {"Q": dQ._ary, "K": dK._ary, "V": dV._ary, "O": dO._ary}
    why = spec.replay(cap.recorded, buffers, ("Q", "K", "V"), ("O",))
    recheck = save_recheck(workdir, timed_params(plan), {"Q": Q, "K": K, "V": V},
                           {**after, **{k: v for k, v in buffers.items()
                                        if k.startswith("replay_")}},
                           ("Q", "K", "V"), ("O",), scalars={"causal": causal})
    recheck["replay_error"] = why and why.replace("the call's", "the timed call's")
    return {
        "tier": "sim", "profile": plan["profile"], "shape": list(shape), "dtype": dt.name,
        "causal": causal,
        "submission": [launch_dict(s) for s in cap.launches],
        "unchecked": list(cap.unchecked),
        "digests": {k: sim.content_digest(x) for k, x in (("Q", Q), ("K", K), ("V", V))},
        "o_digest": sim.content_digest(O),
        "materialised": baseline_launches(
            "attention_v1", {"shape": list(shape), "dtype": dt.name, "causal": causal},
            attention_v1,
            lambda: (dQ, dK, dV, cuda.to_device(np.full(shape, np.nan, dt)), causal)),
        "setup": {"description": f"sim tier, {dt.name} attention of B x H x N x d = "
                                 f"{' x '.join(map(str, shape))}"
                                 f"{', causal' if causal else ''}, modelled on the "
                                 f"{plan['profile']} profile from counted traffic "
                                 "(deterministic), device arrays"},
        "recheck": recheck,
    }


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str) -> dict:
    from kernellab import timing
    from kernellab.kernels.attention_cuda import attention_v1

    shape, dt, causal = _shape(plan), np.dtype(plan["dtype"]), bool(plan["causal"])
    rounds = int(plan["rounds"])
    rng, check_rng = np.random.default_rng(), np.random.default_rng()

    def correct(ins, outs) -> bool:       # two heads of one batch against the golden reference
        b = int(check_rng.integers(shape[0]))
        h = check_rng.choice(shape[1], size=min(2, shape[1]), replace=False)
        q, k, v = (x[b:b + 1, h] for x in ins)
        ref, _ = attention_golden(q, k, v, causal)
        return compare(outs[0][b:b + 1, h], ref, rule(q, k, v, causal, ref), tile=None).ok

    def copy(dQ, dK, dV, dO, causal_):
        dO.copy_to_device(dQ)

    calls = DeviceTimedCalls(("Q", "K", "V"), ("O",), correct, scalars=(causal,))
    g = timing.interleaved(
        {"submission": namespace["flash_attention"], "materialised": attention_v1,
         "copy": copy},
        baseline="submission", warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: attention_inputs(rng, *shape, dt.name),
                          lambda: (np.full(shape, np.nan, dt),)))
    t = {k: v.times for k, v in g.timings.items()}
    recheck = calls.save(workdir, timed_params(plan))
    recheck["scalars"] = {"causal": causal}
    B, H, N, d = shape
    compulsory = 4.0 * B * H * N * d * dt.itemsize      # Q, K, V read, O written
    return {
        "tier": "gpu", "shape": list(shape), "dtype": dt.name, "causal": causal,
        "clock": clock,
        "gbs": [compulsory / x / 1e9 for x in t["submission"]],
        "gbs_copy": [2.0 * B * H * N * d * dt.itemsize / x / 1e9 for x in t["copy"]],
        "speedup": [b / s for s, b in zip(t["submission"], t["materialised"])],
        "ms": [x * 1e3 for x in t["submission"]],
        "ms_materialised": [x * 1e3 for x in t["materialised"]],
        "setup": {"description": f"gpu tier, {dt.name} attention of B x H x N x d = "
                                 f"{' x '.join(map(str, shape))}, {rounds} interleaved "
                                 f"rounds timed by {clock} clock, fresh device inputs per "
                                 "call; bandwidth = compulsory bytes (Q, K, V, O) / time",
                  "timings": g.to_dict()["timings"]},
        "recheck": recheck,
    }
