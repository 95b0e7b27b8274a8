"""GPU-compile check for the ``sim`` tier: every simulated kernel is also compiled to PTX.

Why
---
numba-cuda's simulator runs a kernel as plain Python, so it accepts code that no GPU compiler
would (``str()`` of an integer, calls to plain Python helpers, ``np.zeros`` inside a kernel...).
Every kernel the ``sim`` tier runs is therefore also compiled for a real GPU with numba-cuda's
``compile_ptx`` (numba-cuda documentation, "Compilation": ``numba.cuda.compile_ptx(pyfunc, sig,
..., cc=None)`` compiles a Python function to PTX for a signature and a compute capability without
a GPU, given the NVVM library; here it comes from PyPI with ``numba-cuda[cu13]``). A kernel the
compiler rejects raises :class:`~kernellab.sim.errors.GPUCompileError` carrying the compiler's own
message, trimmed to its useful part (the summary line, the offending call's signature and the
kernel source line).

How
---
In a ``sim``-tier process ``numba.cuda`` *is* the simulator (``NUMBA_ENABLE_CUDASIM=1`` is read
once, at import; the simulator's ``compile_ptx`` is ``None``), so compilation happens in a helper
subprocess: started lazily, one per parent process, kept alive between kernels (measured on the
course machine: start-up 0.4-0.8 s, the first compile in it up to about 1 s, later ones 0.03-0.4 s),
closed at exit (:func:`close`, idempotent; a helper that failed to start is not retried until
:func:`close`). It is ``python -c``
with ``NUMBA_ENABLE_CUDASIM`` removed from its environment and imports ``numba.cuda`` in real mode
before anything else; it never imports ``kernellab``. Requests and replies are length-prefixed
pickles over its stdin/stdout. If the helper dies during a request it is restarted once (with a
:class:`RuntimeWarning` carrying the tail of its stderr); a second death raises
:class:`PTXToolError`.

The kernel's Python function travels *by value*, pickled with numba-cuda's vendored cloudpickle
(``numba.cuda.cloudpickle``), also when it lives in an importable module (a course kernel module, a
student's submission loaded by the grader): in the helper those modules are never imported
(there, their ``@cuda.jit`` objects would be real dispatchers, and a submission is not on the
path). What the function refers to is pickled as follows:

* modules (``cuda``, ``math``, ``numpy``...) by name, so ``cuda`` is the real ``numba.cuda`` in
  the helper; the simulator's ``FakeCUDAModule`` (swapped into a kernel's globals during a
  simulated launch) also pickles as ``numba.cuda``, as does any object whose class has a
  ``__kernellab_gpu_module__`` attribute naming a module;
* numba types (``float32``...), numpy scalars and arrays, plain constants: by value;
* ``@cuda.jit`` objects of the simulator (``FakeCUDAKernel``: device functions, other kernels): as
  "apply the real ``cuda.jit(device=..., fastmath=...)`` to this function" (function by value);
* other plain functions by value unless they belong to numba, numpy or the standard library
  (those by reference).

The signature is built in the parent from the launch arguments (:func:`signature_of`): numpy
arrays (or the simulator's ``FakeCUDAArray``) as ``numba.types.Array(dtype, ndim, layout)`` with
layout ``C``, ``F`` or ``A`` as a device array of that shape would have; scalars via
``numba.typeof`` (a Python ``int`` is ``int64``, a ``float`` ``float64``, ``np.float32(1)``
``float32``), as numba-cuda types them at a launch.

Caches: in memory, keyed by a sha256 of the pickled function (code, constants, referenced globals
and device functions, all by value), the signature, the compute capability and the options; on
disk (``<cache base>/ptx/<key>.json``, the cache base of :func:`kernellab.codegen.cache_dir`:
``$KERNELLAB_CACHE_DIR`` or ``.kernellab-cache``), keyed by the same material plus the numba,
numba-cuda and NVVM wheel versions, so repeated test runs and gradings do not recompile; a
cache hit does not start the helper. ``KERNELLAB_PTX_DISK_CACHE=0`` switches the disk cache off.
Rejections are cached in memory only.

Static counts
-------------
:func:`static_counts` counts the PTX instructions of each class *in the code* (one per instruction
in the text, loops not unrolled, branches not taken into account): they say what kind of memory
operations the compiler emitted (shared vs global, vectorised or not, barriers, shuffles), not how
many execute; the dynamic counts come from the simulator (:mod:`kernellab.sim`). Instruction names
follow the PTX ISA (NVIDIA, *Parallel Thread Execution ISA*, §9.7 "Instructions": ``ld``, ``st``
with their state spaces ``.global``/``.shared``/``.local``/``.param``/``.const`` and the generic
space when none is named, ``bar``/``barrier``, ``shfl.sync``, ``vote.sync``, ``atom``, ``red``,
``fma``...). numba's code addresses array data through *generic* pointers; NVVM rewrites an
access as ``ld.global``/``st.global`` where it can prove the pointer is global (measured, NVVM of
CUDA 13.5, sm_80: the accesses to a kernel's own array arguments mostly are) and leaves a
generic ``ld.f32``/``st.f32`` elsewhere (counted as ``ld.generic``/``st.generic``), so count
both when asking "how many global-memory instructions".

Sources: numba-cuda documentation, "Compilation" (``compile_ptx``) and "Simulator"; NVIDIA PTX ISA
(instruction set, state spaces); cloudpipe/cloudpickle README ("pickling by value").
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib
import io
import json
import linecache
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types as _pytypes
import warnings
from pathlib import Path

from kernellab.sim.errors import GPUCompileError

#: Compute capability compiled for when the caller does not say: 8.0 (A100, sm_80).
DEFAULT_CC = (8, 0)

#: Seconds a single compile (or the helper's start) may take before the helper is killed.
COMPILE_TIMEOUT_S = 180.0

#: Longest compiler message kept in a :class:`GPUCompileError` (the full one is an attribute).
MAX_MESSAGE_CHARS = 2500

__all__ = [
    "DEFAULT_CC", "PTXResult", "PTXToolError", "compile_kernel", "signature_of", "static_counts",
    "ptx_available", "close", "clear_cache", "trim_compiler_message", "COUNT_KEYS",
]


class PTXToolError(RuntimeError):
    """The GPU-compile check itself could not run (helper failed to start or died twice, the
    compiler libraries are missing, the kernel's globals cannot be pickled). Not a verdict on the
    kernel: callers may skip the check with this message."""


@dataclasses.dataclass(frozen=True)
class PTXResult:
    """One kernel compiled to PTX.

    ``kernel``: the Python function's ``__name__``; ``cc``: ``(major, minor)``; ``signature``:
    the numba argument types as text (``"(array(float32, 2d, C), int64)"``); ``ptx``: the PTX
    module text; ``counts``: :func:`static_counts` of it; ``seconds``: how long the compiler took
    when this PTX was produced (kept for cache hits); ``cache``: ``None`` when compiled by this
    call, ``"memory"`` or ``"disk"`` when it came from a cache.
    """

    kernel: str
    cc: tuple
    signature: str
    ptx: str = dataclasses.field(repr=False)
    counts: dict = dataclasses.field(repr=False)
    seconds: float
    cache: str | None = None


# --------------------------------------------------------------------------------------------
# Static instruction counts
# --------------------------------------------------------------------------------------------

#: Keys of :func:`static_counts` (always all present, zero when absent).
COUNT_KEYS = (
    "instructions",
    "ld.global", "st.global", "ld.global.nc",
    "ld.shared", "st.shared",
    "ld.local", "st.local",
    "ld.param", "st.param", "ld.const",
    "ld.generic", "st.generic",
    "cp.async",
    "bar.sync", "bar.warp.sync",
    "shfl.sync", "vote.sync", "match.sync", "activemask",
    "atom", "red",
    "fma.f16", "fma.f32", "fma.f64",
    "mul.f32", "mul.f64", "add.f32", "add.f64", "sub.f32", "sub.f64",
)

_SPACES = ("global", "shared", "local", "param", "const")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_LABEL = re.compile(r"^[$%\w.]+:(?!:)\s*")
_PREDICATE = re.compile(r"^@!?%\w+\s+")


def _instructions(ptx: str):
    """Yield the opcode (``ld.global.nc.f32``...) of each instruction statement in ``ptx``."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub(" ", ptx))
    for chunk in text.split(";"):
        lines = []
        for line in chunk.splitlines():
            line = line.strip()
            while line[:1] in ("{", "}"):
                line = line[1:].lstrip()
            while True:  # labels ("$L__BB0_2:") before a statement
                m = _LABEL.match(line)
                if not m or line.startswith("."):
                    break
                line = line[m.end():]
            if line:
                lines.append(line)
        if not lines:
            continue
        stmt = " ".join(lines)
        if stmt.startswith("."):  # directive: .reg, .param, .entry header, .version...
            continue
        stmt = _PREDICATE.sub("", stmt)
        opcode = stmt.split(None, 1)[0]
        if opcode and (opcode[0].isalpha() or opcode[0] == "_"):
            yield opcode


def static_counts(ptx: str) -> dict:
    """Static counts of the instructions in PTX text, by class: ``dict[str, int]``, keys
    :data:`COUNT_KEYS`.

    *Static*: each instruction written in the code counts once, however often it runs (a load in
    a loop counts 1). Comments, directives (``.reg``, ``.param``, ``.entry``...) and labels are
    not instructions. Classes (PTX ISA, §9.7):

    * ``ld.<space>`` / ``st.<space>`` for the state spaces ``global``, ``shared``, ``local``,
      ``param`` (``ld`` only: ``const``); ``ld.generic`` / ``st.generic`` when the instruction
      names no space (numba's usual array access); ``ldu`` counts as ``ld``; ``ld.global.nc``
      (read-only data cache) is also counted on its own; vector forms (``.v2``/``.v4``) count 1;
    * ``cp.async`` (asynchronous global-to-shared copy);
    * ``bar.sync``: block barriers ``bar.sync``, ``bar.red`` (``syncthreads_count/and/or``),
      ``barrier.sync``, ``barrier.red``; ``bar.warp.sync`` (``syncwarp``) separately;
    * ``shfl.sync``, ``vote.sync`` (``ballot/all/any_sync``), ``match.sync``, ``activemask``;
    * ``atom``, ``red`` (all spaces and operations);
    * floating point: ``fma.f16|f32|f64`` (``fma.rn.f32``...), ``mul``, ``add``, ``sub`` for
      ``f32``/``f64`` (integer arithmetic is not counted);
    * ``instructions``: all instructions.
    """
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for opcode in _instructions(ptx):
        counts["instructions"] += 1
        parts = opcode.split(".")
        base, mods = parts[0], parts[1:]
        if base in ("ld", "ldu", "st"):
            space = "generic"
            for m in mods:
                m = m.split("::", 1)[0]
                if m in _SPACES:
                    space = m
                    break
            key = f"{'st' if base == 'st' else 'ld'}.{space}"
            if key in counts:
                counts[key] += 1
            if key == "ld.global" and "nc" in mods:
                counts["ld.global.nc"] += 1
        elif base in ("bar", "barrier"):
            if mods[:1] == ["warp"]:
                counts["bar.warp.sync"] += 1
            elif not mods or mods[0] in ("sync", "red") or mods[0].isdigit():
                counts["bar.sync"] += 1
        elif base == "cp" and mods[:1] == ["async"]:
            counts["cp.async"] += 1
        elif base in ("shfl", "vote", "match"):
            counts[f"{base}.sync"] += 1
        elif base == "activemask":
            counts["activemask"] += 1
        elif base in ("atom", "red"):
            counts[base] += 1
        elif base in ("fma", "mul", "add", "sub") and mods:
            ftype = mods[-1]
            key = f"{base}.{ftype}"
            if ftype in ("f16", "f32", "f64") and key in counts:
                counts[key] += 1
    return counts


# --------------------------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------------------------

def _array_type(ary):
    import numba

    if ary.flags.c_contiguous:
        layout = "C"
    elif ary.flags.f_contiguous:
        layout = "F"
    else:
        layout = "A"
    return numba.types.Array(numba.from_dtype(ary.dtype), ary.ndim, layout)


def _unwrap_array(arg):
    """The ndarray behind a simulator device array (FakeCUDAArray ``._ary``,
    FakeWithinKernelCUDAArray ``._item``), or ``None``."""
    import numpy as np

    for _ in range(4):
        if isinstance(arg, np.ndarray):
            return arg
        inner = getattr(arg, "_ary", None)
        if inner is None:
            inner = getattr(arg, "_item", None)
        if inner is None:
            return None
        arg = inner
    return None


def signature_of(args) -> tuple:
    """numba argument types of a launch's arguments, as numba-cuda would type them on a GPU.

    ``args``: a sequence of numpy arrays (any ndim > 0), simulator device arrays
    (``FakeCUDAArray``: its ``._ary``), numpy or Python scalars, tuples of scalars, or numba types
    (used as given). Arrays become ``Array(dtype, ndim, layout)`` (mutable, aligned; ``C`` if
    C-contiguous, else ``F`` if Fortran-contiguous, else ``A``); everything else
    ``numba.typeof(value)``. Raises :class:`TypeError` naming the argument numba cannot type.
    """
    import numba

    sig = []
    for i, arg in enumerate(args):
        if isinstance(arg, numba.types.Type):
            sig.append(arg)
            continue
        ary = _unwrap_array(arg)
        if ary is not None and ary.ndim > 0:
            sig.append(_array_type(ary))
            continue
        try:
            sig.append(numba.typeof(arg if ary is None else ary[()]))
        except Exception as exc:  # numba raises ValueError for untypeable values
            raise TypeError(f"argument {i} ({type(arg).__name__}) has no numba type: {exc}") \
                from None
    return tuple(sig)


# --------------------------------------------------------------------------------------------
# Pickling the kernel for the helper
# --------------------------------------------------------------------------------------------

#: Top-level packages whose functions are pickled by reference (numba knows them or rejects them).
_BY_REFERENCE_ROOTS = frozenset({"numba", "numba_cuda", "numpy", "llvmlite", "cuda"}) \
    | frozenset(getattr(sys, "stdlib_module_names", ()))


def _rebuild_jit(fn, device, fastmath):
    """Run in the helper (pickled by value): the real ``cuda.jit`` applied to ``fn``."""
    from numba import cuda

    if fastmath:
        return cuda.jit(device=device, fastmath=fastmath)(fn)
    return cuda.jit(device=device)(fn)


def _fake_kernel_class():
    mod = sys.modules.get("numba.cuda.simulator.kernel")
    return getattr(mod, "FakeCUDAKernel", None) if mod is not None else None


def _real_dispatcher_class():
    """numba-cuda's real ``CUDADispatcher`` when loaded (``gpu`` tier), else ``None``."""
    mod = sys.modules.get("numba.cuda.dispatcher")
    return getattr(mod, "CUDADispatcher", None) if mod is not None else None


def _fake_module_class():
    mod = sys.modules.get("numba.cuda.simulator.kernelapi")
    return getattr(mod, "FakeCUDAModule", None) if mod is not None else None


_pickler_class: list = []


def _kernel_pickler_class():
    if _pickler_class:
        return _pickler_class[0]
    from numba.cuda import cloudpickle

    fake_kernel = _fake_kernel_class()
    fake_module = _fake_module_class()
    real_dispatcher = _real_dispatcher_class()

    class KernelPickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            t = type(obj)
            if t is _pytypes.FunctionType:
                if obj is _rebuild_jit or _pickle_by_value(obj):
                    return self._dynamic_function_reduce(obj)
                return super().reducer_override(obj)
            if fake_kernel is not None and isinstance(obj, fake_kernel):
                return (_rebuild_jit,
                        (obj.fn, bool(obj._device), getattr(obj, "_fastmath", False) or False))
            if real_dispatcher is not None and isinstance(obj, real_dispatcher):
                opts = obj.targetoptions
                return (_rebuild_jit, (obj.py_func, bool(opts.get("device")),
                                       opts.get("fastmath") or False))
            if fake_module is not None and isinstance(obj, fake_module):
                return (importlib.import_module, ("numba.cuda",))
            target = getattr(t, "__kernellab_gpu_module__", None)
            if isinstance(target, str):
                return (importlib.import_module, (target,))
            return super().reducer_override(obj)

    if (fake_kernel is not None and fake_module is not None) or real_dispatcher is not None:
        _pickler_class.append(KernelPickler)  # both simulator classes known: reuse it
    return KernelPickler


def _pickle_by_value(func) -> bool:
    module = getattr(func, "__module__", None) or "__main__"
    return module.split(".", 1)[0] not in _BY_REFERENCE_ROOTS


def _dumps_function(fn) -> bytes:
    buf = io.BytesIO()
    try:
        _kernel_pickler_class()(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(fn)
    except Exception as exc:
        raise PTXToolError(
            f"cannot send kernel {getattr(fn, '__name__', fn)!r} to the GPU compiler: one of the "
            f"globals it uses cannot be pickled ({type(exc).__name__}: {exc})") from exc
    return buf.getvalue()


def _python_function(kernel):
    """(Python function, device flag, fastmath) of a simulator kernel or a plain function."""
    fake_kernel = _fake_kernel_class()
    if fake_kernel is not None and isinstance(kernel, fake_kernel):
        return kernel.fn, bool(kernel._device), getattr(kernel, "_fastmath", False) or False
    if isinstance(kernel, _pytypes.FunctionType):
        return kernel, False, False
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)
    if isinstance(fn, _pytypes.FunctionType):
        opts = getattr(kernel, "targetoptions", {}) or {}
        return fn, bool(opts.get("device", getattr(kernel, "_device", False))), \
            opts.get("fastmath", getattr(kernel, "_fastmath", False)) or False
    raise TypeError(
        f"expected a @cuda.jit kernel or a Python function, got {type(kernel).__name__}")


# --------------------------------------------------------------------------------------------
# Compiler messages
# --------------------------------------------------------------------------------------------

_RAISED_FROM = re.compile(r"^\s*raised from ")
_DURING_PASS = re.compile(r"^During: Pass \w+\s*$")
_CANDIDATES = re.compile(r"^\s*There are \d+ candidate implementations")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def trim_compiler_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The useful part of a numba-cuda compiler message.

    numba's "No implementation of function ... found for signature" errors list every candidate
    overload and why each failed, nested several levels deep (a ``str()`` call gives ~200 lines).
    Kept: the summary up to the candidate list (the function and the argument types it was called
    with), then whatever follows the list at the top level (``During:`` lines, the source
    snippet). ``raised from <numba file>`` lines, ``During: Pass <compiler pass>`` lines and
    colour codes are dropped; the result is cut at ``limit`` characters.
    """
    lines = _ANSI.sub("", message).splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if _CANDIDATES.match(line):
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
                i += 1
            continue
        if not (_RAISED_FROM.match(line) or _DURING_PASS.match(line)):
            out.append(line.rstrip())
        i += 1
    text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", "\n".join(out)).strip()
    if len(text) > limit:
        text = text[:limit].rstrip() + "\n... (cut; the full message is the error's " \
            "compiler_message)"
    return text


def _source_location(loc) -> str:
    if not loc:
        return ""
    filename, line = loc
    src = linecache.getline(filename, line).rstrip()
    where = f'File "{filename}", line {line}'
    return f"{where}:\n    {src.strip()}" if src else where


# --------------------------------------------------------------------------------------------
# The helper process
# --------------------------------------------------------------------------------------------

_CHILD_SOURCE = r'''
import os, sys, struct, pickle, time, traceback
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
_in = sys.stdin.buffer
_out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)            # stray prints (numba warnings, C libraries) go to stderr
sys.stdout = sys.stderr

def _read():
    head = _in.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack(">Q", head)
    data = _in.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)

def _write(obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _out.write(struct.pack(">Q", len(data)))
    _out.write(data)
    _out.flush()

_startup_error = None
try:
    import numba.cuda                                  # real mode, before anything else
    from numba import cuda
    from numba.cuda.core import config as _cuda_config
    if _cuda_config.ENABLE_CUDASIM:
        raise RuntimeError("numba.cuda started in simulator mode in the compile helper")
    import numba.cuda.dispatcher as _dispatcher
    from numba.cuda.cudadrv import nvvm as _nvvm
    if os.environ.get("KERNELLAB_CUDA_EXT"):
        import runpy
        runpy.run_path(os.environ["KERNELLAB_CUDA_EXT"])["install"]()
    _nvvm_version = ".".join(map(str, _nvvm.NVVM().get_version()))
except BaseException as exc:
    _startup_error = "".join(traceback.format_exception_only(type(exc), exc)).strip()


class _Device:
    """Stands in for the current device: device functions compile for the cc asked for."""
    compute_capability = (8, 0)


_DEVICE = _Device()
if _startup_error is None:
    # compile_ptx takes cc explicitly, but a device function called from the kernel is compiled
    # through Dispatcher.compile_device, which asks the (absent) current device for its cc.
    _dispatcher.get_current_device = lambda: _DEVICE
    _SKIP = tuple(os.path.dirname(m.__file__) for m in (numba, sys.modules["numba_cuda"])
                  if getattr(m, "__file__", None))


def _loc_of(v):
    """(filename, line) of an IR location, or of an object's ``.loc``; None otherwise."""
    for cand in (v, getattr(v, "loc", None)):
        fn = getattr(cand, "filename", None)
        line = getattr(cand, "line", None)
        if isinstance(fn, str) and isinstance(line, int) and line > 0:
            return fn, line
    return None


def _user_loc(exc):
    """(filename, line) of the innermost IR location outside numba in the exception's frames.

    numba's "No implementation of function" errors carry no location: the type-inference
    frames (a CallConstraint's ``loc``, the ``inst`` being typed) know it."""
    found, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            f_locals = tb.tb_frame.f_locals
            for name in ("loc", "inst", "stmt", "expr", "constraint", "self"):
                try:  # IR objects may answer getattr with anything (numba's ir.Expr: KeyError)
                    loc = _loc_of(f_locals.get(name))
                except Exception:
                    loc = None
                if loc and not loc[0].startswith(_SKIP) \
                        and (not loc[0].startswith("<") or loc[0].startswith("<ipython")):
                    found = loc
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return found


def _compile(msg):
    try:
        fn = pickle.loads(msg["fn"])
        sig = pickle.loads(msg["sig"])
    except BaseException as exc:
        return {"ok": False, "kind": "load",
                "message": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
    _DEVICE.compute_capability = tuple(msg["cc"])
    kw = {"cc": tuple(msg["cc"]), "device": msg["device"]}
    if msg["fastmath"]:
        kw["fastmath"] = msg["fastmath"]
    if msg["lineinfo"]:
        kw["lineinfo"] = True
    t0 = time.perf_counter()
    try:
        ptx, _restype = cuda.compile_ptx(fn, sig, **kw)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        try:
            loc = _user_loc(exc)
        except Exception:
            loc = None
        return {"ok": False, "kind": "compile", "etype": type(exc).__name__,
                "message": str(exc) or repr(exc), "loc": loc,
                "seconds": time.perf_counter() - t0}
    return {"ok": True, "ptx": ptx, "seconds": time.perf_counter() - t0}


while True:
    msg = _read()
    if msg is None or msg.get("op") == "exit":
        break
    op = msg.get("op")
    if op == "hello":
        for p in msg.get("sys_path", ()):
            if p not in sys.path:
                sys.path.append(p)
        if _startup_error is not None:
            _write({"ok": False, "message": _startup_error})
        else:
            import importlib.metadata as _md
            _versions = {}
            for _name in ("numba", "numba-cuda", "nvidia-nvvm"):
                try:
                    _versions[_name] = _md.version(_name)
                except _md.PackageNotFoundError:
                    _versions[_name] = "?"
            _write({"ok": True, "python": sys.version.split()[0], "nvvm": _nvvm_version,
                    "versions": _versions, "pid": os.getpid()})
    elif op == "compile":
        try:
            reply = _compile(msg)
            pickle.dumps(reply)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            reply = {"ok": False, "kind": "internal",
                     "message": "".join(traceback.format_exception(type(exc), exc,
                                                                   exc.__traceback__))}
        _write(reply)
    elif op == "crash":                      # for tests: die as a crashing compiler would
        os._exit(3)
    else:
        _write({"ok": False, "kind": "protocol", "message": f"unknown op {op!r}"})
'''


class _ChildDied(Exception):
    def __init__(self, message, retry=True):
        super().__init__(message)
        self.retry = retry


class _Helper:
    """The compile helper subprocess (one per parent process)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._proc = None
        self._stderr = None
        self.info: dict | None = None
        self.starts = 0
        self.restarts = 0
        self._owner_pid = None
        self._start_error: PTXToolError | None = None  # sticky until close()

    def _forget_if_forked(self):
        """After a fork the helper's pipes belong to the parent: start our own helper."""
        if self._proc is not None and self._owner_pid != os.getpid():
            self._proc = None
            self._stderr = None
            self.info = None

    def _start(self):
        if self._start_error is not None:
            raise self._start_error
        try:
            self._start_once()
        except PTXToolError as exc:
            self._start_error = exc  # a helper that cannot start will not start next time either
            raise

    def _start_once(self):
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
        self._owner_pid = os.getpid()
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        # intrinsics numba-cuda lacks (cuda.dp4a), installed in the helper from this file
        env["KERNELLAB_CUDA_EXT"] = str(Path(__file__).resolve().parents[2] / "cuda_ext.py")
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_SOURCE], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, env=env, close_fds=True)
        self.starts += 1
        try:
            reply = self._exchange({"op": "hello", "sys_path": list(sys.path)})
        except _ChildDied as exc:
            self._kill()
            raise PTXToolError(f"the GPU compile helper did not start: {exc}") from None
        if not reply.get("ok"):
            self._kill()
            raise PTXToolError("the GPU compiler is not available in the compile helper: "
                               f"{reply.get('message')}")
        self.info = reply

    def _stderr_tail(self, n: int = 2000) -> str:
        f = self._stderr
        if f is None:
            return ""
        try:
            f.flush()
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def _read_exact(self, n: int, deadline: float) -> bytes:
        out = self._proc.stdout
        chunks, got = [], 0
        while got < n:
            if os.name == "posix":
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([out], [], [], left)[0]:
                    self._kill()
                    raise _ChildDied(f"no reply within {COMPILE_TIMEOUT_S:.0f} s (killed)",
                                     retry=False)
                data = os.read(out.fileno(), n - got)
            else:  # pragma: no cover - Windows pipes have no select
                data = out.read(n - got)
            if not data:
                try:
                    code = self._proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                raise _ChildDied(f"the helper exited (code {code}); stderr: "
                                 f"{self._stderr_tail() or '(empty)'}")
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def _exchange(self, msg: dict) -> dict:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._proc.stdin.write(struct.pack(">Q", len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            code = self._proc.poll()
            raise _ChildDied(f"the helper exited (code {code}); stderr: "
                             f"{self._stderr_tail() or '(empty)'}") from None
        deadline = time.monotonic() + COMPILE_TIMEOUT_S
        (n,) = struct.unpack(">Q", self._read_exact(8, deadline))
        return pickle.loads(self._read_exact(n, deadline))

    def _alive(self) -> bool:
        self._forget_if_forked()
        return self._proc is not None and self._proc.poll() is None

    def ensure_started(self) -> dict:
        with self._lock:
            if not self._alive():
                self._start()
            return self.info

    def request(self, msg: dict) -> dict:
        """Send ``msg``; on a helper death restart it once (warning), then give up."""
        with self._lock:
            for attempt in (0, 1):
                if not self._alive():
                    self._start()
                try:
                    return self._exchange(msg)
                except _ChildDied as exc:
                    self._kill()
                    if not exc.retry:
                        raise PTXToolError(f"the GPU compile helper gave up on "
                                           f"{msg.get('name')!r}: {exc}") from None
                    if attempt:
                        raise PTXToolError(
                            f"the GPU compile helper died twice compiling {msg.get('name')!r}: "
                            f"{exc}") from None
                    self.restarts += 1
                    warnings.warn(f"the GPU compile helper died ({exc}); restarting it once",
                                  RuntimeWarning, stacklevel=4)
            raise AssertionError("unreachable")  # pragma: no cover

    def _kill(self):
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self):
        """Ask the helper to exit, then make sure it has; idempotent."""
        with self._lock:
            self._start_error = None
            self._forget_if_forked()
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                try:
                    data = pickle.dumps({"op": "exit"})
                    proc.stdin.write(struct.pack(">Q", len(data)) + data)
                    proc.stdin.flush()
                    proc.wait(timeout=5)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._kill()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._alive() else None


_helper = _Helper()
atexit.register(_helper.close)


def close() -> None:
    """Stop the compile helper (it restarts on the next compile) and forget a failed start.
    Idempotent."""
    _helper.close()
    if _available and not _available[0][0]:
        _available.clear()  # ask again next time


# --------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------

_memory: dict[str, object] = {}   # key -> PTXResult or (GPUCompileError args)
_memory_lock = threading.Lock()
_versions_cache: list = []


def _versions() -> tuple:
    if not _versions_cache:
        import importlib.metadata as md

        out = []
        for name in ("numba", "numba-cuda", "nvidia-nvvm"):
            try:
                out.append(f"{name}={md.version(name)}")
            except md.PackageNotFoundError:
                out.append(f"{name}=?")
        # the intrinsics the helper installs (kernellab.cuda_ext) are part of the compiler
        ext = Path(__file__).resolve().parents[2] / "cuda_ext.py"
        out.append("cuda_ext=" + hashlib.sha256(ext.read_bytes()).hexdigest()[:16])
        _versions_cache.append(tuple(out))
    return _versions_cache[0]


def _disk_dir() -> Path | None:
    if os.environ.get("KERNELLAB_PTX_DISK_CACHE", "1").strip().lower() in ("0", "no", "false",
                                                                          "off"):
        return None
    from kernellab import codegen

    return Path(codegen.cache_dir("default")).parent / "ptx"


def _disk_load(key: str) -> dict | None:
    d = _disk_dir()
    if d is None:
        return None
    try:
        with open(d / f"{key}.json", encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("ptx"), str) else None


def _disk_store(key: str, entry: dict) -> None:
    d = _disk_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only or full cache folder only costs a recompile


def clear_cache(disk: bool = False) -> None:
    """Forget the in-memory cache (and with ``disk=True`` the on-disk entries too)."""
    with _memory_lock:
        _memory.clear()
    if disk:
        d = _disk_dir()
        if d is not None and d.is_dir():
            for p in d.glob("*.json"):
                try:
                    p.unlink()
                except OSError:
                    pass


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

def _normalise_cc(cc) -> tuple:
    try:
        major, minor = (int(x) for x in cc)
    except (TypeError, ValueError):
        raise ValueError(f"cc must be (major, minor), got {cc!r}") from None
    return (major, minor)


def compile_kernel(kernel, args, cc=DEFAULT_CC, *, lineinfo: bool = False,
                   use_cache: bool = True) -> PTXResult:
    """Compile a kernel for a GPU (PTX) as it would be launched with ``args``.

    ``kernel``: a simulator ``@cuda.jit`` object (``FakeCUDAKernel``; its ``.fn`` is compiled,
    with its ``fastmath``; ``device=True`` ones as device functions) or a plain Python function.
    ``args``: the launch arguments (see :func:`signature_of`; numba types are accepted as is).
    ``cc``: compute capability ``(major, minor)``, default :data:`DEFAULT_CC` (sm_80).
    ``lineinfo``: ask for ``.loc`` line directives in the PTX. ``use_cache``: consult and fill
    the in-memory and on-disk caches (module docstring).

    Returns a :class:`PTXResult`. Raises :class:`GPUCompileError` when numba-cuda's compiler
    rejects the kernel (message: the kernel's name, cc, signature and the trimmed compiler
    message with the kernel source line; attributes ``kernel``, ``compiler_message`` (untrimmed),
    ``error_type``, ``location`` ``(filename, line)`` or ``None``); :class:`PTXToolError` when the
    check cannot run; :class:`TypeError` for an argument numba cannot type.
    """
    fn, device, fastmath = _python_function(kernel)
    cc = _normalise_cc(cc)
    sig = signature_of(args)
    name = fn.__name__
    sig_text = "(" + ", ".join(str(t) for t in sig) + ("," if len(sig) == 1 else "") + ")"
    fn_bytes = _dumps_function(fn)
    options = {"cc": cc, "device": device, "fastmath": fastmath, "lineinfo": bool(lineinfo)}
    h = hashlib.sha256(fn_bytes)
    h.update(repr((sig_text, sorted(options.items(), key=lambda kv: kv[0]))).encode())
    key = h.hexdigest()

    if use_cache:
        with _memory_lock:
            hit = _memory.get(key)
        if isinstance(hit, PTXResult):
            return dataclasses.replace(hit, counts=dict(hit.counts), cache="memory")
        if isinstance(hit, tuple):
            raise _compile_error(*hit)
        disk_key = hashlib.sha256((key + repr(_versions())).encode()).hexdigest()
        entry = _disk_load(disk_key)
        if entry is not None:
            result = PTXResult(kernel=name, cc=cc, signature=sig_text, ptx=entry["ptx"],
                               counts=static_counts(entry["ptx"]),
                               seconds=float(entry.get("seconds", 0.0)))
            with _memory_lock:
                _memory[key] = result
            return dataclasses.replace(result, counts=dict(result.counts), cache="disk")

    try:
        sig_bytes = pickle.dumps(sig, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise PTXToolError(f"cannot send the signature {sig_text} to the helper: {exc}") from exc
    reply = _helper.request({"op": "compile", "name": name, "fn": fn_bytes, "sig": sig_bytes,
                             **options})
    if not reply.get("ok"):
        if reply.get("kind") != "compile":
            raise PTXToolError(f"the GPU compile helper could not take kernel {name!r}: "
                               f"{reply.get('message')}")
        err = (name, cc, sig_text, reply.get("etype", "Error"), reply.get("message", ""),
               tuple(reply["loc"]) if reply.get("loc") else None)
        if use_cache:
            with _memory_lock:
                _memory[key] = err
        raise _compile_error(*err)

    result = PTXResult(kernel=name, cc=cc, signature=sig_text, ptx=reply["ptx"],
                       counts=static_counts(reply["ptx"]), seconds=float(reply["seconds"]))
    if use_cache:
        with _memory_lock:
            _memory[key] = result
        _disk_store(disk_key, {"ptx": result.ptx, "kernel": name, "cc": list(cc),
                               "signature": sig_text, "seconds": result.seconds,
                               "versions": list(_versions())})
    return dataclasses.replace(result, counts=dict(result.counts))


def _compile_error(name, cc, sig_text, etype, message, loc) -> GPUCompileError:
    trimmed = trim_compiler_message(message)
    if loc and not (f", line {loc[1]}" in trimmed and os.path.basename(loc[0]) in trimmed):
        trimmed = f"{trimmed}\n\n{_source_location(loc)}"
    err = GPUCompileError(
        f"kernel {name!r} runs on the simulator but a GPU compiler rejects it "
        f"(numba-cuda compile_ptx, sm_{cc[0]}{cc[1]}, arguments {sig_text}):\n"
        f"{etype}: {trimmed}")
    err.kernel = name
    err.compiler_message = message
    err.error_type = etype
    err.location = loc
    return err


_available: list = []


def ptx_available() -> tuple[bool, str]:
    """Whether kernels can be compiled to PTX here: ``(True, "NVVM 2.0 ... ")`` or ``(False,
    reason)``. Starts the compile helper (about 1-2 s, once per process: it imports numba-cuda in
    real mode and loads NVVM); the answer is remembered."""
    if not _available:
        try:
            info = _helper.ensure_started()
            v = info.get("versions", {})
            _available.append((True, f"numba-cuda {v.get('numba-cuda', '?')}, NVVM "
                                     f"{info.get('nvvm')} (nvidia-nvvm "
                                     f"{v.get('nvidia-nvvm', '?')}), compile helper pid "
                                     f"{info.get('pid')}"))
        except PTXToolError as exc:
            _available.append((False, str(exc)))
    return _available[0]
