"""Chapter 3: the CUDA reduction ladder, out[0] = sum(x), every version side by side.

M. Harris's "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), redone for Volta and later
GPUs, in the style of llm.c's ``dev/cuda`` kernels and of chapter 2's GEMM ladder
(:mod:`kernellab.kernels.gemm_cuda`): one module, one harness, each version a small step from
the one before. Kernels are ordinary numba-cuda code (``@cuda.jit``): on a real GPU (the
``gpu`` tier) they compile to PTX and run there; without one (the ``sim`` tier) they run in
the CUDA simulator that ``import kernellab`` selects, unchanged.

Every version has a launch function ``reduce_vN(x, out)`` with the same harness:

* ``x``: 1-D float32, any length n >= 1 (not a multiple of the block: every kernel checks its
  bounds and pads with zeros); ``out``: float32, shape (1,). The sum is accumulated in float32
  in the order of each version (below) and written to ``out[0]`` (its previous contents, NaN
  included, are never read); returns None. ``x`` is not modified.
* The harness raises ``TypeError`` when an argument is neither a numpy array nor a numba device
  array, and ``ValueError`` for an ``x`` that is not 1-D, empty or not float32, an ``out`` that
  is not float32 of shape (1,), a read-only ``out`` or one that overlaps ``x``. numpy arguments
  are copied to the device (``x``; non-contiguous ones to C order first) and ``out`` is copied
  back. Device arrays (``cuda.to_device``) are used as they are and the launches are
  asynchronous: what a timing loop on a GPU wants. Partial sums between passes live in scratch
  device arrays the module keeps (one per pass and size), so a timed call allocates nothing.

Every kernel runs blocks of ``BLOCK`` = 256 threads (8 warps) and one float32 per thread in a
``BLOCK``-float shared array (v7: one per warp). Notation, as in chapter 2: a *warp request* is
one instruction's accesses by the lanes of one warp; its *active lanes* are the lanes that take
part (the rest are masked off by a branch: divergence); a shared request costs one *wavefront*
per pass through the 32 four-byte banks (2 words in one bank: 2 wavefronts, a 2-way bank
conflict); a global request costs its distinct 32-byte *sectors*.

Versions (Harris's kernel numbers in brackets)::

    v1 interleaved       [1] one element per thread into shared memory, then log2(256) = 8 tree
       divergent             levels: at stride s = 1, 2, 4 ... 128, thread tid adds sdata[tid+s]
                             into sdata[tid] if tid % (2s) == 0, syncthreads after each level.
                             The active threads are spread over every warp: at s = 1 half the
                             lanes of each of the 8 warps work, at s = 16 one lane in 32, yet
                             each warp issues the instruction (divergent warps). (Harris also
                             blames the slow %; here s is a constant in the unrolled loop,
                             so NVVM turns tid % (2s) into a bit mask.)
                             Block b writes its sum to partial[b].
    v2 interleaved       [2] the same tree with the index strided, index = 2 s tid: thread tid
       strided index         adds sdata[index+s] into sdata[index] if index < 256. The active
                             threads are now the first 256/(2s): whole warps are active or idle
                             (no divergence until fewer than 32 remain), but the lanes of a warp
                             touch words 2s apart: w = min(32, 128/s) working lanes on
                             32/gcd(2s, 32) banks, a w gcd(2s, 32)/32-way bank conflict: 2, 4,
                             8, 8, 8, 4, 2, 1 at s = 1 ... 128 (:func:`v2_conflict_degrees`; the
                             same wavefronts as v1: v2 saves instructions, not shared-memory
                             bandwidth). Idle warps skip the body, not the loop: every warp
                             still runs the loop control and waits at all 9 barriers.
    v3 sequential        [3] stride s = 128, 64 ... 1 and thread tid < s adds sdata[tid+s] into
       addressing            sdata[tid]: the active threads are contiguous (no divergence until
                             s < 32) and so are the words a warp touches (conflict-free, one
                             wavefront per request). Half the threads idle from the first level.
    v4 first add         [4] each block covers 2 x 256 elements and every thread adds two of
       during load           them, x[i] + x[i + 256], while loading: half the blocks (and half
                             the barriers and shared traffic) for the same n. Tree as v3.
    v5 warp-shuffle      [5] the tree stops at 64 values (levels s = 128, 64: 3 barriers a block
       last warp             instead of 9); warp 0 adds sdata[tid] + sdata[tid + 32] into a
                             register and finishes with 5 register-to-register shuffles,
                             v += shfl_down_sync(0xffffffff, v, offset), offset = 16, 8, 4, 2, 1
                             (Luitjens 2014). No shared memory, no barrier after that point.
    v6 several elements  [7] the v5 kernel with a grid-stride loop in the load (Harris's
       per thread            "algorithm cascading"): a thread first sums, sequentially in a
                             register, the pairs x[i] + x[i + 256] for i = its start, + stride,
                             ... (stride = grid x 512), then the block's tree runs once. The grid
                             is cdiv(n, 256 x ITEMS) blocks, at most MAX_GRID: every thread sums
                             at least ITEMS = 16 elements, and for large n the grid is fixed and
                             each thread sums n / (256 x MAX_GRID). Brent's theorem: n / log n
                             threads keep the O(log n) step count while doing O(n) work, so a
                             thread should sum O(log n) elements serially (log2 n = 14-16 at the
                             simulator's sizes, hence 16); Harris measured the same kernel 1.42x
                             faster than the one before.
    v7 block shuffle     [-] each warp reduces its 32 values with 5 shuffles; lane 0 writes the
       + one atomic          warp's sum to warp_sums[warp] (8 floats of shared memory); one
                             barrier; warp 0 reduces the 8 warp sums with 3 shuffles (offsets 4,
                             2, 1) and lane 0 adds the block's sum to out[0] with ONE
                             cuda.atomic.add per block, after a one-thread kernel has zeroed out
                             (CUDA C++ would use cudaMemsetAsync). One pass, no partials array:
                             the pattern of Luitjens 2014 and of CUB's BlockReduce default
                             (BLOCK_REDUCE_WARP_REDUCTIONS).

Harris's kernel 6 (the loops completely unrolled, the block size a C++ template parameter) has
no version of its own here: ``BLOCK`` is a compile-time constant in every kernel, so NVVM can
unroll the tree loops of every version already. Harris's deck uses neither shuffles nor
atomics, and his G80 (compute capability 1.0) had neither: integer atomic functions on global
memory arrived with compute capability 1.1, a float ``atomicAdd`` on global memory with 2.0
(Fermi) and warp shuffles with 3.0 (Kepler) (CUDA C Programming Guide, "Compute
Capabilities", the table of features per compute capability). v5's shuffles and all of v7
are this course's own steps, after Luitjens (2014). :data:`HARRIS_G80` holds his measured
table, to set beside the modelled figures.

Why v5 uses shuffles and not Harris's kernel 5. Harris unrolled the last warp as
``if (tid < 32) { sdata[tid] += sdata[tid + 32]; sdata[tid] += sdata[tid + 16]; ... }`` with a
``volatile`` shared pointer and no barrier, relying on the 32 lanes of a warp executing in
lockstep (implicitly warp-synchronous). Since Volta (compute capability 7.0) the lanes of a
warp are scheduled independently (CUDA C++ Programming Guide, "Independent Thread Scheduling"
and its "Warp Synchronous" note), so nothing guarantees that lane 0 reads sdata[16] after lane
16 has written it: the trick is a data race, and the simulator's race detector reports it
(tests/test_kernellab/kernels/test_reduce_cuda_ladder.py). The safe forms are ``__syncwarp()``
between the steps or,
better, the ``__shfl_*_sync`` intrinsics with an explicit lane mask (CUDA 9 and later), which
exchange registers and need no shared memory at all (J. Luitjens, "Faster Parallel Reductions
on Kepler", NVIDIA developer blog, 2014).

Combining the blocks. A kernel cannot wait for the other blocks of its grid, so each block of
v1-v6 writes its sum to ``partial[block]`` and the harness launches the same kernel again on
the partial sums, until one launch of one block writes ``out[0]`` (as Harris does: "recursive
kernel invocation"). :func:`launch_plan` lists the launches: at n = 2^14, v1-v3 run 64 blocks
then 1, v4 and v5 32 then 1, v6 4 then 1. v7 adds each block's sum to ``out`` with an atomic
instead: one pass (plus the zeroing), but the order in which the blocks' sums arrive is the
order the blocks finish, which changes from run to run, and float addition is not associative:
the last bits of v7's result can differ between two runs on the same GPU. CUB offers both:
``BlockReduce`` with ``BLOCK_REDUCE_WARP_REDUCTIONS_NONDETERMINISTIC`` (atomics) and
``DeviceReduce``, which documents run-to-run determinism for floating-point addition on one
device by combining the blocks' partials in a fixed order (a second pass, like v1-v6). v1-v6
here are deterministic: same x, same bits. (The simulator runs blocks in order, so v7 is
deterministic there; on a GPU it is not.)

Numerics: the longest chain of additions. Each element x_i reaches the result through d_i
float32 additions (an addition of a padding zero is exact, but it is counted), so the computed
sum is sum_i x_i (1 + e_i) with |e_i| <= gamma(d_i), gamma(k) = k u / (1 - k u), u = 2^-24, and

    |computed - exact| <= gamma(k) * sum_i |x_i|,      k = max_i d_i

(N. J. Higham, "The Accuracy of Floating Point Summation", SIAM J. Sci. Comput. 14(4), 1993;
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., ch. 4: k = n - 1 for a sequential
loop, ceil(log2 n) for pairwise summation). Per launch of a version on m inputs with g blocks:

    v1, v2, v3   8                       (log2 256 tree levels)
    v4, v5       9                       (the add during the load, then 8 levels; v5's levels
                                          are 2 in shared memory, 1 into the register, 5
                                          shuffles)
    v6           T + 1 + 8               T = cdiv(m, 512 g) loop iterations: the pair add, then
                                          T additions into the thread's register (the first
                                          onto 0.0), then the 8 levels of v5
    v7           T + 1 + 5 + 3 + g       the same loop, 5 warp shuffles, 3 over the 8 warp
                                          sums, then up to g atomic additions into out[0]

and k is the sum over the version's launches (:func:`addition_depth`; :func:`error_bound` gives
the bound for an array). At n = 2^14: k = 16 for v1-v3 (two launches), 18 for v4-v5, 27 for
v6 (8 iterations + 1 + 8, then 1 + 1 + 8 on the 4 partials) and 21 for v7 (8 + 1 + 5 + 3 + 4
blocks); a sequential loop would have k = 16383. Observed errors are far smaller (random-walk
growth, about sqrt(k) u: Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019).

What the sim tier's counters show (``kernellab.sim.capture()``; :func:`expected_counters`
predicts them exactly for any n, tests/test_kernellab/kernels/test_reduce_cuda_ladder.py checks).
Per block of the
launch on the input (v7: plus the one-thread zeroing kernel); shared requests/elements are
loads + stores; ``lanes`` = elements / requests, the average active lanes of a shared request
(32 = no divergence); ``conflict`` = wavefronts / requests, the bank-conflict degree::

    per block                v1      v2      v3      v4      v5      v6      v7
    elements covered         256     256     256     512     512     >= 4096 (grid-stride)
    shared requests          150     45      45      45      28      28      9
    shared wavefronts        150     150     45      45      28      28      9
    lanes (active/request)   6.8     22.7    22.7    22.7    32      32      1.8
    conflict (wavefr./req.)  1       3.3     1       1       1       1       1
    barriers                 9       9       9       9       3       3       1
    shuffles                 0       0       0       0       5       5       43
    atomics                  0       0       0       0       0       0       1

Global memory is the same for every version: each element of x is read once, by warp requests
of 32 consecutive floats (4 sectors, coalesced), plus one 1-lane store per block (the partial
sum; v7's atomic, which the simulator counts as a one-sector store) and the later passes'
reads of the partials.

The modelled time (:func:`ladder_metrics`, :mod:`kernellab.sim.model`). The model is a
roofline over these counters: per launch, the largest of DRAM bytes, global sectors, shared
wavefronts and barriers (20 cycles each per block) at the chip's throughput, scaled by the
share of the SMs that have a block, plus 3 µs of launch overhead. A reduction is memory-bound
(1 add per 4 bytes): its roof is the DRAM bandwidth, 4n bytes / 1555 GB/s on the a100 profile.
Two figures, as chapter 2's lab grader does (``grader.labs._cuda.modelled_seconds``):

* *as launched*: the sum of ``modelled_time(launch).seconds`` over the version's launches. At
  the sizes the simulator can run (n = 2^14 is 64 KiB, 42 ns of DRAM time on an A100), the 3 µs
  of each launch is over 95% of it, and the grids use a fraction of the SMs (v6's 4 blocks get
  4 of 108 SMs' share of the L2 bandwidth, which is what 4 blocks would get on a GPU, so v6
  models slower than v5 here). This is what a GPU user would see at this n.
* *full GPU*: the sum of each launch's kernel time (``kernel_seconds``, no launch overhead)
  with its grid counted as filling the GPU (blocks = max(blocks, SMs)): the cost per element
  of each version's traffic once n is large enough to fill the GPU (at n = 2^24, v1's first
  pass has 65536 blocks), which is what the ladder is about.

In the full-GPU figure at n = 2^14 (a100), v1, v2 and v3 are bound by their barriers (9 per 256
elements), not by shared memory, and model to the same time: v2's gain on real GPUs is fewer
instructions issued by divergent warps and v3's is fewer wavefronts, and the model charges
neither instructions nor (here) the wavefronts, which sit under the barrier component (v1/v2
150 wavefronts a block, v3 45, against 180 barrier cycles). v4 halves the barriers per element
and reaches the DRAM roof; v5-v7 stay on it, with ever smaller barrier, shared and tail-pass
components (v7 has no second pass). So: v1 = v2 = v3 > v4 > v5 >= v6 >= v7, which the tests
assert. The sync component is an assumption (``barrier_cycles`` = 20 per barrier per block,
charged to the SM's clock as if a barrier stopped the whole SM, where a real SM runs its other
resident blocks meanwhile), and the model charges no instructions, latency or occupancy: it is
kind to v1-v3 (:func:`ladder_metrics` gives their modelled share of the DRAM roof; chapter 3
prints it beside Harris's). Harris's G80 measurements
(:data:`HARRIS_G80`) fall at every step, 30x in all, from 2.4% of the G80's bandwidth for
kernel 1.

The rest of the module: :data:`LADDER` (name -> launch function) and :data:`KERNELS` (name ->
raw kernel), :func:`launch_config` and :func:`launch_plan` (the launches), :func:`addition_depth`
and :func:`error_bound` (the numerics above), :func:`expected_counters` (the table above),
:func:`ladder_metrics`, :func:`metrics_table` and :func:`plot_ladder` (the sim tier's counters
and modelled bandwidth), :func:`measure_gpu` (CUDA-event timings on the gpu tier against a
device-to-device copy).

Sources: M. Harris, "Optimizing Parallel Reduction in CUDA", NVIDIA (2007); J. Luitjens,
"Faster Parallel Reductions on Kepler", NVIDIA developer blog (2014); NVIDIA, CUDA C++
Programming Guide, "Independent Thread Scheduling" (compute capability 7.x) and "Warp Shuffle
Functions"; NVIDIA CUB documentation, ``cub::BlockReduce`` (BlockReduceAlgorithm) and
``cub::DeviceReduce`` (determinism); R. P. Brent, "The parallel evaluation of general
arithmetic expressions", J. ACM 21(2), 1974; N. J. Higham, SIAM J. Sci. Comput. 14(4), 1993.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab.kernels._cuda_args import is_device_array
from kernellab.sim.counters import COUNTER_KEYS

__all__ = ["reduce_v1", "reduce_v2", "reduce_v3", "reduce_v4", "reduce_v5", "reduce_v6",
           "reduce_v7", "LADDER", "KERNELS", "launch_config", "launch_plan", "expected_counters",
           "addition_depth", "error_bound", "ladder_metrics", "metrics_table", "plot_ladder",
           "measure_gpu", "copy_kernel", "zero_kernel", "VERSIONS", "PREDICTED_KEYS", "BLOCK",
           "ITEMS", "MAX_GRID", "FULL_MASK", "ladder_case", "gpu_baselines", "main",
           "HARRIS_G80", "HARRIS_G80_PEAK_BYTES_PER_S", "HARRIS_N", "HARRIS_KERNEL",
           "v2_conflict_degrees"]

#: Threads per block, every version (8 warps).
BLOCK = 256
#: v6/v7: every thread sums at least ITEMS elements in its grid-stride loop (ITEMS / 2 pairs).
ITEMS = 16
#: v6/v7: the grid never exceeds MAX_GRID blocks (8 blocks of 256 threads per SM is full
#: occupancy: 864 resident blocks on an A100, 1056 on an H100/H200).
MAX_GRID = 1024
#: M. Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), the table of measured
#: results: kernel -> (seconds, bytes per second) for 2^22 32-bit integers on a GeForce 8800
#: GTX (G80). Published anchors, quoted, not re-measured here (kernel 6: complete unrolling,
#: which this ladder drops; his kernel 5 unrolls the last warp, warp-synchronously).
HARRIS_G80 = {1: (8.054e-3, 2.083e9), 2: (3.456e-3, 4.854e9), 3: (1.722e-3, 9.741e9),
              4: (0.965e-3, 17.377e9), 5: (0.536e-3, 31.289e9), 6: (0.381e-3, 43.996e9),
              7: (0.268e-3, 62.671e9)}
#: The G80's peak DRAM bandwidth his deck measures against, bytes/s (384-bit, 900 MHz DDR).
HARRIS_G80_PEAK_BYTES_PER_S = 86.4e9
#: The number of elements of his table.
HARRIS_N = 1 << 22
#: version -> the Harris kernel it redoes (None: the course's own step).
HARRIS_KERNEL = {"v1_interleaved_divergent": 1, "v2_interleaved_strided": 2, "v3_sequential": 3,
                 "v4_first_add_on_load": 4, "v5_warp_shuffle": 5, "v6_grid_stride": 7,
                 "v7_block_shuffle_atomic": None}
#: All 32 lanes of a warp, the mask of every shuffle here.
FULL_MASK = 0xFFFFFFFF
_WARPS = BLOCK // 32
_LOG2_BLOCK = BLOCK.bit_length() - 1            # 8 tree levels
assert BLOCK == 1 << _LOG2_BLOCK and BLOCK % 32 == 0 and _WARPS <= 32


# ----------------------------------------------------------------------------------------------
# v1: interleaved addressing, tid % (2s) == 0 (divergent warps)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v1_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    if i < n:
        sdata[tid] = x[i]
    else:
        sdata[tid] = float32(0.0)          # padding: adds nothing
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        if tid % (2 * s) == 0:             # active lanes spread over every warp: divergence
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]


# ----------------------------------------------------------------------------------------------
# v2: interleaved addressing with a strided index (no divergence, bank conflicts)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v2_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    if i < n:
        sdata[tid] = x[i]
    else:
        sdata[tid] = float32(0.0)
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        index = 2 * s * tid                # the first BLOCK/(2s) threads work: whole warps
        if index < BLOCK:
            # lanes 2s words apart: min(32, 128/s) lanes on 32/gcd(2s, 32) banks, a
            # 2, 4, 8, 8, 8, 4, 2, 1-way conflict at s = 1 ... 128 (v2_conflict_degrees)
            sdata[index] += sdata[index + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]


# ----------------------------------------------------------------------------------------------
# v3: sequential addressing (conflict-free)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v3_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    if i < n:
        sdata[tid] = x[i]
    else:
        sdata[tid] = float32(0.0)
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:                        # contiguous threads, contiguous words
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]


# ----------------------------------------------------------------------------------------------
# v4: first add during the global load (half the blocks)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v4_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * BLOCK) + tid    # a block covers 2 * BLOCK elements
    v = float32(0.0)
    if i < n:
        v = x[i]
    if i + BLOCK < n:
        v += x[i + BLOCK]                  # two coalesced loads, one add
    sdata[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]


# ----------------------------------------------------------------------------------------------
# v5: the last warp with shuffles (not the pre-Volta implicit warp-synchronous trick)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v5_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * BLOCK) + tid
    v = float32(0.0)
    if i < n:
        v = x[i]
    if i + BLOCK < n:
        v += x[i + BLOCK]
    sdata[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 32:                          # levels 128, 64: the only barriers left
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid < 32:                           # warp 0, all 32 lanes: the mask is full
        v = sdata[tid] + sdata[tid + 32]
        offset = 16
        while offset > 0:                  # lane l adds lane l + offset's register
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = v


# ----------------------------------------------------------------------------------------------
# v6: several elements per thread (grid-stride loop, Harris's algorithm cascading)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v6_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * BLOCK) + tid
    stride = cuda.gridDim.x * (2 * BLOCK)
    v = float32(0.0)
    while i < n:                           # sequential in a register: no sync, no shared
        a = x[i]
        if i + BLOCK < n:
            a += x[i + BLOCK]
        v += a
        i += stride
    sdata[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 32:
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid < 32:
        v = sdata[tid] + sdata[tid + 32]
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = v


# ----------------------------------------------------------------------------------------------
# v7: the whole block with shuffles, one atomic per block
# ----------------------------------------------------------------------------------------------

@cuda.jit
def reduce_v7_kernel(x, out):
    warp_sums = cuda.shared.array(_WARPS, float32)
    n = x.shape[0]
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    i = cuda.blockIdx.x * (2 * BLOCK) + tid
    stride = cuda.gridDim.x * (2 * BLOCK)
    v = float32(0.0)
    while i < n:
        a = x[i]
        if i + BLOCK < n:
            a += x[i + BLOCK]
        v += a
        i += stride
    offset = 16
    while offset > 0:                      # every warp: 32 registers -> lane 0
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()                     # the block's only barrier
    if warp == 0:
        v = float32(0.0)
        if lane < _WARPS:
            v = warp_sums[lane]
        offset = _WARPS // 2
        while offset > 0:                  # 8 warp sums -> lane 0
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            cuda.atomic.add(out, 0, v)     # one atomic per block; order = finishing order


@cuda.jit
def zero_kernel(out):
    """out[0] = 0 before v7's atomics (cudaMemsetAsync in CUDA C++)."""
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0:
        out[0] = float32(0.0)


