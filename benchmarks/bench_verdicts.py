"""``make bench-verdicts``: how far the timed labs' reference solutions clear their speed rules.

Correctness is deterministic (fixed seeds), so on the ``cpu`` tier a verdict can flip only through
timing noise. For each lab asked for (default: every ``cpu``-tier lab: gemm-cpu, winograd,
int8-linear), this loads the reference solution once in the grader's sandboxed worker and runs the
lab's complete performance phase ``--gradings`` times in a row, as that many gradings would, in one
process. Prints, per rule, the median measured value, its min-max over the gradings, and the
smallest margin (measured / threshold for ``>=`` rules, threshold / measured for ``<=``), and how
many gradings each rule failed; writes the same as JSON to ``benchmarks/results/verdicts.json``.
Speed is never pass/fail here: the exit status is 0 unless the script itself crashes, or a solution
cannot be loaded or its performance phase fails.
(``tests/test_grader/labs/gemm_cpu/test_gemm_cpu_verdicts.py`` is the
suite's check that the gemm-cpu verdicts hold with the BLAS variables set and unset.)

Usage: ``python benchmarks/bench_verdicts.py [--lab gemm-cpu ...] [--gradings 20] [--out PATH]``.
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
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "verdicts.json")
    return p.parse_args(argv)


def margin(rule) -> float | None:
    """How far a rule's measurement clears its threshold (> 1: passes)."""
    if rule.measured is None or rule.threshold == 0:
        return None
    if rule.op == ">=":
        return rule.measured / rule.threshold
    return rule.threshold / rule.measured if rule.measured else float("inf")


def run_lab(lab_id: str, gradings: int) -> dict:
    """The performance phase of ``lab_id``'s solution ``gradings`` times in one worker."""
    from grader.labs import get_spec_class
    from grader.report import Report
    from grader.runner import _Session, _store_submission
    from grader import notebook

    spec = get_spec_class(lab_id)()
    solution = ROOT / "solutions" / spec.notebook
    src = notebook.submission_source(solution)
    per_rule: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as d:
        session = _Session(spec, _store_submission(spec.lab_id, src), Path(d),
                           Report.start(spec, str(solution)))
        if not session.start():
            raise SystemExit(f"{lab_id}: the solution did not load: {session.load_error}")
        try:
            for i in range(gradings):
                r = session.worker.request({"op": "perf", "plan": spec.perf_plan()},
                                           spec.perf_timeout_s)
                if not r.get("ok"):
                    raise SystemExit(f"{lab_id}: performance phase {i + 1} failed: {r}")
                for rule in spec.perf_rules(r["measured"]):
                    per_rule.setdefault(rule.name, []).append(rule)
                print(f"  {lab_id}: grading {i + 1}/{gradings} done", file=sys.stderr, flush=True)
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
                     "failed": sum(not x.passed for x in rules), "gradings": len(rules),
                     "scored": rules[0].scored}
    return out


def fmt(v) -> str:
    """A table cell: ``-`` for None, else three significant digits."""
    return "-" if v is None else f"{v:.3g}"


def main(argv=None) -> int:
    from grader.labs import all_specs

    args = parse_args(argv)
    labs = args.lab or [s.lab_id for s in all_specs() if s.tier == "cpu"]
    results = {}
    for lab in labs:
        results[lab] = run_lab(lab, args.gradings)
        print(f"\n{lab}: {args.gradings} performance phases of the reference solution in a row")
        print(f"  {'rule':<44} {'median':>10} {'min–max':>19} {'threshold':>12} "
              f"{'least margin':>12} {'failed':>7}")
        for name, r in results[lab].items():
            print(f"  {name:<44} {fmt(r['median']):>10} "
                  f"{fmt(r['min']) + '–' + fmt(r['max']):>19} "
                  f"{r['op'] + ' ' + format(r['threshold'], 'g'):>12} "
                  f"{fmt(r['smallest_margin']):>12} {r['failed']:>4}/{r['gradings']}"
                  + ("" if r["scored"] else "  (gate)"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"when": datetime.datetime.now().isoformat(timespec="seconds"),
                                    "gradings": args.gradings, "labs": results}, indent=2))
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
