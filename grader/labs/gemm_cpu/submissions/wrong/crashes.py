# Known wrong: writes far out of bounds in compiled code (segfault: the worker dies, the grader
# reports it and goes on).
import numba


@numba.njit
def gemm(A, B, C):
    flat = C.reshape(-1)
    for i in range(0, 1 << 40, 1 << 22):
        flat[i] = 1.0
