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
from numba.extending import intrinsic, overload

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


# ``x.view(dt)`` of a scalar: a bit cast (numba's CPU target has none for scalars). numba-cuda
# compiles the same expression to a ``bitcast`` (or ``mov.b32``): the BF16 helpers of
# kernellab.bf16 and the float16 packing of the tensor-core kernels use it.

@intrinsic
def _bitcast(typingctx, x, dt):
    to = dt.instance_type
    if not isinstance(x, _nbt.Number) or to.bitwidth != x.bitwidth:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(to))
    return to(x, dt), codegen


def _view_stub(x, dt):  # pragma: no cover - replaced by the overload inside compiled code
    raise NotImplementedError


@overload(_view_stub, jit_options=_JIT)
def _view_ov(x, dt):
    if isinstance(x, _nbt.Array):
        return lambda x, dt: x.view(dt)
    if isinstance(x, _nbt.Number) and isinstance(dt, _nbt.NumberClass) \
            and dt.instance_type.bitwidth == x.bitwidth:
        return lambda x, dt: _bitcast(x, dt)
    return None


#: ``x.view(dt)`` in compiled code: an array's view, or a scalar's bits as another type of the
#: same width (a width change is a typing error, as numba-cuda's).
VIEW = njit(**_JIT)(lambda x, dt: _view_stub(x, dt))
