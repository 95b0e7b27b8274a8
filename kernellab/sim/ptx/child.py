"""The GPU-compile helper program (run by path by :mod:`kernellab.sim.ptx.helper`).

It runs with ``NUMBA_ENABLE_CUDASIM`` removed from its environment, imports ``numba.cuda`` in
real mode before anything else and never imports ``kernellab`` (numba-cuda documentation,
"Compilation": ``numba.cuda.compile_ptx(pyfunc, sig, ..., cc=None)`` compiles to PTX without a
GPU, given the NVVM library). Requests and replies are length-prefixed (8-byte big-endian)
pickles over stdin/stdout: ``hello`` (answers the versions, or why it cannot compile),
``compile`` (``fn`` and ``sig`` pickled, ``cc``, ``device``, ``fastmath``, ``lineinfo``,
``launch_bounds`` if any;
answers the PTX or the compiler's error with the user's source location), ``resources``
(``ptx``, ``cc``, ``module``, ``maxrregcount`` if any: ptxas run on the PTX through nvJitLink
-- the module named, ``cuda.bindings.nvjitlink`` -- with ``-verbose``; answers its log, or
why it could not run;
:mod:`kernellab.sim.ptx.ptxas`), ``crash`` (for tests) and ``exit``. ``KERNELLAB_CUDA_EXT``: a
file whose ``install()`` adds intrinsics numba-cuda lacks (:mod:`kernellab.cuda_ext`), run
before the first compile.
"""

import os
import pickle
import struct
import sys
import time
import traceback

# run by path, Python put this folder first on sys.path: put back what ``python -c`` had there
# (the working directory), so no module of this folder shadows one the compiler imports
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = ""
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
    if msg.get("launch_bounds"):
        kw["launch_bounds"] = tuple(msg["launch_bounds"])
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


def _log(nj, h, size_fn, get_fn):
    size = size_fn(h)
    buf = bytearray(size)
    if size:
        get_fn(h, buf)
    return bytes(buf).rstrip(b"\0").decode("utf-8", "replace")


def _missing_library(exc) -> bool:
    """Whether ``exc`` says the nvJitLink library itself is absent: cuda-bindings loads
    libnvJitLink on the first call (cuda.pathfinder's ``DynamicLibNotFoundError``, or an
    ``OSError`` from the loader, or a ``RuntimeError`` "function ... not found" from a library
    too old to have the entry point), so importing the module proves nothing."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"DynamicLibNotFoundError", "DynamicLibNotAvailableError",
                "DynamicLibUnknownError"} or isinstance(exc, OSError):
        return True
    return isinstance(exc, RuntimeError) and "function" in str(exc) and "not found" in str(exc)


def _resources(msg):
    """ptxas on one PTX module through nvJitLink (``-arch=sm_XY -verbose``): its info log.

    ``kind`` of a failure: ``"missing"`` (the module or its library cannot be loaded),
    ``"ptxas"`` (ptxas rejected the PTX)."""
    try:
        import importlib
        nj = importlib.import_module(msg.get("module") or "cuda.bindings.nvjitlink")
        version = ".".join(map(str, nj.version()))      # loads libnvJitLink
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return {"ok": False, "kind": "missing",
                "message": "".join(traceback.format_exception_only(type(exc), exc)).strip()}
    cc = tuple(msg["cc"])
    data = msg["ptx"].encode()
    options = [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"]
    if msg.get("maxrregcount"):
        options.append(f"-maxrregcount={int(msg['maxrregcount'])}")
    t0 = time.perf_counter()
    h = None
    try:
        h = nj.create(len(options), options)
        nj.add_data(h, nj.InputType.PTX, data, len(data), "kernel.ptx")
        nj.complete(h)
        log = _log(nj, h, nj.get_info_log_size, nj.get_info_log)
        return {"ok": True, "log": log, "nvjitlink": version,
                "seconds": time.perf_counter() - t0}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if _missing_library(exc):
            return {"ok": False, "kind": "missing", "message": text}
        err = ""
        if h is not None:
            try:
                err = _log(nj, h, nj.get_error_log_size, nj.get_error_log)
            except Exception:
                pass
        return {"ok": False, "kind": "ptxas", "message": f"{text}\n{err}".strip()}
    finally:
        if h is not None:
            try:
                nj.destroy(h)
            except Exception:
                pass


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
            for _name in ("numba", "numba-cuda", "nvidia-nvvm", "nvidia-nvjitlink"):
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
    elif op == "resources":
        try:
            reply = _resources(msg)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            reply = {"ok": False, "kind": "internal",
                     "message": "".join(traceback.format_exception_only(type(exc), exc))}
        _write(reply)
    elif op == "crash":                      # for tests: die as a crashing compiler would
        os._exit(3)
    else:
        _write({"ok": False, "kind": "protocol", "message": f"unknown op {op!r}"})
