# KNOWN WRONG (values): z accumulated into a zeroed tile (c = 0; c += x; c += y) instead of
# z = x + y. Every sum is the same value, but not always the same bits: 0 + (-0) = +0, so where
# x and y are both -0 the kernel writes +0 and IEEE 754 gives (-0) + (-0) = -0. Comparing
# |out - ref| cannot see it; the exact rule compares bits.
# Expected: the special-values case fails ("sign of zero"); every other case passes.
import math

from kernellab import npu
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P


@npu.tiling_struct
class AddTiling:
    """Block b adds elements [b * block_len, min(n, (b + 1) * block_len)) in tiles of
    tile_len elements, with buffer_num blocks per queue."""

    n: int
    block_len: int
    tile_len: int
    buffer_num: int


def add_tiling(n, plat):
    """Host tiling for n float16 elements on the platform ``plat``: (block_dim, AddTiling)."""
    align = 256                            # elements: 512 B, so every share starts 512 B-aligned
    buffer_num = 2                         # double buffering
    tile_len = plat.ub_size // (3 * buffer_num * 2) // align * align
    block_len = math.ceil(math.ceil(n / plat.vector_core_num) / align) * align
    block_dim = math.ceil(n / block_len)   # no empty blocks when n is small
    return block_dim, AddTiling(n, block_len, tile_len, buffer_num)


@asc.kernel(core="aiv")
def add_kernel(x, y, z, t):
    """z = x + y on this block's share, CopyIn -> Compute -> CopyOut per tile."""
    start = asc.get_block_idx() * t.block_len
    length = min(t.block_len, t.n - start)
    xg, yg, zg = x.sub(start, length), y.sub(start, length), z.sub(start, length)
    pipe = asc.TPipe()
    qx = asc.TQue(P.VECIN, t.buffer_num)
    qy = asc.TQue(P.VECIN, t.buffer_num)
    qz = asc.TQue(P.VECOUT, t.buffer_num)
    for q in (qx, qy, qz):
        pipe.init_buffer(q, t.buffer_num, t.tile_len * 2)
    for i in range(math.ceil(length / t.tile_len)):
        off = i * t.tile_len
        cnt = min(t.tile_len, length - off)
        copy = asc.data_copy if cnt * 2 % 32 == 0 else asc.data_copy_pad
        a = qx.alloc_tensor(asc.half)      # CopyIn
        b = qy.alloc_tensor(asc.half)
        copy(a, xg[off:], cnt)
        copy(b, yg[off:], cnt)
        qx.enque(a)
        qy.enque(b)
        a = qx.deque(asc.half)             # Compute
        b = qy.deque(asc.half)
        c = qz.alloc_tensor(asc.half)
        asc.duplicate(c, 0.0, cnt)         # c = 0, then c += x, c += y
        asc.add(c, c, a, cnt)
        asc.add(c, c, b, cnt)
        qz.enque(c)
        qx.free_tensor(a)
        qy.free_tensor(b)
        c = qz.deque(asc.half)             # CopyOut
        copy(zg[off:], c, cnt)
        qz.free_tensor(c)


def vector_add(x, y, z):
    """z = x + y (float16, any length) on the NPU's vector cores; returns the RunResult."""
    block_dim, tiling = add_tiling(x.size, npu.platform_info())
    return npu.launch(add_kernel, block_dim, (x, y, z, tiling))
