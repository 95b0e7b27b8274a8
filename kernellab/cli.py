"""The ``kernellab`` command. Students: ``doctor``, ``list``, ``start``, ``grade``;
instructors: ``release``, ``coverage``.

Exit status: 0 success (``grade``: every check passed); 1 a check failed (``grade``: the
submission failed something; ``start``: the copy exists already; ``release``: a lab was edited
by hand and left unchanged; ``release --check``: labs out of date); 2 a usage error (no lab,
an unknown one or a file's path where the lab goes, missing file, bad hidden-case file); 3 an
internal error of the grader itself (reported in one line; set ``KERNELLAB_DEBUG=1`` for the
traceback); 141 stdout was closed early (``| head``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path

import kernellab  # noqa: F401  first: thread settings and device tier before numpy/numba

#: the file ``kernellab coverage --write/--check`` keeps the matrix in (instructor docs)
COVERAGE_DOC = "docs/grading.md"


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
    try:  # the OS sandbox the grader's worker runs in (grader.sandbox)
        from grader.sandbox import new_processes, os_sandbox

        facts["grader_sandbox"] = os_sandbox()
        facts["grader_new_processes"] = new_processes()
    except ImportError:  # the runtime without the grader beside it
        pass
    print(json.dumps(facts, indent=2, default=str) if args.json else doctor.render(facts))
    return 0


def cmd_list(args) -> int:
    from grader.labs import all_specs
    from grader import workspace

    root = _project_root()
    for s in all_specs():
        ch = workspace.chapter_for(root, s.notebook)
        after = f"after {workspace.shown(ch)}" if ch else "no chapter"
        print(f"{s.lab_id:<16} {s.title}")
        copy = workspace.copy_status(root, s.notebook, s.lab_id)
        if workspace.work_path(root, s.notebook).exists():
            copy = f"your copy: {copy}"
        print(f"{'':<16} tier {s.tier} · {after} · {copy}")
    return 0


def cmd_start(args) -> int:
    from grader.labs import UnknownLab, get_spec_class
    from grader import workspace

    problem = _lab_problem("start", args.lab, [])
    if problem:
        print(f"kernellab start: {problem}", file=sys.stderr)
        return 2
    try:
        spec = get_spec_class(args.lab)()
    except UnknownLab as exc:
        print(f"kernellab start: {exc}", file=sys.stderr)
        return 2
    root = _project_root()
    try:
        dst = workspace.start(root, spec.notebook, spec.lab_id)
    except workspace.AlreadyStarted as exc:
        print(f"kernellab start: {exc}", file=sys.stderr)
        return 1
    except workspace.WorkspaceError as exc:
        print(f"kernellab start: {exc}", file=sys.stderr)
        return 2
    rel = workspace.shown(dst)
    print(f"copied {workspace.shown(workspace.lab_path(root, spec.notebook))} to "
          f"{rel}: your copy (git ignores work/, and course updates never touch it).")
    print(f"Open {rel} in JupyterLab (`make lab`), fill in the solution cells, then run "
          f"`kernellab grade {spec.lab_id}`.")
    return 0


def cmd_release(args) -> int:
    from grader.release import release

    status, msgs = release(Path(args.root) if args.root else _project_root(), check=args.check,
                           force=args.force)
    for m in msgs:
        print(m)
    return status


def cmd_coverage(args) -> int:
    from grader import coverage

    if not (args.write or args.check):
        print(coverage.markdown())
        return 0
    root = Path(args.root) if args.root else _project_root()
    target = root / COVERAGE_DOC
    if not target.is_file():
        print(f"kernellab coverage: {target} not found (it holds the matrix between the "
              f"markers {coverage.BEGIN} ... {coverage.END})", file=sys.stderr)
        return 2
    status, msgs = coverage.update_all(root, check=args.check)  # + every lab's rule table
    print("\n".join(msgs))
    return status


#: what each command takes, for the message when the lab is missing or is a file's path
USAGE = {"grade": "kernellab grade LAB [NOTEBOOK ...]", "start": "kernellab start LAB"}


def _lab_ids() -> str:
    from grader.labs import LABS

    return ", ".join(LABS)


def _lab_of_file(path: str):
    """The lab spec whose notebook the file name ``path`` matches: the same name or stem, else
    a name that starts with the notebook's stem (``02_gemm_cuda-from-labs.ipynb``), else the
    same lab number (``02``); None when none does."""
    from grader.labs import all_specs

    stem, specs = Path(path).stem, all_specs()
    for s in specs:
        if stem == Path(s.notebook).stem:
            return s
    starts = [s for s in specs if stem.startswith(Path(s.notebook).stem)]
    if starts:
        return max(starts, key=lambda s: len(s.notebook))
    num = re.match(r"\d+[a-z]?(?=_)", stem)
    same = [s for s in specs if num and s.notebook.startswith(num.group(0) + "_")]
    return same[0] if len(same) == 1 else None


def _lab_problem(cmd: str, lab: str | None, rest: list[str]) -> str | None:
    """Why ``lab`` (the first argument of ``cmd``) is not a lab id, in words with the command
    to use, or None: it is missing, or it is a notebook's or file's path."""
    if lab is None:
        return f"give the lab: {USAGE[cmd]}; labs: {_lab_ids()} (see `kernellab list`)"
    from grader.labs import LABS

    if lab in LABS or not (Path(lab).is_file() or Path(lab).suffix.lower() in (".ipynb", ".py")):
        return None
    spec = _lab_of_file(lab)
    what = ("is a file, not a lab id" if Path(lab).is_file()
            else "is a file's name (no such file here), not a lab id")
    if spec is None:
        return (f"{lab} {what}: {USAGE[cmd]}; labs: {_lab_ids()} (see `kernellab list`)")
    args = [spec.lab_id] + ([lab, *rest] if cmd == "grade" else [])
    return (f"{lab} {what}; it looks like lab {spec.lab_id} ({spec.notebook}): "
            f"did you mean `kernellab {cmd} {shlex.join(args)}`?")


def _submissions(args, spec) -> list[str] | None:
    """The paths to grade: those given, else the student's copy ``work/<notebook>``. None (and
    a message) when there is no copy yet."""
    from grader import workspace

    root = _project_root()
    if args.submission:
        labs = (root / workspace.LAB_DIR).resolve()
        for sub in args.submission:
            if not args.quiet and Path(sub).resolve().parent == labs:
                print(f"kernellab grade: note: {sub} is the course's copy, which `kernellab "
                      "release` and `git pull` may replace; work in your own: `kernellab start "
                      f"{spec.lab_id}`", file=sys.stderr)
        return list(args.submission)
    path = workspace.work_path(root, spec.notebook)
    rel = workspace.shown(path)
    if not path.is_file():
        print(f"kernellab grade: no {rel} yet: run `kernellab start "
              f"{spec.lab_id}` first, or give the notebook's path", file=sys.stderr)
        return None
    if not args.quiet:
        print(f"kernellab grade: grading {rel} (your copy; give a path to grade another file)",
              file=sys.stderr)
    return [rel]


def _csv_problem(args, subs: list[str]) -> str | None:
    """Why ``--csv FILE`` or ``--html FILE`` must not be written (it would replace a notebook,
    a .py or one of the submissions, or it is a folder), or None."""
    for opt, name, ext in (("--csv", args.csv, ".csv"), ("--html", args.html, ".html")):
        if not name:
            continue
        target = Path(name)
        if target.suffix.lower() in (".ipynb", ".py") or any(
                target.resolve() == Path(s).resolve() for s in subs):
            return (f"{opt} {name} would write over a notebook or source file; give a new "
                    f"file name ending in {ext}")
        if target.is_dir():
            return f"{opt} {name} is a folder; give a file name ending in {ext}"
    return None


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

    problem = _lab_problem("grade", args.lab, args.submission)
    if problem:
        print(f"kernellab grade: {problem}", file=sys.stderr)
        return 2
    try:
        spec = get_spec_class(args.lab)()
        spec.cases(HiddenCases.load(args.hidden))  # the caller's mistakes, before any grading
    except (UnknownLab, ValueError) as exc:
        print(f"kernellab grade: {exc}", file=sys.stderr)
        return 2
    subs = _submissions(args, spec)
    if subs is None:
        return 2
    problem = _csv_problem(args, subs)
    if problem:
        print(f"kernellab grade: {problem}", file=sys.stderr)
        return 2
    reports, status = [], 0
    for sub in subs:
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
            rep.fatal_kind = "grader-error"
            rep = rep.finish()
            status = 3
        reports.append(rep)
        if not rep.passed and status == 0:
            status = 1
        if args.json:
            continue
        if args.quiet and len(subs) > 1:  # a class: one line each
            from grader.classreport import summary_line

            print(summary_line(rep), flush=True)
            continue
        print(rep.to_text())
        if len(subs) > 1:
            print("=" * 78)
    if args.json:
        data = [r.to_dict() for r in reports]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2, default=str))
    if args.csv or args.html:
        from grader import classreport

        if args.csv:
            classreport.write_csv(reports, args.csv)
        if args.html:
            classreport.write_html(reports, args.html, spec.title, spec.tier)
    return status


EPILOG = """\
students: `kernellab list` shows the labs in course order; `kernellab start LAB` copies one
  into work/ (your copy: git ignores it and course updates never touch it); open it in
  JupyterLab (`make lab`) and fill it in; `kernellab grade LAB` grades it.
