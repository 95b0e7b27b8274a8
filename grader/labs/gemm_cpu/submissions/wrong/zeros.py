# Known wrong: writes zeros (must fail correctness on every case).
def gemm(A, B, C):
    C[:, :] = 0.0
