"""The ``sim`` tier's kernel executor: numba-cuda's CUDA simulator, made fast and strict.

numba-cuda's simulator (``numba.cuda.simulator``) runs each CUDA thread of a block as an OS
thread and busy-polls barriers. This package replaces only its launch
(``FakeCUDAKernel.__call__``) and the in-kernel ``cuda`` module; everything else (``cuda.jit``,
device arrays, ``cuda.to_device``, device functions) is the simulator's own. The stock executor
stays available (``configure(executor="stock")`` or ``KERNELLAB_SIM_EXECUTOR=stock``).

How a launch runs
-----------------
* Two paths, same checks and results: launches of at least
  :data:`~kernellab.sim.compiled.MIN_THREADS` threads of kernels that use only thread/block
  indices, ``syncthreads``, static shared and local arrays, ``math`` and device functions
  without barriers or atomics run on the **compiled path** (:mod:`kernellab.sim.compiled`:
  each thread a Numba-compiled generator that yields at barriers, its accesses logged by
  compiled code, the same analysis); every other launch (warp collectives, atomics, dynamic
  shared memory, tuple or record arguments, a source-site re-run, ``shuffle``, a trace) and
  any compiled launch that faults runs on the **greenlet executor** described below, which
  names threads and lines. ``LaunchStats.path`` / ``path_note`` say which and why;
  ``configure(compiled="off"|"always"|"auto")`` chooses.
* Blocks run one after another. A block's threads run on pooled greenlets (``greenlet``
  package) without preemption and switch only at a barrier (``syncthreads``), a warp collective
  (``shfl_*_sync``, ``ballot_sync``, ``syncwarp``...), an atomic, thread exit, or when a thread
  has logged ``SLICE`` accesses since its last switch (so a thread spinning on memory lets the
  others run). Threads run in thread-id order, or in a seeded random order per interval
  (``shuffle=seed``) to shake out order-dependent bugs.
* Every thread gets its own copy of the launching ``contextvars.Context`` (numpy's error state
  lives there). ``threading.local`` is shared by all threads of a block: do not use it in kernels.
* Arrays inside a kernel are wrapped (:class:`SimArray`): every element access of a global or
  shared array is bounds-checked (negative indices are errors, not wraparound) and appended to
  the running thread's log as one int (array, load/store, element offset). A thread's log is
  cut into a segment at every barrier, ``__syncwarp``, forced switch and exit, tagged with
  (block, barrier interval, thread, warp-sync epoch). At the end of each block the segments
  are analysed in bulk with numpy:

  - **races**: two threads touching one address, at least one writing, in one barrier interval
    (``__syncwarp`` orders the lanes of one warp); across blocks, any global address written by
    one block and touched by another (blocks are unordered);
  - **uninitialised shared memory**: a read of a shared element no thread has written before
    or in the read's interval (shared and ``cuda.local`` arrays start poisoned: NaN for floats,
    bytes ``0xCD`` for integers);
  - **traffic**: an access's *warp-level request* is (array, load/store, interval, warp, n-th
    access of that kind to that array by the thread in the interval) -- the lanes of a warp
    run one instruction stream, so their n-th accesses are one instruction; lanes that skip an
    access (a bounds guard) just do not take part. A global request costs its distinct 32-byte
    sectors, a shared request the most distinct 4-byte words that fall in one of the 32 banks
    (wavefronts; a broadcast of one word is free); DRAM sees each distinct sector once a
    launch (an atomic as a store). Arrays get virtual addresses aligned
    to 256 bytes, as ``cudaMalloc`` returns, so the counts do not depend on where numpy put the
    data. Arrays inside tuple arguments are copied and wrapped like any argument (numba-cuda
    passes them to a GPU). While a :func:`~kernellab.sim.capture` is open, each launch also
    reports per argument its accesses and a digest of its content at start and end
    (``LaunchStats.arrays``), so a grader can tell what a kernel read and wrote.

  ``cuda.local`` arrays are plain numpy arrays (not logged, not wrapped: a kernel's
  per-thread registers and stack run at full speed); at the end of each block the bytes each
  thread stored to them are counted (the elements no longer poisoned). A launch reports one
  thread's local frame, ``local_frame_bytes`` -- the PTX ``__local_depot`` of the kernel when
  it was compiled for a GPU (what NVVM kept in registers is not in it), else every local array
  -- and ``local_touched_bytes``, the stores to the arrays that frame holds (largest first);
  :func:`kernellab.sim.model.local_traffic` charges them when the frames overflow L1.

  A block's shared memory starts fresh, so blocks whose shared-memory logs are identical (the
  usual case) reuse the first one's shared analysis: exact, and most of the analysis time of a
  tiled kernel. When a race or uninitialised read is found, the launch is run again from a copy
  of its arguments with each access's source instruction logged too, so that the error can name
  the lines (errors are rare; logging lines on every access would double the log's cost); for
  a race, with each device-function access's call stack (call sites and call instances) too.
  A race names both accesses in program order -- the order a thread ran them, by call stack
  and loop back edges, not by line number -- their barrier interval (how many
  ``syncthreads`` the block had passed, and the lines of the barriers around it), whether a
  loop took the second access to a later pass or it is in another call of a device function,
  and where a ``syncthreads`` must go.
  ``checks="fast"`` skips the log altogether: bounds, poison and divergence checks stay, the race
  detector and the counters go.

  These rules follow the CUDA C++ Programming Guide (§ "Compute Capability 5.x+ / Shared Memory"
  for banks, § "Device Memory Accesses" for 32-byte sectors and coalescing) and NVIDIA's Compute
  Sanitizer manual (racecheck, synccheck, initcheck, memcheck).
* Limits a GPU enforces: at most 1024 threads a block (x, y <= 1024, z <= 64), grid y, z <=
  65535, at most 48 KiB of static shared memory a block (CUDA C++ Programming Guide, Table
  "Technical Specifications per Compute Capability").
* A barrier must be reached by every live (not yet exited) thread of the block at the same
  ``syncthreads`` call; a warp collective by every lane its mask names. Otherwise
  :class:`~kernellab.sim.errors.DivergenceError`.
* Watchdog: a block whose threads only load (no store, exit, barrier or changing atomic) for
  ``STALE_SLICES`` slices in a row, or a launch running longer than ``watchdog_s`` seconds of
  wall-clock, raises :class:`~kernellab.sim.errors.StuckKernelError` naming the threads and lines.

What it does not do, or does differently:

* no timing, and no memory ordering weaker than sequential consistency (a racy kernel may give
  the right answer here; the race detector is what catches it);
* negative indices are errors, as CUDA C++ would read before the array;
  numba-cuda on a GPU wraps them like Python, so ``a[-1]`` that "works" there fails here;
* races between an atomic and a plain access are checked within a block, not across blocks;
  views of dynamic shared memory with different dtypes are separate arrays to the checks;
* a ``syncthreads`` is identified by its innermost call site: one device function holding the
  barrier, called from two divergent branches, is not reported as divergent;
* with ``checks="fast"`` nothing is logged, so a thread spinning on another thread's plain
  store never yields: only the wall-clock watchdog stops it;
* record (structured) arrays run on the stock executor (no checks, no counters; a capture
  lists such launches in ``unchecked``);
* arrays a kernel reads from module globals or its closure are read live, uncounted and
  unchecked (a GPU freezes them into the kernel when it compiles); a capture lists them
  (``LaunchStats.outside``);
* fp16/bf16 intrinsics beyond the stock simulator's, cooperative-grid sync across blocks and
  ``threading.local`` per thread are not provided;
* the pairwise race check is Python: kernels with many ``__syncwarp``-ordered exchanges on one
  address within a barrier interval analyse slowly (the common tiled kernels do not).

Where each part lives (this module re-exports the public names and installs the executor):
:mod:`~kernellab.sim.settings` (options, GPU limits), :mod:`~kernellab.sim.arrays` (the arrays
a kernel sees and the hot-path access log), :mod:`~kernellab.sim.cudamod` (the in-kernel
``cuda`` module), :mod:`~kernellab.sim.scheduler` (greenlet scheduler, watchdog),
:mod:`~kernellab.sim.analysis` (the access-log analysis), :mod:`~kernellab.sim.sites` (source
sites, race wording), :mod:`~kernellab.sim.recording` (recording and replay),
:mod:`~kernellab.sim.launch` (a launch end to end, installation).
"""

