"""Our sim executor in two source trees, timed interleaved: is one slower than the other?

Usage: ``python benchmarks/bench_sim_compare.py REV_DIR [--rounds N] [--repeat N] [--quick]``

``REV_DIR`` is another checkout of the project (say the commit before a refactor, cloned to
``/tmp/base``); the other side is this tree. Each round runs one subprocess per tree, in
alternating order (old, new; then new, old ...), with ``PYTHONPATH`` set to that tree, so both
see the same machine load. A subprocess imports ``kernellab`` from its tree (it prints
``kernellab.__file__`` and the parent checks it lies in that tree), then runs the cases of
:mod:`bench_sim` (this tree's file, so both trees run the same kernels) on Kernel Lab's
executor only (not the stock simulator): one untimed warm-up, then ``--repeat`` timed runs each
with ``checks="full"`` and ``checks="fast"``, ``gpu_compile=False``. Results must be
bit-identical between the trees.

Per case and check level it prints each tree's median seconds over all rounds' runs, their
spread (min-max), and ``ratio = median(REV_DIR) / median(this tree)``: above 1 this tree is
faster; a refactor of the executor should keep every ratio >= 0.95. Beside it: ``cpu``, the same
ratio of the process's CPU seconds (``time.process_time``), which other processes' load moves
less; ``paired``, the median over the rounds of each round's old/new (the two ran back to back);
``min``, the ratio of the fastest runs (load only ever adds time). The JSON goes to
``benchmarks/results/sim_compare.json`` (``--out`` to change). Exit code 1 when results differ
between the trees or a subprocess fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
CHECKS = ("full", "fast")


def _child(repeat: int, quick: bool) -> None:
    """Run in a subprocess: time our executor on bench_sim's cases; print one JSON line."""
    import kernellab

    import bench_sim
    import numpy as np

    cases = [bench_sim._gemm_case(64)] + ([] if quick else [bench_sim._gemm_case(128)]) \
        + [bench_sim._reduce_case()]
    out = {"kernellab": kernellab.__file__, "cases": []}
    for name, run in cases:
        bench_sim._time(run, executor="kernellab")            # warm-up, not timed
        row = {"case": name}
        for checks in CHECKS:
            ts, cpu, digests = [], [], set()
            for _ in range(repeat):
                c0 = time.process_time()
                t, res = bench_sim._time(run, executor="kernellab", checks=checks)
                cpu.append(time.process_time() - c0)
                ts.append(t)
                digests.add(hashlib.blake2b(np.ascontiguousarray(res).tobytes(),
                                            digest_size=8).hexdigest())
            row[checks] = {"seconds": ts, "cpu_seconds": cpu, "digests": sorted(digests)}
        out["cases"].append(row)
    print("RESULT " + json.dumps(out), flush=True)


def _run_tree(tree: Path, repeat: int, quick: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repeat", str(repeat)]
    if quick:
        cmd.append("--quick")
    p = subprocess.run(cmd, env=env, cwd=str(HERE), capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not lines:
        raise RuntimeError(f"the run for {tree} failed (exit {p.returncode}):\n"
                           f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    got = json.loads(lines[-1][len("RESULT "):])
    imported = Path(got["kernellab"]).resolve()
    if tree.resolve() not in imported.parents:
        raise RuntimeError(f"PYTHONPATH={tree} imported kernellab from {imported}, not from "
                           "that tree")
    return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rev_dir", nargs="?", help="the other tree (the baseline)")
    p.add_argument("--rounds", type=int, default=5, help="subprocesses per tree")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per case in a subprocess")
    p.add_argument("--quick", action="store_true", help="skip the 128x128 GEMM")
    p.add_argument("--out", default=str(HERE / "results" / "sim_compare.json"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.repeat, args.quick)
        return 0
    if not args.rev_dir:
        p.error("REV_DIR is required")
    trees = {"old": Path(args.rev_dir).resolve(), "new": TREE}
    runs = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for side in order:
            got = _run_tree(trees[side], args.repeat, args.quick)
            runs[side].append(got)
            print(f"round {r + 1}/{args.rounds} {side}: kernellab from {got['kernellab']}",
                  flush=True)
    ok = True
    rows = []
    print(f"\nour executor, {args.rounds} rounds x {args.repeat} runs a tree, interleaved; "
          f"old = {trees['old']}, new = {trees['new']}")
    print(f"{'case':46s} {'checks':6s} {'old median (min-max) s':>26s} "
          f"{'new median (min-max) s':>26s} {'old/new':>8s} {'cpu':>6s} {'paired':>6s} "
          f"{'min':>6s}  identical")
    for i, first in enumerate(runs["new"][0]["cases"]):
        for checks in CHECKS:
            t = {side: [s for run in runs[side] for s in run["cases"][i][checks]["seconds"]]
                 for side in runs}
            dig = {side: {d for run in runs[side] for d in run["cases"][i][checks]["digests"]}
                   for side in runs}
            same = len(dig["old"] | dig["new"]) == 1
            ok &= same
            med = {side: statistics.median(v) for side, v in t.items()}
            cpu = {side: statistics.median(s for run in runs[side]
                                           for s in run["cases"][i][checks]["cpu_seconds"])
                   for side in runs}
            # each round's old and new ran back to back: the median of the rounds' ratios
            paired = statistics.median(
                statistics.median(o["cases"][i][checks]["seconds"])
                / statistics.median(n["cases"][i][checks]["seconds"])
                for o, n in zip(runs["old"], runs["new"]))
            row = dict(case=first["case"], checks=checks, ratio=med["old"] / med["new"],
                       cpu_ratio=cpu["old"] / cpu["new"], paired_ratio=paired,
                       min_ratio=min(t["old"]) / min(t["new"]), identical=same,
                       **{f"{side}_median_s": med[side] for side in t},
                       **{f"{side}_min_s": min(t[side]) for side in t},
                       **{f"{side}_max_s": max(t[side]) for side in t},
                       **{f"{side}_seconds": t[side] for side in t})
            rows.append(row)
            print(f"{first['case']:46s} {checks:6s} "
                  f"{med['old']:8.3f} ({min(t['old']):.3f}-{max(t['old']):.3f}) "
                  f"{med['new']:8.3f} ({min(t['new']):.3f}-{max(t['new']):.3f}) "
                  f"{row['ratio']:8.3f} {row['cpu_ratio']:6.3f} {paired:6.3f} "
                  f"{row['min_ratio']:6.3f}  {'yes' if same else 'NO'}", flush=True)
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), python=sys.version.split()[0],
                  machine=platform.machine(), rounds=args.rounds, repeat=args.repeat,
                  old_tree=str(trees["old"]), new_tree=str(trees["new"]),
                  kernellab_files={side: runs[side][0]["kernellab"] for side in runs},
                  rows=rows,
                  note="ratio = old median seconds / new median seconds (>= 1: new no slower); "
                       "subprocesses alternate between the trees")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    if not ok:
        print("ERROR: the trees' results differ", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
