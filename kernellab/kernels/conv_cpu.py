"""Chapter 4: 3x3 convolution on the CPU, the kernel ladder side by side (llm.c dev/cuda style).

Every version has the signature ``conv_vN(X, Wt, Y)``: X (N, C, H, W) "NCHW", Wt (K, C, 3, 3)
"KCRS", Y (N, K, H, W), all float32 (v1, v2 also float64); stride 1, zero padding 1 (a "same"
convolution, reference_kernels.conv's docstring); Y is written in place and nothing is returned.
Any N, C, K, H, W >= 1. One thread (the GEMMs are chapter 1's single-threaded v3).

Versions (what each one changes; effective GFLOP/s = direct-convolution FLOPs / time,
``make bench``)::

    v1 direct          reference_kernels.conv.conv2d_direct under numba.njit: loop order
                       n, k, c, r, s, p, q with the q loop over stride-1 row views, vectorised.
                       2 C R S multiply-adds per output; each is an FMA-able pair, but each
                       Y row is loaded and stored once per (c, r, s): 2 loads + 1 store per FMA.
                       The grader's baseline for Lab 4.
    v2 im2col + GEMM   copy every 3x3 window of X into a column of a (C R S) x (H W) matrix
                       (9x the input), then one GEMM per image, Y[n] = W (K x C R S) @ cols, with
                       chapter 1's blocked v3 (kernellab.kernels.gemm_cpu.gemm_v3). Same
                       multiplications as v1, but in GEMM form: the lowering cuDNN's
                       IMPLICIT/PRECOMP_GEMM algorithms build on (Chetlur et al., "cuDNN:
                       Efficient Primitives for Deep Learning", arXiv:1410.0759, §3).
    v3 Winograd 2x2    F(2x2, 3x3) (Lavin & Gray, CVPR 2016, §4-5): the filter transform
                       U = G g G^T once per (k, c); the input transform V = B^T d B per 4x4 input
                       tile (overlapping by 2) and channel; 16 independent GEMMs over channels,
                       M[xi] (K x T) = U[xi] (K x C) @ V[xi] (C x T), T = the number of tiles
                       (chapter 1's v3 again); the output transform Y = A^T M A per tile. 16
                       instead of 36 multiplications per output tile per channel pair (2.25x).
    v4 Winograd 4x4    the same pipeline with F(4x4, 3x3): 6x6 tiles, 36 GEMMs, 36 instead of
                       144 multiplications (4x), larger transforms (entries up to 8 and 1/24).

The transforms come from :func:`kernellab.topics.winograd.transforms` (Cook–Toom, exact rationals,
checked symbolically), each entry rounded once to float32; the Winograd stages apply them as sparse
rows (only the non-zero entries), so the generic code costs what hand-written F(2x2, 3x3) code does
up to the multiplications by +-1.

Also here: :func:`winograd_stages` (the time of each stage of v3/v4 and its arithmetic
intensity: where the time goes), :func:`winograd_reference` (numpy,
every operation rounded to a chosen dtype, for chapter 4's error study) and
:data:`LADDER` (name -> kernel with a one-line ``description``).

Raises ValueError from every kernel for mismatched shapes, a filter that is not 3x3 (v2-v4),
mixed dtypes or a non-float dtype; TypeError when Y is not a writable numpy array.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
from numba import njit

from kernellab.kernels.gemm_cpu import gemm_v3
from kernellab.topics.winograd import transforms
from reference_kernels.conv import conv2d_direct, conv2d_flops

__all__ = ["conv_v1", "conv_v2", "conv_v3", "conv_v4", "LADDER", "winograd", "winograd_stages",
           "winograd_reference", "conv2d_flops", "sparse_rows",
           "apply_rounded", "winograd_rounding_depth"]

_direct = njit(cache=True)(conv2d_direct)


def _check(X, Wt, Y, r3: bool = True, dtypes=("float32", "float64")):
    if not isinstance(Y, np.ndarray):
        raise TypeError(f"Y must be a numpy array, got {type(Y).__name__}")
    X, Wt = np.asarray(X), np.asarray(Wt)
    if X.ndim != 4 or Wt.ndim != 4 or Y.ndim != 4:
        raise ValueError(f"X (N, C, H, W), Wt (K, C, R, S) and Y (N, K, H, W) must be 4-D; "
                         f"got {X.shape}, {Wt.shape}, {Y.shape}")
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    if Wt.shape[1] != C:
        raise ValueError(f"channel mismatch: X has C={C}, Wt has C={Wt.shape[1]}")
    if r3 and Wt.shape[2:] != (3, 3):
        raise ValueError(f"this kernel is for 3x3 filters, got {Wt.shape[2:]}")
    if Wt.shape[2] % 2 == 0 or Wt.shape[3] % 2 == 0:
        raise ValueError(f"'same' padding needs odd R, S, got {Wt.shape[2:]}")
    if Y.shape != (N, K, H, Wd):
        raise ValueError(f"Y has shape {Y.shape}, expected (N, K, H, W) = {(N, K, H, Wd)}")
    if not (X.dtype == Wt.dtype == Y.dtype) or X.dtype.name not in dtypes:
        raise ValueError(f"X, Wt and Y must share one dtype of {dtypes}; got "
                         f"{X.dtype}, {Wt.dtype}, {Y.dtype}")
    if not Y.flags.writeable:
        raise ValueError("Y is read-only")
    if min(X.shape) < 1 or K < 1:
        raise ValueError(f"every dimension must be >= 1: X {X.shape}, Wt {Wt.shape}")
    return np.ascontiguousarray(X), np.ascontiguousarray(Wt)


def _kernel(name: str, description: str, fn):
    fn.__name__ = fn.__qualname__ = f"conv_{name.split('_')[0]}"
    fn.description = description
    fn.ladder_name = name
    return fn


# ----------------------------------------------------------------------------------------------
# v1: direct
# ----------------------------------------------------------------------------------------------

def conv_v1(X, Wt, Y):
    X, Wt = _check(X, Wt, Y, r3=False)
    _direct(X, Wt, Y)


# ----------------------------------------------------------------------------------------------
# v2: im2col + GEMM
# ----------------------------------------------------------------------------------------------

@njit(cache=True)
def _im2col(X, n, cols):
    """cols[(c*3 + r)*3 + s, p*W + q] = X[n, c, p + r - 1, q + s - 1] (0 outside)."""
    _, C, H, Wd = X.shape
    for c in range(C):
        Xc = X[n, c]
        for r in range(3):
            for s in range(3):
                row = cols[(c * 3 + r) * 3 + s]
                for p in range(H):
                    ih = p + r - 1
                    out = row[p * Wd:(p + 1) * Wd]
                    if ih < 0 or ih >= H:
                        for q in range(Wd):
                            out[q] = 0
                        continue
                    xrow = Xc[ih]
                    for q in range(Wd):
                        iw = q + s - 1
                        out[q] = xrow[iw] if 0 <= iw < Wd else 0


def conv_v2(X, Wt, Y):
    X, Wt = _check(X, Wt, Y)
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    cols = np.empty((C * 9, H * Wd), X.dtype)
    Wm = Wt.reshape(K, C * 9)
    out = np.empty((K, H * Wd), X.dtype)
    for n in range(N):
        _im2col(X, n, cols)
        gemm_v3(Wm, cols, out)
        Y[n] = out.reshape(K, H, Wd)


# ----------------------------------------------------------------------------------------------
# v3 / v4: Winograd F(m x m, 3 x 3)
# ----------------------------------------------------------------------------------------------

def sparse_rows(M: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR form of a small dense matrix: (row pointers int64, column indices int64, values)."""
    ptr, idx, val = [0], [], []
    for row in M:
        for j, v in enumerate(row):
            if v != 0:
                idx.append(j)
                val.append(v)
        ptr.append(len(idx))
    return (np.array(ptr, np.int64), np.array(idx, np.int64), np.array(val, M.dtype))


