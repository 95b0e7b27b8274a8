# KNOWN WRONG: one element per thread with 1024-thread blocks and no loop over the row: rows
# longer than 1024 elements are summed (and normalised) over their first 1024 only; the rest
# of Y is never written (still NaN).
# Expected: the cases with N = 1025 and N = 4097 fail; every shorter row passes.
import math

import numpy as np
from numba import cuda, float32

TPB = 1024               # threads per block: one block per row (one element per thread)
WARPS = TPB // 32        # 32 warps, 32 shared slots
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
    j = cuda.threadIdx.x                   # BUG: one element per thread, no loop over the row
    if j < X.shape[1]:
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
    if t < n:                              # BUG: elements beyond 1024 are never read
        m = max(m, float32(X[r, t]))
    m = block_max(m, slots)
    if m == -math.inf:                     # the whole row is masked: the whole block agrees
        if t < n:
            Y[r, t] = 0.0
        return
    d = float32(0.0)
    if t < n:
        d += math.exp(float32(X[r, t]) - m)
    d = block_sum(d, slots)
    inv_d = float32(1.0) / d
    if t < n:
        Y[r, t] = math.exp(float32(X[r, t]) - m) * inv_d


def softmax(X, Y):
    """Y = row softmax of X: X, Y (M, N), both float32 or both float16; numpy or device
    arrays."""
    softmax_kernel[X.shape[0], TPB](X, Y)
    ### END SOLUTION
