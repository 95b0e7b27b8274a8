# KNOWN WRONG (data race): the L0A/L0B operands go into TBufs (two halves each, ping-pong)
# instead of A2/B2 queues, and mmad reads them with nothing ordering MTE1 before the cube (M):
# no queue between the two pipes, no pipe_barrier. On hardware the cube may multiply an
# operand before load_data has written it.
# Expected: every case fails with DataRaceError naming M's asc.mmad line and MTE1's load_data
# line.
import math

from kernellab import npu
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P


@npu.tiling_struct
class MatmulTiling:
    """C blocks of base_m x base_n; K through L1 in chunks of l1_k and through L0 in steps of
    base_k; buffer_num blocks per L1 and L0 queue (2: ping-pong)."""

    M: int
    N: int
    K: int
    base_m: int
    base_n: int
    base_k: int
    l1_k: int
    buffer_num: int


def align16(v):
    """v rounded up to a multiple of 16 (a fractal's rows; 16 fp16 = one 32-byte row)."""
    return (v + 15) // 16 * 16


def matmul_tiling(M, N, K, plat):
    """Host tiling for C (M, N) = A (M, K) @ B (K, N) on ``plat``: (block_dim, MatmulTiling)."""
    base_m, base_n = 128, 256
    base_k, l1_k = 64, 128
    blocks = math.ceil(M / base_m) * math.ceil(N / base_n)
    block_dim = min(plat.cube_core_num, blocks)
    return block_dim, MatmulTiling(M, N, K, base_m, base_n, base_k, l1_k, 2)


@asc.kernel(core="aic")
def matmul_kernel(a, b, c, t):
    """C = A @ B: this core's C blocks, K through L1 and L0 with ping-pong, mmad into L0C,
    fixpipe to GM."""
    pipe = asc.TPipe()
    qa1, qb1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)
    ba2, bb2 = asc.TBuf(P.A2), asc.TBuf(P.B2)        # scratch instead of A2/B2 queues
    qc = asc.TQue(P.CO1, 1)
    pipe.init_buffer(qa1, t.buffer_num, t.base_m * t.l1_k * 2)
    pipe.init_buffer(qb1, t.buffer_num, t.l1_k * t.base_n * 2)
    pipe.init_buffer(ba2, t.buffer_num * t.base_m * t.base_k * 2)
    pipe.init_buffer(bb2, t.buffer_num * t.base_k * t.base_n * 2)
    step = 0
    pipe.init_buffer(qc, 1, t.base_m * t.base_n * 4)
    mb = math.ceil(t.M / t.base_m)
    nb = math.ceil(t.N / t.base_n)
    for blk in range(asc.get_block_idx(), mb * nb, asc.get_block_num()):
        i0 = (blk // nb) * t.base_m
        j0 = (blk % nb) * t.base_n
        m = min(t.base_m, t.M - i0)
        n = min(t.base_n, t.N - j0)
        co = qc.alloc_tensor(asc.float32)
        for k0 in range(0, t.K, t.l1_k):
            kl = min(t.l1_k, t.K - k0)                 # the last chunk may be shorter
            a1 = qa1.alloc_tensor(asc.half)
            b1 = qb1.alloc_tensor(asc.half)
            asc.data_copy(a1, a[i0 * t.K + k0:], nd2nz=(m, kl, t.K))     # GM -> L1
            asc.data_copy(b1, b[k0 * t.N + j0:], nd2nz=(kl, n, t.N))
            qa1.enque(a1)
            qb1.enque(b1)
            a1 = qa1.deque()
            b1 = qb1.deque()
            for kk in range(0, kl, t.base_k):
                ks = min(t.base_k, kl - kk)
                h = step % t.buffer_num                # ping-pong halves of the TBufs
                step += 1
                a2 = ba2.get_with_offset(asc.half, t.base_m * t.base_k,
                                         h * t.base_m * t.base_k * 2)
                b2 = bb2.get_with_offset(asc.half, t.base_k * t.base_n,
                                         h * t.base_k * t.base_n * 2)
                asc.load_data(a2, a1, col=kk, cols=align16(ks))          # L1 -> L0A
                asc.load_data(b2, b1, row=kk, rows=align16(ks))          # L1 -> L0B
                asc.mmad(co, a2, b2, m, n, ks, init=(k0 + kk == 0))      # cube
            qa1.free_tensor(a1)
            qb1.free_tensor(b1)
        qc.enque(co)
        co = qc.deque()
        asc.fixpipe(c[i0 * t.N + j0:], co, m, n, dst_stride=t.N)         # L0C -> GM
        qc.free_tensor(co)


def matmul(A, B, C):
    """C = A @ B (A, B float16; C float32) on the NPU's cube cores; returns the RunResult."""
    M, K = A.shape
    N = B.shape[1]
    block_dim, tiling = matmul_tiling(M, N, K, npu.platform_info())
    return npu.launch(matmul_kernel, block_dim, (A, B, C, tiling))
