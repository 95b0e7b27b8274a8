"""Chapter 3: LayerNorm and RMSNorm forward kernels, one thread block per row.

Kernels are ordinary numba-cuda code (``@cuda.jit``): on a real GPU (the ``gpu`` tier) they
compile to PTX and run there; without one (the ``sim`` tier) they run unchanged in the CUDA
simulator that ``import kernellab`` selects. Golden references: ``reference_kernels.norms``; the
CPU walk-through of the statistics: ``kernellab.topics.welford``.

What they compute, over the last axis of X (R rows of length N)::

    LayerNorm  mean = sum(x)/N,  var = sum((x - mean)^2)/N  (biased),  rstd = 1/sqrt(var + eps)
               y = (x - mean) * rstd * gamma + beta                       (Ba et al. 2016)
    RMSNorm    rstd = 1/sqrt(sum(x^2)/N + eps),  y = x * rstd * g           (Zhang & Sennrich 2019)

Harness (both launch functions, :func:`layernorm` and :func:`rmsnorm`):

* ``X`` (R, N), float32 or float16, R >= 0 rows of any length N >= 1; ``Y`` (R, N) of X's dtype,
  written in place (its old contents, NaN included, are never read); returns None. X, gamma,
  beta, g are not modified.
* ``gamma``, ``beta``, ``g``: (N,) float32, or None (1 and 0). ``eps``: a finite number > 0 whose
  float32 rounding is > 0 (the kernels add it in float32). Optional per-row outputs ``mean``,
  ``rstd`` (LayerNorm) / ``rstd`` (RMSNorm): (R,) float32.
* The statistics are always float32, whatever X's dtype (FP16 in, FP32 statistics, FP16 out: what
  PyTorch's and Apex's kernels do). **bfloat16 is not supported**: numba-cuda has no bf16 array
  type; the chapter shows bf16 on the CPU side (``reference_kernels.norms`` widens
  ``ml_dtypes.bfloat16`` exactly).
* ``threads``: block size, a multiple of 32 in [32, 1024]; default :func:`default_threads` (N
  rounded up to a warp, at most 256). The grid is R blocks (``launch_config``).
* Raises TypeError when an array argument is neither a numpy array nor a numba device array
  (or eps is not a number), ValueError for wrong shapes, dtypes (bf16 included, by name), a
  read-only or overlapping output, non-C-contiguous device arrays, a bad eps or a bad
  ``threads``. numpy arguments are copied to the device (C order) and Y back; device arrays are
  used as they are and the launch is asynchronous.

LayerNorm: Welford per thread, Chan merge over the block
--------------------------------------------------------
Block ``r`` owns row ``r``; thread ``t`` of ``T`` reads ``x[t], x[t+T], x[t+2T], ...`` (a
grid-stride loop over the row: a warp's 32 loads are 128 consecutive bytes, coalesced), so any
N works, and threads past the end of a short row simply get no element.

1. **Per thread**, Welford's one-pass update in float32 (Welford 1962), with the count ``n`` kept
   as a float32 (exact below 2^24)::

       n += 1;  d = x - mean;  mean += d / n;  M2 += d * (x - mean)

   Unlike ``E[x^2] - E[x]^2`` this never subtracts two numbers of size mean^2, so a row with mean
   1e4 and std 1 keeps its variance to ~1e-4 relative in float32, where the naive formula returns
   noise or a negative number (``kernellab.topics.welford.cancellation_demo``).
2. **Per warp**, a shuffle tree over the triple ``(n, mean, M2)``: for ``off = 16, 8, 4, 2, 1``
   each lane fetches lane ``lane + off``'s triple with three ``shfl_down_sync`` and merges it with
   Chan, Golub & LeVeque's rule (1979; Am. Stat. 37(3), 1983)::

       n = n_a + n_b;  delta = mean_b - mean_a;  w = n_b / n
       mean = mean_a + delta * w;   M2 = M2_a + M2_b + delta^2 * n_a * w

   After five steps lane 0 holds the warp's triple (lanes ``>= 32 - off`` read their own value,
   as the hardware does past the warp's end; those lanes' results are never used). Empty
   partials: a lane with no element has ``(0, 0, 0)``; merging it is exact (``w = 0`` leaves a
   unchanged; if a is empty, ``w = 1`` and ``mean = 0 + mean_b``), and two empty partials are
   the one case guarded (``n = 0`` would divide 0 by 0). Why a *down* tree and not the ``xor``
   butterfly the RMSNorm kernel uses: the merge is not commutative in floating point
   (``merge(a, b)`` and ``merge(b, a)`` may differ in the last bit), so a butterfly would leave
   lanes with slightly different statistics; the down tree has one answer, in lane 0.
3. **Across warps**: lane 0 of each warp writes its triple to shared memory; ``syncthreads``;
   warp 0 loads the ``T/32`` triples (``(0, 0, 0)`` for lanes past them) and runs the same
   shuffle tree; lane 0 writes the block's triple to slot 0; ``syncthreads``; every thread reads
   it back (a broadcast: one wavefront).
4. **Normalise**: ``rstd = 1/sqrt(M2/n + eps)`` in float32 (every thread computes the same value
   from the same bits), then a second pass over the row writes ``y = (x - mean) * rstd *
   gamma[j] + beta[j]``, rounded once to Y's dtype. Thread 0 also writes ``mean`` and ``rstd``.

RMSNorm: the same shape of kernel with a sum instead of a triple: each thread sums ``x*x`` in
float32, a warp reduces with five ``shfl_xor_sync`` (a butterfly: float addition is
commutative, so all 32 lanes end with bitwise the same sum), lane 0 writes shared memory,
``syncthreads``, warp 0 reduces the ``T/32`` partials, lane 0 writes the block's sum,
``syncthreads``, then ``rstd = 1/sqrt(sum/N + eps)`` and ``y = x * rstd * g[j]``.

Cost per row (T threads, W = T/32 warps): X is read twice (the statistics pass and the normalise
pass; the second read hits L1/L2 on a GPU for rows of a few KB), gamma/beta/g once, Y written
once; 2 barriers; LayerNorm ``3*5*(W + 1)`` shuffles (W warps, then warp 0), RMSNorm
``5*(W + 1)``. Shared memory: 3 x 32 floats (LayerNorm), 32 floats (RMSNorm).

Accuracy (what :func:`layernorm_tolerance` and :func:`rmsnorm_tolerance` allow)
-----------------------------------------------------------------------------
Notation for one row: ``u = u_fp32 + u_fp64`` (the kernel's and the reference's unit
roundoffs), ``u_out`` that of Y's dtype, mean ``mu``, variance ``s2``, ``sd' = sqrt(s2 + eps)``,
``s = sqrt(mean(x^2)) = sqrt(mu^2 + s2)`` the row's scale, ``c = 6``. The statistics are sums of
N terms in float32; with independent rounding errors such a sum's error is at most
``c * sqrt(N) * u`` times the sum of the terms' magnitudes with high probability (Higham & Mary,
SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4: the failure probability at ``lambda = c = 6`` is
below ``2N exp(-18)``; the same ``c`` as ``kernellab.numerics.KAware``). The per-thread
sequential sums and the log-depth merge tree are no worse than one sequential sum of N.

* LayerNorm. The mean: ``|e_mu| <= c sqrt(N) u * mean|x| <= c sqrt(N) u * s``. The variance by
  Welford/Chan: relative error ``<= c sqrt(N) u * kappa`` with the condition number
  ``kappa = s / sd`` (Chan, Golub & LeVeque 1983: the updating algorithms' error grows with
  ``kappa``, the naive formula's with ``kappa^2``), i.e. ``|e_var| <= c sqrt(N) u * s * sd``, so
  ``rstd`` is off by at most ``|e_var| / (2 sd'^2) <= c sqrt(N) u * s / (2 sd')`` relative.
  Differentiating ``y = (x - mu) * rstd * gamma + beta`` gives the first term below. The
  final arithmetic adds its own roundings, counted in units of u_fp32 relative to
  ``|gamma| |x - mu| / sd'``: M2/n, the eps add and eps's own rounding to float32 (1/2 each in
  rstd), the sqrt and the divide (1 each), the subtract, the two multiplies and the add of beta
  (1 each; the add also rounds ``|beta|``): 7.5, rounded up to 8. Then one rounding to Y's
  dtype::

      |y_kernel - y| <= |gamma| * c sqrt(N) u * (s / sd') * (1 + |x - mu| / (2 sd'))
                        + 8 u_fp32 * (|gamma| |x - mu| / sd' + |beta|)
                        + 2 u_out * |y| + (half the smallest subnormal of Y's dtype)

  For standard normal rows (s = sd' = 1) and N = 1000 that is about 1e-5 (1 + |x|/2): an
  unbiased variance (1/(N-1)) is already 5e-4 off and fails. For mean 1e4, std 1 it grows to
  ~0.1 (1 + |x - mu|/2): honest for float32, where the mean itself is representable only to
  ~5e-4; a naive-formula kernel is off by O(1) to O(100) there, or returns NaN.
* RMSNorm. The sum of squares has nonnegative terms, so its error is relative:
  ``<= c sqrt(N) u``; rstd inherits half of it, plus sum/N, the eps add and eps's rounding
  (1/2 each), the sqrt and the divide (1 each); then two multiplies (1 each) and the output
  rounding: 5.5 u_fp32, rounded up to 6::

      |y_kernel - y| <= |y| * (c sqrt(N) u / 2 + 6 u_fp32 + 2 u_out) + (half the smallest subnormal)

The output term is one ulp of Y's dtype (``2 u_out``), not half: the output must be *faithfully*
rounded (either neighbour of the exact value), so a correctly rounded result uses at most half
of it and a float16 output keeps a margin (the margin rule of :mod:`kernellab.numerics`; the same
rule as ``kernellab.numerics.RowSoftmax``).

Sources: J. L. Ba, J. R. Kiros & G. E. Hinton, "Layer Normalization", arXiv:1607.06450 (2016);
B. Zhang & R. Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019, arXiv:1910.07467;
B. P. Welford, Technometrics 4(3):419-420 (1962); T. F. Chan, G. H. Golub & R. J. LeVeque,
STAN-CS-79-773 (1979) and The American Statistician 37(3):242-247 (1983); PyTorch's CUDA
LayerNorm (``aten/src/ATen/native/cuda/layer_norm_kernel.cu``: ``WelfordDataLN`` with an online
update and a combine, in float32); NVIDIA, "Using CUDA Warp-Level Primitives" (2018) and the
CUDA C++ Programming Guide, "Warp Shuffle Functions"; N. J. Higham & T. Mary (2019) for the
sqrt(N) error growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab.kernels._cuda_args import is_device_array
from kernellab.numerics import finfo, unit_roundoff

__all__ = ["layernorm", "rmsnorm", "layernorm_kernel", "rmsnorm_kernel", "launch_config",
           "default_threads", "layernorm_tolerance", "rmsnorm_tolerance", "NormTolerance",
           "chan_merge", "warp_welford", "block_welford", "warp_sum", "block_sum",
           "WARP", "MAX_WARPS", "MAX_THREADS_DEFAULT", "FULL_MASK", "SUPPORTED_DTYPES"]

WARP = 32
#: shared-memory slots for per-warp partials: enough for a 1024-thread block
MAX_WARPS = 32
#: the default block size for long rows (8 warps)
MAX_THREADS_DEFAULT = 256
FULL_MASK = 0xFFFFFFFF
#: dtypes X (and Y) may have; the statistics are float32 for both
SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


# ----------------------------------------------------------------------------------------------
# Device functions: the Chan merge and the warp / block reductions
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True)
def chan_merge(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Merge two Welford partials (float32 triples); exact when one of them is empty."""
    n = n_a + n_b
    if n == float32(0.0):                  # both empty: 0/0 below; keep (0, 0, 0)
        return n, mean_a, m2_a
    delta = mean_b - mean_a
    w = n_b / n                            # 0 if b is empty, 1 if a is empty
    mean = mean_a + delta * w
    m2 = m2_a + m2_b + delta * delta * n_a * w
    return n, mean, m2


