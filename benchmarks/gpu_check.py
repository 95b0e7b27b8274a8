"""GPU check (``make gpu-check``): run on a machine with an NVIDIA GPU and numba-cuda, numpy
(and optionally cupy) already installed; it installs nothing and takes the project from the
source tree (PYTHONPATH). It checks, in about a minute:

1. the tier is ``gpu`` (the driver probe and numba-cuda agree) and prints the doctor's facts;
2. a vector add and a naive GEMM kernel in numba-cuda compile, run and match the float64
   golden reference under kernellab's tolerances;
3. CUDA-event timing works (kernellab.timing with clock="cuda"): the GEMM's median time and
   GFLOP/s, and cupy's matmul on the same inputs when cupy is installed.

Exit status 0 when every check passes.
"""

from __future__ import annotations

import sys

import kernellab  # first: tier and thread settings


def main() -> int:
    import numba
    import numpy as np
    from numba import cuda

    from kernellab import doctor, numerics, timing
    from reference_kernels.gemm import gemm_abs_product, gemm_golden

    facts = doctor.collect()
    print(doctor.render(facts))
    if kernellab.TIER != "gpu" or facts["simulator_active"]:
        print("FAIL: not on the gpu tier")
        return 1

    @cuda.jit
    def vadd(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def gemm_naive(A, B, C):
        i, j = cuda.grid(2)
        if i < C.shape[0] and j < C.shape[1]:
            acc = numba.float32(0)  # accumulate in fp32, as the kernel claims
            for k in range(A.shape[1]):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc

    ok = True
    rng = np.random.default_rng(0)
    n = 1 << 20
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    d_out = cuda.device_array(n, np.float32)
    vadd[(n + 255) // 256, 256](cuda.to_device(a), cuda.to_device(b), d_out)
    res = numerics.compare(d_out.copy_to_host(), a.astype(np.float64) + b,
                           numerics.Elementwise("float32"))
    print(f"vector add:  {'ok' if res.ok else 'FAIL'} — {res.message}")
    ok &= res.ok

    for (M, N, K) in [(33, 65, 127), (1024, 1024, 1024)]:
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        dA, dB = cuda.to_device(A), cuda.to_device(B)
        dC = cuda.device_array((M, N), np.float32)
        grid = ((M + 15) // 16, (N + 15) // 16)

        def run():
            gemm_naive[grid, (16, 16)](dA, dB, dC)

        run()
        cuda.synchronize()
        res = numerics.compare(dC.copy_to_host(), gemm_golden(A, B),
                               numerics.KAware(K, "float32", "float32", gemm_abs_product(A, B)))
        print(f"naive GEMM {M}x{N}x{K}: {'ok' if res.ok else 'FAIL'} — {res.message}")
        ok &= res.ok
    t = timing.time_fn(run, warmup=2, repeats=10, clock="cuda", name="gemm_naive")
    print(f"naive GEMM 1024^3: median {t.median * 1e3:.3f} ms (IQR/median {t.spread:.2%}), "
          f"{2 * 1024**3 / t.median / 1e9:.1f} GFLOP/s by CUDA events")
    ok &= 0 < t.median < 10
    try:
        import cupy as cp
    except ImportError:
        print("cupy: not installed (pip install -e '.[gpu]')")
    else:
        cA, cB = cp.asarray(A), cp.asarray(B)
        tc = timing.time_fn(lambda: cp.matmul(cA, cB), warmup=2, repeats=10, clock="cuda")
        print(f"cupy.matmul 1024^3: median {tc.median * 1e3:.3f} ms, "
              f"{2 * 1024**3 / tc.median / 1e9:.1f} GFLOP/s; naive = "
              f"{tc.median / t.median:.1%} of cuBLAS")
    print("gpu-check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
