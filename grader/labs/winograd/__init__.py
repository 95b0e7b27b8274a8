"""Lab 4 ``winograd``: the grader-side spec (``spec``), the worker-side timing (``measure``),
the reasoning behind its rules (``README.md``) and its known submissions (``submissions/``)."""

from grader.labs.winograd.spec import Winograd

__all__ = ["Winograd"]
