"""kernellab.kernels.moe on the sim tier: the align kernel gives the golden grouping (ascending
flat index inside each expert) on every run, the grouped GEMM equals the per-expert launches bit
for bit in one launch instead of one per active expert, and the whole MoE (align, GEMM, combine)
is within BF16 output rounding of float64."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab
from kernellab import bf16, sim
from kernellab.kernels import moe
from reference_kernels import moe as ref

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim", reason="counts launches on the sim tier")


def test_align_grouped_gemm_and_combine():
    from numba import cuda

    rng = np.random.default_rng(3)
    M, K, N, E, k, block = 5, 9, 5, 6, 2, 4
    A = bf16.bits(rng.standard_normal((M, K)))
    W = bf16.bits(rng.standard_normal((E, K, N)))
    w, ids = ref.topk_route(rng.standard_normal((M, E)), k)
    rows, blocks = moe.capacity(M, k, E, block)
    runs = []
    for _ in range(2):
        s, eb, n = np.zeros(rows, np.int32), np.zeros(blocks, np.int32), np.zeros(1, np.int32)
        moe.align(ids, E, block, s, eb, n)
        runs.append((s, eb, n))
    s, eb, n = runs[0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))   # deterministic
    assert ref.align_problem(ids, E, block, s, eb, n) is None
    gs, ge, gn = ref.align_golden(ids, E, block)
    assert np.array_equal(s[:gn[0]], gs[:gn[0]]) and np.array_equal(eb[:gn[0] // block],
                                                                     ge[:gn[0] // block])
    C = np.zeros((M * k, N), np.uint16)
    with sim.capture() as cap:
        moe.grouped_gemm(A, W, s, eb, n, block, C)
    assert len(cap.launches) == 1
    dev = [cuda.to_device(x) for x in (A, W, s, eb, n)]
    dC = cuda.to_device(np.zeros((M * k, N), np.uint16))
    with sim.capture() as cap2:
        moe.gemm_per_expert(*dev, block, dC)
    assert len(cap2.launches) == len(np.unique(ids)) > 1
    assert np.array_equal(dC.copy_to_host(), C)
    want = ref.grouped_gemm_golden(bf16.from_bits(A).astype(np.float64),
                                   bf16.from_bits(W).astype(np.float64), ids)
    got = bf16.from_bits(C).astype(np.float64)
    scale = ref.grouped_abs_product(bf16.from_bits(A), bf16.from_bits(W), ids)
    u32, ubf = 2.0 ** -24, 2.0 ** -8
    assert (np.abs(got - want) <= 6 * np.sqrt(K) * u32 * scale + ubf * np.abs(want)).all()
    out = np.zeros((M, N), np.uint16)
    moe.combine(C, w.astype(np.float32), out)
    y = ref.combine_golden(got, w.astype(np.float32))
    assert (np.abs(bf16.from_bits(out).astype(np.float64) - y)
            <= 6 * np.sqrt(k) * u32 * ref.combine_abs(got, w) + ubf * np.abs(y)).all()
