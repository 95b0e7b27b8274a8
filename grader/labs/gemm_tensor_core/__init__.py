"""Lab `gemm-tensor-core`: `spec` (grader side), `measure` (worker side), README.md (the
reasoning behind every rule) and submissions/ (the known submissions)."""

from grader.labs.gemm_tensor_core.spec import GemmTensorCore

__all__ = ["GemmTensorCore"]
