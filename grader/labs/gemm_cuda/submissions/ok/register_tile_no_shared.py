# HONEST: a register tile without shared memory: each thread keeps a 16 x 2 tile of C in
# registers (16 rows, 2 columns 32 apart) and, per k, loads 16 values of A (a warp: broadcasts)
# and 2 of B (a warp: 32 consecutive floats each), so each loaded value feeds 2 (A) or 16 (B)
# multiply-adds: 24 sectors per 1024 FMAs. Expected: passes everything.
from numba import cuda, float32

TM = 16
TN = 2
BX = 32
BY = 2


@cuda.jit
def kernel(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    acc = cuda.local.array((TM, TN), float32)
    row0 = (cuda.blockIdx.y * BY + cuda.threadIdx.y) * TM
    col0 = cuda.blockIdx.x * BX * TN + cuda.threadIdx.x
    for r in range(TM):
        for c in range(TN):
            acc[r, c] = float32(0.0)
    b = cuda.local.array(TN, float32)
    for k in range(K):
        for c in range(TN):
            j = col0 + c * BX
            b[c] = B[k, j] if j < N else float32(0.0)
        for r in range(TM):
            i = row0 + r
            if i < M:
                a = A[i, k]
                for c in range(TN):
                    acc[r, c] += a * b[c]
    for r in range(TM):
        for c in range(TN):
            i = row0 + r
            j = col0 + c * BX
            if i < M and j < N:
                C[i, j] = acc[r, c]


def gemm(A, B, C):
    M, N = C.shape
    grid = ((N + BX * TN - 1) // (BX * TN), (M + BY * TM - 1) // (BY * TM))
    kernel[grid, (BX, BY)](A, B, C)
