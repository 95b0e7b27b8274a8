# Known wrong: ends the process instead of returning.
def gemm(A, B, C):
    exit(3)
