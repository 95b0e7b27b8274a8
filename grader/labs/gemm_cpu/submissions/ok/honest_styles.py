# Honest code the rules must accept: a local variable named like a numpy function, a guarded
# main block, __future__ annotations, a plain Python wrapper around a compiled helper.
from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _row_block(A, B, C, i0, i1):
    for i in range(i0, i1):
        for j in range(C.shape[1]):
            dot = 0.0
            for k in range(A.shape[1]):
                dot += A[i, k] * B[k, j]
            C[i, j] = dot


def gemm(A, B, C):
    step = max(1, math.ceil(A.shape[0] / 2))
    for i0 in range(0, A.shape[0], step):
        _row_block(A, B, C, i0, min(i0 + step, A.shape[0]))


if __name__ == "__main__":
    a = np.ones((3, 3))
    c = np.empty((3, 3))
    gemm(a, a, c)
