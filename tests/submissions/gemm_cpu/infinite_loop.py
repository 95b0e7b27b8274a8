# Known wrong: never returns (must time out, be killed, and be reported).
def gemm(A, B, C):
    while True:
        pass