@njit(cache=True)
def _apply_rows(ptr, idx, val, src, dst):
    """dst[i, :] = sum_j M[i, j] src[j, :] for a CSR matrix M."""
    for i in range(ptr.shape[0] - 1):
        for q in range(dst.shape[1]):
            acc = src.dtype.type(0)
            for e in range(ptr[i], ptr[i + 1]):
                acc += val[e] * src[idx[e], q]
            dst[i, q] = acc


@njit(cache=True)
def _apply_cols(ptr, idx, val, src, dst):
    """dst[:, i] = sum_j src[:, j] M[i, j], i.e. dst = src @ M^T for a CSR matrix M."""
    for p in range(dst.shape[0]):
        for i in range(ptr.shape[0] - 1):
            acc = src.dtype.type(0)
            for e in range(ptr[i], ptr[i + 1]):
                acc += src[p, idx[e]] * val[e]
            dst[p, i] = acc


@njit(cache=True)
def _filter_transform(Wt, gp, gi, gv, U):
    """U[xi, k, c] = (G g G^T)[xi // alpha, xi % alpha] for g = Wt[k, c]: once per filter."""
    K, C = Wt.shape[0], Wt.shape[1]
    alpha = gp.shape[0] - 1
    t = np.empty((alpha, 3), Wt.dtype)
    u = np.empty((alpha, alpha), Wt.dtype)
    for k in range(K):
        for c in range(C):
            _apply_rows(gp, gi, gv, Wt[k, c], t)
            _apply_cols(gp, gi, gv, t, u)
            for a in range(alpha):
                for b in range(alpha):
                    U[a * alpha + b, k, c] = u[a, b]


