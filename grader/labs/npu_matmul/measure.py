"""npu-matmul's worker side (runs next to the submission): the timed calls, on fresh float16
inputs (standard normal), ``plan["all_cores"]`` (M, N, K) on the full card and
``plan["one_core"]`` on the one-core card (:func:`grader.labs._npu.timed_runs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, run_summary, timed_runs


def measure_npu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The submission's ``matmul`` on both cards, every launch captured."""
    rng = np.random.default_rng()

    def inputs(p):
        return (rng.standard_normal((p["M"], p["K"])).astype(np.float16),
                rng.standard_normal((p["K"], p["N"])).astype(np.float16))

    runs, recheck = timed_runs(spec, namespace["matmul"], plan, inputs, workdir)
    s1 = "x".join(str(v) for v in plan["one_core"])
    sn = "x".join(str(v) for v in plan["all_cores"])
    return {"plan": {k: list(plan[k]) for k in ("one_core", "all_cores")}, "runs": runs,
            "recheck": recheck,
            "setup": {"description": f"modelled cycles, fresh inputs: {sn} on {CARD.key}, "
                                     f"{s1} on {ONE_CORE.key}",
                      "runs": {k: run_summary(v) for k, v in runs.items()}}}
