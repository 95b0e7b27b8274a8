"""The source lane of a warp shuffle, one rule for both sim-tier executors.

CUDA C++ Programming Guide, "Warp Shuffle Functions": ``__shfl_sync`` reads lane
``srcLane % width``; ``__shfl_up_sync`` lane ``lane - delta`` and ``__shfl_down_sync`` lane
``lane + delta``, a lane whose source falls outside the warp keeping its own value;
``__shfl_xor_sync`` lane ``lane ^ laneMask`` (width 32 here, the whole warp). The greenlet
executor (:mod:`kernellab.sim.scheduler`) calls :func:`shfl_source`; the compiled path
(:mod:`kernellab.sim.compiled_warp`) calls its Numba compilation :data:`shfl_source_jit`.
"""

from __future__ import annotations

from numba import njit

from kernellab.sim.settings import WARP

#: shuffle kind -> the code :func:`shfl_source` takes (numba-cuda's ``cuda.<name>``)
SHFL = {"shfl_sync": 1, "shfl_up_sync": 2, "shfl_down_sync": 3, "shfl_xor_sync": 4}


def shfl_source(op, lane, arg):
    """The lane (0..31) that lane ``lane`` reads in shuffle ``op`` (a :data:`SHFL` code) with
    argument ``arg`` (srcLane, delta or laneMask; an int)."""
    if op == 1:
        return arg % WARP
    if op == 2:
        return lane - arg if lane - arg >= 0 else lane
    if op == 3:
        return lane + arg if lane + arg < WARP else lane
    return lane ^ arg if (lane ^ arg) < WARP else lane


shfl_source_jit = njit(error_model="numpy")(shfl_source)
