# ADVERSARIAL (timed call only): honest on numpy arrays (the correctness cases); on device
# arrays (the performance phase) the softmax is computed on the host and brought in by MODE:
#   touch     copied into Y, then a kernel loads and stores Y (never reads X)
#   scratch   a kernel reads X and stores a scratch array; Y written on the host
#   overwrite a kernel reads X and stores Y; Y then overwritten on the host
#   atomic    copied into Y; a kernel reads X and reads Y with atomic.add(Y, i, 0), stores Y
#   tuple     passed in a tuple argument; a kernel reads X and it, stores Y
#   global    put in a module-level array the kernel reads
# Before: touch, tuple and global scored 100/100 (2.0x). Expected: touch, scratch, overwrite
# and global fail the gate "the softmax was computed by kernels"; atomic and tuple pass it but
# move 12 DRAM bytes per element and fail the modelled speedup.
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


def softmax(X, Y):
    """Y = row softmax of X: X, Y (M, N), both float32 or both float16; numpy or device
    arrays."""
    softmax_kernel[X.shape[0], TPB](X, Y)


MODE = "touch"          # the test substitutes each mode


def _host_softmax(dX):
    Xh = dX.copy_to_host().astype(np.float64)
    m = Xh.max(axis=1, keepdims=True)
    e = np.exp(Xh - m)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


@cuda.jit
def touch_y(Y):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, Y.shape[1], cuda.blockDim.x):
        Y[r, j] = Y[r, j]


@cuda.jit
def read_x_store(X, Z):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        Z[r, j] = X[r, j]


@cuda.jit
def atomic_read(X, Y):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        x = X[r, j]
        v = cuda.atomic.add(Y, (r, j), float32(0.0))
        if x != x:
            v = float32(0.0)
        Y[r, j] = v


@cuda.jit
def from_pack(X, Y, pack):
    S = pack[0]
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        x = X[r, j]
        v = S[r, j]
        if x != x:
            v = float32(0.0)
        Y[r, j] = v


BUF = np.zeros((16, 256), np.float32)   # the test's timed shape (a GPU compile freezes it)


@cuda.jit
def from_global(X, Y):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        x = X[r, j]
        v = BUF[r, j]
        if x != x:
            v = float32(0.0)
        Y[r, j] = v


def _cheat(X, Y):
    M = X.shape[0]
    S = _host_softmax(X)
    if MODE == "touch":
        Y.copy_to_device(S)
        touch_y[M, 256](Y)
    elif MODE == "scratch":
        Z = cuda.device_array(X.shape, np.float32)
        read_x_store[M, 256](X, Z)
        Y.copy_to_device(S)
    elif MODE == "overwrite":
        read_x_store[M, 256](X, Y)
        Y.copy_to_device(S)
    elif MODE == "atomic":
        Y.copy_to_device(S)
        atomic_read[M, 256](X, Y)
    elif MODE == "tuple":
        from_pack[M, 256](X, Y, (S,))
    elif MODE == "global":
        BUF[:S.shape[0], :S.shape[1]] = S
        from_global[M, 256](X, Y)


def softmax(X, Y):
    if isinstance(X, np.ndarray):
        softmax_kernel[X.shape[0], TPB](X, Y)
    else:
        _cheat(X, Y)
