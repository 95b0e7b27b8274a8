# KNOWN WRONG: correct, coalesced, and no on-chip reuse at all: one thread per element of C,
# threadIdx.x along a row of C, every FMA's two operands loaded from global memory. With the
# 16 x 16 blocks below each warp is two half-rows of C, so a k step costs 2 sectors of A and 2
# of B per 32 FMAs (4 B/FMA): 8.25x over the naive kernel, which passed the speed rule. With
# any block shape (BLOCK = (bx, by); the self-test sweeps 8x32, 16x16, 32x8, 32x32, 64x4) a
# warp on a p x q patch of C moves p + ceil(q/8) >= 4 sectors per 32 FMAs.
# Expected: every case passes; "global traffic per FMA" fails (>= 4 B against 1.5 B).
from numba import cuda, float32

BLOCK = (16, 16)


@cuda.jit
def gemm_kernel(A, B, C):
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def gemm(A, B, C):
    M, N = C.shape
    bx, by = BLOCK
    gemm_kernel[((N + bx - 1) // bx, (M + by - 1) // by), (bx, by)](A, B, C)
