"""Lab `softmax-cuda`: `spec` (grader side), `measure` (worker side), README.md (the
reasoning behind every rule) and submissions/ (the known submissions)."""

from grader.labs.softmax_cuda.spec import SoftmaxCUDA

__all__ = ["SoftmaxCUDA"]
