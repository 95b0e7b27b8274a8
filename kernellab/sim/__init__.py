"""The ``sim`` tier: numba-cuda's CUDA simulator extended by Kernel Lab.

On a machine without a GPU, ``import kernellab`` turns numba-cuda's simulator on and arranges
for :func:`install` to run as soon as ``numba.cuda`` is imported, so ordinary numba-cuda code
(``from numba import cuda``, ``@cuda.jit``) runs on :mod:`kernellab.sim.engine`: greenlet
threads, warp intrinsics, GPU limits, bounds/race/divergence/uninitialised-read checks, traffic
counters, and a GPU compile of every kernel (:mod:`kernellab.sim.ptx`). Modelled time from the
counters: :mod:`kernellab.sim.model`.

Registers, local frame, spills and occupancy of the kernels a capture saw:
:mod:`kernellab.sim.resources` (:func:`resource_table`, :func:`occupancy`).

Public API: :func:`capture`, :func:`configure`, :func:`options`, :func:`install`,
:class:`Capture`, :func:`resource_table`, :func:`occupancy`, :class:`KernelResources`,
:class:`Occupancy`, the errors of :mod:`kernellab.sim.errors`.
"""

from __future__ import annotations

import contextlib

from kernellab.sim.errors import (
    DivergenceError, GPUCompileError, KernelError, LaunchConfigError, OutOfBoundsError,
    RaceError, SimError, StuckKernelError, UninitialisedReadError,
)
from kernellab.sim.resources import KernelResources, Occupancy, occupancy, resource_table

__all__ = [
    "capture", "replay", "configure", "options", "install", "arm", "Capture", "content_digest",
    "SimError", "KernelError", "OutOfBoundsError", "RaceError", "DivergenceError",
    "UninitialisedReadError", "LaunchConfigError", "StuckKernelError", "GPUCompileError",
    "KernelResources", "Occupancy", "occupancy", "resource_table",
]


def content_digest(arr) -> str:
    """A digest of an array's bytes in C order (neither dtype nor shape): what a captured launch
    records of each kernel argument's allocation when it starts and ends
    (``LaunchStats.arrays``), so a grader can tell which argument held its input and which
    allocation the output came from. numpy only (a grader's process can use it)."""
    import hashlib

    import numpy as np

    return hashlib.blake2b(np.ascontiguousarray(arr).tobytes(), digest_size=16).hexdigest()


def _engine():
    from kernellab import device
    if device.select_tier() != "sim":
        raise RuntimeError("kernellab.sim is the simulator tier; this process runs on a GPU")
    from kernellab.sim import engine
    engine.install()
    return engine


def install() -> None:
    """Route numba-cuda simulator launches through the sim-tier engine (idempotent)."""
    _engine()


def configure(**opts) -> dict:
    """Set engine options (see :func:`kernellab.sim.engine.configure`); returns old values."""
    return _engine().configure(**opts)


def options() -> dict:
    """The engine's current options."""
    return _engine().options()


