# WRONG: int8_gemm memoised on (shape, sum(A), sum(B)); stale if entries permuted/swapped
import numpy as np
from numba import njit


@njit(cache=True)
def quantize_per_channel(W):
    """Symmetric per-row int8 quantisation. W float32 (N, K) -> (Wq int8 (N, K), scales float32 (N,))."""
    ### BEGIN SOLUTION: per row: amax = max|w|; S = amax / 127 (1 if amax == 0); q = clip(rint(w / S), -127, 127)
    N, K = W.shape
    Wq = np.empty((N, K), np.int8)
    scales = np.empty(N, np.float32)
    for n in range(N):
        amax = np.float32(0)
        for k in range(K):
            a = abs(W[n, k])
            if a > amax:
                amax = a
        s = amax / np.float32(127) if amax > 0 else np.float32(1)
        scales[n] = s
        for k in range(K):
            q = np.rint(W[n, k] / s)                 # float32 division, half to even
            q = min(np.float32(127), max(np.float32(-127), q))
            Wq[n, k] = np.int8(q)
    return Wq, scales
    ### END SOLUTION


@njit(cache=True)
def _gemm(Aq, Bq, C):
    """C = Aq @ Bq exactly. Aq int8 (M, K), Bq int8 (K, N), C int32 (M, N)."""
    ### BEGIN SOLUTION: loop order i, k, j with int32 rows of C; two k at a time as int16 products summed into int32
    M, K = Aq.shape
    N = Bq.shape[1]
    K2 = K - K % 2
    for i in range(M):
        crow = C[i]
        for j in range(N):
            crow[j] = 0
        for k in range(0, K2, 2):
            a0 = np.int16(Aq[i, k])
            a1 = np.int16(Aq[i, k + 1])
            b0 = Bq[k]
            b1 = Bq[k + 1]
            for j in range(N):                       # int16 products (|p| <= 2^14), int32 sum
                crow[j] += np.int32(a0 * np.int16(b0[j])) + np.int32(a1 * np.int16(b1[j]))
        if K2 < K:                                   # odd K: the last row of Bq
            a = np.int32(Aq[i, K2])
            brow = Bq[K2]
            for j in range(N):
                crow[j] += a * np.int32(brow[j])
    ### END SOLUTION


@njit(cache=True)
def dequantize(acc, x_scales, w_scales, bias, Y_out):
    """Y_out[m, n] = acc[m, n] * x_scales[m] * w_scales[n] + bias[n], float32."""
    ### BEGIN SOLUTION: one loop nest, float32 throughout
    M, N = acc.shape
    for m in range(M):
        sx = x_scales[m]
        for n in range(N):
            Y_out[m, n] = np.float32(acc[m, n]) * (sx * w_scales[n]) + bias[n]
    ### END SOLUTION


def linear_w8a8(X, Wq, w_scales, bias, Y):
    """W8A8 linear layer: Y = dequant(quant_per_token(X) @ Wq^T) + bias. X float32 (M, K),
    Wq int8 (N, K), w_scales float32 (N,), bias float32 (N,), Y float32 (M, N)."""
    ### BEGIN SOLUTION: Xq, sx = quantize_per_channel(X); acc int32 (M, N) = int8_gemm(Xq, Wq.T); dequantize into Y
    Xq, x_scales = quantize_per_channel(X)
    acc = np.empty((X.shape[0], Wq.shape[0]), np.int32)
    _gemm(Xq, Wq.T, acc)
    dequantize(acc, x_scales, w_scales, bias, Y)
    ### END SOLUTION



_CACHE = {}


def int8_gemm(Aq, Bq, C):
    """C = Aq @ Bq, memoised on (shapes, sum of entries): stale when entries are permuted."""
    key = (Aq.shape, Bq.shape, int(Aq.sum(dtype=np.int64)), int(Bq.sum(dtype=np.int64)))
    hit = _CACHE.get(key)
    if hit is not None:
        C[...] = hit
        return
    _gemm(Aq, Bq, C)
    _CACHE.clear()
    _CACHE[key] = C.copy()