instructors: `release` regenerates labs/ from solutions/; `coverage` keeps the dtype-coverage
  matrix of docs/grading.md.
`kernellab COMMAND -h` explains a command."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernellab", description="Kernel Lab: course runtime and "
                                "autograder for deep-learning operator engineering",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", title="commands", metavar="COMMAND")
    d = sub.add_parser("doctor", help="check the set-up: device tier, versions, BLAS kernel, "
                       "CPU and its measured and nominal peak")
    d.add_argument("--json", action="store_true", help="print the facts as JSON")
    d.set_defaults(func=cmd_doctor)
    ls = sub.add_parser("list", help="the labs in course order: tier, the chapter each follows, "
                        "your copy in work/")
    ls.set_defaults(func=cmd_list)
    st = sub.add_parser("start", usage="%(prog)s [-h] LAB", help="copy a lab into work/ to "
                        "fill in (never overwrites your copy)",
                        description="Copy labs/NN.ipynb to work/NN.ipynb, your copy: git "
                        "ignores work/, and `git pull` or `kernellab release` never touch it. "
                        "An existing copy is left as it is.")
    st.add_argument("lab", nargs="?", metavar="LAB", help="lab id (see `kernellab list`)")
    st.set_defaults(func=cmd_start)
    g = sub.add_parser("grade", usage="%(prog)s [-h] [options] LAB [NOTEBOOK ...]",
                       help="grade your copy work/NN.ipynb (or the files given)",
                       description="Grade a lab: your copy work/NN.ipynb when no file is given, "
                       "else each notebook (.ipynb) or .py file given (a class: several files, "
                       "one report each; --csv for the scores).")
    g.add_argument("lab", nargs="?", metavar="LAB", help="lab id (see `kernellab list`)")
    g.add_argument("submission", nargs="*", metavar="NOTEBOOK", help="lab notebook(s) (.ipynb) "
                   "or .py file(s) (default: work/NN.ipynb, made by `kernellab start LAB`)")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.add_argument("--hidden", metavar="FILE", help="instructor's hidden-case JSON file")
    g.add_argument("--csv", metavar="FILE", help="also write one row per submission to FILE "
                   "(a .csv; replaced if it exists): score, verdict, visible and hidden cases, "
                   "each rule's figure, threshold and pass, the first failure")
    g.add_argument("--html", metavar="FILE", help="also write a class report to FILE (a "
                   ".html): each rule's distribution, the commonest failure reasons, a "
                   "leaderboard by the lab's speed metric")
    g.add_argument("--no-perf", action="store_true", help="correctness only: skip the "
                   "performance phase (faster); the score is then out of the correctness "
                   "points and PASS means every case passed")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr while "
                   "grading; with several files, one line per submission instead of its report")
    g.set_defaults(func=cmd_grade)
    r = sub.add_parser("release", help="instructors: regenerate labs/ from solutions/ (refuses "
                       "to overwrite a lab edited by hand)",
                       description="Instructors: regenerate labs/ from solutions/. A lab "
                       "notebook edited by hand (e.g. filled in by a student in place) is left "
                       "unchanged, exit 1, unless --force.")
    r.add_argument("--check", action="store_true", help="only verify labs/ is up to date "
                   "(writes nothing)")
    r.add_argument("--force", action="store_true", help="overwrite labs edited by hand too")
    r.add_argument("--root", help="course checkout (default: current directory)")
    r.set_defaults(func=cmd_release)
    c = sub.add_parser("coverage", help="instructors: the labs' dtype-coverage matrix (from the "
                       f"lab specs; --write/--check {COVERAGE_DOC})")
    c.add_argument("--write", action="store_true", help=f"write it into {COVERAGE_DOC}")
    c.add_argument("--check", action="store_true", help=f"only verify {COVERAGE_DOC}'s copy")
    c.add_argument("--root", help="course checkout (default: current directory)")
    c.set_defaults(func=cmd_coverage)
    return p


def _stdout_closed() -> int:
    """The reader of stdout went away (``kernellab coverage | head -1``): stop quietly, as a
    tool killed by SIGPIPE would (Python docs, "Note on SIGPIPE" in the signal module)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
    return 141


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 0
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback of our own for users
        if os.environ.get("KERNELLAB_DEBUG"):
            raise
        print(f"kernellab {args.cmd}: internal error: {type(exc).__name__}: {exc} "
              "(set KERNELLAB_DEBUG=1 for details)", file=sys.stderr)
        return 3
