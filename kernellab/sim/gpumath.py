"""The ``math`` module a kernel sees on the sim tier: CUDA's semantics, not Python's.

On a GPU, numba-cuda compiles ``math.exp(x)`` for a float32 ``x`` to CUDA's ``expf`` (libdevice
``__nv_expf``): the result is a float32, an overflow gives ``inf`` and an invalid argument
gives ``NaN`` (IEEE 754 default handling; the GPU raises no floating-point exceptions). Python's
``math`` functions differ on all three points: they return a Python float (float64), raise
``OverflowError`` (``math.exp(1e4)``) and raise ``ValueError`` (``math.log(-1)``,
``math.sqrt(-1)``). A kernel that computes a softmax without subtracting the row max would
stop with "math range error" on numba-cuda's stock simulator, where on a GPU it writes NaN.

:data:`MODULE` answers like the GPU does, for the functions below:

* float32 / float16 numpy scalars give a result of the same dtype, as on a GPU (numba-cuda
  computes float16 math functions in half precision, ``cuda_fp16.h``); Python floats and ints
  give a float64, as numba types them;
* overflow gives ``inf``, an argument outside the domain ``NaN`` (numpy's floating-point error
  state is set to "ignore" for the duration of a launch by the engine);
* the value is the C library's float64 function (Python's ``math``) rounded once to the
  argument's dtype: for float32 that is the correctly rounded result but in rare cases, the
  value numba-cuda's stock simulator stores, and the one the compiled path
  (:mod:`kernellab.sim.compiled_math`) computes, bit for bit. CUDA's ``expf``, ``logf`` ... are
  within 1-2 ulp (CUDA C++ Programming Guide, "Mathematical Functions", single-precision
  table), so the simulator is never less accurate than a GPU. The special values Python's
  ``math`` refuses (``log(0)``, ``sqrt(-1)``, an overflow) come from the numpy ufunc.

Everything else (``math.pi``, ``math.inf``, ``math.isnan``, ``math.floor``, ``math.fsum`` ...)
is Python's ``math``. Functions numba-cuda does not support on a GPU are caught by the sim
tier's GPU compile check (:mod:`kernellab.sim.ptx`), not here.
"""

from __future__ import annotations

import math as _math
import types

import numpy as np

#: math function name -> numpy ufunc giving its special values (inf/NaN, no raise).
UNARY = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sqrt": np.sqrt, "cbrt": np.cbrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "fabs": np.fabs,
}
BINARY = {"pow": np.power, "atan2": np.arctan2, "hypot": np.hypot, "fmod": np.fmod,
          "copysign": np.copysign}

_SMALL = (np.float32, np.float16)


def _arg(x):
    """float32/float16 scalars stay as they are; anything else becomes a float64 (numba types
    Python ints and floats, and int arrays' elements, as float64 in math calls)."""
    if isinstance(x, _SMALL):
        return x
    return np.float64(x)


def _libm(pyf, uf, *xs):
    """pyf (Python's math function: the C library's float64 one) of the float64 arguments;
    where it raises on a special value, the numpy ufunc's inf or NaN."""
    try:
        return pyf(*xs)
    except (OverflowError, ValueError):
        return uf(*(np.float64(x) for x in xs))


def _unary(name, uf):
    pyf = getattr(_math, name, None) or (lambda v: uf(np.float64(v)))

    def f(x):
        x = _arg(x)
        return type(x)(_libm(pyf, uf, float(x)))
    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = f"math.{name} with CUDA semantics (see kernellab.sim.gpumath)"
    return f


def _binary(name, uf):
    pyf = getattr(_math, name)

    def f(x, y):
        x, y = _arg(x), _arg(y)
        if type(x) is not type(y):      # float32 with float64: numba promotes to float64
            x, y = np.float64(x), np.float64(y)
        return type(x)(_libm(pyf, uf, float(x), float(y)))
    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = f"math.{name} with CUDA semantics (see kernellab.sim.gpumath)"
    return f


def _build() -> types.ModuleType:
    mod = types.ModuleType("math", "Python's math with CUDA semantics for the sim tier")
    for name in dir(_math):
        if not name.startswith("__"):
            setattr(mod, name, getattr(_math, name))
    for name, uf in UNARY.items():
        setattr(mod, name, _unary(name, uf))
    for name, uf in BINARY.items():
        setattr(mod, name, _binary(name, uf))
    return mod


#: The stand-in for ``math`` in a kernel's globals during a sim-tier launch.
MODULE = _build()

#: Python's math function object -> its stand-in (for ``from math import exp``).
FUNCTIONS = {getattr(_math, n): getattr(MODULE, n)
             for n in list(UNARY) + list(BINARY) if hasattr(_math, n)}


def swap_globals(globs: dict) -> dict:
    """Replace ``math`` and math functions bound in ``globs`` by their stand-ins; returns what
    was replaced (name -> original) for :func:`restore_globals`."""
    orig = {}
    for k, v in list(globs.items()):
        if v is _math:
            orig[k] = v
            globs[k] = MODULE
        else:
            try:
                rep = FUNCTIONS.get(v)
            except TypeError:           # unhashable global
                continue
            if rep is not None:
                orig[k] = v
                globs[k] = rep
    return orig


def restore_globals(globs: dict, orig: dict) -> None:
    """Undo :func:`swap_globals`."""
    globs.update(orig)
