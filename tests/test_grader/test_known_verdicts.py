"""Every known-wrong and known-good submission of every lab gets the verdict recorded for it in
tests/known_verdicts.json, recorded from the grader before the lab folders (commit bbdba92) by
``python tests/known.py`` (gemm-cpu, winograd and int8-linear recorded again with ``--labs``
when each repeated case got three repeats: only the new repeat rows and the scores changed): the
same pass or fail, score, fatal reason, static findings, each case's verdict and what its error
says (tests/known.py: ``signature``), and the reason its lab's self-test checked (``expect``).
The manifest lists exactly the stored submissions; one stored as a change to its lab's solution
applies exactly or fails naming itself and its hunk.

Graded as the labs' self-tests grade them (tests/known.py: ``grading``). ``make test`` grades
those whose labs' generic "known wrong fails for its reason" tests this one took over
(``known.FULL``: the same gradings those ran); the others' reasons are checked in detail by
their labs' tests, and ``KERNELLAB_KNOWN_FULL=1`` grades every one here too, the timed ones'
performance phase included: the before/after check of a change to the grader (about 15 minutes
on two cores)."""

from __future__ import annotations

import json
import os
import re

import pytest

import known
from grader.labs import get_spec_class
from grader.runner import grade

MANIFEST = json.loads(known.MANIFEST.read_text())
ENTRIES = [(lab, name, e["kind"]) for lab, subs in MANIFEST.items() for name, e in subs.items()]
TIMED = [(lab, name, kind) for lab, name, kind in ENTRIES if "performance" in MANIFEST[lab][name]]
#: every submission in full, and the timed ones' performance phase too (a before/after check
#: of a refactor; make test grades in full only those whose labs' generic tests this replaced)
FULL = os.environ.get("KERNELLAB_KNOWN_FULL") == "1"


def _id(entry) -> str:
    return f"{entry[0]}:{entry[2]}/{entry[1]}"


def test_the_manifest_lists_every_stored_submission_and_nothing_else():
    stored = {(lab, name, kind) for lab in known.LABS for kind in known.KINDS
              for name in known.submissions(lab, kind)}
    assert sorted(stored - set(ENTRIES)) == [], "stored but not in tests/known_verdicts.json"
    assert sorted(set(ENTRIES) - stored) == [], "in tests/known_verdicts.json but not stored"
    assert {(lab, name) for lab, name, _ in TIMED} == known.PERFORMANCE
    other = [p for lab in known.LABS for kind in known.KINDS
             for p in known.folder(lab, kind).rglob("*") if p.is_file()
             and "__pycache__" not in p.parts and p.suffix not in (".py", ".diff")
             and p.name != "README.md"]
    assert other == [], "neither a submission (.py, .diff) nor a README"


def _texts(report, e: dict) -> list[str]:
    field, case = e["field"], e.get("case", "")
    if field == "errors":  # the failing cases' errors (of the cases whose name starts so)
        return [c.error or "" for c in report.cases if not c.passed and c.case.startswith(case)]
    if field == "first_error":
        return [c.error or "" for c in report.cases if not c.passed][:1]
    return {"static": list(report.static), "fatal": [report.fatal or ""],
            "report": [report.to_text()]}[field]


def check_expect(report, expect: list[dict]) -> None:
    """Each check ``{"field", "how", "text"}`` of a manifest entry's ``expect`` (its lab
    self-test's reason): ``how`` "all" (every text of the field holds one of ``text``),
    "all_or_same" (or is a "same error as" line), "any", "none" (no text holds any),
    "match" (the regular expression ``text`` is found in one) or "count" (found exactly ``n``
    times in each)."""
    for e in expect:
        texts, alts = _texts(report, e), e["text"]
        alts = alts if isinstance(alts, list) else [alts]
        holds = [any(a in t for a in alts) for t in texts]
        how = e["how"]
        if how == "all":
            assert texts and all(holds), (e, texts)
        elif how == "all_or_same":
            assert texts and all(h or t.startswith("same") for h, t in zip(holds, texts)), \
                (e, texts)
        elif how == "any":
            assert any(holds), (e, texts)
        elif how == "none":
            assert not any(holds), (e, texts)
        elif how == "match":
            assert any(re.search(alts[0], t) for t in texts), (e, texts)
        elif how == "count":
            assert texts and all(len(re.findall(alts[0], t)) == e["n"] for t in texts), \
                (e, texts)
        else:
            raise AssertionError(f"unknown expect check {e}")


