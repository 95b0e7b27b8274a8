"""Chapter 2's measured anchors: a published CUDA SGEMM ladder, quoted beside the modelled one.

The sim tier's model (:mod:`kernellab.sim.model`) turns counters into time; these figures are
what real kernels of the same steps measured on a real GPU, so the chapter can say where the
model is kind and where it is harsh. They are quoted, not re-measured.

Source: S. Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a
Worklog" (2022, https://siboehm.com/articles/22/CUDA-MMM), and the table "GFLOPs at matrix
size 4092x4092" of the README of its code, https://github.com/siboehm/SGEMM_CUDA, run on an
NVIDIA RTX A6000 (Ampere, GA102): GFLOP/s and "performance relative to cuBLAS" per kernel.
Boehm's kernels are not this course's: his kernel 3 stages 32 x 32 tiles (ours 16 x 16), his
kernel 5 gives a 256-thread block a 128 x 128 tile of C and each thread an 8 x 8 patch (ours
64 x 64 and 4 x 4, strided); each is the same *step* of the ladder.

The A6000's FP32 peak is not in Boehm's table; :func:`a6000_fp32_peak` derives it from the
card's 10,752 CUDA cores (NVIDIA RTX A6000 datasheet) at its 1800 MHz boost clock, one FMA
(2 FLOPs) per core per clock: 38.7 TFLOP/s, the single-precision figure of the same datasheet.
Its memory bandwidth, :data:`A6000_DRAM_BYTES_PER_S`, is the same datasheet's: 768 GB/s
(48 GB GDDR6 on a 384-bit interface) [secondary: read in third-party copies of the
datasheet's table].
"""

from __future__ import annotations

__all__ = ["BOEHM_A6000", "BOEHM_CUBLAS_GFLOPS", "BOEHM_SIZE", "LADDER_STEP", "A6000_CUDA_CORES",
           "A6000_BOOST_GHZ", "A6000_DRAM_BYTES_PER_S", "a6000_fp32_peak", "anchor_rows"]

#: Boehm's kernel number -> (his name, GFLOP/s, his "relative to cuBLAS" share), 4092^3, A6000.
BOEHM_A6000 = {
    1: ("Naive", 309.0, 0.013),
    2: ("GMEM Coalescing", 1986.5, 0.085),
    3: ("SMEM Caching", 2980.3, 0.128),
    4: ("1D Blocktiling", 8474.7, 0.365),
    5: ("2D Blocktiling", 15971.7, 0.687),
}
#: cuBLAS SGEMM in the same table (kernel "0"), GFLOP/s.
BOEHM_CUBLAS_GFLOPS = 23249.6
#: M = N = K of the table.
BOEHM_SIZE = 4092

#: chapter 2's ladder version -> Boehm's kernel of the same step (his kernel 4, 1-D
#: blocktiling, has no version here).
LADDER_STEP = {"v1_naive": 1, "v2_coalesced": 2, "v3_shared_tiles": 3, "v4_register_tiles": 5}

#: NVIDIA RTX A6000: CUDA cores and boost clock (module docstring).
A6000_CUDA_CORES = 10752
A6000_BOOST_GHZ = 1.8
#: NVIDIA RTX A6000: memory (GDDR6) bandwidth, bytes/s (module docstring).
A6000_DRAM_BYTES_PER_S = 768e9


def a6000_fp32_peak() -> float:
    """The RTX A6000's FP32 (non-tensor) peak, FLOP/s: cores x 2 FLOPs (an FMA) x boost clock."""
    return A6000_CUDA_CORES * 2 * A6000_BOOST_GHZ * 1e9


def anchor_rows() -> list[dict]:
    """One dict per Boehm kernel 1-5, in order: ``kernel`` (his number), ``name``, ``gflops``,
    ``of_cublas`` (his published share, 0..1), ``of_peak`` (GFLOP/s over
    :func:`a6000_fp32_peak`, 0..1), ``step`` (speed-up over his previous kernel, None for the
    first) and ``version`` (the chapter's ladder version of the same step, or None)."""
    version_of = {k: v for v, k in LADDER_STEP.items()}
    rows, prev = [], None
    for k, (name, gflops, of_cublas) in BOEHM_A6000.items():
        rows.append({"kernel": k, "name": name, "gflops": gflops, "of_cublas": of_cublas,
                     "of_peak": gflops * 1e9 / a6000_fp32_peak(),
                     "step": None if prev is None else gflops / prev,
                     "version": version_of.get(k)})
        prev = gflops
    return rows
