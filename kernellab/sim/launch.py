"""A sim-tier launch from start to end, and its installation into numba-cuda's simulator.

:func:`launch` checks the configuration against a GPU's limits (:func:`check_launch_config`),
compiles the kernel to PTX once per signature (:mod:`kernellab.sim.ptx`, the ``gpu_compile``
option), copies numpy arguments to the device and back, wraps them, runs the blocks one after
another (:func:`kernellab.sim.scheduler._run_block`) with CUDA's ``math``
(:mod:`kernellab.sim.gpumath`), re-runs in mode 2 or 3 to name the lines of a hazard, and
returns :class:`LaunchStats`. :func:`install` routes ``FakeCUDAKernel.__call__`` through it
(record arrays, ``extensions`` and ``executor="stock"`` keep the stock simulator) and gives
the simulator's ``cuda.jit`` the GPU's ``launch_bounds`` and ``max_registers``
(:func:`normalize_launch_bounds`, :func:`normalize_max_registers`).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math as _math_mod
import numbers
import random
import re

import numpy as np

from numba.cuda.simulator import kernel as _simkernel
from numba.cuda.simulator import kernelapi as _kapi
from numba.cuda.simulator.args import ArgHint, InOut
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
from numba.cuda.errors import normalize_kernel_dimensions
from numba.core.types import Float as _NbFloat, Integer as _NbInteger

from kernellab.sim import arrays as _a
from kernellab.sim import compiled as _compiled
from kernellab.sim import content_digest, gpumath
from kernellab.sim import recording as _replay
from kernellab.sim.analysis import _Launch, _NeedDetail
from kernellab.sim.arrays import _ctx_ids, _ctxs, _idx_str, _listeners
from kernellab.sim.cudamod import SimCudaModule
from kernellab.sim.errors import LaunchConfigError, SimError, StuckKernelError
from kernellab.sim.settings import _OPTS, MAX_BLOCK_DIM, MAX_GRID_YZ, MAX_STATIC_SHARED, MAX_THREADS
from kernellab.sim.recording import (
    Refuse, Relaunch, _install_copies, _launch_buffers, _named_values, _record,
)
from kernellab.sim.scheduler import _arm_alarm, _disarm_alarm, _pool, _run_block


def _arg_names(fn, n):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    names += [f"arg{i}" for i in range(len(names), n)]
    return names


def check_launch_config(grid, block, dynshared_size=0):
    """Raise :class:`LaunchConfigError` for a configuration a GPU would refuse."""
    if dynshared_size and dynshared_size > MAX_STATIC_SHARED:
        raise LaunchConfigError(
            f"{dynshared_size} bytes of dynamic shared memory a block; without an opt-in (which "
            f"numba-cuda does not expose) a GPU allows {MAX_STATIC_SHARED} bytes (48 KiB)")
    nthreads = block[0] * block[1] * block[2]
    if nthreads > MAX_THREADS:
        raise LaunchConfigError(
            f"block {tuple(block)} has {nthreads} threads; a GPU allows at most {MAX_THREADS}"
            " threads a block")
    for d, (b, mx) in enumerate(zip(block, MAX_BLOCK_DIM)):
        if b > mx:
            raise LaunchConfigError(f"block dimension {'xyz'[d]} = {b} exceeds {mx}")
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise LaunchConfigError(f"grid {tuple(grid)}: y and z may be at most {MAX_GRID_YZ}")
    if min(grid) < 1 or min(block) < 1:
        raise LaunchConfigError(f"empty launch: grid {tuple(grid)}, block {tuple(block)}")


def normalize_launch_bounds(launch_bounds):
    """``launch_bounds`` of ``@cuda.jit`` as numba-cuda 0.30.4 takes it (an int, or a tuple of
    1 to 3: most threads a block, fewest blocks an SM should hold, most blocks a cluster;
    NVVM's ``maxntidx``, ``minctasm``, ``cluster_max_blocks``; CUDA C++ Programming Guide,
    "Launch Bounds") as a tuple of ints, or None. Any integer type is taken (NumPy's too).
    Raises ValueError in plain words."""
    if launch_bounds is None:
        return None
    lb = (launch_bounds,) if isinstance(launch_bounds, numbers.Integral) else launch_bounds
    if not (isinstance(lb, (tuple, list)) and 1 <= len(lb) <= 3
            and all(_is_int(v) and v >= 1 for v in lb)):
        raise ValueError(f"launch_bounds must be a positive int or a tuple of 1 to 3 positive "
                         f"ints (max threads a block, min blocks an SM, max blocks a cluster), "
                         f"got {launch_bounds!r}")
    if lb[0] > MAX_THREADS:
        raise ValueError(f"launch_bounds: at most {MAX_THREADS} threads a block, got {lb[0]}")
    return tuple(int(v) for v in lb)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def normalize_max_registers(max_registers):
    """``max_registers`` of ``@cuda.jit`` (numba-cuda: the most registers a thread of the
    kernel may use, applied when the PTX is turned into machine code; ptxas's
    ``-maxrregcount``) as an int, or None. Raises ValueError in plain words for anything but an
    integer from 1 to the most a thread can have (the model profile's
    ``max_registers_per_thread``: 255)."""
    if max_registers is None:
        return None
    from kernellab.sim.model import get_profile

    most = get_profile().max_registers_per_thread
    if not (_is_int(max_registers) and 1 <= max_registers <= most):
        raise ValueError(f"max_registers must be an integer from 1 to {most} (registers a "
                         f"thread), got {max_registers!r}")
    return int(max_registers)


def launch(kernel, args):
    """Run one launch of simulator kernel ``kernel`` (its grid/block already configured).

    Returns :class:`LaunchStats`. Raises the errors of :mod:`kernellab.sim.errors`. A race or
    uninitialised read found by the fast access log makes the launch run again from a copy of
    its arguments, logging source lines, so the error can name them. A recording capture
    records the launch (:class:`Relaunch`), not the copies of its numpy arguments.
    """
    recording = any(getattr(cap, "record", False) for cap in _listeners)
    if recording:
        bufs, bad = _launch_buffers(args)
        before = [(b, b.copy(), content_digest(b)) for b in bufs]
    _replay._copies_quiet += 1
    try:
        stats = _launch_once(kernel, args)
    finally:
        _replay._copies_quiet -= 1
    if recording:
        _record(Refuse(f"a launch of {getattr(kernel.fn, '__name__', 'kernel')} with {bad}")
                if bad else Relaunch(kernel, tuple(args), before))
    return stats


def _enter_mode3():
    """Log call contexts with each device-function site (the race re-run)."""
    _ctx_ids.clear()
    del _ctxs[1:]
    _a._site = _a._site_ctx


def _leave_mode3():
    _a._site = _a._site_plain
    _ctx_ids.clear()
    del _ctxs[1:]


def _launch_once(kernel, args):
    grid, block = normalize_kernel_dimensions(kernel.grid_dim, kernel.block_dim)
    grid, block = tuple(grid), tuple(block)
    check_launch_config(grid, block, kernel.dynshared_size or 0)
    bounds = getattr(kernel, "launch_bounds", None)
    if bounds and block[0] * block[1] * block[2] > bounds[0]:
        raise LaunchConfigError(
            f"block {tuple(block)} has {block[0] * block[1] * block[2]} threads but the kernel "
            f"was compiled with launch_bounds of at most {bounds[0]} threads a block: a GPU "
            "refuses the launch")
    fn = kernel.fn
    name = getattr(fn, "__name__", "kernel")
    depot = None
    compiled = None
    if _OPTS["gpu_compile"]:
        from kernellab.sim import ptx
        compiled = ptx.compile_kernel(kernel, args)
        ptx_counts = compiled.counts
        depot = local_depot_bytes(compiled.ptx)
    else:
        ptx_counts = None
    want_trace = any(cap.trace for cap in _listeners)
    mode = 0 if _OPTS["checks"] == "fast" else 2 if want_trace or _OPTS["sites"] else 1
    retr = []
    dev_args = [_to_device(arg, retr) for arg in args]
    arrays = []
    _device_arrays(dev_args, arrays)
    outside = _arrays_outside_arguments(fn) if _listeners else []
    snapshot = [a.copy() for a in arrays] if mode in (0, 1, 2) else None
    prev_mode = _a._mode
    alarm = _arm_alarm(name)
    why_not = None      # why the launch runs on the greenlet executor (None: compiled path)
    try:
        _a._mode = mode
        while True:
            try:
                L = _run_launch(kernel, grid, block, name, dev_args, want_trace, why_not)
                break
            except _compiled.Fallback as fb:
                for a, saved in zip(arrays, snapshot):
                    np.copyto(a, saved)
                why_not = f"the compiled run stopped: {fb}"
                _disarm_alarm(alarm)            # the re-run has its own watchdog_s: the
                alarm = _arm_alarm(name)        # alarm may have fired during the compile
            except _NeedDetail as need:
                if need.mode <= _a._mode:  # pragma: no cover - the re-run is deterministic
                    raise SimError(f"kernel {name}: a hazard was found but could not be "
                                   "located on the re-run") from None
                for a, saved in zip(arrays, snapshot):
                    np.copyto(a, saved)
                _a._mode = need.mode
                if _a._mode == 3:
                    _enter_mode3()
    finally:
        if _a._mode == 3:
            _leave_mode3()
        _a._mode = prev_mode
        _disarm_alarm(alarm)
    for wb in retr:
        wb()
    _local_counters(L, depot)
    stats = LaunchStats(name, grid, block, L.counters, ptx_counts, L.trace)
    stats.checks = _OPTS["checks"]
    stats.arrays = L.arrays
    stats.shuffle_warps = len(L.shuffle_warps)
    stats.sites = L.sites
    stats.shared_sites = L.shared_sites
    stats.block_max = dict(L.block_max)
    stats.outside = outside
    stats.compiled = compiled
    stats.dynamic_shared_bytes = int(kernel.dynshared_size or 0)
    stats.path = L.path
    stats.path_note = L.path_note
    for cap in _listeners:
        cap.launches.append(stats)
    return stats


_DEPOT = re.compile(r"\.local\s+\.align\s+\d+\s+\.b8\s+__local_depot\d+\[(\d+)\]")


def local_depot_bytes(ptx_text: str) -> int:
    """Bytes of local memory a kernel's PTX reserves per thread: the sum of its
    ``__local_depot`` arrays (``.local .align A .b8 __local_depotN[bytes]``: the stack frame
    NVVM gives the local arrays it could not keep in registers; PTX ISA, "State Spaces: Local").
    ptxas may still spill registers there; that is not seen at the PTX level."""
    return sum(int(m) for m in _DEPOT.findall(ptx_text or ""))


def _local_counters(L, depot):
    """``local_frame_bytes``: the local frame of one thread -- the PTX local depot when the
    kernel was compiled for a GPU (arrays NVVM promoted to registers are not in it), else the
    bytes of ``cuda.local`` arrays of the thread that allocates the most (an upper bound);
    ``local_touched_bytes``: the bytes the threads stored to the arrays in that frame, taken
    largest first while they fit in it (registers hold small arrays indexed by constants; a
    frame of 0 -- everything in registers -- has none)."""
    frame = L.local_alloc_max if depot is None else depot
    touched = 0
    for arrays in L.local_threads:
        room = frame
        for nbytes, stored in arrays:
            if nbytes <= room:
                room -= nbytes
                touched += stored
    c = L.counters
    c["local_frame_bytes"] = int(frame)
    c["local_touched_bytes"] = int(touched)


def _to_device(arg, retr):
    """A launch argument as the kernel gets it: numpy arrays copied to the device (and back
    after the launch), also inside tuples, as numba-cuda passes a tuple of arrays on a GPU."""
    if isinstance(arg, np.ndarray) and arg.ndim > 0:
        return InOut(arg).to_device(retr)
    if isinstance(arg, ArgHint):
        return arg.to_device(retr)
    if isinstance(arg, tuple):
        return tuple(_to_device(a, retr) for a in arg)
    return arg


def _device_arrays(dev_args, out):
    for d in dev_args:
        if isinstance(d, FakeCUDAArray):
            out.append(d._ary)
        elif isinstance(d, tuple):
            _device_arrays(d, out)


def _wrap_arg(L, name, d):
    if isinstance(d, FakeCUDAArray):
        return L.global_root(name, d._ary)
    if isinstance(d, tuple):
        return tuple(_wrap_arg(L, f"{name}[{i}]", e) for i, e in enumerate(d))
    return d


def _arrays_outside_arguments(fn):
    """[{"name", "nbytes"}] of the numpy arrays a kernel (or a device function it calls) reads
    from its module's globals, its closure or its parameters' defaults (also inside tuples).
    On a GPU numba freezes them into the kernel as constants when it compiles; here they are
    read live and
    are neither counted nor checked. Names are matched as the code names them (an attribute
    name that is also a global's name is counted too)."""
    found, seen, stack = {}, set(), [fn]
    while stack:
        f = stack.pop()
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen:
            continue
        seen.add(id(f))
        values = _named_values(f)
        defaults = getattr(f, "__defaults__", None) or ()      # def dev(i, S=BUF)
        values += zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount],
                      defaults)
        values += (getattr(f, "__kwdefaults__", None) or {}).items()
        while values:
            n, v = values.pop()
            if isinstance(v, np.ndarray):
                found[n] = found.get(n, 0) + int(v.nbytes)
            elif isinstance(v, FakeCUDAArray):
                found[n] = found.get(n, 0) + int(v._ary.nbytes)
            elif isinstance(v, (tuple, list)):
                values.extend((n, e) for e in v)
            elif isinstance(v, _simkernel.FakeCUDAKernel):
                stack.append(v.fn)
    return [{"name": n, "nbytes": b} for n, b in sorted(found.items())]


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:      # an empty cell
        return None


