"""``make check``: a smoke run that says in one line whether the set-up works (under a minute).

Three steps, stopping at the first failure: the package is installed and imported from this
checkout; the first code cell of chapter 1 runs in a Jupyter kernel (nbclient, as JupyterLab
would); one lab's solution is graded, correctness only, and must pass. Exit 0 when all pass,
1 otherwise (the verdict names the step and the reason).

Run it as ``python -m grader.smoke`` from the course checkout.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "chapters/01_cache_blocked_gemm.ipynb"
#: the lab graded: its correctness cases are the quickest to compile and run on 2 cores
LAB, SOLUTION = "int8-linear", "solutions/06_int8_linear.ipynb"


class SmokeFailure(Exception):
    """A step failed; the message says which and why."""


def check_install() -> str:
    """The package is installed, its ``kernellab`` command exists, and ``import kernellab`` from
    another folder finds this checkout (not a stray copy or folder of that name)."""
    from importlib import metadata

    try:
        version = metadata.version("kernellab")
    except metadata.PackageNotFoundError:
        raise SmokeFailure("install: the kernellab package is not installed (run `make "
                           "install`)") from None
    if not (Path(sys.executable).parent / "kernellab").exists():
        raise SmokeFailure(f"install: no `kernellab` command next to {sys.executable}")
    with tempfile.TemporaryDirectory() as elsewhere:
        found = subprocess.run(
            [sys.executable, "-c", "import importlib.util as u; "
             "print(u.find_spec('kernellab').origin)"],
            cwd=elsewhere, capture_output=True, text=True, timeout=60).stdout.strip()
    if not found or Path(found).resolve().parent != ROOT / "kernellab":
        raise SmokeFailure(f"import: outside this folder `import kernellab` finds "
                           f"{found or 'nothing'}, not {ROOT / 'kernellab'} (reinstall: "
                           "`make install`)")
    import kernellab

    return f"kernellab {version} installed (tier {kernellab.TIER})"


def check_chapter_cell() -> str:
    """Run the first code cell of chapter 1 in a fresh Jupyter kernel; it must not raise."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(ROOT / CHAPTER), as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    nb.cells = [first]
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "chapters")}})
    try:  # the kernel's own start-up chatter is not a result: its stderr is dropped
        client.execute(stderr=subprocess.DEVNULL)
    except Exception as exc:  # noqa: BLE001 - nbclient raises CellExecutionError and kernel errors
        lines = str(exc).strip().splitlines()
        raise SmokeFailure(f"chapter cell: {CHAPTER} cell 1 failed: "
                           f"{lines[-1] if lines else type(exc).__name__}") from None
    errors = [o for o in first.outputs if o.get("output_type") == "error"]
    if errors:
        raise SmokeFailure(f"chapter cell: {CHAPTER} cell 1 raised {errors[0].get('ename')}")
    return f"{Path(CHAPTER).name} cell 1 ran"


def check_grading() -> str:
    """Grade :data:`LAB`'s solution, correctness only: it must pass every case."""
    from grader.runner import grade

    rep = grade(LAB, ROOT / SOLUTION, run_performance=False)
    if not rep.passed:
        why = rep.fatal or f"{sum(c.passed for c in rep.cases)}/{len(rep.cases)} cases pass"
        raise SmokeFailure(f"grading: the {LAB} solution did not pass ({why}); run `kernellab "
                           f"grade {LAB} {SOLUTION} --no-perf` for the report")
    return f"{LAB} solution graded {rep.score:g}/{rep.max_score}"


def main() -> int:
    t0 = time.perf_counter()
    done = []
    try:
        for step in (check_install, check_chapter_cell, check_grading):
            t = time.perf_counter()
            done.append(f"{step()} ({time.perf_counter() - t:.1f} s)")
    except SmokeFailure as exc:
        print(f"make check: FAIL at {exc} [{time.perf_counter() - t0:.0f} s]")
        return 1
    print(f"make check: OK — {'; '.join(done)}; {time.perf_counter() - t0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