class Capture:
    """Launches recorded by :func:`capture`: ``launches`` (list of
    :class:`~kernellab.sim.engine.LaunchStats`), ``unchecked`` (names of the kernels that ran
    on the stock simulator, unrecorded), ``recorded`` (with ``record=True``: each launch and
    host-device copy as a callable that repeats it, for :func:`replay`), :meth:`total`,
    :meth:`resources` and :meth:`resource_table` (registers, local frame, spills, occupancy:
    :mod:`kernellab.sim.resources`), :meth:`paths` (which executor ran each launch, and why)."""

    def __init__(self, trace=False, record=False):
        self.trace = trace
        self.record = record
        self.recorded = []
        self.launches = []
        #: names of the kernels launched on numba's stock simulator instead (record arrays,
        #: ``cuda.jit(extensions=...)``, ``executor="stock"``): no checks, no counters
        self.unchecked = []

    def total(self) -> dict:
        """Counters summed over the captured launches (``shared_bytes_per_block`` and
        ``local_frame_bytes``: the max)."""
        from kernellab.sim.engine import COUNTER_KEYS
        out = dict.fromkeys(COUNTER_KEYS, 0)
        for s in self.launches:
            for k, v in s.counters.items():
                out[k] = max(out[k], v) if k in _PER_LAUNCH_MAX else out[k] + v
        return out


    def paths(self) -> list:
        """``[(kernel name, path, note)]``, one per captured launch: ``"compiled"`` or
        ``"greenlet"`` (``LaunchStats.path``) and why a launch ran on the greenlet executor
        (``path_note``; see :mod:`kernellab.sim.engine`, "How a launch runs")."""
        return [(s.name, s.path, s.path_note) for s in self.launches]

    def resources(self) -> list:
        """``[(kernel name, KernelResources | None, note)]``, one per captured launch: ptxas's
        registers, stack frame, spills and static shared memory (``LaunchStats.resources``;
        None when unknown, and the note says why)."""
        return [(s.name, s.resources, s.resources_note) for s in self.launches]

    def resource_table(self, cc=(8, 0)) -> str:
        """:func:`kernellab.sim.resources.resource_table` of the captured launches."""
        return resource_table(self, cc)


#: counters that describe one launch's configuration, not work: a total takes their max
_PER_LAUNCH_MAX = ("shared_bytes_per_block", "local_frame_bytes")


@contextlib.contextmanager
def capture(trace: bool = False, record: bool = False, **opts):
    """Record every sim-tier launch in the ``with`` block.

    ``trace=True`` also keeps each launch's first block's individual accesses
    (``LaunchStats.trace``); ``record=True`` keeps each launch and host-device copy
    (``Capture.recorded``, for :func:`replay`). Extra keyword arguments set engine
    options for the block only (e.g. ``gpu_compile=False``, ``shuffle=3``).
    """
    eng = _engine()
    cap = Capture(trace, record)
    old = eng.configure(**opts) if opts else {}
    eng._listeners.append(cap)
    try:
        yield cap
    finally:
        eng._listeners.remove(cap)
        if old:
            eng.configure(**old)


def replay(recorded, fresh=()) -> None:
    """Repeat, in order, what a ``capture(record=True)`` recorded: each launch (the same
    kernel, grid, block and arguments -- device arrays with what they hold *now*, numpy arrays
    copied to the device again from what they hold now, scalars as they were) and each
    host-device copy (``cuda.to_device``, ``copy_to_device``, ``copy_to_host``: from what the
    source holds now, into the same destination). Nothing else the host did is repeated. A
    grader's test that a result was computed by the kernels from the inputs: refill the
    inputs, replay, and the output must follow.

    ``fresh``: the refilled inputs (numpy arrays or device arrays). Any other launch argument
    whose content the host gave it (not a recorded launch or copy) gets back the content it
    had at its launch, so a flag the host flips after the call changes nothing. Arrays of a
    type other than exactly numpy's or numba's (a subclass) are not replayed. Raises what the
    launches raise, and :class:`SimError` for what cannot be replayed."""
    bufs = [getattr(f, "_ary", f) for f in fresh]
    for op in recorded:
        op(bufs)


def arm() -> None:
    """Make the sim-tier engine take over simulator launches: now if ``numba.cuda`` is already
    imported, else as soon as it is. Called by ``import kernellab`` on the sim tier."""
    from kernellab.device import after_cuda_import
    after_cuda_import(_install_unless_importing)


#: the modules of the executor (:mod:`kernellab.sim.engine` and its parts)
_ENGINE_MODULES = ("engine", "settings", "arrays", "cudamod", "sites", "analysis", "scheduler",
                   "recording", "launch")


def _install_unless_importing():
    import sys
    for name in _ENGINE_MODULES:
        mod = sys.modules.get(f"kernellab.sim.{name}")
        if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False):
            return      # the executor is being imported; engine.py installs it at its end
    install()
