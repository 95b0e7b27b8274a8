# ADVERSARIAL: softmax computed on the host; a kernel defined inside softmax() closes over the
# result (on a GPU a constant frozen into the kernel) and reads X and stores Y, so it counted
# like a fused kernel. Before: every case passed.
# Expected: the softmax cases fail "reads the array S (...) from a global, a closure or a default
# value, not from its arguments".
import math
import numpy as np
from numba import cuda, float32


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
    S = np.where(full, 0.0, e / np.where(full, 1.0, e.sum(axis=1, keepdims=True))).astype(np.float32)

    @cuda.jit
    def inject(X, Y):
        r = cuda.blockIdx.x
        n = X.shape[1]
        for j in range(cuda.threadIdx.x, n, cuda.blockDim.x):
            x = X[r, j]
            v = S[r, j]
            if x != x:
                v = 0.0
            Y[r, j] = v

    inject[X.shape[0], 256](X, Y)
