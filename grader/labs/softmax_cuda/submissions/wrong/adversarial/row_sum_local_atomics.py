# ADVERSARIAL: row_sum computed on the host; the kernel reads X, executes one shuffle and does
# atomics on a local array, which the old check counted as stores of the output.
# Before: every case passed. Expected: the row_sum cases fail "the kernels stored to 0
# element(s) of global memory"; softmax (an honest one-thread-a-row kernel) passes.
import math
import numpy as np
from numba import cuda, float32


@cuda.jit
def fake(X, n_atomics):
    r = cuda.blockIdx.x
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], 32):
        acc += float32(X[r, j])
    acc = cuda.shfl_down_sync(0xFFFFFFFF, acc, 16)
    loc = cuda.local.array(1, float32)
    loc[0] = 0.0
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(loc, 0, acc)


def row_sum(X, out):
    out[:] = X.astype(np.float64).sum(axis=1)
    fake[X.shape[0], 32](X, 0)


@cuda.jit
def sm(X, Y):
    r = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        n = X.shape[1]
        m = float32(-math.inf)
        for j in range(n):
            m = max(m, float32(X[r, j]))
        if m == -math.inf:
            for j in range(n):
                Y[r, j] = 0.0
            return
        d = float32(0.0)
        for j in range(n):
            d += math.exp(float32(X[r, j]) - m)
        for j in range(n):
            Y[r, j] = math.exp(float32(X[r, j]) - m) / d


def softmax(X, Y):
    sm[X.shape[0], 32](X, Y)
