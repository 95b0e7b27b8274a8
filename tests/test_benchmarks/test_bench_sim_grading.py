"""``make bench-sim``'s grading part (benchmarks/bench_sim.py): the table's lines, the summary and
its verdict, and the list of what it grades, on rows made up here (no grading runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_sim  # noqa: E402

BUDGET = bench_sim.GRADING_BUDGET_S


def _row(**kw):
    row = dict(lab="gemm-cuda", submission="solution", file="solutions/02_gemm_cuda.ipynb",
               seconds=BUDGET / 2, within_budget=True, passed=True, score=100.0,
               max_score=100.0, tier="sim", exit_status=0, error=None)
    row.update(kw)
    return row


def test_a_row_names_its_lab_submission_verdict_score_seconds_and_budget():
    (line,) = bench_sim.grading_lines(_row(seconds=12.34))
    assert line.split() == ["gemm-cuda", "solution", "PASS", "100/100", "12.3", "yes"]
    assert bench_sim.grading_header().split()[:5] == ["lab", "submission", "verdict", "score",
                                                      "seconds"]
    assert f"within {BUDGET:g} s" in bench_sim.grading_header()


def test_a_slow_failing_row_says_so_and_its_error_goes_on_the_next_line():
    lines = bench_sim.grading_lines(_row(seconds=BUDGET + 1, within_budget=False, passed=False,
                                         score=60.0, error="a rule failed"))
    assert lines[0].split()[2:] == ["FAIL", "60/100", f"{BUDGET + 1:.1f}", "NO"]
    assert lines[1].strip() == "a rule failed"


def test_a_grading_that_could_not_run_has_no_figures_and_is_not_over_the_budget():
    row = bench_sim.grade_timed("flash-attention", "ok/x", "the diff no longer applies")
    assert row["seconds"] is None and row["within_budget"] is None and not row["passed"]
    line, why = bench_sim.grading_lines(row)
    assert line.split()[2:] == ["FAIL", "-", "-", "-"]
    assert why.strip() == "the diff no longer applies"
    summary, ok = bench_sim.grading_verdict([row])
    assert not ok
    assert summary == [f"0 of 1 gradings exceeded the {BUDGET:g} s budget",
                       "1 of 1 gradings did not pass"]


@pytest.mark.parametrize("rows, over, failed", [
    ([_row(), _row(submission="ok/a")], 0, 0),
    ([_row(), _row(within_budget=False)], 1, 0),
    ([_row(passed=False), _row()], 0, 1),
    ([_row(within_budget=False, passed=False)], 1, 1),
])
def test_the_verdict_fails_on_any_grading_over_the_budget_or_not_passing(rows, over, failed):
    summary, ok = bench_sim.grading_verdict(rows)
    assert ok == (over == 0 and failed == 0)
    assert summary[0] == f"{over} of {len(rows)} gradings exceeded the {BUDGET:g} s budget"
    assert (f"{failed} of {len(rows)} gradings did not pass" in summary) == bool(failed)


def test_each_lab_grades_its_solution_then_every_stored_honest_variant(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import known

    labs = [("gemm-cuda", "02_gemm_cuda.ipynb"), ("flash-attention", "05_flash_attention.ipynb")]
    got = bench_sim.gradings(labs, tmp_path)
    for lab_id, notebook in labs:
        mine = [(name, path) for lab, name, path in got if lab == lab_id]
        assert mine[0] == ("solution", ROOT / "solutions" / notebook)
        assert [n for n, _ in mine[1:]] == [f"ok/{n}" for n in known.submissions(lab_id, "ok")]
        assert all(isinstance(p, Path) and p.is_file() for _, p in mine)


@pytest.mark.parametrize("rep, why", [
    ({"fatal": "it breaks the lab's rules"}, "it breaks the lab's rules"),
    ({"broken": {"gemm": "missing"}}, "gemm: missing"),
    ({"cases": [{"case": "1x1x1", "passed": True},
                {"case": "17x17x17", "passed": False, "error": "wrong value\nmore"}]},
     "1 of 2 cases fail; 17x17x17: wrong value"),
    ({"cases": [{"case": "1x1x1", "passed": True}],
      "rules": [{"name": "coalesced", "passed": False}, {"name": "speedup", "passed": True}]},
     "rules failed: coalesced"),
])
def test_a_failed_report_says_why_in_one_line(rep, why):
    assert bench_sim._why_failed(rep) == why


def test_slow_by_design_passes_only_on_exactly_its_rules_with_every_case_passing():
    sys.path.insert(0, str(ROOT / "tests"))
    import known

    for (lab_id, name), (rules, why) in bench_sim.SLOW_BY_DESIGN.items():
        kind, sub = name.split("/")
        assert kind == "ok" and sub in known.submissions(lab_id, "ok") and why
        cases = [{"case": "a", "passed": True}, {"case": "b", "passed": True}]
        ran = [{"name": r, "passed": False} for r in rules] + [{"name": "x", "passed": True}]
        assert bench_sim._fails_only({"cases": cases, "rules": ran}, rules)
        # one more failing rule, a failing case, or a fatal stop: not what is expected
        assert not bench_sim._fails_only(
            {"cases": cases, "rules": ran + [{"name": "y", "passed": False}]}, rules)
        assert not bench_sim._fails_only(
            {"cases": cases + [{"case": "c", "passed": False}], "rules": ran}, rules)
        assert not bench_sim._fails_only({"fatal": "stop", "cases": cases, "rules": ran}, rules)
        assert not bench_sim._fails_only({"cases": cases, "rules": []}, rules)


def test_a_slow_by_design_row_that_passes_everything_fails_the_bench():
    (lab_id, name), (rules, _) = next(iter(bench_sim.SLOW_BY_DESIGN.items()))
    cases = [{"case": "a", "passed": True}]
    row = _row(lab=lab_id, submission=name)
    bench_sim.expect_verdict(row, {"passed": True, "cases": cases,
                                   "rules": [{"name": r, "passed": True} for r in rules]})
    assert not row["passed"] and row["error"].startswith("expected to fail exactly")
    row = _row(lab=lab_id, submission=name, passed=False, error="rules failed: x")
    bench_sim.expect_verdict(row, {"passed": False, "cases": cases,
                                   "rules": [{"name": r, "passed": False} for r in rules]})
    assert row["passed"] and row["error"].startswith("as expected")
    other = _row(submission="ok/a", passed=False, error="e")
    bench_sim.expect_verdict(other, {})       # not listed: untouched
    assert not other["passed"] and other["error"] == "e"
