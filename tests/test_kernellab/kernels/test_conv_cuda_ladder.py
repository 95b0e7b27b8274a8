"""Chapter 4's CUDA kernels (kernellab.kernels.conv_cuda) on the sim tier: correct against the
float64 golden on small and odd shapes under the bounds of
tests/test_kernellab/kernels/test_conv_cpu_ladder.py, the
harness's argument checks, and the traffic the chapter's section 6 describes: the non-fused
Winograd writes its workspaces V and M to DRAM and reads them back."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab
from kernellab import numerics
from kernellab.topics import winograd
from kernellab.kernels import conv_cpu
from kernellab.kernels import conv_cuda as cc
from reference_kernels.conv import conv2d_abs, conv2d_golden

SHAPES = [(1, 1, 1, 1, 1), (2, 1, 5, 7, 3), (1, 3, 2, 3, 2), (1, 2, 7, 1, 2), (1, 17, 3, 4, 18)]


def policy(name, X, Wt):
    C = X.shape[1]
    if name == "v2_winograd_nonfused":
        return numerics.KAware(K=conv_cpu.winograd_rounding_depth(2, C), acc_dtype="float32",
                               out_dtype="float32", abs_product=winograd.abs_bound(X, Wt, 2))
    return numerics.KAware(K=9 * C, acc_dtype="float32", out_dtype="float32",
                           abs_product=conv2d_abs(X, Wt))


def inputs(shape, seed=0):
    N, C, H, W, K = shape
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, C, H, W)).astype(np.float32),
            rng.standard_normal((K, C, 3, 3)).astype(np.float32))


@pytest.mark.parametrize("name", list(cc.LADDER))
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_every_version_matches_the_golden(name, shape):
    X, Wt = inputs(shape, seed=sum(shape))
    X0, W0 = X.copy(), Wt.copy()
    Y = np.full((shape[0], shape[4], shape[2], shape[3]), np.nan, np.float32)
    cc.LADDER[name](X, Wt, Y)
    res = numerics.compare(Y, conv2d_golden(X, Wt), policy(name, X, Wt), tile=None)
    assert res.ok, res.message
    assert res.budget_used <= 0.5
    assert np.array_equal(X, X0) and np.array_equal(Wt, W0)


def test_device_arrays_are_used_as_they_are():
    from numba import cuda

    X, Wt = inputs((1, 2, 4, 5, 3), seed=1)
    dY = cuda.to_device(np.full((1, 3, 4, 5), np.nan, np.float32))
    cc.conv_v2(cuda.to_device(X), cuda.to_device(Wt), dY)
    assert numerics.compare(dY.copy_to_host(), conv2d_golden(X, Wt),
                            policy("v2_winograd_nonfused", X, Wt), tile=None).ok


@pytest.mark.parametrize("name", list(cc.LADDER))
def test_argument_errors(name):
    f = cc.LADDER[name]
    X, Wt = inputs((1, 2, 4, 4, 3))
    Y = np.empty((1, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="4-D"):
        f(X[0], Wt, Y)
    with pytest.raises(ValueError, match="float32"):
        f(X.astype(np.float64), Wt, Y)
    with pytest.raises(ValueError, match=r"\(K, C=2, 3, 3\)"):
        f(X, Wt[:, :1], Y)
    with pytest.raises(ValueError, match=r"\(K, C=2, 3, 3\)"):
        f(X, np.zeros((3, 2, 5, 5), np.float32), Y)
    with pytest.raises(ValueError, match="expected"):
        f(X, Wt, Y[:, :2])
    with pytest.raises(TypeError, match="numpy array"):
        f(X, Wt, Y.tolist())
    Y.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(X, Wt, Y)


@pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
def test_nonfused_winograd_moves_its_workspaces_through_dram():
    from kernellab import sim

    N, C, K, H = 1, 4, 4, 8
    X, Wt = inputs((N, C, H, H, K), seed=2)
    caps = {}
    for name, f in cc.LADDER.items():
        with sim.capture() as cap:
            f(X, Wt, np.empty((N, K, H, H), np.float32))
        caps[name] = cap
    direct = caps["v1_direct"].launches
    assert [s.name for s in direct] == ["direct_kernel"]
    c = direct[0].counters
    # X, Wt read once and Y written once from DRAM (perfect L2 within a launch)
    assert c["dram_read_bytes"] == X.nbytes + Wt.nbytes
    assert c["dram_write_bytes"] == N * K * H * H * 4
    wino = {s.name: s.counters for s in caps["v2_winograd_nonfused"].launches}
    assert list(wino) == ["filter_transform_kernel", "input_transform_kernel",
                          "batched_gemm_kernel", "output_transform_kernel"]
    ws = cc.workspace_bytes(N, C, K, H, H)
    assert ws["V"] == 4 * ws["input"]                         # 16 floats per 2x2 tile
    assert wino["input_transform_kernel"]["dram_write_bytes"] == ws["V"]
    assert wino["batched_gemm_kernel"]["dram_read_bytes"] == ws["U"] + ws["V"]
    assert wino["batched_gemm_kernel"]["dram_write_bytes"] == ws["M"]
    assert wino["output_transform_kernel"]["dram_read_bytes"] == ws["M"]
    total = caps["v2_winograd_nonfused"].total()
    assert total["dram_read_bytes"] + total["dram_write_bytes"] > \
        4 * (c["dram_read_bytes"] + c["dram_write_bytes"])
