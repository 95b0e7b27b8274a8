"""Chapter 8: fused add + RMSNorm and SwiGLU in BF16, two ladders side by side (RoPE:
:mod:`kernellab.kernels.llm_rope`).

BF16 data is uint16 storage (numba-cuda has no bfloat16 arrays): kernels load bits, widen them
to float32 (:func:`kernellab.bf16.widen`, exact), compute in float32 and narrow once per stored
value (:func:`kernellab.bf16.narrow`, round to nearest even, bit for bit what ``ml_dtypes``
does). Golden references: :mod:`reference_kernels.llm_ops`.

Fused add + RMSNorm (pre-norm residual stream; Zhang & Sennrich 2019, arXiv:1910.07467; the
fused form is vLLM's ``fused_add_rms_norm``, ``csrc/layernorm_kernels.cu``)::

    h = bf16(x + residual)        -> residual (in place)
    out = bf16(h * rstd * weight),  rstd = 1/sqrt(sum(h^2)/N + eps) of the *stored* h, float32

    v1_unfused   two launches: an add kernel writes h into the residual, then an RMSNorm
                 kernel reads it back from DRAM. [x, residual read; h written; h read again;
                 out written: 5 row transfers + the weight]
    v2_fused     one launch, one block per row: each thread adds its elements, stores h and
                 sums h^2 in float32; the block reduction (warp butterfly, shared slots:
                 ``norms_cuda.block_sum``), then a second sweep re-reads h (an L1/L2 hit: the
                 block wrote it) and writes out. [4 row transfers + the weight]

Both round at the same points with the same reduction order, so their outputs are bitwise
equal; fusion saves one read of h: 2 N bytes a row of the 10 N (:func:`add_rmsnorm_traffic`
measures it with the sim tier's DRAM counters).

SwiGLU (Shazeer 2020, arXiv:2002.05202, eq. 6), the rounding points of an unfused BF16
framework (PyTorch computes ``silu`` of a bf16 tensor in float32 and rounds its output to
bf16; ``a * b`` of two bf16 tensors is a float32 product rounded to bf16)::

    s = bf16(g / (1 + expf(-g)))          g = widen(gate), float32
    out = bf16(widen(s) * widen(up))

    v1_unfused   two launches: silu(gate) -> s (T, F) bf16 in DRAM, then s * up -> out.
    v2_fused     one launch: both steps per element, s kept in a register but rounded to bf16
                 as v1 stores it, so out is bit-exact against v1 (the rule vLLM's
                 ``act_and_mul`` kernels are tested by: the fused op against the unfused
                 PyTorch composition in the same dtype). [gate, up read; out written]

:func:`swiglu_unfused_host` is the same composition on the host (numpy float32 steps,
``ml_dtypes`` rounding; exp is the C library's float64 exp rounded to float32, the sim tier's
``expf``): bit-exact against both versions on the sim tier. On a GPU, ``expf`` is within 2 ulp
(CUDA C++ Programming Guide, "Mathematical Functions"), so there only v2 == v1 is exact.

Harness (every wrapper): BF16 arrays are ``ml_dtypes.bfloat16`` or their ``uint16`` bits, 2-D
(rows, columns); the last axis must be contiguous, rows may be strided (a row stride larger
than the row: every other row of a buffer, or the first N columns of a wider one), as the
``input_stride`` of vLLM's kernels. numpy arrays are copied to the device as the span their
rows cover and only their elements are copied back; numba device arrays (uint16, C-contiguous)
are used as they are, asynchronously. Raises TypeError for a non-array or a wrong dtype,
ValueError for wrong shapes, a non-contiguous last axis, overlapping rows, a read-only output
or an output that overlaps an input it is not the in-place alias of.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab import bf16
from kernellab.bf16 import BF16, narrow, widen
from kernellab.kernels._cuda_args import is_device_array
from kernellab.kernels.norms_cuda import (MAX_WARPS, NormTolerance, _check_eps, _check_threads,
                                          block_sum, default_threads, rmsnorm_tolerance)
from kernellab.numerics import Explicit, finfo, unit_roundoff

__all__ = ["fused_add_rmsnorm", "add_rmsnorm_v1", "add_rmsnorm_v2", "add_rmsnorm_traffic",
           "add_rmsnorm_tolerance", "swiglu", "swiglu_v1", "swiglu_v2", "swiglu_unfused_host",
           "swiglu_tolerance", "ADD_RMSNORM", "SWIGLU", "KERNELS", "SWIGLU_TPB", "Rows",
           "rows_arg", "as_bf16", "check_disjoint"]

#: threads a block of the SwiGLU kernels (a 2-D grid: column blocks x tokens)
SWIGLU_TPB = 128
_U16 = np.dtype(np.uint16)


# ----------------------------------------------------------------------------------------------
# BF16 row arguments (shared with llm_rope)
# ----------------------------------------------------------------------------------------------

class Rows:
    """A 2-D BF16 argument as the kernels address it: ``dev`` a 1-D uint16 device array, row
    ``r`` column ``j`` at ``dev[off + r * ld + j]``; ``host`` the numpy array to copy back into
    (None for device arrays)."""

    def __init__(self, dev, off, ld, shape, host=None):
        self.dev, self.off, self.ld, self.shape, self.host = dev, off, ld, shape, host

    def copy_back(self) -> None:
        """Copy the rows' elements (not the gaps between them) back to the numpy argument."""
        if self.host is None or self.shape[0] == 0:
            return
        span = self.dev.copy_to_host()
        R, N = self.shape
        rows = np.lib.stride_tricks.as_strided(span[self.off:], shape=(R, N),
                                               strides=(2 * self.ld, 2))
        self.host.view(_U16)[...] = rows


