# Known wrong: a match statement's class pattern looks an attribute up by name, so
# `case object(matmul=f)` fetches np.matmul without ever writing `np.matmul`. The static rules
# treat the pattern's keywords as the attribute lookups they are.
import numpy as np


def gemm(A, B, C):
    match np:
        case object(matmul=f):
            f(A, B, out=C)
