"""The dtype-coverage matrix in docs/grading.md is generated from the lab specs and kept current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader import coverage
from grader.labs import softmax_cuda

ROOT = Path(__file__).resolve().parent.parent
KERNELLAB = Path(sys.executable).parent / "kernellab"


def test_grading_doc_copy_is_current():
    status, msg = coverage.update_doc(ROOT / coverage.DOC, check=True)
    assert status == 0, msg


def test_cli_checks_the_grading_doc():
    r = subprocess.run([str(KERNELLAB), "coverage", "--check"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert coverage.DOC.name in r.stdout, r.stdout


def test_matrix_reads_the_specs():
    rows = {r["lab"]: r for r in coverage.matrix()}
    assert rows["softmax-cuda"]["FP16"].startswith("✓") and "softmax" in rows["softmax-cuda"]["FP16"]
    assert rows["gemm-cpu"]["other"] == "float64" and rows["gemm-cuda"]["FP16"] == ""
    # row_sum's output is float32 for float16 inputs: listed under FP16 inputs only
    assert "out: softmax" in rows["softmax-cuda"]["FP16"]
    assert "row_sum" not in rows["softmax-cuda"]["FP16"].split("out:")[1]


def test_matrix_follows_a_change_of_the_spec(monkeypatch):
    monkeypatch.setattr(softmax_cuda, "DTYPES", ("float32",))
    rows = {r["lab"]: r for r in coverage.matrix()}
    assert rows["softmax-cuda"]["FP16"] == ""


def test_stale_copy_is_reported_and_rewritten(tmp_path):
    p = tmp_path / "grading.md"
    p.write_text(f"intro\n{coverage.BEGIN}\nold\n{coverage.END}\ntail\n", encoding="utf-8")
    assert coverage.update_doc(p, check=True)[0] == 1
    assert coverage.update_doc(p)[0] == 0
    assert coverage.update_doc(p, check=True)[0] == 0
    text = p.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("\ntail\n") and "`softmax-cuda`" in text
    p.write_text("no markers", encoding="utf-8")
    assert coverage.update_doc(p)[0] == 2
