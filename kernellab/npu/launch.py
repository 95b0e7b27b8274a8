"""``launch``: run a kernel on the simulated NPU (Phase A, then Phase B), ``retime`` a run on
another machine card without re-running its NumPy work, and ``capture`` the launches a piece of
host code makes (what the autograder uses to see how a result was produced)."""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import time

import numpy as np

from kernellab.npu import errors, mix, runtime
from kernellab.numerics import is_float
from kernellab.npu.asc import Kernel
from kernellab.npu.machine import get_machine
from kernellab.npu.memory import GMBuffer, gm_layout
from kernellab.npu.result import RunResult
from kernellab.npu.runtime import BlockContext
from kernellab.npu.tensors import GlobalTensor
from kernellab.npu.timing import BlockStream, replay
from kernellab.npu.trace import Trace

__all__ = ["launch", "retime", "capture", "Capture", "LaunchInfo", "ArrayInfo",
           "content_digest", "core_names"]

MAX_BLOCK_DIM = 65535

_CAPTURES: list = []


def launch(kernel, block_dim: int, args, machine=None, *, strict: bool = False) -> RunResult:
    """Run ``kernel`` as ``block_dim`` blocks and time it.

    Args:
        kernel: a function marked ``@asc.kernel(core=...)`` (a plain function runs on AIV).
        block_dim: number of blocks, 1..65535. Blocks beyond the cores of the kernel's type run
            in waves (block ``i`` on core ``i % cores``); a mix kernel's block runs on a group
            of 1 AIC + 2 AIV, ``n_aic`` groups at a time (:mod:`kernellab.npu.mix`).
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
    if not _CAPTURES:
        return _launch(kernel, block_dim, args, mc, strict, None)
    info = LaunchInfo(kernel, block_dim, mc, args)
    try:
        info.result = _launch(kernel, block_dim, args, mc, strict, info)
        info.figures = info.result.as_dict()
        info.figures.update(cores_used=info.result.cores_used,
                            critical_core=info.result.critical_core,
                            hbm_bytes=info.result.hbm_bytes,
                            functional_s=info.result.functional_s,
                            timing_s=info.result.timing_s)
        return info.result
    except BaseException as exc:
        info.error = exc
        raise
    finally:
        for cap in list(_CAPTURES):
            cap.launches.append(info)


def _launch(kernel, block_dim, args, mc, strict, info) -> RunResult:
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
        if kernel.core == "mix":
            ctxs = mix.run_block(kernel.fn, call_args, mc, b, block_dim, bufs, strict,
                                 kernel.auto_sync)
        else:
            c = BlockContext(mc, b, block_dim, kernel.core, strict=strict,
                             auto_sync=kernel.auto_sync)
            runtime.install(c)
            try:
                kernel.fn(*call_args)
                c.finish()
            finally:
                runtime.install(None)
            ctxs = [c]
        for c in ctxs:
            streams.append(BlockStream(b, c.records, c.calls, c.member))
            warns.extend(w for w in c.warnings if w not in warns)  # one per line
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
    res = _timed(kernel.name, block_dim, mc, kernel.core, streams, warns, functional_s)
    if info is not None:
        info._finish(bufs, streams)
    return res


def _timed(name, block_dim, mc, core, streams, warns, functional_s):
    t_b = time.perf_counter()
    n_cores = mc.n_aiv if core == "aiv" else mc.n_aic
    size = mix.MixGroup.size if core == "mix" else 1
    tm = replay(streams, mc, n_cores, group_size=size)
    trace = Trace(tm.events, core, mc.freq_mhz, names=core_names(core, len(tm.core_end)))
    timing_s = time.perf_counter() - t_b
    return RunResult(kernel=name, block_dim=block_dim, machine=mc, core_type=core, timing=tm,
                     trace=trace, blocks=streams, warnings=warns, functional_s=functional_s,
                     timing_s=timing_s)


def core_names(core: str, n: int) -> list[str]:
    """The names of the ``n`` physical cores a replay of a ``core`` kernel used, by index: a
    mix kernel's group k is ``aic<k>``, ``aiv<2k>``, ``aiv<2k+1>``."""
    if core != "mix":
        return [f"{core}{i}" for i in range(n)]
    size = mix.MixGroup.size
    return [f"aic{i // size}" if i % size == 0 else f"aiv{2 * (i // size) + i % size - 1}"
            for i in range(n)]


def retime(result: RunResult, machine) -> RunResult:
    """Replay ``result``'s recorded instructions on another card (what-if: double the HBM
    bandwidth, slower DMA ...) without re-running the kernel. Capacities are not re-checked."""
    mc = get_machine(machine)
    return _timed(result.kernel, result.block_dim, mc, result.core_type, result._blocks,
                  result.warnings, 0.0)


