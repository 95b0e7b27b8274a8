"""npu-vector-add's worker side (runs next to the submission): the timed calls, on
``n = plan["n"]`` fresh float16 inputs (8 x standard normal), once on the full card and once
on the one-core card (:func:`grader.labs._npu.timed_runs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, run_summary, timed_runs


def measure_npu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The submission's ``vector_add`` on both cards, every launch captured."""
    n = int(plan["n"])
    rng = np.random.default_rng()

    def inputs(p):
        return ((rng.standard_normal(p["n"]) * 8).astype(np.float16),
                (rng.standard_normal(p["n"]) * 8).astype(np.float16))

    runs, recheck = timed_runs(spec, namespace["vector_add"], plan, inputs, workdir)
    return {"n": n, "runs": runs, "recheck": recheck,
            "setup": {"description": f"modelled cycles on {CARD.key}, n = {n:,} float16, "
                                     f"fresh inputs; all cores and one core ({ONE_CORE.key})",
                      "runs": {k: run_summary(v) for k, v in runs.items()}}}
