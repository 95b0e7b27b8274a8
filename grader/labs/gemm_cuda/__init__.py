"""Lab `gemm-cuda`: `spec` (grader side), `measure` (worker side), README.md (the
reasoning behind every rule) and submissions/ (the known submissions)."""

from grader.labs.gemm_cuda.spec import GemmCUDA

__all__ = ["GemmCUDA"]
