"""Chapter 6: an int8 GEMM ladder on the CPU (Numba), C = A @ B with int32 accumulation.

Every version has the signature ``gemm_vN(A, B, C)``: ``A`` (M, K) int8, ``B`` (K, N) int8,
``C`` (M, N) int32, written in place (previous contents never read; returns None); ``A`` and
``B`` are not modified. Results are exact whenever the true product fits int32 — always for
K <= :func:`kernellab.topics.quant.int32_safe_k` () = 131071 — whether a version accumulates in
int32 (two's-complement, modular: the true sum is the only int32 congruent to it) or, where
Numba types the product of two int32 scalars as int64, in int64 (exact outright).
The wrapper raises ``ValueError`` for non-2-D arrays, mismatched shapes, dtypes other than
int8/int8/int32, a read-only ``C`` or a ``C`` overlapping ``A``/``B``; ``TypeError`` when ``C``
is not a numpy array.

Versions::

    v1 naive        reference_kernels.quant.int8_gemm_naive compiled with numba.njit: i, j, k,
                    B walked down a column (stride N). LLVM also emits a vectorised copy of
                    the k loop guarded by a runtime check for unit stride, which only N = 1
                    takes: the vector instructions in v1's listing are that copy.
    v2 ikj          chapter 1's v2 loop order with int32 lanes: C's row i += int32(A[i, k]) *
                    int32(row k of B). LLVM sign-extends 16 bytes of B to int32 lanes
                    (vpmovsxbd) and multiplies with vpmulld: one int32 lane per product.
    v3 dot          B packed once per call as B^T (N, K) contiguous (for inference the weights
                    are packed offline), then each C element is a dot product of two contiguous
                    int8 rows — an integer *reduction*, which LLVM may reassociate freely. Its
                    x86 back end recognises sum(sext(a) * sext(b)) and emits vpmaddwd (int16
                    pairs multiplied and added into int32 lanes: two products per lane).
    v4 u8 x s8      A shifted to unsigned, a + 128 (a zero point of 128), so the products are
                    uint8 x int8 — the operand types of AVX-512 VNNI's vpdpbusd — and the
                    cross term 128 * sum_k B[k, j] (kernellab.topics.quant.cross_terms) subtracted
                    at the end. The u8 x s8 partial sums can exceed int32 where the s8 x s8 sum
                    does not; modular int32 arithmetic makes the final difference exact anyway.

Which instructions LLVM chose is printed by :func:`asm_report` (the chapter shows it for the
machine it runs on); on a Zen 4 core (LLVM 22 in llvmlite 0.50, Numba defaults) it is vpmulld for
v2, vpmovsxbw + vpmaddwd for v3 and vpdpwssd (VNNI's int16 dot product) for v4, on bytes widened to
int32 lanes (vpmovzxbd / vpmovsxbd), so each instruction does one useful product per lane of its
two — never vpdpbusd: the int8 VNNI instruction needs the bytes kept as bytes, and LLVM widens them
first.

Sources: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2 (VPDPBUSD,
VPDPWSSD, VPMADDWD, VPMULLD); oneDNN's documentation "Nuances of int8 computations" (the
u8 x s8 shift and its compensation term on x86); chapter 1's ladder,
:mod:`kernellab.kernels.gemm_cpu`.
"""

from __future__ import annotations

import re
from collections import OrderedDict

import numba
import numpy as np
from numba import njit

from kernellab.kernels._gemm_args import int8_gemm_operands
from kernellab.kernels.gemm_cpu import hot_loop
from kernellab.machine.fma_peak import ENCODING_PREFIX
from reference_kernels.quant import int8_gemm_naive

__all__ = ["gemm_v1", "gemm_v2", "gemm_v3", "gemm_v4", "LADDER", "int_ops", "count_int_ops",
           "kernel_asm", "asm_report", "INT_OPS"]


def _check(A, B, C):
    A, B, _ = int8_gemm_operands(A, B, C)
    return np.ascontiguousarray(A), np.ascontiguousarray(B)


