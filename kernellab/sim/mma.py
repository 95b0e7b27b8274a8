"""The warp-level matrix instructions of sm_80 as the PTX ISA defines them: fragment layouts,
``mma.m16n8k16`` with float32 accumulation, ``ldmatrix``. Pure numpy: the sim tier's warp
collectives (:mod:`kernellab.sim.scheduler`) evaluate them here, tests check them against the
ISA's tables, and chapter 2 draws them.

Sources: NVIDIA PTX ISA 8.x, "Warp-level Matrix Multiply-Accumulate Instructions" --
"Matrix Fragments for mma.m16n8k16 with floating point type" (which lane holds which element
of A, B, C and D) and "ldmatrix" (which lane receives which elements of each 8 x 8 matrix).

Registers: a ``.f16x2``/``.bf16x2`` register is a uint32 holding two 16-bit elements, the first
(lower index) in the low half. With ``groupID = lane >> 2`` and ``tig = lane % 4`` (the
thread's index in its group of four):

* A (16 x 16, row major), 4 registers a lane, elements a0..a7: row ``groupID`` for a0, a1, a4,
  a5 and ``groupID + 8`` for a2, a3, a6, a7; column ``2 tig + (i & 1)``, plus 8 for a4..a7.
* B (16 x 8, "col": indexed [k, n]), 2 registers, b0..b3: row k ``2 tig + (i & 1)``, plus 8
  for b2, b3; column n ``groupID``.
* C, D (16 x 8, float32), 4 values c0..c3: row ``groupID`` for c0, c1 and ``groupID + 8`` for
  c2, c3; column ``2 tig + (i & 1)``.
* ``ldmatrix`` (m8n8, 16-bit elements): lanes ``8j .. 8j + 7`` give the addresses of rows
  0..7 of matrix j; every lane receives register j holding row ``groupID``, columns
  ``2 tig, 2 tig + 1`` of matrix j; with ``.trans``, rows ``2 tig, 2 tig + 1`` of column
  ``groupID`` (the matrix transposed).

Arithmetic: the products of FP16 or BF16 inputs are exact in float32 (11- or 8-bit
significands). The ISA does not give the order or the internal precision of the sum; the sim
tier forms ``c + sum_k a[m, k] b[k, n]`` in float64 and rounds once to float32, a result within
float32 accumulation's error bound (the tolerance the labs use).
"""

from __future__ import annotations

import numpy as np

__all__ = ["KINDS", "a_coords", "b_coords", "c_coords", "ldmatrix_coords", "pack", "unpack",
           "mma_m16n8k16", "ldmatrix"]

#: input kinds of ``mma.m16n8k16`` with float32 accumulation -> the numpy dtype of an element
KINDS = {"f16": np.dtype(np.float16)}
try:
    import ml_dtypes as _ml

    KINDS["bf16"] = np.dtype(_ml.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency of the course
    pass

WARP = 32


def a_coords(lane: int) -> list[tuple[int, int]]:
    """(row, col) of A's elements a0..a7 that ``lane`` holds (registers a0a1, a2a3, a4a5,
    a6a7)."""
    g, t = lane >> 2, lane % 4
    return [(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)) for i in range(8)]


def b_coords(lane: int) -> list[tuple[int, int]]:
    """(k, n) of B's elements b0..b3 that ``lane`` holds (registers b0b1, b2b3)."""
    g, t = lane >> 2, lane % 4
    return [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)]


def c_coords(lane: int) -> list[tuple[int, int]]:
    """(row, col) of C's (and D's) elements c0..c3 that ``lane`` holds."""
    g, t = lane >> 2, lane % 4
    return [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]


def ldmatrix_coords(lane: int, trans: bool = False) -> list[tuple[int, int]]:
    """(row, col) within each 8 x 8 matrix of the two elements of the register ``lane``
    receives from it (the same for every matrix)."""
    g, t = lane >> 2, lane % 4
    if trans:
        return [(2 * t, g), (2 * t + 1, g)]
    return [(g, 2 * t), (g, 2 * t + 1)]


def pack(lo, hi) -> np.ndarray:
    """uint32 registers from the bits of two 16-bit arrays (``lo`` the first element)."""
    lo = np.asarray(lo)
    hi = np.asarray(hi)
    return (lo.view(np.uint16).astype(np.uint32)
            | (hi.view(np.uint16).astype(np.uint32) << np.uint32(16)))


def unpack(regs, dtype) -> np.ndarray:
    """The two 16-bit elements of each uint32 register, as ``dtype``: shape ``regs.shape +
    (2,)``."""
    r = np.asarray(regs, np.uint64).astype(np.uint32)
    halves = np.stack([r & 0xFFFF, r >> 16], axis=-1).astype(np.uint16)
    return halves.view(np.dtype(dtype))


def _index_tables():
    lanes = range(WARP)
    a = np.array([a_coords(ln) for ln in lanes])        # (32, 8, 2)
    b = np.array([b_coords(ln) for ln in lanes])        # (32, 4, 2)
    c = np.array([c_coords(ln) for ln in lanes])        # (32, 4, 2)
    return a, b, c


_A_IDX, _B_IDX, _C_IDX = _index_tables()


def mma_m16n8k16(a, b, c, kind: str = "f16", scale: float = 1.0) -> np.ndarray:
    """D = A @ B + C of one warp: ``a`` (32, 4) uint32, ``b`` (32, 2) uint32, ``c`` (32, 4)
    float32 (each lane's registers, lane-major); returns D as (32, 4) float32 in C's layout.
    ``kind``: ``"f16"`` or ``"bf16"``. A NaN or infinity in the inputs propagates as IEEE
    arithmetic gives it. ``scale`` (not an ISA operand: a grader's probe, the sim option
    ``mma_scale``) multiplies the product term: D = scale * A @ B + C."""
    if kind not in KINDS:
        raise ValueError(f"mma kind {kind!r}: expected one of {sorted(KINDS)}")
    dt = KINDS[kind]
    A = np.empty((16, 16), np.float64)
    B = np.empty((16, 8), np.float64)
    C = np.empty((16, 8), np.float64)
    A[_A_IDX[..., 0], _A_IDX[..., 1]] = unpack(a, dt).reshape(WARP, 8).astype(np.float64)
    B[_B_IDX[..., 0], _B_IDX[..., 1]] = unpack(b, dt).reshape(WARP, 4).astype(np.float64)
    C[_C_IDX[..., 0], _C_IDX[..., 1]] = np.asarray(c, np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        D = (scale * (A @ B) + C).astype(np.float32)
    return D[_C_IDX[..., 0], _C_IDX[..., 1]]


def ldmatrix(rows, trans: bool = False) -> np.ndarray:
    """What each lane receives from ``ldmatrix``: ``rows`` (nmat * 8, 8) uint16, row r of
    matrix j at ``rows[8 j + r]`` (the 16 bytes lane ``8 j + r`` pointed at); returns (32,
    nmat) uint32."""
    rows = np.asarray(rows).view(np.uint16)
    nmat = rows.shape[0] // 8
    out = np.empty((WARP, nmat), np.uint32)
    for lane in range(WARP):
        (r0, c0), (r1, c1) = ldmatrix_coords(lane, trans)
        for j in range(nmat):
            m = rows[8 * j: 8 * j + 8]
            out[lane, j] = int(m[r0, c0]) | (int(m[r1, c1]) << 16)
    return out
