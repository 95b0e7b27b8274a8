"""Chapter 1's CPU GEMM ladder (kernellab.kernels.gemm_cpu): every version is correct on ragged
sizes in fp32 and fp64, under Numba's default code generation (this process) and under the
``fast_gemm`` profile (a subprocess: the SLP vectoriser it switches on has a known
miscompilation history, and these checks are the guard).

Sizes: 1, 2, 3, 31, 33, 65, 127, 257 mixed and non-square; K larger than kc (1024 fp32,
512 fp64); N larger than nc (4096 fp32, 2048 fp64); M whose last mc block (96) is not a
multiple of mr (6); tiny M so that v5 splits N instead of M. The naive v1 only gets small ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernellab  # noqa: F401  (thread settings before numba loads)
from kernellab import codegen
from kernellab.numerics import KAware, compare
from reference_kernels.gemm import gemm_abs_product, gemm_golden

ROOT = Path(__file__).resolve().parents[3]

#: (M, K, N) for every version.
SMALL = [(1, 1, 1), (1, 2, 3), (3, 1, 2), (2, 3, 1), (31, 33, 65), (33, 65, 31), (65, 31, 33),
         (127, 3, 2)]
#: (M, K, N) for v2-v5 only (too slow for the naive kernel, or pointless for it).
LARGE = [
    (127, 257, 33), (257, 31, 127),   # ragged in every dimension, non-square
    (13, 1100, 70),                   # K > kc for both dtypes (several kc panels, += write-back)
    (100, 65, 257),                   # last mc block has 4 rows < mr: a zero-padded A sliver
    (103, 33, 65),                    # last mc block: 7 rows = one full sliver + 1 row
    (257, 33, 3),                     # N < nr: a single, zero-padded B sliver
    (2, 3, 4100),                     # N > nc for both dtypes; M < mr: v5 splits N, not M
]
DTYPES = ("float32", "float64")


def case(M, K, N, dtype, seed=0):
    rng = np.random.default_rng(seed + 7919 * M + 31 * K + N)
    A = rng.standard_normal((M, K)).astype(dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    return A, B


def check_one(kernel, M, K, N, dtype) -> tuple[bool, str]:
    """Run ``kernel`` on a fresh case with C pre-filled with NaN; compare with the golden
    reference under the K-aware tolerance and check the inputs are unchanged."""
    A, B = case(M, K, N, dtype)
    A0, B0 = A.copy(), B.copy()
    C = np.full((M, N), np.nan, dtype)
    kernel(A, B, C)
    policy = KAware(K=K, acc_dtype=dtype, out_dtype=dtype, abs_product=gemm_abs_product(A, B))
    res = compare(C, gemm_golden(A, B), policy)
    if not (np.array_equal(A, A0) and np.array_equal(B, B0)):
        return False, "inputs modified"
    return bool(res.ok), res.message


def run_all(threads=(None,)) -> list[dict]:
    """Every ladder version x dtype x size; returns one record per case (used by both the
    in-process tests and the fast-profile subprocess)."""
    import numba

    from kernellab.kernels import gemm_cpu

    out = []
    for name, kernel in gemm_cpu.LADDER.items():
        sizes = SMALL if name.startswith("v1") else SMALL + LARGE
        for nthreads in (threads if name.startswith("v5") else (None,)):
            old = numba.get_num_threads()
            if nthreads is not None:
                numba.set_num_threads(min(nthreads, numba.config.NUMBA_NUM_THREADS))
            try:
                for dtype in DTYPES:
                    for M, K, N in sizes:
                        ok, msg = check_one(kernel, M, K, N, dtype)
                        out.append({"kernel": name, "dtype": dtype, "shape": [M, K, N],
                                    "threads": nthreads, "ok": ok, "message": msg})
            finally:
                numba.set_num_threads(old)
    return out


# ----------------------------------------------------------------------------------------------
# In this process: Numba's default code generation
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemm_cpu():
    from kernellab.kernels import gemm_cpu
    return gemm_cpu


VERSIONS = ["v1_naive", "v2_ikj", "v3_blocked", "v4_packed", "v5_threads"]
CASES = [(v, s) for v in VERSIONS for s in (SMALL if v == "v1_naive" else SMALL + LARGE)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("version,shape", CASES,
                         ids=[f"{v}-{'x'.join(map(str, s))}" for v, s in CASES])
def test_ladder_correct_default_profile(gemm_cpu, version, shape, dtype):
    ok, msg = check_one(gemm_cpu.LADDER[version], *shape, dtype)
    assert ok, f"{version} {dtype} {shape}: {msg}"


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_v5_any_thread_count(gemm_cpu, nthreads):
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(min(nthreads, numba.config.NUMBA_NUM_THREADS))
    try:
        for shape in [(257, 33, 3), (127, 257, 33), (2, 3, 4100), (1, 1, 1)]:
            ok, msg = check_one(gemm_cpu.gemm_v5, *shape, "float32")
            assert ok, f"{nthreads} threads {shape}: {msg}"
    finally:
        numba.set_num_threads(old)


def test_ladder_order_and_descriptions(gemm_cpu):
    assert list(gemm_cpu.LADDER) == ["v1_naive", "v2_ikj", "v3_blocked", "v4_packed",
                                     "v5_threads"]
    for kernel in gemm_cpu.LADDER.values():
        assert kernel.description and "\n" not in kernel.description
        assert kernel.__doc__
    assert gemm_cpu.gemm_flops(2, 3, 4) == 48


@pytest.mark.parametrize("version", ["v1_naive", "v4_packed", "v5_threads"])
def test_noncontiguous_arguments(gemm_cpu, version):
    kernel = gemm_cpu.LADDER[version]
    rng = np.random.default_rng(1)
    At = rng.standard_normal((33, 31)).astype(np.float32)
    A = At.T                                       # (31, 33), Fortran-ordered view
    B = rng.standard_normal((33, 130)).astype(np.float32)[:, ::2]   # strided (33, 65)
    big = np.full((31, 130), np.nan, np.float32)
    C = big[:, ::2]                                # non-contiguous output
    kernel(A, B, C)
    policy = KAware(K=33, acc_dtype="float32", out_dtype="float32",
                    abs_product=gemm_abs_product(A, B))
    assert compare(np.ascontiguousarray(C), gemm_golden(A, B), policy).ok
    assert np.isnan(big[:, 1::2]).all()            # the columns between were not touched


def test_degenerate_sizes(gemm_cpu):
    for kernel in gemm_cpu.LADDER.values():
        C = np.full((3, 2), np.nan, np.float32)
        kernel(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32), C)
        assert (C == 0).all()
        kernel(np.ones((0, 4), np.float32), np.ones((4, 2), np.float32),
               np.empty((0, 2), np.float32))


def test_argument_errors(gemm_cpu):
    f = gemm_cpu.gemm_v4
    a32 = np.ones((4, 5), np.float32)
    b32 = np.ones((5, 3), np.float32)
    c32 = np.empty((4, 3), np.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        f(a32, np.ones((4, 3), np.float32), c32)
    with pytest.raises(ValueError, match="C has shape"):
        f(a32, b32, np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="dtypes differ"):
        f(a32, b32.astype(np.float64), c32)
    with pytest.raises(ValueError, match="dtypes differ"):
        f(a32, b32, c32.astype(np.float64))
    with pytest.raises(ValueError, match="not supported"):
        f(a32.astype(np.float16), b32.astype(np.float16), np.zeros((4, 3), np.float16))
    with pytest.raises(ValueError, match="2-D"):
        f(np.ones(5, np.float32), b32, c32)
    with pytest.raises(TypeError):
        f(a32, b32, [[0.0] * 3] * 4)
    ro = np.empty((4, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(a32, b32, ro)
    sq = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        f(sq, np.ones((4, 4), np.float32), sq)


# ----------------------------------------------------------------------------------------------
# The assembly helpers
# ----------------------------------------------------------------------------------------------

_ASM = """\
f:
\tmovq\t%rdi, %rax
.LBB0_1:
\tvfmadd231ps\t(%rax), %zmm1, %zmm2
\tvfmadd231ps\t%ymm3, %ymm1, %ymm2
\tvfmadd213ss\t%xmm3, %xmm1, %xmm2
\tvmulpd\t%xmm0, %xmm1, %xmm2
\tvaddps\t%zmm0, %zmm1, %zmm2
\tjne\t.LBB0_1
.LBB0_2:
\tvfmadd231pd\t%xmm0, %xmm1, %xmm2
\tjmp\t.LBB0_2
\tretq
"""


def test_count_and_hot_loop(gemm_cpu):
    ops = gemm_cpu.count_fp_ops(_ASM)
    assert ops["fma"] == {"scalar": 1, "xmm": 1, "ymm": 1, "zmm": 1}
    assert ops["mul"]["xmm"] == 1 and ops["add"]["zmm"] == 1
    loop = gemm_cpu.hot_loop(_ASM)
    assert loop.startswith(".LBB0_1:") and loop.rstrip().endswith(".LBB0_1")
    assert gemm_cpu.count_fma(loop) == {"scalar": 1, "xmm": 0, "ymm": 1, "zmm": 1}
    assert gemm_cpu.hot_loop("no loops here") == ""


def test_asm_of_v2_has_vector_fmas(gemm_cpu):
    """v2's inner loop is vectorised into FMAs by LLVM (Numba's default profile)."""
    from kernellab.machine import cpu_info

    if cpu_info().isa not in ("AVX2", "AVX-512"):
        pytest.skip("needs an x86 CPU with FMA")
    report = gemm_cpu.asm_report(gemm_cpu.gemm_v2, np.float32)
    fma = report["fma_hot"]
    assert report["hot_loop"]
    assert fma["xmm"] + fma["ymm"] + fma["zmm"] > 0, report["hot_loop"]


def test_micro_kernel_source_is_plain_python(gemm_cpu):
    src = gemm_cpu.micro_kernel_source(np.float32)
    p = gemm_cpu.BLOCKING[np.dtype(np.float32)]
    assert src.startswith("def uk(kc, Ap, aoff, Bp, boff, T):")
    assert src.count(" += a") == p.mr * p.nr
    compile(src, "<uk>", "exec")


# ----------------------------------------------------------------------------------------------
# The fast_gemm profile, in subprocesses
# ----------------------------------------------------------------------------------------------

def _child(code: str, profile: str | None = "fast_gemm", timeout=600):
    env = codegen.env(profile) if profile else dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_ladder_correct_fast_profile():
    code = (
        "import json, sys\n"
        "sys.argv = ['x']\n"
        "import kernellab\n"
        "from kernellab import codegen\n"
        "codegen.apply('fast_gemm')\n"
        "sys.path.insert(0, 'tests/test_kernellab/kernels')\n"
        "import test_gemm_cpu_ladder as t\n"
        "records = t.run_all(threads=(1, 2))\n"
        "print(json.dumps({'profile': codegen.active(), 'records': records}))\n"
    )
    proc = _child(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["profile"] == "fast_gemm"
    bad = [r for r in out["records"] if not r["ok"]]
    assert not bad, bad[:5]
    assert len(out["records"]) >= 5 * len(SMALL) * len(DTYPES)


def test_apply_after_njit_is_too_late():
    code = (
        "import numba\n"
        "f = numba.njit(lambda x: x + 1)\n"
        "from kernellab import codegen\n"
        "try:\n"
        "    codegen.apply('fast_gemm')\n"
        "except RuntimeError as e:\n"
        "    print('too late:', e)\n"
        "else:\n"
        "    print('applied')\n"
    )
    proc = _child(code, profile=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "too late:" in proc.stdout


def test_apply_after_import_numba_reloads_config():
    code = (
        "import numba\n"
        "from numba.core import config\n"
        "from kernellab import codegen\n"
        "assert codegen.active() == 'default', codegen.in_effect()\n"
        "codegen.apply('fast_gemm')\n"
        "assert config.SLP_VECTORIZE == 1 and config.CPU_FEATURES == "
        "codegen.FAST_GEMM['NUMBA_CPU_FEATURES']\n"
        "assert config.CACHE_DIR == codegen.cache_dir('fast_gemm')\n"
        "f = numba.njit(lambda x: x + 1); f(1)\n"
        "codegen.apply('fast_gemm')  # idempotent\n"
        "print(codegen.active())\n"
    )
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env_free["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_free,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "fast_gemm"


def test_profiles_have_separate_cache_dirs():
    assert codegen.cache_dir("fast_gemm") != codegen.cache_dir("default")
    assert codegen.FAST_GEMM["NUMBA_SLP_VECTORIZE"] == "1"
    with pytest.raises(ValueError):
        codegen.settings("turbo")


# a manual run: python tests/test_kernellab/kernels/test_gemm_cpu_ladder.py
if __name__ == "__main__":  # pragma: no cover
    records = run_all(threads=(1, 2))
    bad = [r for r in records if not r["ok"]]
    print(f"{len(records) - len(bad)} / {len(records)} cases ok")
    sys.exit(1 if bad else 0)
