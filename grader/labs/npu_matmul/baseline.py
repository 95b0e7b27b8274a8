"""npu-matmul's baseline (grader side): :func:`naive_kernel`, the lab's given starting point
(64 x 64 output blocks, K in steps of 64 through L1 and L0, one buffer per queue), and its
modelled cycles (:func:`baseline_cycles`), which the one-core speedup rule divides. The lab
notebook prints this kernel."""

from __future__ import annotations

import functools

import numpy as np

from grader.labs._npu import ONE_CORE
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P

NAIVE_BLOCK = 64


@asc.kernel(core="aic")
def naive_kernel(a, b, c, M, N, K):
    """The lab's given starting point (and the grader's baseline): 64 x 64 output blocks, K in
    steps of 64 through L1 and L0, one buffer per queue, blocks dealt round-robin."""
    T = NAIVE_BLOCK                                   # 64
    pipe = asc.TPipe()
    qa1, qb1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)    # L1
    qa2, qb2 = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1)    # L0A, L0B
    qc = asc.TQue(P.CO1, 1)                             # L0C
    pipe.init_buffer(qa1, 1, T * T * 2)
    pipe.init_buffer(qb1, 1, T * T * 2)
    pipe.init_buffer(qa2, 1, T * T * 2)
    pipe.init_buffer(qb2, 1, T * T * 2)
    pipe.init_buffer(qc, 1, T * T * 4)
    mb, nb = -(-M // T), -(-N // T)
    for blk in range(asc.get_block_idx(), mb * nb, asc.get_block_num()):
        i0, j0 = (blk // nb) * T, (blk % nb) * T
        m, n = min(T, M - i0), min(T, N - j0)
        co = qc.alloc_tensor(asc.float32)
        for k0 in range(0, K, T):
            k = min(T, K - k0)
            a1, b1 = qa1.alloc_tensor(asc.half), qb1.alloc_tensor(asc.half)
            asc.data_copy(a1, a[i0 * K + k0:], nd2nz=(m, k, K))    # GM -> L1 (MTE2)
            asc.data_copy(b1, b[k0 * N + j0:], nd2nz=(k, n, N))
            qa1.enque(a1)
            qb1.enque(b1)
            a1, b1 = qa1.deque(), qb1.deque()
            a2, b2 = qa2.alloc_tensor(asc.half), qb2.alloc_tensor(asc.half)
            asc.load_data(a2, a1)                                  # L1 -> L0 (MTE1)
            asc.load_data(b2, b1, transpose=True)
            qa2.enque(a2)
            qb2.enque(b2)
            a2, b2 = qa2.deque(), qb2.deque()
            asc.mmad(co, a2, b2, m, n, k, init=(k0 == 0))          # cube (M)
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)
            qa1.free_tensor(a1)
            qb1.free_tensor(b1)
        qc.enque(co)
        co = qc.deque()
        asc.fixpipe(c[i0 * N + j0:], co, m, n, dst_stride=N)      # L0C -> GM (FIX)
        qc.free_tensor(co)


@functools.lru_cache(maxsize=8)
def baseline_cycles(M: int, N: int, K: int, card=ONE_CORE) -> int:
    """Modelled cycles of :func:`naive_kernel` on (M, N, K) on ``card``, with as many blocks as
    the card has AICs (grader side; deterministic). Raises AssertionError if it left C
    unwritten."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, dtype=np.float32)
    res = launch(naive_kernel, card.n_aic, (A, B, C, M, N, K), machine=card)
    if not np.isfinite(C).all():
        raise AssertionError("the naive kernel left C unwritten")
    return res.cycles
