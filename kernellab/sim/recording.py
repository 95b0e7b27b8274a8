"""What a recording capture keeps of a launch or a host-device copy, and its replay.

``capture(record=True)`` (:mod:`kernellab.sim`) collects, in order, each launch
(:class:`Relaunch`: kernel, configuration, arguments) and each host-device copy
(:class:`Recopy`, :class:`Resetitem`; installed into numba-cuda's simulator by
:func:`_install_copies`); :func:`kernellab.sim.recording` calls them again, so a grader can refill
the inputs and see the output follow. What cannot be repeated faithfully is a :class:`Refuse`
(replaying it raises :class:`~kernellab.sim.errors.SimError`). Only exact ``np.ndarray`` and
``FakeCUDAArray`` buffers are replayed (:func:`_plain_buffer`): a subclass could run code.
"""

from __future__ import annotations

import functools
import types as _pytypes

import numpy as np

from numba.cuda.simulator import kernel as _simkernel
from numba.cuda.simulator.args import ArgHint
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from kernellab.sim import content_digest
from kernellab.sim.arrays import _listeners
from kernellab.sim.errors import SimError


def _plain_buffer(obj):
    """The numpy buffer of an exact ``np.ndarray`` or ``FakeCUDAArray`` (not a subclass: a
    replay must not run code a student attached to an array type), else None."""
    if type(obj) is np.ndarray:
        return obj
    if type(obj) is FakeCUDAArray and type(obj._ary) is np.ndarray:
        return obj._ary
    return None


def _launch_buffers(args):
    """(buffers, problem) of a launch's arguments: the numpy buffers of its arrays (in tuples
    and cuda.In/Out/InOut hints too) and None, or what cannot be replayed, in words."""
    out, todo = [], list(args)
    while todo:
        a = todo.pop()
        if isinstance(a, tuple):
            todo.extend(a)
        elif isinstance(a, ArgHint):
            todo.append(a.value)
        elif isinstance(a, (bool, int, float, complex, np.generic)) or a is None:
            continue
        else:
            b = _plain_buffer(a)
            if b is None:
                return out, (f"an argument of type {type(a).__name__}: pass numpy arrays, "
                             "numba device arrays and numbers")
            out.append(b)
    return out, None


#: > 0 while a launch copies its numpy arguments: those copies are part of the launch
_copies_quiet = 0


class Relaunch:
    """A recorded launch (:func:`kernellab.sim.recording`): calling it launches ``kernel`` again
    with ``args`` and the grid, block and dynamic shared memory it had (numba's simulator
    configures a kernel object in place, so a later ``kernel[other, config]`` must not change
    what is replayed). Raises :class:`SimError` if a name the kernel or its device functions
    read from their globals or closures now refers to another object than when the launch
    was recorded: the simulator resolves those names at every run, so rebinding, say, a device
    function to plain Python between the call and its replay would run host code inside the
    replayed kernel."""

    def __init__(self, kernel, args, before=()):
        self.kernel, self.args = kernel, args
        self.config = (kernel.grid_dim, kernel.block_dim, 0, kernel.dynshared_size or 0)
        self.refs = _referenced_objects(kernel.fn)
        # arguments the host (not a recorded launch or copy) gave their content: the replay
        # restores that content, unless the argument is one of the refilled inputs -- a flag
        # the host flips after the call must not change what the replayed kernel does
        left = _left_by_recorded()
        self.restore = [(b, snap) for b, snap, dig in before if left.get(id(b)) != dig]
        for b, _, _ in before:
            _mark_left(b)

    def __call__(self, fresh=()):
        for b, snap in self.restore:
            if not any(np.may_share_memory(b, f) for f in fresh):
                np.copyto(b, snap)
        now = _referenced_objects(self.kernel.fn)
        changed = sorted(n for n in set(self.refs) | set(now) if self.refs.get(n) != now.get(n))
        if changed:
            raise SimError(f"kernel {getattr(self.kernel.fn, '__name__', 'kernel')}: "
                           f"{', '.join(changed)} now refer(s) to other objects than when it "
                           "was launched: a kernel's globals must not be rebound between "
                           "launches")
        self.kernel[self.config](*self.args)

    def arrays(self) -> list:
        """The numpy buffers of the arguments' arrays (inside tuples too), in order."""
        return _launch_buffers(self.args)[0][::-1]


class Refuse:
    """A recorded operation that cannot be replayed faithfully (``what``): replaying raises
    :class:`SimError` saying so."""

    def __init__(self, what):
        self.what = what

    def __call__(self, fresh=()):
        raise SimError(f"{self.what} cannot be run again")

    def arrays(self) -> list:
        return []


def _left_by_recorded() -> dict:
    """{id(buffer): digest} of what recorded launches and copies last left in each buffer (the
    first recording capture's)."""
    for cap in _listeners:
        if getattr(cap, "record", False):
            return cap.__dict__.setdefault("left", {})
    return {}


def _mark_left(buf) -> None:
    left = _left_by_recorded()
    left[id(buf)] = content_digest(buf)


