"""Lab 7b ``npu-matmul``: :mod:`.spec` (grader side), :mod:`.baseline` (the naive tiling the
lab starts from and the grader measures against), :mod:`.measure` (worker side),
``README.md`` (the reasoning)."""

from grader.labs.npu_matmul.spec import NPUMatmul

__all__ = ["NPUMatmul"]
