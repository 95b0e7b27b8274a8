# Known wrong: reaches numpy's matmul through a computed attribute name (banned escape hatch).
import numpy as np


def gemm(A, B, C):
    f = getattr(np, "mat" + "mul")
    f(A, B, out=C)
