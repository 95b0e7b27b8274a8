"""Lab `torch-op`: `spec` (grader side), `measure` (worker side), README.md (the reasoning behind
every check and rule) and submissions/ (the known submissions)."""

from grader.labs.torch_op.spec import TorchOp

__all__ = ["TorchOp"]
