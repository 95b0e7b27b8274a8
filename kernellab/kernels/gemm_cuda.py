"""Chapter 2: the CUDA GEMM kernel ladder, C = A @ B, every version side by side.

In the style of llm.c's ``dev/cuda`` kernels: one module, one harness, each version a small step
from the one before. Kernels are ordinary numba-cuda code (``@cuda.jit``): on a real GPU (the
``gpu`` tier) they compile to PTX and run there; without one (the ``sim`` tier) they run in the
CUDA simulator that ``import kernellab`` selects, unchanged.

Every version has a launch function ``gemm_vN(A, B, C)`` with the same harness:

* ``A`` (M, K), ``B`` (K, N), ``C`` (M, N), all float32, row-major; any M, N, K >= 0 (sizes
  that are not multiples of the tiles included: every kernel checks its bounds).
* ``C`` is written in place (its previous contents, NaN included, are never read; elements a
  kernel forgets stay as they were); returns None. ``A`` and ``B`` are not modified.
* Accumulation is in float32, in the loop order of each version (k ascending).
* The harness raises ``ValueError`` for non-2-D arrays, mismatched shapes, a dtype other than
  float32, a read-only ``C`` or a ``C`` that overlaps ``A``/``B``, and ``TypeError`` when an
  argument is neither a numpy array nor a numba device array. numpy arguments are copied to the
  device (``C`` too, so untouched elements keep their values) and ``C`` is copied back;
  non-contiguous numpy arguments are copied to C order first. Device arrays (``cuda.to_device``)
  are used as they are and the launch is asynchronous: what a timing loop on a GPU wants.

Each version is a ``@cuda.jit`` kernel (:data:`KERNELS`) and a launch function that computes
the grid and block (:func:`launch_config`) and launches it. Notation below: a *warp* is 32
threads with consecutive ``threadIdx.x`` (then ``.y``); a *sector* is 32 aligned bytes, the
unit global memory moves in; a shared-memory *wavefront* is one pass through the 32 four-byte
banks. "Loads per FMA" counts a thread's load instructions per multiply-add it does.

Versions::

    v1 naive           one thread per C element, blocks of 32 x 8 threads, threadIdx.x -> ROW i,
                       threadIdx.y -> column j; a dot product over k from global memory. The 32
                       lanes of a warp have consecutive i and one j: A[i, k] is read down a
                       column (lane stride K floats), 32 sectors for 128 useful bytes
                       (uncoalesced); B[k, j] is one address for the whole warp (a broadcast,
                       1 sector); the store C[i, j] is 32 sectors too. 2 global loads per FMA,
                       33 sectors per 32 FMAs: about 0.06 FLOP per byte moved, as the sim tier
                       charges them (each request's sectors at L2: it has no L1). On a GPU the
                       other 7 floats of each A sector are the same lane's next 7 k steps and
                       mostly hit in L1: the cost is L1 throughput, 32 sectors per request
                       against 4 coalesced. The course's baseline for the modelled speedup.
    v2 coalesced       the same, with threadIdx.x -> COLUMN j: lanes read 32 consecutive floats
                       B[k, j0..j0+31] (128 bytes, 4 sectors: coalesced) and one A[i, k]
                       (broadcast), and store 4 sectors of C. Still 2 global loads per FMA, but
                       5 sectors per 32 FMAs instead of 33: 6.6x fewer bytes (0.4 FLOP/B).
    v3 shared tiles    16 x 16 threads compute a 16 x 16 tile of C. Per step of 16 along k the
                       block stages a 16 x 16 tile of A and of B in shared memory (each thread
                       loads one element of each, coalesced; zero outside the matrix, so the
                       tail tile needs no special inner loop), syncthreads, then each thread
                       does 16 FMAs from shared memory, syncthreads again before the next tiles
                       overwrite these. Every element loaded from global memory is used 16
                       times: 1/8 global loads per FMA (10x fewer sectors than v2, 4 FLOP/B),
                       but 2 shared loads per FMA, which now set the pace.
    v4 register tiles  64 x 64 C tile per block of 16 x 16 threads, each thread a 4 x 4 patch of
                       C in registers; k in steps of 8 (BK). Per step: the 64 x 8 tile of A
                       and the 8 x 64 tile of B go to shared memory (2 + 2 coalesced loads per
                       thread), then for each of the 8 k values a thread reads 4 values of A
                       and 4 of B into registers and does 4 x 4 = 16 FMAs (an outer product).
                       Shared loads per FMA drop from 2 to (4 + 4) / 16 = 0.5, global loads per
                       FMA from 1/8 to 1/32 (4 B of sectors per 32 FMAs: 16 FLOP/B). A thread's
                       patch is strided (rows ty + 16 r, columns tx + 16 c, not a contiguous
                       4 x 4), so a warp's shared reads of B hit 16 consecutive banks and its
                       stores of C are coalesced. The register tile is what limits its
                       occupancy (registers per thread from ptxas: ``LaunchStats.resources``,
                       :func:`kernellab.sim.resources.occupancy`); v1-v3 run at full occupancy.

Shared-memory banks. v3 and v4 are conflict-free as written: a warp is two rows of 16 threads;
it reads two words of the A tile (each broadcast to 16 lanes, in different banks because tile
rows are 16 or 8 words apart) and 16 consecutive words of the B tile (broadcast to both rows);
tile stores are 32 consecutive words. Padding is the fix when a layout is not: e.g. storing
v4's A tile transposed (BK x BM, what float4 loads of A need) makes each store 8-way conflicted
(the 8 lanes loading one row of A write words BM = 64 apart: one bank); a leading dimension of
BM + 4 (68 words: each k row shifts by 4 banks) removes it, as TILE + 1 does for a 32 x 32
tile read by columns. All of this is for 4-byte accesses: 8- and 16-byte (``float2``/``float4``)
shared accesses are served a half or a quarter of a warp at a time, and conflicts count within
each phase (chapter 2, section 6).

What the sim tier's counters should show (``kernellab.sim.capture()``), for M, N, K multiples
of the tiles (and of 8), K >= 8, and arrays starting on a sector boundary; ``MNK = M*N*K``.
:func:`expected_counters` computes them; tests/test_kernellab/kernels/test_gemm_cuda_ladder.py
checks them against the
engine (exact)::

    counter                     v1            v2            v3             v4
    global_load_requests        MNK/16        MNK/16        MNK/256        MNK/1024
    global_load_sectors         33 MNK/32     5 MNK/32      MNK/64         MNK/256
    global_store_requests       MN/32         MN/32         MN/32          MN/32
    global_store_sectors        MN            MN/8          MN/8           MN/8
    shared_load_requests        0             0             MNK/16         MNK/64
    shared_load_wavefronts      0             0             = requests     = requests
    shared_store_requests       0             0             MNK/256        MNK/1024
    shared_store_wavefronts     0             0             = requests     = requests
    barriers                    0             0             2 K/16 blocks  2 K/8 blocks
    shared_bytes_per_block      0             0             2048           4096
    dram_read_bytes             4 (MK + KN) for every version (compulsory: a perfect L2)
    dram_write_bytes            4 MN for every version

Loads per FMA, global (shared): v1 and v2 2 (0), v3 1/8 (2), v4 1/32 (1/2); global bytes
moved per FMA (sectors x 32): v1 33, v2 5, v3 1/2, v4 1/8.

``python -m kernellab.kernels.gemm_cuda [--size N | --mnk M N K]`` is the ladder's ``main``
(:mod:`kernellab.kernels._ladder`): every version checked against
``reference_kernels.gemm.gemm_golden`` under the K-aware bound of :mod:`kernellab.numerics`, at
the timed size and at ragged sizes (:data:`RAGGED`, sim tier :data:`RAGGED_SIM`), then timed:
modelled on the sim tier (default M = N = K = 64), CUDA events against ``cupy.matmul`` (cuBLAS
SGEMM) on the gpu tier (default 4096).

Sources: S. Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance" (2022):
his kernels 1-3 and 5 are this ladder's steps (his 1-D blocktiling, kernel 4, is left out; his
measured A6000 figures are in :mod:`kernellab.topics.gemm_anchors`; his 2-D blocktiling gives a
thread a contiguous patch; here it is strided by 16, because with scalar loads a contiguous
4-wide patch makes a warp's reads of the B tile a 2-way bank conflict: lanes tx and tx + 8 hit
words 32 apart); NVIDIA, CUDA C++
Best Practices Guide, "Coalesced Access to Global Memory" and "Shared Memory and Memory Banks";
V. Volkov and J. Demmel, "Benchmarking GPUs to tune dense linear algebra", SC 2008 (register
blocking on GPUs).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32

from kernellab.kernels import _ladder
from kernellab.kernels._cuda_args import is_device_array
from kernellab.kernels._gemm_args import gemm_shapes

__all__ = ["gemm_v1", "gemm_v2", "gemm_v3", "gemm_v4", "LADDER", "KERNELS", "gemm_flops",
           "launch_config", "expected_counters", "ladder_case", "gpu_baselines", "main",
           "V1_BLOCK", "TILE", "BM", "BN", "BK", "TM", "TN", "RAGGED", "RAGGED_SIM"]

#: v1/v2 thread block (x, y): 256 threads, 8 warps of 32 consecutive threadIdx.x.
V1_BLOCK = (32, 8)
#: v3 tile edge (block of TILE x TILE threads; one C element per thread).
TILE = 16
#: v4: BM x BN tile of C per block, BK deep k steps, TM x TN patch of C per thread.
BM, BN, BK, TM, TN = 64, 64, 8, 4, 4
_V4_TX = BN // TN                  # 16 threads along x (columns)
_V4_TY = BM // TM                  # 16 threads along y (rows)
_V4_THREADS = _V4_TX * _V4_TY      # 256
_V4_A_LOADS = (BM * BK) // _V4_THREADS   # elements of the A tile each thread loads: 2
_V4_B_LOADS = (BK * BN) // _V4_THREADS   # elements of the B tile each thread loads: 2
assert _V4_THREADS <= 256 and _V4_A_LOADS * _V4_THREADS == BM * BK
assert _V4_B_LOADS * _V4_THREADS == BK * BN


def gemm_flops(M: int, N: int, K: int) -> int:
    """Floating-point operations of C = A @ B with A (M, K), B (K, N): 2*M*N*K."""
    return 2 * int(M) * int(N) * int(K)


# ----------------------------------------------------------------------------------------------
# v1: naive, threadIdx.x -> row (uncoalesced A, broadcast B)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v1_kernel(A, B, C):
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x   # row: consecutive lanes
    j = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y   # column: one per warp
    if i < M and j < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[i, k] * B[k, j]       # A: lane stride K floats; B: one address per warp
        C[i, j] = acc                      # lane stride N floats: 32 sectors per warp


# ----------------------------------------------------------------------------------------------
# v2: coalesced, threadIdx.x -> column
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v2_kernel(A, B, C):
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x   # column: consecutive lanes
    i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y   # row: one per warp
    if i < M and j < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[i, k] * B[k, j]       # A: broadcast; B: 128 contiguous bytes per warp
        C[i, j] = acc                      # 4 sectors per warp


# ----------------------------------------------------------------------------------------------
# v3: TILE x TILE shared-memory tiles
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v3_kernel(A, B, C):
    # One allocation per line: the stock simulator shares one buffer between two
    # cuda.shared.array calls on the same source line.
    As = cuda.shared.array((TILE, TILE), float32)
    Bs = cuda.shared.array((TILE, TILE), float32)
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty        # this thread's C row
    j = cuda.blockIdx.x * TILE + tx        # this thread's C column
    acc = float32(0.0)
    # No early return: every thread of the block must reach both syncthreads, including
    # threads whose (i, j) lies outside C (they still load their share of the tiles).
    for k0 in range(0, K, TILE):
        ka = k0 + tx                       # A tile: rows of the block, columns k0..k0+TILE-1
        if i < M and ka < K:
            As[ty, tx] = A[i, ka]
        else:
            As[ty, tx] = float32(0.0)      # zero-fill: the tail tile adds nothing
        kb = k0 + ty                       # B tile: rows k0..k0+TILE-1, columns of the block
        if kb < K and j < N:
            Bs[ty, tx] = B[kb, j]
        else:
            Bs[ty, tx] = float32(0.0)
        cuda.syncthreads()                 # the tiles are complete
        for kk in range(TILE):
            acc += As[ty, kk] * Bs[kk, tx]   # As: broadcast per half-warp; Bs: 16 banks
        cuda.syncthreads()                 # everyone is done with them before the next load
    if i < M and j < N:
        C[i, j] = acc


# ----------------------------------------------------------------------------------------------
# v4: 2-D register tiles (BM x BN per block, TM x TN per thread, BK deep)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v4_kernel(A, B, C):
    As = cuda.shared.array((BM, BK), float32)
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)   # constant indices after unrolling: registers
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    M = A.shape[0]
    K = A.shape[1]
    N = B.shape[1]
    tx = cuda.threadIdx.x                  # 0 .. BN/TN-1: column group
    ty = cuda.threadIdx.y                  # 0 .. BM/TM-1: row group
    tid = ty * _V4_TX + tx                 # linear id: consecutive within a warp
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    for r in range(TM):
        for c in range(TN):
            acc[r, c] = float32(0.0)
    for k0 in range(0, K, BK):
        # Stage the BM x BK tile of A: element e = tid + p*threads is row e // BK, column
        # e % BK, so a warp reads 4 rows x 8 floats (4 sectors) and writes 32 consecutive
        # shared words (one wavefront). Zero outside the matrix.
        for p in range(_V4_A_LOADS):
            e = tid + p * _V4_THREADS
            r = e // BK
            c = e % BK
            gi = row0 + r
            gk = k0 + c
            if gi < M and gk < K:
                As[r, c] = A[gi, gk]
            else:
                As[r, c] = float32(0.0)
        # Stage the BK x BN tile of B: a warp reads 32 consecutive floats of one row.
        for p in range(_V4_B_LOADS):
            e = tid + p * _V4_THREADS
            r = e // BN
            c = e % BN
            gk = k0 + r
            gj = col0 + c
            if gk < K and gj < N:
                Bs[r, c] = B[gk, gj]
            else:
                Bs[r, c] = float32(0.0)
        cuda.syncthreads()
        for kk in range(BK):
            # TM + TN shared loads feed TM * TN FMAs. The patch is strided: rows ty + r*16
            # (2 distinct words per warp, broadcast), columns tx + c*16 (16 consecutive banks).
            for r in range(TM):
                a[r] = As[ty + r * _V4_TY, kk]
            for c in range(TN):
                b[c] = Bs[kk, tx + c * _V4_TX]
            for r in range(TM):
                for c in range(TN):
                    acc[r, c] += a[r] * b[c]
        cuda.syncthreads()
    for r in range(TM):
        i = row0 + ty + r * _V4_TY
        if i < M:
            for c in range(TN):
                j = col0 + tx + c * _V4_TX
                if j < N:
                    C[i, j] = acc[r, c]    # a warp stores 2 rows x 16 floats: 4 sectors


# ----------------------------------------------------------------------------------------------
# Launch configurations
# ----------------------------------------------------------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _config_v1(M, N, K):
    bx, by = V1_BLOCK
    return (_cdiv(M, bx), _cdiv(N, by)), (bx, by)


def _config_v2(M, N, K):
    bx, by = V1_BLOCK
    return (_cdiv(N, bx), _cdiv(M, by)), (bx, by)


def _config_v3(M, N, K):
    return (_cdiv(N, TILE), _cdiv(M, TILE)), (TILE, TILE)


def _config_v4(M, N, K):
    return (_cdiv(N, BN), _cdiv(M, BM)), (_V4_TX, _V4_TY)


_VERSIONS = OrderedDict([
    ("v1_naive", (gemm_v1_kernel, _config_v1,
                  "naive: one thread per C element, threadIdx.x -> row (uncoalesced A loads)")),
    ("v2_coalesced", (gemm_v2_kernel, _config_v2,
                      "coalesced: threadIdx.x -> column, B loads and C stores coalesced")),
    ("v3_shared_tiles", (gemm_v3_kernel, _config_v3,
                         f"{TILE}x{TILE} A and B tiles staged in shared memory, "
                         "one C element per thread")),
    ("v4_register_tiles", (gemm_v4_kernel, _config_v4,
                           f"{BM}x{BN}x{BK} shared tiles, {TM}x{TN} C patch per thread "
                           "in registers")),
])


def _version_name(version) -> str:
    """Ladder name from 'v3_shared_tiles', 'v3', 3, a launch function or a raw kernel."""
    if callable(version):
        for name, (kern, _, _) in _VERSIONS.items():
            if version is kern or getattr(version, "ladder_name", None) == name:
                return name
        raise ValueError(f"{version!r} is not a version of the chapter 2 ladder")
    key = f"v{version}" if isinstance(version, int) else str(version)
    for name in _VERSIONS:
        if key == name or key == name.split("_")[0]:
            return name
    raise ValueError(f"unknown version {version!r}: expected one of {', '.join(_VERSIONS)} "
                     "(or v1..v4)")


def launch_config(version, M: int, N: int, K: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(grid, block)`` of ``version`` for C (M, N) = A (M, K) @ B (K, N), as 2-tuples (x, y)
    in the order given to the launch (``kernel[grid, block]``).

    ``version``: a ladder name (``"v3_shared_tiles"``), its short form (``"v3"`` or ``3``), a
    launch function or a raw kernel. v1: grid.x covers the rows; v2-v4: grid.x covers the
    columns and grid.y the rows. ``M, N >= 1`` (a grid needs at least one block).
    """
    name = _version_name(version)
    M, N, K = int(M), int(N), int(K)
    if M < 1 or N < 1 or K < 0:
        raise ValueError(f"need M, N >= 1 and K >= 0, got M={M}, N={N}, K={K}")
    return _VERSIONS[name][1](M, N, K)


