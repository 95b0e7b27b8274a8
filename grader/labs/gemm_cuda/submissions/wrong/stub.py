# KNOWN WRONG (f): the untouched stub, as `kernellab release` makes it.
# Expected: every case fails with "not implemented".
import numpy as np
from numba import cuda, float32

TILE = 16


@cuda.jit
def gemm_kernel(A, B, C):
    # YOUR CODE HERE
    raise NotImplementedError("stage tiles of A and B in shared memory")


def gemm(A, B, C):
    # YOUR CODE HERE
    raise NotImplementedError("launch the kernel")
