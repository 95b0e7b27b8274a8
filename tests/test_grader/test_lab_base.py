"""The generic lab base (grader.spec.LabSpec) and the rule builders (grader.rules): a lab that
declares its cases, limits, planned arrays and rules as data gets the cases, the hidden-case
errors, the planned-array check and the RuleResults from the base."""

from __future__ import annotations

import numpy as np
import pytest

from grader.rules import Rule, at_least, at_most, gate
from grader.spec import (Case, CaseData, HiddenCases, LabSpec, OneOf, Whole, case_seed,
                         hidden_case_error)


class Toy(LabSpec):
    lab_id = "toy"
    functions = {"scale": ("x", "y")}
    params = {"n": Whole(), "kind": OneOf(("a", "b"), "a")}
    visible_seed = 11
    repeated = {"n3 a": ("x",)}
    rules = (Rule("speedup", ">=", 2.0, "x"), Rule("fastest call plausible", "max<=", "limit",
                                                   " GB/s"))

    def visible_params(self):
        return [{"n": 3, "kind": "a"}, {"n": 5, "kind": "b"}]

    def case_name(self, p):
        return f"n{p['n']} {p['kind']}"

    def case_limits(self, p):
        return "n must be <= 100" if p["n"] > 100 else None

    def random_params(self, rng, i):
        return {"n": int(rng.integers(1, 50)), "kind": "ab"[i % 2]}

    def case_arrays(self, case):
        rng = np.random.default_rng(case.seed)
        return CaseData({"x": rng.standard_normal(case.params["n"])},
                        {"y": ((case.params["n"],), "float64")}, ["x", "y"])

    def planned(self, plan):
        return {"params": {"n": plan["n"]}, "what": f"n={plan['n']}",
                "arrays": {"x": ((plan["n"],), "float64"), "y": ((plan["n"],), "float64")}}


def test_cases_names_seeds_and_repeats():
    cs = Toy().cases(HiddenCases())
    assert [c.name for c in cs] == ["n3 a"] + [f"n3 a again {i}/3, 8 entries of x changed"
                                               for i in (1, 2, 3)] + ["n5 b"]
    assert cs[0].seed == case_seed(11, "n3 a") == cs[1].seed == cs[3].seed
    x0, x1 = (Toy().case_data(c).inputs["x"] for c in cs[:2])
    assert not np.array_equal(x0, x1) and sorted(x0) == sorted(x1)  # a permutation


def test_hidden_cases_from_a_file_and_from_a_seed():
    file_ = Toy().cases(HiddenCases(seed=4, cases=[{"n": 7}]))[-1]
    assert (file_.name, file_.params, file_.hidden) == ("hidden0 n7 a", {"n": 7, "kind": "a"},
                                                         True)
    assert file_.seed == case_seed(4, "hidden0 n7 a")
    seeded = [c for c in Toy().cases(HiddenCases(seed=4)) if c.hidden]
    assert len(seeded) == Toy.random_count and seeded == [
        c for c in Toy().cases(HiddenCases(seed=4)) if c.hidden]  # reproducible
    with pytest.raises(ValueError, match=r"^hidden case 1: n must be <= 100$"):
        Toy().cases(HiddenCases(cases=[{"n": 1}, {"n": 101}]))
    with pytest.raises(ValueError, match=r"hidden case 0: unknown parameter \"m\""):
        Toy().cases(HiddenCases(cases=[{"m": 1}]))
    assert str(hidden_case_error(2, "x")) == "hidden case 2: x"


def test_planned_arrays_are_checked_in_one_place():
    spec, plan = Toy(), {"n": 4}
    good = {"x": np.zeros(4), "y": np.zeros(4)}
    assert spec.perf_data_check(plan, {"params": {"n": 4}}, good) is None
    msg = spec.perf_data_check(plan, {"params": {"n": 2}}, good)
    assert msg == ("the timed calls were not the planned n=4 ({'n': 2}): was the grading "
                   "process tampered with?")
    msg = spec.perf_data_check(plan, {"params": {"n": 4}}, {**good, "y": np.zeros(4, "f4")})
    assert msg == ("the last timed call's y is (4,) float32, not the planned (4,) float64: was "
                   "the grading process tampered with?")
    assert "x is missing" in spec.perf_data_check(plan, {"params": {"n": 4}}, {"y": good["y"]})


def test_rule_builders_median_spread_and_the_gate():
    r = at_least("speed", [1.0, 3.0, 2.0], 2.0, "x", "d")
    assert (r.measured, r.spread, r.passed, r.op, r.scored) == (2.0, (1.0, 3.0), True, ">=", True)
    assert not at_most("t", [1.0, 5.0, 4.0], 3.0).passed
    g = gate("plausible", [1.0, 9.0, 2.0], 5.0, " GB/s")
    assert (g.measured, g.passed, g.scored, g.op) == (9.0, False, False, "<=")
    speed, plausible = Toy.rules
    assert speed.judge([2.0, 2.5]).to_dict() == at_least("speedup", [2.0, 2.5], 2.0,
                                                          "x").to_dict()
    with pytest.raises(ValueError, match="computed at grading time"):
        plausible.judge([1.0])
    assert plausible.judge([1.0, 4.0], threshold=3.0).passed is False
    with pytest.raises(ValueError, match="op must be"):
        Rule("x", ">", 1.0)


def test_tier_dispatch():
    class T(Toy):
        def rules_cpu(self, m):
            return ["cpu", m]

    assert T().perf_rules({"a": 1}) == ["cpu", {"a": 1}]
    with pytest.raises(ValueError, match="unknown tier 'sim'"):
        T().perf_rules({"tier": "sim"})
    assert Toy().worker_module().__name__ == __name__  # not a lab folder: its own module
    with pytest.raises(ValueError, match="no measurement for the cpu tier"):
        Toy().measure({}, {}, None)
    assert Case("c", {}, 1).hidden is False