def _bits_of(name, a):
    if not (isinstance(a, np.ndarray) or is_device_array(a)):
        raise TypeError(f"{name} must be a numpy array or a numba device array, "
                        f"got {type(a).__name__}")
    dt = np.dtype(a.dtype)
    if dt != _U16 and dt != BF16:
        raise TypeError(f"{name} has dtype {dt.name}: BF16 arguments are ml_dtypes.bfloat16 "
                        "or their uint16 bits")
    if is_device_array(a) and dt != _U16:
        raise TypeError(f"device array {name} must hold uint16 bits")
    return a


as_bf16 = bf16.as_bf16


def rows_arg(name: str, a, shape=None, *, writable: bool = False) -> Rows:
    """``a`` (R, N) BF16 as a :class:`Rows` (module docstring, "Harness"); ``shape`` the
    expected (R, N) or None. Raises TypeError / ValueError as the module docstring says."""
    a = _bits_of(name, a)
    if len(a.shape) != 2:
        raise ValueError(f"{name} must be 2-D (rows, columns), got shape {tuple(a.shape)}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(a.shape)}, expected {tuple(shape)}")
    R, N = (int(s) for s in a.shape)
    if is_device_array(a):
        if not a.is_c_contiguous():
            raise ValueError(f"device array {name} must be C-contiguous")
        return Rows(a.reshape(R * N), 0, N, (R, N))
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} is read-only (it is written in place)")
    s0, s1 = a.strides
    if N > 1 and s1 != 2:
        raise ValueError(f"{name}'s last axis must be contiguous (stride 2 bytes), got {s1}")
    ld = N if R <= 1 else s0 // 2
    if R > 1 and (s0 % 2 or ld < N):
        raise ValueError(f"{name}'s rows overlap or are reversed (row stride {s0} bytes for "
                         f"{N} columns)")
    if R == 0 or N == 0:
        return Rows(None, 0, ld, (R, N), a)
    span = np.lib.stride_tricks.as_strided(a.view(_U16), shape=((R - 1) * ld + N,),
                                           strides=(2,))
    return Rows(cuda.to_device(np.ascontiguousarray(span)), 0, ld, (R, N), a)


def check_disjoint(outputs: dict, inputs: dict, aliases=()) -> None:
    """No numpy output shares memory with another argument, except the pairs in ``aliases``
    (the same array passed twice, for an in-place update). Raises ValueError."""
    allowed = {frozenset(p) for p in aliases}
    everything = {**inputs, **outputs}
    for name, o in outputs.items():
        if not isinstance(o, np.ndarray):
            continue
        for other, a in everything.items():
            if other == name or not isinstance(a, np.ndarray):
                continue
            if frozenset((name, other)) in allowed and a is o:
                continue
            if np.shares_memory(o, a):
                raise ValueError(f"{name} must not overlap {other}")


