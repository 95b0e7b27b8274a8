"""Chapter 8: the MoE layer's kernels in BF16 — align/sort, grouped GEMM, combine.

A MoE FFN sends each of M tokens to k of E experts. With ``topk_ids`` (M, k) from the router, a
token's choices are the *flat* indices ``i = m k + j``. BF16 arrays are uint16 bits
(:mod:`kernellab.bf16`: ``widen`` exact, ``narrow`` round to nearest even); every sum is float32.

* **align** (vLLM's ``moe_align_block_size``, vllm/model_executor/layers/fused_moe): count the
  flat indices per expert, pad each expert's count to a multiple of the GEMM's block of rows
  (an expert without tokens gets no block), prefix-sum the padded counts, scatter the indices
  into ``sorted_ids`` (the sentinel ``M k`` in the padding) and write the expert of each block
  into ``expert_ids``; ``num_post_pad[0]`` is the total. One block of :data:`ALIGN_TPB` threads;
  thread t owns experts t, t + ALIGN_TPB, ...: it scans topk_ids for its experts in flat order,
  so the result is the same on every run (no atomics: an atomic cursor per expert would give a
  different order inside an expert on each run).
* **grouped GEMM**: row ``i`` of C (M k, N) is ``A[i // k] @ W[e]`` for the expert e of i.
  ``W`` (E, K, N).

Versions::

    gemm_per_expert  one dense GEMM launch per expert that has tokens, over its rows of
                     sorted_ids (the host reads num_post_pad and expert_ids back to know them):
                     E_active launches, each paying the launch overhead; at small batch the
                     launches, not the bytes, are the time.
    grouped_gemm     one launch for every expert: block (b, y) computes rows b*block .. of
                     sorted_ids, columns y*GEMM_TN ..; it reads its expert from expert_ids[b],
                     returns at once past num_post_pad, and skips the sentinel rows (never
                     reading A[M], which does not exist). Each thread owns one column and
                     ROWS_TILE rows: a W element loaded once serves them all. SIMT, float32
                     accumulation.

* **combine**: ``out[m] = sum_j w[m, j] * C[m k + j]`` in float32, narrowed once.
"""

from __future__ import annotations

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32, int32

from kernellab.bf16 import narrow, widen
from reference_kernels.moe import align_capacity

__all__ = ["align", "grouped_gemm", "gemm_per_expert", "combine", "ALIGN_TPB", "MAX_EXPERTS",
           "GEMM_TN", "ROWS_TILE", "COMBINE_TPB", "capacity"]

ALIGN_TPB = 256          # threads of the one align block
MAX_EXPERTS = 1024       # experts the align kernel's shared arrays hold
_STARTS = MAX_EXPERTS + 1
GEMM_TN = 64             # columns a grouped-GEMM block computes (one a thread)
ROWS_TILE = 16           # rows a thread accumulates at once (local arrays)
COMBINE_TPB = 128


#: (rows of sorted_ids, blocks of expert_ids) that fit any routing of M tokens to k of E experts
#: with ``block`` rows a block: M k + E (block - 1), and that over block rounded up
capacity = align_capacity

