"""Chapter 6: an int8 GEMM on CUDA cores with ``dp4a``, next to chapter 2's FP32 tiled GEMM.

``dp4a(a, b, c)`` (sm_61 and later; PTX ISA, "Integer Arithmetic Instructions: dp4a") adds the
four byte products of two 32-bit words to a 32-bit accumulator: four int8 multiply-adds in one
instruction, where an FP32 FMA does one. numba-cuda has no ``dp4a``; ``kernellab.cuda_ext``
adds it for the gpu tier and the sim tier's engine evaluates it (``kernellab.sim.engine.dp4a``).

:func:`gemm_dp4a` is chapter 2's v3 (``kernellab.kernels.gemm_cuda``: 16 x 16 threads, one C
element each, 16 x 16 tiles staged in shared memory) with every float replaced by a word of
four int8 values along k:

* A (M, K) int8 is used as it lies: a row of K bytes *is* a row of K/4 int32 words
  (:func:`pack_a`, K padded with zeros to a multiple of 4);
* B (K, N) int8 is packed once, offline like any weight layout, into B4 (K/4, N) int32 whose
  word (w, j) holds B[4w .. 4w+3, j] (:func:`pack_b`: a k-interleaved "COL4"-style layout), so
  that the tile loads of B4 are coalesced along j exactly as chapter 2's loads of B are;
* each step of the k loop stages a 16 x 16 tile of words (64 values of k, not 16) and does
  16 ``dp4a``; C (M, N) is int32.

Same threads, same access pattern, same number of load instructions per tile — but a tile
covers four times as much of k, so the kernel issues a quarter of the FP32 kernel's global
loads and moves a quarter of its bytes for A and B (C, int32 or float32, is the same 4 bytes an
element). The sim tier's counters show it (tests/test_kernellab/kernels/test_int8_ladders.py checks
it exactly).
Byte order: dp4a's byte 0 is the least significant; packing views int8 memory as int32 on a
little-endian host (raises RuntimeError on a big-endian one).

Sources: NVIDIA, "Mixed-Precision Programming with CUDA 8" (2016; dp4a/dp2a on Pascal);
PTX ISA (dp4a); chapter 2's module for the tiling.
"""

from __future__ import annotations

import sys

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, int32

from kernellab.kernels._gemm_args import int8_gemm_operands
from kernellab.kernels.gemm_cuda import TILE

__all__ = ["gemm_dp4a", "gemm_dp4a_kernel", "pack_a", "pack_b", "launch_config", "TILE"]


def _little_endian():
    if sys.byteorder != "little":
        raise RuntimeError("packing int8 into dp4a words assumes a little-endian host")


def pack_a(A: np.ndarray) -> np.ndarray:
    """A (M, K) int8 -> (M, ceil(K/4)) int32: each row's bytes, zero-padded to a multiple of 4,
    read as words (word w holds A[i, 4w .. 4w+3], A[i, 4w] in the low byte). Raises
    ValueError unless A is 2-D int8."""
    _little_endian()
    A = np.asarray(A)
    if A.ndim != 2 or A.dtype != np.int8:
        raise ValueError(f"A must be 2-D int8, got {A.dtype} {A.shape}")
    M, K = A.shape
    KW = -(-K // 4)
    out = np.zeros((M, 4 * KW), np.int8)
    out[:, :K] = A
    return out.view(np.int32)


def pack_b(B: np.ndarray) -> np.ndarray:
    """B (K, N) int8 -> B4 (ceil(K/4), N) int32 with word (w, j) holding B[4w .. 4w+3, j]
    (B[4w, j] in the low byte), K zero-padded to a multiple of 4. Raises ValueError unless B is
    2-D int8."""
    _little_endian()
    B = np.asarray(B)
    if B.ndim != 2 or B.dtype != np.int8:
        raise ValueError(f"B must be 2-D int8, got {B.dtype} {B.shape}")
    K, N = B.shape
    KW = -(-K // 4)
    pad = np.zeros((4 * KW, N), np.int8)
    pad[:K] = B
    return np.ascontiguousarray(pad.reshape(KW, 4, N).transpose(0, 2, 1)).view(np.int32) \
        .reshape(KW, N)


@cuda.jit
def gemm_dp4a_kernel(A4, B4, C):
    # One allocation per line (the stock simulator shares a buffer between two on one line).
    As = cuda.shared.array((TILE, TILE), int32)
    Bs = cuda.shared.array((TILE, TILE), int32)
    M = A4.shape[0]
    KW = A4.shape[1]
    N = B4.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = int32(0)
    for w0 in range(0, KW, TILE):          # 16 words = 64 values of k per step
        wa = w0 + tx
        if i < M and wa < KW:
            As[ty, tx] = A4[i, wa]
        else:
            As[ty, tx] = int32(0)
        wb = w0 + ty
        if wb < KW and j < N:
            Bs[ty, tx] = B4[wb, j]
        else:
            Bs[ty, tx] = int32(0)
        cuda.syncthreads()
        for kk in range(TILE):
            acc = cuda.dp4a(As[ty, kk], Bs[kk, tx], acc)   # 4 int8 MACs
        cuda.syncthreads()
    if i < M and j < N:
        C[i, j] = acc


def launch_config(M: int, N: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) of :func:`gemm_dp4a` for C (M, N): blocks of TILE x TILE threads, grid.x
    over the columns, grid.y over the rows (chapter 2's v3)."""
    return (-(-int(N) // TILE), -(-int(M) // TILE)), (TILE, TILE)


def gemm_dp4a(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C = A @ B with ``dp4a``: A (M, K) int8, B (K, N) int8, C (M, N) int32 numpy, written in
    place (returns None); exact while the result fits int32 (K <= 131071 always suffices).
    Packs A and B (:func:`pack_a`, :func:`pack_b`), copies them to the device, launches
    :data:`gemm_dp4a_kernel` and copies C back. Raises ValueError for bad shapes or dtypes, a
    read-only C, or a C overlapping A/B; TypeError if C is not a numpy array."""
    A, B, (M, N, K) = int8_gemm_operands(A, B, C)
    if M == 0 or N == 0:
        return None
    if K == 0:
        C[...] = 0
        return None
    work = np.ascontiguousarray(C)
    dC = cuda.to_device(work)
    grid, block = launch_config(M, N)
    gemm_dp4a_kernel[grid, block](cuda.to_device(pack_a(A)), cuda.to_device(pack_b(B)), dC)
    dC.copy_to_host(work)
    if work is not C:
        C[...] = work
    return None
