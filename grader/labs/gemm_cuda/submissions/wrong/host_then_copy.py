# KNOWN WRONG: computes C on the host (numpy broadcasting, no library product) and launches a
# kernel that only copies the host's answer into C.
# Expected: the cases fail with "C must be computed on the device from A and B" (the kernel
# reads fewer bytes than A and B hold) wherever M*N < M*K + K*N.
import numpy as np
from numba import cuda


@cuda.jit
def copy_kernel(src, dst):
    i, j = cuda.grid(2)
    if i < dst.shape[0] and j < dst.shape[1]:
        dst[i, j] = src[i, j]


def gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    host = (A[:, :, None] * B[None, :, :]).sum(axis=1, dtype=np.float32)
    copy_kernel[((M + 15) // 16, (N + 15) // 16), (16, 16)](host, C)