def expected_counters(version, M: int, N: int, K: int) -> dict:
    """The sim tier's counters that ``version`` should produce (module docstring's table).

    Predictions for sizes where every tile is full and every row starts on a sector: M, N, K
    multiples of the version's tiles (v1/v2: M or N of 32 and 8; v3: 16; v4: 64, 64, 8), N and
    K multiples of 8, K >= 8, arrays starting on a sector boundary. Raises ValueError for
    other sizes (ragged tiles change the counts; the prediction would be wrong, not rough).
    """
    name = _version_name(version)
    M, N, K = int(M), int(N), int(K)
    (gx, gy), (bx, by) = launch_config(name, M, N, K)
    tiles = {"v1_naive": (32, 8, 8), "v2_coalesced": (8, 32, 8), "v3_shared_tiles": (16, 16, 16),
             "v4_register_tiles": (BM, BN, BK)}[name]
    if M % tiles[0] or N % tiles[1] or K % tiles[2] or N % 8 or K % 8 or K < 8:
        raise ValueError(f"{name}: predictions need M % {tiles[0]} == N % {tiles[1]} == "
                         f"K % {tiles[2]} == 0, N and K multiples of 8 and K >= 8")
    blocks = gx * gy
    threads = blocks * bx * by
    mnk = M * N * K
    out = {"blocks": blocks, "threads": threads, "warps": threads // 32,
           "global_store_requests": M * N // 32,
           "dram_read_bytes": 4 * (M * K + K * N), "dram_write_bytes": 4 * M * N,
           "shared_load_requests": 0, "shared_store_requests": 0, "barriers": 0,
           "shared_bytes_per_block": 0}
    if name == "v1_naive":
        out.update(global_load_requests=mnk // 16, global_load_sectors=33 * mnk // 32,
                   global_store_sectors=M * N)
    elif name == "v2_coalesced":
        out.update(global_load_requests=mnk // 16, global_load_sectors=5 * mnk // 32,
                   global_store_sectors=M * N // 8)
    elif name == "v3_shared_tiles":
        out.update(global_load_requests=mnk // 256, global_load_sectors=mnk // 64,
                   global_store_sectors=M * N // 8, shared_load_requests=mnk // 16,
                   shared_store_requests=mnk // 256, barriers=2 * (K // TILE) * blocks,
                   shared_bytes_per_block=2 * TILE * TILE * 4)
    else:
        out.update(global_load_requests=mnk // 1024, global_load_sectors=mnk // 256,
                   global_store_sectors=M * N // 8, shared_load_requests=mnk // 64,
                   shared_store_requests=mnk // 1024, barriers=2 * (K // BK) * blocks,
                   shared_bytes_per_block=(BM * BK + BK * BN) * 4)
    out["shared_load_wavefronts"] = out["shared_load_requests"]     # no bank conflicts
    out["shared_store_wavefronts"] = out["shared_store_requests"]
    return out


# ----------------------------------------------------------------------------------------------
# Harness: argument checks shared by every version
# ----------------------------------------------------------------------------------------------

_F32 = np.dtype(np.float32)


def _check(A, B, C):
    """Validate the arguments; return (A, B, C) with numpy ones C-ordered (C may be a copy)."""
    for name, X in (("A", A), ("B", B), ("C", C)):
        if not (isinstance(X, np.ndarray) or is_device_array(X)):
            raise TypeError(f"{name} must be a numpy array or a numba device array, "
                            f"got {type(X).__name__}")
    gemm_shapes(A, B, C)
    for name, X in (("A", A), ("B", B), ("C", C)):
        if np.dtype(X.dtype) != _F32:
            raise ValueError(f"{name} has dtype {np.dtype(X.dtype)}: the CUDA ladder is "
                             "float32 only (A, B and C)")
    if isinstance(C, np.ndarray):
        if not C.flags.writeable:
            raise ValueError("C is read-only")
        for name, X in (("A", A), ("B", B)):
            if isinstance(X, np.ndarray) and np.may_share_memory(C, X):
                raise ValueError(f"C must not overlap {name}")
    elif C is A or C is B:
        raise ValueError("C must not overlap A or B")
    if isinstance(A, np.ndarray):
        A = np.ascontiguousarray(A)
    if isinstance(B, np.ndarray):
        B = np.ascontiguousarray(B)
    return A, B, C


def _ladder_launcher(name: str):
    kern, config, description = _VERSIONS[name]
    short = name.split("_")[0]

    def launch(A, B, C):
        A, B, C = _check(A, B, C)
        M, K = A.shape
        N = B.shape[1]
        if M == 0 or N == 0:
            return None
        if K == 0:                         # empty sum: no kernel (and no zero-size copies)
            if is_device_array(C):
                C.copy_to_device(np.zeros((M, N), _F32))
            else:
                C[...] = 0
            return None
        grid, block = config(M, N, K)
        dA = A if is_device_array(A) else cuda.to_device(A)
        dB = B if is_device_array(B) else cuda.to_device(B)
        if is_device_array(C):
            kern[grid, block](dA, dB, C)
            return None
        # Host C: copy it in (elements a wrong kernel leaves alone keep their values, NaN for
        # the grader's canaries), launch, copy back.
        work = np.ascontiguousarray(C)
        dC = cuda.to_device(work)
        kern[grid, block](dA, dB, dC)
        dC.copy_to_host(work)
        if work is not C:
            C[...] = work
        return None

    launch.__name__ = launch.__qualname__ = f"gemm_{short}"
    launch.__doc__ = (f"{description}\n\nC = A @ B into the caller's C: A (M, K), B (K, N), "
                      "C (M, N), float32 numpy or device arrays; returns None. Launches "
                      f"``gemm_{short}_kernel`` with ``launch_config`` (see the module "
                      "docstring). Raises ValueError for bad shapes/dtypes, TypeError for "
                      "arguments that are not arrays.")
    launch.description = description
    launch.ladder_name = name
    launch.kernel = kern
    launch.launch_config = lambda M, N, K: config(int(M), int(N), int(K))
    return launch


gemm_v1 = _ladder_launcher("v1_naive")
gemm_v2 = _ladder_launcher("v2_coalesced")
gemm_v3 = _ladder_launcher("v3_shared_tiles")
gemm_v4 = _ladder_launcher("v4_register_tiles")

#: name -> launch function ``f(A, B, C)``, in ladder order; each has a one-line ``description``.
LADDER: "OrderedDict[str, object]" = OrderedDict(
    (f.ladder_name, f) for f in (gemm_v1, gemm_v2, gemm_v3, gemm_v4))

#: name -> the raw ``@cuda.jit`` kernel ``kernel[grid, block](A, B, C)``, in ladder order.
KERNELS: "OrderedDict[str, object]" = OrderedDict(
    (name, spec[0]) for name, spec in _VERSIONS.items())


# ----------------------------------------------------------------------------------------------
# main: validate every version, then time it (kernellab.kernels._ladder)
# ----------------------------------------------------------------------------------------------

#: (M, N, K) validated beside the timed size on the gpu tier: tails in every dimension.
RAGGED = [(1, 1, 1), (33, 65, 127), (257, 129, 65)]
#: the same on the sim tier (its cost grows with M*N*K).
RAGGED_SIM = [(1, 1, 1), (33, 17, 20)]
#: default M = N = K of the timed case, per tier.
DEFAULT_SIZE = {"sim": 64, "gpu": 4096}


def ladder_case(M: int, N: int, K: int, *, seed: int = 0) -> _ladder.Case:
    """The case :func:`main` validates and times: A (M, K) and B (K, N) standard normal float32
    (seeded), C (M, N) float32, checked against ``gemm_golden`` under
    ``numerics.KAware(K, float32, float32, |A| @ |B|)``. Raises ValueError unless M, N, K >= 1."""
    from kernellab import numerics
    from reference_kernels.gemm import gemm_abs_product, gemm_golden

    M, N, K = int(M), int(N), int(K)
    if min(M, N, K) < 1:
        raise ValueError(f"need M, N, K >= 1, got M={M}, N={N}, K={K}")
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    ref = gemm_golden(A, B)
    policy = numerics.KAware(K, "float32", "float32", gemm_abs_product(A, B))
    return _ladder.Case(
        label=f"M={M} N={N} K={K}" if len({M, N, K}) > 1 else f"M=N=K={M}",
        inputs={"A": A, "B": B}, outputs={"C": ((M, N), np.float32)},
        check=lambda _name, out: numerics.compare(out["C"], ref, policy),
        work=gemm_flops(M, N, K), work_unit="FLOP", flops=gemm_flops(M, N, K))


def gpu_baselines(case) -> list:
    """gpu tier: ``cupy.matmul`` (cuBLAS SGEMM, TF32 off unless CUPY_TF32=1) on the same
    device arrays; [] without cupy."""
    try:
        import cupy as cp
    except ImportError:
        return []

    def cublas(A, B, C):
        cp.matmul(cp.asarray(A), cp.asarray(B), out=cp.asarray(C))
    return [_ladder.Baseline(f"cupy {cp.__version__} matmul (cuBLAS)", cublas)]


def _add_arguments(ap, tier):
    n = DEFAULT_SIZE.get(tier, 64)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--size", type=int, default=n, help=f"M = N = K (default {n} on this tier)")
    g.add_argument("--mnk", type=int, nargs=3, metavar=("M", "N", "K"), help="M, N and K")
    ap.add_argument("--seed", type=int, default=0, help="the inputs' seed (default 0)")


def _shape(args):
    return tuple(args.mnk) if args.mnk else (args.size,) * 3


def main(argv=None) -> int:
    """``python -m kernellab.kernels.gemm_cuda``: see :func:`kernellab.kernels._ladder.cli`."""
    import kernellab as _kl

    ragged = RAGGED if _kl.TIER == "gpu" else RAGGED_SIM
    return _ladder.cli(
        argv, prog="python -m kernellab.kernels.gemm_cuda",
        doc="Chapter 2's GEMM ladder: validate every version, then time it.", versions=LADDER,
        make_case=lambda a: ladder_case(*_shape(a), seed=a.seed), add_arguments=_add_arguments,
        baselines=gpu_baselines,
        also_check=lambda a: [ladder_case(*s, seed=a.seed + 1) for s in ragged])


if __name__ == "__main__":
    import sys

    sys.exit(main())
