"""Lab 7d ``npu-flash-attention``: :mod:`.spec` (grader side), :mod:`.measure` (worker side),
``README.md`` (the reasoning)."""

from grader.labs.npu_flash_attention.spec import NPUFlashAttention

__all__ = ["NPUFlashAttention"]