def _named_values(f) -> list:
    """[(name, object)] that function ``f`` reads from its globals (by the names its code,
    nested code included, uses) and from its closure."""
    code = f.__code__
    names, codes = set(), [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, _pytypes.CodeType))
    g = getattr(f, "__globals__", {})
    values = [(n, g[n]) for n in names if n in g]
    for n, cell in zip(code.co_freevars, f.__closure__ or ()):
        try:
            values.append((n, cell.cell_contents))
        except ValueError:      # an empty cell
            pass
    return values


def _referenced_objects(fn) -> dict:
    """{qualified name: id(object)} of what ``fn`` (a kernel's Python function) and the device
    functions it reaches read from their globals and closures, by the names their code uses."""
    out, seen, stack = {}, set(), [fn]
    while stack:
        f = stack.pop()
        if getattr(f, "__code__", None) is None or id(f) in seen:
            continue
        seen.add(id(f))
        for n, v in _named_values(f):
            out[f"{f.__name__}.{n}"] = id(v)
            if isinstance(v, _simkernel.FakeCUDAKernel):
                stack.append(v.fn)
    return out


class Resetitem:
    """A recorded ``device_array[key] = value`` (a host-to-device copy, or a fill): calling it
    assigns what ``value`` holds now again."""

    def __init__(self, dest, key, value):
        self.dest, self.key, self.source = dest, key, value

    def __call__(self, fresh=()):
        self.dest[self.key] = self.source

    def arrays(self) -> list:
        return [self.dest]


class Recopy:
    """A recorded host-device copy: calling it copies what ``source`` holds now into ``dest``
    (both numpy buffers: a host array, or a device array's); ``to_host``: a ``copy_to_host``."""

    def __init__(self, dest, source, to_host=False):
        self.dest, self.source, self.to_host = dest, source, to_host

    def __call__(self, fresh=()):
        np.copyto(self.dest, self.source.reshape(self.dest.shape))

    def arrays(self) -> list:
        return [self.dest]


def _recopy(dest, source, to_host=False):
    """A :class:`Recopy` of two arrays, or a :class:`Refuse` when either is not an exact numpy
    or device array."""
    d, s_ = _plain_buffer(dest), _plain_buffer(source)
    if d is None or s_ is None:
        bad = type(dest if d is None else source).__name__
        return Refuse(f"a copy involving an array of type {bad}")
    return Recopy(d, s_, to_host)


def _resetitem(dest, key, value):
    """A :class:`Resetitem`, or a :class:`Refuse` for a value that is neither a number nor an
    exact numpy or device array."""
    d = _plain_buffer(dest)
    if isinstance(value, (bool, int, float, complex, np.generic)):
        v = value
    else:
        v = _plain_buffer(value)
    if d is None or v is None:
        return Refuse(f"an assignment into a device array of a {type(value).__name__}")
    return Resetitem(d, key, v)


def _recording() -> bool:
    return not _copies_quiet and any(getattr(cap, "record", False) for cap in _listeners)


def _record(op) -> None:
    """Append ``op`` (a callable that repeats a launch or a host-device copy) to every
    capture that records (``capture(record=True)``; :func:`kernellab.sim.recording`)."""
    if _copies_quiet and not isinstance(op, (Relaunch, Refuse)):
        return
    recording = [cap for cap in _listeners if getattr(cap, "record", False)]
    for cap in recording:
        cap.recorded.append(op)
    if recording and isinstance(op, (Recopy, Resetitem)):
        _mark_left(op.dest)


def _install_copies(cuda_module) -> None:
    """Record host-device copies for :func:`kernellab.sim.recording`: ``cuda.to_device``,
    ``DeviceNDArray.copy_to_device`` and ``copy_to_host`` repeat, when replayed, from what
    their source holds at that time, into the same destination."""
    from numba.cuda import simulator as _simpkg
    from numba.cuda.simulator.cudadrv import devicearray as _da

    if getattr(_da.to_device, "_kernellab", False):
        return
    stock_to_device = _da.to_device
    stock_to_host = FakeCUDAArray.copy_to_host
    stock_to_dev = FakeCUDAArray.copy_to_device
    stock_setitem = FakeCUDAArray.__setitem__

    @functools.wraps(stock_to_device)
    def to_device(ary, stream=0, copy=True, to=None):
        out = stock_to_device(ary, stream, copy, to)
        if to is None and isinstance(out, FakeCUDAArray) and _recording():
            _record(_recopy(out, ary))
        return out

    @functools.wraps(stock_to_host)
    def copy_to_host(self, ary=None, stream=0):
        ret = stock_to_host(self, ary, stream)
        if _recording():
            _record(_recopy(ret, self, to_host=True))
        return ret

    @functools.wraps(stock_to_dev)
    def copy_to_device(self, ary, stream=0):
        stock_to_dev(self, ary, stream)
        if _recording():
            _record(_recopy(self, ary))

    @functools.wraps(stock_setitem)
    def setitem(self, idx, val):
        stock_setitem(self, idx, val)
        if _recording():
            _record(_resetitem(self, idx, val))

    to_device._kernellab = True
    for mod in (_da, _simpkg, cuda_module):
        if getattr(mod, "to_device", None) is stock_to_device:
            mod.to_device = to_device
    FakeCUDAArray.copy_to_host = copy_to_host
    FakeCUDAArray.copy_to_device = copy_to_device
    FakeCUDAArray.__setitem__ = setitem
