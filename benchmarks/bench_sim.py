"""``make bench-sim``: the sim tier's executor against numba-cuda's stock simulator.

Same kernels, same inputs, one process, one run: for each case the stock simulator
(``executor="stock"``: one OS thread per CUDA thread, busy-polled barriers) and Kernel Lab's
executor (:mod:`kernellab.sim.engine`: greenlets) in both check levels:

* ``full`` (the default, what the grader and the chapters run): bounds checks, poison,
  divergence, the race detector, uninitialised-read detection and the traffic counters;
* ``fast``: bounds checks, poison and divergence only (no access log: no race detection, no
  counters).

The cases: the 64x64 and 128x128 tiled GEMM with 16x16 tiles
(chapter 2's ``v3_shared_tiles``, :mod:`kernellab.kernels.gemm_cuda`) and a 2^14-element block
reduction (16 blocks of 1024 threads, one element a thread, a shared-memory tree; each block
writes its partial sum). Every result must be bit-identical to the stock simulator's; the
benchmark says so per row and exits 1 if one is not. The GPU-compile check is off for the
timing (it is a one-off per kernel and signature, cached, and not part of either executor).

The stock simulator takes about a minute in all on a 2-core machine; ours is timed as the
median of ``--repeat`` runs (the stock one once: it is the slow side, so noise on it moves the
ratio least). Results go to ``benchmarks/results/sim.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import kernellab  # noqa: F401  (selects the sim tier before numba.cuda)
import numpy as np
from numba import cuda, float32

import kernellab.sim as sim
from kernellab.kernels import gemm_cuda

REDUCE_THREADS = 1024


@cuda.jit
def block_reduce(x, partial):
    """partial[b] = sum of block b's REDUCE_THREADS elements of x (shared-memory tree)."""
    s = cuda.shared.array(REDUCE_THREADS, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + tid
    s[tid] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            s[tid] += s[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = s[0]


def _gemm_case(n):
    kernel = gemm_cuda.KERNELS["v3_shared_tiles"]
    grid, block = gemm_cuda.launch_config("v3_shared_tiles", n, n, n)
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)

    def run():
        C = np.full((n, n), np.nan, np.float32)
        kernel[grid, block](A, B, C)
        return C
    return f"tiled GEMM {n}x{n}x{n}, 16x16 tiles", run


def _reduce_case(n=1 << 14):
    x = np.random.default_rng(14).standard_normal(n).astype(np.float32)
    blocks = n // REDUCE_THREADS

    def run():
        out = np.full(blocks, np.nan, np.float32)
        block_reduce[blocks, REDUCE_THREADS](x, out)
        return out
    return f"block reduction 2^14 ({blocks}x{REDUCE_THREADS} threads)", run


def _time(run, **opts):
    with sim.capture(gpu_compile=False, **opts):
        t0 = time.perf_counter()
        out = run()
        return time.perf_counter() - t0, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs of our executor (median)")
    p.add_argument("--quick", action="store_true", help="skip the 128x128 GEMM")
    args = p.parse_args(argv)
    cases = [_gemm_case(64)] + ([] if args.quick else [_gemm_case(128)]) + [_reduce_case()]
    rows = []
    ok = True
    from kernellab.machine import cpu_info
    cpu = cpu_info()
    print(f"sim tier executor vs numba-cuda's stock simulator on {cpu.model} "
          f"({cpu.cores} cores)", flush=True)
    for name, run in cases:
        # warm-up of our executor (imports, first-call paths); not timed
        _time(run, executor="kernellab")
        t_stock, ref = _time(run, executor="stock")
        res = {}
        for checks in ("full", "fast"):
            ts = []
            for _ in range(args.repeat):
                t, out = _time(run, executor="kernellab", checks=checks)
                ts.append(t)
                same = np.array_equal(out, ref, equal_nan=True)
                ok &= bool(same)
            res[checks] = dict(median_s=statistics.median(ts), min_s=min(ts), max_s=max(ts),
                               ratio=t_stock / statistics.median(ts), identical=bool(same))
        rows.append(dict(case=name, stock_s=t_stock, **{f"ours_{k}": v for k, v in res.items()}))
        f, q = res["full"], res["fast"]
        print(f"{name:46s} stock {t_stock:7.2f} s | full checks {f['median_s']:6.3f} s "
              f"({f['min_s']:.3f}-{f['max_s']:.3f}) {f['ratio']:5.1f}x | fast "
              f"{q['median_s']:6.3f} s ({q['min_s']:.3f}-{q['max_s']:.3f}) {q['ratio']:5.1f}x | "
              "identical: "
              f"{'yes' if f['identical'] and q['identical'] else 'NO'}", flush=True)
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), python=sys.version.split()[0],
                  machine=platform.machine(), repeat=args.repeat, rows=rows,
                  note="ratio = stock seconds / median of our seconds; one run, same process")
    (out_dir / "sim.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out_dir / 'sim.json'}")
    if not ok:
        print("ERROR: a result differs from the stock simulator's", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
