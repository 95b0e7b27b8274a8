"""npu-rmsnorm's worker side (runs next to the submission): the timed calls, on a fresh
``plan["M"] x plan["N"]`` float16 matrix (standard normal) and gamma (1 + 0.25 standard normal),
eps 1e-6, once on the full card and once on the one-core card
(:func:`grader.labs._npu.timed_runs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, run_summary, timed_runs
from grader.labs.npu_rmsnorm.spec import PERF_EPS, case_inputs


def measure_npu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The submission's ``rms_norm`` on both cards, every launch captured."""
    rng = np.random.default_rng()
    fn = namespace["rms_norm"]

    def inputs(p):
        return case_inputs(rng, p["M"], p["N"], "float16", "normal")

    runs, recheck = timed_runs(spec, lambda x, g, y: fn(x, g, y, PERF_EPS), plan, inputs,
                               workdir)
    m, n = int(plan["M"]), int(plan["N"])
    return {"M": m, "N": n, "runs": runs, "recheck": recheck,
            "setup": {"description": f"modelled cycles on {CARD.key}, {m} x {n} float16, eps "
                                     f"{PERF_EPS:g}, fresh inputs; all cores and one core "
                                     f"({ONE_CORE.key})",
                      "runs": {k: run_summary(v) for k, v in runs.items()}}}
