# Known wrong (too slow): the filter transform redone for every tile, inside the GEMM, so
# the K C filters are transformed T times (784 times on the timed layer). Correct, and far
# slower than the direct kernel.
import numpy as np
from numba import njit


@njit(cache=True)
def filter_transform(W, U):
    """U[xi, k, c] = (G g G^T)[xi // 4, xi % 4] for g = W[k, c]. W (K, C, 3, 3), U (16, K, C)."""
    ### BEGIN SOLUTION: G g, then (G g) G^T, for every filter; G's rows are g0, (g0+g1+g2)/2, (g0-g1+g2)/2, g2
    K, C = W.shape[0], W.shape[1]
    t = np.empty((4, 3), np.float32)
    half = np.float32(0.5)
    for k in range(K):
        for c in range(C):
            g = W[k, c]
            for j in range(3):                       # t = G g
                t[0, j] = g[0, j]
                t[1, j] = half * (g[0, j] + g[1, j] + g[2, j])
                t[2, j] = half * (g[0, j] - g[1, j] + g[2, j])
                t[3, j] = g[2, j]
            for i in range(4):                       # U = t G^T
                U[4 * i + 0, k, c] = t[i, 0]
                U[4 * i + 1, k, c] = half * (t[i, 0] + t[i, 1] + t[i, 2])
                U[4 * i + 2, k, c] = half * (t[i, 0] - t[i, 1] + t[i, 2])
                U[4 * i + 3, k, c] = t[i, 2]
    ### END SOLUTION


@njit(cache=True)
def input_transform(X, V, th, tw):
    """V[xi, c, t] = (B^T d B)[xi // 4, xi % 4] for the 4x4 input tile d of tile
    t = (n * th + ty) * tw + tx, which starts at row 2 ty - 1, column 2 tx - 1 of image n.
    X (N, C, H, W), V (16, C, N th tw)."""
    ### BEGIN SOLUTION: copy each channel into a zero-bordered buffer; per row of tiles, gather the 4x4 tiles (tiles innermost), apply B^T down the columns, then B along the rows
    N, C, H, Wd = X.shape
    Xp = np.zeros((2 * th + 2, 2 * tw + 2), np.float32)   # zero border = the padding
    d = np.empty((4, 4, tw), np.float32)
    b = np.empty((4, 4, tw), np.float32)
    for n in range(N):
        for c in range(C):
            for p in range(H):
                src = X[n, c, p]
                dst = Xp[p + 1]
                for q in range(Wd):
                    dst[q + 1] = src[q]
            for ty in range(th):
                t0 = (n * th + ty) * tw
                for i in range(4):
                    row = Xp[2 * ty + i]
                    for j in range(4):
                        for x in range(tw):
                            d[i, j, x] = row[2 * x + j]
                for j in range(4):                   # b = B^T d, every tile of the row
                    for x in range(tw):
                        b[0, j, x] = d[0, j, x] - d[2, j, x]
                        b[1, j, x] = d[1, j, x] + d[2, j, x]
                        b[2, j, x] = d[2, j, x] - d[1, j, x]
                        b[3, j, x] = d[1, j, x] - d[3, j, x]
                for i in range(4):                   # V = b B
                    v0 = V[4 * i + 0, c, t0:t0 + tw]
                    v1 = V[4 * i + 1, c, t0:t0 + tw]
                    v2 = V[4 * i + 2, c, t0:t0 + tw]
                    v3 = V[4 * i + 3, c, t0:t0 + tw]
                    for x in range(tw):
                        v0[x] = b[i, 0, x] - b[i, 2, x]
                        v1[x] = b[i, 1, x] + b[i, 2, x]
                        v2[x] = b[i, 2, x] - b[i, 1, x]
                        v3[x] = b[i, 1, x] - b[i, 3, x]
    ### END SOLUTION


