"""npu-vector-add's baseline (grader side): :func:`baseline_kernel`, z = x + y on one AIV in
tiles of :data:`BASELINE_TILE` elements with one buffer per queue, and its modelled cycles
(:func:`baseline_cycles`), which the speedup rules divide. The lab notebook prints this kernel
as the starting point."""

from __future__ import annotations

import functools

import numpy as np

from grader.labs._npu import CARD
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P

BASELINE_TILE = 1024


@asc.kernel(core="aiv")
def baseline_kernel(x, y, z, n):
    """The grader's baseline: z = x + y on one AIV, tiles of BASELINE_TILE elements, one
    buffer per queue (copy-in, add and copy-out of a tile one after the other)."""
    pipe = asc.TPipe()
    qx, qy, qz = asc.TQue(P.VECIN, 1), asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
    for q in (qx, qy, qz):
        pipe.init_buffer(q, 1, BASELINE_TILE * 2)      # one block of 1024 fp16 per queue
    for off in range(0, n, BASELINE_TILE):
        cnt = min(BASELINE_TILE, n - off)
        copy = asc.data_copy if cnt * 2 % 32 == 0 else asc.data_copy_pad
        a, b = qx.alloc_tensor(asc.half), qy.alloc_tensor(asc.half)     # CopyIn (MTE2)
        copy(a, x[off:], cnt)
        copy(b, y[off:], cnt)
        qx.enque(a)
        qy.enque(b)
        a, b, c = qx.deque(asc.half), qy.deque(asc.half), qz.alloc_tensor(asc.half)
        asc.add(c, a, b, cnt)                                           # Compute (V)
        qz.enque(c)
        qx.free_tensor(a)
        qy.free_tensor(b)
        c = qz.deque(asc.half)                                          # CopyOut (MTE3)
        copy(z[off:], c, cnt)
        qz.free_tensor(c)


@functools.lru_cache(maxsize=8)
def baseline_cycles(n: int, card=CARD) -> int:
    """Modelled cycles of the baseline on ``n`` elements (grader side; deterministic). Raises
    AssertionError if the baseline's sum is wrong."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(np.float16)
    z = np.full(n, np.nan, dtype=np.float16)
    res = launch(baseline_kernel, 1, (x, y, z, n), machine=card)
    if not np.array_equal(z, x + y):
        raise AssertionError("the baseline kernel is wrong")
    return res.cycles