def _cell_is(cell, obj):
    return _cell_value(cell) is obj


_math_swapped = {}      # id(globals) -> (globals, originals) during a launch


def _cast_of(v):
    """The numpy scalar type a numba scalar type calls when a kernel uses it as a cast
    (``float32(x)``), else None. numba's ``Integer``/``Float.cast_python_value`` is
    ``getattr(np, self.name)(value)`` (numba/core/types/scalars.py), so the result is the same
    bit for bit; numba's per-call dispatch in front of it costs more than the rest of a
    greenlet launch."""
    if type(v) in (_NbFloat, _NbInteger):
        return getattr(np, v.name, None)
    return None


def _swap_math(globs):
    """Give a kernel's (or device function's) module globals the sim tier's ``math``, and
    numba's scalar types as numpy's (:func:`_cast_of`)."""
    if id(globs) not in _math_swapped:
        orig = gpumath.swap_globals(globs)
        for k, v in list(globs.items()):
            cast = _cast_of(v)
            if cast is not None:
                orig[k] = v
                globs[k] = cast
        _math_swapped[id(globs)] = (globs, orig)


def _restore_math():
    for globs, orig in _math_swapped.values():
        gpumath.restore_globals(globs, orig)
    _math_swapped.clear()


def _run_launch(kernel, grid, block, name, dev_args, want_trace, why_not=None):
    fn = kernel.fn
    L = _Launch(kernel, grid, block, kernel.dynshared_size, name)
    L.want_trace = want_trace
    names = _arg_names(fn, len(dev_args))
    fake_args = [_wrap_arg(L, nm, d) for nm, d in zip(names, dev_args)]
    rng = random.Random(_OPTS["shuffle"]) if _OPTS["shuffle"] is not None else None
    if why_not is None:
        p = _compiled.usable(_a._mode, rng, want_trace, grid, block, kernel, dev_args, L)
        if isinstance(p, str):
            why_not = p
        else:
            kargs = [d._ary if isinstance(d, FakeCUDAArray) else d for d in dev_args]
            _compiled.run_blocks(L, p, kargs, grid, block, L.t0 + _OPTS["watchdog_s"])
            L.finish()
            L.path, L.path_note = "compiled", ""
            return L
    L.path, L.path_note = "greenlet", why_not
    module = SimCudaModule(L)
    L.module = module
    prev = (_a._launch, _a._cur, _a._sched)
    _a._launch = L
    # the stock simulator swaps ``cuda`` in the kernel's globals only; a kernel defined inside
    # a function that imported ``cuda`` locally sees it through a closure cell
    import numba.cuda as _cuda_mod
    cells = [c for c in (fn.__closure__ or ()) if _cell_is(c, _cuda_mod)]
    for c in cells:
        c.cell_contents = module
    # ``math`` with CUDA's semantics (kernellab.sim.gpumath): float32 in, float32 out; inf and
    # NaN instead of OverflowError/ValueError; no floating-point warnings (a GPU has none)
    math_cells = [c for c in (fn.__closure__ or ()) if _cell_is(c, _math_mod)]
    for c in math_cells:
        c.cell_contents = gpumath.MODULE
    cast_cells = [(c, c.cell_contents) for c in (fn.__closure__ or ())
                  if _cast_of(_cell_value(c)) is not None]
    for c, v in cast_cells:
        c.cell_contents = _cast_of(v)
    _swap_math(fn.__globals__)
    err_state = np.seterr(all="ignore")
    base_ctx = contextvars.copy_context()   # the threads run in copies: after seterr
    try:
        with _simkernel._push_kernel_context(module):
            with _kapi.swapped_cuda_module(fn, module):
                blin = 0
                for gz in range(grid[2]):
                    for gy in range(grid[1]):
                        for gx in range(grid[0]):
                            _run_block(L, fn, fake_args, (gx, gy, gz), blin, base_ctx, rng)
                            blin += 1
    except BaseException as exc:
        _pool.clear()       # workers may be suspended inside the kernel: start afresh
        if isinstance(exc, StuckKernelError) and "ctaid=" not in str(exc):
            # the wall-clock alarm fired in the driver, between two threads: name the block
            raise StuckKernelError(f"ctaid={_idx_str(L.ctaid)}: {exc}") from None
        raise
    finally:
        np.seterr(**err_state)
        _restore_math()
        for c in math_cells:
            c.cell_contents = _math_mod
        for c, v in cast_cells:
            c.cell_contents = v
        for c in cells:
            c.cell_contents = _cuda_mod
        _a._launch, _a._cur, _a._sched = prev
    L.finish()
    return L


