"""Kernel Lab runtime: device tiers, numerics, timing and plots shared by the notebooks and
the grader.

Import it first (a notebook's first cell): on import it applies the thread settings of
:mod:`kernellab.threads` and chooses the device tier (:mod:`kernellab.device`) before numpy's
BLAS or ``numba.cuda`` load.
"""

from kernellab import threads as _threads

_threads.apply()

from kernellab import device as _device  # noqa: E402

TIER = _device.select_tier()

__version__ = "0.1.0"

__all__ = ["TIER", "__version__"]
