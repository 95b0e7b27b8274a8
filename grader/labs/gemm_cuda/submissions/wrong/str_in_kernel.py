# KNOWN WRONG: the kernel calls str(), which the simulator runs (it is plain Python) but no GPU
# compiler accepts.
# Expected: every case fails with "gpu-compile: ..." (numba-cuda's compile_ptx message).
import numpy as np
from numba import cuda, float32


@cuda.jit
def gemm_kernel(A, B, C):
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        if len(str(i)) > 0:
            C[i, j] = acc


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    gemm_kernel[((M + 15) // 16, (N + 15) // 16), (16, 16)](A, B, C)
