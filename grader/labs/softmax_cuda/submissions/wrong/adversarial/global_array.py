# ADVERSARIAL: softmax (and row_sum) computed on the host; the result is put in a module-level
# numpy array that the kernel reads. On a GPU numba freezes such an array into the kernel as a
# constant when it first compiles (later changes are never seen); the simulator read it live
# and uncounted, so a kernel that reads X and stores Y modelled like a fused kernel. Before:
# 100/100. Expected: every case fails "reads the array BUF (...) from a global, a closure
# or a default value, not from its arguments".
import math
import numpy as np
from numba import cuda, float32

BUF = np.zeros(1 << 14, np.float32)   # the largest visible case: 8194 elements


@cuda.jit
def inject(X, Y):
    r = cuda.blockIdx.x
    n = X.shape[1]
    for j in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        x = X[r, j]
        v = BUF[r * n + j]
        if x != x:
            v = 0.0
        Y[r, j] = v


@cuda.jit
def inject_sum(X, out):
    r = cuda.blockIdx.x
    n = X.shape[1]
    acc = float32(0.0)
    for j in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        acc += float32(X[r, j]) * 0
    acc = cuda.shfl_down_sync(0xFFFFFFFF, acc, 1)
    if cuda.threadIdx.x == 0:
        out[r] = BUF[r] + acc


def host(X):
    return X if isinstance(X, np.ndarray) else X.copy_to_host()


def row_sum(X, out):
    Xh = host(X).astype(np.float64)
    BUF[:X.shape[0]] = Xh.sum(axis=1)
    inject_sum[X.shape[0], 32](X, out)


def softmax(X, Y):
    Xh = host(X).astype(np.float64)
    m = Xh.max(axis=1, keepdims=True)
    full = np.isneginf(m)
    m = np.where(full, 0.0, m)
    e = np.exp(Xh - m)
    y = np.where(full, 0.0, e / np.where(full, 1.0, e.sum(axis=1, keepdims=True)))
    BUF[:y.size] = y.ravel()
    inject[X.shape[0], 256](X, Y)