# ----------------------------------------------------------------------------------------------
# Launch configurations, plans, predictions
# ----------------------------------------------------------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _grid_one(n):           # v1-v3: one element per thread
    return _cdiv(n, BLOCK)


def _grid_two(n):           # v4, v5: two elements per thread
    return _cdiv(n, 2 * BLOCK)


def _grid_many(n):          # v6, v7: >= ITEMS elements per thread, at most MAX_GRID blocks
    return min(_cdiv(n, BLOCK * ITEMS), MAX_GRID)


_VERSIONS = OrderedDict([
    ("v1_interleaved_divergent", (reduce_v1_kernel, _grid_one,
        "interleaved addressing, tid % (2s) == 0: divergent warps")),
    ("v2_interleaved_strided", (reduce_v2_kernel, _grid_one,
        "interleaved addressing, index = 2*s*tid: no divergence, shared-memory bank conflicts")),
    ("v3_sequential", (reduce_v3_kernel, _grid_one,
        "sequential addressing, tid < s: conflict-free")),
    ("v4_first_add_on_load", (reduce_v4_kernel, _grid_two,
        "first add during the global load: half the blocks")),
    ("v5_warp_shuffle", (reduce_v5_kernel, _grid_two,
        "last warp reduced with shfl_down_sync (3 barriers a block instead of 9)")),
    ("v6_grid_stride", (reduce_v6_kernel, _grid_many,
        f"several elements per thread: grid-stride loop, >= {ITEMS} elements a thread, "
        f"<= {MAX_GRID} blocks")),
    ("v7_block_shuffle_atomic", (reduce_v7_kernel, _grid_many,
        "whole block reduced with shuffles, one atomicAdd per block (one pass, "
        "nondeterministic order)")),
])
VERSIONS = tuple(_VERSIONS)


