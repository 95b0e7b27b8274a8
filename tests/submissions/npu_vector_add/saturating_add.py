# WRONG: z = clamp(x + y, -65504, 65504): overflowing sums and inf inputs give +-65504 instead of +-inf
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
    ### BEGIN SOLUTION: shares of ceil(n / cores) rounded up to 256 elements; the tile from the UB size: 3 queues x 2 buffers x tile x 2 B <= plat.ub_size, a multiple of 256
    align = 256                            # elements: 512 B, so every share starts 512 B-aligned
    buffer_num = 2                         # double buffering
    tile_len = plat.ub_size // (3 * buffer_num * 2) // align * align
    block_len = math.ceil(math.ceil(n / plat.vector_core_num) / align) * align
    block_dim = math.ceil(n / block_len)   # no empty blocks when n is small
    return block_dim, AddTiling(n, block_len, tile_len, buffer_num)
    ### END SOLUTION


@asc.kernel(core="aiv")
def add_kernel(x, y, z, t):
    """z = x + y on this block's share, CopyIn -> Compute -> CopyOut per tile."""
    ### BEGIN SOLUTION: this block's share (the last one is shorter); three queues of t.buffer_num blocks; per tile: alloc, data_copy (data_copy_pad for a tail that is not a multiple of 16 elements), enque, deque, add, free
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
        asc.add(c, a, b, cnt)
        asc.mins(c, c, 65504.0, cnt)       # WRONG: saturates: inf (overflow, or an inf input) becomes 65504
        asc.maxs(c, c, -65504.0, cnt)
        qz.enque(c)
        qx.free_tensor(a)
        qy.free_tensor(b)
        c = qz.deque(asc.half)             # CopyOut
        copy(zg[off:], c, cnt)
        qz.free_tensor(c)
    ### END SOLUTION


def vector_add(x, y, z):
    """z = x + y (float16, any length) on the NPU's vector cores; returns the RunResult."""
    ### BEGIN SOLUTION: plat = npu.platform_info(); block_dim, tiling = add_tiling(...); npu.launch(add_kernel, block_dim, (x, y, z, tiling))
    block_dim, tiling = add_tiling(x.size, npu.platform_info())
    return npu.launch(add_kernel, block_dim, (x, y, z, tiling))
    ### END SOLUTION

