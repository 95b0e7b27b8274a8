"""The ``kernellab`` command as the lab tests run it (a child process in the project root, the
suite's environment plus ``env``), and the check every lab makes of its untouched notebook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELLAB = Path(sys.executable).parent / "kernellab"


def cli(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """``kernellab ARGS...`` run from the project root; its output captured as text."""
    return subprocess.run([str(KERNELLAB), *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, **(env or {})), timeout=timeout)


def assert_untouched_fails(lab_id: str, notebook: Path, *options: str) -> None:
    """``kernellab grade LAB NOTEBOOK --quiet OPTIONS`` on the lab as students get it: FAIL
    (exit status 1) with "not implemented" in the report and no traceback anywhere."""
    r = cli("grade", lab_id, str(notebook), "--quiet", *options)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "not implemented" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