def _version_name(version) -> str:
    """Ladder name from 'v3_sequential', 'v3', 3, a launch function or a raw kernel."""
    if callable(version):
        for name, (kern, _, _) in _VERSIONS.items():
            if version is kern or getattr(version, "ladder_name", None) == name:
                return name
        raise ValueError(f"{version!r} is not a version of the chapter 3 ladder")
    key = f"v{version}" if isinstance(version, int) and not isinstance(version, bool) \
        else str(version)
    for name in _VERSIONS:
        if key == name or key == name.split("_")[0]:
            return name
    raise ValueError(f"unknown version {version!r}: expected one of {', '.join(_VERSIONS)} "
                     "(or v1..v7)")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {type(n).__name__}")
    n = int(n)
    if n < 1:
        raise ValueError(f"need n >= 1 elements, got n={n}")
    return n


def launch_config(version, n: int) -> tuple[int, int]:
    """``(grid, block)`` of ``version``'s first launch (on the n inputs), as ints.

    ``version``: a ladder name (``"v3_sequential"``), its short form (``"v3"`` or ``3``), a
    launch function or a raw kernel. v1-v3: cdiv(n, 256) blocks; v4, v5: cdiv(n, 512); v6, v7:
    min(cdiv(n, 256 * ITEMS), MAX_GRID). The block is always ``BLOCK`` = 256.
    """
    name = _version_name(version)
    return _VERSIONS[name][1](_check_n(n)), BLOCK


