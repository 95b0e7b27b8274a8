"""``math`` inside the sim tier's compiled path, with the greenlet path's values bit for bit.

Numba compiles ``math.exp`` of a float32 to the C library's ``expf``; the greenlet path
(:mod:`kernellab.sim.gpumath`) and numba-cuda's stock simulator take the C library's float64
``exp`` and round once to float32. So that both paths give the same results, the compiled path
calls the functions here instead: a float32 (or float16) argument is widened, the float64
function evaluated (Numba lowers it to the same C library call) and the result rounded to the
argument's dtype; other arguments follow Numba's typing (float64). :data:`FUNCS` maps each
``math`` name of :data:`kernellab.sim.gpumath.UNARY` and ``BINARY`` to its jitted stand-in;
:mod:`kernellab.sim.compiled` rewrites ``math.<name>(...)`` and binds ``from math import
<name>`` to them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types as _nbt
from numba.extending import overload

from kernellab.sim import gpumath

_JIT = {"error_model": "numpy"}


def _small(t):
    return isinstance(t, _nbt.Float) and t.bitwidth < 64


def _unary(name):
    fn = getattr(math, name)

    def stub(x):  # pragma: no cover - replaced by the overload inside compiled code
        raise NotImplementedError

    @overload(stub, jit_options=_JIT)
    def ov(x):
        if _small(x):
            cast = np.float32 if x.bitwidth == 32 else np.float16

            def impl(x):
                return cast(fn(np.float64(x)))
            return impl
        return lambda x: fn(x)

    stub.__name__ = stub.__qualname__ = f"math_{name}"
    return stub


def _binary(name):
    fn = getattr(math, name)

    def stub(x, y):  # pragma: no cover
        raise NotImplementedError

    @overload(stub, jit_options=_JIT)
    def ov(x, y):
        if _small(x) and x == y:
            cast = np.float32 if x.bitwidth == 32 else np.float16

            def impl(x, y):
                return cast(fn(np.float64(x), np.float64(y)))
            return impl
        return lambda x, y: fn(x, y)

    stub.__name__ = stub.__qualname__ = f"math_{name}"
    return stub


def _jit(stub, n):
    """A jitted caller of the overloaded stub (a global Numba can resolve by value)."""
    if n == 1:
        return njit(**_JIT)(lambda x: stub(x))
    return njit(**_JIT)(lambda x, y: stub(x, y))


#: ``math`` function name -> its jitted stand-in (for names Python's math has).
FUNCS = {n: _jit(_unary(n), 1) for n in gpumath.UNARY if hasattr(math, n)}
FUNCS.update({n: _jit(_binary(n), 2) for n in gpumath.BINARY if hasattr(math, n)})

#: Python's math function object -> its jitted stand-in (for ``from math import exp``).
BY_FUNCTION = {getattr(math, n): f for n, f in FUNCS.items()}
