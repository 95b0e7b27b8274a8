"""Chapter 2's CUDA GEMM ladder (kernellab.kernels.gemm_cuda): every version is correct on
ragged sizes, the harness checks its arguments, and every kernel compiles for a real GPU.

Without a GPU the kernels run in the CUDA simulator, where each CUDA thread costs about 0.1 ms
(stock numba-cuda executor), so the sizes stay small (at most 70 per dimension) yet cover what
matters: 1 x 1 x 1; M, N and K below, at, above and one past a tile (v3: 16; v4: 64 x 64 x 8);
several blocks with a ragged last one in every dimension; K with a partial last k step. C
starts as NaN, the result is compared with the float64 golden reference under the K-aware
policy, and A and B must be unchanged. The whole file takes under a minute on the stock
executor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernellab  # noqa: F401  (selects the gpu/sim tier before numba.cuda is imported)
from kernellab.numerics import KAware, compare
from reference_kernels.gemm import gemm_abs_product, gemm_golden

ROOT = Path(__file__).resolve().parents[3]

#: (M, K, N) for every version: tiny, then ragged in every dimension (K with a tail step).
SMALL = [(1, 1, 1), (1, 2, 3), (3, 1, 2), (17, 31, 33), (33, 65, 31)]
#: (M, K, N) per version beyond SMALL: several blocks with ragged last ones, and exact tiles.
EXTRA = {
    "v1_naive": [(70, 33, 66)],                      # 3 x 9 blocks of 32 x 8
    "v2_coalesced": [(70, 33, 66)],
    "v3_shared_tiles": [(16, 32, 32)],               # exact 16-multiples: no tail anywhere
    "v4_register_tiles": [
        (64, 16, 64),                                # exactly one tile, two full k steps
        (65, 17, 3),                                 # one row into a 2nd block row; K % 8 = 1
        (2, 9, 70),                                  # 6 columns into a 2nd block column
        (70, 33, 66),                                # 2 x 2 blocks, ragged in M, N and K
    ],
}
VERSIONS = ["v1_naive", "v2_coalesced", "v3_shared_tiles", "v4_register_tiles"]
CASES = [(v, s) for v in VERSIONS for s in SMALL + EXTRA[v]]


def case(M, K, N, seed=0):
    rng = np.random.default_rng(seed + 7919 * M + 31 * K + N)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    return A, B


def policy(A, B):
    return KAware(K=A.shape[1], acc_dtype="float32", out_dtype="float32",
                  abs_product=gemm_abs_product(A, B))


@pytest.fixture(scope="module")
def gemm_cuda():
    from kernellab.kernels import gemm_cuda
    return gemm_cuda


@pytest.mark.parametrize("version,shape", CASES,
                         ids=[f"{v}-{'x'.join(map(str, s))}" for v, s in CASES])
def test_ladder_correct(gemm_cuda, version, shape):
    M, K, N = shape
    A, B = case(M, K, N)
    A0, B0 = A.copy(), B.copy()
    C = np.full((M, N), np.nan, np.float32)
    assert gemm_cuda.LADDER[version](A, B, C) is None
    res = compare(C, gemm_golden(A, B), policy(A, B))
    assert res.ok, f"{version} {shape}: {res.message}"
    assert np.array_equal(A, A0) and np.array_equal(B, B0), "inputs modified"


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 31, 33), (70, 33, 66)])
def test_canaries_fail_the_same_check(shape):
    """An untouched C (NaN), zeros, and a kernel that drops the partial last k tile (or the
    last row) all fail the check the ladder passes."""
    M, K, N = shape
    A, B = case(M, K, N)
    ref = gemm_golden(A, B)
    pol = policy(A, B)
    assert not compare(np.full((M, N), np.nan, np.float32), ref, pol).ok
    assert not compare(np.zeros((M, N), np.float32), ref, pol).ok
    if K > 16:
        kt = (K // 16) * 16                            # K rounded down to whole v3 tiles
        no_tail = (A[:, :kt].astype(np.float64) @ B[:kt].astype(np.float64)).astype(np.float32)
        assert not compare(no_tail, ref, pol).ok
    if M > 1:
        last_row_missing = ref.astype(np.float32)
        last_row_missing[-1] = np.nan
        assert not compare(last_row_missing, ref, pol).ok


def test_ladder_order_and_metadata(gemm_cuda):
    assert list(gemm_cuda.LADDER) == VERSIONS
    assert list(gemm_cuda.KERNELS) == VERSIONS
    for name, f in gemm_cuda.LADDER.items():
        assert f.description and "\n" not in f.description
        assert f.__doc__ and f.ladder_name == name
        assert f.kernel is gemm_cuda.KERNELS[name]
        assert f.__name__ == f"gemm_{name.split('_')[0]}"
    assert gemm_cuda.gemm_flops(2, 3, 4) == 48
    assert gemm_cuda.gemm_v3 is gemm_cuda.LADDER["v3_shared_tiles"]


@pytest.mark.parametrize("version", VERSIONS)
def test_launch_config_covers_c(gemm_cuda, version):
    for M, N, K in [(1, 1, 1), (17, 33, 31), (64, 64, 8), (65, 70, 3), (1000, 3, 7)]:
        (gx, gy), (bx, by) = gemm_cuda.launch_config(version, M, N, K)
        assert bx * by <= 256 and bx * by % 32 == 0
        if version == "v1_naive":                   # x covers rows, y columns
            rows, cols = gx * bx, gy * by
        elif version == "v4_register_tiles":        # each thread a TM x TN patch
            rows, cols = gy * by * gemm_cuda.TM, gx * bx * gemm_cuda.TN
        else:
            rows, cols = gy * by, gx * bx
        per_block_rows = rows // (gx if version == "v1_naive" else gy)
        per_block_cols = cols // (gy if version == "v1_naive" else gx)
        assert rows >= M and cols >= N
        assert rows - M < per_block_rows and cols - N < per_block_cols   # no idle block
    short = version.split("_")[0]
    assert gemm_cuda.launch_config(short, 5, 6, 7) == gemm_cuda.launch_config(version, 5, 6, 7)
    assert gemm_cuda.launch_config(int(short[1:]), 5, 6, 7) == \
        gemm_cuda.launch_config(gemm_cuda.LADDER[version], 5, 6, 7)
    assert gemm_cuda.LADDER[version].launch_config(5, 6, 7) == \
        gemm_cuda.launch_config(gemm_cuda.KERNELS[version], 5, 6, 7)
    with pytest.raises(ValueError):
        gemm_cuda.launch_config(version, 0, 4, 4)


def test_launch_config_errors(gemm_cuda):
    with pytest.raises(ValueError, match="unknown version"):
        gemm_cuda.launch_config("v9", 4, 4, 4)
    with pytest.raises(ValueError):
        gemm_cuda.launch_config(print, 4, 4, 4)


def test_device_arrays(gemm_cuda):
    """Device arrays are used in place (no copies): the timing path on a GPU."""
    from numba import cuda

    A, B = case(17, 20, 19)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    dC = cuda.to_device(np.full((17, 19), np.nan, np.float32))
    gemm_cuda.gemm_v4(dA, dB, dC)
    cuda.synchronize()
    assert compare(dC.copy_to_host(), gemm_golden(A, B), policy(A, B)).ok
    # mixed: host A, device B, host C
    C = np.full((17, 19), np.nan, np.float32)
    gemm_cuda.gemm_v2(A, dB, C)
    assert compare(C, gemm_golden(A, B), policy(A, B)).ok


@pytest.mark.parametrize("version", ["v2_coalesced", "v4_register_tiles"])
def test_noncontiguous_arguments(gemm_cuda, version):
    rng = np.random.default_rng(1)
    At = rng.standard_normal((9, 7)).astype(np.float32)
    A = At.T                                        # (7, 9), Fortran-ordered view
    B = rng.standard_normal((9, 22)).astype(np.float32)[:, ::2]   # strided (9, 11)
    big = np.full((7, 22), np.nan, np.float32)
    C = big[:, ::2]                                 # non-contiguous output
    gemm_cuda.LADDER[version](A, B, C)
    assert compare(np.ascontiguousarray(C), gemm_golden(A, B), policy(A, B)).ok
    assert np.isnan(big[:, 1::2]).all()             # the columns between were not touched


def test_degenerate_sizes(gemm_cuda):
    for f in gemm_cuda.LADDER.values():
        C = np.full((3, 2), np.nan, np.float32)
        f(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32), C)
        assert (C == 0).all()
        f(np.ones((0, 4), np.float32), np.ones((4, 2), np.float32), np.empty((0, 2), np.float32))
        f(np.ones((3, 4), np.float32), np.ones((4, 0), np.float32), np.empty((3, 0), np.float32))


def test_argument_errors(gemm_cuda):
    f = gemm_cuda.gemm_v3
    a32 = np.ones((4, 5), np.float32)
    b32 = np.ones((5, 3), np.float32)
    c32 = np.empty((4, 3), np.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        f(a32, np.ones((4, 3), np.float32), c32)
    with pytest.raises(ValueError, match="C has shape"):
        f(a32, b32, np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="float32 only"):
        f(a32, b32.astype(np.float64), c32)
    with pytest.raises(ValueError, match="float32 only"):
        f(a32, b32, c32.astype(np.float64))
    with pytest.raises(ValueError, match="float32 only"):
        f(a32.astype(np.float16), b32.astype(np.float16), np.zeros((4, 3), np.float16))
    with pytest.raises(ValueError, match="2-D"):
        f(np.ones(5, np.float32), b32, c32)
    with pytest.raises(TypeError):
        f(a32, b32, [[0.0] * 3] * 4)
    with pytest.raises(TypeError):
        f(a32.tolist(), b32, c32)
    ro = np.empty((4, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(a32, b32, ro)
    sq = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        f(sq, np.ones((4, 4), np.float32), sq)


def test_expected_counters_table(gemm_cuda):
    """The docstring's predictions: global sectors fall down the ladder, bytes per FMA too."""
    M = N = K = 64
    e = {v: gemm_cuda.expected_counters(v, M, N, K) for v in VERSIONS}
    sectors = [e[v]["global_load_sectors"] for v in VERSIONS]
    assert sectors == [33 * M * N * K // 32, 5 * M * N * K // 32, M * N * K // 64,
                       M * N * K // 256]
    assert e["v4_register_tiles"]["barriers"] == 2 * (K // gemm_cuda.BK)
    assert e["v3_shared_tiles"]["shared_load_requests"] == M * N * K // 16
    assert all(e[v]["dram_read_bytes"] == 4 * (M * K + K * N) for v in VERSIONS)
    with pytest.raises(ValueError):
        gemm_cuda.expected_counters("v4", 65, 64, 8)
    with pytest.raises(ValueError):
        gemm_cuda.expected_counters("v3", 16, 16, 4)


#: Aligned sizes of one block each (v1/v2 one 32 x 8 block; v3 one tile; v4 one 64 x 64 tile).
COUNTER_SIZES = {"v1_naive": (32, 8, 8), "v2_coalesced": (8, 32, 8),
                 "v3_shared_tiles": (16, 16, 32), "v4_register_tiles": (64, 64, 16)}


@pytest.mark.parametrize("version", VERSIONS)
def test_sim_counters_match_predictions(gemm_cuda, version):
    """On the sim tier's counting engine (kernellab.sim.capture, executor "kernellab"), the
    counters of one aligned launch equal expected_counters exactly (the docstring's table)."""
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim" or not hasattr(sim, "capture"):
        pytest.skip("needs the sim tier's counting engine (kernellab.sim.capture)")
    if sim.options().get("executor") != "kernellab":
        pytest.skip("the stock executor counts nothing")
    M, N, K = COUNTER_SIZES[version]
    A, B = case(M, K, N)
    C = np.full((M, N), np.nan, np.float32)
    with sim.capture() as cap:
        gemm_cuda.LADDER[version](A, B, C)
    assert compare(C, gemm_golden(A, B), policy(A, B)).ok
    assert len(cap.launches) == 1
    got = cap.launches[0].counters
    want = gemm_cuda.expected_counters(version, M, N, K)
    assert {k: got[k] for k in want} == want


def test_kernels_compile_for_a_gpu():
    """Every kernel compiles to PTX (numba-cuda's real compiler, no GPU needed, in a fresh
    process without the simulator); v4's accumulators stay in registers (no local memory);
    v3/v4 have their two barriers."""
    code = r"""
import json, os, re
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda, types              # real numba.cuda, before kernellab picks a tier
from kernellab.kernels import gemm_cuda
arr = types.Array(types.float32, 2, "C")
out = {}
for name, k in gemm_cuda.KERNELS.items():
    ptx, _ = cuda.compile_ptx(k.py_func, (arr, arr, arr), cc=(8, 0))
    out[name] = {"local": len(re.findall(r"\.local\b", ptx)), "bar": ptx.count("bar.sync"),
                 "fma": ptx.count("fma.rn.f32"), "ld_shared": ptx.count("ld.shared")}
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",
                                                            "KERNELLAB_DEVICE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0 and "NVVM" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("no NVVM library: install numba-cuda[cu13]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(out) == VERSIONS
    assert out["v1_naive"]["bar"] == out["v2_coalesced"]["bar"] == 0
    assert out["v3_shared_tiles"]["bar"] == 2 and out["v4_register_tiles"]["bar"] == 2
    assert out["v3_shared_tiles"]["ld_shared"] > 0 and out["v4_register_tiles"]["ld_shared"] > 0
    assert out["v4_register_tiles"]["local"] == 0, "v4's register tile spilled to local memory"
    assert out["v4_register_tiles"]["fma"] >= 16     # the 4 x 4 outer product
