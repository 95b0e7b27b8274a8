"""How a kernel's Python function travels to the compile helper: pickled by value.

With numba-cuda's vendored cloudpickle (``numba.cuda.cloudpickle``; cloudpipe/cloudpickle
README, "pickling by value"), also when the function lives in an importable module (a course
kernel module, a student's submission loaded by the grader): in the helper those modules are
never imported (there, their ``@cuda.jit`` objects would be real dispatchers, and a submission
is not on the path). What the function refers to is pickled as follows:

* modules (``cuda``, ``math``, ``numpy``...) by name, so ``cuda`` is the real ``numba.cuda`` in
  the helper; the simulator's ``FakeCUDAModule`` (swapped into a kernel's globals during a
  simulated launch) also pickles as ``numba.cuda``, as does any object whose class has a
  ``__kernellab_gpu_module__`` attribute naming a module;
* numba types (``float32``...), numpy scalars and arrays, plain constants: by value;
* ``@cuda.jit`` objects of the simulator (``FakeCUDAKernel``: device functions, other kernels):
  as "apply the real ``cuda.jit(device=..., fastmath=...)`` to this function" (function by
  value);
* other plain functions by value unless they belong to numba, numpy or the standard library
  (those by reference).
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
import types as _pytypes

from kernellab.sim.ptx.messages import PTXToolError

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
