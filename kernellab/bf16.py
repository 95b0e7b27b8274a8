"""BF16 in CUDA kernels as uint16 storage: widen to float32, narrow with round-to-nearest-even.

numba-cuda 0.30 types no ``ml_dtypes.bfloat16`` array, so a kernel takes the bits: the host
passes ``x.view(np.uint16)`` of a bfloat16 array (:func:`bits`) and reads a uint16 result back
as bfloat16 (:func:`from_bits`). Inside the kernel the two device functions below convert, and
they compile alike on the sim tier (Python on numpy scalars) and for a GPU (numba-cuda):

* :func:`widen` ``(u: uint16) -> float32``: exact; bfloat16 is the top 16 bits of a binary32
  (Google, "bfloat16: The secret to high performance on Cloud TPUs", 2019; Intel, "BFLOAT16 --
  Hardware Numerics Definition", 2018, §2).
* :func:`narrow` ``(x: float32) -> uint16``: round to nearest, ties to even (IEEE 754-2019
  §4.3.1, the rounding ``cvt.rn.bf16.f32`` does: PTX ISA, "cvt"): add ``0x7FFF`` plus the lowest
  kept bit, keep the top half; a NaN becomes the quiet NaN ``0x7FC0`` with its sign; overflow
  rounds to infinity. Bit for bit what ``ml_dtypes`` does on the host (tested on every float32
  class: normal, subnormal, ties, NaN, infinity, overflow).
"""

from __future__ import annotations

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32, uint16, uint32

from kernellab.numerics import _BF16

__all__ = ["widen", "narrow", "bits", "from_bits", "as_bf16", "round_bf16", "BF16"]

#: ``ml_dtypes.bfloat16`` as a numpy dtype
BF16 = _BF16


@cuda.jit(device=True)
def widen(u):
    """uint16 bits of a bfloat16 -> the float32 of the same value (exact)."""
    return uint32(uint32(u) << uint32(16)).view(np.float32)


@cuda.jit(device=True)
def narrow(x):
    """float32 -> uint16 bits of the nearest bfloat16, ties to even; NaN -> a quiet NaN."""
    b = float32(x).view(np.uint32)
    if (b & uint32(0x7FFFFFFF)) > uint32(0x7F800000):       # NaN: the sign and a quiet NaN
        return uint16(((b >> uint32(16)) & uint32(0x8000)) | uint32(0x7FC0))
    b = uint32(b + uint32(0x7FFF) + uint32((b >> uint32(16)) & uint32(1)))  # no overflow: NaN left
    return uint16(b >> uint32(16))


def bits(x: np.ndarray) -> np.ndarray:
    """The uint16 bits of a bfloat16 array (a view when ``x`` is bfloat16 already; other float
    arrays are rounded to bfloat16 first). Raises TypeError for a non-float array."""
    x = np.asarray(x)
    if x.dtype == BF16:
        return x.view(np.uint16)
    if x.dtype.kind != "f":
        raise TypeError(f"bits() takes a float array, got {x.dtype}")
    return x.astype(BF16).view(np.uint16)


def from_bits(u: np.ndarray) -> np.ndarray:
    """A uint16 array read as bfloat16 (a view). Raises TypeError for another dtype."""
    u = np.asarray(u)
    if u.dtype != np.uint16:
        raise TypeError(f"from_bits() takes uint16 bits, got {u.dtype}")
    return u.view(BF16)


def as_bf16(x) -> np.ndarray:
    """A host BF16 argument as bfloat16: uint16 bits viewed (:func:`from_bits`), any other
    array as it is (a reference or a check then sees its real dtype)."""
    x = np.asarray(x)
    return from_bits(x) if x.dtype == np.uint16 else x


def round_bf16(x) -> np.ndarray:
    """``x`` rounded to bfloat16 and widened back to float32 (what a kernel's narrow then widen
    stores): the inputs golden references should see."""
    return np.asarray(x, dtype=np.float32).astype(BF16).astype(np.float32)