@pytest.mark.parametrize("lab_id,name,kind", ENTRIES, ids=[_id(e) for e in ENTRIES])
def test_each_submission_gets_its_recorded_verdict(lab_id, name, kind, tmp_path):
    if not (FULL or name in known.FULL[lab_id]):
        pytest.skip("graded in detail by its lab's tests (KERNELLAB_KNOWN_FULL=1 grades it here)")
    entry = MANIFEST[lab_id][name]
    rep = grade(lab_id, known.submission(lab_id, name, kind, tmp_path),
                **known.grading(lab_id, kind, name))
    got, want = known.signature(rep), entry["correctness"]
    if entry.get("errors_vary"):  # which error a failing case reports is not deterministic
        got, want = known.without_errors(got), known.without_errors(want)
    assert got == want, rep.to_text()
    check_expect(rep, entry.get("expect", []))
    assert "Traceback" not in rep.to_text()  # a plain reason, never the grader's traceback


@pytest.mark.skipif(not FULL, reason="the timed ones' speed verdicts are their labs' tests' "
                                     "(KERNELLAB_KNOWN_FULL=1 checks them here too)")
@pytest.mark.parametrize("lab_id,name,kind", [
    # a cpu-tier lab's speed verdict is timed on this machine's CPU: make test runs it alone
    pytest.param(*e, marks=[pytest.mark.timed] if get_spec_class(e[0])().tier == "cpu" else [],
                 id=_id(e))
    for e in TIMED])
def test_each_timed_submission_gets_its_recorded_speed_verdict(lab_id, name, kind, tmp_path):
    rep = grade(lab_id, known.submission(lab_id, name, kind, tmp_path),
                **known.grading(lab_id, kind, name, performance=True))
    assert known.signature(rep) == MANIFEST[lab_id][name]["performance"], rep.to_text()


# ---------------------------------------------------------------- submissions stored as a change
DIFFS = [(lab, name, kind, p) for lab in known.LABS for kind in known.KINDS
         for name, p in known.stored(lab, kind).items() if p.suffix == ".diff"]


def test_each_stored_change_is_exact_and_keeps_the_submissions_header(tmp_path):
    assert DIFFS
    for lab, name, kind, p in DIFFS:
        sol = known.solution_source(lab)
        text = known.submission(lab, name, kind, tmp_path).read_text()
        assert text.lstrip().startswith(("#", '"""')), f"{p}: no header comment"
        # stored as difflib writes it: re-made from the result, the same diff
        assert known.make_diff(lab, name, sol, text, known.diff_header(p.read_text())) \
            == p.read_text(), f"{p}: not the diff of the solution and its result; re-make it"


def test_a_change_that_no_longer_applies_names_the_submission_and_its_hunk():
    lab, name, _, p = next(d for d in DIFFS if d[1] == "k_capped")
    diff = p.read_text()
    sol = known.solution_source(lab)
    assert known.apply_diff(sol, diff, name) != sol
    edited = sol.replace("for k0 in range(0, t.K, t.l1_k):", "for k0 in range(0, t.K, t.l1_k):  #")
    assert edited != sol
    with pytest.raises(known.StaleDiff, match=r"k_capped: hunk @@ -\d+,\d+ \+\d+,\d+ @@ does not "
                                              r"apply at line \d+ .* the solution changed; "
                                              r"re-make this diff"):
        known.apply_diff(edited, diff, name)
    # a line moved by one is no match either (no offsets, no fuzz)
    with pytest.raises(known.StaleDiff, match="does not apply"):
        known.apply_diff("\n" + sol, diff, name)
