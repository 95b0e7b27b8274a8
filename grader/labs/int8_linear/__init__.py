"""Lab 6 ``int8-linear``: the grader-side spec (``spec``), the worker-side timing (``measure``),
the reasoning behind its rules (``README.md``) and its known submissions (``submissions/``)."""

from grader.labs.int8_linear.spec import Int8Linear

__all__ = ["Int8Linear"]
