"""``make bench``: chapter 1's CPU GEMM ladder against numpy.matmul, measured interleaved.

Runs every kernel of :data:`kernellab.kernels.gemm_cpu.LADDER` (plus a plain ikj loop with
``prange`` over i, the kind of kernel a lab's speed threshold must reject) on fp32 N x N x N
matrices with a fixed number of threads, round-robin with numpy.matmul (OpenBLAS) in the same
process (:func:`kernellab.timing.interleaved`): each round calls numpy and every kernel once, so
drifting load on a shared machine hits all of them alike. Prints, per kernel, GFLOP/s and the
ratio to numpy in the same round (median and min-max over rounds), the first-call time (JIT
compilation or loading from Numba's cache), the machine and its nominal peak, the thread
control in effect and the code-generation profile; writes the same as JSON to
``benchmarks/results/gemm_cpu.json``.

The process runs under the ``fast_gemm`` code-generation profile (:mod:`kernellab.codegen`),
applied before anything defines a Numba function; ``--profile default`` measures Numba's
defaults instead (written to ``gemm_cpu_default.json``). Every kernel's output is checked
against a float64 reference with the K-aware tolerance after timing. Speed is never pass/fail:
the exit status is 0 unless the script itself crashes.

"% peak" is of this machine's measured FMA peak for the threads used
(:func:`kernellab.machine.measured_peak`); the nominal peak from /proc is printed beside it.

``--load-only`` stops after the first calls (compiling, or loading from Numba's cache), which
``--kernels`` can restrict to some of the kernels: the cheap check that a second run in the same
checkout loads what the first one cached (``tests/test_benchmarks/test_bench_loading.py``).

Usage: ``python benchmarks/bench_gemm_cpu.py [--n 1024] [--rounds 7] [--threads 2] [--quick]
[--profile fast_gemm|default] [--out PATH] [--kernels a,b] [--load-only]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import kernellab  # noqa: E402,F401  (thread settings before numpy/numba load)
from kernellab import codegen  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="M = N = K (default 1024; 512 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7; 3 "
                   "with --quick)")
    p.add_argument("--threads", type=int, default=2, help="threads for numba and the BLAS")
    p.add_argument("--quick", action="store_true", help="smaller and fewer: a smoke run")
    p.add_argument("--profile", default="fast_gemm", choices=codegen.PROFILES,
                   help="code-generation profile (kernellab.codegen)")
    p.add_argument("--out", default=None, help="JSON output path")
    p.add_argument("--kernels", default=None, help="comma-separated kernel names (default: all)")
    p.add_argument("--load-only", action="store_true",
                   help="stop after the first calls (compile or load from cache)")
    args = p.parse_args(argv)
    args.n = args.n or (512 if args.quick else 1024)
    args.rounds = args.rounds or (3 if args.quick else 7)
    if args.n < 1 or args.rounds < 1 or args.threads < 1:
        p.error("--n, --rounds and --threads must be >= 1")
    if args.out is None:
        name = "gemm_cpu.json" if args.profile == "fast_gemm" else f"gemm_cpu_{args.profile}.json"
        args.out = str(ROOT / "benchmarks" / "results" / name)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    codegen.apply(args.profile)  # before any @njit function exists

    import numpy as np

    from kernellab import machine, numerics, threads, timing
    from kernellab.kernels import gemm_cpu
    from reference_kernels.gemm import gemm_abs_product, gemm_golden

    # Exactly the known-wrong submission the lab's performance rules must fail (one source).
    ikj_prange = _load_module("kernellab_bench_ikj_plain",
                              ROOT / "grader" / "labs" / "gemm_cpu" / "submissions" / "wrong"
                              / "ikj_plain.py").gemm

    n, dtype = args.n, np.float32
    rng = np.random.default_rng(20240601)
    A = rng.standard_normal((n, n)).astype(dtype)
    B = rng.standard_normal((n, n)).astype(dtype)
    A0, B0 = A.copy(), B.copy()

    def setup():
        return A, B, np.full((n, n), np.nan, dtype)

    fns = {"numpy": lambda A, B, C: np.matmul(A, B, out=C)}
    descriptions = {"numpy": "numpy.matmul (the BLAS numpy loads), the baseline"}
    for name, kernel in gemm_cpu.LADDER.items():
        fns[name] = kernel
        descriptions[name] = kernel.description
    fns["ikj_prange"] = ikj_prange
    descriptions["ikj_prange"] = ("not in the ladder: grader/labs/gemm_cpu/submissions/wrong/"
                                  "ikj_plain.py, plain ikj + prange (lab 1 must fail it)")
    if args.kernels:
        wanted = [k.strip() for k in args.kernels.split(",") if k.strip()]
        unknown = sorted(set(wanted) - set(fns))
        if unknown:
            print(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(fns)}",
                  file=sys.stderr)
            return 2
        fns = {"numpy": fns["numpy"], **{k: fns[k] for k in fns if k in wanted}}

    # First calls: JIT compilation, or loading from the profile's on-disk cache.
    first_call = {}
    with threads.pin(args.threads):
        small = (np.ones((8, 8), dtype), np.ones((8, 8), dtype), np.empty((8, 8), dtype))
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(*small)
            first_call[name] = time.perf_counter() - t0
    if args.load_only:
        for name, seconds in first_call.items():
            print(f"{name:<12} first call {seconds:7.2f}s")
        return 0

    busy0, wall0 = _other_processes_cpu(), time.perf_counter()
    result = timing.interleaved(fns, baseline="numpy", setup=setup, warmup=1,
                                rounds=args.rounds, threads_=args.threads)
    wall = time.perf_counter() - wall0
    background = _background_load(busy0, _other_processes_cpu(), wall)

    # Correctness after timing, on the same inputs (the kernels must not have changed them).
    ref = gemm_golden(A, B)
    policy = numerics.KAware(K=n, acc_dtype=dtype, out_dtype=dtype,
                             abs_product=gemm_abs_product(A, B))
    checks = {}
    with threads.pin(args.threads):
        for name, fn in fns.items():
            C = np.full((n, n), np.nan, dtype)
            fn(A, B, C)
            cmp = numerics.compare(C, ref, policy, tile=None)
            checks[name] = {"ok": bool(cmp.ok), "max_abs": cmp.max_abs,
                            "budget_used": cmp.budget_used, "message": cmp.message}
    inputs_unchanged = bool(np.array_equal(A, A0) and np.array_equal(B, B0))

    flops = gemm_cpu.gemm_flops(n, n, n)
    cpu = machine.cpu_info()
    cores = min(args.threads, cpu.cores)
    nominal = cpu.peak_flops(dtype, cores=cores)
    measured = machine.measured_peak()
    peak = measured.flops(dtype, cores) if measured else nominal
    peak_text = (measured.describe(dtype, cores) if measured
                 else "no measured peak (KERNELLAB_PEAK=off or it failed): nominal")
    rows = []
    for name in fns:
        t = result.timings[name]
        gf = [timing.gflops(flops, s) for s in t.times]
        ratios = result.speedups[name]
        rows.append({
            "name": name, "description": descriptions[name],
            "gflops_median": timing.gflops(flops, t.median),
            "gflops_min": min(gf), "gflops_max": max(gf),
            "ratio_median": result.speedup(name),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "pct_of_peak": 100 * timing.gflops(flops, t.median) * 1e9 / peak,
            "first_call_s": first_call[name], "correct": checks[name]["ok"],
            "check": checks[name],
        })

    report = {
        "benchmark": "gemm_cpu", "date": datetime.datetime.now().astimezone().isoformat(
            timespec="seconds"),
        "n": n, "dtype": np.dtype(dtype).name, "threads": args.threads, "rounds": args.rounds,
        "flops_per_call": flops,
        "machine": {"model": cpu.model, "cores": cpu.cores, "isa": cpu.isa,
                    "simd_bits": cpu.simd_bits, "fma_units": cpu.fma_units, "ghz": cpu.ghz,
                    "peak_gflops": peak / 1e9, "peak": peak_text,
                    "measured_peak": measured is not None,
                    "nominal_peak_gflops": nominal / 1e9,
                    "nominal_peak_formula": cpu.formula(dtype, cores)},
        "blas": machine.blas_kernel(),
        "codegen": codegen.describe(),
        "thread_status": result.thread_status,
        "background_load": background, "timed_wall_s": wall,
        "inputs_unchanged": inputs_unchanged,
        "results": rows,
        "timing": result.to_dict(),
    }
    print_report(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwritten: {out}")
    return 0


def _load_module(name: str, path: Path):
    """Import the file ``path`` as module ``name``, registered in ``sys.modules`` before it
    runs. Registered, because Numba's on-disk cache records a function's module by name:
    a function of an unregistered module is recorded as ``'<dynamic>'``, and a ``parallel=True``
    function's environment then fails to load in the next process (``ModuleNotFoundError: No
    module named '<dynamic>'``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _other_processes_cpu() -> dict:
    """{(pid, start time): CPU seconds so far} of every process but this one."""
    import psutil

    me, out = os.getpid(), {}
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            t = proc.cpu_times()
            out[(proc.pid, proc.create_time())] = t.user + t.system
        except (psutil.Error, OSError):
            continue
    return out


