"""Registers, local memory, shared memory and occupancy of a kernel (:func:`occupancy`,
:func:`resource_table`).

What a kernel's machine code asks of an SM decides how many of its blocks an SM can hold at
once (*occupancy*: resident warps over the most an SM can hold), and that decides how much
latency the SM can hide. The figures come from ptxas (``registers``, ``stack_frame_bytes``,
spills: :mod:`kernellab.sim.ptx.ptxas`, on the sim tier) or from numba-cuda's dispatcher (on a
GPU, :func:`gpu_resources`); the limits per SM from the CUDA C++ Programming Guide.

Sources
-------
* CUDA C++ Programming Guide, "Compute Capabilities", Table "Technical Specifications per
  Compute Capability", columns 8.0 and 9.0: 64 K 32-bit registers per SM and per block, at most
  255 registers per thread, 64 resident warps, 2048 resident threads and 32 resident blocks per
  SM, 164 KB (8.0) / 228 KB (9.0) of shared memory per SM, 48 KB per block without an opt-in
  and 163 KB (8.0) / 227 KB (9.0) with it (:data:`MAX_SHARED_PER_BLOCK_OPTIN`; a CUDA C++
  kernel opts in with ``cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize,
  ...)``, which numba-cuda does not expose); the threads, blocks and shared memory
  per SM are :mod:`kernellab.sim.model`'s profile fields (one home per fact), the register file
  is its ``registers_per_sm`` and ``max_registers_per_thread``.
* CUDA C++ Programming Guide, "Compute Capability 8.x" / "9.0", "Shared Memory": the CUDA
  driver reserves 1 KB of shared memory per thread block (:data:`RESERVED_SHARED_PER_BLOCK`).
* CUDA C++ Best Practices Guide, "Occupancy" and "Calculating Occupancy" (registers are
  allocated to whole warps; the CUDA Occupancy Calculator), and its implementation shipped with
  the CUDA Toolkit, ``cuda_occupancy.h`` (``cudaOccMaxBlocksPerSMRegsLimit``,
  ``cudaOccMaxBlocksPerSMSmemLimit``, ``cudaOccMaxBlocksPerSMWarpsLimit``): a warp's registers
  are ``ceil(regs x 32 / 256) x 256`` (:data:`REGISTER_ALLOCATION_UNIT`), allocated in each of
  the SM's 4 sub-partitions (:data:`SUB_PARTITIONS`: a warp's registers come from one quarter
  of the register file), a block's shared memory is rounded up to 128 B
  (:data:`SHARED_ALLOCATION_UNIT`) after adding the reserved 1 KB.

The formula (:func:`occupancy`), for ``W = ceil(threads / 32)`` warps a block::

    by registers:  floor(floor(65536 / 4 / (ceil(32 R / 256) x 256)) x 4 / W)   (0 if R > 255)
    by shared:     floor(shared per SM / (ceil((static + dynamic + 1024) / 128) x 128))
                   (0 above 48 KiB + 1 KB a block; with ``opt_in``, above the
                   cc's max_shared_per_block_optin + 1 KB)
    by threads:    floor(64 / W)
    by blocks:     32
    blocks/SM = min of the four; occupancy = blocks x W / 64

Shared memory per SM is the largest carveout, as ``cuda_occupancy.h`` takes it for a kernel
that states no carveout preference. A warp's registers come from one sub-partition, so the
hardware's per-block check (the block's warps rounded up to a multiple of 4) is implied by the
register limit. Not modelled: a carveout preference, registers a debug build adds.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping

from kernellab.sim.settings import MAX_STATIC_SHARED

__all__ = [
    "KernelResources", "Occupancy", "occupancy", "resource_table", "gpu_resources",
    "SM_LIMITS", "REGISTER_ALLOCATION_UNIT", "SHARED_ALLOCATION_UNIT",
    "RESERVED_SHARED_PER_BLOCK", "SUB_PARTITIONS", "LIMITERS", "MAX_SHARED_PER_BLOCK_OPTIN",
]

#: Registers are allocated to a warp in units of 256 (Occupancy Calculator, cc 8.0 and 9.0:
#: "Register allocation unit size 256", granularity "warp").
REGISTER_ALLOCATION_UNIT = 256
#: A block's shared memory is allocated in units of 128 bytes (Occupancy Calculator, cc 8.0
#: and 9.0: "Shared Memory allocation unit size 128").
SHARED_ALLOCATION_UNIT = 128
#: Shared memory the CUDA driver reserves per block, bytes (Programming Guide, "Compute
#: Capability 8.x" and "9.0", "Shared Memory": 1 KB).
RESERVED_SHARED_PER_BLOCK = 1024
#: An SM's register file is split among 4 sub-partitions (cuda_occupancy.h,
#: ``cudaOccSubPartitionsPerMultiprocessor``, cc 7.0 and later); a warp's registers come from
#: one of them.
SUB_PARTITIONS = 4
WARP_SIZE = 32

#: The most shared memory one block may have after an opt-in, bytes, per compute capability
#: (Programming Guide, "Technical Specifications per Compute Capability", "Maximum amount of
#: shared memory per thread block": 163 KB on 8.0, 227 KB on 9.0; without the opt-in 48 KB,
#: :data:`kernellab.sim.settings.MAX_STATIC_SHARED`).
MAX_SHARED_PER_BLOCK_OPTIN = {(8, 0): 163 * 1024, (9, 0): 227 * 1024}

#: What can limit the blocks an SM holds, in the order a tie is named.
LIMITERS = ("threads", "blocks", "registers", "shared memory")


@dataclasses.dataclass(frozen=True)
class SMLimits:
    """What one SM of a compute capability holds (module docstring, "Sources")."""

    cc: tuple
    registers_per_sm: int
    max_registers_per_block: int
    max_registers_per_thread: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_shared_per_sm: int
    max_shared_per_block: int = MAX_STATIC_SHARED
    max_shared_per_block_optin: int = MAX_STATIC_SHARED

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE


def _limits_from_profile(cc, name) -> SMLimits:
    from kernellab.sim.model import PROFILES

    p = PROFILES[name]
    return SMLimits(cc=cc, registers_per_sm=p.registers_per_sm,
                    max_registers_per_block=p.registers_per_sm,
                    max_registers_per_thread=p.max_registers_per_thread,
                    max_threads_per_sm=p.max_threads_per_sm,
                    max_blocks_per_sm=p.max_blocks_per_sm,
                    max_shared_per_sm=p.max_shared_per_sm,
                    max_shared_per_block_optin=MAX_SHARED_PER_BLOCK_OPTIN[cc])


#: Per-SM limits of the compute capabilities of :mod:`kernellab.sim.model`'s profiles: 8.0
#: (A100) and 9.0 (H100, H200).
SM_LIMITS: dict[tuple, SMLimits] = {
    (8, 0): _limits_from_profile((8, 0), "a100"),
    (9, 0): _limits_from_profile((9, 0), "h100"),
}


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel asks of an SM, per thread and per block.

    ``registers``: 32-bit registers per thread; ``stack_frame_bytes``: ptxas's "bytes stack
    frame", the thread's local-memory frame (local arrays and register spills), bytes;
    ``spill_store_bytes`` / ``spill_load_bytes``: bytes of the spill stores and loads ptxas
    wrote into the code (static: a spill in a loop counts once); ``shared_static_bytes``:
    static shared memory a block, bytes; ``cc``: ``(major, minor)`` compiled for;
    ``source``: ``"ptxas via nvJitLink -verbose"`` or ``"numba dispatcher (GPU)"``.
    """

    registers: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_static_bytes: int
    cc: tuple
    source: str

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cc"] = list(self.cc)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> KernelResources:
        return cls(**{**d, "cc": tuple(d["cc"])})


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel one SM holds at once.

    ``blocks_per_sm``; ``warps_per_sm`` (their warps); ``max_warps_per_sm`` (64 on cc 8.0 and
    9.0); ``fraction`` = warps / max warps (0..1); ``limiter``: what stops one more block
    (one of :data:`LIMITERS`; ties named in that order); ``limits``: blocks per SM each
    resource alone allows; ``threads_per_block``; ``cc``."""

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    fraction: float
    limiter: str
    limits: dict
    threads_per_block: int
    cc: tuple


def _sm_limits(cc) -> SMLimits:
    try:
        key = tuple(int(x) for x in cc)
    except (TypeError, ValueError):
        raise ValueError(f"cc must be (major, minor), got {cc!r}") from None
    if key not in SM_LIMITS:
        raise ValueError(f"no occupancy limits for compute capability {key}: known are "
                         f"{', '.join(f'{a}.{b}' for a, b in SM_LIMITS)}")
    return SM_LIMITS[key]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(res: KernelResources, threads_per_block: int, dynamic_shared_bytes: int = 0,
              cc=(8, 0), opt_in: bool = False) -> Occupancy:
    """Blocks of a kernel with resources ``res`` one SM of compute capability ``cc`` holds,
    launched with ``threads_per_block`` threads and ``dynamic_shared_bytes`` of dynamic shared
    memory (module docstring, the formula). ``opt_in``: the kernel opted in to more than 48 KiB
    of shared memory a block (up to ``SM_LIMITS[cc].max_shared_per_block_optin``; a GPU-side
    attribute numba-cuda does not set, so the sim tier itself refuses such launches). A block
    the SM cannot hold at all (more than 255 registers a thread or 65536 a block, more shared
    memory than a block may have) gives 0 blocks, fraction 0: a GPU refuses such a launch
    ("too many resources requested for launch"). Raises ValueError for threads_per_block
    outside 1..1024, negative sizes or an unknown cc."""
    lim = _sm_limits(cc)
    tpb = int(threads_per_block)
    if not 1 <= tpb <= 1024:
        raise ValueError(f"threads_per_block must be 1..1024, got {threads_per_block!r}")
    regs = int(res.registers)
    smem = int(res.shared_static_bytes) + int(dynamic_shared_bytes)
    if regs < 0 or smem < 0 or dynamic_shared_bytes < 0:
        raise ValueError("registers and shared memory must be >= 0")
    warps = -(-tpb // WARP_SIZE)
    limits = {"threads": lim.max_warps_per_sm // warps, "blocks": lim.max_blocks_per_sm}
    if regs == 0:
        limits["registers"] = lim.max_blocks_per_sm
    else:
        per_warp = _round_up(regs * WARP_SIZE, REGISTER_ALLOCATION_UNIT)
        if regs > lim.max_registers_per_thread or per_warp * warps > lim.max_registers_per_block:
            limits["registers"] = 0
        else:
            per_part = (lim.registers_per_sm // SUB_PARTITIONS) // per_warp
            limits["registers"] = per_part * SUB_PARTITIONS // warps
    per_block = _round_up(smem + RESERVED_SHARED_PER_BLOCK, SHARED_ALLOCATION_UNIT)
    most = lim.max_shared_per_block_optin if opt_in else lim.max_shared_per_block
    if per_block > most + RESERVED_SHARED_PER_BLOCK:
        limits["shared memory"] = 0
    else:
        limits["shared memory"] = lim.max_shared_per_sm // per_block
    blocks = min(limits.values())
    limiter = next(k for k in LIMITERS if limits[k] == blocks)
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                     max_warps_per_sm=lim.max_warps_per_sm,
                     fraction=blocks * warps / lim.max_warps_per_sm, limiter=limiter,
                     limits=limits, threads_per_block=tpb, cc=lim.cc)


def gpu_resources(kernel, signature=None) -> KernelResources:
    """:class:`KernelResources` of a kernel compiled on a GPU, from numba-cuda's dispatcher
    (``get_regs_per_thread``, ``get_local_mem_per_thread``, ``get_shared_mem_per_block``;
    numba-cuda documentation, "Dispatcher objects"). ``signature``: the overload's signature,
    needed when the kernel was compiled for several (None: a kernel compiled for exactly one).
    The driver does not report spills: ``spill_*_bytes`` are 0 (ptxas's report, on the sim tier,
    has them). Raises ValueError when the kernel has not been compiled (launch it first) or
    has several overloads and no signature is given."""
    overloads = getattr(kernel, "overloads", None)
    if signature is None and overloads is not None:
        if len(overloads) != 1:
            raise ValueError(f"the kernel has {len(overloads)} compiled overloads: launch it "
                             "first, or pass the signature")
        signature = next(iter(overloads))
    sig_arg = signature
    if isinstance(signature, tuple):    # overloads are keyed by the argument types
        sig_arg = type("Sig", (), {"args": signature})()

    def ask(method):
        v = getattr(kernel, method)(sig_arg)
        return int(v)

    from numba import cuda

    cc = tuple(cuda.get_current_device().compute_capability)
    return KernelResources(registers=ask("get_regs_per_thread"),
                           stack_frame_bytes=ask("get_local_mem_per_thread"),
                           spill_store_bytes=0, spill_load_bytes=0,
                           shared_static_bytes=ask("get_shared_mem_per_block"),
                           cc=cc, source="numba dispatcher (GPU)")


def _rows(launches, cc) -> list:
    """(name, threads per block, dynamic shared bytes, KernelResources | None, note) of each
    item, for compute capability ``cc``: a ``LaunchStats`` (sim tier: ptxas for ``cc`` on the
    launch's PTX), or on a GPU a ``(kernel, threads_per_block)`` or ``(kernel,
    threads_per_block, dynamic_shared_bytes)`` tuple (the dispatcher's figures, for the GPU's
    own compute capability)."""
    if hasattr(launches, "launches"):           # a Capture
        launches = launches.launches
    if hasattr(launches, "counters") or (isinstance(launches, tuple)
                                         and len(launches) in (2, 3)
                                         and isinstance(launches[1], numbers.Integral)):
        launches = [launches]
    if not isinstance(launches, Iterable) or isinstance(launches, (str, bytes)):
        raise TypeError("resource_table takes a sim Capture, LaunchStats, or on a GPU "
                        "(kernel, threads_per_block[, dynamic_shared_bytes]) tuples")
    rows = []
    for item in launches:
        if hasattr(item, "counters"):
            bx, by, bz = item.block
            if hasattr(item, "resources_for"):
                res, note = item.resources_for(cc)
            else:
                res, note = item.resources, item.resources_note
            rows.append((item.name, bx * by * bz,
                         int(getattr(item, "dynamic_shared_bytes", 0) or 0), res, note))
        elif isinstance(item, tuple) and len(item) in (2, 3):
            kernel, tpb = item[0], int(item[1])
            dyn = int(item[2]) if len(item) == 3 else 0
            name = getattr(getattr(kernel, "py_func", None), "__name__", None) \
                or getattr(kernel, "__name__", "kernel")
            try:
                res, note = gpu_resources(kernel), ""
            except (ValueError, AttributeError, TypeError, KeyError) as exc:
                res, note = None, str(exc)
            if res is not None and tuple(res.cc) != tuple(cc):
                note = (f"registers from the GPU (compute capability {res.cc[0]}.{res.cc[1]}); "
                        f"blocks/SM for {cc[0]}.{cc[1]} as asked")
            rows.append((name, tpb, dyn, res, note))
        else:
            raise TypeError(f"cannot read resources from a {type(item).__name__}: give "
                            "LaunchStats or (kernel, threads_per_block) tuples")
    return rows


_HEAD = ("kernel", "threads/block", "registers/thread", "local frame B", "spill st/ld B",
         "shared B/block", "blocks/SM", "occupancy %", "limiter")


def resource_table(launches_or_capture, cc=(8, 0)) -> str:
    """A text table, one row per distinct kernel (name, threads a block, dynamic shared
    memory): kernel, threads/block, registers/thread, local frame B (ptxas's stack frame),
    spill st/ld B, shared B/block (static + dynamic), blocks/SM, occupancy % and limiter on
    compute capability ``cc`` (:func:`occupancy`). Takes a sim-tier ``Capture`` or
    ``LaunchStats`` (ptxas for ``cc`` on each launch's PTX, which is compiled for sm_80) or,
    on a GPU, ``(kernel, threads_per_block[, dynamic_shared_bytes])`` tuples of launched
    kernels (numba's dispatcher: the GPU's own registers; blocks/SM for ``cc``). A kernel whose
    resources are unknown gets a row of "?" and a line that says why. Raises ValueError for an
    unknown ``cc``, TypeError for something that holds no launches."""
    want = tuple(int(x) for x in cc)
    _sm_limits(want)
    rows, seen, notes, sources = [], set(), [], []
    for name, tpb, dyn, res, note in _rows(launches_or_capture, want):
        key = (name, tpb, dyn, res)
        if key in seen:
            continue
        seen.add(key)
        if res is None:
            rows.append((name, str(tpb), "?", "?", "?", "?", "?", "?", "unknown"))
            notes.append(f"{name}: {note or 'resources unknown'}")
            continue
        if res.source not in sources:
            sources.append(res.source)
        if res.source == "numba dispatcher (GPU)" and note:
            notes.append(f"{name}: {note}")
        occ = occupancy(res, tpb, dyn, want)
        rows.append((name, str(tpb), str(res.registers), str(res.stack_frame_bytes),
                     f"{res.spill_store_bytes}/{res.spill_load_bytes}",
                     str(res.shared_static_bytes + dyn), str(occ.blocks_per_sm),
                     f"{100 * occ.fraction:.1f}", occ.limiter))
    if not rows:
        return "(no launches)"
    widths = [max(len(r[i]) for r in rows + [_HEAD]) for i in range(len(_HEAD))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(_HEAD, widths)))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.append(f"(compute capability {want[0]}.{want[1]}; registers and frames from "
                 f"{', '.join(sources) or 'nowhere'})")
    lines += notes
    return "\n".join(lines)