# ----------------------------------------------------------------------------------------------
# Fused add + RMSNorm
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _add_kernel(X, ldx, Res, ldr, N):
    """v1, launch 1: Res[row] = bf16(X[row] + Res[row]), one block per row."""
    x0 = cuda.blockIdx.x * ldx
    r0 = cuda.blockIdx.x * ldr
    for j in range(cuda.threadIdx.x, N, cuda.blockDim.x):
        Res[r0 + j] = narrow(widen(X[x0 + j]) + widen(Res[r0 + j]))


@cuda.jit
def _rmsnorm_bf16_kernel(H, ldh, W, Out, ldo, N, eps):
    """v1, launch 2: Out[row] = bf16(H[row] * rstd * W), one block per row."""
    sh = cuda.shared.array(MAX_WARPS, float32)
    h0 = cuda.blockIdx.x * ldh
    o0 = cuda.blockIdx.x * ldo
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    s = float32(0.0)
    for j in range(tid, N, T):
        h = widen(H[h0 + j])
        s += h * h
    s = block_sum(s, sh)
    rstd = float32(1.0) / float32(math.sqrt(s / float32(N) + eps))
    for j in range(tid, N, T):
        Out[o0 + j] = narrow(widen(H[h0 + j]) * rstd * widen(W[j]))


@cuda.jit
def _add_rmsnorm_kernel(X, ldx, Res, ldr, W, Out, ldo, N, eps):
    """v2: the add, the store of h, the sum of squares, the reduction and the normalise in one
    launch, one block per row. ``Out`` may be ``X`` (ldo == ldx): every read of X precedes the
    block reduction's barriers, every write of Out follows them."""
    sh = cuda.shared.array(MAX_WARPS, float32)
    x0 = cuda.blockIdx.x * ldx
    r0 = cuda.blockIdx.x * ldr
    o0 = cuda.blockIdx.x * ldo
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    s = float32(0.0)
    for j in range(tid, N, T):
        hb = narrow(widen(X[x0 + j]) + widen(Res[r0 + j]))
        Res[r0 + j] = hb
        h = widen(hb)
        s += h * h
    s = block_sum(s, sh)
    rstd = float32(1.0) / float32(math.sqrt(s / float32(N) + eps))
    for j in range(tid, N, T):
        Out[o0 + j] = narrow(widen(Res[r0 + j]) * rstd * widen(W[j]))


def _add_rmsnorm_args(x, residual, weight, out, eps, threads):
    xr = rows_arg("x", x, writable=out is None)
    R, N = xr.shape
    if N < 1:
        raise ValueError("rows of length 0: the RMS of an empty row is undefined")
    rr = rows_arg("residual", residual, (R, N), writable=True)
    w = _bits_of("weight", weight)
    if tuple(w.shape) != (N,):
        raise ValueError(f"weight must have shape ({N},), got {tuple(w.shape)}")
    orr = xr if out is None else rows_arg("out", out, (R, N), writable=True)
    check_disjoint({"residual": residual, "out": x if out is None else out},
                   {"x": x, "weight": weight}, aliases=[("out", "x")] if out is None else ())
    e32 = _check_eps(eps)
    T = default_threads(N) if threads is None else _check_threads(threads)
    if is_device_array(w):
        dw = w
    else:
        dw = cuda.to_device(np.ascontiguousarray(w).view(_U16))
    return xr, rr, dw, orr, e32, T


def add_rmsnorm_v1(x, residual, weight, out=None, eps: float = 1e-6, *, threads=None) -> None:
    """v1 unfused: ``residual = bf16(x + residual)`` (launch 1), then ``out = RMSNorm(residual)
    * weight`` (launch 2). Arguments as :func:`fused_add_rmsnorm`."""
    xr, rr, dw, orr, e32, T = _add_rmsnorm_args(x, residual, weight, out, eps, threads)
    R, N = xr.shape
    if R == 0:
        return None
    _add_kernel[R, T](xr.dev, xr.ld, rr.dev, rr.ld, N)
    _rmsnorm_bf16_kernel[R, T](rr.dev, rr.ld, dw, orr.dev, orr.ld, N, e32)
    rr.copy_back()
    orr.copy_back()
    return None


def add_rmsnorm_v2(x, residual, weight, out=None, eps: float = 1e-6, *, threads=None) -> None:
    """v2 fused: one launch (module docstring). Arguments as :func:`fused_add_rmsnorm`."""
    xr, rr, dw, orr, e32, T = _add_rmsnorm_args(x, residual, weight, out, eps, threads)
    R, N = xr.shape
    if R == 0:
        return None
    _add_rmsnorm_kernel[R, T](xr.dev, xr.ld, rr.dev, rr.ld, dw, orr.dev, orr.ld, N, e32)
    rr.copy_back()
    orr.copy_back()
    return None


