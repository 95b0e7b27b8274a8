"""Lab 1 ``gemm-cpu``: the grader-side spec (``spec``), the worker-side timing (``measure``),
the reasoning behind its rules (``README.md``) and its known submissions (``submissions/``)."""

from grader.labs.gemm_cpu.spec import GemmCPU

__all__ = ["GemmCPU"]
