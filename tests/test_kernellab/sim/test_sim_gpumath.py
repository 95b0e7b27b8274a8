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
    with np.errstate(all="ignore"):
        ref = np.stack([np.exp(x), np.log(x), np.sqrt(x), np.exp(x), np.sqrt(x), x * x])
    np.testing.assert_array_equal(y, ref.astype(np.float32))
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
    np.testing.assert_array_equal(y, (np.exp(x) - np.float32(1.0)).astype(np.float32))


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