from __future__ import annotations

import sys
import types

from kernellab.sim import analysis, arrays, cudamod, launch as _launch_mod, settings
from kernellab.sim import recording, scheduler, sites
from kernellab.sim.analysis import BLOCK_MAX_KEYS, MEMO_ENTRIES, SHARED_KEYS, TRACE_DTYPE
from kernellab.sim.arrays import SLICE, SimArray, _listeners  # noqa: F401  (kernellab.sim)
from kernellab.sim.counters import COUNTER_KEYS
from kernellab.sim.cudamod import SimCudaModule, dp4a
from kernellab.sim.launch import (
    LaunchStats, check_launch_config, install, launch, local_depot_bytes,
)
from kernellab.sim.settings import (  # noqa: F401  (_OPTS: grader/labs/_baseline.py)
    _OPTS, ALIGN, BANK_BYTES, BANKS, INT_POISON, MAX_BLOCK_DIM, MAX_GRID_YZ, MAX_STATIC_SHARED,
    MAX_THREADS, SECTOR, WARP, configure, options,
)
from kernellab.sim.recording import Recopy, Refuse, Relaunch, Resetitem
from kernellab.sim.scheduler import BLOCK_CAP, SPIN_ADDRESSES, STALE_SLICES

__all__ = [
    "configure", "options", "install", "launch", "LaunchStats", "check_launch_config",
    "local_depot_bytes", "dp4a", "SimArray", "SimCudaModule", "Relaunch", "Refuse", "Recopy",
    "Resetitem", "COUNTER_KEYS", "TRACE_DTYPE", "SHARED_KEYS", "BLOCK_MAX_KEYS", "WARP",
    "MAX_THREADS", "MAX_BLOCK_DIM", "MAX_GRID_YZ", "MAX_STATIC_SHARED", "SECTOR", "BANKS",
    "BANK_BYTES", "ALIGN", "INT_POISON", "SLICE", "BLOCK_CAP", "STALE_SLICES", "MEMO_ENTRIES",
    "SPIN_ADDRESSES",
]

#: the modules the executor is made of, in import order
_PARTS = (settings, arrays, cudamod, sites, analysis, scheduler, recording, _launch_mod)


class _Engine(types.ModuleType):
    """This module's type: setting one of its attributes (a test lowering ``SLICE`` or
    ``STALE_SLICES``) sets it in every part that holds that name too, as when the executor
    was one module (Python Language Reference, "Customizing module attribute access")."""

    def __setattr__(self, name, value):
        for part in _PARTS:
            if name in part.__dict__:
                setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Engine

install()
