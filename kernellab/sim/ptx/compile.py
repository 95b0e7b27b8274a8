"""Compile a simulated kernel to PTX (:func:`compile_kernel`) and say whether one can here.

The entry points of :mod:`kernellab.sim.ptx`: :func:`compile_kernel` (signature from the
arguments, function pickled by value, caches, the helper), :func:`kernel_resources` (ptxas's
registers, stack frame and spills of a compiled kernel), :func:`ptx_available`,
:func:`close`, and :class:`PTXResult`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle

from kernellab.sim.ptx import ptxas as _ptxas
from kernellab.sim.ptx.cache import (
    _disk_load, _disk_store, _memory, _memory_lock, _resource_versions, _versions,
)
from kernellab.sim.ptx.counts import static_counts
from kernellab.sim.ptx.helper import _helper
from kernellab.sim.ptx.messages import PTXToolError, _compile_error
from kernellab.sim.ptx.pickling import _dumps_function, _python_function
from kernellab.sim.ptx.signature import signature_of

#: Compute capability compiled for when the caller does not say: 8.0 (A100, sm_80).
DEFAULT_CC = (8, 0)


@dataclasses.dataclass(frozen=True)
class PTXResult:
    """One kernel compiled to PTX.

    ``kernel``: the Python function's ``__name__``; ``cc``: ``(major, minor)``; ``signature``:
    the numba argument types as text (``"(array(float32, 2d, C), int64)"``); ``ptx``: the PTX
    module text; ``counts``: :func:`static_counts` of it; ``seconds``: how long the compiler took
    when this PTX was produced (kept for cache hits); ``cache``: ``None`` when compiled by this
    call, ``"memory"`` or ``"disk"`` when it came from a cache; ``max_registers``: the
    kernel's ``@cuda.jit(max_registers=N)`` (None: not given), which ptxas applies
    (``-maxrregcount``, :func:`kernel_resources`), not NVVM.
    """

    kernel: str
    cc: tuple
    signature: str
    ptx: str = dataclasses.field(repr=False)
    counts: dict = dataclasses.field(repr=False)
    seconds: float
    cache: str | None = None
    max_registers: int | None = None


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
    with its ``fastmath``, ``launch_bounds`` and ``max_registers``; ``device=True`` ones as
    device functions) or a
    plain Python function.
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
    bounds = getattr(kernel, "launch_bounds", None)
    if bounds:      # @cuda.jit(launch_bounds=...) (kernellab.sim.launch); absent: keys as before
        options["launch_bounds"] = tuple(int(v) for v in bounds)
    maxreg = getattr(kernel, "max_registers", None)
    maxreg = int(maxreg) if maxreg else None
    keyed = dict(options)
    if maxreg:      # for ptxas, not NVVM: in the key, not in the helper's compile request
        keyed["max_registers"] = maxreg
    h = hashlib.sha256(fn_bytes)
    h.update(repr((sig_text, sorted(keyed.items(), key=lambda kv: kv[0]))).encode())
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
                               seconds=float(entry.get("seconds", 0.0)), max_registers=maxreg)
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
                       counts=static_counts(reply["ptx"]), seconds=float(reply["seconds"]),
                       max_registers=maxreg)
    if use_cache:
        with _memory_lock:
            _memory[key] = result
        _disk_store(disk_key, {"ptx": result.ptx, "kernel": name, "cc": list(cc),
                               "signature": sig_text, "seconds": result.seconds,
                               "versions": list(_versions())})
    return dataclasses.replace(result, counts=dict(result.counts))


#: The nvJitLink module the helper imports for :func:`kernel_resources` (a test points it at a
#: module that does not exist, to see the report of a missing nvJitLink).
NVJITLINK_MODULE = "cuda.bindings.nvjitlink"

#: :attr:`KernelResources.source` of a ptxas report.
PTXAS_SOURCE = "ptxas via nvJitLink -verbose"


def kernel_resources(result: PTXResult, cc=None, *, use_cache: bool = True) -> tuple:
    """ptxas's resource report of a compiled kernel: ``(KernelResources, note)``, or
    ``(None, note)`` saying in plain words why there is none (a device function; nvJitLink
    missing; ptxas failed, timed out after :data:`~kernellab.sim.ptx.ptxas.PTXAS_TIMEOUT_S`,
    or crashed; the compile helper cannot start). Never raises for those.

    ``result``: a :class:`PTXResult` of :func:`compile_kernel`; ``cc``: the compute capability
    ptxas compiles that PTX for (default: the one it was compiled for; PTX runs on later
    ones). ``result.max_registers`` reaches ptxas as ``-maxrregcount``. ptxas runs in the
    compile helper through nvJitLink (:mod:`kernellab.sim.ptx.ptxas`); reports are cached
    in memory and on disk (:mod:`kernellab.sim.ptx.cache`; a missing nvJitLink only in
    memory)."""
    from kernellab.sim.resources import KernelResources

    cc = result.cc if cc is None else _normalise_cc(cc)
    arch = f"sm_{cc[0]}{cc[1]}"
    entries = _ptxas.entry_names(result.ptx)
    if not entries:
        return None, (f"{result.kernel!r} is a device function: its registers and local "
                      "memory count in the kernel that calls it")
    key = "res:" + hashlib.sha256(
        repr((result.ptx, cc, result.kernel, NVJITLINK_MODULE, result.max_registers))
        .encode()).hexdigest()
    disk_key = None
    if use_cache:
        with _memory_lock:
            hit = _memory.get(key)
        if isinstance(hit, tuple):
            return hit
        if NVJITLINK_MODULE == "cuda.bindings.nvjitlink":
            disk_key = "res-" + hashlib.sha256(
                (key + repr(_resource_versions())).encode()).hexdigest()
            entry = _disk_load(disk_key)
            if entry is not None:
                res = entry.get("resources")
                out = (KernelResources.from_dict(res) if res else None, entry["note"])
                with _memory_lock:
                    _memory[key] = out
                return out
    durable = True  # an outcome the same tools give again (not a timeout or a crash)
    try:
        reply = _helper.request({"op": "resources", "name": result.kernel, "ptx": result.ptx,
                                 "cc": cc, "module": NVJITLINK_MODULE,
                                 "maxrregcount": result.max_registers},
                                timeout_s=_ptxas.PTXAS_TIMEOUT_S, retry=False)
    except PTXToolError as exc:
        reply = {"ok": False, "kind": "helper", "message": str(exc)}
        durable = False
    if reply.get("ok"):
        name, figures = _ptxas.pick_kernel(_ptxas.parse_ptxas_log(reply["log"]), entries,
                                           result.kernel)
        if name is None:
            out = (None, f"ptxas ran ({arch}) but its report could not be read: {figures}")
        else:
            # the kernel's own static shared arrays, as its PTX declares them, never ptxas's
            # figure: for sm_90 ptxas reports 1 KiB more for a kernel that uses shared memory,
            # dynamic only included (the 1 KB a block reserves, which occupancy() adds itself)
            shared = _ptxas.declared_shared_bytes(result.ptx)
            res = KernelResources(
                registers=figures["registers"],
                stack_frame_bytes=figures.get("stack_frame_bytes", 0),
                spill_store_bytes=figures.get("spill_store_bytes", 0),
                spill_load_bytes=figures.get("spill_load_bytes", 0),
                shared_static_bytes=int(shared), cc=cc, source=PTXAS_SOURCE)
            out = (res, f"registers and local frame from ptxas (nvJitLink "
                        f"{reply.get('nvjitlink', '?')}, {arch})")
    elif reply.get("kind") == "missing":
        durable = False     # installing the library fixes it: ask again in a later session
        out = (None, "registers and spills are unknown: nvJitLink (the ptxas this tier runs, "
                     "package nvidia-nvjitlink with cuda-bindings) cannot be imported or "
                     f"loaded here: {reply.get('message')}")
    elif reply.get("kind") == "ptxas":
        out = (None, f"registers and spills are unknown: ptxas ({arch}) rejected the PTX of "
                     f"{result.kernel!r}: {str(reply.get('message'))[:500]}")
    else:
        durable = False
        out = (None, f"registers and spills are unknown: ptxas could not run on "
                     f"{result.kernel!r}: {reply.get('message')}")
    if use_cache:
        with _memory_lock:
            _memory[key] = out
        if durable and disk_key is not None:
            _disk_store(disk_key, {"resources": out[0].as_dict() if out[0] else None,
                                   "note": out[1], "kernel": result.kernel, "cc": list(cc),
                                   "versions": list(_resource_versions())})
    return out


_available: list = []


def ptx_available() -> tuple[bool, str]:
    """Whether kernels can be compiled to PTX here: ``(True, "NVVM 2.0 ... ")`` or ``(False,
    reason)``. Starts the compile helper (once per process: it imports numba-cuda in real
    mode and loads NVVM); the answer is remembered."""
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


def prepare() -> None:
    """Start the compile helper's stand-in now, for a process about to forbid itself new
    processes (:meth:`kernellab.sim.ptx.helper._Helper.prepare`). Idempotent."""
    _helper.prepare()


def close() -> None:
    """Stop the compile helper (it restarts on the next compile) and forget a failed start.
    Idempotent."""
    _helper.close()
    if _available and not _available[0][0]:
        _available.clear()  # ask again next time
