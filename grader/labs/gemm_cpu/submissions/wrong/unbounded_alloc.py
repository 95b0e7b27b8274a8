# Known wrong: allocates without bound (must hit the memory limit and be reported).
import numpy as np


def gemm(A, B, C):
    hoard = []
    while True:
        hoard.append(np.ones(2**24))