# ---------------------------------------------------------------------------------------------
# capture: what a piece of host code launched
# ---------------------------------------------------------------------------------------------
def content_digest(a) -> str:
    """A digest of an array's dtype, shape and bytes (sha256, 32 hex digits)."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.reshape(-1).view(np.uint8).data if a.size else b"")
    return h.hexdigest()[:32]


def merge_intervals(ivs) -> list[tuple[int, int]]:
    """The union of half-open byte intervals ``(start, end)``, sorted and merged."""
    out = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


class ArrayInfo:
    """One NumPy argument of a captured launch.

    Attributes:
        index: argument position; name: the kernel's parameter name.
        array: the caller's array object (identity: the same array over several launches).
        shape, dtype, nbytes: of the array.
        digest_start, digest_end: :func:`content_digest` before the launch and after its
            results were written back (``None`` if the launch failed).
        blank_start: every byte zero, or (floats) every element the dtype's NaN (the bits of
            ``np.full(shape, np.nan)``), before the launch: a
            workspace from ``np.zeros``, an output not written yet.
        written: merged byte intervals ``[start, end)`` of the array that the device wrote
            (MTE3 ``data_copy``/``data_copy_pad`` and FIX ``fixpipe``, any block).
        read: merged byte intervals the device read (MTE2 copies).
        writers: block id -> bytes that block wrote.
    """

    __slots__ = ("index", "name", "array", "shape", "dtype", "nbytes", "digest_start",
                 "digest_end", "written", "read", "writers", "blank_start")

    def __init__(self, index, name, array):
        self.index = index
        self.name = name
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = array.dtype
        self.nbytes = int(array.nbytes)
        self.digest_start = content_digest(array)
        flat = np.ascontiguousarray(array).reshape(-1)
        blank = not flat.view(np.uint8).any()
        if not blank and is_float(flat.dtype) and flat.size:
            # every element the dtype's own NaN, bit for bit (np.full(shape, np.nan)): NaNs
            # with other payloads could carry data
            nan = np.full(1, np.nan, dtype=flat.dtype).view(np.uint8)
            blank = bool((flat.view(np.uint8).reshape(flat.size, -1) == nan).all())
        self.blank_start = bool(blank)
        self.digest_end = None
        self.written: list[tuple[int, int]] = []
        self.read: list[tuple[int, int]] = []
        self.writers: dict[int, int] = {}

    @property
    def written_bytes(self) -> int:
        """Distinct bytes of the array the device wrote."""
        return sum(e - s for s, e in self.written)

    @property
    def read_bytes(self) -> int:
        """Distinct bytes of the array the device read."""
        return sum(e - s for s, e in self.read)

    def __repr__(self):
        return (f"ArrayInfo({self.name}, {self.shape} {self.dtype}, written "
                f"{self.written_bytes}/{self.nbytes} B, read {self.read_bytes} B)")


class LaunchInfo:
    """One captured :func:`launch`: ``kernel`` (name), ``core_type``, ``block_dim``,
    ``machine`` (the card it ran on), ``arrays`` (an :class:`ArrayInfo` per NumPy argument),
    ``result`` (the :class:`RunResult`, or ``None`` if it failed), ``figures`` (its figures
    copied when the launch returned: :meth:`RunResult.as_dict` plus ``cores_used``,
    ``critical_core``, ``hbm_bytes``, ``functional_s``, ``timing_s``; host code that changes
    the RunResult it got back changes ``result``, never these) and ``error`` (the exception
    it raised, or ``None``)."""

    def __init__(self, kernel, block_dim, machine, args):
        self.kernel = kernel.name
        self.core_type = kernel.core
        self.block_dim = block_dim
        self.machine = machine
        self.result = None
        self.figures = None
        self.error = None
        self.arrays = []
        if not isinstance(args, (tuple, list)):
            args = (args,)
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                name = kernel.params[i] if i < len(kernel.params) else f"arg{i}"
                self.arrays.append(ArrayInfo(i, name, a))

    def _finish(self, bufs, streams) -> None:
        by_index = {b.index: b for b in bufs}
        starts = [b.base for b in bufs]
        reads: dict[int, list] = {}
        for st in streams:
            for r in st.records:
                c = r.cost
                if c is None or c[0] != "dma" or c[1]:
                    continue
                for addr, nb in c[2]:
                    k = bisect.bisect_right(starts, addr) - 1
                    if k >= 0 and addr < bufs[k].base + bufs[k].nbytes:
                        rel = addr - bufs[k].base
                        reads.setdefault(k, []).append((rel, rel + nb))
        pos = {b.index: k for k, b in enumerate(bufs)}
        for ai in self.arrays:
            buf = by_index.get(ai.index)
            if buf is None:
                continue
            ai.digest_end = content_digest(ai.array)
            ivs = []
            for blk, lst in buf.writes.items():
                m = merge_intervals(lst)
                ai.writers[blk] = sum(e - s for s, e in m)
                ivs.extend(m)
            ai.written = merge_intervals(ivs)
            ai.read = merge_intervals(reads.get(pos[ai.index], []))

    @property
    def cycles(self) -> int:
        """Device cycles of the launch (0 if it failed)."""
        return self.result.cycles if self.result is not None else 0

    def __repr__(self):
        state = f"cycles={self.cycles}" if self.error is None else \
            f"error={type(self.error).__name__}"
        return f"LaunchInfo({self.kernel}, block_dim={self.block_dim}, {self.machine.key}, {state})"


class Capture:
    """The launches made while a :func:`capture` block was active: ``launches``, a list of
    :class:`LaunchInfo` in launch order (failed launches included)."""

    def __init__(self):
        self.launches: list[LaunchInfo] = []

    @property
    def cycles(self) -> int:
        """Device cycles of all launches, one after the other."""
        return sum(li.cycles for li in self.launches)


@contextlib.contextmanager
def capture():
    """Record every :func:`launch` made inside the ``with`` block (nested captures each see
    them)::

        with npu.capture() as cap:
            my_host_function(x, y, z)
        cap.launches[0].result.cycles, cap.launches[0].arrays[2].written_bytes

    The autograder uses it to read the cycles of the launches a submission made and to see
    that the output was written by the device, without trusting what the host code returns.
    """
    cap = Capture()
    _CAPTURES.append(cap)
    try:
        yield cap
    finally:
        _CAPTURES.remove(cap)
