"""Lab 7a ``npu-vector-add``: :mod:`.spec` (grader side), :mod:`.baseline` (the grader's
baseline kernel), :mod:`.measure` (worker side), ``README.md`` (the reasoning)."""

from grader.labs.npu_vector_add.spec import NPUVectorAdd

__all__ = ["NPUVectorAdd"]
