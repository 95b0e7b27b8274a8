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
ratio least).

Then (``--no-grading`` skips it; ``--grading-only`` runs only it) the grading time of each
sim-tier lab (those whose spec's ``tier`` is ``"sim"`` under ``KERNELLAB_DEVICE=sim``): its
solution (``solutions/<notebook>``) and each honest variant in
``grader/labs/<lab>/submissions/ok/`` (a ``.diff`` made into the solution with that change by
``tests/known.py``), each graded as a student's ``kernellab grade LAB FILE`` grades it (a child
process, ``KERNELLAB_DEVICE=sim``, every case and the performance phase), one at a time. Each
grading's wall-clock seconds (process start to exit) are compared with
:data:`GRADING_BUDGET_S`; the compiled-kernel and baseline caches are whatever this machine has
(a lab's first grading measures its baseline kernel, so it is slower than the next).

Results go to ``benchmarks/results/sim.json`` (``rows``: the executor comparison; ``grading``:
one entry per grading). Exit status 1 when a result is not identical to the stock simulator's,
when a grading takes longer than the budget, or when a grading does not pass (every one graded
here is honest and must pass, but for the rules :data:`SLOW_BY_DESIGN` names); else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kernellab  # noqa: F401  (selects the sim tier before numba.cuda)
import numpy as np
from numba import cuda, float32

import kernellab.sim as sim
from kernellab.kernels import gemm_cuda

REDUCE_THREADS = 1024
ROOT = Path(__file__).resolve().parent.parent
#: seconds a student's sim-tier grading may take on the course's 2-core machine
GRADING_BUDGET_S = 60.0

#: Honest variants that are correct but slow by design: (lab, submission) -> the speed rules
#: they fail and why. Such a row passes the bench when every case passes and exactly these
#: rules fail (the lab's README says the same); any other verdict fails it.
SLOW_BY_DESIGN = {
    ("flash-attention", "ok/per_block_views"): (
        ("DRAM traffic / compulsory",),
        "one launch per block of query rows on fresh device copies of views: K and V are "
        "copied and read once a launch"),
}
#: a grading still running after this is stopped and reported (past the grader's own limits)
GRADING_KILL_S = 1200


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


def compare_executors(quick: bool, repeat: int) -> tuple[list[dict], bool]:
    """The executor rows (stock vs ours, full and fast checks) and whether every result was
    bit-identical to the stock simulator's."""
    cases = [_gemm_case(64)] + ([] if quick else [_gemm_case(128)]) + [_reduce_case()]
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
            for _ in range(repeat):
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
    return rows, ok


# ------------------------------------------------------------------------ grading time
def _sim_env() -> dict:
    """The environment of a student's sim-tier grading from this checkout."""
    return dict(os.environ, KERNELLAB_DEVICE="sim",
                PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                           if p))


def sim_tier_labs() -> list[tuple[str, str]]:
    """(lab id, solution notebook) of each lab whose spec's ``tier`` is ``"sim"`` under
    ``KERNELLAB_DEVICE=sim``, in registry order (asked in a child process: this one's tier is
    already chosen). Raises RuntimeError, with the child's error, when it cannot say."""
    code = ("import json, kernellab; from grader.labs import all_specs; "
            "print(json.dumps([[s.lab_id, s.notebook] for s in all_specs() if s.tier == 'sim']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_sim_env(),
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"listing the sim-tier labs failed: {proc.stderr.strip()[-500:]}")
    return [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]


