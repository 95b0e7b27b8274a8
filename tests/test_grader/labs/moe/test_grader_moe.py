"""Grader self-tests for lab moe (sim tier): the solution passes in budget with its figures in
the JSON (every case under half its error budget, the speed rules above their thresholds), the
untouched lab fails "not implemented", and the gpu rule judges its figures. Elsewhere: the known
submissions' verdicts (tests/test_grader/test_known_verdicts.py, tests/known_verdicts.json: each
known-wrong fails for its reason, per_expert_launches on both speed rules)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

import kernellab
from grader.labs.moe import spec as lab

ROOT = Path(__file__).resolve().parents[4]
SOLUTION = ROOT / "solutions" / "08a_moe.ipynb"
LAB = ROOT / "labs" / "08a_moe.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the modelled verdicts are the sim tier's")


def test_solution_passes_in_budget_and_json_has_the_figures():
    t0 = time.perf_counter()
    r = cli("grade", "moe", str(SOLUTION), "--json")
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 60, seconds        # the budget, 2 cores
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == 100
    n = len(lab.ALIGN_SHAPES) + len(lab.GEMM_SHAPES) + len(lab.COMBINE_SHAPES)
    assert d["cases_passed"] == d["cases_total"] == n
    for c in d["cases"]:            # the margin rule: under half of every error budget
        assert c["comparison"]["budget_used"] < 0.5, c["case"]
    rules = {x["name"]: x for x in d["rules"]}
    assert list(rules) == [lab.SPEED.name, lab.LAUNCHES.name, lab.WORK.name]
    assert all(x["passed"] for x in rules.values())
    assert rules[lab.LAUNCHES.name]["measured"] == 1
    # one launch against one per active expert: at least twice the threshold
    assert rules[lab.SPEED.name]["measured"] >= 2 * lab.MIN_SPEEDUP
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("moe", LAB)


def test_gpu_rule_judges_the_speedup_over_per_expert_launches():
    spec = lab.MoE()
    base = {"tier": "gpu", **lab.GPU, "seconds": [1e-5] * 5, "seconds_per_expert": [5e-5] * 5}
    (fast,) = spec.perf_rules({**base, "speedup": [5.0] * 5})
    assert fast.passed and fast.measured == 5.0
    (slow,) = spec.perf_rules({**base, "speedup": [1.0] * 5})
    assert not slow.passed
