# HONEST (design): a warp per row, ROWS rows a block of (32, ROWS) threads, shuffles only, no
# shared memory. The lab teaches one block per row; this is the usual fast softmax for short
# rows. Expected: the cases and the gate pass. At the timed shape (128 rows) 8 rows a block
# make 16 blocks for 108 SMs, and the model charges the idle SMs: the speed rule fails, as
# it would run on a GPU; with ROWS = 1 (128 blocks) it passes.
import math
import numpy as np
from numba import cuda, float32

FULL = 0xFFFFFFFF
ROWS = 8


@cuda.jit(device=True)
def wsum(v):
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(FULL, v, off)
        off //= 2
    return v


@cuda.jit(device=True)
def wmax(v):
    off = 16
    while off > 0:
        v = max(v, cuda.shfl_xor_sync(FULL, v, off))
        off //= 2
    return v


@cuda.jit
def rs_kernel(X, out):
    r = cuda.blockIdx.x * ROWS + cuda.threadIdx.y
    if r >= X.shape[0]:
        return
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], 32):
        acc += float32(X[r, j])
    acc = wsum(acc)
    if cuda.threadIdx.x == 0:
        out[r] = acc


@cuda.jit
def sm_kernel(X, Y):
    r = cuda.blockIdx.x * ROWS + cuda.threadIdx.y
    if r >= X.shape[0]:
        return
    n = X.shape[1]
    m = float32(-math.inf)
    for j in range(cuda.threadIdx.x, n, 32):
        m = max(m, float32(X[r, j]))
    m = wmax(m)
    if m == -math.inf:
        for j in range(cuda.threadIdx.x, n, 32):
            Y[r, j] = 0.0
        return
    d = float32(0.0)
    for j in range(cuda.threadIdx.x, n, 32):
        d += math.exp(float32(X[r, j]) - m)
    d = wsum(d)
    inv = float32(1.0) / d
    for j in range(cuda.threadIdx.x, n, 32):
        Y[r, j] = math.exp(float32(X[r, j]) - m) * inv


def row_sum(X, out):
    rs_kernel[(X.shape[0] + ROWS - 1) // ROWS, (32, ROWS)](X, out)


def softmax(X, Y):
    sm_kernel[(X.shape[0] + ROWS - 1) // ROWS, (32, ROWS)](X, Y)
