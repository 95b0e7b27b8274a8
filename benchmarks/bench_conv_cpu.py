"""``make bench``: chapter 4's CPU convolution ladder, measured interleaved.

Runs every kernel of :data:`kernellab.kernels.conv_cpu.LADDER` — direct, im2col + GEMM,
Winograd F(2x2, 3x3) and F(4x4, 3x3) — on a ResNet-like layer (N=1, C=K=64, H=W=56, 3x3,
float32) with one thread, round-robin in one process (:func:`kernellab.timing.interleaved`):
each round calls every kernel once on a fresh output, so drifting load on a shared machine hits
all of them alike. Prints, per kernel, the median time and its interquartile spread, effective
GFLOP/s (direct-convolution FLOPs 2 N K H W C 9 / time, min-max over rounds) and the speedup
over the direct kernel in the same round (median, min-max); writes the same as JSON to
``benchmarks/results/conv_cpu.json``. Every kernel's output is checked afterwards against the
float64 golden convolution (K-aware bounds, as in
``tests/test_kernellab/kernels/test_conv_cpu_ladder.py``). Speed is never
pass/fail: the exit status is 0 unless the script itself crashes.

Usage: ``python benchmarks/bench_conv_cpu.py [--c 64] [--hw 56] [--rounds 7] [--quick] [--out
PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import kernellab  # noqa: E402,F401  (thread settings before numpy/numba load)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--c", type=int, default=None, help="C = K (default 64; 16 with --quick)")
    p.add_argument("--hw", type=int, default=None, help="H = W (default 56; 20 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7; 3 "
                   "with --quick)")
    p.add_argument("--quick", action="store_true", help="smaller and fewer: a smoke run")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "conv_cpu.json"))
    args = p.parse_args(argv)
    args.c = args.c or (16 if args.quick else 64)
    args.hw = args.hw or (20 if args.quick else 56)
    args.rounds = args.rounds or (3 if args.quick else 7)
    if min(args.c, args.hw, args.rounds) < 1:
        p.error("--c, --hw and --rounds must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np

    from kernellab import machine, numerics, threads, timing
    from kernellab.topics import winograd
    from kernellab.kernels import conv_cpu
    from reference_kernels.conv import conv2d_abs, conv2d_flops, conv2d_golden

    N, C, K, H, W = 1, args.c, args.c, args.hw, args.hw
    rng = np.random.default_rng(20160101)
    X = rng.standard_normal((N, C, H, W)).astype(np.float32)
    Wt = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    X0, W0 = X.copy(), Wt.copy()
    fns = dict(conv_cpu.LADDER)

    first_call = {}
    with threads.pin(1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(X[:, :, :5, :5], Wt, np.empty((N, K, 5, 5), np.float32))
            first_call[name] = time.perf_counter() - t0

    wall0 = time.perf_counter()
    result = timing.interleaved(fns, baseline="v1_direct",
                                setup=lambda: (X, Wt, np.empty((N, K, H, W), np.float32)),
                                warmup=1, rounds=args.rounds, threads_=1)
    wall = time.perf_counter() - wall0

    ref = conv2d_golden(X, Wt)
    checks = {}
    with threads.pin(1):
        for name, fn in fns.items():
            Y = np.full((N, K, H, W), np.nan, np.float32)
            fn(X, Wt, Y)
            m = {"v3_winograd_2x2": 2, "v4_winograd_4x4": 4}.get(name)
            pol = (numerics.KAware(K=9 * C, acc_dtype="float32", out_dtype="float32",
                                   abs_product=conv2d_abs(X, Wt)) if m is None else
                   numerics.KAware(K=conv_cpu.winograd_rounding_depth(m, C),
                                   acc_dtype="float32", out_dtype="float32",
                                   abs_product=winograd.abs_bound(X, Wt, m)))
            cmp = numerics.compare(Y, ref, pol, tile=None)
            checks[name] = {"ok": bool(cmp.ok), "budget_used": cmp.budget_used,
                            "message": cmp.message}

    flops = conv2d_flops(N, C, K, H, W)
    rows = []
    for name, fn in fns.items():
        t = result.timings[name]
        gf = [timing.gflops(flops, s) for s in t.times]
        lo, hi = result.speedup_range(name)
        rows.append({"name": name, "description": fn.description,
                     "median_s": t.median, "spread": t.spread,
                     "gflops_median": timing.gflops(flops, t.median),
                     "gflops_min": min(gf), "gflops_max": max(gf),
                     "speedup_median": result.speedup(name), "speedup_min": lo,
                     "speedup_max": hi, "first_call_s": first_call[name],
                     "correct": checks[name]["ok"], "check": checks[name]})
    cpu = machine.cpu_info()
    report = {
        "benchmark": "conv_cpu",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "layer": {"N": N, "C": C, "K": K, "H": H, "W": W, "R": 3, "S": 3, "pad": 1,
                  "stride": 1},
        "dtype": "float32", "threads": 1, "rounds": args.rounds, "flops_per_call": flops,
        "machine": {"model": cpu.model, "cores": cpu.cores, "isa": cpu.isa},
        "thread_status": result.thread_status, "timed_wall_s": wall,
        "inputs_unchanged": bool(np.array_equal(X, X0) and np.array_equal(Wt, W0)),
        "results": rows, "timing": result.to_dict(),
    }
    print_report(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwritten: {out}")
    return 0


def print_report(r: dict) -> None:
    L = r["layer"]
    print(f"CPU convolution ladder, {r['dtype']} N={L['N']} C=K={L['C']} H=W={L['H']} 3x3, "
          f"{r['threads']} thread, {r['rounds']} interleaved rounds, {r['date']}")
    print(f"machine: {r['machine']['model']}, {r['machine']['cores']} cores, {r['machine']['isa']}")
    print(f"threads: {r['thread_status'].get('note')}")
    print("effective GFLOP/s = direct-convolution FLOPs / time\n")
    head = (f"{'kernel':<16} {'ms':>7} {'IQR/med':>7} {'GFLOP/s':>8} {'(min-max)':>13} "
            f"{'vs direct':>9} {'(min-max)':>13} {'1st call':>8}  ok")
    print(head)
    print("-" * len(head))
    for row in r["results"]:
        gflops_range = f"({row['gflops_min']:.1f}-{row['gflops_max']:.1f})"
        speedup_range = f"({row['speedup_min']:.2f}-{row['speedup_max']:.2f})"
        print(f"{row['name']:<16} {row['median_s'] * 1e3:7.2f} {row['spread']:7.2f} "
              f"{row['gflops_median']:8.1f} "
              f"{gflops_range:>13} "
              f"{row['speedup_median']:8.2f}x "
              f"{speedup_range:>13} "
              f"{row['first_call_s']:7.2f}s  "
              f"{'yes' if row['correct'] else 'WRONG: ' + row['check']['message']}")
    print()
    for row in r["results"]:
        print(f"  {row['name']:<16} {row['description']}")
    if not r["inputs_unchanged"]:
        print("\nWARNING: a kernel modified its inputs")


if __name__ == "__main__":
    sys.exit(main())
