# ADVERSARIAL (method): row_sum reduces with global atomics only (every thread adds its partial
# into out[r]) and one shuffle a warp that does nothing useful, where the lab asks for a
# warp-shuffle tree. Before: every case passed.
# Expected: the row_sum cases with N >= 64 fail "fewer than 5 a warp"; the others pass.
import math
import numpy as np
from numba import cuda, float32


@cuda.jit
def zero(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = 0.0


@cuda.jit
def rs(X, out):
    r = cuda.blockIdx.x
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], cuda.blockDim.x):
        acc += float32(X[r, j])
    junk = cuda.shfl_down_sync(0xFFFFFFFF, acc, 0)
    cuda.atomic.add(out, r, junk)


def row_sum(X, out):
    dout = cuda.to_device(out)
    zero[(out.shape[0] + 31) // 32, 32](dout)
    rs[X.shape[0], 256](X, dout)
    dout.copy_to_host(out)


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
