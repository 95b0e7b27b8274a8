"""Performance rules as data, and the builders that judge measurements by them.

A lab declares its rules once (:attr:`grader.spec.LabSpec.rules`: :class:`Rule` entries with
name, direction, threshold, unit and tiers); the same entries build the lab's
:class:`grader.spec.RuleResult` s at grading time (:meth:`Rule.judge`) and the rule tables of the
labs' READMEs (:mod:`grader.coverage`). Every rule is judged on samples, one per interleaved
round or timed call: a speed rule on their median (robust to one disturbed round), with the
spread (min, max) shown beside it; the plausibility gate of every lab on the fastest sample
(one call faster than the machine allows means the timer was cheated), scored=False (it earns
no points but, failed, voids the performance points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from grader.spec import RuleResult


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (at least one) as a float."""
    return float(np.median(samples))


def spread(samples: Sequence[float]) -> tuple[float, float]:
    """(min, max) of ``samples`` (at least one)."""
    return float(min(samples)), float(max(samples))


def at_least(name: str, samples: Sequence[float], threshold: float, unit: str = "",
             detail: str = "", scored: bool = True) -> RuleResult:
    """Passes when the median of ``samples`` is >= ``threshold``."""
    m = median(samples)
    return RuleResult(name, m, threshold, ">=", unit, m >= threshold, detail, spread(samples),
                      scored=scored)


def at_most(name: str, samples: Sequence[float], threshold: float, unit: str = "",
            detail: str = "", scored: bool = True) -> RuleResult:
    """Passes when the median of ``samples`` is <= ``threshold``."""
    m = median(samples)
    return RuleResult(name, m, threshold, "<=", unit, m <= threshold, detail, spread(samples),
                      scored=scored)


def gate(name: str, samples: Sequence[float], threshold: float, unit: str = "",
         detail: str = "") -> RuleResult:
    """The plausibility gate (scored=False): passes when the *fastest* of ``samples`` is <=
    ``threshold`` (a limit from measured physical rates, :func:`kernellab.machine.speed_limit`)."""
    m = float(max(samples))
    return RuleResult(name, m, threshold, "<=", unit, m <= threshold, detail, spread(samples),
                      scored=False)


@dataclass(frozen=True)
class Rule:
    """One rule of a lab, as data.

    ``op``: ">=" (median at least), "<=" (median at most) or "max<=" (the plausibility gate:
    the fastest sample at most, not scored). ``threshold``: a number, or a text saying how the
    threshold is computed at grading time (e.g. a measured speed limit); ``tiers``: where the
    rule applies; ``why``: one line for the README table (the README says the rest)."""

    name: str
    op: str
    threshold: float | str
    unit: str = ""
    tiers: tuple[str, ...] = ("cpu",)
    why: str = ""

    def __post_init__(self):
        if self.op not in (">=", "<=", "max<="):
            raise ValueError(f"rule {self.name!r}: op must be '>=', '<=' or 'max<=', "
                             f"not {self.op!r}")

    @property
    def scored(self) -> bool:
        return self.op != "max<="

    def judge(self, samples: Sequence[float], detail: str = "",
              threshold: float | None = None) -> RuleResult:
        """The RuleResult of ``samples`` under this rule; ``threshold`` replaces a computed
        one (required when :attr:`threshold` is a text). Raises ValueError without one."""
        t = self.threshold if threshold is None else threshold
        if isinstance(t, str):
            raise ValueError(f"rule {self.name!r}: its threshold ({t}) is computed at grading "
                             "time; pass threshold=")
        if self.op == ">=":
            return at_least(self.name, samples, t, self.unit, detail)
        if self.op == "<=":
            return at_most(self.name, samples, t, self.unit, detail)
        return gate(self.name, samples, t, self.unit, detail)

    def threshold_text(self) -> str:
        """The threshold as the README table shows it."""
        if isinstance(self.threshold, str):
            return self.threshold
        return f"{self.threshold:g}{self.unit}"


def rule_named(rules: Sequence[Rule], name: str) -> Rule:
    """The rule called ``name`` in ``rules``. Raises KeyError."""
    for r in rules:
        if r.name == name:
            return r
    raise KeyError(name)
