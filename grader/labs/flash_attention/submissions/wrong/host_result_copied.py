"""Known-wrong (a cheat): attention computed with numpy on the host and copied into O by a
kernel that also reads every element of Q, K and V (so the traffic looks like a kernel's).
The replay on new Q, K, V repeats only the launches: O stays the old answer. Fails every case
with more than one key."""

import math

import numpy as np
from numba import cuda


@cuda.jit
def copy_in(Q, K, V, R, O):
    i = cuda.grid(1)
    H, N, d = O.shape[1], O.shape[2], O.shape[3]
    if i < O.shape[0] * H * N * d:
        b, h, n, t = i // (H * N * d), (i // (N * d)) % H, (i // d) % N, i % d
        touch = Q[b, h, n, t] * 0 + K[b, h, n, t] * 0 + V[b, h, n, t] * 0
        O[b, h, n, t] = R[b, h, n, d - 1 - t] + touch


def flash_attention(Q, K, V, O, causal):
    q, k, v = (np.asarray(x, np.float64) for x in (Q, K, V))
    s = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    res = ((p / p.sum(axis=-1, keepdims=True))[..., None] * v[..., None, :, :]).sum(-2)
    R = np.ascontiguousarray(res[..., ::-1]).astype(O.dtype)      # reversed along d
    copy_in[(O.size + 127) // 128, 128](Q, K, V, R, O)
