"""Lab `moe`: `spec` (grader side), `measure` (worker side), README.md (the reasoning behind
every rule) and submissions/ (the known submissions)."""

from grader.labs.moe.spec import MoE

__all__ = ["MoE"]