def launch_plan(version, n: int) -> list[dict]:
    """Every launch ``reduce_vN`` makes for n inputs, in order: dicts with ``kernel`` (the
    KERNELS name, or ``"zero"`` for v7's zeroing kernel), ``n`` (the launch's input length),
    ``grid``, ``block`` and ``output`` (``"partial"`` or ``"out"``).

    v1-v6: the version's kernel on x, then on its partial sums, until a launch has one block
    (it writes out[0]). v7: the zeroing kernel, then one launch that adds into out[0].
    """
    name = _version_name(version)
    n = _check_n(n)
    grid_of = _VERSIONS[name][1]
    if name == "v7_block_shuffle_atomic":
        return [{"kernel": "zero", "n": 1, "grid": 1, "block": 1, "output": "out"},
                {"kernel": name, "n": n, "grid": grid_of(n), "block": BLOCK, "output": "out"}]
    plan = []
    m = n
    while True:
        g = grid_of(m)
        plan.append({"kernel": name, "n": m, "grid": g, "block": BLOCK,
                     "output": "out" if g == 1 else "partial"})
        if g == 1:
            return plan
        m = g


def addition_depth(version, n: int) -> int:
    """k: the most float32 additions any element goes through on its way to out[0] (module
    docstring, "Numerics"), summed over the version's launches for n inputs."""
    name = _version_name(version)
    k = 0
    for step in launch_plan(name, n):
        if step["kernel"] == "zero":
            continue
        m, g = step["n"], step["grid"]
        iters = _cdiv(m, 2 * BLOCK * g)                # grid-stride iterations (v6, v7)
        if name in ("v1_interleaved_divergent", "v2_interleaved_strided", "v3_sequential"):
            k += _LOG2_BLOCK
        elif name in ("v4_first_add_on_load", "v5_warp_shuffle"):
            k += 1 + _LOG2_BLOCK
        elif name == "v6_grid_stride":
            k += iters + 1 + _LOG2_BLOCK
        else:
            k += iters + 1 + 5 + (_WARPS.bit_length() - 1) + g
    return k