@njit(cache=True)
def _rows_over_tiles(ptr, idx, val, src, dst):
    """dst[i, b, :] = sum_j M[i, j] src[j, b, :] for a CSR matrix M; the last axis runs over a
    row of tiles, stride 1, so the inner loop vectorises."""
    for i in range(ptr.shape[0] - 1):
        for b in range(dst.shape[1]):
            out = dst[i, b]
            for x in range(out.shape[0]):
                out[x] = 0
            for e in range(ptr[i], ptr[i + 1]):
                v = val[e]
                row = src[idx[e], b]
                for x in range(out.shape[0]):
                    out[x] += v * row[x]


@njit(cache=True)
def _input_transform(X, bp, bi, bv, m, V):
    """V[xi, c, t] = (B^T d B)[xi // alpha, xi % alpha] for the alpha x alpha input tile d of
    tile t (tiles start every m pixels, at -1 for the padding; pixels outside X read as 0).
    One row of tiles at a time, vectorised across the tiles of the row: V[xi, c, :] is
    contiguous in t."""
    N, C, H, Wd = X.shape
    alpha = bp.shape[0] - 1
    th, tw = (H + m - 1) // m, (Wd + m - 1) // m
    Xp = np.zeros((th * m + 2, tw * m + 2), X.dtype)
    D = np.empty((alpha, alpha, tw), X.dtype)
    T1 = np.empty((alpha, alpha, tw), X.dtype)
    Dt = np.empty((alpha, alpha, tw), X.dtype)
    for n in range(N):
        for c in range(C):
            for p in range(H):             # the zero border stays zero; the interior is X
                src = X[n, c, p]
                dst = Xp[p + 1, 1:Wd + 1]
                for q in range(Wd):
                    dst[q] = src[q]
            for ty in range(th):
                t0 = (n * th + ty) * tw
                for a in range(alpha):
                    xrow = Xp[ty * m + a]
                    for b in range(alpha):
                        for x in range(tw):
                            D[a, b, x] = xrow[x * m + b]
                _rows_over_tiles(bp, bi, bv, D, T1)        # T1 = B^T d   (rows)
                for i in range(alpha):                     # Dt[b, i] = T1[i, b]
                    for b in range(alpha):
                        Dt[b, i] = T1[i, b]
                _rows_over_tiles(bp, bi, bv, Dt, T1)       # T1[j, i] = (B^T d B)[i, j]
                for i in range(alpha):
                    for j in range(alpha):
                        out = V[i * alpha + j, c, t0:t0 + tw]
                        row = T1[j, i]
                        for x in range(tw):
                            out[x] = row[x]