#: version name -> launch function, in ladder order
ADD_RMSNORM = OrderedDict([("v1_unfused", add_rmsnorm_v1), ("v2_fused", add_rmsnorm_v2)])


def fused_add_rmsnorm(x, residual, weight, out=None, eps: float = 1e-6, *,
                      version: str = "v2_fused", threads: int | None = None) -> None:
    """``residual <- bf16(x + residual)``; ``out <- bf16(RMSNorm(residual) * weight)``.

    ``x``, ``residual``: (R, N) BF16, N >= 1, rows may be strided; ``residual`` is updated in
    place. ``weight``: (N,) BF16. ``out``: (R, N) BF16, or None to write the result over ``x``
    (vLLM's in-place form). ``eps`` > 0 (default 1e-6), added in float32. ``threads``: the
    block size (a multiple of 32 up to 1024; default ``norms_cuda.default_threads(N)``).
    ``version``: a key of :data:`ADD_RMSNORM`. Returns None. Raises as the module docstring
    says, and ValueError for an unknown version.
    """
    if version not in ADD_RMSNORM:
        raise ValueError(f"version must be one of {list(ADD_RMSNORM)}, got {version!r}")
    return ADD_RMSNORM[version](x, residual, weight, out, eps, threads=threads)


def add_rmsnorm_traffic(R: int = 4, N: int = 1024, *, row_stride: int | None = None,
                        seed: int = 0, profile: str = "a100") -> dict:
    """DRAM bytes each version moves for R rows of N, measured by the sim tier's counters
    (``dram_read_bytes`` / ``dram_write_bytes``: each distinct 32-byte sector once per launch,
    L2 emptied between launches; :mod:`kernellab.sim.counters`).

    Returns ``{version: {"launches", "dram_read_bytes", "dram_write_bytes", "dram_bytes",
    "modelled_seconds", "kernel_seconds"}}``: the last two the sim tier's modelled time on
    ``profile`` (:func:`kernellab.sim.model.total_seconds`, with and without the launch
    overheads). ``row_stride`` (elements, >= N; default N): the rows of x, residual and out sit
    in buffers that wide. Inputs are seeded normal values; the simulator interprets every
    thread, so keep R * N to a few thousand. Raises RuntimeError off the sim tier, ValueError
    for R, N < 1 or row_stride < N.
    """
    from kernellab import sim
    from kernellab.sim import model

    if kernellab.TIER != "sim":
        raise RuntimeError("add_rmsnorm_traffic reads the sim tier's counters (tier is "
                           f"{kernellab.TIER!r})")
    R, N = int(R), int(N)
    ld = N if row_stride is None else int(row_stride)
    if R < 1 or N < 1 or ld < N:
        raise ValueError(f"need R, N >= 1 and row_stride >= N, got {R}, {N}, {ld}")
    rng = np.random.default_rng(seed)
    out = {}
    for name, fn in ADD_RMSNORM.items():
        x = rng.standard_normal((R, ld)).astype(BF16)[:, :N]
        res = rng.standard_normal((R, ld)).astype(BF16)[:, :N]
        w = rng.standard_normal(N).astype(BF16)
        y = np.zeros((R, ld), BF16)[:, :N]
        with sim.capture() as cap:
            fn(x, res, w, y)
        tot = cap.total()
        out[name] = {"launches": len(cap.launches), "dram_read_bytes": tot["dram_read_bytes"],
                     "dram_write_bytes": tot["dram_write_bytes"],
                     "dram_bytes": tot["dram_read_bytes"] + tot["dram_write_bytes"],
                     "modelled_seconds": model.total_seconds(cap, profile),
                     "kernel_seconds": model.total_seconds(cap, profile, include_launch=False)}
    return out


_U32 = unit_roundoff(np.float32)
_UB = unit_roundoff(BF16)


