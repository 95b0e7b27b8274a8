# Known wrong (too slow): a direct convolution handed in instead of Winograd — correct, and
# as fast as the direct kernel it is timed against (about 1x, below the threshold).
import numpy as np
from numba import njit


@njit(cache=True)
def conv2d_winograd(X, W, Y):
    N, C, H, Wd = X.shape
    K = W.shape[0]
    for n in range(N):
        for k in range(K):
            for p in range(H):
                for q in range(Wd):
                    Y[n, k, p, q] = 0
            for c in range(C):
                for r in range(3):
                    for s in range(3):
                        w = W[k, c, r, s]
                        for p in range(max(0, 1 - r), min(H, H + 1 - r)):
                            yrow = Y[n, k, p, max(0, 1 - s):min(Wd, Wd + 1 - s)]
                            xrow = X[n, c, p + r - 1, max(0, 1 - s) + s - 1:min(Wd, Wd + 1 - s) + s - 1]
                            for q in range(yrow.shape[0]):
                                yrow[q] += w * xrow[q]