@njit(cache=True)
def _output_transform(Mx, ap, ai, av, m, Y):
    """Y tile = A^T M A for each tile, one row of tiles at a time (vectorised across the
    tiles); the rows/columns of a partial tile past H/W are dropped."""
    N, K, H, Wd = Y.shape
    alpha = m + 2  # 3x3 filters: alpha = m + r - 1
    th, tw = (H + m - 1) // m, (Wd + m - 1) // m
    Mt = np.empty((alpha, alpha, tw), Y.dtype)
    T1 = np.empty((m, alpha, tw), Y.dtype)
    T1t = np.empty((alpha, m, tw), Y.dtype)
    Yt = np.empty((m, m, tw), Y.dtype)
    for n in range(N):
        for k in range(K):
            for ty in range(th):
                t0 = (n * th + ty) * tw
                for a in range(alpha):
                    for b in range(alpha):
                        src = Mx[a * alpha + b, k, t0:t0 + tw]
                        dst = Mt[a, b]
                        for x in range(tw):
                            dst[x] = src[x]
                _rows_over_tiles(ap, ai, av, Mt, T1)       # T1 = A^T M   (m x alpha)
                for i in range(m):
                    for b in range(alpha):
                        T1t[b, i] = T1[i, b]
                _rows_over_tiles(ap, ai, av, T1t, Yt)      # Yt[j, i] = (A^T M A)[i, j]
                for i in range(min(m, H - ty * m)):
                    yrow = Y[n, k, ty * m + i]
                    for j in range(m):
                        row = Yt[j, i]
                        for x in range(tw):
                            q = x * m + j
                            if q < Wd:
                                yrow[q] = row[x]


def _plan(m: int, dtype):
    AT, G, BT = transforms(m, 3).arrays(dtype)
    return sparse_rows(AT), sparse_rows(G), sparse_rows(BT)


