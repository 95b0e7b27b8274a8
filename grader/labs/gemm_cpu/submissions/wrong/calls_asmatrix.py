# Known wrong: lets numpy's BLAS compute the product through np.matrix, whose '*' is a matrix
# product — no '@', no 'matmul' written anywhere. Banned like matmul itself (so are np.bmat and
# the np.r_/np.c_ "makemat" route to the same class).
import numpy as np


def gemm(A, B, C):
    C[:, :] = np.asmatrix(A) * B
