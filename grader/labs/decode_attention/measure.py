"""Lab 8b ``decode-attention``, worker side: the timed calls of ``decode_attention(...)`` on
device arrays (the bfloat16 operands as their uint16 bits).

``measure_sim``: one batch-1 decode at ``plan["num_splits"]`` splits, captured with per-site
counters (with the content digests the work gate needs, and written for the grader's
re-check), and a shorter one (``plan["gain_L"]`` keys) at ``plan["gain_splits"]`` splits and
at 1. ``measure_gpu``: interleaved rounds of the
submission and a device-to-device copy of the K and V bytes timed by CUDA events, each call
checked right after it returns. Imported by the worker only.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np

from grader.labs._cuda import launch_dict
from grader.labs._cuda_worker import DeviceTimedCalls, captured_call, save_recheck
from grader.labs.decode_attention.spec import BLOCK_SIZE, _compiled_always, bf16, rule
from reference_kernels.decode_attention import decode_golden

_NAMES = ("q", "k_cache", "v_cache", "block_table", "seq_lens")


def _params(plan: dict) -> dict:
    return {"B": int(plan["B"]), "Hq": int(plan["Hq"]), "Hkv": int(plan["Hkv"]),
            "d": int(plan["d"]), "L": int(plan["L"]), "num_splits": int(plan["num_splits"]),
            "kind": "normal"}


def _operands(rng, p: dict) -> tuple:
    """The timed call's operands: every sequence ``L`` keys, no spare block (so every byte of
    K and V is compulsory), bfloat16 as uint16 bits."""
    from kernellab.kernels.decode_attention import paged_operands   # defines kernels: late

    q, k, v, bt, sl = paged_operands(rng, [p["L"]] * p["B"], p["Hq"], p["Hkv"], p["d"],
                                     BLOCK_SIZE, spare_blocks=0)
    return q.view(np.uint16), k.view(np.uint16), v.view(np.uint16), bt, sl


def measure_sim(spec, namespace: dict, plan: dict, workdir: Path) -> dict:


    p = _params(plan)
    with _compiled_always(contextlib.nullcontext()):
        return _measure_sim(namespace, plan, p, workdir)


def _measure_sim(namespace: dict, plan: dict, p: dict, workdir: Path) -> dict:
    from numba import cuda

    from kernellab import sim

    rng = np.random.default_rng()
    scale = 1.0 / math.sqrt(p["d"])
    what = ("decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits, "
            "out)")

    def call(ops, S):
        dev = [cuda.to_device(x) for x in ops]
        dout = cuda.to_device(np.full(ops[0].shape, 0x7FC0, np.uint16))   # NaN
        cap = captured_call(namespace["decode_attention"], (*dev, scale, S, dout), what,
                            sites=False)   # per-site counters would keep the compiled path off
        return cap, dev, dout.copy_to_host()

    ops = _operands(rng, p)
    cap, dev, out = call(ops, p["num_splits"])
    recheck = save_recheck(workdir, p, dict(zip(_NAMES, ops)),
                           {**{n: x.copy_to_host() for n, x in zip(_NAMES, dev)}, "out": out},
                           _NAMES, ("out",),
                           scalars={"scale": scale, "num_splits": p["num_splits"]})
    # the split's gain: a shorter sequence (one block of a long one overflows the compiled
    # simulator's log and would take minutes), at the planned gain splits and at 1
    short = _operands(rng, {**p, "L": int(plan["gain_L"])})
    gain = {S: call(short, S)[0] for S in (int(plan["gain_splits"]), 1)}
    return {
        "tier": "sim", "profile": plan["profile"], **p,
        "gain_L": int(plan["gain_L"]), "gain_splits": int(plan["gain_splits"]),
        "split": [launch_dict(s) for s in cap.launches],
        "gain_split": [launch_dict(s) for s in gain[int(plan["gain_splits"])].launches],
        "gain_one": [launch_dict(s) for s in gain[1].launches],
        "unchecked": list(cap.unchecked) + [u for g in gain.values() for u in g.unchecked],
        "digests": {n: sim.content_digest(x) for n, x in zip(_NAMES, ops)},
        "out_digest": sim.content_digest(out),
        "setup": {"description": f"sim tier, bfloat16 decode at batch 1, {p['L']} keys, "
                                 f"Hq={p['Hq']} on Hkv={p['Hkv']}, d={p['d']}, at "
                                 f"{p['num_splits']} splits, and {plan['gain_L']} keys at "
                                 f"{plan['gain_splits']} splits and at 1, modelled on the "
                                 f"{plan['profile']} profile from counted traffic "
                                 "(deterministic), device arrays"},
        "recheck": recheck,
    }


def measure_gpu(spec, namespace: dict, plan: dict, workdir: Path, *, clock: str) -> dict:
    from kernellab import timing

    p = _params(plan)
    rounds = int(plan["rounds"])
    scale = 1.0 / math.sqrt(p["d"])
    rng = np.random.default_rng()

    def correct(ins, outs) -> bool:
        ops = tuple(bf16(x) if i < 3 else x for i, x in enumerate(ins))
        ref, _ = decode_golden(*ops, scale)
        return compare_ok(bf16(outs[0]), ref, rule(ops, scale, ref))

    def copy(q, k, v, bt, sl, out, *_):
        k.copy_to_device(v)

    calls = DeviceTimedCalls(_NAMES, ("out",), correct,
                             lambda outs: bool((outs[0] == 0x7FC0).any()),    # NaN left
                             scalars=(scale, p["num_splits"]))
    fn = namespace["decode_attention"]

    def submission(q, k, v, bt, sl, out, scale, num_splits):
        # DeviceTimedCalls passes inputs, outputs, then scalars; the lab's order differs
        fn(q, k, v, bt, sl, scale, num_splits, out)

    g = timing.interleaved(
        {"submission": submission, "copy": copy}, baseline="submission",
        warmup=1, rounds=rounds, clock=clock, after=calls.after,
        setup=calls.setup(lambda: _operands(rng, p),
                          lambda: (np.full((p["B"], p["Hq"], p["d"]), 0x7FC0, np.uint16),)))
    t = {k: v.times for k, v in g.timings.items()}
    kv = 2.0 * p["B"] * p["L"] * p["Hkv"] * p["d"] * 2

    def gbs(xs):
        return [kv / x / 1e9 for x in xs]

    return {
        "tier": "gpu", **p, "clock": clock, "gbs": gbs(t["submission"]),
        "gbs_copy": gbs(t["copy"]),
        "copy_fraction": [c / s for s, c in zip(t["submission"], t["copy"])],
        "setup": {"description": f"gpu tier, {rounds} interleaved rounds timed by {clock} "
                                 "clock, fresh device inputs per call; bandwidth = the K and "
                                 "V bytes / time, the copy moving the bytes of V into K "
                                 "(read + write: the same count)",
                  "timings": g.to_dict()["timings"]},
        "recheck": calls.save(workdir, p),
    }


def compare_ok(out, ref, policy) -> bool:
    from kernellab.numerics import compare

    return compare(out, ref, policy, tile=None).ok