def winograd(X, Wt, Y, m: int = 2, *, _times: dict | None = None) -> None:
    """Winograd F(m x m, 3 x 3) convolution (v3: m = 2, v4: m = 4; m = 6 works too), the four
    stages described in the module docstring, in float32. ``_times``, if a dict, receives each
    stage's wall time in seconds."""
    X, Wt = _check(X, Wt, Y, dtypes=("float32",))
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    (ap, ai, av), (gp, gi, gv), (bp, bi, bv) = _plan(m, X.dtype)
    alpha = m + 2
    T = N * -(-H // m) * -(-Wd // m)
    clock = time.perf_counter
    t0 = clock()
    U = np.empty((alpha * alpha, K, C), X.dtype)
    _filter_transform(Wt, gp, gi, gv, U)
    t1 = clock()
    V = np.empty((alpha * alpha, C, T), X.dtype)
    _input_transform(X, bp, bi, bv, m, V)
    t2 = clock()
    Mx = np.empty((alpha * alpha, K, T), X.dtype)
    for xi in range(alpha * alpha):
        gemm_v3(U[xi], V[xi], Mx[xi])
    t3 = clock()
    _output_transform(Mx, ap, ai, av, m, Y)
    t4 = clock()
    if _times is not None:
        _times.update({"filter transform": t1 - t0, "input transform": t2 - t1,
                       "GEMMs": t3 - t2, "output transform": t4 - t3})


def conv_v3(X, Wt, Y):
    winograd(X, Wt, Y, 2)


def conv_v4(X, Wt, Y):
    winograd(X, Wt, Y, 4)


conv_v1 = _kernel("v1_direct", "direct: loop order n,k,c,r,s,p,q, vectorised q loop; the "
                  "Lab 4 baseline", conv_v1)
conv_v2 = _kernel("v2_im2col", "im2col (9x the input) + chapter 1's blocked GEMM (v3)", conv_v2)
conv_v3 = _kernel("v3_winograd_2x2", "Winograd F(2x2,3x3): transforms + 16 GEMMs over "
                  "channels (chapter 1's v3)", conv_v3)
conv_v4 = _kernel("v4_winograd_4x4", "Winograd F(4x4,3x3): transforms + 36 GEMMs over "
                  "channels (chapter 1's v3)", conv_v4)

#: name -> kernel, in ladder order; each kernel has a one-line ``.description``.
LADDER: "OrderedDict[str, object]" = OrderedDict(
    (k.ladder_name, k) for k in (conv_v1, conv_v2, conv_v3, conv_v4))


def winograd_stages(X, Wt, m: int = 2, repeats: int = 3) -> list[dict]:
    """Where the time of F(m x m, 3 x 3) goes: for each stage, the median wall time over
    ``repeats`` runs (seconds), its floating-point operations as executed here (the sparse
    transforms: one multiply and one add per non-zero entry, +-1 included), the bytes it must
    move at least (each array read and written once, float32) and their ratio, the arithmetic
    intensity (FLOP/byte). The GEMMs' intensity is that of one K x C x T GEMM; the transforms'
    is a few FLOPs per byte: they are memory-bound stages (Lavin & Gray 2016, §5; the reason
    implicit GEMM often wins on tensor-core GPUs)."""
    X = np.ascontiguousarray(X, np.float32)
    Wt = np.ascontiguousarray(Wt, np.float32)
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    Y = np.empty((N, K, H, Wd), np.float32)
    runs = []
    for _ in range(repeats + 1):  # the first run compiles
        t: dict = {}
        winograd(X, Wt, Y, m, _times=t)
        runs.append(t)
    runs = runs[1:]
    alpha = m + 2
    T = N * -(-H // m) * -(-Wd // m)
    nz = {name: int(np.count_nonzero(M)) for name, M in
          zip(("AT", "G", "BT"), transforms(m, 3).arrays())}
    # sparse row application: 2 FLOPs per non-zero per column
    flops = {
        "filter transform": K * C * 2 * (nz["G"] * 3 + nz["G"] * alpha),
        "input transform": N * C * (T // N) * 2 * (nz["BT"] * alpha * 2),
        "GEMMs": alpha * alpha * 2 * K * C * T,
        "output transform": K * T * 2 * (nz["AT"] * alpha + nz["AT"] * m),
    }
    f4 = 4
    bytes_ = {
        "filter transform": f4 * (K * C * 9 + alpha * alpha * K * C),
        "input transform": f4 * (N * C * H * Wd + alpha * alpha * C * T),
        "GEMMs": f4 * alpha * alpha * (K * C + C * T + K * T),
        "output transform": f4 * (alpha * alpha * K * T + N * K * H * Wd),
    }
    out = []
    for stage in ("filter transform", "input transform", "GEMMs", "output transform"):
        sec = float(np.median([r[stage] for r in runs]))
        out.append({"stage": stage, "seconds": sec, "flops": flops[stage],
                    "bytes": bytes_[stage], "intensity": flops[stage] / bytes_[stage],
                    "gflops": flops[stage] / sec / 1e9 if sec > 0 else float("nan")})
    return out


# ----------------------------------------------------------------------------------------------
# Numerics: every operation rounded to a chosen dtype (numpy, vectorised over tiles)
# ----------------------------------------------------------------------------------------------

def apply_rounded(M, src, axis: int, dtype):
    """Apply the exact matrix M (Fractions, n_out x n_in) along ``axis`` of ``src`` (length n_in
    there; becomes n_out): each output row is a left-to-right sum of (coefficient rounded to
    dtype) x row over M's non-zero entries, every product and sum rounded to ``dtype`` (numpy
    float16/float32 arithmetic rounds each operation); coefficients +-1 cost no product.
    ``dtype``: anything ``np.dtype`` accepts; coefficients are rounded as
    :func:`kernellab.topics.winograd.as_array` rounds them."""
    from kernellab.topics.winograd import as_array

    dtype = np.dtype(dtype)
    src = np.moveaxis(src, axis, 0)
    out = []
    for row in M:
        acc = None
        for j, coef in enumerate(row):
            if coef == 0:
                continue
            if coef == 1:
                term = src[j]
            elif coef == -1:
                term = -src[j]
            else:
                term = (as_array(((coef,),), dtype)[0, 0] * src[j]).astype(dtype)
            acc = term if acc is None else (acc + term).astype(dtype)
        out.append(acc if acc is not None else np.zeros_like(src[0]))
    return np.moveaxis(np.stack(out), 0, axis)


def winograd_reference(X, Wt, m: int = 2, dtype=np.float32, points=None) -> np.ndarray:
    """F(m x m, 3 x 3) with every operation rounded to ``dtype``: transforms as left-to-right
    sums of the exact matrices' non-zero entries (each coefficient rounded to ``dtype``), the
    channel sum sequential over c. ``points``: the finite interpolation points (default: the
    standard ones, :data:`kernellab.topics.winograd.POINTS`). Returns (N, K, H, W) of ``dtype``."""
    from kernellab.topics.winograd import cook_toom

    t = transforms(m, 3) if points is None else cook_toom(m, 3, points)
    return _winograd_rounded(X, Wt, t, np.dtype(dtype))


def winograd_rounding_depth(m: int, C: int) -> int:
    """Operations one term of an F(m x m, 3 x 3) output passes through that round (an upper
    bound): the filter transform's two sums of at most 3 terms, the input transform's two of at
    most alpha, the product, the channel sum of C, the output transform's two of at most alpha:
    C + 4 alpha + 7 with alpha = m + 2. The K of a K-aware bound
    (:class:`kernellab.numerics.KAware`) with :func:`kernellab.topics.winograd.abs_bound` as
    its |A||B|."""
    return C + 4 * (m + 2) + 7


def _winograd_rounded(X, Wt, t, dtype) -> np.ndarray:
    m = t.m
    X = np.asarray(X).astype(dtype)
    Wt = np.asarray(Wt).astype(dtype)
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    alpha = m + 2
    th, tw = -(-H // m), -(-Wd // m)
    Xp = np.zeros((N, C, th * m + 2, tw * m + 2), dtype)
    Xp[:, :, 1:1 + H, 1:1 + Wd] = X
    idx_h = (np.arange(th)[:, None] * m + np.arange(alpha)[None, :])   # th x alpha
    idx_w = (np.arange(tw)[:, None] * m + np.arange(alpha)[None, :])
    d = Xp[:, :, idx_h[:, None, :, None], idx_w[None, :, None, :]]    # N C th tw a a
    U = apply_rounded(t.G, Wt, 2, dtype)          # K C alpha 3
    U = apply_rounded(t.G, U, 3, dtype)           # K C alpha alpha
    V = apply_rounded(t.BT, d, 4, dtype)
    V = apply_rounded(t.BT, V, 5, dtype)          # N C th tw alpha alpha
    Mx = np.zeros((N, K, th, tw, alpha, alpha), dtype)
    for c in range(C):
        prod = (U[None, :, c, None, None] * V[:, None, c]).astype(dtype)
        Mx = (Mx + prod).astype(dtype)
    Yt = apply_rounded(t.AT, Mx, 4, dtype)
    Yt = apply_rounded(t.AT, Yt, 5, dtype)        # N K th tw m m
    Y = Yt.transpose(0, 1, 2, 4, 3, 5).reshape(N, K, th * m, tw * m)
    return np.ascontiguousarray(Y[:, :, :H, :Wd])
