# KNOWN WRONG (speed): a correct softmax in two launches, one for the row statistics (max
# and sum) and one to normalise. Each launch reads X from DRAM: 3 accesses per element instead
# of 2, a modelled 1.33x over the three-pass softmax, below the 1.6x the lab asks for.
# Expected: every case passes; the modelled speedup fails; coalescing passes.
import math

import numpy as np
from numba import cuda, float32

TPB = 256                # threads per block: one block per row
WARPS = TPB // 32        # 8 warps, 8 shared slots
FULL_MASK = 0xFFFFFFFF   # all 32 lanes take part in a shuffle


@cuda.jit(device=True)
def warp_sum(v):
    """Sum of v over the warp's 32 lanes; the result is in lane 0."""
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    return v


@cuda.jit(device=True)
def warp_max(v):
    """Max of v over the warp's 32 lanes; the result is in lane 0."""
    offset = 16
    while offset > 0:
        v = max(v, cuda.shfl_down_sync(FULL_MASK, v, offset))
        offset //= 2
    return v


@cuda.jit(device=True)
def block_sum(v, slots):
    """Sum of v over the block's TPB threads, returned to every thread. ``slots``: a shared
    float32 array of WARPS elements."""
    lane = cuda.threadIdx.x % 32
    warp = cuda.threadIdx.x // 32
    v = warp_sum(v)
    if lane == 0:
        slots[warp] = v
    cuda.syncthreads()                     # every warp's partial is in its slot
    if warp == 0:
        v = slots[lane] if lane < WARPS else float32(0.0)
        v = warp_sum(v)
        if lane == 0:
            slots[0] = v
    cuda.syncthreads()                     # the block's sum is in slots[0]
    total = slots[0]
    cuda.syncthreads()                     # everyone has read it: the slots may be reused
    return total


@cuda.jit(device=True)
def block_max(v, slots):
    """Max of v over the block, returned to every thread (as block_sum)."""
    lane = cuda.threadIdx.x % 32
    warp = cuda.threadIdx.x // 32
    v = warp_max(v)
    if lane == 0:
        slots[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = slots[lane] if lane < WARPS else float32(-math.inf)
        v = warp_max(v)
        if lane == 0:
            slots[0] = v
    cuda.syncthreads()
    total = slots[0]
    cuda.syncthreads()
    return total


@cuda.jit
def row_sum_kernel(X, out):
    """out[r] = sum of row r of X; one block of TPB threads per row."""
    slots = cuda.shared.array(WARPS, float32)
    r = cuda.blockIdx.x
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], TPB):
        acc += float32(X[r, j])
    total = block_sum(acc, slots)
    if cuda.threadIdx.x == 0:
        out[r] = total


def row_sum(X, out):
    """out[r] = sum_j X[r, j]: X (M, N) float32/float16, out (M,) float32; numpy or device
    arrays."""
    row_sum_kernel[X.shape[0], TPB](X, out)

@cuda.jit
def softmax_kernel(X, Y):
    """Y[r, :] = softmax(X[r, :]) with float32 statistics; one block of TPB threads per row."""
    slots = cuda.shared.array(WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = X.shape[1]
    m = float32(-math.inf)
    for j in range(t, n, TPB):
        m = max(m, float32(X[r, j]))
    m = block_max(m, slots)
    if m == -math.inf:                     # the whole row is masked: the whole block agrees
        for j in range(t, n, TPB):
            Y[r, j] = 0.0
        return
    d = float32(0.0)
    for j in range(t, n, TPB):
        d += math.exp(float32(X[r, j]) - m)
    d = block_sum(d, slots)
    inv_d = float32(1.0) / d
    for j in range(t, n, TPB):
        Y[r, j] = math.exp(float32(X[r, j]) - m) * inv_d


@cuda.jit
def stats_kernel(X, m_out, d_out):
    """Row max and sum of exponentials, into global memory."""
    slots = cuda.shared.array(WARPS, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = X.shape[1]
    m = float32(-math.inf)
    for j in range(t, n, TPB):
        m = max(m, float32(X[r, j]))
    m = block_max(m, slots)
    d = float32(0.0)
    if m != -math.inf:
        for j in range(t, n, TPB):
            d += math.exp(float32(X[r, j]) - m)
    d = block_sum(d, slots)
    if t == 0:
        m_out[r] = m
        d_out[r] = d


@cuda.jit
def normalise_kernel(X, m_in, d_in, Y):
    r = cuda.blockIdx.x
    m = m_in[r]
    inv_d = float32(1.0) / d_in[r]
    for j in range(cuda.threadIdx.x, X.shape[1], TPB):
        Y[r, j] = 0.0 if m == -math.inf else math.exp(float32(X[r, j]) - m) * inv_d


def softmax(X, Y):
    """Two launches: statistics, then normalise (X read from DRAM twice)."""
    M = X.shape[0]
    on_host = isinstance(Y, np.ndarray)
    dX = cuda.to_device(X) if isinstance(X, np.ndarray) else X
    dY = cuda.to_device(Y) if on_host else Y
    m = cuda.device_array(M, np.float32)
    d = cuda.device_array(M, np.float32)
    stats_kernel[M, TPB](dX, m, d)
    normalise_kernel[M, TPB](dX, m, d, dY)
    if on_host:
        Y[...] = dY.copy_to_host()
    ### END SOLUTION
