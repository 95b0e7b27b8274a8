"""The compiled path (:mod:`kernellab.sim.compiled`) against the greenlet executor: same
results, counters and per-array figures; the path and the reason for a greenlet run are
reported in ``LaunchStats``; a fault on the compiled path is explained by the greenlet re-run."""

import kernellab  # noqa: F401  - first: selects the sim tier
import numpy as np
import pytest
from numba import cuda, float32

from kernellab import sim
from kernellab.kernels import gemm_cuda
from kernellab.sim.errors import OutOfBoundsError

@cuda.jit
def _block_sum(x, out):
    s = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]

@cuda.jit
def _oob(x, out):
    i = cuda.grid(1)
    out[i] = x[i + 1]          # the last thread reads past x

def _run(how, fn):
    with sim.capture(gpu_compile=False, compiled=how) as cap:
        out = fn()
    return out, cap.launches[-1]

def _gemm():
    n = 48
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    grid, block = gemm_cuda.launch_config("v3_shared_tiles", n, n, n)
    gemm_cuda.KERNELS["v3_shared_tiles"][grid, block](A, B, C)
    return C

def _reduce():
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    out = np.full(4, np.nan, np.float32)
    _block_sum[4, 256](x, out)
    return out

@cuda.jit
def _four_d(x, out):
    b, h, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    plane = x[b, h]                       # a view: its elements are logged through x
    out[b, h, t, 0] = plane[t, 1] * float32(2) + x[b, h, t, 0]
    out[b, h, t, 1] = x[b, h, 31 - t, 1]

def _four():
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 2)).astype(np.float32)
    out = np.full_like(x, np.nan)
    _four_d[(2, 3), 32](x, out)
    return out

@pytest.mark.parametrize("fn", [_gemm, _reduce, _four],
                         ids=["tiled_gemm", "block_reduce", "four_d_and_views"])
def test_compiled_matches_greenlet(fn):
    got, s1 = _run("always", fn)
    want, s2 = _run("off", fn)
    assert s1.path == "compiled", s1.path_note
    assert s2.path == "greenlet" and "off" in s2.path_note
    assert np.array_equal(got, want, equal_nan=True)
    assert s1.counters == s2.counters
    assert s1.arrays == s2.arrays
    assert s1.block_max == s2.block_max

def test_fault_on_the_compiled_path_is_named_by_the_greenlet_rerun():
    x = np.zeros(64, np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(OutOfBoundsError) as err:
        with sim.capture(gpu_compile=False, compiled="always"):
            _oob[2, 32](x, out)
    assert "tid=(31, 0, 0) ctaid=(1, 0, 0)" in str(err.value)

def test_unsupported_kernel_reports_why():
    @cuda.jit
    def k(x):
        i = cuda.grid(1)
        cuda.atomic.add(x, 0, 1.0)
        x[i + 1] = 0.0

    x = np.zeros(65, np.float32)
    with sim.capture(gpu_compile=False, compiled="always") as cap:
        k[2, 32](x)
    s = cap.launches[-1]
    assert s.path == "greenlet" and "cuda.atomic" in s.path_note
