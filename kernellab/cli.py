"""The ``kernellab`` command: ``doctor``, ``list``, ``grade``, ``release``, ``coverage``.

Exit status: 0 success (``grade``: every check passed); 1 a check failed (``grade``: the
submission failed something; ``release --check``: labs out of date); 2 a usage error (unknown
lab, missing file, bad hidden-case file); 3 an internal error of the grader itself (reported in
one line; set ``KERNELLAB_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import kernellab  # noqa: F401  first: thread settings and device tier before numpy/numba


def _project_root() -> Path:
    """The course checkout: the current directory if it holds solutions/, else the source tree."""
    cwd = Path.cwd()
    if (cwd / "solutions").is_dir():
        return cwd
    return Path(__file__).resolve().parent.parent


def cmd_doctor(args) -> int:
    from kernellab import device, doctor

    try:
        facts = doctor.collect()
    except device.DeviceError as exc:
        print(f"kernellab doctor: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(facts, indent=2, default=str) if args.json else doctor.render(facts))
    return 0


def cmd_list(args) -> int:
    from grader.labs import all_specs

    for s in all_specs():
        print(f"{s.lab_id:<16} {s.title}  [tier {s.tier}; solutions/{s.notebook}, labs/{s.notebook}]")
    return 0


def cmd_release(args) -> int:
    from kernellab.release import release

    status, msgs = release(Path(args.root) if args.root else _project_root(), check=args.check)
    for m in msgs:
        print(m)
    return status


def cmd_coverage(args) -> int:
    from grader import coverage

    if not (args.write or args.check):
        print(coverage.markdown())
        return 0
    root = Path(args.root) if args.root else _project_root()
    status, msg = coverage.update_readme(root / "README.md", check=args.check)
    print(msg)
    return status


def cmd_grade(args) -> int:
    from grader.labs import UnknownLab, get_spec_class
    from grader.runner import grade

    for stream in (sys.stdout, sys.stderr):  # a report must print on any terminal encoding
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):  # not a TextIOWrapper (e.g. captured by a test)
            pass

    from grader.report import Report
    from grader.spec import HiddenCases

    try:
        spec = get_spec_class(args.lab)()
        spec.cases(HiddenCases.load(args.hidden))  # the caller's mistakes, before any grading
    except (UnknownLab, ValueError) as exc:
        print(f"kernellab grade: {exc}", file=sys.stderr)
        return 2
    reports, status = [], 0
    for sub in args.submission:
        progress = None if (args.json or args.quiet) else (
            lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
        try:
            rep = grade(args.lab, sub, hidden=args.hidden, run_performance=not args.no_perf,
                        progress=progress)
        except Exception as exc:  # noqa: BLE001 - one broken grading must not end a batch
            if os.environ.get("KERNELLAB_DEBUG"):
                raise
            rep = Report.start(spec, str(sub))
            rep.fatal = (f"internal error of the grader ({type(exc).__name__}: {exc}); not the "
                         "submission's fault — set KERNELLAB_DEBUG=1 for details")
            rep = rep.finish()
            status = 3
        reports.append(rep)
        if not rep.passed and status == 0:
            status = 1
        if not args.json:
            print(rep.to_text())
            if len(args.submission) > 1:
                print("=" * 78)
    if args.json:
        data = [r.to_dict() for r in reports]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2, default=str))
    if args.csv:
        import csv

        with open(args.csv, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
            w = csv.writer(f)
            w.writerow(["submission", "lab", "score", "max_score", "passed", "cases_passed",
                        "cases_total", "fatal"])
            for r in reports:
                d = r.to_dict()
                w.writerow([r.submission, r.lab, r.score, d["max_score"], r.passed,
                            d["cases_passed"], d["cases_total"], r.fatal or ""])
    return status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernellab", description="Kernel Lab: course runtime and "
                                "autograder for deep-learning operator engineering")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="print the device tier, versions, BLAS kernel, CPU and its measured and nominal peak")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)
    ls = sub.add_parser("list", help="list the labs")
    ls.set_defaults(func=cmd_list)
    g = sub.add_parser("grade", help="grade a lab notebook or .py submission")
    g.add_argument("lab", help="lab id (see `kernellab list`)")
    g.add_argument("submission", nargs="+", help="lab notebook(s) (.ipynb) or .py file(s)")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.add_argument("--hidden", metavar="FILE", help="instructor's hidden-case JSON file")
    g.add_argument("--csv", metavar="FILE", help="write one row of scores per submission")
    g.add_argument("--no-perf", action="store_true", help="correctness only")
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    g.set_defaults(func=cmd_grade)
    r = sub.add_parser("release", help="regenerate labs/ from solutions/")
    r.add_argument("--check", action="store_true", help="only verify labs/ is up to date")
    r.add_argument("--root", help="course checkout (default: current directory)")
    r.set_defaults(func=cmd_release)
    c = sub.add_parser("coverage", help="the labs' dtype-coverage matrix (from the lab specs)")
    c.add_argument("--write", action="store_true", help="write it into README.md")
    c.add_argument("--check", action="store_true", help="only verify README.md's copy")
    c.add_argument("--root", help="course checkout (default: current directory)")
    c.set_defaults(func=cmd_coverage)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback of our own for users
        if os.environ.get("KERNELLAB_DEBUG"):
            raise
        print(f"kernellab {args.cmd}: internal error: {type(exc).__name__}: {exc} "
              "(set KERNELLAB_DEBUG=1 for details)", file=sys.stderr)
        return 3
