"""Chapter 3's softmax ladder (kernellab.kernels.softmax_cuda): correct where it should be, the
naive version overflowing where it must, masked rows as zeros, the harness's argument checks,
and the DRAM traffic per element each version claims (sim tier counters)."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab
from kernellab.kernels import softmax_cuda as sm
from kernellab.numerics import RowSoftmax, compare
from reference_kernels.reductions import (
    softmax_golden, softmax_shift, softmax_three_pass_traffic,
)

SHAPES = [(1, 1), (2, 31), (3, 33), (2, 257), (1, 1000)]


def _check(f, X):
    Y = np.full_like(X, np.nan)
    f(X, Y)
    pol = RowSoftmax(N=X.shape[1], acc_dtype="float32", out_dtype=X.dtype.name,
                     shift=softmax_shift(X))
    return compare(Y, softmax_golden(X), pol, tile=None), Y


@pytest.mark.parametrize("name", list(sm.LADDER))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_version_is_correct_on_moderate_rows(name, dtype, shape):
    X = (3 * np.random.default_rng(hash(shape) % 1000).standard_normal(shape)).astype(dtype)
    X0 = X.copy()
    res, _ = _check(sm.LADDER[name], X)
    assert res.ok, res.message
    assert res.budget_used <= 0.5 + 1e-9, res.budget_used     # kernellab.numerics' margin rule
    assert np.array_equal(X, X0)


def test_naive_overflows_where_the_safe_versions_do_not():
    X = np.random.default_rng(1).uniform(-1e4, 1e4, size=(2, 100)).astype(np.float32)
    res, Y = _check(sm.softmax_v1, X)
    assert not res.ok and np.isnan(Y).any()
    for f in (sm.softmax_v2, sm.softmax_v3):
        assert _check(f, X)[0].ok


@pytest.mark.parametrize("f", [sm.softmax_v2, sm.softmax_v3])
def test_masked_entries_and_fully_masked_rows(f):
    X = (3 * np.random.default_rng(2).standard_normal((3, 300))).astype(np.float32)
    X[0, ::3] = -np.inf
    X[2] = -np.inf
    res, Y = _check(f, X)
    assert res.ok, res.message
    assert (Y[0, ::3] == 0).all() and (Y[2] == 0).all()


@pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
def test_dram_traffic_per_element_matches_the_ladder():
    from numba import cuda

    from kernellab import sim

    M, N = 4, 512
    dX = cuda.to_device(np.random.default_rng(3).standard_normal((M, N)).astype(np.float32))
    x_bytes = 4 * M * N
    got = {}
    for name, f in sm.LADDER.items():
        with sim.capture() as cap:
            f(dX, cuda.to_device(np.zeros((M, N), np.float32)))
        t = cap.total()
        got[name] = (len(cap.launches), t["dram_read_bytes"], t["dram_write_bytes"])
        acc = sm.accesses_per_element(name)
        # loads beyond the first come from L2 within a launch: DRAM reads X once per launch
        # that reads it
        assert t["global_load_elements"] >= acc["loads"] * M * N
        assert t["global_store_elements"] >= acc["stores"] * M * N
    assert got["v1_naive"] == (1, x_bytes, x_bytes)
    assert got["v3_online"] == (1, x_bytes, x_bytes)
    # v2: X three times, Y once; m (M floats: one 32-byte sector here) written by the first
    # launch and read by the other two, d written by the second and read by the third
    assert got["v2_three_pass"] == (3, 3 * x_bytes + 3 * 32, x_bytes + 2 * 32)
    traffic = softmax_three_pass_traffic(M, N, 4)
    assert traffic["three_pass"] == 4 * x_bytes + 4 * 4 * M          # exact statistics bytes
    assert traffic["fused"] == 2 * x_bytes and traffic["online"] == 3 * x_bytes


def test_harness_rejects_bad_arguments():
    X = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="2-D"):
        sm.softmax_v3(np.zeros(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="float32 or float16"):
        sm.softmax_v3(X.astype(np.float64), X.astype(np.float64))
    with pytest.raises(ValueError, match="match"):
        sm.softmax_v3(X, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="N >= 1"):
        sm.softmax_v3(np.zeros((2, 0), np.float32), np.zeros((2, 0), np.float32))
    with pytest.raises(TypeError):
        sm.softmax_v3([[1.0]], np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        sm.softmax_v3(X, X)
    sm.softmax_v3(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))   # no rows: no-op
