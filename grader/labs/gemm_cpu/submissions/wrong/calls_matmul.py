# Known wrong: lets numpy (OpenBLAS) compute the product (banned call).
import numpy as np


def gemm(A, B, C):
    np.matmul(A, B, out=C)
