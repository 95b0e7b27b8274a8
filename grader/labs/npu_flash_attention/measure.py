"""npu-flash-attention's worker side (runs next to the submission): the timed call, on fresh
``plan`` Q, K, V (standard normal, float16), not causal, on the full card
(:func:`grader.labs._npu.timed_runs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._npu import CARD, run_summary, timed_runs
from grader.labs.flash_attention.spec import attention_inputs


def measure_npu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The submission's ``flash_attention`` on the full card, every launch captured."""
    rng = np.random.default_rng()
    fn = namespace["flash_attention"]

    def inputs(p):
        return attention_inputs(rng, p["B"], p["H"], p["N"], p["d"], "float16")

    runs, recheck = timed_runs(spec, lambda q, k, v, o: fn(q, k, v, o, False), plan, inputs,
                               workdir)
    B, H, N, d = (int(plan[k]) for k in ("B", "H", "N", "d"))
    return {"B": B, "H": H, "N": N, "d": d, "runs": runs, "recheck": recheck,
            "setup": {"description": f"modelled cycles on {CARD.key}, Q, K, V {B}x{H}x{N}x{d} "
                                     f"float16, not causal, fresh inputs",
                      "runs": {k: run_summary(v) for k, v in runs.items()}}}
