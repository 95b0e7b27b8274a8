"""Chapter 6's int8 GEMMs: the CPU ladder (kernellab.kernels.int8_cpu) exact against the int64
golden product, at the extremes (-128, K up to the int32-safe limit), and what its assembly
report says; the sim tier's dp4a kernel (kernellab.kernels.int8_cuda) exact, with a quarter of
chapter 2's FP32 tiled GEMM's global load bytes by the counters."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab

from kernellab.topics import quant as Q
from kernellab.kernels import int8_cpu
from reference_kernels.quant import int_gemm_golden

SIZES = [(1, 1, 1), (2, 3, 1), (3, 5, 7), (31, 33, 17), (33, 65, 70)]


def _ints(shape, seed):
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("name", list(int8_cpu.LADDER))
def test_cpu_ladder_is_exact(name):
    f = int8_cpu.LADDER[name]
    for s, (M, K, N) in enumerate(SIZES):
        A, B = _ints((M, K), s), _ints((K, N), 100 + s)
        C = np.full((M, N), -7, np.int32)
        f(A, B, C)
        np.testing.assert_array_equal(C, int_gemm_golden(A, B), err_msg=f"{name} {(M, K, N)}")
    C = np.full((3, 2), 5, np.int32)
    f(np.zeros((3, 0), np.int8), np.zeros((0, 2), np.int8), C)
    assert not C.any()


@pytest.mark.parametrize("name", list(int8_cpu.LADDER))
def test_cpu_ladder_at_the_int32_limit(name):
    """K = int32_safe_k(): all -128 (the largest positive sum, 2^31 - 2^14) and the mixed-sign
    extreme; v4's u8 x s8 partial sums overflow int32 here and must still come out exact."""
    K = Q.int32_safe_k()
    f = int8_cpu.LADDER[name]
    for a, b in ((-128, -128), (127, -128), (-128, 127)):
        A = np.full((2, K), a, np.int8)
        B = np.full((K, 3), b, np.int8)
        C = np.zeros((2, 3), np.int32)
        f(A, B, C)
        np.testing.assert_array_equal(C, int_gemm_golden(A, B), err_msg=f"{name} {a} {b}")


def test_cpu_harness_rejects_bad_arguments():
    A, B = _ints((2, 3), 0), _ints((3, 4), 1)
    f = int8_cpu.gemm_v2
    with pytest.raises(ValueError):
        f(A, B, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError):
        f(A.astype(np.int16), B, np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError):
        f(A, B, np.zeros((4, 2), np.int32))
    with pytest.raises(TypeError):
        f(A, B, [[0] * 4] * 2)
    C = np.zeros((2, 8), np.int32)[:, ::2]                     # non-contiguous C
    f(A, B, C)
    np.testing.assert_array_equal(C, int_gemm_golden(A, B))


def test_assembly_report_counts_what_is_there():
    fake = "\n".join([".LBB0_1:", "\tvpdpbusd\t%zmm1, %zmm2, %zmm0",
                      "\tvpmulld\t%ymm1, %ymm2, %ymm3",
                      "\tvpmaddwd\t(%rax), %zmm2, %zmm3", "\tjne\t.LBB0_1"])
    c = int8_cpu.count_int_ops(fake)
    assert c["vpdpbusd"]["zmm"] == 1 and c["vpmulld"]["ymm"] == 1 and c["vpmaddwd"]["zmm"] == 1
    assert int8_cpu.int_ops(fake.splitlines()) == 4 * 16 + 8 + 2 * 16
    # LLVM prints an encoding pseudo-prefix on cores with AVX-VNNI: the instruction still counts
    vex = int8_cpu.count_int_ops("\t{vex}\tvpdpwssd\t%ymm1, %ymm2, %ymm0")
    assert vex["vpdpwssd"]["ymm"] == 1
    rep = int8_cpu.asm_report(int8_cpu.gemm_v2)
    assert rep["hot_loop"] and isinstance(rep["vnni"], bool)
    # v2's hot loop multiplies int32 lanes: some integer multiply instruction is in it
    assert int8_cpu.int_ops(rep["hot_loop"].splitlines()) > 0


@pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
def test_dp4a_kernel_is_exact_and_loads_a_quarter_of_fp32s_bytes():
    from kernellab import sim
    from kernellab.kernels import gemm_cuda, int8_cuda

    for s, (M, K, N) in enumerate([(3, 5, 7), (17, 70, 33)]):     # K % 4 != 0, ragged tiles
        A, B = _ints((M, K), s), _ints((K, N), 50 + s)
        C = np.full((M, N), -7, np.int32)
        int8_cuda.gemm_dp4a(A, B, C)
        np.testing.assert_array_equal(C, int_gemm_golden(A, B))
    M, N, K = 32, 32, 128                                         # K a multiple of 64
    A, B = _ints((M, K), 7), _ints((K, N), 8)
    A[0] = -128
    B[:, 0] = -128
    C = np.empty((M, N), np.int32)
    with sim.capture() as c8:
        int8_cuda.gemm_dp4a(A, B, C)
    np.testing.assert_array_equal(C, int_gemm_golden(A, B))
    Cf = np.empty((M, N), np.float32)
    with sim.capture() as cf:
        gemm_cuda.gemm_v3(A.astype(np.float32), B.astype(np.float32), Cf)
    t8, tf = c8.total(), cf.total()
    for key in ("global_load_requests", "global_load_sectors", "global_load_bytes",
                "dram_read_bytes"):
        assert 4 * t8[key] == tf[key], (key, t8[key], tf[key])
    assert t8["global_store_bytes"] == tf["global_store_bytes"]      # int32 and float32 C
    total8 = t8["global_load_bytes"] + t8["global_store_bytes"]
    totalf = tf["global_load_bytes"] + tf["global_store_bytes"]
    assert 0.25 < total8 / totalf < 0.3


def test_packing_layouts():
    from kernellab.kernels import int8_cuda
    A = np.arange(-6, 4, dtype=np.int8).reshape(2, 5)
    A4 = int8_cuda.pack_a(A)
    assert A4.shape == (2, 2) and A4.dtype == np.int32
    np.testing.assert_array_equal(A4.view(np.int8)[:, :5], A)
    B = np.arange(15, dtype=np.int8).reshape(5, 3)
    B4 = int8_cuda.pack_b(B)
    assert B4.shape == (2, 3)
    w = np.array([B4[0, 1]], np.int32).view(np.int8)
    np.testing.assert_array_equal(w, B[0:4, 1])
    assert np.array([B4[1, 2]], np.int32).view(np.int8).tolist() == [B[4, 2], 0, 0, 0]
