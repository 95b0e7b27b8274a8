"""Chapter 1: the CPU GEMM kernel ladder, C = A @ B, every version side by side.

In the style of llm.c's ``dev/cuda`` kernels: one module, one harness, each version a small step
from the one before. All versions have the signature ``gemm_vN(A, B, C)``:

* ``A`` (M, K), ``B`` (K, N), ``C`` (M, N); one dtype, float32 or float64; M, N, K >= 0.
* ``C`` is the caller's output array, written in place (any previous contents, NaN included,
  are never read); the function returns None. ``A`` and ``B`` are not modified.
* Accumulation is in the input dtype (fp32 for fp32), in the loop order of each version.
* A thin Python wrapper checks the arguments and raises ``ValueError`` for non-2-D arrays,
  mismatched shapes, mixed or unsupported dtypes, a read-only ``C`` or a ``C`` that overlaps
  ``A``/``B``, and ``TypeError`` when ``C`` is not a numpy array. Non-contiguous ``A``/``B`` are
  copied to C order (one compiled specialisation per dtype); a non-contiguous ``C`` is computed
  into a temporary and copied in.

Versions (what each one changes; GFLOP/s and % of numpy: ``make bench``)::

    v1 naive ijk       reference_kernels.gemm.gemm_naive compiled with numba.njit: for i, for j,
                       dot product over k. The inner loop walks B down a column (stride N), so
                       every B load touches a new cache line; scalar code.
    v2 ikj             loop order i, k, j: C's row i is updated with A[i,k] * (row k of B). The
                       inner loop streams a row of B and a row of C with stride 1, so LLVM's loop
                       vectoriser turns it into vector FMAs (fastmath={'contract'} from here on:
                       a*b+c may be fused, nothing is reordered). Single thread.
    v3 blocked         v2 inside the BLIS loop structure (jc/pc/ic blocks of NC3 x KC3 x MC3,
                       Van Zee & van de Geijn 2015, §3) over row views: the KC3 x NC3 block of B
                       is reused from L2 by every row of A instead of streaming all of B from
                       memory for each row. Still no register blocking: each C element is loaded
                       and stored once per k, and that, not B's traffic, bounds the inner loop
                       once B fits the last-level cache, so v3 gains little over v2: the case
                       for v4's register tile. Single thread.
    v4 packed          the BLIS algorithm: A's mc x kc block is packed into mr-row slivers and
                       B's kc x nc panel into nr-column slivers (contiguous, zero-padded at ragged
                       edges), and an mr x nr register micro-kernel (6 x 64 fp32 / 6 x 32 fp64:
                       384 / 192 unrolled scalar accumulators that LLVM's SLP vectoriser maps onto
                       24 zmm registers) does kc rank-1 updates per tile: 6 broadcasts + 4 loads
                       of B feed 24 FMAs, so the FMA units rather than loads set the pace.
                       Accumulators go to a flat scratch tile, then to C (clipped at the edges).
                       Unsigned (uint64) indices everywhere: with signed ones, Numba's
                       negative-index wraparound (a select per index) turns the 4 vector loads of
                       B into 8 gathers. Single thread.
    v5 threads         v4 with the (M, N) output split into one block per thread (M first, in
                       whole mr slivers; N too when M has fewer slivers than there are threads),
                       each thread packing its own panels (numba prange). Splitting M, each
                       thread packs half of A and all of B (contiguous copies) rather than all
                       of A (strided stores).

v4/v5 need the ``fast_gemm`` code-generation profile (:mod:`kernellab.codegen`: SLP vectoriser
on, 512-bit vectors allowed) to be fast; under Numba's defaults the micro-kernel stays scalar.
They are correct under both.

Also here: :data:`LADDER` (name -> kernel, each with a one-line ``description``),
:func:`gemm_flops`, and :func:`kernel_asm` / :func:`hot_loop` / :func:`count_fma` to show the
assembly LLVM emitted for a version's innermost loop and count its FMA instructions by
register width — how the way a loop is written decides what LLVM emits.

Sources: K. Goto and R. A. van de Geijn, "Anatomy of high-performance matrix multiplication",
ACM TOMS 34(3), 2008 (packing, the micro-kernel, choosing kc/mc from the cache sizes);
F. G. Van Zee and R. A. van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
Functionality", ACM TOMS 41(3), 2015, §3 (the five loops around the micro-kernel: jc over nc,
pc over kc, ic over mc, jr over nr, ir over mr).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit, prange
from numba.extending import overload

from kernellab.machine.fma_peak import ENCODING_PREFIX
from reference_kernels.gemm import gemm_naive

from kernellab.kernels._gemm_args import gemm_shapes

__all__ = ["gemm_v1", "gemm_v2", "gemm_v3", "gemm_v4", "gemm_v5", "LADDER", "gemm_flops",
           "BLOCKING", "Blocking", "micro_kernel_source", "kernel_asm", "hot_loop", "count_fma",
           "count_fp_ops", "asm_report"]

_U = np.uint64  # index type of v4/v5 (see the module docstring)


def gemm_flops(M: int, N: int, K: int) -> int:
    """Floating-point operations of C = A @ B with A (M, K), B (K, N): 2*M*N*K."""
    return 2 * int(M) * int(N) * int(K)


# ----------------------------------------------------------------------------------------------
# Harness: argument checks shared by every version
# ----------------------------------------------------------------------------------------------

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check(A, B, C):
    """Validate and normalise the arguments; return (A, B, C_work, C), A, B, C_work C-ordered."""
    if not isinstance(C, np.ndarray):
        raise TypeError(f"C must be a numpy array (it is written in place), got {type(C).__name__}")
    A = np.asarray(A)
    B = np.asarray(B)
    M, N, K = gemm_shapes(A, B, C)
    if A.dtype not in _DTYPES:
        raise ValueError(f"dtype {A.dtype} is not supported: use float32 or float64")
    if B.dtype != A.dtype or C.dtype != A.dtype:
        raise ValueError(f"dtypes differ: A {A.dtype}, B {B.dtype}, C {C.dtype} "
                         "(C's dtype must equal A's and B's)")
    if not C.flags.writeable:
        raise ValueError("C is read-only")
    if np.may_share_memory(C, A) or np.may_share_memory(C, B):
        raise ValueError("C must not overlap A or B")
    A = np.ascontiguousarray(A)
    B = np.ascontiguousarray(B)
    work = C if C.flags.c_contiguous else np.empty((M, N), C.dtype)
    return A, B, work, C


def _ladder_kernel(name: str, description: str, call, jitted):
    """Wrap ``call(A, B, C)`` (C-ordered arrays, M, N, K >= 1) in the checking wrapper."""

    def kernel(A, B, C):
        A, B, work, C = _check(A, B, C)
        M, K = A.shape
        N = B.shape[1]
        if M == 0 or N == 0:
            return None
        if K == 0:
            C[...] = 0
            return None
        call(A, B, work)
        if work is not C:
            C[...] = work
        return None

    kernel.__name__ = kernel.__qualname__ = f"gemm_{name.split('_')[0]}"
    kernel.__doc__ = (f"{description}\n\nC = A @ B into the caller's C: A (M, K), B (K, N), "
                      "C (M, N), all float32 or all float64; returns None. Raises ValueError "
                      "for bad shapes/dtypes (see the module docstring), TypeError if C is not "
                      "an ndarray.")
    kernel.description = description
    kernel.ladder_name = name
    kernel.jitted = jitted  # the njit dispatcher whose loops are the hot ones (for kernel_asm)
    return kernel


# ----------------------------------------------------------------------------------------------
# v1: naive ijk (the reference's baseline, compiled here so reference_kernels stays numpy-only)
# ----------------------------------------------------------------------------------------------

_gemm_v1 = njit(cache=True)(gemm_naive)


# ----------------------------------------------------------------------------------------------
# v2: loop order ikj
# ----------------------------------------------------------------------------------------------

@njit(cache=True, fastmath={"contract"})
def _gemm_v2(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        crow = C[i]          # row views: 1-D, stride 1, so the j loop vectorises
        arow = A[i]
        for j in range(N):
            crow[j] = 0
        for k in range(K):
            a = arow[k]
            brow = B[k]
            for j in range(N):
                crow[j] += a * brow[j]


# ----------------------------------------------------------------------------------------------
# v3: BLIS loop structure over row views, no packing
# ----------------------------------------------------------------------------------------------

#: v3's blocks: a KC3 x NC3 block of B (512 KiB in fp32) stays in L2 while MC3 rows of A use it.
NC3, KC3, MC3 = 1024, 128, 64


@njit(cache=True, fastmath={"contract"})
def _gemm_v3(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    for jc in range(0, N, NC3):                  # loop 5: nc columns of B and C
        jn = min(NC3, N - jc)
        for pc in range(0, K, KC3):              # loop 4: kc-deep slab of A and B
            pk = min(KC3, K - pc)
            for ic in range(0, M, MC3):          # loop 3: mc rows of A and C
                for i in range(ic, min(ic + MC3, M)):
                    crow = C[i, jc:jc + jn]
                    arow = A[i]
                    if pc == 0:
                        for j in range(jn):
                            crow[j] = 0
                    for k in range(pc, pc + pk):
                        a = arow[k]
                        brow = B[k, jc:jc + jn]
                        for j in range(jn):
                            crow[j] += a * brow[j]


# ----------------------------------------------------------------------------------------------
# v4/v5: packed panels + register micro-kernel
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Blocking:
    """Block sizes of v4/v5 for one dtype (Goto & van de Geijn 2008 §6; BLIS §3).

    mr x nr: the register tile (mr * nr / lanes vector accumulators); kc: depth of a packed
    panel (an mr x kc sliver of A stays in L1, the kc x nr sliver of B streams from L2);
    mc: rows of A packed at a time (mc x kc in L2); nc: columns of B packed at a time.
    """

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int

    def __post_init__(self):
        if self.mc % self.mr:
            raise ValueError("mc must be a multiple of mr")


#: mr x nr fills the 32 zmm registers with accumulators (6 x 64 fp32 = 24 registers, plus B's
#: loads and A's broadcasts); kc and mc were chosen by a timing sweep (mr x nr in 6x64, 12x32,
#: 8x48, 4x96; kc 256..1024; mc 48..240; fp32 N=1024) on a Zen 4 core (32 KiB L1d, 1 MiB L2)
#: when the ladder was written. The repository does not re-run that sweep: on another core,
#: edit this table and compare with ``make bench``.
BLOCKING = {
    np.dtype(np.float32): Blocking(mr=6, nr=64, kc=1024, mc=96, nc=4096),
    np.dtype(np.float64): Blocking(mr=6, nr=32, kc=512, mc=96, nc=2048),
}


def micro_kernel_source(dtype=np.float32) -> str:
    """Python source of the mr x nr micro-kernel for ``dtype`` (generated; see :data:`BLOCKING`).

    ``uk(kc, Ap, aoff, Bp, boff, T)``: for k in 0..kc-1, the mr values of A at
    ``Ap[aoff + k*mr : ... + mr]`` times the nr values of B at ``Bp[boff + k*nr : ... + nr]``
    are accumulated into mr*nr scalar accumulators ``c{i}_{j}``, which are finally stored to the
    flat scratch tile ``T`` (row-major mr x nr). Written out as scalars because Numba has no
    vector type: LLVM's SLP vectoriser turns each row's nr accumulators into nr/lanes vector
    registers and each k step into mr broadcasts, nr/lanes loads and mr*nr/lanes FMAs.
    All indices are uint64 (``U(...)``).
    """
    p = BLOCKING[np.dtype(dtype)]
    mr, nr = p.mr, p.nr
    name = np.dtype(dtype).name
    lines = ["def uk(kc, Ap, aoff, Bp, boff, T):",
             f"    # {mr} x {nr} {name} micro-kernel, generated by "
             "kernellab.kernels.gemm_cpu.micro_kernel_source",
             f"    z = np.{name}(0)"]
    for i in range(mr):
        lines.append("    " + ", ".join(f"c{i}_{j}" for j in range(nr)) + " = "
                     + ", ".join("z" for _ in range(nr)))
    lines += ["    for k in range(kc):",
              f"        pa = aoff + k * U({mr})",
              f"        pb = boff + k * U({nr})"]
    lines += [f"        a{i} = Ap[pa + U({i})]" for i in range(mr)]
    lines += [f"        b{j} = Bp[pb + U({j})]" for j in range(nr)]
    for i in range(mr):
        lines += [f"        c{i}_{j} += a{i} * b{j}" for j in range(nr)]
    for i in range(mr):
        lines += [f"    T[U({i * nr + j})] = c{i}_{j}" for j in range(nr)]
    return "\n".join(lines) + "\n"


def _compile_source(src: str, tag: str):
    import linecache

    filename = f"<kernellab.gemm_cpu.{tag}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = {"np": np, "U": _U}
    exec(compile(src, filename, "exec"), namespace)
    return namespace["uk"]


def _microkernel(kc, Ap, aoff, Bp, boff, T):  # pragma: no cover - replaced by the overload
    """Stub resolved at compile time to the generated kernel for Ap's dtype."""
    raise NotImplementedError("only callable from Numba-compiled code")


