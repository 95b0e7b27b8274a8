"""`make bench-verdicts` finds the slow kernels each cpu lab's thresholds must reject.

The benchmark itself times gradings for minutes, so it is not run here; what it would time is.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_verdicts",
                                                  ROOT / "benchmarks" / "bench_verdicts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_too_slow_submissions_are_found_by_their_header_and_are_correct():
    bench = _bench()
    found = {lab: [p.name for p in bench.too_slow(lab)]
             for lab in ("gemm-cpu", "winograd", "int8-linear")}
    assert found == {"gemm-cpu": ["ikj_plain.py"],
                     "winograd": ["direct.py", "filter_per_tile.py"], "int8-linear": []}
    # each is a correct kernel, so only the speed rules can reject it (the recorded verdicts)
    manifest = json.loads((ROOT / "tests" / "known_verdicts.json").read_text())
    for lab, names in found.items():
        for name in names:
            rec = manifest[lab][name.removesuffix(".py")]
            assert rec["kind"] == "wrong" and rec["correctness"]["passed"], (lab, name, rec)