def _background_load(before: dict, after: dict, wall: float) -> float:
    """Fraction of the machine's CPU time that other processes used between two snapshots of
    :func:`_other_processes_cpu` (processes that exited in between are not counted, nor are
    other virtual machines on the same host)."""
    used = sum(cpu - before.get(key, 0.0) for key, cpu in after.items())
    return max(0.0, used) / (wall * (os.cpu_count() or 1))


def _pct(ratio: float) -> str:
    """A ratio as a percentage: one decimal below 10%, none above."""
    p = 100 * ratio
    return f"{p:.1f}" if p < 10 else f"{p:.0f}"


def print_report(r: dict) -> None:
    m = r["machine"]
    print(f"CPU GEMM ladder, {r['dtype']} M=N=K={r['n']}, {r['threads']} thread(s), "
          f"{r['rounds']} interleaved rounds, {r['date']}")
    print(f"machine: {m['model']}, {m['cores']} cores, {m['isa']}")
    print(f"peak ('% peak' below): {m['peak']}; nominal (from /proc, not used) "
          f"{m['nominal_peak_formula']}")
    b = r.get("blas") or {}
    if b:
        print(f"BLAS: {b.get('internal_api')} {b.get('version')}, kernel {b.get('architecture')}"
              + (f" (forced by {b['forced_by']})" if b.get("forced_by") else ""))
    cg = r["codegen"]
    s = cg["settings"]
    print(f"codegen profile: {cg['profile']} (SLP={s['NUMBA_SLP_VECTORIZE']}, "
          f"loop-vectorize={s['NUMBA_LOOP_VECTORIZE']}, OPT={s['NUMBA_OPT']}, CPU features = host"
          f"{''.join(',' + f for f in cg['cpu_features_vs_host'])}; numba {cg['numba']}, "
          f"llvmlite {cg['llvmlite']})")
    ts = r["thread_status"]
    print(f"threads: {ts.get('note')}; numba threads {ts.get('numba_threads')} "
          f"({ts.get('numba_threading_layer')})")
    print(f"background: other processes used {100 * r['background_load']:.0f}% of the machine "
          f"during the {r['timed_wall_s']:.0f} s of timing"
          + ("  <- busy machine: ratios are less reliable, rerun when it is quiet"
             if r["background_load"] > 0.1 else ""))
    print()
    head = (f"{'kernel':<12} {'GFLOP/s':>8} {'(min-max)':>15} {'% numpy':>8} {'(min-max)':>13} "
            f"{'% peak':>7} {'1st call':>8}  ok")
    print(head)
    print("-" * len(head))
    for row in r["results"]:
        gflops_range = f"({row['gflops_min']:.1f}-{row['gflops_max']:.1f})"
        print(f"{row['name']:<12} {row['gflops_median']:8.1f} "
              f"{gflops_range:>15} "
              f"{_pct(row['ratio_median']):>7}% "
              f"{'(' + _pct(row['ratio_min']) + '-' + _pct(row['ratio_max']) + '%)':>13} "
              f"{_pct(row['pct_of_peak'] / 100):>6}% {row['first_call_s']:7.2f}s  "
              f"{'yes' if row['correct'] else 'WRONG: ' + row['check']['message']}")
    print()
    for row in r["results"]:
        print(f"  {row['name']:<12} {row['description']}")
    if not r["inputs_unchanged"]:
        print("\nWARNING: a kernel modified its inputs A or B")
    if cg["profile"] != "fast_gemm":
        print(f"\nnote: profile {cg['profile']!r}: v4/v5 are built for 'fast_gemm' "
              "(kernellab.codegen); under Numba's defaults their micro-kernel stays scalar")


if __name__ == "__main__":
    sys.exit(main())