def _gamma(k: int, u: float) -> float:
    if k * u >= 1:
        return math.inf
    return k * u / (1 - k * u)


def error_bound(version, x) -> float:
    """The deterministic bound gamma(k) * sum |x_i| on |out[0] - sum(x)| for ``version``,
    k = :func:`addition_depth` (float64 arithmetic, u = 2^-24)."""
    from kernellab.numerics import unit_roundoff

    a = np.asarray(x, dtype=np.float64).ravel()
    k = addition_depth(version, a.size)
    return _gamma(k, unit_roundoff(np.float32)) * math.fsum(np.abs(a))


# Per block of one launch: shared (load requests, load elements, store requests, store
# elements, load wavefronts, store wavefronts), barriers, shuffles; see the module docstring.
def _tree_v1():
    lr = le = sr = se = 0
    s = 1
    while s < BLOCK:
        active = BLOCK // (2 * s)
        warps = min(_WARPS, active)                   # tids 0, 2s, 4s ...: one per 2s
        lr, le, sr, se = lr + 2 * warps, le + 2 * active, sr + warps, se + active
        s *= 2
    return lr, le, sr, se, lr, sr


def _tree_v2():
    lr = le = sr = se = lw = sw = 0
    s = 1
    while s < BLOCK:
        active = BLOCK // (2 * s)
        warps = _cdiv(active, 32)
        lanes = min(active, 32)
        banks = 32 // math.gcd(2 * s, 32)             # distinct banks of words 2s apart
        degree = _cdiv(lanes, banks)
        lr, le, sr, se = lr + 2 * warps, le + 2 * active, sr + warps, se + active
        lw, sw = lw + 2 * warps * degree, sw + warps * degree
        s *= 2
    return lr, le, sr, se, lw, sw


def _tree_seq(stop):
    lr = le = sr = se = 0
    s = BLOCK // 2
    while s > stop:
        warps = _cdiv(s, 32)
        lr, le, sr, se = lr + 2 * warps, le + 2 * s, sr + warps, se + s
        s //= 2
    return lr, le, sr, se, lr, sr


def _per_block(name):
    """(shared ld req, ld elem, st req, st elem, ld wavefronts, st wavefronts, barriers,
    shuffles, shared bytes) of one block."""
    init = (0, 0, _WARPS, BLOCK, 0, _WARPS)            # sdata[tid] = ...
    final = (1, 1, 0, 0, 1, 0)                          # tid 0 reads sdata[0]
    if name == "v1_interleaved_divergent":
        parts, bars, shf = [init, _tree_v1(), final], 1 + _LOG2_BLOCK, 0
    elif name == "v2_interleaved_strided":
        parts, bars, shf = [init, _tree_v2(), final], 1 + _LOG2_BLOCK, 0
    elif name in ("v3_sequential", "v4_first_add_on_load"):
        parts, bars, shf = [init, _tree_seq(0), final], 1 + _LOG2_BLOCK, 0
    elif name in ("v5_warp_shuffle", "v6_grid_stride"):
        levels = _LOG2_BLOCK - 6                        # 256 -> 64 in shared memory
        warp0 = (2, 64, 0, 0, 2, 0)                     # sdata[tid] + sdata[tid + 32]
        parts, bars, shf = [init, _tree_seq(32), warp0], 1 + levels, 5
    else:
        parts = [(1, _WARPS, _WARPS, _WARPS, 1, _WARPS)]   # 8 one-lane stores, one 8-lane load
        bars, shf = 1, _WARPS * 5 + (_WARPS.bit_length() - 1)
    tot = tuple(sum(p[j] for p in parts) for j in range(6))
    shared_bytes = 4 * (_WARPS if name == "v7_block_shuffle_atomic" else BLOCK)
    return tot + (bars, shf, shared_bytes)


#: Every counter :func:`expected_counters` predicts: all of the sim tier's counters
#: (:mod:`kernellab.sim.counters`, importable without the simulator's engine).
PREDICTED_KEYS = COUNTER_KEYS


