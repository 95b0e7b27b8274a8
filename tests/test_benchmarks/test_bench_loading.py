"""`make bench` twice in one checkout: the second run loads what the first one cached.

The first run compiles and writes Numba's on-disk cache, the second (a fresh process) loads it.
A function cached from a module that was not in ``sys.modules`` was recorded as module
``'<dynamic>'`` and failed to load the second time (the bench's ikj + prange kernel:
``ModuleNotFoundError: No module named '<dynamic>'``). Only the bench's loading step runs
(``--load-only``), on the kernels that compile in a second or two; v4/v5 share the ladder
module with v2/v3 and take ten seconds to compile.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = "v1_naive,v2_ikj,v3_blocked,ikj_prange"


def test_second_bench_run_loads_the_first_runs_cache(tmp_path):
    env = dict(os.environ, KERNELLAB_CACHE_DIR=str(tmp_path))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_gemm_cpu.py"), "--load-only",
           "--kernels", KERNELS]
    for run in ("first", "second"):
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{run} run: {r.stderr[-3000:]}"
        assert "ModuleNotFoundError" not in r.stderr
        for name in KERNELS.split(","):
            assert f"{name:<12} first call" in r.stdout, r.stdout
    # the first run wrote the ikj + prange kernel's cache entry, which the second one loaded
    assert list(tmp_path.rglob("ikj_plain*.nbi")), sorted(p.name for p in tmp_path.rglob("*"))