_v1 = njit(cache=True)(int8_gemm_naive)


@njit(cache=True)
def _v2(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        crow = C[i]
        arow = A[i]
        for j in range(N):
            crow[j] = 0
        for k in range(K):
            a = np.int32(arow[k])
            brow = B[k]
            for j in range(N):
                crow[j] += a * np.int32(brow[j])


@njit(cache=True)
def _dot_rows(A, Bt, C):
    """C[i, j] = sum_k A[i, k] * Bt[j, k]: A int8 or uint8, Bt int8 (N, K), C int32."""
    M, K = A.shape
    N = Bt.shape[0]
    for i in range(M):
        arow = A[i]
        for j in range(N):
            brow = Bt[j]
            acc = np.int32(0)
            for k in range(K):
                acc += np.int32(arow[k]) * np.int32(brow[k])
            C[i, j] = acc


def _call_v1(A, B, C):
    _v1(A, B, C)


def _call_v2(A, B, C):
    _v2(A, B, C)


def _call_v3(A, B, C):
    _dot_rows(A, np.ascontiguousarray(B.T), C)


def _call_v4(A, B, C):
    Au = (A.view(np.uint8) ^ np.uint8(0x80))          # a + 128 as uint8 (flip the sign bit)
    _dot_rows(Au, np.ascontiguousarray(B.T), C)
    comp = (128 * B.sum(axis=0, dtype=np.int64)).astype(np.int64)
    C[...] = ((C.astype(np.int64) - comp[None, :] + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def _make(name, description, call, jitted, example):
    def kernel(A, B, C):
        A, B = _check(A, B, C)
        M, K = A.shape
        N = B.shape[1]
        if M == 0 or N == 0:
            return None
        if K == 0:
            C[...] = 0
            return None
        work = C if C.flags.c_contiguous else np.empty((M, N), np.int32)
        call(A, B, work)
        if work is not C:
            C[...] = work
        return None

    kernel.__name__ = kernel.__qualname__ = f"gemm_{name.split('_')[0]}"
    kernel.__doc__ = (f"{description}\n\nC = A @ B: A (M, K) int8, B (K, N) int8, C (M, N) "
                      "int32 written in place; returns None. Exact while the result fits int32. "
                      "Raises ValueError/TypeError as the module docstring says.")
    kernel.description = description
    kernel.ladder_name = name
    kernel.jitted = jitted
    kernel.example_args = example
    return kernel


def _ex(a_dtype):
    """Example arguments (A, B or B^T, C) for compiling a version's jitted loops."""
    def make():
        A = np.ones((8, 8), a_dtype)
        return (A, np.ones((8, 8), np.int8), np.empty((8, 8), np.int32))
    return make


gemm_v1 = _make("v1_naive",
                "naive i, j, k, scalar accumulator (int64: Numba widens int32 products)",
                _call_v1, _v1, _ex(np.int8))
gemm_v2 = _make("v2_ikj", "loop order i, k, j: int32 lanes, vectorised by LLVM", _call_v2, _v2,
                _ex(np.int8))
gemm_v3 = _make("v3_dot", "B packed as B^T: contiguous int8 dot products (an integer "
                "reduction)", _call_v3, _dot_rows, _ex(np.int8))
gemm_v4 = _make("v4_u8s8", "A shifted to uint8 (+128), u8 x s8 dot products, the zero-point "
                "cross term subtracted", _call_v4, _dot_rows, _ex(np.uint8))

#: name -> kernel ``f(A, B, C)``, in ladder order; each has a one-line ``description``.
LADDER = OrderedDict((k.ladder_name, k) for k in (gemm_v1, gemm_v2, gemm_v3, gemm_v4))


# ----------------------------------------------------------------------------------------------
# Looking at the assembly
# ----------------------------------------------------------------------------------------------

#: the x86 integer multiply / dot-product instructions an int8 GEMM can be built from, and what
#: each does per 32-bit lane (Intel SDM vol. 2): VNNI's vpdpbusd(s) (4 u8 x s8 products added
#: into an int32), vpdpwssd(s) (2 s16 x s16), AVX-512BW's vpmaddwd (2 s16 x s16, no accumulate)
#: and vpmaddubsw (2 u8 x s8 into a *saturating* int16: the pre-VNNI pitfall), vpmulld (1 int32
#: product) and vpmullw (int16).
INT_OPS = ("vpdpbusd", "vpdpbusds", "vpdpwssd", "vpdpwssds", "vpmaddwd", "vpmaddubsw",
           "vpmulld", "vpmullw")
_PRODUCTS_PER_LANE = {"vpdpbusd": 4, "vpdpbusds": 4, "vpdpwssd": 2, "vpdpwssds": 2,
                      "vpmaddwd": 2, "vpmaddubsw": 2, "vpmulld": 1, "vpmullw": 1}
_LANES = {"xmm": 4, "ymm": 8, "zmm": 16}
_INT_OP = re.compile(r"^\s*" + ENCODING_PREFIX + r"(" + "|".join(INT_OPS) + r")\b(.*)$")


def count_int_ops(asm: str) -> dict:
    """Count the :data:`INT_OPS` instructions in ``asm`` (AT&T text) by register width:
    ``{op: {"xmm": n, "ymm": n, "zmm": n}}`` for every op in INT_OPS (zeros included)."""
    out = {op: {"xmm": 0, "ymm": 0, "zmm": 0} for op in INT_OPS}
    for line in asm.splitlines():
        m = _INT_OP.match(line)
        if m:
            op, operands = m.groups()
            width = next((w for w in ("zmm", "ymm", "xmm") if f"%{w}" in operands), "xmm")
            out[op][width] += 1
    return out


def int_ops(lines) -> int:
    """Integer multiply capacity of ``lines`` (a list of assembly lines): each INT_OPS
    instruction weighted by the products it can do (products per 32-bit lane x lanes; a
    vpdpwssd on bytes widened to int32 does only half of them usefully). The work measure for
    :func:`kernellab.kernels.gemm_cpu.hot_loop`."""
    counts = count_int_ops("\n".join(lines))
    return sum(_PRODUCTS_PER_LANE[op] * _LANES[w] * n for op, ws in counts.items()
               for w, n in ws.items())


def kernel_asm(kernel) -> str:
    """Assembly (AT&T syntax) of a fresh, uncached compile of ``kernel``'s jitted loops (a
    :data:`LADDER` kernel), for its int8/uint8 example arguments, under the process's current
    code-generation settings (Numba cannot show the assembly of cached code). Raises TypeError
    for anything that is not a ladder kernel."""
    disp = getattr(kernel, "jitted", None)
    if disp is None or not hasattr(disp, "py_func"):
        raise TypeError(f"{kernel!r} is not a kernel of the int8 ladder")
    options = {k: v for k, v in disp.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(**options)(disp.py_func)
    fresh.compile(tuple(numba.typeof(a) for a in kernel.example_args()))
    return "\n".join(fresh.inspect_asm().values())


def asm_report(kernel) -> dict:
    """``{"hot_loop": text, "ops_hot": counts, "ops_total": counts, "vnni": bool}`` for a
    ladder kernel: its hot loop (the innermost loop with the most integer products, by
    :func:`int_ops`), :func:`count_int_ops` of that loop and of the whole function, and whether
    any VNNI instruction (vpdpbusd(s) or vpdpwssd(s)) appears anywhere in it."""
    asm = kernel_asm(kernel)
    loop = hot_loop(asm, work=int_ops)
    total = count_int_ops(asm)
    vnni = any(sum(total[op].values()) for op in ("vpdpbusd", "vpdpbusds", "vpdpwssd",
                                                  "vpdpwssds"))
    return {"hot_loop": loop, "ops_hot": count_int_ops(loop), "ops_total": total, "vnni": vnni}