class LaunchStats:
    """What one sim-tier launch did: ``name``, ``grid``, ``block`` (3-tuples), ``path``
    ("compiled": :mod:`kernellab.sim.compiled`; "greenlet": the greenlet executor) and
    ``path_note`` (why not compiled; "" when compiled), ``counters``
    (dict of ints, keys :data:`COUNTER_KEYS`), ``ptx_counts`` (static PTX instruction counts,
    or None when the GPU-compile check is off), ``trace`` (first block's accesses, a numpy
    array of :data:`TRACE_DTYPE`, when captured with ``trace=True``), ``shuffle_warps`` (warps
    that executed at least one shuffle), ``arrays`` (one dict per global allocation among the
    arguments: ``name``, ``shape``, ``dtype``, ``nbytes``, ``load_elements``,
    ``store_elements`` (atomics included), ``atomics``, ``elements_stored`` (distinct
    elements stored to, atomics included), ``dram_read_bytes``, ``dram_write_bytes``
    (atomics: writes), ``dram_atomic_bytes`` (sectors atomics touched and no plain load
    read: a GPU reads them too), ``digest_start`` and ``digest_end``: its
    :func:`~kernellab.sim.content_digest` when the launch started and ended, while captured,
    else None) and ``outside`` (``[{"name", "nbytes"}]``: numpy arrays the kernel reads from
    globals or its closure, uncounted, see :func:`_arrays_outside_arguments`) and ``sites``
    (with the ``sites`` option or a trace, else None: one dict per global access site --
    source instruction -- and array: ``where`` ("line 12", "line 3 of dev"), ``line``,
    ``array``, ``kind`` (load/store; atomics: store), ``requests``, ``bytes_moved`` (32 per
    sector), ``bytes_asked`` and ``bytes_used``: the bytes asked, capped per request at the
    bytes its sectors moved), ``shared_sites`` (likewise per shared access site and array:
    ``where``, ``line``, ``array``, ``kind``, ``requests``, ``wavefronts``,
    ``ideal_wavefronts`` -- what the same requests need without bank conflicts,
    ceil(distinct 4-byte words / 32) for each phase of each (8-byte elements: two half-warp
    phases, 16-byte: four quarter-warp phases) -- and ``worst_wavefronts``, the most one request
    took; wavefronts / ideal_wavefronts is the site's bank-conflict degree) and
    ``block_max`` (the busiest block's work, each a maximum over
    the blocks: ``global_sectors``, ``shared_wavefronts``, ``barriers``; zeros with
    ``checks="fast"``, which counts no traffic, except barriers)), ``compiled`` (the
    :class:`~kernellab.sim.ptx.PTXResult` of the GPU compile, None when it is off),
    ``dynamic_shared_bytes`` (the launch's dynamic shared memory), :attr:`resources` and
    :attr:`resources_note` (registers, local frame, spills and static shared memory from
    ptxas; asked for on first use, so launches that never look pay nothing); ``print(stats)``
    shows the counters and those figures (:meth:`__str__`), ``repr`` the counters only."""

    path = "greenlet"
    path_note = ""

    def __init__(self, name, grid, block, counters, ptx_counts, trace):
        self.name = name
        self.grid = grid
        self.block = block
        self.counters = counters
        self.ptx_counts = ptx_counts
        self.trace = trace
        self.arrays = []
        self.shuffle_warps = 0
        self.outside = []
        self.sites = None
        self.shared_sites = None
        self.block_max = None
        self.compiled = None
        self.dynamic_shared_bytes = 0
        self._resources = {}    # cc -> (KernelResources | None, note)

    def resources_for(self, cc) -> tuple:
        """``(KernelResources | None, note)`` of this launch's kernel compiled by ptxas for
        compute capability ``cc`` (the PTX of the launch: sm_80). Never raises for a missing
        or failing ptxas: the note says why there are no figures."""
        cc = tuple(int(x) for x in cc)
        if cc not in self._resources:
            if self.compiled is None:
                self._resources[cc] = (None, "registers and spills are unknown: the GPU "
                                       "compile was off for this launch (gpu_compile=False or "
                                       "KERNELLAB_SIM_GPU_COMPILE=0), so ptxas had no PTX")
            else:
                from kernellab.sim import ptx
                try:
                    self._resources[cc] = ptx.kernel_resources(self.compiled, cc)
                except Exception as exc:  # a report, never a failed launch
                    self._resources[cc] = (None, f"registers and spills are unknown: {exc}")
        return self._resources[cc]

    @property
    def resources(self):
        """:class:`~kernellab.sim.resources.KernelResources` of the kernel (ptxas for the
        compute capability its PTX was compiled for), or None: then :attr:`resources_note`
        says why."""
        cc = self.compiled.cc if self.compiled is not None else (8, 0)
        return self.resources_for(cc)[0]

    @property
    def resources_note(self) -> str:
        """Where :attr:`resources` come from, or why there are none, in words."""
        cc = self.compiled.cc if self.compiled is not None else (8, 0)
        return self.resources_for(cc)[1]

    def __repr__(self):
        c = self.counters
        return (f"LaunchStats({self.name}, grid={self.grid}, block={self.block}, "
                f"global sectors={c['global_load_sectors'] + c['global_store_sectors']}, "
                f"shared wavefronts={c['shared_load_wavefronts'] + c['shared_store_wavefronts']})")

    def resources_line(self, cc=None) -> str:
        """One line: registers a thread, local frame, spill stores/loads and occupancy (blocks
        an SM, the limiter) of this launch on compute capability ``cc`` (default: the one
        its PTX was compiled for), or why they are unknown. Runs ptxas (cached) when asked."""
        from kernellab.sim.resources import occupancy

        if cc is None:
            cc = self.compiled.cc if self.compiled is not None else (8, 0)
        res, note = self.resources_for(cc)
        if res is None:
            return note
        bx, by, bz = self.block
        occ = occupancy(res, bx * by * bz, self.dynamic_shared_bytes, cc)
        return (f"registers/thread {res.registers}, local frame {res.stack_frame_bytes} B, "
                f"spill st/ld {res.spill_store_bytes}/{res.spill_load_bytes} B, occupancy "
                f"{100 * occ.fraction:.1f} % ({occ.blocks_per_sm} blocks/SM, limited by "
                f"{occ.limiter}; cc {occ.cc[0]}.{occ.cc[1]})")

    def __str__(self):
        """What ``print(stats)`` shows: the counters' line (:meth:`__repr__`, which runs
        nothing) and :meth:`resources_line` (ptxas's figures, computed when printed)."""
        return f"{self!r}\n  {self.resources_line()}"


