"""Kernel Lab runtime: device tiers, numerics, timing and plots shared by the notebooks and
the grader.

Import it first (a notebook's first cell): on import it applies the thread settings of
:mod:`kernellab.threads` and chooses the device tier (:mod:`kernellab.device`) before numpy's
BLAS or ``numba.cuda`` load.
"""

from kernellab import threads as _threads

_threads.apply()

from kernellab import device as _device  # noqa: E402

try:
    TIER = _device.select_tier()
except _device.DeviceError as _exc:
    # A bad KERNELLAB_DEVICE must not break the CPU chapters or the grader's CPU labs: the
    # error is raised again, in plain words, by whatever needs the GPU-side tier.
    TIER = None
    _device.remember_error(_exc)

if TIER == "sim":
    # numba-cuda's simulator, with launches run by kernellab's engine (kernellab.sim)
    from kernellab import sim as _sim  # noqa: E402

    _sim.arm()
elif TIER == "gpu":
    # intrinsics numba-cuda lacks (cuda.dp4a), added once numba.cuda is imported
    from kernellab import cuda_ext as _cuda_ext  # noqa: E402

    _device.after_cuda_import(_cuda_ext.install)

__version__ = "0.1.0"

__all__ = ["TIER", "__version__"]