def add_rmsnorm_tolerance(x, residual, weight, eps: float = 1e-6, c: float = 6.0):
    """``(residual_policy, out_policy)``: element-wise bounds on the kernel's h and out against
    :func:`reference_kernels.llm_ops.fused_add_rmsnorm_golden` (numerics policies for
    :func:`kernellab.numerics.compare`).

    * h: a float32 add (exact unless the exponents differ by more than 16: ``u32 |h|``) and one
      bf16 rounding, faithful (``2 u_bf16 |h|``, the margin rule of :mod:`kernellab.numerics`).
    * out: ``norms_cuda.rmsnorm_tolerance`` of the RMSNorm of the stored h (float32 sum of
      squares, c sqrt(N) u growth; 6 float32 roundings; one bf16 ulp), plus the effect of h's
      rounding ``|delta| <= u_bf16 + u32`` on it: ``delta_i`` on the element and at most
      ``max |delta|`` on rstd, so ``2 (u_bf16 + u32) |y|``.
    """
    x64 = as_bf16(x).astype(np.float64)
    h = x64 + as_bf16(residual).astype(np.float64)
    w64 = as_bf16(weight).astype(np.float64)
    floor = 0.5 * float(finfo(BF16).smallest_subnormal)
    res_pol = NormTolerance((2 * _UB + _U32) * np.abs(h) + floor,
                            "add: |err| <= (2u_bf16 + u_fp32)|h|", "add")
    hk = h.astype(np.float32).astype(BF16)
    base = rmsnorm_tolerance(hk, w64, eps, out_dtype=BF16, c=c)
    y = h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + float(eps)) * w64
    out_pol = NormTolerance(base.bound + 2 * (_UB + _U32) * np.abs(y),
                            base.description + " + 2(u_bf16 + u_fp32)|y| (h rounded to bf16)",
                            "add-rmsnorm")
    return res_pol, out_pol


# ----------------------------------------------------------------------------------------------
# SwiGLU
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _silu_kernel(G, goff, ldg, S, F):
    """v1, launch 1: S[t, j] = bf16(silu(G[t, j])); S contiguous (T, F)."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t = cuda.blockIdx.y
    if j < F:
        g = widen(G[goff + t * ldg + j])
        S[t * F + j] = narrow(g / (float32(1.0) + math.exp(-g)))


@cuda.jit
def _mul_kernel(S, U, uoff, ldu, Out, ldo, F):
    """v1, launch 2: Out[t, j] = bf16(S[t, j] * U[t, j])."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t = cuda.blockIdx.y
    if j < F:
        Out[t * ldo + j] = narrow(widen(S[t * F + j]) * widen(U[uoff + t * ldu + j]))


