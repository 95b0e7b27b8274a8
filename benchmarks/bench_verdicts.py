"""``make bench-verdicts``: how far solutions clear the speed rules and slow kernels miss them.

Correctness is deterministic (fixed seeds), so on the ``cpu`` tier a verdict can flip only through
timing noise. For each lab asked for (default: every ``cpu``-tier lab: gemm-cpu, winograd,
int8-linear), this loads the reference solution once in the grader's sandboxed worker and runs the
lab's complete performance phase ``--gradings`` times in a row, as that many gradings would, in one
process. Prints, per rule, the median measured value, its min-max over the gradings, and the
smallest margin (measured / threshold for ``>=`` rules, threshold / measured for ``<=``), and how
many gradings each rule failed. It does the same, ``--slow-gradings`` times, for each of the lab's
known-wrong submissions whose header says ``# Known wrong (too slow)`` (gemm-cpu's plain ikj loop,
winograd's direct convolution...): the kernels the thresholds exist to reject, with their largest
margin and how many gradings rejected them. Writes the same as JSON to
``benchmarks/results/verdicts.json``.
Speed is never pass/fail here: the exit status is 0 unless the script itself crashes, or a solution
cannot be loaded or its performance phase fails.
(``tests/test_grader/labs/gemm_cpu/test_gemm_cpu_verdicts.py`` is the
suite's check that the gemm-cpu verdicts hold with the BLAS variables set and unset.)

Usage: ``python benchmarks/bench_verdicts.py [--lab gemm-cpu ...] [--gradings 20]
[--slow-gradings 5] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

import kernellab  # noqa: E402,F401  (thread settings before numpy/numba load)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lab", action="append", help="lab id (repeatable; default: every cpu lab)")
    p.add_argument("--gradings", type=int, default=20, help="performance phases per lab")
    p.add_argument("--slow-gradings", type=int, default=5,
                   help="performance phases per too-slow known-wrong submission")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "verdicts.json")
    return p.parse_args(argv)


def margin(rule) -> float | None:
    """How far a rule's measurement clears its threshold (> 1: passes)."""
    if rule.measured is None or rule.threshold == 0:
        return None
    if rule.op == ">=":
        return rule.measured / rule.threshold
    return rule.threshold / rule.measured if rule.measured else float("inf")


TOO_SLOW = "# Known wrong (too slow)"


def too_slow(lab_id: str) -> list[Path]:
    """``lab_id``'s known-wrong submissions whose first line starts with :data:`TOO_SLOW`:
    correct kernels its speed thresholds must reject."""
    from grader.labs import get_spec_class

    folder = Path(sys.modules[get_spec_class(lab_id).__module__].__file__).parent
    return sorted(p for p in (folder / "submissions" / "wrong").glob("*.py")
                  if p.read_text().startswith(TOO_SLOW))


def run_lab(lab_id: str, gradings: int, submission: Path | None = None) -> dict:
    """The performance phase of ``submission`` (default: ``lab_id``'s reference solution)
    ``gradings`` times in one worker: per rule, the summary described above, and in how many
    gradings a scored rule failed (``gradings_failed``)."""
    from grader.labs import get_spec_class
    from grader.report import Report
    from grader.runner import _Session, _store_submission
    from grader import notebook

    spec = get_spec_class(lab_id)()
    path = submission or ROOT / "solutions" / spec.notebook
    src = path.read_text() if path.suffix == ".py" else notebook.submission_source(path)
    per_rule: dict[str, list] = {}
    failing = 0  # gradings in which a scored rule failed
    with tempfile.TemporaryDirectory() as d:
        session = _Session(spec, _store_submission(spec.lab_id, src), Path(d),
                           Report.start(spec, str(path)))
        if not session.start():
            raise SystemExit(f"{lab_id}: {path.name} did not load: {session.load_error}")
        try:
            for i in range(gradings):
                r = session.worker.request({"op": "perf", "plan": spec.perf_plan()},
                                           spec.perf_timeout_s)
                if not r.get("ok"):
                    raise SystemExit(f"{lab_id}: performance phase {i + 1} failed: {r}")
                rules = spec.perf_rules(r["measured"])
                failing += any(rule.scored and not rule.passed for rule in rules)
                for rule in rules:
                    per_rule.setdefault(rule.name, []).append(rule)
                print(f"  {lab_id} {path.name}: grading {i + 1}/{gradings} done", file=sys.stderr,
                      flush=True)
        finally:
            session.close()
    out = {}
    for name, rules in per_rule.items():
        vals = [x.measured for x in rules if x.measured is not None]
        margins = [m for m in map(margin, rules) if m is not None]
        out[name] = {"op": rules[0].op, "threshold": rules[0].threshold, "unit": rules[0].unit,
                     "median": statistics.median(vals) if vals else None,
                     "min": min(vals, default=None), "max": max(vals, default=None),
                     "smallest_margin": min(margins, default=None),
                     "largest_margin": max(margins, default=None),
                     "failed": sum(not x.passed for x in rules), "gradings": len(rules),
                     "scored": rules[0].scored}
    return {"rules": out, "gradings": gradings, "gradings_failed": failing}


def table(title: str, summary: dict, margin_key: str) -> None:
    """Print one summary as the table described above."""
    print(f"\n{title}")
    print(f"  {'rule':<44} {'median':>10} {'min–max':>19} {'threshold':>12} "
          f"{margin_key.replace('_', ' '):>14} {'failed':>7}")
    for name, r in summary.items():
        print(f"  {name:<44} {fmt(r['median']):>10} "
              f"{fmt(r['min']) + '–' + fmt(r['max']):>19} "
              f"{r['op'] + ' ' + format(r['threshold'], 'g'):>12} "
              f"{fmt(r[margin_key]):>14} {r['failed']:>4}/{r['gradings']}"
              + ("" if r["scored"] else "  (gate)"))


def fmt(v) -> str:
    """A table cell: ``-`` for None, else three significant digits."""
    return "-" if v is None else f"{v:.3g}"


def main(argv=None) -> int:
    from grader.labs import all_specs

    args = parse_args(argv)
    labs = args.lab or [s.lab_id for s in all_specs() if s.tier == "cpu"]
    results = {}
    for lab in labs:
        sol = run_lab(lab, args.gradings)
        results[lab] = {"solution": sol, "too_slow": {}}
        table(f"{lab}: {args.gradings} performance phases of the reference solution in a row; "
              f"a scored rule failed in {sol['gradings_failed']}", sol["rules"], "smallest_margin")
        for path in too_slow(lab):
            slow = results[lab]["too_slow"][path.stem] = run_lab(lab, args.slow_gradings, path)
            table(f"{lab}: wrong/{path.name} (too slow), {args.slow_gradings} performance phases;"
                  f" rejected (a scored rule failed) in {slow['gradings_failed']}",
                  slow["rules"], "largest_margin")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now().isoformat(timespec="seconds")
    args.out.write_text(json.dumps({"when": when, "gradings": args.gradings,
                                    "slow_gradings": args.slow_gradings, "labs": results},
                                   indent=2))
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
