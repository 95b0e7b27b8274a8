"""Known-wrong: each thread's query row kept in shared memory as float32, Qs[tid, t], with no
padding, and read in the score loop: at step t the 32 lanes of a warp read Qs[lane, t], words
d = 32 apart, all in one of the 32 banks -- a 32-way bank conflict, 32 wavefronts per request
where 1 would do. Correct on every case; the modelled speedup fails, shared-memory bound, and
its report names Qs, the line and the degree. Registers (cuda.local.array, as the reference)
or one word of padding a row (Qs of shape (BR, D + 1)) fix it."""

import math

import numpy as np
from numba import cuda, float32
from numba.types import float16

BR = 64    # query rows per block = threads per block (one thread per query row)
BC = 32    # key/value rows per tile in shared memory
NEG_INF = -math.inf
_kernels = {}


def make_kernel(d, dtype):
    """The attention kernel for head dimension d and input dtype (float32 or float16)."""
    key = (int(d), np.dtype(dtype))
    if key in _kernels:
        return _kernels[key]
    D = key[0]
    elem = float16 if key[1] == np.float16 else float32

    @cuda.jit
    def attention_kernel(Q, K, V, O, scale, causal):
        Kt = cuda.shared.array((BC, D), elem)
        Vt = cuda.shared.array((BC, D), elem)
        Qs = cuda.shared.array((BR, D), float32)  # Qs[row, t]: this thread's query row
        o = cuda.local.array(D, float32)
        s = cuda.local.array(BC, float32)
        H = Q.shape[1]
        N = Q.shape[2]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        first = cuda.blockIdx.x * BR          # first query row of this block
        i = first + tid                       # this thread's query row
        live = i < N                          # False on the padded rows of the last block
        if live:
            for t in range(D):
                Qs[tid, t] = float32(Q[b, h, i, t])   # a row of D floats a thread, unpadded
                o[t] = float32(0.0)
        m = float32(NEG_INF)
        l = float32(0.0)
        n_keys = N
        if causal:                            # tiles after the block's last row: all masked
            n_keys = min(N, first + BR)
        for k0 in range(0, n_keys, BC):
            nk = min(BC, N - k0)              # rows of this tile inside the sequence
            cuda.syncthreads()                # everyone is done with the previous tile
            for e in range(tid, nk * D, BR):  # consecutive threads, consecutive elements
                Kt[e // D, e % D] = K[b, h, k0 + e // D, e % D]
                Vt[e // D, e % D] = V[b, h, k0 + e // D, e % D]
            cuda.syncthreads()                # the tile is complete
            if live:
                jn = nk
                if causal:
                    jn = min(nk, i - k0 + 1)  # keys after i are masked
                if jn > 0:                    # else this row has no key in the tile: skip it
                    tile_max = float32(NEG_INF)
                    for j in range(jn):
                        dot = float32(0.0)
                        for t in range(D):
                            dot += Qs[tid, t] * float32(Kt[j, t])  # down a column of Qs
                        s[j] = dot * scale
                        tile_max = max(tile_max, s[j])
                    m_new = max(m, tile_max)
                    alpha = math.exp(m - m_new)   # 0 on the first tile (m = -inf)
                    l = l * alpha
                    for t in range(D):
                        o[t] = o[t] * alpha
                    for j in range(jn):
                        p = math.exp(s[j] - m_new)
                        l += p
                        for t in range(D):
                            o[t] += p * float32(Vt[j, t])
                    m = m_new
        if live:
            inv_l = float32(1.0) / l
            for t in range(D):
                O[b, h, i, t] = o[t] * inv_l

    _kernels[key] = attention_kernel
    return attention_kernel


def flash_attention(Q, K, V, O, causal):
    """O = softmax(Q K^T / sqrt(d), causal mask if causal) V: Q, K, V, O (B, H, N, d), all
    float32 or all float16, numpy or device arrays; O written in place."""
    B, H, N, d = Q.shape
    kernel = make_kernel(d, Q.dtype)
    kernel[(math.ceil(N / BR), B * H), BR](Q, K, V, O, float32(1.0 / math.sqrt(d)),
                                           bool(causal))
