"""The numba signature of a launch, built from its arguments (:func:`signature_of`).

numpy arrays (or the simulator's ``FakeCUDAArray``) become ``numba.types.Array(dtype, ndim,
layout)`` with layout ``C``, ``F`` or ``A`` as a device array of that shape would have; scalars
go through ``numba.typeof`` (a Python ``int`` is ``int64``, a ``float`` ``float64``,
``np.float32(1)`` ``float32``), as numba-cuda types them at a launch (numba-cuda
documentation, "Kernel declaration", "Supported types").
"""

from __future__ import annotations


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
            try:
                sig.append(_array_type(ary))
            except Exception as exc:  # noqa: BLE001 - numba has no type for this dtype
                bits = (f" (pass its bits, X.view(np.uint{8 * ary.dtype.itemsize}), and convert "
                        "in the kernel)" if ary.dtype.itemsize in (1, 2, 4, 8) else "")
                raise TypeError(f"kernel argument {i}: numba-cuda has no type for arrays of "
                                f"{ary.dtype}{bits}") from exc
            continue
        try:
            sig.append(numba.typeof(arg if ary is None else ary[()]))
        except Exception as exc:  # numba raises ValueError for untypeable values
            raise TypeError(f"argument {i} ({type(arg).__name__}) has no numba type: {exc}") \
                from None
    return tuple(sig)
