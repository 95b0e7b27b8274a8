# WRONG: float32 accumulators over chunks of 1060 k, added into int32: exact only while a
# chunk's sum stays within 2^24 (1024 products of 2^14); the float32_chunks case (every product
# 127 * 127, odd) passes 2^24 at an odd value after 1041 of them
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
def int8_gemm(Aq, Bq, C):
    """C = Aq @ Bq, float32 accumulation in chunks of 1060 k (WRONG: 1060 * 2^14 > 2^24)."""
    M, K = Aq.shape
    N = Bq.shape[1]
    acc = np.empty(N, np.float32)
    CH = 1060
    for i in range(M):
        for j in range(N):
            C[i, j] = 0
        for k0 in range(0, K, CH):
            for j in range(N):
                acc[j] = 0
            for k in range(k0, min(K, k0 + CH)):
                a = np.float32(Aq[i, k])
                for j in range(N):
                    acc[j] += a * np.float32(Bq[k, j])
            for j in range(N):
                C[i, j] += np.int32(acc[j])


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
    int8_gemm(Xq, Wq.T, acc)
    dequantize(acc, x_scales, w_scales, bias, Y)
    ### END SOLUTION

