"""``launch``: run a kernel on the simulated NPU (Phase A, then Phase B) and ``retime`` a run on
another machine card without re-running its NumPy work."""

from __future__ import annotations

import time

import numpy as np

from kernellab.npu import errors, runtime
from kernellab.npu.asc import Kernel
from kernellab.npu.machine import get_machine
from kernellab.npu.memory import GMBuffer, gm_layout
from kernellab.npu.result import RunResult
from kernellab.npu.runtime import BlockContext
from kernellab.npu.tensors import GlobalTensor
from kernellab.npu.timing import BlockStream, replay
from kernellab.npu.trace import Trace

__all__ = ["launch", "retime"]

MAX_BLOCK_DIM = 65535


def launch(kernel, block_dim: int, args, machine=None, *, strict: bool = False) -> RunResult:
    """Run ``kernel`` as ``block_dim`` blocks and time it.

    Args:
        kernel: a function marked ``@asc.kernel(core=...)`` (a plain function runs on AIV).
        block_dim: number of blocks, 1..65535. Blocks beyond the cores of the kernel's type run
            in waves (block ``i`` on core ``i % cores``).
        args: the kernel's arguments. NumPy arrays become GM tensors (each block sees the same
            GM; every array is written back after a successful run); anything else (tiling
            structs, numbers) is passed as is.
        machine: a preset name (``"ascend910b-like@1"``, ``"tiny"``) or a MachineConfig.
        strict: uninitialised on-chip reads raise instead of warning.

    Returns:
        :class:`~kernellab.npu.result.RunResult`.

    Raises:
        Any :class:`~kernellab.npu.errors.NPUError` the kernel trips (arrays are then left
        unchanged), ``MultiCoreWriteConflict`` after Phase A, ``DeadlockError`` in Phase B,
        ``LaunchError`` for a bad call.
    """
    mc = get_machine(machine)
    if not isinstance(kernel, Kernel):
        if callable(kernel):
            kernel = Kernel(kernel, "aiv")
        else:
            raise errors.LaunchError(f"launch needs a kernel function, got {kernel!r}")
    if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)) or \
            not 1 <= int(block_dim) <= MAX_BLOCK_DIM:
        raise errors.LaunchError(f"block_dim must be an int in 1..{MAX_BLOCK_DIM}, got "
                                 f"{block_dim!r}")
    block_dim = int(block_dim)
    if not isinstance(args, (tuple, list)):
        args = (args,)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    bases = iter(gm_layout(arrays))
    bufs, call_args = [], []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            if a.dtype.kind not in "fiub" and str(a.dtype) != "bfloat16":
                raise errors.LaunchError(f"argument {i}: GM arrays must be numeric, got "
                                         f"{a.dtype}")
            name = kernel.params[i] if i < len(kernel.params) else f"arg{i}"
            buf = GMBuffer(i, name, a, next(bases))
            bufs.append(buf)
            call_args.append(GlobalTensor(buf))
        elif isinstance(a, GlobalTensor):
            raise errors.LaunchError(f"argument {i}: pass NumPy arrays, not GlobalTensors")
        else:
            call_args.append(a)

    t_a = time.perf_counter()
    streams, warns = [], []
    for b in range(block_dim):
        c = BlockContext(mc, b, block_dim, kernel.core, strict=strict)
        runtime.install(c)
        try:
            kernel.fn(*call_args)
            c.finish()
        finally:
            runtime.install(None)
        streams.append(BlockStream(b, c.records, c.calls))
        warns.extend(c.warnings)
    for buf in bufs:
        bad = buf.conflicts()
        if bad is not None:
            a, b, s, e = bad
            raise errors.MultiCoreWriteConflict(
                f"blocks {a} and {b} both wrote bytes [{s}, {e}) of GM argument {buf.name!r} "
                f"(element {s // buf.itemsize} on): each output element must be written by "
                f"one block -- check the per-block offsets and the tail split")
    for buf in bufs:
        buf.write_back()
    functional_s = time.perf_counter() - t_a
    return _timed(kernel.name, block_dim, mc, kernel.core, streams, warns, functional_s)


def _timed(name, block_dim, mc, core, streams, warns, functional_s):
    t_b = time.perf_counter()
    n_cores = mc.n_aic if core == "aic" else mc.n_aiv
    tm = replay(streams, mc, n_cores)
    trace = Trace(tm.events, core, mc.freq_mhz)
    timing_s = time.perf_counter() - t_b
    return RunResult(kernel=name, block_dim=block_dim, machine=mc, core_type=core, timing=tm,
                     trace=trace, blocks=streams, warnings=warns, functional_s=functional_s,
                     timing_s=timing_s)


def retime(result: RunResult, machine) -> RunResult:
    """Replay ``result``'s recorded instructions on another card (what-if: double the HBM
    bandwidth, slower DMA ...) without re-running the kernel. Capacities are not re-checked."""
    mc = get_machine(machine)
    return _timed(result.kernel, result.block_dim, mc, result.core_type, result._blocks,
                  result.warnings, 0.0)