@cuda.jit(device=True)
def warp_welford(n, mean, m2):
    """Down-shuffle tree over the 32 lanes of a (full) warp; lane 0 returns the warp's triple,
    the other lanes partial results."""
    off = 16
    while off > 0:
        n_b = cuda.shfl_down_sync(FULL_MASK, n, off)
        mean_b = cuda.shfl_down_sync(FULL_MASK, mean, off)
        m2_b = cuda.shfl_down_sync(FULL_MASK, m2, off)
        n, mean, m2 = chan_merge(n, mean, m2, n_b, mean_b, m2_b)
        off //= 2
    return n, mean, m2


@cuda.jit(device=True)
def block_welford(n, mean, m2, sh_n, sh_mean, sh_m2):
    """The block's triple, returned to every thread. ``sh_*``: shared float32 arrays of at least
    ``blockDim.x / 32`` elements (slot 0 ends up holding the result). Two barriers: every thread
    of the block must call it (blockDim.x a multiple of 32). Reusing the arrays afterwards needs
    another ``syncthreads`` first."""
    tid = cuda.threadIdx.x
    lane = tid % WARP
    warp = tid // WARP
    nwarps = cuda.blockDim.x // WARP
    n, mean, m2 = warp_welford(n, mean, m2)
    if lane == 0:
        sh_n[warp] = n
        sh_mean[warp] = mean
        sh_m2[warp] = m2
    cuda.syncthreads()                     # all warps' partials are in shared memory
    if warp == 0:
        if lane < nwarps:
            n = sh_n[lane]
            mean = sh_mean[lane]
            m2 = sh_m2[lane]
        else:                              # no such warp: an empty partial
            n = float32(0.0)
            mean = float32(0.0)
            m2 = float32(0.0)
        n, mean, m2 = warp_welford(n, mean, m2)
        if lane == 0:
            sh_n[0] = n
            sh_mean[0] = mean
            sh_m2[0] = m2
    cuda.syncthreads()                     # the block's triple is in slot 0
    return sh_n[0], sh_mean[0], sh_m2[0]


