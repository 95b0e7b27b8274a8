"""Kernel Lab runtime: device tiers, numerics, timing and plots shared by the notebooks and
the grader.

Layout: the runtime is this package's top-level modules with ``machine`` (machine facts, the
measured FMA peak), ``sim`` (the sim CUDA tier and its trace queries) and ``npu`` (the NPU
simulator); ``kernels`` holds the chapters' kernel ladders, ``topics`` the chapters' own
libraries; the autograder and the course tooling (release, notebook reading, the student's
``work/`` copy, the smoke check) are the ``grader`` package beside this one.

Import rule: the runtime never imports kernellab.topics, kernellab.kernels or grader
(kernellab.cli alone runs the grader, inside its commands); topics and kernels never import
grader (checked by tests/test_kernellab/test_import_rule.py).

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
