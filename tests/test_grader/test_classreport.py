"""Class reports (:mod:`grader.classreport`): a class of known-good and known-wrong submissions
of two NPU labs (deterministic modelled figures, a few seconds each) graded into the CSV and the
HTML page; a submission that passes every visible case and fails a hidden one is a FAIL labelled
"hidden cases only"; ``kernellab grade --quiet`` prints one line per submission of a class."""

from __future__ import annotations

import csv
import html
import json
import re
from pathlib import Path

import pytest

from grader import classreport
from grader.runner import grade
from known import submission  # tests/known.py
from lab_cli import cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = {"npu-matmul": ROOT / "solutions" / "07b_npu_matmul.ipynb",
            "npu-vector-add": ROOT / "solutions" / "07a_npu_vector_add.ipynb"}
#: a small visible case of npu-matmul that k_capped (K summed only up to 1536) passes
SMALL = {"15x17x31", "31x33x65"}


@pytest.fixture(scope="module")
def matmul_class(tmp_path_factory):
    """npu-matmul's solution, a kernel too slow (one core), a wrong tail, and k_capped graded
    with a hidden case past its K limit: all on a few visible cases plus the hidden one."""
    tmp = tmp_path_factory.mktemp("class")
    hidden = tmp / "hidden.json"
    hidden.write_text(json.dumps({"seed": 1, "cases": [{"M": 20, "N": 24, "K": 2100}]}))
    pick = lambda c: c.hidden or c.name in SMALL  # noqa: E731
    subs = {"solution": (SOLUTION["npu-matmul"], True),
            "one_core": (submission("npu-matmul", "one_core", "wrong", tmp), True),
            "mn_tail_missing": (submission("npu-matmul", "mn_tail_missing", "wrong", tmp), False),
            "k_capped": (submission("npu-matmul", "k_capped", "wrong", tmp), False)}
    reps = {name: grade("npu-matmul", path, hidden=hidden, run_performance=perf, only=pick)
            for name, (path, perf) in subs.items()}
    return reps, tmp


def test_verdicts_tell_a_hidden_only_failure_apart(matmul_class):
    reps, _ = matmul_class
    assert classreport.verdict(reps["solution"]) == "PASS"
    assert classreport.verdict(reps["one_core"]) == "FAIL"
    assert classreport.verdict(reps["mn_tail_missing"]) == "FAIL"
    kc = reps["k_capped"]
    assert all(c.passed for c in kc.cases if not c.hidden)
    assert classreport.verdict(kc) == "FAIL (hidden cases only)"
    assert re.match(r"case hidden\d+ 20x24x2100: ", classreport.first_failure(kc))
    assert classreport.first_failure(reps["one_core"]).startswith("rule ")
    assert classreport.first_failure(reps["solution"]) == ""


def test_the_csv_has_a_row_each_with_rules_cases_and_first_failure(matmul_class):
    reps, tmp = matmul_class
    out = classreport.write_csv(list(reps.values()), tmp / "class.csv")
    rows = {Path(r["submission"]).stem.split(".")[0]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"07b_npu_matmul", "one_core", "mn_tail_missing", "k_capped"}
    sol, slow = rows["07b_npu_matmul"], rows["one_core"]
    rule = next(k[:-len(": measured")] for k in sol if k.endswith(": measured"))
    assert sol["verdict"] == "PASS" and sol[f"{rule}: passed"] == "True"
    assert float(sol[f"{rule}: measured"]) > float(sol[f"{rule}: threshold"]) > 0
    assert sol["visible_passed"] == sol["visible_total"] == str(len(SMALL))
    assert sol["hidden_passed"] == sol["hidden_total"] == "1"
    assert slow["verdict"] == "FAIL" and "False" in [slow[k] for k in slow
                                                     if k.endswith(": passed")]
    kc = rows["k_capped"]
    assert kc["verdict"] == "FAIL (hidden cases only)" and kc["hidden_passed"] == "0"
    assert re.match(r"case hidden\d+ 20x24x2100: ", kc["first_failure"])
    assert rows["mn_tail_missing"]["first_failure"].startswith("case ")
    # correctness-only gradings have no rule figures: empty cells, not zeros
    assert rows["mn_tail_missing"][f"{rule}: measured"] == ""


def test_the_html_report_has_distributions_reasons_and_a_leaderboard(matmul_class):
    reps, tmp = matmul_class
    page = classreport.write_html(list(reps.values()), tmp / "class.html").read_text()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    assert "Class report: npu-matmul" in text and "tier npu" in text
    assert "4 submission(s): 1 PASS, 3 FAIL (1 of them on hidden cases only)" in text
    assert page.count("<svg") == len(reps["solution"].rules)       # a histogram per rule
    assert "Commonest failure reasons" in text and "k_capped" in text
    board = page[page.index("<h2>Leaderboard</h2>"):]
    # ranked by the first rule: the solution above the one-core kernel, both with figures
    assert board.index("07b_npu_matmul") < board.index("one_core")
    assert "higher is better" in board


def test_ties_share_a_rank():
    class R:
        def __init__(self, name, v):
            self.submission, self.passed = name, True
            self.rules = [classreport_rule(v)]

    def classreport_rule(v):
        from grader.spec import RuleResult
        return RuleResult("speedup", v, 2.0, ">=", "x", v >= 2.0)

    rule, board = classreport.leaderboard([R("a", 3.0), R("b", 5.0), R("c", 3.0), R("d", 1.0)])
    assert [(rank, r.submission) for rank, r, _ in board] == [(1, "b"), (2, "a"), (2, "c"),
                                                              (4, "d")]


def test_quiet_class_grading_prints_one_line_each_and_writes_both_files(tmp_path):
    subs = [submission("npu-vector-add", n, "wrong", tmp_path)
            for n in ("tail_not_handled", "ub_overflow")]
    out_csv, out_html = tmp_path / "scores.csv", tmp_path / "class.html"
    r = cli("grade", "npu-vector-add", *map(str, subs), "--no-perf", "--quiet",
            "--csv", str(out_csv), "--html", str(out_html))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2, r.stdout
    assert lines[0].startswith(str(subs[0])) and " FAIL — " in lines[0]
    assert "UBOverflowError" in lines[1] and r.stderr == ""
    assert len(list(csv.DictReader(out_csv.open()))) == 2
    assert "Leaderboard" in out_html.read_text()
    # a report file may not replace a source file
    bad = cli("grade", "npu-vector-add", str(subs[0]), "--html", str(subs[1]))
    assert bad.returncode == 2 and "would write over" in bad.stderr
