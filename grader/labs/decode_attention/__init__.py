"""Lab `decode-attention`: `spec` (grader side), `measure` (worker side), README.md (the
reasoning behind every rule) and submissions/ (the known submissions)."""

from grader.labs.decode_attention.spec import DecodeAttention

__all__ = ["DecodeAttention"]
