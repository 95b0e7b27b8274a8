"""The dtype-coverage matrix in docs/grading.md and the labs' rule tables in their READMEs are
generated from the lab specs and kept current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader import coverage
from grader.labs.softmax_cuda import spec as softmax_cuda

ROOT = Path(__file__).resolve().parents[2]
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
    fp16 = rows["softmax-cuda"]["FP16"]
    assert fp16.startswith("✓") and "softmax" in fp16
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


def test_every_lab_readme_rule_table_is_current():
    """Every lab has a folder README with a rule table generated from its spec's ``rules``,
    and it is current: a lab without rules, README or markers fails here by name."""
    bad = [m for st, m in coverage.update_rule_tables(ROOT, check=True) if st != 0]
    assert not bad, bad


def test_rule_table_follows_the_spec_and_a_lab_without_rules_fails(tmp_path, monkeypatch):
    from grader.labs.gemm_cpu.spec import GemmCPU
    from grader.rules import Rule

    readme = coverage.lab_readme("gemm-cpu", tmp_path)
    readme.parent.mkdir(parents=True)
    readme.write_text(f"# Lab 1\n{coverage.RULES_BEGIN}\nold\n{coverage.RULES_END}\ntail\n",
                      encoding="utf-8")

    def gemm_cpu_status(**kw):
        return next((st, m) for st, m in coverage.update_rule_tables(tmp_path, **kw)
                    if "gemm_cpu" in m or "gemm-cpu" in m)

    assert gemm_cpu_status(check=True)[0] == 1
    assert gemm_cpu_status()[0] == 0 and gemm_cpu_status(check=True)[0] == 0
    text = readme.read_text(encoding="utf-8")
    assert "| speedup over the naive ijk kernel | cpu | median ≥ 20x | scored |" in text
    assert text.endswith("\ntail\n")
    monkeypatch.setattr(GemmCPU, "rules", (Rule("speedup over the naive ijk kernel", ">=", 25.0,
                                                "x"),))
    assert gemm_cpu_status(check=True)[0] == 1  # a changed threshold makes the copy stale
    monkeypatch.setattr(GemmCPU, "rules", ())
    st, msg = gemm_cpu_status(check=True)
    assert st == 2 and "gemm-cpu declares no rules" in msg
    readme.write_text("no markers", encoding="utf-8")
    monkeypatch.undo()
    st, msg = gemm_cpu_status()
    assert st == 2 and "no rule-table markers" in msg