def _known():
    """tests/known.py: where each lab's honest submissions are and how a stored diff applies."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import known

    return known


def gradings(labs: list[tuple[str, str]], tmp: Path) -> list[tuple[str, str, Path | str]]:
    """(lab id, submission name, file) to grade: each lab's solution notebook, then each of its
    honest variants (``submissions/ok/``), a stored diff made into a ``.py`` under ``tmp``. In
    place of the file, why it cannot be graded (a missing notebook, a diff that no longer
    applies)."""
    known = _known()
    out: list[tuple[str, str, Path | str]] = []
    for lab_id, notebook in labs:
        sol = ROOT / "solutions" / notebook
        out.append((lab_id, "solution", sol if sol.is_file() else f"no solutions/{notebook}"))
        if lab_id not in known.LABS:
            out.append((lab_id, "ok/*", "not in tests/known.py's LABS: its honest variants "
                        "are not found"))
            continue
        for name in known.submissions(lab_id, "ok"):
            try:
                path: Path | str = known.submission(lab_id, name, "ok", tmp)
            except known.StaleDiff as exc:
                path = str(exc)
            out.append((lab_id, f"ok/{name}", path))
    return out


def grade_timed(lab_id: str, name: str, path: Path | str,
                budget_s: float = GRADING_BUDGET_S) -> dict:
    """One grading as a student's ``kernellab grade LAB FILE`` on the sim tier, in a child
    process: its row (``seconds``: wall clock, process start to exit; ``passed``, ``score``,
    ``max_score``, ``tier`` from the report; ``error`` when there is no report or no file;
    ``within_budget`` None when nothing ran)."""
    row = dict(lab=lab_id, submission=name, file=None, seconds=None, within_budget=None,
               passed=False, score=None, max_score=None, tier=None, exit_status=None, error=None)
    if isinstance(path, str):
        row["error"] = path
        return row
    row["file"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    cmd = [sys.executable, "-m", "kernellab", "grade", lab_id, str(path), "--json", "--quiet"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=_sim_env(), capture_output=True, text=True,
                              timeout=GRADING_KILL_S)
    except subprocess.TimeoutExpired:
        row.update(seconds=time.perf_counter() - t0, within_budget=False,
                   error=f"still running after {GRADING_KILL_S} s: stopped")
        return row
    row.update(seconds=time.perf_counter() - t0, exit_status=proc.returncode)
    row["within_budget"] = row["seconds"] <= budget_s
    try:
        rep = json.loads(proc.stdout)
    except json.JSONDecodeError:
        row["error"] = f"no report (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        return row
    row.update(passed=bool(rep.get("passed")), score=rep.get("score"),
               max_score=rep.get("max_score"), tier=rep.get("tier"),
               error=None if rep.get("passed") else _why_failed(rep))
    expect_verdict(row, rep)
    if row["tier"] != "sim":
        row.update(passed=False, error=f"graded on the {row['tier']} tier, not sim")
    return row


def expect_verdict(row: dict, rep: dict) -> None:
    """For a :data:`SLOW_BY_DESIGN` row: ``passed`` when ``rep`` (its report) fails exactly the
    expected rules with every case passing, else not (a full pass included), and ``error``
    says which."""
    slow = SLOW_BY_DESIGN.get((row["lab"], row["submission"]))
    if not slow:
        return
    if _fails_only(rep, slow[0]):
        row.update(passed=True, error=f"as expected: {row['error']} ({slow[1]})")
    else:
        row.update(passed=False, error=f"expected to fail exactly {', '.join(slow[0])} "
                                       f"({slow[1]}), got: {row['error'] or 'a pass'}")


def _fails_only(rep: dict, rules) -> bool:
    """True when the report ran, every case passed and the failing rules are exactly
    ``rules``."""
    if rep.get("fatal") or rep.get("broken"):
        return False
    if not rep.get("cases") or not all(c.get("passed") for c in rep["cases"]):
        return False
    failed = {r.get("name") for r in rep.get("rules", []) if not r.get("passed")}
    return failed == set(rules)


def _why_failed(rep: dict) -> str:
    """A failed report's reason in one line: its fatal stop, else its broken functions, else
    its first failing case, else its failing rules."""
    if rep.get("fatal"):
        return str(rep["fatal"])
    if rep.get("broken"):
        return "; ".join(f"{k}: {v}" for k, v in rep["broken"].items())
    bad = [c for c in rep.get("cases", []) if not c.get("passed")]
    if bad:
        first = (str(bad[0].get("error") or "").strip().splitlines() or [""])[0]
        return f"{len(bad)} of {len(rep['cases'])} cases fail; {bad[0].get('case')}: {first}"
    rules = [r.get("name") for r in rep.get("rules", []) if not r.get("passed")]
    return f"rules failed: {', '.join(map(str, rules))}" if rules else "failed (no reason given)"


def grading_header(budget_s: float = GRADING_BUDGET_S) -> str:
    """The grading table's header line."""
    return (f"{'lab':16s} {'submission':28s} {'verdict':7s} {'score':>9s} {'seconds':>8s}  "
            f"within {budget_s:g} s")


