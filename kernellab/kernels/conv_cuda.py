"""Chapter 4: 3x3 convolution in CUDA for the sim tier — direct against non-fused Winograd.

Every version has the harness ``conv_vN(X, Wt, Y)``: X (N, C, H, W) "NCHW", Wt (K, C, 3, 3)
"KCRS", Y (N, K, H, W), all float32; stride 1, zero padding 1 (a "same" convolution,
:mod:`reference_kernels.conv`); any N, C, K, H, W >= 1. Y is written in place, returns None; X
and Wt are not modified. numpy arguments are copied to the device and Y back; numba device
arrays are used as they are. Raises ``TypeError`` when an argument is neither a numpy array nor
a numba device array, ``ValueError`` for wrong ranks, mismatched shapes, a filter other than
3x3, a dtype other than float32 or a read-only Y.

Versions (what each launch reads and writes in global memory, float32; T = N ceil(H/2)
ceil(W/2) tiles of 2x2 outputs)::

    v1 direct        one kernel, one thread per output Y[n, k, p, q] (q fastest across the
                     lanes of a warp): 9 C loads of X (coalesced along q, zero padding by a
                     bounds test) and 9 C of Wt (one address per warp: a broadcast), one
                     store. Every X element is asked for 9 K times, every filter tap H W
                     times; the model's L2 (perfect within a launch) turns that into one DRAM
                     read of X and Wt and one write of Y.
    v2 Winograd      F(2x2, 3x3) as cuDNN's WINOGRAD_NONFUSED does it (Lavin & Gray,
       non-fused     "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, §5: the
                     transforms, then batched GEMMs), four launches with the intermediate
                     results in global workspaces:
                     1. filter transform, a thread per (k, c): U[xi, k, c] = (G g G^T), 16 K C
                        floats (done once per filter; inference would keep U);
                     2. input transform, a thread per (c, tile): V[xi, c, t] = (B^T d B) of the
                        4x4 input tile d (tiles every 2 pixels, starting at -1: overlap 2),
                        16 C T floats = 4x the input: the "significant workspace";
                     3. 16 independent GEMMs, one per xi (blockIdx.z), M[xi] (K x T) =
                        U[xi] (K x C) @ V[xi] (C x T), 16 x 16 shared-memory tiles as in
                        chapter 2's v3, 16 K T floats of workspace;
                     4. output transform, a thread per (k, tile): Y tile = A^T M A (2x2).
                     16 instead of 36 multiplications per output tile and channel pair, but
                     V and M go out to DRAM and come back: 2 x 16 (C + K) T floats of extra
                     traffic that the direct kernel does not have.

The F(2, 3) arithmetic in the kernels is written out (additions, subtractions and halves), as
production kernels do; it is that of :func:`kernellab.topics.winograd.transforms` ``(2)`` (points 0,
1, -1; infinity), checked symbolically there, and these kernels against
:func:`reference_kernels.conv.conv2d_golden` in
``tests/test_kernellab/kernels/test_conv_cuda_ladder.py``::

    B^T = [1  0 -1  0]     G = [  1    0    0]     A^T = [1  1  1  0]
          [0  1  1  0]         [1/2  1/2  1/2]           [0  1 -1  1]
          [0 -1  1  0]         [1/2 -1/2  1/2]
          [0 -1  0  1]         [  0    0    1]

:func:`workspace_bytes` gives the three workspaces' sizes; :data:`LADDER` maps names to launch
functions, :data:`KERNELS` to their kernels.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab.kernels._cuda_args import is_device_array

__all__ = ["conv_v1", "conv_v2", "LADDER", "KERNELS", "TPB", "TILE", "ALPHA", "workspace_bytes",
           "tiles", "ladder_case", "main"]

#: Threads per block of the one-thread-per-item kernels (direct, transforms).
TPB = 128
#: Side of the batched GEMM's shared-memory tiles (blocks of TILE x TILE threads).
TILE = 16
#: Input tile side of F(2x2, 3x3): m + r - 1 = 4; 16 = ALPHA**2 GEMMs.
ALPHA = 4


def tiles(N: int, H: int, W: int) -> int:
    """T, the number of 2x2 output tiles of F(2x2, 3x3): N ceil(H/2) ceil(W/2)."""
    return N * ((H + 1) // 2) * ((W + 1) // 2)


def workspace_bytes(N: int, C: int, K: int, H: int, W: int) -> dict:
    """Bytes of v2's float32 workspaces: ``U`` 16 K C, ``V`` 16 C T, ``M`` 16 K T, and
    ``input`` (N C H W) for scale."""
    T = tiles(N, H, W)
    return {"U": 4 * 16 * K * C, "V": 4 * 16 * C * T, "M": 4 * 16 * K * T,
            "input": 4 * N * C * H * W}


# ----------------------------------------------------------------------------------------------
# v1: direct, one thread per output
# ----------------------------------------------------------------------------------------------

@cuda.jit
def direct_kernel(X, Wt, Y):
    """Y[n, k, p, q] = sum_{c, r, s} X[n, c, p + r - 1, q + s - 1] Wt[k, c, r, s]."""
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    i = cuda.grid(1)
    if i >= N * K * H * Wd:
        return
    q = i % Wd
    p = (i // Wd) % H
    k = (i // (Wd * H)) % K
    n = i // (Wd * H * K)
    acc = float32(0.0)
    for c in range(C):
        for r in range(3):
            ih = p + r - 1
            if ih >= 0 and ih < H:
                for s in range(3):
                    iw = q + s - 1
                    if iw >= 0 and iw < Wd:
                        acc += X[n, c, ih, iw] * Wt[k, c, r, s]
    Y[n, k, p, q] = acc


# ----------------------------------------------------------------------------------------------
# v2: non-fused Winograd F(2x2, 3x3)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def filter_transform_kernel(Wt, U):
    """U[4 a + b, k, c] = (G g G^T)[a, b] for g = Wt[k, c]; a thread per (k, c), c fastest."""
    K, C = Wt.shape[0], Wt.shape[1]
    i = cuda.grid(1)
    if i >= K * C:
        return
    c = i % C
    k = i // C
    t = cuda.local.array((4, 3), float32)          # G g
    half = float32(0.5)
    for j in range(3):
        g0 = Wt[k, c, 0, j]
        g1 = Wt[k, c, 1, j]
        g2 = Wt[k, c, 2, j]
        t[0, j] = g0
        t[1, j] = (g0 + g1 + g2) * half
        t[2, j] = (g0 - g1 + g2) * half
        t[3, j] = g2
    for a in range(4):                               # (G g) G^T, row a
        u0 = t[a, 0]
        u1 = t[a, 1]
        u2 = t[a, 2]
        U[4 * a + 0, k, c] = u0
        U[4 * a + 1, k, c] = (u0 + u1 + u2) * half
        U[4 * a + 2, k, c] = (u0 - u1 + u2) * half
        U[4 * a + 3, k, c] = u2


@cuda.jit
def input_transform_kernel(X, V):
    """V[4 a + b, c, t] = (B^T d B)[a, b] for the 4x4 tile d of X[n, c] at rows 2 ty - 1 ..,
    columns 2 tx - 1 .. (zero outside X); t = (n th + ty) tw + tx, a thread per (c, t), t
    fastest (V's stores coalesced)."""
    N, C, H, Wd = X.shape
    th = (H + 1) // 2
    tw = (Wd + 1) // 2
    T = N * th * tw
    i = cuda.grid(1)
    if i >= C * T:
        return
    t = i % T
    c = i // T
    tx = t % tw
    ty = (t // tw) % th
    n = t // (tw * th)
    d = cuda.local.array((4, 4), float32)
    for a in range(4):
        ih = 2 * ty - 1 + a
        for b in range(4):
            iw = 2 * tx - 1 + b
            if ih >= 0 and ih < H and iw >= 0 and iw < Wd:
                d[a, b] = X[n, c, ih, iw]
            else:
                d[a, b] = float32(0.0)
    e = cuda.local.array((4, 4), float32)           # B^T d
    for b in range(4):
        e[0, b] = d[0, b] - d[2, b]
        e[1, b] = d[1, b] + d[2, b]
        e[2, b] = d[2, b] - d[1, b]
        e[3, b] = d[3, b] - d[1, b]
    for a in range(4):                               # (B^T d) B, row a
        V[4 * a + 0, c, t] = e[a, 0] - e[a, 2]
        V[4 * a + 1, c, t] = e[a, 1] + e[a, 2]
        V[4 * a + 2, c, t] = e[a, 2] - e[a, 1]
        V[4 * a + 3, c, t] = e[a, 3] - e[a, 1]


@cuda.jit
def batched_gemm_kernel(U, V, M):
    """M[xi] (K x T) = U[xi] (K x C) @ V[xi] (C x T) for xi = blockIdx.z: TILE x TILE threads a
    TILE x TILE tile of M[xi], C in steps of TILE through shared memory (zero-filled past the
    edges), as chapter 2's v3 does for one GEMM."""
    Us = cuda.shared.array((TILE, TILE), float32)
    Vs = cuda.shared.array((TILE, TILE), float32)
    K, C = U.shape[1], U.shape[2]
    T = V.shape[2]
    xi = cuda.blockIdx.z
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    k = cuda.blockIdx.y * TILE + ty
    t = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for c0 in range(0, C, TILE):
        Us[ty, tx] = U[xi, k, c0 + tx] if k < K and c0 + tx < C else float32(0.0)
        Vs[ty, tx] = V[xi, c0 + ty, t] if c0 + ty < C and t < T else float32(0.0)
        cuda.syncthreads()
        for j in range(TILE):
            acc += Us[ty, j] * Vs[j, tx]
        cuda.syncthreads()
    if k < K and t < T:
        M[xi, k, t] = acc


@cuda.jit
def output_transform_kernel(M, Y):
    """Y[n, k, 2 ty + i, 2 tx + j] = (A^T m A)[i, j] with m[a, b] = M[4 a + b, k, t] (rows and
    columns past H, W dropped); a thread per (k, t), t fastest (M's loads coalesced)."""
    N, K, H, Wd = Y.shape
    th = (H + 1) // 2
    tw = (Wd + 1) // 2
    T = N * th * tw
    i = cuda.grid(1)
    if i >= K * T:
        return
    t = i % T
    k = i // T
    tx = t % tw
    ty = (t // tw) % th
    n = t // (tw * th)
    e = cuda.local.array((2, 4), float32)           # A^T m
    for b in range(4):
        m0 = M[b, k, t]
        m1 = M[4 + b, k, t]
        m2 = M[8 + b, k, t]
        m3 = M[12 + b, k, t]
        e[0, b] = m0 + m1 + m2
        e[1, b] = m1 - m2 + m3
    for a in range(2):                               # (A^T m) A
        p = 2 * ty + a
        if p < H:
            q = 2 * tx
            Y[n, k, p, q] = e[a, 0] + e[a, 1] + e[a, 2]
            if q + 1 < Wd:
                Y[n, k, p, q + 1] = e[a, 1] - e[a, 2] + e[a, 3]


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------

def _check(X, Wt, Y):
    for name, a in (("X", X), ("Wt", Wt), ("Y", Y)):
        if not (isinstance(a, np.ndarray) or is_device_array(a)):
            raise TypeError(f"{name} must be a numpy array or a numba device array, "
                            f"got {type(a).__name__}")
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D, got shape {a.shape}")
        if np.dtype(a.dtype) != np.float32:
            raise ValueError(f"{name} must be float32, got {a.dtype}")
    N, C, H, Wd = X.shape
    if Wt.shape[1] != C or tuple(Wt.shape[2:]) != (3, 3):
        raise ValueError(f"Wt must be (K, C={C}, 3, 3), got {Wt.shape}")
    if tuple(Y.shape) != (N, Wt.shape[0], H, Wd):
        raise ValueError(f"Y has shape {Y.shape}, expected (N, K, H, W) = "
                         f"{(N, Wt.shape[0], H, Wd)}")
    if min(X.shape) < 1 or Wt.shape[0] < 1:
        raise ValueError(f"every dimension must be >= 1: X {X.shape}, Wt {Wt.shape}")
    if isinstance(Y, np.ndarray) and not Y.flags.writeable:
        raise ValueError("Y is read-only")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _run(launches, X, Wt, Y):
    _check(X, Wt, Y)
    host_y = isinstance(Y, np.ndarray)
    dX = cuda.to_device(np.ascontiguousarray(X)) if isinstance(X, np.ndarray) else X
    dW = cuda.to_device(np.ascontiguousarray(Wt)) if isinstance(Wt, np.ndarray) else Wt
    dY = cuda.to_device(np.ascontiguousarray(Y)) if host_y else Y
    launches(dX, dW, dY)
    if host_y:
        Y[...] = dY.copy_to_host()


def conv_v1(X, Wt, Y):
    """v1 direct: one launch, one thread per output (module docstring). X (N, C, H, W), Wt
    (K, C, 3, 3), Y (N, K, H, W), float32; Y written in place."""
    def go(dX, dW, dY):
        n = dY.size
        direct_kernel[_cdiv(n, TPB), TPB](dX, dW, dY)
    _run(go, X, Wt, Y)


def conv_v2(X, Wt, Y):
    """v2 non-fused Winograd F(2x2, 3x3): filter transform, input transform, 16 batched GEMMs,
    output transform, with workspaces U, V, M in device memory (module docstring;
    :func:`workspace_bytes`). Same arguments as :func:`conv_v1`."""
    def go(dX, dW, dY):
        N, C, H, Wd = dX.shape
        K = dW.shape[0]
        T = tiles(N, H, Wd)
        U = cuda.device_array((16, K, C), np.float32)
        V = cuda.device_array((16, C, T), np.float32)
        M = cuda.device_array((16, K, T), np.float32)
        filter_transform_kernel[_cdiv(K * C, TPB), TPB](dW, U)
        input_transform_kernel[_cdiv(C * T, TPB), TPB](dX, V)
        batched_gemm_kernel[(_cdiv(T, TILE), _cdiv(K, TILE), 16), (TILE, TILE)](U, V, M)
        output_transform_kernel[_cdiv(K * T, TPB), TPB](M, dY)
    _run(go, X, Wt, Y)


conv_v1.description = "direct: a thread per output, 9 C loads of X and of Wt each"
conv_v2.description = ("non-fused Winograd F(2x2,3x3): filter / input transforms, 16 batched "
                       "GEMMs, output transform, workspaces in global memory")

#: version name -> launch function, in ladder order.
LADDER = OrderedDict([("v1_direct", conv_v1), ("v2_winograd_nonfused", conv_v2)])

#: version name -> its kernels, in launch order.
KERNELS = {"v1_direct": (direct_kernel,),
           "v2_winograd_nonfused": (filter_transform_kernel, input_transform_kernel,
                                    batched_gemm_kernel, output_transform_kernel)}


# ----------------------------------------------------------------------------------------------
# main: validate every version, then time it (kernellab.kernels._ladder)
# ----------------------------------------------------------------------------------------------

#: default (N, C, H, W, K) of :func:`main`'s case, per tier.
DEFAULT_SHAPE = {"sim": (1, 8, 8, 8, 8), "gpu": (8, 64, 56, 56, 64)}


def ladder_case(N: int, C: int, H: int, W: int, K: int, *, seed: int = 0):
    """The case ``python -m kernellab.kernels.conv_cuda`` validates and times: X (N, C, H, W)
    and Wt (K, C, 3, 3) seeded standard-normal float32, Y (N, K, H, W), checked against
    ``reference_kernels.conv.conv2d_golden`` under the K-aware bound of each version (v1: a dot
    product of 9 C terms; v2: :func:`kernellab.kernels.conv_cpu.winograd_rounding_depth` with
    :func:`kernellab.topics.winograd.abs_bound`), as
    tests/test_kernellab/kernels/test_conv_cuda_ladder.py does. Work: the
    direct convolution's FLOPs. Raises ValueError unless every size is >= 1."""
    from kernellab import numerics
    from kernellab.kernels import _ladder, conv_cpu
    from kernellab.topics import winograd
    from reference_kernels.conv import conv2d_abs, conv2d_flops, conv2d_golden

    N, C, H, W, K = (int(v) for v in (N, C, H, W, K))
    if min(N, C, H, W, K) < 1:
        raise ValueError(f"need N, C, H, W, K >= 1, got {(N, C, H, W, K)}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C, H, W)).astype(np.float32)
    Wt = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    ref = conv2d_golden(X, Wt)
    policies = {
        "v1_direct": numerics.KAware(K=9 * C, acc_dtype="float32", out_dtype="float32",
                                     abs_product=conv2d_abs(X, Wt)),
        "v2_winograd_nonfused": numerics.KAware(
            K=conv_cpu.winograd_rounding_depth(2, C), acc_dtype="float32", out_dtype="float32",
            abs_product=winograd.abs_bound(X, Wt, 2))}

    def check(name, out):
        return numerics.compare(out["Y"], ref, policies.get(name, policies["v1_direct"]),
                                tile=None)
    return _ladder.Case(label=f"N={N} C={C} H={H} W={W} K={K}", inputs={"X": X, "Wt": Wt},
                        outputs={"Y": ((N, K, H, W), np.float32)}, check=check,
                        work=conv2d_flops(N, C, K, H, W), work_unit="FLOP")


def main(argv=None) -> int:
    """``python -m kernellab.kernels.conv_cuda [--shape N C H W K]``: every version checked,
    then timed (modelled on the sim tier, CUDA events on the gpu tier); see
    :func:`kernellab.kernels._ladder.cli`."""
    from kernellab.kernels import _ladder

    def add(ap, tier):
        d = DEFAULT_SHAPE.get(tier, DEFAULT_SHAPE["sim"])
        ap.add_argument("--shape", type=int, nargs=5, metavar=("N", "C", "H", "W", "K"),
                        default=d, help=f"sizes (default {' '.join(map(str, d))} here)")
        ap.add_argument("--seed", type=int, default=0, help="the inputs' seed (default 0)")

    return _ladder.cli(argv, prog="python -m kernellab.kernels.conv_cuda",
                       doc="Chapter 4's convolution ladder: validate every version, then time "
                       "it.", versions=LADDER,
                       make_case=lambda a: ladder_case(*a.shape, seed=a.seed),
                       add_arguments=add)


if __name__ == "__main__":
    import sys

    sys.exit(main())