@cuda.jit
def _swiglu_kernel(G, goff, ldg, U, uoff, ldu, Out, ldo, F):
    """v2: both steps per element; silu rounded to bf16 where v1 stores it."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t = cuda.blockIdx.y
    if j < F:
        g = widen(G[goff + t * ldg + j])
        s = narrow(g / (float32(1.0) + math.exp(-g)))
        Out[t * ldo + j] = narrow(widen(s) * widen(U[uoff + t * ldu + j]))


def _swiglu_args(gate, up, out):
    if up is None:                      # one (T, 2F) tensor [gate | up]
        gu = _bits_of("gate_up", gate)
        if len(gu.shape) != 2 or gu.shape[1] % 2:
            raise ValueError(f"gate_up must be 2-D (T, 2F) with an even width, got "
                             f"{tuple(gu.shape)}")
        T, F = int(gu.shape[0]), int(gu.shape[1]) // 2
        g = rows_arg("gate_up", gu)     # up: the same rows, F columns further
        g.shape = (T, F)
        u = Rows(g.dev, F, g.ld, (T, F))
        inputs = {"gate_up": gate}
    else:
        g = rows_arg("gate", gate)
        T, F = g.shape
        u = rows_arg("up", up, (T, F))
        inputs = {"gate": gate, "up": up}
    if F < 1:
        raise ValueError("F = 0: nothing to compute")
    if T > 65535:
        raise ValueError(f"T = {T} tokens: the grid's y dimension holds at most 65535")
    o = rows_arg("out", out, (T, F), writable=True)
    check_disjoint({"out": out}, inputs)
    return g, u, o, T, F


def swiglu_v1(gate, up, out) -> None:
    """v1 unfused: a silu launch writing s (T, F) bf16 to DRAM, then a multiply launch.
    Arguments as :func:`swiglu`."""
    g, u, o, T, F = _swiglu_args(gate, up, out)
    if T == 0:
        return None
    s = cuda.device_array(T * F, _U16)
    grid = (-(-F // SWIGLU_TPB), T)
    _silu_kernel[grid, SWIGLU_TPB](g.dev, g.off, g.ld, s, F)
    _mul_kernel[grid, SWIGLU_TPB](s, u.dev, u.off, u.ld, o.dev, o.ld, F)
    o.copy_back()
    return None


def swiglu_v2(gate, up, out) -> None:
    """v2 fused: one launch. Arguments as :func:`swiglu`."""
    g, u, o, T, F = _swiglu_args(gate, up, out)
    if T == 0:
        return None
    grid = (-(-F // SWIGLU_TPB), T)
    _swiglu_kernel[grid, SWIGLU_TPB](g.dev, g.off, g.ld, u.dev, u.off, u.ld, o.dev, o.ld, F)
    o.copy_back()
    return None


#: version name -> launch function, in ladder order
SWIGLU = OrderedDict([("v1_unfused", swiglu_v1), ("v2_fused", swiglu_v2)])


def swiglu(gate, up, out, *, version: str = "v2_fused") -> None:
    """``out = bf16(bf16(silu(gate)) * up)`` (module docstring).

    ``gate``, ``up``: (T, F) BF16 of one shape; or ``gate`` the (T, 2F) BF16 output of a fused
    gate/up projection, ``[gate | up]`` on each row, and ``up=None``. ``out``: (T, F) BF16,
    written. T <= 65535 (the grid's y dimension), F >= 1; rows may be strided. ``version``: a
    key of :data:`SWIGLU`. Returns None. Raises as the module docstring says.
    """
    if version not in SWIGLU:
        raise ValueError(f"version must be one of {list(SWIGLU)}, got {version!r}")
    return SWIGLU[version](gate, up, out)


def _f32_exp(x: np.ndarray) -> np.ndarray:
    """float32 exp as the sim tier's ``expf``: the C library's float64 exp, rounded once."""
    return np.array([math.exp(v) if v < 709.0 else math.inf for v in
                     x.astype(np.float64).ravel()]).astype(np.float32).reshape(x.shape)


def swiglu_unfused_host(gate, up=None) -> np.ndarray:
    """The unfused BF16 composition on the host (module docstring), (T, F) bfloat16: float32
    numpy steps, each stored value rounded by ``ml_dtypes`` (round to nearest even)::

        g = float32(gate); e = expf(-g); s = bf16(g / (1 + e)); out = bf16(float32(s) * up)

    ``gate``/``up`` as :func:`swiglu` (numpy arrays; ``up=None`` for one [gate | up] array)."""
    ga = as_bf16(gate)
    if up is None:
        F = ga.shape[-1] // 2
        ga, up = ga[..., :F], ga[..., F:]
    g = ga.astype(np.float32)
    u = as_bf16(up).astype(np.float32)
    with np.errstate(over="ignore"):
        e = _f32_exp(-g)
        s = (g / (np.float32(1.0) + e)).astype(BF16)
    return (s.astype(np.float32) * u).astype(BF16)


def swiglu_tolerance(gate, up=None) -> Explicit:
    """Bound on |out - swiglu_golden| (float64 golden, same bf16 inputs): silu in float32 (expf
    within 2 ulp = 4 u32 relative on e, which moves silu by at most that much; the add and the
    divide 1 u32 each), s and out each rounded to bf16, faithfully (2 u_bf16 each, the margin
    rule of :mod:`kernellab.numerics`: a correctly rounded store uses half), the product (u32):
    ``(4 u_bf16 + 7 u32 + u64) |y| + the smallest bf16 subnormal``. For gate >= -88 only:
    below, ``expf(-g)`` overflows and silu is -0 where its value is about g e^g (< 1e-36),
    as in the unfused float32 composition the kernels match bit for bit."""
    from reference_kernels.llm_ops import swiglu_golden

    y = np.abs(swiglu_golden(as_bf16(gate), None if up is None else as_bf16(up)))
    rel = 4 * _UB + 7 * _U32 + unit_roundoff(np.float64)
    return Explicit(rel * y + float(finfo(BF16).smallest_subnormal),
                    "swiglu: |err| <= (4u_bf16 + 7u_fp32 + u_fp64)|y| + bf16 subnormal")


#: version name -> its kernels, per ladder
KERNELS = {"add_rmsnorm": {"v1_unfused": (_add_kernel, _rmsnorm_bf16_kernel),
                           "v2_fused": (_add_rmsnorm_kernel,)},
           "swiglu": {"v1_unfused": (_silu_kernel, _mul_kernel), "v2_fused": (_swiglu_kernel,)}}
