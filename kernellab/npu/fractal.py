"""Fractal layouts of the cube's buffers: how a matrix is stored, byte for byte, in L1, L0A,
L0B and L0C.

A fractal is a ``fr x fc`` block of 512 B (L0C: 16 x 16 elements). Two letters name a layout
(Ascend C API reference, Mmad, ``atlasascendc_api_07_0249``, "数据排布格式"): the first says
how the fractals follow one another, the second how the elements inside one do; ``Z`` is
row-major, ``N`` column-major.

====== ============================== ================================================
layout fractals (big letter)          inside a fractal (small letter)
====== ============================== ================================================
NZ     column-major (大N)             row-major (小z): L1 after ND->NZ, L0C (C)
ZZ     row-major (大Z)                row-major (小z): L0A (A), 16 x 32 B fractals
ZN     row-major (大Z)                column-major (小n): L0B (B), 32 B x 16 fractals
====== ============================== ================================================

The Mmad page's own 4 x 4 example with 2 x 2 fractals fixes the orders (the element ids in
memory order): A (ZZ) 0,1,4,5,2,3,6,7,8,9,12,13,10,11,14,15; B (ZN)
0,4,1,5,2,6,3,7,8,12,9,13,10,14,11,15; C (NZ) 0,1,4,5,8,9,12,13,2,3,6,7,10,11,14,15
(``tests/test_kernellab/npu/test_npu_fractal.py`` checks :func:`encode` against them).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LAYOUTS", "encode", "decode", "fractal_shape"]

# layout -> axis order of the (R1, fr, C1, fc) view in memory
_ORDER = {"ZZ": (0, 2, 1, 3), "NZ": (2, 0, 1, 3), "ZN": (0, 2, 3, 1)}
LAYOUTS = tuple(_ORDER)


def fractal_shape(layout: str, itemsize: int, where: str) -> tuple[int, int]:
    """``(rows, cols)`` of one fractal: ``16 x (32 B / itemsize)`` for NZ and ZZ, ``(32 B /
    itemsize) x 16`` for ZN (B in L0B: 16 x 16 fp16, 32 x 16 int8), ``16 x 16`` in L0C."""
    c0 = 32 // itemsize
    if where == "L0C":
        return 16, 16
    return (c0, 16) if layout == "ZN" else (16, c0)


def encode(mat: np.ndarray, layout: str, fr: int, fc: int) -> np.ndarray:
    """The 1-D memory image of ``mat`` (R x C, R a multiple of ``fr``, C of ``fc``) in
    ``layout``."""
    R, C = mat.shape
    v = mat.reshape(R // fr, fr, C // fc, fc)
    return np.ascontiguousarray(v.transpose(_ORDER[layout])).reshape(-1)


def decode(flat: np.ndarray, layout: str, rows: int, cols: int, fr: int, fc: int) -> np.ndarray:
    """The R x C matrix whose memory image in ``layout`` is ``flat`` (inverse of
    :func:`encode`)."""
    r1, c1 = rows // fr, cols // fc
    shape = {"ZZ": (r1, c1, fr, fc), "NZ": (c1, r1, fr, fc), "ZN": (r1, c1, fc, fr)}[layout]
    v = flat[:rows * cols].reshape(shape)
    back = np.argsort(_ORDER[layout])
    return v.transpose(back).reshape(rows, cols)
