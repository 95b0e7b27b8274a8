# KNOWN WRONG: hands the product to cuBLAS through cupy.
# Expected: static rules: "import of 'cupy' is not allowed".
import cupy as cp


def gemm(A, B, C):
    C[...] = cp.asnumpy(cp.matmul(cp.asarray(A), cp.asarray(B)))