@cuda.jit(device=True)
def warp_sum(v):
    """Butterfly (xor) sum over a full warp: every lane returns the same float32 sum."""
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(FULL_MASK, v, off)
        off //= 2
    return v


@cuda.jit(device=True)
def block_sum(v, sh):
    """Sum of ``v`` over the block, returned to every thread; ``sh`` a shared float32 array of at
    least ``blockDim.x / 32`` elements. Two barriers; every thread must call it."""
    tid = cuda.threadIdx.x
    lane = tid % WARP
    warp = tid // WARP
    nwarps = cuda.blockDim.x // WARP
    v = warp_sum(v)
    if lane == 0:
        sh[warp] = v
    cuda.syncthreads()
    if warp == 0:
        if lane < nwarps:
            v = sh[lane]
        else:
            v = float32(0.0)
        v = warp_sum(v)
        if lane == 0:
            sh[0] = v
    cuda.syncthreads()
    return sh[0]


# ----------------------------------------------------------------------------------------------
# Kernels: one block per row
# ----------------------------------------------------------------------------------------------

@cuda.jit
def layernorm_kernel(X, gamma, beta, Y, mean_out, rstd_out, eps):
    # One allocation per line (the stock simulator shares a buffer between two calls on a line).
    sh_n = cuda.shared.array(MAX_WARPS, float32)
    sh_mean = cuda.shared.array(MAX_WARPS, float32)
    sh_m2 = cuda.shared.array(MAX_WARPS, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = X.shape[1]
    # 1. Welford over this thread's elements x[tid], x[tid + T], ... in float32
    n = float32(0.0)
    mean = float32(0.0)
    m2 = float32(0.0)
    for j in range(tid, N, T):
        x = float32(X[row, j])
        n += float32(1.0)
        d = x - mean
        mean += d / n
        m2 += d * (x - mean)
    # 2-3. Chan merge: warp shuffles, then across warps through shared memory
    n, mean, m2 = block_welford(n, mean, m2, sh_n, sh_mean, sh_m2)
    rstd = float32(1.0) / float32(math.sqrt(m2 / n + float32(eps)))
    if tid == 0:
        mean_out[row] = mean
        rstd_out[row] = rstd
    # 4. normalise (second read of the row), one rounding to Y's dtype
    for j in range(tid, N, T):
        x = float32(X[row, j])
        Y[row, j] = (x - mean) * rstd * gamma[j] + beta[j]


@cuda.jit
def rmsnorm_kernel(X, g, Y, rstd_out, eps):
    sh = cuda.shared.array(MAX_WARPS, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = X.shape[1]
    s = float32(0.0)
    for j in range(tid, N, T):
        x = float32(X[row, j])
        s += x * x
    s = block_sum(s, sh)
    rstd = float32(1.0) / float32(math.sqrt(s / float32(N) + float32(eps)))
    if tid == 0:
        rstd_out[row] = rstd
    for j in range(tid, N, T):
        x = float32(X[row, j])
        Y[row, j] = x * rstd * g[j]


# ----------------------------------------------------------------------------------------------
# Launch configuration
# ----------------------------------------------------------------------------------------------

def default_threads(N: int) -> int:
    """Block size for rows of length N: N rounded up to a multiple of 32, between 32 and
    :data:`MAX_THREADS_DEFAULT` (256). Longer rows loop (grid-stride within the row)."""
    N = int(N)
    return max(WARP, min(MAX_THREADS_DEFAULT, -(-N // WARP) * WARP))


def _check_threads(threads) -> int:
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise ValueError(f"threads must be an int, got {threads!r}")
    threads = int(threads)
    if threads < WARP or threads > WARP * MAX_WARPS or threads % WARP:
        raise ValueError(f"threads must be a multiple of {WARP} in [{WARP}, {WARP * MAX_WARPS}], "
                         f"got {threads}")
    return threads


def launch_config(R: int, N: int, threads: int | None = None) -> tuple[int, int]:
    """``(grid, block)`` for R rows of length N: one block per row, ``threads`` (default
    :func:`default_threads`) threads a block. Raises ValueError for R < 1, N < 1 or a bad
    ``threads``."""
    R, N = int(R), int(N)
    if R < 1 or N < 1:
        raise ValueError(f"need R >= 1 rows of length N >= 1, got R={R}, N={N}")
    T = default_threads(N) if threads is None else _check_threads(threads)
    return R, T


# ----------------------------------------------------------------------------------------------
# Harness
# ----------------------------------------------------------------------------------------------

_F32 = np.dtype(np.float32)


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or is_device_array(x)


def _require_array(name, x):
    if not _is_array(x):
        raise TypeError(f"{name} must be a numpy array or a numba device array, "
                        f"got {type(x).__name__}")


def _c_contiguous(x) -> bool:
    if isinstance(x, np.ndarray):
        return bool(x.flags.c_contiguous)
    flags = getattr(x, "flags", None)
    if flags is not None:
        try:
            return bool(flags["C_CONTIGUOUS"])
        except (KeyError, TypeError):
            pass
    return bool(getattr(x, "is_c_contiguous", lambda: True)())


def _check_eps(eps) -> np.float32:
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer,
                                                                 np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    e = float(eps)
    if not (math.isfinite(e) and e > 0.0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    e32 = np.float32(e)
    if not (e32 > 0 and np.isfinite(e32)):
        raise ValueError(f"eps = {e!r} is not a positive finite float32 (the kernels add it in "
                         "float32)")
    return e32


def _dtype_name(x) -> str:
    return np.dtype(x.dtype).name


def _check_x_y(X, Y, what: str):
    _require_array("X", X)
    _require_array("Y", Y)
    if len(X.shape) != 2:
        raise ValueError(f"X must be 2-D (rows, N), got shape {tuple(X.shape)}; reshape "
                         "(..., N) inputs to (-1, N)")
    R, N = X.shape
    if N < 1:
        raise ValueError(f"X has rows of length N = 0: the {what} of an empty row is undefined")
    if tuple(Y.shape) != (R, N):
        raise ValueError(f"Y has shape {tuple(Y.shape)}, expected X's shape {(R, N)}")
    dx = np.dtype(X.dtype)
    if dx not in SUPPORTED_DTYPES:
        hint = (" (numba-cuda has no bfloat16 arrays; bf16 is shown on the CPU side, "
                "reference_kernels.norms)" if dx.name == "bfloat16" else "")
        raise ValueError(f"X has dtype {dx.name}: the {what} kernel takes float32 or float16"
                         f"{hint}")
    if np.dtype(Y.dtype) != dx:
        raise ValueError(f"Y has dtype {_dtype_name(Y)}, expected X's dtype {dx.name} (the "
                         "output is in the input's dtype)")
    return R, N


def _check_vec(name, v, N, default):
    """A (N,) float32 parameter or None -> a numpy array (default fill) or the device array."""
    if v is None:
        return np.full(N, default, _F32)
    _require_array(name, v)
    if tuple(v.shape) != (N,):
        raise ValueError(f"{name} must have shape ({N},) (the row length), got {tuple(v.shape)}")
    if np.dtype(v.dtype) != _F32:
        raise ValueError(f"{name} has dtype {_dtype_name(v)}: parameters are float32")
    return v


def _check_stat(name, v, R):
    if v is None:
        return None
    _require_array(name, v)
    if tuple(v.shape) != (R,):
        raise ValueError(f"{name} must have shape ({R},) (one value per row), got "
                         f"{tuple(v.shape)}")
    if np.dtype(v.dtype) != _F32:
        raise ValueError(f"{name} has dtype {_dtype_name(v)}: statistics are float32")
    return v


def _check_outputs(outputs: dict, inputs: dict):
    """Outputs writable, not overlapping any input or each other; device arrays C-contiguous."""
    for name, o in outputs.items():
        if isinstance(o, np.ndarray) and not o.flags.writeable:
            raise ValueError(f"{name} is read-only")
    everything = list(inputs.items()) + list(outputs.items())
    for name, o in outputs.items():
        for other, a in everything:
            if other == name or a is None:
                continue
            if a is o:
                raise ValueError(f"{name} must not be the same array as {other}")
            if (isinstance(o, np.ndarray) and isinstance(a, np.ndarray)
                    and np.may_share_memory(o, a)):
                raise ValueError(f"{name} must not overlap {other}")
    for name, a in everything:
        if a is not None and is_device_array(a) and not _c_contiguous(a):
            raise ValueError(f"device array {name} must be C-contiguous (copy it with "
                             "cuda.to_device(np.ascontiguousarray(...)))")


def _to_device(a):
    if is_device_array(a):
        return a
    return cuda.to_device(np.ascontiguousarray(a))


def _launch(kern, grid, block, ins, outs, eps):
    """Copy host inputs/outputs in, launch ``kern[grid, block](*ins, *outs, eps)``, copy host
    outputs back (device ones stay where they are)."""
    d_in = [_to_device(a) for a in ins]
    d_out, back = [], []
    for o, fill_shape in outs:
        if o is None:                       # an unrequested statistic: device scratch
            d_out.append(cuda.device_array(fill_shape, _F32))
        elif is_device_array(o):
            d_out.append(o)
        else:
            work = np.ascontiguousarray(o)  # a copy only if o is not C-contiguous
            d = cuda.to_device(work)        # Y copied in too: elements a kernel skips keep theirs
            d_out.append(d)
            back.append((o, work, d))
    kern[grid, block](*d_in, *d_out, eps)
    for o, work, d in back:
        d.copy_to_host(work)
        if work is not o:
            o[...] = work


def layernorm(X, gamma, beta, Y, eps: float = 1e-5, *, mean=None, rstd=None,
              threads: int | None = None) -> None:
    """LayerNorm forward over the rows of X into Y (see the module docstring).

    ``X`` (R, N) float32/float16; ``gamma``, ``beta`` (N,) float32 or None; ``Y`` (R, N) of X's
    dtype, written in place; ``eps`` > 0 (default 1e-5, PyTorch's); optional ``mean``, ``rstd``
    (R,) float32 outputs; ``threads`` the block size (default :func:`default_threads`). numpy or
    numba device arrays; returns None. Raises TypeError / ValueError as the module docstring
    lists.
    """
    R, N = _check_x_y(X, Y, "LayerNorm")
    e32 = _check_eps(eps)
    gamma = _check_vec("gamma", gamma, N, 1.0)
    beta = _check_vec("beta", beta, N, 0.0)
    mean = _check_stat("mean", mean, R)
    rstd = _check_stat("rstd", rstd, R)
    T = default_threads(N) if threads is None else _check_threads(threads)
    _check_outputs({"Y": Y, "mean": mean, "rstd": rstd}, {"X": X, "gamma": gamma, "beta": beta})
    if R == 0:
        return None
    _launch(layernorm_kernel, R, T, [X, gamma, beta],
            [(Y, (R, N)), (mean, (R,)), (rstd, (R,))], e32)
    return None


def rmsnorm(X, g, Y, eps: float = 1e-6, *, rstd=None, threads: int | None = None) -> None:
    """RMSNorm forward over the rows of X into Y (see the module docstring).

    ``X`` (R, N) float32/float16; ``g`` (N,) float32 or None; ``Y`` (R, N) of X's dtype, written
    in place; ``eps`` > 0 (default 1e-6, LLaMA's); optional ``rstd`` (R,) float32 output;
    ``threads`` the block size. numpy or numba device arrays; returns None. Raises TypeError /
    ValueError as the module docstring lists.
    """
    R, N = _check_x_y(X, Y, "RMSNorm")
    e32 = _check_eps(eps)
    g = _check_vec("g", g, N, 1.0)
    rstd = _check_stat("rstd", rstd, R)
    T = default_threads(N) if threads is None else _check_threads(threads)
    _check_outputs({"Y": Y, "rstd": rstd}, {"X": X, "g": g})
    if R == 0:
        return None
    _launch(rmsnorm_kernel, R, T, [X, g], [(Y, (R, N)), (rstd, (R,))], e32)
    return None


# ----------------------------------------------------------------------------------------------
# Tolerances derived from the numerics (module docstring, "Accuracy")
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NormTolerance:
    """An element-wise error bound usable with :func:`kernellab.numerics.compare` (it has the
    policy interface ``bounds(ref)`` / ``describe()``): ``|out - ref| <= bound``."""

    bound: np.ndarray = field(repr=False, compare=False)
    description: str = ""
    name: str = "norm"

    def bounds(self, ref: np.ndarray):
        if np.shape(ref) != self.bound.shape:
            raise ValueError(f"reference shape {np.shape(ref)} differs from the bound's "
                             f"{self.bound.shape}")
        return self.bound, 0.0, 0.0

    def describe(self) -> str:
        return self.description


def _rows64(X) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"X must be 2-D with rows of length >= 1, got shape {X.shape}")
    return X.astype(np.float64)


def _out_floor(out_dtype) -> float:
    fi = finfo(out_dtype)          # bfloat16 too: chapter 3's CPU-side bf16 checks
    return 0.5 * float(fi.smallest_subnormal)


def layernorm_tolerance(X, gamma=None, beta=None, eps: float = 1e-5, out_dtype=None,
                        c: float = 6.0) -> NormTolerance:
    """Per-element bound on |LayerNorm kernel - golden| for inputs X (R, N) (module docstring,
    "Accuracy"): ``|gamma| c sqrt(N) u (s/sd')(1 + |x-mu|/(2 sd')) + 8 u32 (|gamma||x-mu|/sd' +
    |beta|) + 2 u_out |y| + floor``. ``out_dtype`` defaults to X's dtype; statistics in float32."""
    x = _rows64(X)
    out_dtype = np.dtype(out_dtype or np.asarray(X).dtype)
    R, N = x.shape
    g = np.ones(N) if gamma is None else np.asarray(gamma, np.float64)
    b = np.zeros(N) if beta is None else np.asarray(beta, np.float64)
    u32 = unit_roundoff(np.float32)
    u = u32 + unit_roundoff(np.float64)
    u_out = unit_roundoff(out_dtype)
    mu = x.mean(axis=1, keepdims=True)
    dev = np.abs(x - mu)
    var = np.mean(dev * dev, axis=1, keepdims=True)
    sdp = np.sqrt(var + float(eps))
    scale = np.sqrt(np.mean(x * x, axis=1, keepdims=True))
    y = (x - mu) / sdp * g + b
    stat = c * math.sqrt(N) * u * (scale / sdp) * (1.0 + dev / (2.0 * sdp))
    bound = (np.abs(g) * stat + 8.0 * u32 * (np.abs(g) * dev / sdp + np.abs(b))
             + 2.0 * u_out * np.abs(y) + _out_floor(out_dtype))
    desc = (f"layernorm: |err| <= |gamma|*{c:g}*sqrt(N={N})*u*(s/sd')*(1+|x-mu|/(2sd')) "
            f"+ 8*u_fp32*(|gamma||x-mu|/sd'+|beta|) + 2u_{out_dtype.name}*|y|")
    return NormTolerance(bound, desc, "layernorm")


def rmsnorm_tolerance(X, g=None, eps: float = 1e-6, out_dtype=None,
                      c: float = 6.0) -> NormTolerance:
    """Per-element bound on |RMSNorm kernel - golden| (module docstring, "Accuracy"):
    ``|y| (c sqrt(N) u / 2 + 6 u32 + 2 u_out) + floor``."""
    x = _rows64(X)
    out_dtype = np.dtype(out_dtype or np.asarray(X).dtype)
    R, N = x.shape
    gg = np.ones(N) if g is None else np.asarray(g, np.float64)
    u32 = unit_roundoff(np.float32)
    u = u32 + unit_roundoff(np.float64)
    u_out = unit_roundoff(out_dtype)
    y = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + float(eps)) * gg
    rel = c * math.sqrt(N) * u / 2.0 + 6.0 * u32 + 2.0 * u_out
    bound = np.abs(y) * rel + _out_floor(out_dtype)
    desc = (f"rmsnorm: |err| <= |y|*({c:g}*sqrt(N={N})*u/2 + 6*u_fp32 + 2u_{out_dtype.name})")
    return NormTolerance(bound, desc, "rmsnorm")
