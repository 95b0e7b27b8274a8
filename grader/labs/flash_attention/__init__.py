"""Lab `flash-attention`: `spec` (grader side), `measure` (worker side), README.md (the
reasoning behind every rule) and submissions/ (the known submissions)."""

from grader.labs.flash_attention.spec import FlashAttention

__all__ = ["FlashAttention"]
