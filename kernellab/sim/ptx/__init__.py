"""GPU-compile check for the ``sim`` tier: every simulated kernel is also compiled to PTX.

numba-cuda's simulator runs a kernel as plain Python, so it accepts code that no GPU compiler
would (``str()`` of an integer, calls to plain Python helpers, ``np.zeros`` inside a kernel...).
Every kernel the ``sim`` tier runs is therefore also compiled for a real GPU with numba-cuda's
``compile_ptx`` (numba-cuda documentation, "Compilation": ``numba.cuda.compile_ptx(pyfunc, sig,
..., cc=None)`` compiles a Python function to PTX for a signature and a compute capability
without a GPU, given the NVVM library; here it comes from PyPI with ``numba-cuda[cu13]``). A
kernel the compiler rejects raises :class:`~kernellab.sim.errors.GPUCompileError` carrying the
compiler's own message, trimmed to its useful part.

One module a job: :mod:`~kernellab.sim.ptx.compile` (the entry points),
:mod:`~kernellab.sim.ptx.signature` (the launch's numba signature),
:mod:`~kernellab.sim.ptx.pickling` (the kernel pickled by value for the helper),
:mod:`~kernellab.sim.ptx.helper` (the helper subprocess, parent side) and
:mod:`~kernellab.sim.ptx.child` (the helper program), :mod:`~kernellab.sim.ptx.ptxas`
(registers, stack frame and spills: ptxas's report via nvJitLink), :mod:`~kernellab.sim.ptx.cache`
(memory and disk caches), :mod:`~kernellab.sim.ptx.messages` (errors, trimmed compiler
messages), :mod:`~kernellab.sim.ptx.counts` (static instruction counts).

Sources: numba-cuda documentation, "Compilation" (``compile_ptx``) and "Simulator"; NVIDIA PTX
ISA (instruction set, state spaces); cloudpipe/cloudpickle README ("pickling by value").
"""

from __future__ import annotations

from kernellab.sim.ptx.cache import clear_cache
from kernellab.sim.ptx.compile import (
    DEFAULT_CC, PTXResult, close, compile_kernel, kernel_resources, prepare, ptx_available,
)
from kernellab.sim.ptx.counts import COUNT_KEYS, static_counts
from kernellab.sim.ptx.helper import COMPILE_TIMEOUT_S, _helper  # noqa: F401  (tests read it)
from kernellab.sim.ptx.messages import MAX_MESSAGE_CHARS, PTXToolError, trim_compiler_message
from kernellab.sim.ptx.signature import signature_of

__all__ = [
    "DEFAULT_CC", "PTXResult", "PTXToolError", "compile_kernel", "kernel_resources",
    "signature_of", "static_counts",
    "ptx_available", "prepare", "close", "clear_cache", "trim_compiler_message", "COUNT_KEYS",
    "COMPILE_TIMEOUT_S", "MAX_MESSAGE_CHARS",
]

#: None: the helper runs :mod:`kernellab.sim.ptx.child` by path; a string: ``python -c`` of
#: that source instead (a test of a helper that cannot start)
_CHILD_SOURCE: str | None = None
