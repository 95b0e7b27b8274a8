# ADVERSARIAL: softmax computed on the host; the result reaches the kernel inside a tuple
# argument, which the sim tier used to pass through unwrapped (neither counted nor checked).
# Before: 100/100, the timed call modelled at 2.0x. Now the tuple's array is copied and
# counted like any argument. Expected: the cases pass (a known limit: a host result brought in
# through an argument); the timed call reads X and the host result, 12 DRAM bytes per element
# instead of 8, and fails the modelled speedup (1.33x).
import math
import numpy as np
from numba import cuda, float32


@cuda.jit
def inject(X, Y, pack):
    S = pack[0]
    r = cuda.blockIdx.x
    n = X.shape[1]
    for j in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        x = X[r, j]
        v = S[r, j]
        if x != x:
            v = 0.0
        Y[r, j] = v


@cuda.jit
def rs(X, out):
    r = cuda.blockIdx.x
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, X.shape[1], 32):
        acc += float32(X[r, j])
    off = 16
    while off > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, off)
        off //= 2
    if cuda.threadIdx.x == 0:
        out[r] = acc


def row_sum(X, out):
    rs[X.shape[0], 32](X, out)


def softmax(X, Y):
    Xh = X if isinstance(X, np.ndarray) else X.copy_to_host()
    Xh = Xh.astype(np.float64)
    m = Xh.max(axis=1, keepdims=True)
    full = np.isneginf(m)
    m = np.where(full, 0.0, m)
    e = np.exp(Xh - m)
    y = np.where(full, 0.0, e / np.where(full, 1.0, e.sum(axis=1, keepdims=True)))
    inject[X.shape[0], 256](X, Y, (y.astype(np.float32),))