_BUDGET_WORD = {True: "yes", False: "NO", None: "-"}


def grading_lines(row: dict) -> list[str]:
    """One grading row as the table's line (lab, submission, verdict, score, seconds, within
    the budget), and under it, when the row has one, its error (cut to 200 characters)."""
    score = "-" if row["score"] is None else f"{row['score']:g}/{row['max_score']:g}"
    secs = "-" if row["seconds"] is None else f"{row['seconds']:.1f}"
    lines = [f"{row['lab']:16s} {row['submission']:28s} {'PASS' if row['passed'] else 'FAIL':7s} "
             f"{score:>9s} {secs:>8s}  {_BUDGET_WORD[row['within_budget']]}"]
    if row["error"]:
        lines.append(f"{'':16s}   {row['error'][:200]}")
    return lines


def grading_verdict(rows: list[dict], budget_s: float = GRADING_BUDGET_S) -> tuple[list[str], bool]:
    """The summary lines (how many gradings exceeded the budget; how many did not pass, a
    grading that could not run among them) and whether every grading passed within it."""
    over = sum(r["within_budget"] is False for r in rows)
    failed = sum(not r["passed"] for r in rows)
    lines = [f"{over} of {len(rows)} gradings exceeded the {budget_s:g} s budget"]
    if failed:
        lines.append(f"{failed} of {len(rows)} gradings did not pass")
    return lines, over == 0 and failed == 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs of our executor (median)")
    p.add_argument("--quick", action="store_true", help="skip the 128x128 GEMM")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--no-grading", action="store_true",
                   help="skip the grading of the sim-tier labs")
    g.add_argument("--grading-only", action="store_true",
                   help="only the grading of the sim-tier labs (no executor comparison)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    rows, ok = ([], True) if args.grading_only else compare_executors(args.quick, args.repeat)
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), python=sys.version.split()[0],
                  machine=platform.machine(), repeat=args.repeat, rows=rows,
                  note="ratio = stock seconds / median of our seconds; one run, same process")
    graded_ok = True
    if not args.no_grading:
        try:
            labs = sim_tier_labs()
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return 1
        print(f"\ngrading each sim-tier lab's solution and honest variants as `kernellab grade` "
              f"does (KERNELLAB_DEVICE=sim), one at a time; budget {GRADING_BUDGET_S:g} s each",
              flush=True)
        graded = []
        with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
            print(grading_header(), flush=True)
            for lab_id, name, path in gradings(labs, Path(tmp)):
                graded.append(grade_timed(lab_id, name, path))
                print("\n".join(grading_lines(graded[-1])), flush=True)
        summary, graded_ok = grading_verdict(graded)
        for line in summary:
            print(line)
        report.update(grading=graded, grading_budget_s=GRADING_BUDGET_S)
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "sim.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out_dir / 'sim.json'}")
    if not ok:
        print("ERROR: a result differs from the stock simulator's", file=sys.stderr)
    if not graded_ok:
        print("ERROR: a grading exceeded the budget or did not pass", file=sys.stderr)
    return 0 if ok and graded_ok else 1


if __name__ == "__main__":
    sys.exit(main())