# ----------------------------------------------------------------------------------------
# Installation into numba-cuda's simulator

_stock_call = None


def install():
    """Route simulator launches through :func:`launch` (idempotent)."""
    global _stock_call
    if _stock_call is not None:
        return
    _stock_call = _simkernel.FakeCUDAKernel.__call__

    @functools.wraps(_stock_call)
    def __call__(self, *args):
        if self._device and _a._launch is not None:
            _swap_math(self.fn.__globals__)   # a device function from another module
        if (self._device or _simkernel._kernel_context is not None
                or _OPTS["executor"] == "stock" or self.extensions or _has_records(args)):
            if not self._device and _simkernel._kernel_context is None:
                for cap in _listeners:      # a launch the captures cannot see: say so
                    cap.unchecked.append(getattr(self.fn, "__name__", "kernel"))
            return _stock_call(self, *args)
        launch(self, args)

    _simkernel.FakeCUDAKernel.__call__ = __call__
    import numba.cuda as _cuda
    if not getattr(_cuda.jit, "_kernellab", False):
        _cuda.jit = _jit_with_launch_bounds(_cuda.jit)
    # warp intrinsics reachable as attributes of the simulator's top-level ``cuda`` module
    # too (host code that checks hasattr), raising a clear error outside a kernel
    import numba.cuda as _cuda
    _install_copies(_cuda)
    for nm in ("syncwarp", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
               "ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync", "match_all_sync",
               "activemask", "lanemask_lt") + _cuda_ext_names():
        if not hasattr(_cuda, nm):
            setattr(_cuda, nm, _outside_kernel(nm))


