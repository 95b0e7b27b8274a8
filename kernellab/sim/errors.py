"""Errors the ``sim`` tier raises instead of the silence of the stock simulator.

Every error names the block (``ctaid``) and thread (``tid``) that caused it and, where there is
one, the array, the index and the source line, so a report can be read without a debugger.
The hazards mirror what NVIDIA's compute-sanitizer checks on a real GPU (memcheck, racecheck,
synccheck, initcheck; *Compute Sanitizer User Manual*, §§ "Memcheck Tool" to "Initcheck Tool").
"""

from __future__ import annotations


class SimError(Exception):
    """Base class. ``kind`` is a short machine-readable name (``"race"``,
    ``"out-of-bounds"``...)."""

    kind = "sim-error"


class KernelError(SimError):
    """A Python exception raised inside a simulated CUDA thread (re-raised with its thread)."""

    kind = "kernel-exception"


class OutOfBoundsError(SimError, IndexError):
    """A negative or past-the-end index into a global or shared array."""

    kind = "out-of-bounds"


class RaceError(SimError):
    """Two threads touched one address (at least one writing) with no barrier between them."""

    kind = "race"


class DivergenceError(SimError):
    """A barrier or warp collective not reached by every thread it names."""

    kind = "divergence"


class UninitialisedReadError(SimError):
    """A read of shared memory that no thread of the block has written."""

    kind = "uninitialised-read"


class LaunchConfigError(SimError, ValueError):
    """A launch a GPU would refuse: > 1024 threads a block, > 48 KiB static shared memory..."""

    kind = "launch-config"


class StuckKernelError(SimError):
    """The watchdog found a block that cannot make progress (spin-wait, deadlock) or ran too
    long."""

    kind = "stuck"


class GPUCompileError(SimError):
    """The simulator ran the kernel but numba-cuda's GPU compiler rejects it."""

    kind = "gpu-compile"


__all__ = [
    "SimError", "KernelError", "OutOfBoundsError", "RaceError", "DivergenceError",
    "UninitialisedReadError", "LaunchConfigError", "StuckKernelError", "GPUCompileError",
]
