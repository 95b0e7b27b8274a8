"""The machine time of the course: each chapter run end to end, each lab's solution graded.

The figures START_HERE.md's "How long" table quotes, re-measured on this machine:

* **chapter**: the wall time of ``jupyter nbconvert --to notebook --execute`` of each
  ``chapters/*.ipynb`` (the executed copy goes to a temporary folder; the chapter is untouched),
  and its slowest cell, from the execution times nbclient records in the executed copy's cell
  metadata (``execution``: ``iopub.execute_input`` to ``shell.execute_reply``); a cell over
  :data:`LECTURE_CELL_S` is flagged, since a lecture demo should not wait longer on one;
* **grading**: the wall time of ``kernellab grade LAB solutions/<notebook> --quiet`` for each lab
  of :data:`grader.labs.LABS` (the lab's own solution; the first grading of a ``sim`` lab also
  measures the baseline kernel it compares with, so it is slower than the next).

Each step runs ``--runs`` times, one at a time, in a child process; the table gives the min-max.
The cache of compiled kernels is whatever this machine has: run it twice to see the warm
figures. A step that fails (a chapter cell raises, a grading exits non-zero) is reported as such,
with its time. Prints a Markdown table in START_HERE.md's form and writes
``benchmarks/results/course_time.json``. A benchmark never fails a build: the exit status is 0
unless the script itself crashes.

Usage: ``python benchmarks/bench_course_time.py [--runs 2] [--only 04 winograd ...] [--out PATH]``
(``--only``: chapter number prefixes and lab ids to run; default all).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "course_time.json"
TIMEOUT_S = 1800
#: the longest a chapter cell should take on the course machine (a lecture demo waits on it)
LECTURE_CELL_S = 10.0


def _timed(cmd: list[str]) -> dict:
    """Wall time of one child process (seconds) and whether it exited 0."""
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        ok, tail = proc.returncode == 0, (proc.stdout + proc.stderr)[-400:]
    except subprocess.TimeoutExpired:
        ok, tail = False, f"timed out after {TIMEOUT_S} s"
    return {"seconds": time.perf_counter() - t0, "ok": ok, "tail": "" if ok else tail}


def slowest_cell(executed: Path) -> dict | None:
    """The slowest code cell of an executed notebook: {"cell": code-cell index, "seconds"},
    from the timestamps nbclient records (None when there are none)."""
    import nbformat
    from datetime import datetime as dt

    nb = nbformat.read(str(executed), as_version=4)
    best = None
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        t = cell.metadata.get("execution", {})
        if "iopub.execute_input" in t and "shell.execute_reply" in t:
            secs = (dt.fromisoformat(t["shell.execute_reply"].replace("Z", "+00:00"))
                    - dt.fromisoformat(t["iopub.execute_input"].replace("Z", "+00:00"))
                    ).total_seconds()
            if best is None or secs > best["seconds"]:
                best = {"cell": i, "seconds": secs}
    return best


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def labs() -> list[tuple[str, str | None, str]]:
    """(lab id, solution notebook or None, why not) for every registered lab, in order."""
    from grader.labs import LABS

    out = []
    for lab_id, target in LABS.items():
        mod, cls = target.split(":")
        try:
            notebook = getattr(importlib.import_module(mod), cls)().notebook
        except Exception as e:  # a spec that does not load is reported, not fatal
            out.append((lab_id, None, f"spec does not load: {type(e).__name__}: {e}"))
            continue
        path = ROOT / "solutions" / notebook
        out.append((lab_id, notebook, "" if path.is_file() else f"no solutions/{notebook}"))
    return out


def step_of(notebook: str) -> str:
    """``07a_npu_vector_add.ipynb`` -> ``7a``; ``01_gemm_cpu.ipynb`` -> ``1``."""
    return notebook.split("_", 1)[0].lstrip("0")


def _span(runs: list[dict]) -> str:
    s = sorted(r["seconds"] for r in runs)
    text = f"{s[0]:.0f} s" if round(s[0]) == round(s[-1]) else f"{s[0]:.0f}–{s[-1]:.0f} s"
    return text if all(r["ok"] for r in runs) else text + " (FAILED)"


def table(result: dict) -> str:
    """START_HERE.md's table: one row per step, the chapter's and the grading's time."""
    rows = {}
    for name, runs in result["chapters"].items():
        rows.setdefault(step_of(name), {})["chapter"] = _span(runs)
    for lab_id, r in result["gradings"].items():
        cell = _span(r["runs"]) if r["runs"] else f"not run: {r['skipped']}"
        rows.setdefault(step_of(r["notebook"] or lab_id), {})["grading"] = cell
    for step in [s for s in rows if "grading" not in rows[s]]:  # chapter 7: labs 7a and 7b
        split = sorted(s for s in rows if s != step and s.rstrip("abcdefgh") == step)
        if split:
            rows[split[0]]["chapter"] = f"{rows.pop(step)['chapter']} (chapter {step})"
    lines = ["| step | running the chapter | grading a finished lab |", "|---|---|---|"]
    for step in sorted(rows, key=lambda s: (int("".join(c for c in s if c.isdigit()) or 0), s)):
        r = rows[step]
        lines.append(f"| {step} | {r.get('chapter', '(the same chapter)')} | "
                     f"{r.get('grading', '—')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs of each step (default 1)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="chapter prefixes (04) and lab ids (winograd) to run; default all")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    want = set(args.only) if args.only else None
    py = sys.executable
    result = {"when": datetime.now().isoformat(timespec="seconds"),
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "python": platform.python_version()},
              "runs": args.runs, "chapters": {}, "gradings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for ch in chapters():
            if want is not None and ch.name[:2] not in want:
                continue
            cmd = [py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                   "--output-dir", tmp, str(ch)]
            runs = []
            for _ in range(args.runs):
                runs.append(_timed(cmd))
                executed = Path(tmp) / ch.name
                runs[-1]["slowest_cell"] = slowest_cell(executed) if executed.is_file() else None
                executed.unlink(missing_ok=True)
            result["chapters"][ch.name] = runs
            slow = max((r["slowest_cell"] for r in runs if r["slowest_cell"]),
                       key=lambda c: c["seconds"], default=None)
            note = "" if slow is None else (
                f"; slowest cell: code cell {slow['cell']}, {slow['seconds']:.1f} s"
                + (f" (over {LECTURE_CELL_S:.0f} s)" if slow["seconds"] > LECTURE_CELL_S else ""))
            print(f"chapter {ch.name}: {_span(runs)}{note}", flush=True)
    for lab_id, notebook, why in labs():
        if want is not None and lab_id not in want:
            continue
        runs = [] if why else [
            _timed([py, "-m", "kernellab", "grade", lab_id, f"solutions/{notebook}", "--quiet"])
            for _ in range(args.runs)]
        result["gradings"][lab_id] = {"notebook": notebook, "runs": runs, "skipped": why}
        print(f"grading {lab_id}: {_span(runs) if runs else 'not run: ' + why}", flush=True)
    print()
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
