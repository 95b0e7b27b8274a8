"""Chapter 2's tensor-core ladder (kernellab.kernels.gemm_tc) on the sim tier: every version is
correct in FP16 and BF16 at ragged sizes under float32 accumulation's bound, issues the MMAs
its partition implies, and the counters show what each step of the ladder changes (bank
conflicts gone with the swizzle, copies in flight with cp.async)."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab
from kernellab import sim
from kernellab.kernels import gemm_tc

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters: sim tier")

#: ragged in every dimension: K over two k-tiles, N not 16-byte aligned rows (B element copies
#: in tc4), K aligned (A by cp.async); the dtypes alternate so each version sees both
SHAPES = [((1, 1, 1), "bfloat16"), ((17, 9, 33), "float16"), ((70, 65, 40), "bfloat16")]


@pytest.mark.parametrize("name", list(gemm_tc.LADDER))
def test_every_version_is_correct_and_counts_its_mmas(name):
    f = gemm_tc.LADDER[name]
    for (M, N, K), dtype in SHAPES:
        case = gemm_tc.ladder_case(M, N, K, dtype=dtype, seed=M + N + K)
        C = np.full((M, N), np.nan, np.float32)
        with sim.capture() as cap:
            f(case.inputs["A"], case.inputs["B"], C)
        got = case.check(name, {"C": C})
        assert got.ok, (name, dtype, M, N, K, got)
        assert cap.total()["mma_ops"] == gemm_tc.mma_count(name, M, N, K)


def _counters(name, n=64):
    case = gemm_tc.ladder_case(n, n, n)
    C = np.zeros((n, n), np.float32)
    with sim.capture() as cap:
        gemm_tc.LADDER[name](case.inputs["A"], case.inputs["B"], C)
    return cap.total()


def test_the_swizzle_removes_the_bank_conflicts_and_cp_async_overlaps():
    tc2, tc3, tc4 = (_counters(v) for v in ("tc2_ldmatrix", "tc3_swizzled", "tc4_cp_async"))
    # the same ldmatrix requests: 4 wavefronts an x4 and 2 an x2 without conflicts (16 a warp
    # per 16 of K: 4 warps, 4 steps at K = 64), 4-way (A) and 8-way (B) conflicts without it
    assert tc2["shared_load_requests"] == tc3["shared_load_requests"]
    assert tc3["shared_load_wavefronts"] == 16 * 4 * 4
    assert tc2["shared_load_wavefronts"] == (2 * 4 * 4 + 4 * 2 * 8) * 4 * 4
    # cp.async: every byte of A and B copied; tile 1 of 2 in flight across tile 0's MMAs
    assert tc4["cp_async_bytes"] == 2 * 2 * 64 * 64
    assert tc4["cp_async_overlapped_bytes"] == tc4["cp_async_bytes"] // 2
    assert tc3["cp_async_bytes"] == 0


def test_bad_arguments_are_plain_errors():
    A = np.zeros((4, 5), np.float16)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        gemm_tc.gemm_tc1(A.astype(np.float32), np.zeros((5, 3), np.float32),
                         np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="shapes"):
        gemm_tc.gemm_tc1(A, np.zeros((4, 3), np.float16), np.zeros((4, 3), np.float32))
