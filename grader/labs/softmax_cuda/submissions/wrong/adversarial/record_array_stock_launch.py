# ADVERSARIAL: the real kernels take a record (structured) array, so the sim tier runs them on
# numba's stock simulator: no race detector (the softmax kernel reads its shared slot with no
# barrier), no counters. A counted kernel then reads X and the output and stores the output.
# Before: 41 of 42 cases passed, the race unseen.
# Expected: every case fails "ran on numba's stock simulator, outside the sim tier's checks".
import math
import numpy as np
from numba import cuda, float32

REC = np.zeros(1, dtype=np.dtype([("a", np.float32)]))


@cuda.jit
def racy_softmax(X, Y, rec):
    s = cuda.shared.array(1, float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = X.shape[1]
    if t == 0:
        m = float32(-math.inf)
        for j in range(n):
            m = max(m, float32(X[r, j]))
        s[0] = m
    m = s[0]                       # no barrier: a race on a GPU
    if m == -math.inf:
        for j in range(t, n, 32):
            Y[r, j] = 0.0
        return
    d = float32(0.0)
    for j in range(n):
        d += math.exp(float32(X[r, j]) - m)
    for j in range(t, n, 32):
        Y[r, j] = math.exp(float32(X[r, j]) - m) / d


@cuda.jit
def racy_sum(X, out, rec):
    r = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        acc = float32(0.0)
        for j in range(X.shape[1]):
            acc += float32(X[r, j])
        out[r] = acc


@cuda.jit
def touch(X, Y):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        x = X[r, j]
        Y[r, j] = Y[r, j]


@cuda.jit
def touch_sum(X, out):
    r = cuda.blockIdx.x
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], 32):
        acc += float32(X[r, j])
    acc = cuda.shfl_down_sync(0xFFFFFFFF, acc, 16)
    if cuda.threadIdx.x == 0:
        out[r] = out[r]


def row_sum(X, out):
    dX = cuda.to_device(X)
    dout = cuda.to_device(out)
    racy_sum[X.shape[0], 32](dX, dout, REC)
    touch_sum[X.shape[0], 32](dX, dout)
    dout.copy_to_host(out)


def softmax(X, Y):
    if isinstance(Y, np.ndarray):
        dX = cuda.to_device(X)
        dY = cuda.to_device(Y)
        racy_softmax[X.shape[0], 32](dX, dY, REC)
        touch[X.shape[0], 256](dX, dY)
        dY.copy_to_host(Y)
    else:
        racy_softmax[X.shape[0], 32](X, Y, REC)
        touch[X.shape[0], 256](X, Y)