def v2_conflict_degrees() -> dict:
    """{s: bank-conflict degree} of v2's tree reads at each stride s = 1, 2, ... 128: its
    ``w = min(32, BLOCK / (2 s))`` working lanes read words ``2 s k`` (and ``2 s k + s``), which
    fall on ``32 / gcd(2 s, 32)`` banks, ``w gcd(2 s, 32) / 32`` distinct words in each (CUDA C++
    Programming Guide, "Shared Memory", compute capability 5.x and later: 32 banks of 4 bytes)."""
    out = {}
    s = 1
    while s < BLOCK:
        w = min(32, BLOCK // (2 * s))
        out[s] = max(1, w * math.gcd(2 * s, 32) // 32)
        s *= 2
    return out


def expected_counters(version, n: int) -> dict:
    """The sim tier's counters of ``reduce_vN`` on n inputs, summed over its launches
    (``Capture.total()``), as the module docstring derives them; exact for every n >= 1 when
    the arrays start on a 256-byte boundary (the simulator's allocations do)."""
    name = _version_name(version)
    out = dict.fromkeys(PREDICTED_KEYS, 0)

    def add(**kw):
        for k, v in kw.items():
            out[k] = max(out[k], v) if k == "shared_bytes_per_block" else out[k] + v

    for step in launch_plan(name, n):
        if step["kernel"] == "zero":
            add(blocks=1, threads=1, warps=1, global_store_requests=1, global_store_sectors=1,
                global_store_bytes=4, global_store_elements=1, dram_write_bytes=32)
            continue
        m, g = step["n"], step["grid"]
        lr, le, sr, se, lw, sw, bars, shf, sbytes = _per_block(name)
        add(blocks=g, threads=g * BLOCK, warps=g * _WARPS,
            global_load_requests=_cdiv(m, 32), global_load_sectors=_cdiv(m, 8),
            global_load_bytes=4 * m, global_load_elements=m, dram_read_bytes=32 * _cdiv(m, 8),
            shared_load_requests=g * lr, shared_load_elements=g * le,
            shared_store_requests=g * sr, shared_store_elements=g * se,
            shared_load_wavefronts=g * lw, shared_store_wavefronts=g * sw,
            shared_bytes_per_block=sbytes, barriers=g * bars, shuffles=g * shf)
        # One 1-lane store per block: partial[block] (v1-v6), or the atomic on out[0] (v7),
        # which the simulator counts as a store of one sector (the read-modify-write happens
        # in L2 on a GPU).
        add(global_store_requests=g, global_store_sectors=g, global_store_bytes=4 * g,
            global_store_elements=g, dram_write_bytes=32 * (1 if step["output"] == "out"
                                                            else _cdiv(g, 8)))
        if name == "v7_block_shuffle_atomic":
            add(atomics=g)
    return out


# ----------------------------------------------------------------------------------------------
# Harness: argument checks shared by every version
# ----------------------------------------------------------------------------------------------

_F32 = np.dtype(np.float32)


def _check(x, out):
    """Validate the arguments; return (x, out) with a numpy x C-contiguous (maybe a copy)."""
    for name, a in (("x", x), ("out", out)):
        if not (isinstance(a, np.ndarray) or is_device_array(a)):
            raise TypeError(f"{name} must be a numpy array or a numba device array, "
                            f"got {type(a).__name__}")
    if len(x.shape) != 1:
        raise ValueError(f"x must be 1-D, got shape {tuple(x.shape)}")
    if x.shape[0] < 1:
        raise ValueError("x is empty: the reduction ladder needs n >= 1 elements")
    if np.dtype(x.dtype) != _F32:
        raise ValueError(f"x has dtype {np.dtype(x.dtype)}: the reduction ladder is float32 only")
    if np.dtype(out.dtype) != _F32:
        raise ValueError(f"out has dtype {np.dtype(out.dtype)}: it must be float32")
    if tuple(out.shape) != (1,):
        raise ValueError(f"out must have shape (1,), got {tuple(out.shape)}")
    if isinstance(out, np.ndarray):
        if not out.flags.writeable:
            raise ValueError("out is read-only")
        if isinstance(x, np.ndarray) and np.may_share_memory(out, x):
            raise ValueError("out must not overlap x")
    elif out is x:
        raise ValueError("out must not overlap x")
    if isinstance(x, np.ndarray):
        x = np.ascontiguousarray(x)
    return x, out


_SCRATCH: dict = {}


def _scratch(level: int, size: int):
    """A device array of ``size`` float32 for the partial sums of pass ``level``, kept between
    calls (no allocation inside a timed call)."""
    key = (level, size)
    arr = _SCRATCH.get(key)
    if arr is None:
        if len(_SCRATCH) >= 64:
            _SCRATCH.clear()
        arr = _SCRATCH[key] = cuda.device_array(size, np.float32)
    return arr


def _launch_all(name, dx, dout):
    kern, grid_of, _ = _VERSIONS[name]
    if name == "v7_block_shuffle_atomic":
        zero_kernel[1, 1](dout)
        kern[grid_of(dx.shape[0]), BLOCK](dx, dout)
        return
    src, level = dx, 0
    while True:
        g = grid_of(src.shape[0])
        dst = dout if g == 1 else _scratch(level, g)
        kern[g, BLOCK](src, dst)
        if g == 1:
            return
        src, level = dst, level + 1


def _ladder_launcher(name: str):
    description = _VERSIONS[name][2]
    short = name.split("_")[0]

    def launch(x, out):
        x, out = _check(x, out)
        dx = x if is_device_array(x) else cuda.to_device(x)
        if is_device_array(out):
            _launch_all(name, dx, out)
            return None
        dout = cuda.device_array(1, np.float32)
        _launch_all(name, dx, dout)
        out[...] = dout.copy_to_host()
        return None

    launch.__name__ = launch.__qualname__ = f"reduce_{short}"
    launch.__doc__ = (f"{description}\n\nout[0] = sum(x): x 1-D float32 (n >= 1), out float32 "
                      "of shape (1,), numpy or device arrays; returns None. Launches "
                      f"``reduce_{short}_kernel`` as :func:`launch_plan` lists (see the module "
                      "docstring). Raises ValueError for bad shapes/dtypes, TypeError for "
                      "arguments that are not arrays.")
    launch.description = description
    launch.ladder_name = name
    launch.kernel = _VERSIONS[name][0]
    launch.launch_config = lambda n: launch_config(name, n)
    return launch


reduce_v1 = _ladder_launcher("v1_interleaved_divergent")
reduce_v2 = _ladder_launcher("v2_interleaved_strided")
reduce_v3 = _ladder_launcher("v3_sequential")
reduce_v4 = _ladder_launcher("v4_first_add_on_load")
reduce_v5 = _ladder_launcher("v5_warp_shuffle")
reduce_v6 = _ladder_launcher("v6_grid_stride")
reduce_v7 = _ladder_launcher("v7_block_shuffle_atomic")

#: name -> launch function ``f(x, out)``, in ladder order; each has a one-line ``description``.
LADDER: "OrderedDict[str, object]" = OrderedDict(
    (f.ladder_name, f) for f in (reduce_v1, reduce_v2, reduce_v3, reduce_v4, reduce_v5,
                                 reduce_v6, reduce_v7))

#: name -> the raw ``@cuda.jit`` kernel ``kernel[grid, BLOCK](x, partial)`` (v7:
#: ``kernel[grid, BLOCK](x, out)`` adding into a zeroed out), in ladder order.
KERNELS: "OrderedDict[str, object]" = OrderedDict(
    (name, spec[0]) for name, spec in _VERSIONS.items())


# ----------------------------------------------------------------------------------------------
# Metrics: sim-tier counters and modelled time; GPU measurements
# ----------------------------------------------------------------------------------------------

def _ratio(a, b):
    return a / b if b else 0.0


def ladder_metrics(n: int = 2 ** 14, profile="a100", *, seed: int = 0) -> dict:
    """Run every version once on the sim tier under :func:`kernellab.sim.capture` on a seeded
    random float32 array of length n (standard normal) and model its time.

    Returns ``{"n", "profile", "dram_gbps", "bytes", "versions": {name: metrics}}``; per
    version (counters summed over its launches):

    * ``launches``, ``grid`` (the first launch's blocks), ``counters`` (summed);
    * ``lanes_per_shared_request`` (shared elements / requests, loads and stores: 32 means no
      divergence), ``bank_conflict_degree`` (shared wavefronts / requests),
      ``shared_requests``, ``shared_wavefronts``, ``global_sectors``, ``barriers``,
      ``shuffles``, ``atomics``;
    * ``seconds_as_launched``: sum over the launches of ``modelled_time(launch).seconds``
      (3 µs launch overhead each included, each grid's real share of the SMs);
    * ``seconds_full_gpu``: sum over the launches of the kernel time without the launch
      overhead, each grid counted as filling the GPU (blocks = max(blocks, SMs)), as chapter
      2's lab grader models; ``bound_full_gpu``: the largest component of the longest launch;
      ``breakdown_full_gpu``: each component summed over the launches;
    * ``gbps_as_launched`` and ``gbps_full_gpu``: 4n bytes over those times, in GB/s, and
      ``fraction_of_dram``: ``gbps_full_gpu`` / the profile's DRAM bandwidth;
    * ``result``, ``abs_error`` (against math.fsum), ``error_bound`` (:func:`error_bound`).

    The model (module docstring) is deterministic: the same n and profile give the same
    figures on every machine. A few seconds at n = 2^14 (the simulator's cost grows with n).
    """
    from kernellab.device import select_tier

    if select_tier() != "sim":
        raise RuntimeError("ladder_metrics runs on the sim tier (modelled figures from the "
                           "simulator's counters); this process has a GPU: use measure_gpu")
    from kernellab import sim
    from kernellab.sim import model

    n = _check_n(n)
    p = model.get_profile(profile)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    exact = math.fsum(x.astype(np.float64).tolist())
    nbytes = 4 * n
    versions = OrderedDict()
    for name, f in LADDER.items():
        out = np.full(1, np.nan, np.float32)
        with sim.capture() as cap:
            f(x, out)
        tot = cap.total()
        as_launched = full = 0.0
        breakdown = dict.fromkeys(model.COMPONENTS, 0.0)
        longest = None
        for launch in cap.launches:
            c = dict(launch.counters)
            as_launched += model.modelled_time(c, p).seconds
            c["blocks"] = max(int(c["blocks"]), p.sm_count)
            mt = model.modelled_time(c, p)
            full += mt.kernel_seconds
            for k, v in mt.breakdown.items():
                if k != "launch":
                    breakdown[k] += v
            if longest is None or mt.kernel_seconds > longest.kernel_seconds:
                longest = mt
        breakdown.pop("launch")
        sreq = tot["shared_load_requests"] + tot["shared_store_requests"]
        selem = tot["shared_load_elements"] + tot["shared_store_elements"]
        swave = tot["shared_load_wavefronts"] + tot["shared_store_wavefronts"]
        gbps_full = nbytes / full / 1e9
        versions[name] = {
            "launches": len(cap.launches),
            "grid": launch_config(name, n)[0],
            "counters": tot,
            "shared_requests": sreq,
            "shared_wavefronts": swave,
            "lanes_per_shared_request": _ratio(selem, sreq),
            "bank_conflict_degree": _ratio(swave, sreq),
            "global_sectors": tot["global_load_sectors"] + tot["global_store_sectors"],
            "barriers": tot["barriers"],
            "shuffles": tot["shuffles"],
            "atomics": tot["atomics"],
            "seconds_as_launched": as_launched,
            "seconds_full_gpu": full,
            "bound_full_gpu": longest.kernel_bound,
            "breakdown_full_gpu": breakdown,
            "gbps_as_launched": nbytes / as_launched / 1e9,
            "gbps_full_gpu": gbps_full,
            "fraction_of_dram": gbps_full * 1e9 / p.dram_bytes_per_s,
            "result": float(out[0]),
            "abs_error": abs(float(out[0]) - exact),
            "error_bound": error_bound(name, x),
        }
    return {"n": n, "profile": p.name, "dram_gbps": p.dram_bytes_per_s / 1e9, "bytes": nbytes,
            "versions": versions}


def metrics_table(metrics: dict) -> str:
    """A plain-text table of :func:`ladder_metrics`' result, one row per version."""
    head = (f"{'version':<26}{'grid':>6}{'launch':>7}{'lanes/req':>10}{'wavef/req':>10}"
            f"{'sectors':>9}{'barriers':>9}{'shuffles':>9}{'atomics':>8}{'GB/s full':>10}"
            f"{'GB/s as l.':>11}  bound (full GPU)")
    lines = [f"n = {metrics['n']}, profile {metrics['profile']} (DRAM "
             f"{metrics['dram_gbps']:.0f} GB/s)", head]
    for name, m in metrics["versions"].items():
        lines.append(f"{name:<26}{m['grid']:>6}{m['launches']:>7}"
                     f"{m['lanes_per_shared_request']:>10.1f}{m['bank_conflict_degree']:>10.2f}"
                     f"{m['global_sectors']:>9}{m['barriers']:>9}{m['shuffles']:>9}"
                     f"{m['atomics']:>8}{m['gbps_full_gpu']:>10.0f}{m['gbps_as_launched']:>11.1f}"
                     f"  {m['bound_full_gpu']}")
    return "\n".join(lines)


def _plt():
    try:
        from kernellab.plots import _plt as plots_plt
        return plots_plt()
    except ImportError:  # pragma: no cover
        import matplotlib.pyplot as plt
        return plt


def plot_ladder(metrics: dict, measured: dict | None = None):
    """The versions side by side: left, the counters that each step changes (shared requests
    and wavefronts, barriers, shuffles, atomics, global sectors; log scale); right, the
    modelled GB/s (full GPU and as launched) against the profile's DRAM bandwidth, and, when
    ``measured`` (:func:`measure_gpu`'s result) is given, the measured GB/s against the
    device-to-device copy's. Returns the Figure (matplotlib imported lazily)."""
    plt = _plt()
    names = list(metrics["versions"])
    short = [nm.split("_")[0] for nm in names]
    ms = [metrics["versions"][nm] for nm in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.4))
    series = [("shared requests", "shared_requests"), ("shared wavefronts", "shared_wavefronts"),
              ("barriers", "barriers"), ("shuffles", "shuffles"), ("atomics", "atomics"),
              ("global sectors", "global_sectors")]
    w = 0.8 / len(series)
    xs = np.arange(len(names))
    for j, (label, key) in enumerate(series):
        vals = [max(m[key], 0) for m in ms]
        ax1.bar(xs + (j - (len(series) - 1) / 2) * w, [v if v > 0 else np.nan for v in vals],
                w, label=label)
    ax1.set_yscale("log")
    ax1.set_xticks(xs, short)
    ax1.set_ylabel("count, summed over the version's launches")
    ax1.set_title(f"sim-tier counters, n = {metrics['n']}", fontsize=10)
    ax1.legend(fontsize=7, ncol=2)
    ax1.grid(True, axis="y", which="both", alpha=0.3)

    groups = [("modelled, full GPU", [m["gbps_full_gpu"] for m in ms]),
              ("modelled, as launched", [m["gbps_as_launched"] for m in ms])]
    if measured:
        groups.append((f"measured ({measured.get('device', 'GPU')}, n = {measured['n']})",
                       [measured["gbps"].get(nm, np.nan) for nm in names]))
    w2 = 0.8 / len(groups)
    for j, (label, vals) in enumerate(groups):
        ax2.bar(xs + (j - (len(groups) - 1) / 2) * w2, vals, w2, label=label)
    ax2.axhline(metrics["dram_gbps"], color="k", ls="--", lw=1,
                label=f"{metrics['profile']} DRAM peak {metrics['dram_gbps']:.0f} GB/s")
    if measured and measured.get("copy_gbps"):
        ax2.axhline(measured["copy_gbps"], color="gray", ls=":", lw=1.2,
                    label=f"measured device copy {measured['copy_gbps']:.0f} GB/s")
    ax2.set_yscale("log")                  # as launched at the sim's n: ~1% of the roof
    ax2.set_xticks(xs, short)
    ax2.set_ylabel("GB/s  (4n bytes / time)")
    ax2.set_title("bandwidth: modelled (sim tier) and measured", fontsize=10)
    ax2.legend(fontsize=7)
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    return fig


@cuda.jit
def copy_kernel(src, dst):
    """dst[:] = src[:], grid-stride: the bandwidth a trivial streaming kernel gets."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < src.shape[0]:
        dst[i] = src[i]
        i += stride


def measure_gpu(n: int = 2 ** 24, rounds: int = 10, *, seed: int = 0) -> dict:
    """GPU tier only: the ladder's main (:func:`kernellab.kernels._ladder.run` on
    :func:`ladder_case`) on n random float32: every version checked against its error bound,
    then CUDA-event timings (one warm-up call each, ``rounds`` interleaved rounds, the last
    round checked again) beside two device-to-device copies of the same 4n bytes as the
    bandwidth reference (:func:`gpu_baselines`): ``cudaMemcpy`` (``copy_to_device`` between
    device arrays) and :func:`copy_kernel`. A copy moves 8n bytes (read + write); a reduction 4n.

    Returns ``{"n", "device", "rounds", "seconds": {name: median s}, "gbps": {name: 4n / median
    s / 1e9}, "copy_gbps": 8n / median memcpy s / 1e9, "copy_kernel_gbps", "fraction_of_copy":
    {name: gbps / copy_gbps}, "spread": {name: IQR / median; "copy", "copy_kernel" too},
    "errors": {name: |out - fsum|}, "error_bounds": {name: error_bound}}``. RuntimeError if a
    version exceeds its error bound, and on the sim tier, which has no clock (use
    :func:`ladder_metrics`).
    """
    from kernellab.device import select_tier

    if select_tier() != "gpu":
        raise RuntimeError("measure_gpu needs the gpu tier (a CUDA device); this process runs "
                           "on the sim tier, which has no clock: use ladder_metrics(n) for "
                           "modelled figures")
    from kernellab.kernels import _ladder

    n = _check_n(n)
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    case = ladder_case(n, seed=seed)
    copy, kernel_copy = gpu_baselines(case)
    res = _ladder.run(LADDER, case, ladder="reduce_cuda", baselines=[copy, kernel_copy],
                      rounds=rounds)
    for r in res.results.values():
        if not r.ok:
            raise RuntimeError(f"{r.name}: {r.message}")
    mine = {k: res.results[k] for k in LADDER}
    copy_gbps = res.results[copy.name].rate
    gbps = {k: r.rate for k, r in mine.items()}
    spread = {k: r.spread for k, r in mine.items()}
    spread.update(copy=res.results[copy.name].spread,
                  copy_kernel=res.results[kernel_copy.name].spread)
    return {"n": n, "device": res.device, "rounds": rounds,
            "seconds": {k: r.seconds for k, r in mine.items()},
            "gbps": gbps, "copy_gbps": copy_gbps,
            "copy_kernel_gbps": res.results[kernel_copy.name].rate,
            "fraction_of_copy": {k: v / copy_gbps for k, v in gbps.items()},
            "spread": spread, "errors": {k: r.error for k, r in mine.items()},
            "error_bounds": {k: error_bound(k, case.inputs["x"]) for k in LADDER}}


# ----------------------------------------------------------------------------------------------
# main: validate every version, then time it (kernellab.kernels._ladder)
# ----------------------------------------------------------------------------------------------

#: default n of :func:`main`'s case, per tier (the simulator's cost grows with n).
DEFAULT_N = {"sim": 2 ** 14, "gpu": 2 ** 24}


def ladder_case(n: int, *, seed: int = 0):
    """The case ``python -m kernellab.kernels.reduce_cuda`` validates and times: x of n seeded
    standard-normal float32, out (1,) float32, checked against
    ``reference_kernels.reductions.sum_golden`` within :func:`error_bound` (plus the rounding
    of the golden to float64) as :class:`kernellab.numerics.Explicit`. Work: 4n bytes read.
    Raises ValueError for n < 1, TypeError for a non-integer n."""
    from kernellab import numerics
    from kernellab.kernels import _ladder
    from reference_kernels.reductions import sum_golden

    n = _check_n(n)
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    ref = np.array([sum_golden(x)])
    fsum_rounding = 2.0 ** -53 * math.fsum(np.abs(x.astype(np.float64)).tolist())

    def check(name, out):
        bound = error_bound(name, x) + fsum_rounding
        return numerics.compare(out["out"], ref, numerics.Explicit(
            bound, f"gamma(k) sum|x| of {name}'s addition depth k"), tile=None)
    return _ladder.Case(label=f"n={n} float32", inputs={"x": x},
                        outputs={"out": ((1,), np.float32)}, check=check, work=4 * n,
                        work_unit="B")


def gpu_baselines(case) -> list:
    """gpu tier: a device-to-device copy of x (``cudaMemcpy``) and :func:`copy_kernel`, each
    moving 8n bytes: the bandwidth the reduction's 4n bytes are measured against."""
    from kernellab.kernels import _ladder

    x = case.inputs["x"]
    dst = cuda.device_array(x.shape, x.dtype)
    grid = min(_cdiv(x.shape[0], BLOCK), 4 * MAX_GRID)
    return [_ladder.copy_baseline(case, "x"),
            _ladder.Baseline("copy_kernel (grid-stride)",
                             lambda dx, _out: copy_kernel[grid, BLOCK](dx, dst),
                             validate=False, work=2 * x.nbytes)]


def main(argv=None) -> int:
    """``python -m kernellab.kernels.reduce_cuda [--n N]``: every version checked against its
    error bound, then timed (modelled on the sim tier, CUDA events on the gpu tier against a
    device copy); see :func:`kernellab.kernels._ladder.cli`."""
    from kernellab.kernels import _ladder

    def add(ap, tier):
        d = DEFAULT_N.get(tier, DEFAULT_N["sim"])
        ap.add_argument("--n", type=int, default=d, help=f"elements of x (default {d} here)")
        ap.add_argument("--seed", type=int, default=0, help="the input's seed (default 0)")

    return _ladder.cli(argv, prog="python -m kernellab.kernels.reduce_cuda",
                       doc="Chapter 3's reduction ladder: validate every version, then time it.",
                       versions=LADDER, make_case=lambda a: ladder_case(a.n, seed=a.seed),
                       add_arguments=add, baselines=gpu_baselines)


if __name__ == "__main__":
    import sys

    sys.exit(main())