def _cuda_ext_names():
    from kernellab.cuda_ext import NAMES
    return NAMES


def _jit_with_launch_bounds(stock_jit):
    """numba-cuda's simulator ``jit`` with the GPU's ``launch_bounds`` and ``max_registers``
    arguments, which the stock simulator lacks: the kernel keeps them
    (``kernel.launch_bounds``, ``kernel.max_registers``), the GPU compile passes
    ``launch_bounds`` to ``compile_ptx`` and ``max_registers`` to ptxas (``-maxrregcount``),
    so ptxas's registers follow them, and a launch of more threads a block than
    ``launch_bounds`` allows fails as on a GPU."""

    @functools.wraps(stock_jit)
    def jit(func_or_sig=None, *args, launch_bounds=None, max_registers=None, **kwargs):
        bounds = normalize_launch_bounds(launch_bounds)
        maxreg = normalize_max_registers(max_registers)
        out = stock_jit(func_or_sig, *args, **kwargs)
        if bounds is None and maxreg is None:
            return out

        def keep(kernel):
            if bounds is not None:
                kernel.launch_bounds = bounds
            if maxreg is not None:
                kernel.max_registers = maxreg
            return kernel
        if isinstance(out, _simkernel.FakeCUDAKernel):
            return keep(out)

        def decorate(fn):
            return keep(out(fn))
        return decorate

    jit._kernellab = True
    return jit


def _has_records(args):
    """Structured (record) arrays and scalars: the stock simulator's ``a[i].x`` attribute
    access is not reproduced by :class:`SimArray`, so such launches run on the stock executor
    (without the sim tier's checks and counters)."""
    for a in args:
        if isinstance(a, np.void):
            return True
        dt = getattr(a, "dtype", None)
        if dt is not None and getattr(dt, "names", None):
            return True
    return False


def _outside_kernel(nm):
    def f(*a, **k):
        raise RuntimeError(f"cuda.{nm} can only be called inside a kernel")
    f.__name__ = nm
    return f