@overload(_microkernel, jit_options={"fastmath": {"contract"}})
def _microkernel_overload(kc, Ap, aoff, Bp, boff, T):
    dtype = np.dtype(Ap.dtype.name)
    if dtype not in BLOCKING:
        return None
    return _compile_source(micro_kernel_source(dtype), f"uk_{dtype.name}")


def _blocking(A):  # pragma: no cover - replaced by the overload
    raise NotImplementedError("only callable from Numba-compiled code")


@overload(_blocking)
def _blocking_overload(A):
    p = BLOCKING.get(np.dtype(A.dtype.name))
    if p is None:
        return None
    mr, nr, kc, mc, nc = p.mr, p.nr, p.kc, p.mc, p.nc

    def impl(A):
        return _U(mr), _U(nr), _U(kc), _U(mc), _U(nc)
    return impl


@njit(cache=True, fastmath={"contract"})
def _packed_buffers(A, m0, m1, n0, n1):
    """Packing buffers for C[m0:m1, n0:n1]: A block, B panel, scratch tile."""
    mr, nr, kcmax, mcmax, ncmax = _blocking(A)
    K = _U(A.shape[1])
    kc = min(kcmax, K)
    mc = min(mcmax, m1 - m0)
    nc = min(ncmax, n1 - n0)
    # Whole slivers: the last one is zero-padded when mc (nc) is not a multiple of mr (nr).
    Ap = np.empty(((mc + mr - _U(1)) // mr) * mr * kc, A.dtype)
    Bp = np.empty(((nc + nr - _U(1)) // nr) * nr * kc, A.dtype)
    T = np.empty(mr * nr, A.dtype)
    return Ap, Bp, T


@njit(cache=True, fastmath={"contract"})
def _gemm_block(A, B, C, m0, m1, n0, n1, Ap, Bp, T):
    """C[m0:m1, n0:n1] = A[m0:m1] @ B[:, n0:n1] with packing (uint64 bounds, all >= 0)."""
    K = _U(A.shape[1])
    mr, nr, kcmax, mcmax, ncmax = _blocking(A)
    zero = C.dtype.type(0)
    one = _U(1)
    for jc in range(n0, n1, ncmax):                       # loop 5 (BLIS): nc columns
        nc = min(ncmax, n1 - jc)
        nbs = (nc + nr - one) // nr                       # B slivers in this panel
        for pc in range(_U(0), K, kcmax):                 # loop 4: kc-deep panels
            kc = min(kcmax, K - pc)
            # Pack B[pc:pc+kc, jc:jc+nc] into slivers of kc x nr, row k of a sliver contiguous.
            for k in range(kc):
                brow = B[pc + k]
                for t in range(nbs):
                    dst = t * nr * kc + k * nr
                    j0 = jc + t * nr
                    if j0 + nr <= n1:
                        for j in range(nr):
                            Bp[dst + j] = brow[j0 + j]
                    else:                                 # ragged last sliver: zero-pad
                        for j in range(nr):
                            Bp[dst + j] = brow[j0 + j] if j0 + j < n1 else zero
            for ic in range(m0, m1, mcmax):               # loop 3: mc rows
                mc = min(mcmax, m1 - ic)
                nas = (mc + mr - one) // mr               # A slivers in this block
                # Pack A[ic:ic+mc, pc:pc+kc] into slivers of mr x kc, column k contiguous.
                for s in range(nas):
                    dst = s * mr * kc
                    for i in range(mr):
                        r = ic + s * mr + i
                        if r < ic + mc:
                            arow = A[r]
                            for k in range(kc):
                                Ap[dst + k * mr + i] = arow[pc + k]
                        else:                             # ragged last sliver: zero-pad
                            for k in range(kc):
                                Ap[dst + k * mr + i] = zero
                for t in range(nbs):                      # loop 2: nr-wide slivers of B
                    j0 = jc + t * nr
                    nre = min(nr, n1 - j0)
                    for s in range(nas):                  # loop 1: mr-high slivers of A
                        i0 = ic + s * mr
                        mre = min(mr, ic + mc - i0)
                        _microkernel(kc, Ap, s * mr * kc, Bp, t * nr * kc, T)
                        # Write back the valid mre x nre part of the tile.
                        for i in range(mre):
                            crow = C[i0 + i]
                            trow = i * nr
                            if pc == _U(0):
                                for j in range(nre):
                                    crow[j0 + j] = T[trow + j]
                            else:
                                for j in range(nre):
                                    crow[j0 + j] += T[trow + j]


def _gemm_v4(A, B, C):
    M = _U(A.shape[0])
    N = _U(B.shape[1])
    Ap, Bp, T = _packed_buffers(A, _U(0), M, _U(0), N)
    _gemm_block(A, B, C, _U(0), M, _U(0), N, Ap, Bp, T)


@njit(cache=True, parallel=True, fastmath={"contract"})
def _gemm_v5(A, B, C, nthreads):
    M = _U(A.shape[0])
    N = _U(B.shape[1])
    mr, nr, kcmax, mcmax, ncmax = _blocking(A)
    one = _U(1)
    nbn = (N + nr - one) // nr                            # nr slivers across N
    nbm = (M + mr - one) // mr                            # mr slivers down M
    threads = _U(max(1, nthreads))
    tm = min(threads, nbm)                                # split M first ...
    tn = min(max(one, threads // tm), nbn)                # ... then N with the threads left
    for task in prange(tm * tn):
        t = _U(task)
        ti = t // tn
        tj = t - ti * tn
        n0 = min(N, (tj * nbn // tn) * nr)
        n1 = min(N, ((tj + one) * nbn // tn) * nr)
        m0 = min(M, (ti * nbm // tm) * mr)
        m1 = min(M, ((ti + one) * nbm // tm) * mr)
        if n0 < n1 and m0 < m1:
            Ap, Bp, T = _packed_buffers(A, m0, m1, n0, n1)
            _gemm_block(A, B, C, m0, m1, n0, n1, Ap, Bp, T)


def _call_v5(A, B, C):
    _gemm_v5(A, B, C, numba.get_num_threads())


# ----------------------------------------------------------------------------------------------
# The ladder
# ----------------------------------------------------------------------------------------------

gemm_v1 = _ladder_kernel(
    "v1_naive", "naive ijk triple loop (reference_kernels.gemm.gemm_naive under numba.njit)",
    _gemm_v1, _gemm_v1)
gemm_v2 = _ladder_kernel(
    "v2_ikj", "loop order ikj: stream rows of B and C, vectorisable inner loop; 1 thread",
    _gemm_v2, _gemm_v2)
gemm_v3 = _ladder_kernel(
    "v3_blocked", f"v2 in BLIS nc/kc/mc blocks ({NC3}/{KC3}/{MC3}) over row views; 1 thread",
    _gemm_v3, _gemm_v3)
gemm_v4 = _ladder_kernel(
    "v4_packed", "packed A/B panels + 6x64 register micro-kernel (fp32), uint64 indices; "
    "1 thread", _gemm_v4, _gemm_block)
gemm_v5 = _ladder_kernel(
    "v5_threads", "v4 with the output split across threads (prange), M first",
    _call_v5, _gemm_block)

#: name -> kernel, in ladder order; each kernel has a one-line ``.description``.
LADDER: "OrderedDict[str, object]" = OrderedDict(
    (k.ladder_name, k) for k in (gemm_v1, gemm_v2, gemm_v3, gemm_v4, gemm_v5))


# ----------------------------------------------------------------------------------------------
# Looking at the assembly
# ----------------------------------------------------------------------------------------------

_EXAMPLE_ARGS = {
    "_gemm_block": lambda d: (np.ones((8, 8), d), np.ones((8, 8), d), np.empty((8, 8), d),
                              _U(0), _U(8), _U(0), _U(8), np.empty(1 << 16, d),
                              np.empty(1 << 16, d), np.empty(1 << 12, d)),
    "_gemm_v5": lambda d: (np.ones((8, 8), d), np.ones((8, 8), d), np.empty((8, 8), d), 1),
}


def kernel_asm(kernel, dtype=np.float32) -> str:
    """Assembly (AT&T syntax) of the compiled code holding ``kernel``'s hot loops, for ``dtype``.

    ``kernel`` is a ladder kernel (``gemm_v3`` or ``LADDER["v3_blocked"]``: its ``.jitted``
    dispatcher is used; for v4/v5 that is the packed block routine with the micro-kernel
    inlined) or any Numba dispatcher taking ``(A, B, C)``. Numba cannot show the assembly of
    code loaded from its on-disk cache, so this compiles a fresh, uncached copy under the
    process's current code-generation profile (seconds; longest for v4/v5's unrolled
    micro-kernel).
    """
    disp = getattr(kernel, "jitted", kernel)
    if not hasattr(disp, "py_func"):
        raise TypeError(f"{kernel!r} is neither a ladder kernel nor a Numba dispatcher")
    options = {k: v for k, v in disp.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(**options)(disp.py_func)
    d = np.dtype(dtype)
    make = _EXAMPLE_ARGS.get(disp.py_func.__name__)
    args = make(d) if make else (np.ones((8, 8), d), np.ones((8, 8), d), np.empty((8, 8), d))
    fresh.compile(tuple(numba.typeof(a) for a in args))
    return "\n".join(fresh.inspect_asm().values())


_FP_OP = re.compile(r"^\s*" + ENCODING_PREFIX
                    + r"(v?f?n?m(?:add|sub)\d*|v?mul|v?add)(ps|pd|ss|sd)\b(.*)$")


def count_fp_ops(asm: str) -> dict:
    """Count floating-point multiply/add instructions in ``asm`` by kind and register width.

    Returns ``{"fma": {...}, "mul": {...}, "add": {...}}``, each ``{"scalar", "xmm", "ymm",
    "zmm"}``: ``scalar`` for ``ss``/``sd`` forms, else the widest register operand (xmm = 128,
    ymm = 256, zmm = 512 bits).
    """
    out = {kind: {"scalar": 0, "xmm": 0, "ymm": 0, "zmm": 0} for kind in ("fma", "mul", "add")}
    for line in asm.splitlines():
        m = _FP_OP.match(line)
        if not m:
            continue
        op, form, operands = m.groups()
        kind = "fma" if ("madd" in op or "msub" in op) else ("mul" if "mul" in op else "add")
        if form in ("ss", "sd"):
            width = "scalar"
        else:
            width = next((w for w in ("zmm", "ymm", "xmm") if f"%{w}" in operands), "xmm")
        out[kind][width] += 1
    return out


def count_fma(asm: str) -> dict:
    """Vector (and scalar) FMA instructions in ``asm`` by register width:
    ``{"scalar": n, "xmm": n, "ymm": n, "zmm": n}``."""
    return count_fp_ops(asm)["fma"]


def _loops(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line indices of every loop: a label and a later jump back to it."""
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"^(\.?L\w+):", line)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.?L\w+)\s*$", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    return loops


_WIDTH_WEIGHT = {"scalar": 1, "xmm": 4, "ymm": 8, "zmm": 16}


def _fp_work(lines) -> int:
    """Floating-point multiply/add work in ``lines``, each instruction weighted by its width
    (scalar 1, xmm 4, ymm 8, zmm 16: fp32 lanes), so a vector body outranks a scalar tail
    unrolled 8 times."""
    counts = count_fp_ops("\n".join(lines))
    return sum(_WIDTH_WEIGHT[w] * n for kind in counts.values() for w, n in kind.items())


def hot_loop(asm: str, work=None) -> str:
    """The hot loop of ``asm``: of the innermost loops (a label and a backward jump to it, with
    no other such loop inside), the one doing the most floating-point multiply/add work
    (instructions weighted by vector width; the shortest on ties). Returns its text, or ``""``
    if there is no loop. ``work(lines) -> number`` replaces that measure of work (chapter 6's
    integer kernels weigh integer multiply instructions instead).

    A heuristic on the text layout, good for the kernels here: LLVM may place a loop's blocks
    out of line, and then the text shown is the part between the label and the back edge.
    """
    lines = asm.splitlines()
    loops = _loops(lines)
    inner = [(a, b) for a, b in loops
             if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]
    best = None
    for a, b in inner:
        body = lines[a:b + 1]
        key = ((work or _fp_work)(body), -len(body))
        if best is None or key > best[0]:
            best = (key, body)
    return "\n".join(best[1]) if best else ""


def asm_report(kernel, dtype=np.float32) -> dict:
    """For the chapter: ``{"hot_loop": text, "fma_hot": counts, "ops_hot": counts,
    "fma_total": counts}`` of ``kernel`` (see :func:`kernel_asm`)."""
    asm = kernel_asm(kernel, dtype)
    loop = hot_loop(asm)
    return {"hot_loop": loop, "fma_hot": count_fma(loop), "ops_hot": count_fp_ops(loop),
            "fma_total": count_fma(asm)}
