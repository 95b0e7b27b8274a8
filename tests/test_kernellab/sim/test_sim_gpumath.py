"""The sim tier's ``math`` (kernellab.sim.gpumath) answers like a GPU: float32 stays float32,
overflow gives inf and a domain error NaN instead of Python's exceptions; and the per-lane
element counters of shared memory (active lanes per warp request)."""

from __future__ import annotations

import math
from math import exp as bare_exp, sqrt as bare_sqrt

import numpy as np
import pytest

import kernellab  # noqa: F401  (selects the sim tier before numba.cuda is imported)
from numba import cuda, float32

if kernellab.TIER != "sim":  # pragma: no cover - on a GPU these semantics are the hardware's
    pytest.skip("sim-tier engine tests", allow_module_level=True)

from kernellab import sim  # noqa: E402


@cuda.jit
def _math_kernel(x, y, kinds):
    i = cuda.grid(1)
    if i < x.size:
        v = float32(x[i])
        y[0, i] = math.exp(v)
        y[1, i] = math.log(v)
        y[2, i] = math.sqrt(v)
        y[3, i] = bare_exp(v)
        y[4, i] = bare_sqrt(v)
        y[5, i] = math.pow(v, float32(2.0))
        if i == 0:
            kinds[0] = 1 if isinstance(math.exp(v), np.float32) else 0
            kinds[1] = 1 if isinstance(math.exp(x.size * 1.0), np.float64) else 0


def test_math_overflow_and_domain_like_a_gpu():
    x = np.array([1.0, 100.0, 1e4, -1.0, 0.0], np.float32)
    y = np.full((6, x.size), -7.0, np.float32)
    kinds = np.zeros(2, np.int32)
    _math_kernel[1, 32](x, y, kinds)
    with np.errstate(all="ignore"):             # float64 results rounded once to float32
        x64 = x.astype(np.float64)
        ref = np.stack([np.exp(x64), np.log(x64), np.sqrt(x64), np.exp(x64), np.sqrt(x64),
                        x64 * x64]).astype(np.float32)
    np.testing.assert_array_equal(y, ref)
    assert np.isinf(y[0, 1]) and np.isinf(y[0, 2])          # expf overflow -> inf
    assert np.isnan(y[1, 3]) and y[1, 4] == -np.inf         # logf(-1) NaN, logf(0) -inf
    assert kinds.tolist() == [1, 1]                        # float32 in -> float32 out
    # the swap is undone after the launch
    assert math.exp is not None and _math_kernel.py_func.__globals__["math"] is math
    assert _math_kernel.py_func.__globals__["bare_exp"] is math.exp


def test_float32_exp_rounds_like_float32():
    @cuda.jit
    def k(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = math.exp(float32(x[i])) - float32(1.0)   # float32 arithmetic throughout

    x = np.array([1e-4, 0.5, 3.0], np.float32)
    y = np.zeros(3, np.float32)
    k[1, 32](x, y)
    e = np.exp(x.astype(np.float64)).astype(np.float32)      # expf: float64 exp, rounded once
    np.testing.assert_array_equal(y, e - np.float32(1.0))


@cuda.jit
def _every_math(x, y):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        w = x[x.size - 1 - i]
        y[0, i] = math.exp(v)
        y[1, i] = math.log(v)
        y[2, i] = math.sqrt(v)
        y[3, i] = math.sin(v)
        y[4, i] = math.tanh(v)
        y[5, i] = math.log1p(v)
        y[6, i] = math.expm1(v)
        y[7, i] = math.pow(v, w)
        y[8, i] = math.atan2(v, w)
        y[9, i] = bare_exp(v)


@pytest.mark.parametrize("path", ["off", "always"])
def test_math_is_the_same_on_both_paths_bit_for_bit(path):
    """The compiled path (kernellab.sim.compiled_math) and the greenlet path give one value."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(0, 4, 2000), [0.0, -0.0, -1.0, 1e4, -1e4, 89.0, 1e-40]])
    x = x.astype(np.float32)
    y = np.zeros((10, x.size), np.float32)
    with sim.capture(gpu_compile=False, compiled=path) as cap:
        _every_math[(x.size + 63) // 64, 64](x, y)
    (name, ran_on, why), = cap.paths()
    assert name == "_every_math" and ran_on == ("greenlet" if path == "off" else "compiled"), why
    x64, w64 = x.astype(np.float64), x[::-1].astype(np.float64)
    with np.errstate(all="ignore"):
        ref = np.stack([fn(x64) for fn in (np.exp, np.log, np.sqrt, np.sin, np.tanh, np.log1p,
                                           np.expm1)]
                       + [np.power(x64, w64), np.arctan2(x64, w64), np.exp(x64)]
                       ).astype(np.float32)
    # numpy's float64 functions and the C library's may differ in a float64 ulp, which the
    # rounding to float32 hides but in rare cases: compare the two paths exactly, numpy loosely
    np.testing.assert_allclose(y, ref, rtol=2 ** -23, atol=0)
    if path == "always":
        z = np.zeros_like(y)
        with sim.capture(gpu_compile=False, compiled="off"):
            _every_math[(x.size + 63) // 64, 64](x, z)
        np.testing.assert_array_equal(y, z)


@cuda.jit
def _half_lanes(x, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncthreads()
    if t % 2 == 0:                     # half of each warp's lanes read
        out[t] = s[t] + s[t + 1]


def test_shared_elements_count_active_lanes():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    with sim.capture() as cap:
        _half_lanes[1, 64](x, out)
    c = cap.launches[0].counters
    assert c["shared_store_requests"] == 2 and c["shared_store_elements"] == 64
    assert c["shared_load_requests"] == 4 and c["shared_load_elements"] == 64
    # 16 active lanes of 32 per load request: the divergence shows as elements / requests
    assert c["shared_load_elements"] / c["shared_load_requests"] == 16
