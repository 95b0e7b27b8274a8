"""Chapter 3: row softmax in CUDA, Y[r, :] = softmax(X[r, :]), three versions side by side.

One harness, one block of :data:`TPB` threads per row (grid = M blocks), rows of any length
N >= 1 (threads stride through the row: element j belongs to thread j % TPB). ``X`` (M, N) is
float32 or float16; ``Y`` has X's shape and dtype; statistics (max, sum) are float32 for both,
so a float16 row is widened once when it is loaded (``float32(X[r, j])``). Masked positions
are ``-inf``; a row that is entirely ``-inf`` is written as zeros (the course's definition,
:func:`reference_kernels.reductions.softmax_golden`).

Versions (global accesses per element in brackets)::

    v1 naive        y = exp(x) / sum_j exp(x_j), one kernel: a block reduction of exp(x), then
                    a second sweep writing exp(x) / d. [2 loads + 1 store] It overflows:
                    expf(x) is inf for x > 88.7 in float32, and the row becomes NaN (inf/inf);
                    a row of ±1e4 does.
    v2 three-pass   the safe softmax as three kernels (what an unfused framework runs): row max
                    -> m (M,), then d = sum_j exp(x_j - m) -> d (M,), then y = exp(x - m) / d.
                    Every exponent is <= 0, so nothing overflows and d >= 1.
                    [3 loads + 1 store, each launch reading X from DRAM]
    v3 online       one kernel (Milakov & Gimelshein, "Online normalizer calculation for
                    softmax", arXiv:1805.02867, 2018): each thread keeps a running max m and a
                    running sum d rescaled whenever m grows (d <- d * exp(m_old - m_new) + 1);
                    threads' (m, d) pairs are merged by a warp-shuffle tree and then across
                    warps with the same rule, (m, d) + (m', d') = (M, d e^(m - M) + d' e^(m' - M))
                    with M = max(m, m'); then one sweep writes exp(x - m) / d.
                    [2 loads + 1 store; the second load of a row hits L2]

The block reductions (max, sum, (m, d) merge) are warp shuffles (``shfl_xor_sync``, five
butterfly steps: every lane ends with the warp's result), one shared slot per warp, a barrier,
and the same butterfly over the warp results; a second barrier before the slots are reused
(without it a fast warp may overwrite a slot a slow warp has not read: a write-after-read race
the sim tier reports).

Modelled on the sim tier (:mod:`kernellab.sim.model`, perfect L2 within a launch, emptied
between launches): v2 moves 4 N x itemsize bytes of DRAM per row in three launches, v1 and v3
two in one, so v3 is about 2x v2 when DRAM-bound: the grader's baseline for the
``softmax-cuda`` lab is v2. On a GPU that 2x needs an X larger than L2 (the chip's L2 size:
``kernellab.sim.model.get_profile(name).l2_bytes``, with its source there); a smaller X stays
in L2 between v2's launches.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab.kernels._cuda_args import is_device_array

__all__ = ["softmax_v1", "softmax_v2", "softmax_v3", "LADDER", "KERNELS", "TPB",
           "accesses_per_element", "ladder_case", "gpu_baselines", "main"]

#: Threads per block (one block per row): 8 warps.
TPB = 256
_WARPS = TPB // 32
_FULL = 0xFFFFFFFF
_NEG_INF = -math.inf


def accesses_per_element(version: str) -> dict:
    """Global loads and stores per element of X of each version (module docstring)."""
    return {"v1_naive": {"loads": 2, "stores": 1}, "v2_three_pass": {"loads": 3, "stores": 1},
            "v3_online": {"loads": 2, "stores": 1}}[version]


# ----------------------------------------------------------------------------------------------
# warp and block reductions (device functions shared by the versions)
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True)
def _warp_max(v):
    off = 16
    while off > 0:
        v = max(v, cuda.shfl_xor_sync(_FULL, v, off))
        off //= 2
    return v


@cuda.jit(device=True)
def _warp_sum(v):
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(_FULL, v, off)
        off //= 2
    return v


@cuda.jit(device=True)
def _block_max(v, slots):
    """Max over the block; every thread gets it. ``slots``: shared float32[_WARPS]."""
    lane = cuda.threadIdx.x % 32
    warp = cuda.threadIdx.x // 32
    v = _warp_max(v)
    if lane == 0:
        slots[warp] = v
    cuda.syncthreads()
    v = slots[lane] if lane < _WARPS else float32(_NEG_INF)
    v = _warp_max(v)
    cuda.syncthreads()          # slots are reused by the next reduction
    return v


@cuda.jit(device=True)
def _block_sum(v, slots):
    """Sum over the block; every thread gets it. ``slots``: shared float32[_WARPS]."""
    lane = cuda.threadIdx.x % 32
    warp = cuda.threadIdx.x // 32
    v = _warp_sum(v)
    if lane == 0:
        slots[warp] = v
    cuda.syncthreads()
    v = slots[lane] if lane < _WARPS else float32(0.0)
    v = _warp_sum(v)
    cuda.syncthreads()
    return v


@cuda.jit(device=True)
def _merge(m, d, m2, d2):
    """Online-softmax merge of two partial (max, sum) pairs; (-inf, 0) is the identity."""
    mm = max(m, m2)
    if mm == _NEG_INF:
        return mm, float32(0.0)
    return mm, d * math.exp(m - mm) + d2 * math.exp(m2 - mm)


@cuda.jit(device=True)
def _warp_merge(m, d):
    off = 16
    while off > 0:
        m2 = cuda.shfl_xor_sync(_FULL, m, off)
        d2 = cuda.shfl_xor_sync(_FULL, d, off)
        m, d = _merge(m, d, m2, d2)
        off //= 2
    return m, d


# ----------------------------------------------------------------------------------------------
# v1: naive (no max: overflows)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _v1_kernel(X, Y):
    slots = cuda.shared.array(_WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = X.shape[1]
    d = float32(0.0)
    for j in range(t, n, TPB):
        d += math.exp(float32(X[r, j]))
    d = _block_sum(d, slots)
    for j in range(t, n, TPB):
        Y[r, j] = math.exp(float32(X[r, j])) / d


# ----------------------------------------------------------------------------------------------
# v2: safe softmax in three kernels
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _v2_max_kernel(X, m_out):
    slots = cuda.shared.array(_WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    m = float32(_NEG_INF)
    for j in range(t, X.shape[1], TPB):
        m = max(m, float32(X[r, j]))
    m = _block_max(m, slots)
    if t == 0:
        m_out[r] = m


@cuda.jit
def _v2_sum_kernel(X, m_in, d_out):
    slots = cuda.shared.array(_WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    m = m_in[r]
    d = float32(0.0)
    if m != _NEG_INF:
        for j in range(t, X.shape[1], TPB):
            d += math.exp(float32(X[r, j]) - m)
    d = _block_sum(d, slots)
    if t == 0:
        d_out[r] = d


@cuda.jit
def _v2_normalise_kernel(X, m_in, d_in, Y):
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    m = m_in[r]
    d = d_in[r]
    for j in range(t, X.shape[1], TPB):
        if m == _NEG_INF:
            Y[r, j] = 0.0
        else:
            Y[r, j] = math.exp(float32(X[r, j]) - m) / d


# ----------------------------------------------------------------------------------------------
# v3: online softmax, one kernel
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _v3_kernel(X, Y):
    slots_m = cuda.shared.array(_WARPS, float32)
    slots_d = cuda.shared.array(_WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    lane = t % 32
    warp = t // 32
    m = float32(_NEG_INF)
    d = float32(0.0)
    for j in range(t, X.shape[1], TPB):
        x = float32(X[r, j])
        if x > m:
            d = d * math.exp(m - x) + float32(1.0)     # exp(-inf) = 0 on the first element
            m = x
        elif x != _NEG_INF:
            d += math.exp(x - m)
    m, d = _warp_merge(m, d)
    if lane == 0:
        slots_m[warp] = m
        slots_d[warp] = d
    cuda.syncthreads()
    if lane < _WARPS:
        m = slots_m[lane]
        d = slots_d[lane]
    else:
        m = float32(_NEG_INF)
        d = float32(0.0)
    m, d = _warp_merge(m, d)
    for j in range(t, X.shape[1], TPB):
        if m == _NEG_INF:
            Y[r, j] = 0.0
        else:
            Y[r, j] = math.exp(float32(X[r, j]) - m) / d


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------

_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _check(X, Y):
    for name, a in (("X", X), ("Y", Y)):
        if not (isinstance(a, np.ndarray) or is_device_array(a)):
            raise TypeError(f"{name} must be a numpy array or a numba device array, "
                            f"got {type(a).__name__}")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D (M, N), got shape {a.shape}")
        if np.dtype(a.dtype) not in _DTYPES:
            raise ValueError(f"{name} must be float32 or float16, got {a.dtype}")
    if X.shape != Y.shape or np.dtype(X.dtype) != np.dtype(Y.dtype):
        raise ValueError(f"Y must match X: X {X.shape} {X.dtype}, Y {Y.shape} {Y.dtype}")
    if X.shape[1] < 1:
        raise ValueError("rows must have at least one element (N >= 1)")
    if isinstance(Y, np.ndarray):
        if not Y.flags.writeable:
            raise ValueError("Y is read-only")
        if isinstance(X, np.ndarray) and np.shares_memory(X, Y):
            raise ValueError("Y overlaps X: softmax is not in place here")


def _run(launches, X, Y):
    """Copy numpy arguments to the device, run ``launches(dX, dY)``, copy Y back."""
    _check(X, Y)
    if X.shape[0] == 0:
        return
    host_y = isinstance(Y, np.ndarray)
    dX = cuda.to_device(np.ascontiguousarray(X)) if isinstance(X, np.ndarray) else X
    dY = cuda.to_device(np.ascontiguousarray(Y)) if host_y else Y
    launches(dX, dY)
    if host_y:
        Y[...] = dY.copy_to_host()


def softmax_v1(X, Y):
    """v1 naive: ``Y = exp(X) / rowsum(exp(X))`` without the max (overflows for x > 88.7).
    X, Y (M, N) float32 or float16; Y written in place. Raises TypeError/ValueError (harness)."""
    _run(lambda dX, dY: _v1_kernel[dX.shape[0], TPB](dX, dY), X, Y)


def softmax_v2(X, Y):
    """v2 three-pass safe softmax: three launches (row max, sum of exponentials, normalise)
    with float32 statistics in device arrays m, d (M,). Same arguments as :func:`softmax_v1`."""
    def go(dX, dY):
        M = dX.shape[0]
        m = cuda.device_array(M, np.float32)
        d = cuda.device_array(M, np.float32)
        _v2_max_kernel[M, TPB](dX, m)
        _v2_sum_kernel[M, TPB](dX, m, d)
        _v2_normalise_kernel[M, TPB](dX, m, d, dY)
    _run(go, X, Y)


def softmax_v3(X, Y):
    """v3 online softmax (Milakov & Gimelshein 2018) in one launch. Same arguments as
    :func:`softmax_v1`."""
    _run(lambda dX, dY: _v3_kernel[dX.shape[0], TPB](dX, dY), X, Y)


#: version name -> launch function, in ladder order.
LADDER = OrderedDict([("v1_naive", softmax_v1), ("v2_three_pass", softmax_v2),
                      ("v3_online", softmax_v3)])

#: version name -> its kernels.
KERNELS = {"v1_naive": (_v1_kernel,),
           "v2_three_pass": (_v2_max_kernel, _v2_sum_kernel, _v2_normalise_kernel),
           "v3_online": (_v3_kernel,)}


# ----------------------------------------------------------------------------------------------
# main: validate every version, then time it (kernellab.kernels._ladder)
# ----------------------------------------------------------------------------------------------

#: default (M, N) of :func:`main`'s case, per tier.
DEFAULT_SHAPE = {"sim": (8, 1000), "gpu": (4096, 8192)}


def ladder_case(M: int, N: int, dtype="float32", *, seed: int = 0):
    """The case ``python -m kernellab.kernels.softmax_cuda`` validates and times: X (M, N) =
    3 x seeded standard normal in ``dtype`` (float32 or float16; v1 does not overflow there),
    Y like X, checked against ``reference_kernels.reductions.softmax_golden`` under
    :class:`kernellab.numerics.RowSoftmax`. Work: the 2 M N itemsize bytes a row softmax must
    move (read X, write Y). Raises ValueError for M, N < 1 or another dtype."""
    from kernellab import numerics
    from kernellab.kernels import _ladder
    from reference_kernels.reductions import softmax_golden, softmax_shift

    M, N, dt = int(M), int(N), np.dtype(dtype)
    if M < 1 or N < 1:
        raise ValueError(f"need M, N >= 1, got M={M}, N={N}")
    if dt not in _DTYPES:
        raise ValueError(f"dtype must be float32 or float16, got {dt}")
    X = (3 * np.random.default_rng(seed).standard_normal((M, N))).astype(dt)
    ref = softmax_golden(X)
    pol = numerics.RowSoftmax(N=N, acc_dtype="float32", out_dtype=dt.name, shift=softmax_shift(X))
    return _ladder.Case(label=f"M={M} N={N} {dt.name}", inputs={"X": X},
                        outputs={"Y": ((M, N), dt)},
                        check=lambda _n, out: numerics.compare(out["Y"], ref, pol, tile=None),
                        work=2 * X.nbytes, work_unit="B")


def gpu_baselines(case) -> list:
    """gpu tier: a device-to-device copy of X, the bandwidth the lab's rule compares with."""
    from kernellab.kernels import _ladder

    return [_ladder.copy_baseline(case, "X")]


def main(argv=None) -> int:
    """``python -m kernellab.kernels.softmax_cuda [--shape M N] [--dtype float16]``: every
    version checked, then timed (modelled on the sim tier, CUDA events on the gpu tier against
    a device copy); see :func:`kernellab.kernels._ladder.cli`."""
    from kernellab.kernels import _ladder

    def add(ap, tier):
        m, n = DEFAULT_SHAPE.get(tier, DEFAULT_SHAPE["sim"])
        ap.add_argument("--shape", type=int, nargs=2, metavar=("M", "N"), default=(m, n),
                        help=f"rows and row length (default {m} {n} here)")
        ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
        ap.add_argument("--seed", type=int, default=0, help="the input's seed (default 0)")

    return _ladder.cli(argv, prog="python -m kernellab.kernels.softmax_cuda",
                       doc="Chapter 3's softmax ladder: validate every version, then time it.",
                       versions=LADDER,
                       make_case=lambda a: ladder_case(*a.shape, a.dtype, seed=a.seed),
                       add_arguments=add, baselines=gpu_baselines)


if __name__ == "__main__":
    import sys

    sys.exit(main())
