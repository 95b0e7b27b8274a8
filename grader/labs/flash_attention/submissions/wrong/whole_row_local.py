"""Known-wrong: the whole row of scores kept in a per-thread local array (cuda.local, 512
float32 = 2 KiB a thread), filled in one pass over the K tiles and read back in a second
pass over the V tiles. Correct up to N = 512, so every visible case passes; but local memory
is device memory behind L1/L2: the frames of a block's 128 threads (256 KiB) overflow the L1
of an SM, so the DRAM traffic rule fails with local memory named, and a hidden case with
N > 512 writes past the row (on the simulator: an out-of-bounds error)."""

import math

import numpy as np
from numba import cuda, float32
from numba.types import float16

BR = 128   # query rows per block = threads per block (one thread per query row)
BC = 32    # key/value rows per tile in shared memory
ROW = 512  # WRONG: the longest row of scores a thread can keep
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
        q = cuda.local.array(D, float32)
        o = cuda.local.array(D, float32)
        row = cuda.local.array(ROW, float32)   # WRONG: an N-long row per thread, off chip
        H = Q.shape[1]
        N = Q.shape[2]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        first = cuda.blockIdx.x * BR
        i = first + tid
        live = i < N
        if live:
            for t in range(D):
                q[t] = float32(Q[b, h, i, t])
                o[t] = float32(0.0)
        n_keys = N
        if causal:
            n_keys = min(N, first + BR)
        m = float32(NEG_INF)
        for k0 in range(0, n_keys, BC):         # pass 1: every score of the row, and its max
            nk = min(BC, N - k0)
            cuda.syncthreads()
            for e in range(tid, nk * D, BR):
                Kt[e // D, e % D] = K[b, h, k0 + e // D, e % D]
            cuda.syncthreads()
            if live:
                jn = nk
                if causal:
                    jn = min(nk, i - k0 + 1)
                for j in range(jn):
                    dot = float32(0.0)
                    for t in range(D):
                        dot += q[t] * float32(Kt[j, t])
                    row[k0 + j] = dot * scale
                    m = max(m, row[k0 + j])
        l = float32(0.0)
        for k0 in range(0, n_keys, BC):         # pass 2: p = exp(s - m) against V
            nk = min(BC, N - k0)
            cuda.syncthreads()
            for e in range(tid, nk * D, BR):
                Kt[e // D, e % D] = V[b, h, k0 + e // D, e % D]
            cuda.syncthreads()
            if live:
                jn = nk
                if causal:
                    jn = min(nk, i - k0 + 1)
                for j in range(jn):
                    p = math.exp(row[k0 + j] - m)
                    l += p
                    for t in range(D):
                        o[t] += p * float32(Kt[j, t])
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
