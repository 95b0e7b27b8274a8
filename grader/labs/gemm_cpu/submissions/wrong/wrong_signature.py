# Known wrong: returns the product instead of taking the output (two parameters, not three).
def gemm(A, B):
    return A