@cuda.jit
def _align_kernel(topk_ids, E, block, sorted_ids, expert_ids, num_post_pad):
    counts = cuda.shared.array(MAX_EXPERTS, int32)
    starts = cuda.shared.array(_STARTS, int32)
    t = cuda.threadIdx.x
    k = topk_ids.shape[1]
    MK = topk_ids.shape[0] * k
    for e in range(t, E, ALIGN_TPB):
        c = 0
        for i in range(MK):
            if topk_ids[i // k, i % k] == e:
                c += 1
        counts[e] = c
    cuda.syncthreads()
    if t == 0:                                   # prefix sum of the padded counts
        s = 0
        for e in range(E):
            starts[e] = s
            s += (counts[e] + block - 1) // block * block
        starts[E] = s
        num_post_pad[0] = s
    cuda.syncthreads()
    for e in range(t, E, ALIGN_TPB):
        p = starts[e]
        for i in range(MK):
            if topk_ids[i // k, i % k] == e:
                sorted_ids[p] = i
                p += 1
        end = starts[e + 1]
        while p < end:
            sorted_ids[p] = MK                   # the sentinel
            p += 1
        for b in range(starts[e] // block, end // block):
            expert_ids[b] = e


def align(topk_ids, E: int, block: int, sorted_ids, expert_ids, num_post_pad):
    """topk_ids (M, k) int32 -> sorted_ids (>= M k + E (block - 1),) int32, expert_ids (>= that
    over block,) int32, num_post_pad (1,) int32; numpy or device arrays. Raises ValueError for
    E > MAX_EXPERTS."""
    if E > MAX_EXPERTS:
        raise ValueError(f"align holds at most {MAX_EXPERTS} experts, not {E}")
    _align_kernel[1, ALIGN_TPB](topk_ids, E, block, sorted_ids, expert_ids, num_post_pad)


@cuda.jit
def _grouped_kernel(A, W, sorted_ids, expert_ids, num_post_pad, block, C):
    b = cuda.blockIdx.x
    n = cuda.blockIdx.y * GEMM_TN + cuda.threadIdx.x
    if b * block >= num_post_pad[0] or n >= C.shape[1]:
        return
    e = expert_ids[b]
    MK = C.shape[0]
    k = MK // A.shape[0]
    rows = cuda.local.array(ROWS_TILE, int32)
    acc = cuda.local.array(ROWS_TILE, float32)
    for r0 in range(0, block, ROWS_TILE):
        nr = min(ROWS_TILE, block - r0)
        for r in range(nr):
            rows[r] = sorted_ids[b * block + r0 + r]
            acc[r] = float32(0.0)
        for kk in range(A.shape[1]):
            w = widen(W[e, kk, n])
            for r in range(nr):
                i = rows[r]
                if i < MK:                       # a padded row: nothing to read
                    acc[r] += widen(A[i // k, kk]) * w
        for r in range(nr):
            if rows[r] < MK:
                C[rows[r], n] = narrow(acc[r])


def grouped_gemm(A, W, sorted_ids, expert_ids, num_post_pad, block: int, C):
    """One launch: C[i] = A[i // k] @ W[expert of i] for every flat index i in sorted_ids. A (M,
    K), W (E, K, N), C (M k, N) uint16 BF16 bits; the align outputs for ``block``."""
    grid = (expert_ids.shape[0], (C.shape[1] + GEMM_TN - 1) // GEMM_TN)
    _grouped_kernel[grid, GEMM_TN](A, W, sorted_ids, expert_ids, num_post_pad, block, C)


@cuda.jit
def _expert_kernel(A, W, sorted_ids, start, e, C):
    r = start + cuda.blockIdx.x
    n = cuda.blockIdx.y * GEMM_TN + cuda.threadIdx.x
    MK = C.shape[0]
    i = sorted_ids[r]
    if i >= MK or n >= C.shape[1]:
        return
    k = MK // A.shape[0]
    acc = float32(0.0)
    for kk in range(A.shape[1]):
        acc += widen(A[i // k, kk]) * widen(W[e, kk, n])
    C[i, n] = narrow(acc)


def gemm_per_expert(A, W, sorted_ids, expert_ids, num_post_pad, block: int, C):
    """The baseline: one launch per expert with tokens (the host reads the align result back to
    find their rows). Same contract as :func:`grouped_gemm`; device arrays expected."""
    total = int(num_post_pad.copy_to_host()[0]) if hasattr(num_post_pad, "copy_to_host") \
        else int(num_post_pad[0])
    eids = expert_ids.copy_to_host() if hasattr(expert_ids, "copy_to_host") else expert_ids
    nb = total // block
    tn = (C.shape[1] + GEMM_TN - 1) // GEMM_TN
    b = 0
    while b < nb:
        e = int(eids[b])
        end = b
        while end < nb and int(eids[end]) == e:
            end += 1
        _expert_kernel[((end - b) * block, tn), GEMM_TN](A, W, sorted_ids, b * block, e, C)
        b = end


@cuda.jit
def _combine_kernel(Y, weights, out):
    m = cuda.blockIdx.x
    n = cuda.blockIdx.y * COMBINE_TPB + cuda.threadIdx.x
    if n >= out.shape[1]:
        return
    k = weights.shape[1]
    acc = float32(0.0)
    for j in range(k):
        acc += weights[m, j] * widen(Y[m * k + j, n])
    out[m, n] = narrow(acc)


def combine(Y, weights, out):
    """out[m] = sum_j weights[m, j] Y[m k + j]: Y (M k, N) uint16, weights (M, k) float32, out
    (M, N) uint16."""
    M, N = out.shape
    _combine_kernel[(M, (N + COMBINE_TPB - 1) // COMBINE_TPB), COMBINE_TPB](Y, weights, out)

