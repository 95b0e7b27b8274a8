"""Correct: the reference kernel launched once per (b, h, block of BR query rows) on numpy views
(Q[b, h, q0:q1] and the whole K[b, h], V[b, h]), each view 4-D again: numba copies each view
to the device and back. The replay copies the views of the new inputs again."""

import math

import numpy as np
from numba import cuda, float32
from numba.types import float16

BR = 32    # query rows per block = threads per block (one thread per query row)
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
    def attention_kernel(Q, K, V, O, scale, causal, q_off):
        Kt = cuda.shared.array((BC, D), elem)
        Vt = cuda.shared.array((BC, D), elem)
        q = cuda.local.array(D, float32)
        o = cuda.local.array(D, float32)
        s = cuda.local.array(BC, float32)
        H = Q.shape[1]
        N = K.shape[2]                        # keys
        NQ = Q.shape[2]                       # queries of this launch (rows q_off...)
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        first = cuda.blockIdx.x * BR          # first query row of this block
        i = first + tid                       # this thread's query row
        live = i < NQ                         # False on the padded rows of the last block
        if live:
            for t in range(D):
                q[t] = float32(Q[b, h, i, t])
                o[t] = float32(0.0)
        m = float32(NEG_INF)
        l = float32(0.0)
        n_keys = N
        if causal:                            # tiles after the block's last row: all masked
            n_keys = min(N, q_off + first + BR)
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
                    jn = min(nk, q_off + i - k0 + 1)  # keys after i are masked
                if jn > 0:                    # else this row has no key in the tile: skip it
                    tile_max = float32(NEG_INF)
                    for j in range(jn):
                        dot = float32(0.0)
                        for t in range(D):
                            dot += q[t] * float32(Kt[j, t])
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
    B, H, N, d = Q.shape
    kernel = make_kernel(d, Q.dtype)
    scale = float32(1.0 / math.sqrt(d))
    for b in range(B):
        for h in range(H):
            for q0 in range(0, N, BR):
                q1 = min(N, q0 + BR)
                # one block of queries against the keys it may see; causal offsets are
                # absolute, so pass the keys 0..q1 and let the kernel index from q0
                kernel[(1, 1), BR](Q[b:b + 1, h:h + 1, q0:q1], K[b:b + 1, h:h + 1],
                                   V[b:b + 1, h:h + 1], O[b:b + 1, h:h + 1, q0:q1], scale,
                                   bool(causal), q0)
