"""Lab 7c ``npu-rmsnorm``: :mod:`.spec` (grader side), :mod:`.baseline` (the grader's baseline
kernel), :mod:`.measure` (worker side), ``README.md`` (the reasoning)."""

from grader.labs.npu_rmsnorm.spec import NPURmsNorm

__all__ = ["NPURmsNorm"]