@njit(cache=True)
def batched_gemm(U, V, M):
    """M[xi] = U[xi] @ V[xi] for the 16 xi: (K x C) @ (C x T). U (16, K, C), V (16, C, T),
    M (16, K, T)."""
    ### BEGIN SOLUTION: per xi and block of tiles: four rows of M at a time (each v[x] loaded once feeds four FMAs), for c, a vectorised loop over the block; the K % 4 leftover rows one at a time
    X16, K, C = U.shape
    T = V.shape[2]
    TB = 256                                         # tiles per block: V's block stays in L2
    for xi in range(X16):
        for t0 in range(0, T, TB):
            t1 = min(T, t0 + TB)
            nt = t1 - t0
            for k0 in range(0, K - K % 4, 4):        # four rows of M share each load of V
                m0 = M[xi, k0, t0:t1]
                m1 = M[xi, k0 + 1, t0:t1]
                m2 = M[xi, k0 + 2, t0:t1]
                m3 = M[xi, k0 + 3, t0:t1]
                for x in range(nt):
                    m0[x] = 0
                    m1[x] = 0
                    m2[x] = 0
                    m3[x] = 0
                for c in range(C):
                    u0 = U[xi, k0, c]
                    u1 = U[xi, k0 + 1, c]
                    u2 = U[xi, k0 + 2, c]
                    u3 = U[xi, k0 + 3, c]
                    v = V[xi, c, t0:t1]
                    for x in range(nt):
                        vx = v[x]
                        m0[x] += u0 * vx
                        m1[x] += u1 * vx
                        m2[x] += u2 * vx
                        m3[x] += u3 * vx
            for k in range(K - K % 4, K):            # the leftover rows
                m = M[xi, k, t0:t1]
                for x in range(nt):
                    m[x] = 0
                for c in range(C):
                    u = U[xi, k, c]
                    v = V[xi, c, t0:t1]
                    for x in range(nt):
                        m[x] += u * v[x]
    ### END SOLUTION


@njit(cache=True)
def output_transform(M, Y, th, tw):
    """Y's 2x2 tile t = A^T m A, m = M[:, k, t] as 4x4; only the rows/columns inside Y are
    written. M (16, K, N th tw), Y (N, K, H, W)."""
    ### BEGIN SOLUTION: per row of tiles: A^T down the columns (tiles innermost), then A along the rows; skip the row/column past H/W
    N, K, H, Wd = Y.shape
    a = np.empty((2, 4, tw), np.float32)
    for n in range(N):
        for k in range(K):
            for ty in range(th):
                t0 = (n * th + ty) * tw
                for j in range(4):                   # a = A^T m, every tile of the row
                    m0 = M[0 + j, k, t0:t0 + tw]
                    m1 = M[4 + j, k, t0:t0 + tw]
                    m2 = M[8 + j, k, t0:t0 + tw]
                    m3 = M[12 + j, k, t0:t0 + tw]
                    for x in range(tw):
                        a[0, j, x] = m0[x] + m1[x] + m2[x]
                        a[1, j, x] = m1[x] - m2[x] - m3[x]
                for i in range(2):                   # y = a A
                    p = 2 * ty + i
                    if p >= H:
                        break                        # the partial tile's row past H
                    yrow = Y[n, k, p]
                    for x in range(tw):
                        yrow[2 * x] = a[i, 0, x] + a[i, 1, x] + a[i, 2, x]
                        if 2 * x + 1 < Wd:           # the partial tile's column past W
                            yrow[2 * x + 1] = a[i, 1, x] - a[i, 2, x] - a[i, 3, x]
    ### END SOLUTION


@njit(cache=True)
def gemm_transforming_filters(W, U, V, M):
    """M[:, :, t] = U V[:, :, t], transforming the filters again for every tile t."""
    T = V.shape[2]
    K, C = U.shape[1], U.shape[2]
    for t in range(T):
        filter_transform(W, U)                  # the same U, computed T times
        for xi in range(16):
            for k in range(K):
                acc = np.float32(0)
                for c in range(C):
                    acc += U[xi, k, c] * V[xi, c, t]
                M[xi, k, t] = acc


def conv2d_winograd(X, W, Y):
    """Y = conv2d(X, W), stride 1, padding 1, by F(2x2, 3x3). X (N, C, H, W), W (K, C, 3, 3),
    Y (N, K, H, W), float32; Y written in place."""
    ### BEGIN SOLUTION: tile counts th, tw = ceil(H/2), ceil(W/2); workspaces U, V, M; the four stages
    N, C, H, Wd = X.shape
    K = W.shape[0]
    th, tw = (H + 1) // 2, (Wd + 1) // 2
    T = N * th * tw
    U = np.empty((16, K, C), np.float32)
    V = np.empty((16, C, T), np.float32)
    M = np.empty((16, K, T), np.float32)
    input_transform(X, V, th, tw)
    gemm_transforming_filters(W, U, V, M)
    output_transform(M, Y, th, tw)
    ### END SOLUTION

