"""Executor options of the ``sim`` tier and the GPU limits it models.

:func:`configure` / :func:`options` (re-exported by :mod:`kernellab.sim.engine`); the
environment variables ``KERNELLAB_SIM_EXECUTOR``, ``KERNELLAB_SIM_GPU_COMPILE``,
``KERNELLAB_SIM_SHUFFLE``, ``KERNELLAB_SIM_CHECKS`` and ``KERNELLAB_SIM_COMPILED`` give the
defaults. Limits: CUDA C++
Programming Guide, Table "Technical Specifications per Compute Capability" (threads and
dimensions of a block, grid y/z, 48 KiB of static shared memory), § "Device Memory Accesses"
(32-byte sectors), § "Compute Capability 5.x+ / Shared Memory" (32 banks of 4 bytes);
``cudaMalloc`` aligns allocations to 256 bytes (CUDA Runtime API).
"""

from __future__ import annotations

import os

WARP = 32
MAX_THREADS = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_YZ = 65535
MAX_STATIC_SHARED = 48 * 1024
SECTOR = 32
BANKS = 32
BANK_BYTES = 4
ALIGN = 256
INT_POISON = 0xCD        # the byte uninitialised integer shared/local memory is filled with

_OPTS = {
    "executor": os.environ.get("KERNELLAB_SIM_EXECUTOR", "kernellab").strip() or "kernellab",
    "race_check": True,
    "gpu_compile": os.environ.get("KERNELLAB_SIM_GPU_COMPILE", "1").strip() != "0",
    "shuffle": (int(os.environ["KERNELLAB_SIM_SHUFFLE"])
                if os.environ.get("KERNELLAB_SIM_SHUFFLE", "").strip() else None),
    "watchdog_s": 600.0,
    "checks": os.environ.get("KERNELLAB_SIM_CHECKS", "full").strip() or "full",
    "sites": False,
    "compiled": os.environ.get("KERNELLAB_SIM_COMPILED", "auto").strip() or "auto",
    "mma_scale": 1.0,
}


def configure(**opts) -> dict:
    """Set executor options; returns the previous values of the ones given.

    ``executor`` ("kernellab" or "stock"), ``race_check`` (bool), ``gpu_compile`` (bool: compile
    each kernel to PTX once per signature, :mod:`kernellab.sim.ptx`), ``shuffle`` (None or an
    int seed), ``watchdog_s`` (float seconds per launch), ``sites`` (bool: log each access's
    source instruction and report per-site global traffic, ``LaunchStats.sites``, and shared
    requests and wavefronts, ``LaunchStats.shared_sites``; it adds to the logging cost, so it
    is off unless a grader asks), ``compiled`` ("auto": launches of enough threads take the
    compiled path, :mod:`kernellab.sim.compiled`; "always": every launch it can express;
    "off": the greenlet executor only), ``mma_scale`` (float, default 1: every ``mma``
    computes ``D = mma_scale * A @ B + C``, applied where the warp collective completes,
    :mod:`kernellab.sim.scheduler` and :func:`kernellab.sim.mma.mma_m16n8k16`; a grader's test
    that an output is the tensor cores' product). Raises ``ValueError`` for an unknown option or
    executor.
    """
    old = {}
    for k, v in opts.items():
        if k not in _OPTS:
            raise ValueError(f"unknown sim option {k!r}; options: {', '.join(sorted(_OPTS))}")
        if k == "executor" and v not in ("kernellab", "stock"):
            raise ValueError(f"executor must be 'kernellab' or 'stock', not {v!r}")
        if k == "checks" and v not in ("full", "fast"):
            raise ValueError(f"checks must be 'full' or 'fast', not {v!r}")
        if k == "compiled" and v not in ("auto", "always", "off"):
            raise ValueError(f"compiled must be 'auto', 'always' or 'off', not {v!r}")
        old[k] = _OPTS[k]
        _OPTS[k] = v
    return old


def options() -> dict:
    """A copy of the current executor options."""
    return dict(_OPTS)
