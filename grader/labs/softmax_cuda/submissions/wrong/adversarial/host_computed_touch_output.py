# ADVERSARIAL: softmax and row_sum computed on the host with numpy, written into the output,
# then a kernel that loads the output and stores it again (and a row_sum kernel that reads a
# zero array as large as X), so the old "every byte of X read, every output element stored"
# counts were met without reading X. Before: 100/100 (the timed call modelled at 2.0x).
# Expected: every case but row_sum 1x1 fails "the kernels read 0 bytes of X" (at 1x1 the host
# sum is X's own value, so the array it reads holds X's bytes).
import math
import numpy as np
from numba import cuda, float32


@cuda.jit
def touch2(Y):
    r = cuda.blockIdx.x
    for j in range(cuda.threadIdx.x, Y.shape[1], cuda.blockDim.x):
        Y[r, j] = Y[r, j]


@cuda.jit
def touch_sum(X, out, pad):
    # reads X? no: reads pad (as many bytes as X) and stores out; one useless shuffle
    r = cuda.blockIdx.x
    v = float32(0.0)
    for j in range(cuda.threadIdx.x, pad.shape[1], cuda.blockDim.x):
        v += pad[r, j]
    v = cuda.shfl_down_sync(0xFFFFFFFF, v, 1)
    if cuda.threadIdx.x == 0:
        out[r] = out[r] + v * 0


def host(X):
    return X if isinstance(X, np.ndarray) else X.copy_to_host()


def row_sum(X, out):
    Xh = host(X).astype(np.float64)
    s = Xh.sum(axis=1).astype(np.float32)
    pad = np.zeros(X.shape, X.dtype)
    o = s
    touch_sum[X.shape[0], 32](X, o, pad)
    out[:] = o


def softmax(X, Y):
    Xh = host(X).astype(np.float64)
    m = Xh.max(axis=1, keepdims=True)
    full = np.isneginf(m)
    m = np.where(full, 0.0, m)
    e = np.exp(Xh - m)
    y = np.where(full, 0.0, e / np.where(full, 1.0, e.sum(axis=1, keepdims=True)))
    if isinstance(Y, np.ndarray):
        Y[:] = y.astype(Y.dtype)
        touch2[Y.shape[0], 256](Y)
    else:
        Y.copy_to_device(y.astype(np.float32))
        touch2[Y.shape[0], 256](Y)
