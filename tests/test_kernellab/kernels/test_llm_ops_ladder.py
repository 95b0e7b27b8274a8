"""Chapter 8's BF16 kernels (kernellab.kernels.llm_ops, llm_rope) against the float64 golden
references of reference_kernels.llm_ops, on the sim tier.

Tolerances are derived in the kernels' docstrings (add_rmsnorm_tolerance, rope_tolerance,
swiglu_tolerance): float32 arithmetic counted in units of u_fp32, the sqrt(N) growth of the
sum of squares (c = 6, Higham & Mary 2019, as norms_cuda), and each bf16 store allowed one ulp
(2 u_bf16: faithful rounding; a correctly rounded store uses half, the margin rule of
kernellab.numerics, asserted here as budget_used < 0.5). Exact where the arithmetic is the
same: the stored residual against the host's float32 add rounded by ml_dtypes, v1 against v2,
fused SwiGLU against the unfused composition, RoPE's untouched features and V heads.

Every output starts as NaN, inputs must come back unchanged, and strided cases check that the
gaps between the rows are not written. Sizes are small (the simulator interprets every thread:
BF16 kernels run on its greenlet path, Numba's CPU compiler has no scalar ``view``): ~15 s.
"""

from __future__ import annotations

import numpy as np
import pytest

import kernellab  # noqa: F401  (selects the gpu/sim tier before numba.cuda is imported)
from kernellab.bf16 import BF16
from kernellab.kernels import llm_ops, llm_rope
from kernellab.numerics import compare, unit_roundoff
from reference_kernels.llm_ops import fused_add_rmsnorm_golden, rope_qkv_golden, swiglu_golden

SIM = kernellab.TIER == "sim"


def bf16(shape, seed, scale=1.0, shift=0.0):
    return (shift + scale * np.random.default_rng(seed).standard_normal(shape)).astype(BF16)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


# ----------------------------------------------------------------------------------------------
# Fused add + RMSNorm
# ----------------------------------------------------------------------------------------------

#: (R, N, row layout): every other row of a wider buffer, and the first N columns of a wider one
ADD_CASES = {"769_every_other_row": (3, 769, "rows"), "5125_wider_rows": (2, 5125, "cols")}


def _strided(R, N, how, seed, fill=None):
    """A (R, N) bf16 view into a larger buffer (returned too, to check its gaps)."""
    if how == "rows":
        buf = bf16((2 * R, N + 7), seed) if fill is None else np.full((2 * R, N + 7), fill, BF16)
        return buf, buf[::2, 3:N + 3]
    buf = bf16((R, N + 75), seed) if fill is None else np.full((R, N + 75), fill, BF16)
    return buf, buf[:, :N]


@pytest.fixture(scope="module", params=list(ADD_CASES))
def add_case(request):
    R, N, how = ADD_CASES[request.param]
    xbuf, x = _strided(R, N, how, 1)
    res0 = bf16((R, N), 2, scale=2.0)
    w = bf16(N, 3, scale=0.3, shift=1.0)
    runs = {}
    for v in llm_ops.ADD_RMSNORM:
        xb = xbuf.copy()
        rbuf, res = _strided(R, N, how, 0)
        res[...] = res0
        obuf, out = _strided(R, N, how, 0, fill=np.nan)
        gaps = (bits(rbuf).copy(), bits(obuf).copy())
        llm_ops.fused_add_rmsnorm(xb[::2, 3:N + 3] if how == "rows" else xb[:, :N], res, w, out,
                                  version=v)
        runs[v] = dict(xbuf=xb, rbuf=rbuf, obuf=obuf, res=res.copy(), out=out.copy(), gaps=gaps)
    return dict(R=R, N=N, how=how, xbuf=xbuf, x=x, res0=res0, w=w, runs=runs)


def test_add_rmsnorm_against_the_golden(add_case):
    c = add_case
    ref_out, ref_h = fused_add_rmsnorm_golden(c["x"], c["res0"], c["w"])
    pol_h, pol_out = llm_ops.add_rmsnorm_tolerance(c["x"], c["res0"], c["w"])
    host_h = (c["x"].astype(np.float32) + c["res0"].astype(np.float32)).astype(BF16)
    for v, run in c["runs"].items():
        np.testing.assert_array_equal(bits(run["res"]), bits(host_h), err_msg=v)  # exact h
        for got, ref, pol in ((run["res"], ref_h, pol_h), (run["out"], ref_out, pol_out)):
            cmp = compare(got, ref, pol)
            assert cmp.ok and cmp.budget_used < 0.5, (v, cmp.message)
        np.testing.assert_array_equal(bits(run["xbuf"]), bits(c["xbuf"]))        # x unchanged


def test_add_rmsnorm_versions_agree_bitwise_and_leave_the_gaps(add_case):
    runs = add_case["runs"]
    np.testing.assert_array_equal(bits(runs["v1_unfused"]["out"]), bits(runs["v2_fused"]["out"]))
    N, how = add_case["N"], add_case["how"]
    for run in runs.values():
        for buf, before in zip((run["rbuf"], run["obuf"]), run["gaps"]):
            mask = np.ones(buf.shape, bool)
            (mask[::2, 3:N + 3] if how == "rows" else mask[:, :N])[...] = False
            np.testing.assert_array_equal(bits(buf)[mask], before[mask])


@pytest.mark.parametrize("version", list(llm_ops.ADD_RMSNORM))
def test_add_rmsnorm_in_place_over_x(version):
    """out=None writes the result over x (vLLM's form) and the residual in place."""
    x, res, w = bf16((2, 100), 4), bf16((2, 100), 5), bf16(100, 6, 0.2, 1.0)
    ref_out, ref_h = fused_add_rmsnorm_golden(x, res, w)
    pol_h, pol_out = llm_ops.add_rmsnorm_tolerance(x, res, w)
    x2, r2 = x.copy(), res.copy()
    if version == "v1_unfused":           # the uint16 bits are accepted as well
        llm_ops.fused_add_rmsnorm(bits(x2), bits(r2), bits(w), None, version=version)
    else:
        llm_ops.fused_add_rmsnorm(x2, r2, w, None, version=version)
    assert compare(r2, ref_h, pol_h).ok
    assert compare(x2, ref_out, pol_out).ok


def test_device_arrays_are_used_in_place():
    """numba device arrays (uint16, C-contiguous) are written where they are."""
    from numba import cuda

    x, res, w = bf16((2, 64), 7), bf16((2, 64), 8), bf16(64, 9, 0.2, 1.0)
    dx, dr = cuda.to_device(bits(x)), cuda.to_device(bits(res))
    dy = cuda.to_device(np.zeros((2, 64), np.uint16))
    llm_ops.fused_add_rmsnorm(dx, dr, cuda.to_device(bits(w)), dy)
    want_y, want_r = np.full((2, 64), np.nan, BF16), res.copy()
    llm_ops.fused_add_rmsnorm(x, want_r, w, want_y)
    np.testing.assert_array_equal(dy.copy_to_host(), bits(want_y))
    np.testing.assert_array_equal(dr.copy_to_host(), bits(want_r))
    gu = bf16((2, 96), 10)
    ds = cuda.to_device(np.zeros((2, 48), np.uint16))
    llm_ops.swiglu(cuda.to_device(bits(gu)), None, ds)
    want_s = np.full((2, 48), np.nan, BF16)
    llm_ops.swiglu(gu, None, want_s)
    np.testing.assert_array_equal(ds.copy_to_host(), bits(want_s))
    qkv = bf16((2, (HQ + 2 * HKV) * D), 11)
    dq = cuda.to_device(bits(qkv))
    pos = np.array([3, 8000], np.int32)
    cs = llm_rope.rope_cos_sin_cache(8192, 32)
    llm_rope.rope_qkv(dq, cuda.to_device(pos), cuda.to_device(cs), HQ, HKV, D, "gptj")
    llm_rope.rope_qkv(qkv, pos, cs, HQ, HKV, D, "gptj")
    np.testing.assert_array_equal(dq.copy_to_host(), bits(qkv))


def test_fusion_saves_one_read_of_h_counted_by_the_sim():
    """DRAM bytes from the sim's counters equal the rows each version must move: v1 reads x,
    residual (add) and h again (RMSNorm) and writes h and out; v2 one read of h less."""
    if not SIM:
        pytest.skip("the traffic is read from the sim tier's counters")
    R, N = 2, 1024
    t = llm_ops.add_rmsnorm_traffic(R, N, row_stride=1040)
    row, w = 2 * N, 2 * N
    keys = ("launches", "dram_read_bytes", "dram_write_bytes", "dram_bytes")
    assert [t["v1_unfused"][k] for k in keys] == [2, 3 * R * row + w, 2 * R * row,
                                                  5 * R * row + w]
    assert [t["v2_fused"][k] for k in keys] == [1, 2 * R * row + w, 2 * R * row, 4 * R * row + w]
    assert t["v2_fused"]["kernel_seconds"] < t["v1_unfused"]["kernel_seconds"]


def test_add_rmsnorm_errors():
    x, res, w, out = bf16((2, 8), 0), bf16((2, 8), 1), bf16(8, 2), bf16((2, 8), 3)
    with pytest.raises(ValueError, match="shape"):
        llm_ops.fused_add_rmsnorm(x, res[:, :7], w, out)
    with pytest.raises(ValueError, match="weight"):
        llm_ops.fused_add_rmsnorm(x, res, w[:7], out)
    with pytest.raises(TypeError, match="dtype"):
        llm_ops.fused_add_rmsnorm(x.astype(np.float32), res, w, out)
    with pytest.raises(ValueError, match="overlap"):
        llm_ops.fused_add_rmsnorm(x, res, w, res)
    ro = res.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        llm_ops.fused_add_rmsnorm(x, ro, w, out)
    with pytest.raises(ValueError, match="contiguous"):
        llm_ops.fused_add_rmsnorm(bf16((2, 16), 0)[:, ::2], res, w, out)
    with pytest.raises(ValueError, match="eps"):
        llm_ops.fused_add_rmsnorm(x, res, w, out, eps=0.0)
    with pytest.raises(ValueError, match="version"):
        llm_ops.fused_add_rmsnorm(x, res, w, out, version="v3")


# ----------------------------------------------------------------------------------------------
# RoPE
# ----------------------------------------------------------------------------------------------

HQ, HKV, D = 4, 2, 64
POSITIONS = np.array([0, 1, 300, 4097, 8191], np.int32)


@pytest.fixture(scope="module")
def caches():
    return {rd: llm_rope.rope_cos_sin_cache(8192, rd) for rd in (64, 24)}


@pytest.mark.parametrize("rd", [64, 24])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_rope_on_q_and_k_of_a_strided_qkv(layout, rd, caches):
    W = (HQ + 2 * HKV) * D
    buf = bf16((2 * len(POSITIONS), W + 32), 10 + rd, scale=3.0)
    before = buf.copy()
    qkv = buf[1::2, 16:W + 16]                      # every other row, offset into a wider row
    q0 = qkv.copy()
    llm_rope.rope_qkv(qkv, POSITIONS, caches[rd], HQ, HKV, D, layout)
    ref = rope_qkv_golden(q0, POSITIONS, HQ, HKV, D, rd, layout)
    pol = llm_rope.rope_tolerance(q0, POSITIONS, HQ, HKV, D, rd, layout)
    cmp = compare(qkv, ref, pol)                    # V and unrotated features: bound 0 (exact)
    assert cmp.ok and cmp.budget_used < 0.5, cmp.message
    mask = np.ones(buf.shape, bool)
    mask[1::2, 16:W + 16] = False
    np.testing.assert_array_equal(bits(buf)[mask], bits(before)[mask])
    other = "gptj" if layout == "neox" else "neox"  # the other pairing is caught
    assert not compare(qkv, rope_qkv_golden(q0, POSITIONS, HQ, HKV, D, rd, other), pol).ok


def test_rope_errors(caches):
    qkv, cs = bf16((2, (HQ + 2 * HKV) * D), 0), caches[64]
    pos = np.array([0, 8192], np.int32)
    with pytest.raises(ValueError, match=r"\[0, 8192\)"):
        llm_rope.rope_qkv(qkv, pos, cs, HQ, HKV, D)
    with pytest.raises(ValueError, match="columns"):
        llm_rope.rope_qkv(qkv, pos[:1].repeat(2), cs, HQ, HKV + 1, D)
    with pytest.raises(ValueError, match="rotary_dim"):
        llm_rope.rope_qkv(qkv, pos[:1].repeat(2), cs[:, :63], HQ, HKV, D)
    with pytest.raises(ValueError, match="layout"):
        llm_rope.rope_qkv(qkv, pos[:1].repeat(2), cs, HQ, HKV, D, "llama")
    with pytest.raises(TypeError, match="int32"):
        llm_rope.rope_qkv(qkv, np.zeros(2), cs, HQ, HKV, D)
    with pytest.raises(ValueError, match="float32"):
        llm_rope.rope_qkv(qkv, pos[:1].repeat(2), cs.astype(np.float64), HQ, HKV, D)


def test_angle_error_float32_vs_bf16():
    """float32 angles: the frequency and the product each rounded once, |err| <= 2 u32 m
    (to first order; 2.01 allows the second-order term). BF16: position 8191 itself rounds to
    8192 (one bf16 ulp is 32 in [4096, 8192)), so the i = 0 angle is already 1 rad off, and
    cos/sin are wrong by O(1) at long positions."""
    pos = np.array([1, 255, 257, 1000, 4096, 8191])
    e = llm_rope.rope_angle_error(pos, 128)
    u32 = unit_roundoff(np.float32)
    assert np.all(e["float32"]["angle"] <= 2.01 * u32 * pos)
    assert e["float32"]["angle"][-1] > 0                         # not exact either
    assert e["bfloat16"]["angle"][-1] >= 1.0
    assert e["bfloat16"]["angle"][2] >= 0.5                      # 257 is not a bfloat16
    assert e["bfloat16"]["cos_sin"][-1] > 0.5
    assert np.all(e["bfloat16"]["angle"] > 100 * e["float32"]["angle"])


# ----------------------------------------------------------------------------------------------
# SwiGLU
# ----------------------------------------------------------------------------------------------

T, F = 3, 769


@pytest.fixture(scope="module")
def swiglu_runs():
    gu_buf = bf16((T, 2 * F + 10), 20, scale=3.0)
    gu_buf[0, :8] = np.array([-200.0, -90.0, 90.0, 0.0, -0.0, 1e-3, -1e-3, 20.0], BF16)
    gate_up = gu_buf[:, 5:2 * F + 5]                 # one (T, 2F) [gate | up], rows strided
    gate, up = gate_up[:, :F].copy(), gate_up[:, F:].copy()
    before = gu_buf.copy()
    out = {}
    for v in llm_ops.SWIGLU:
        for form in ("one", "two"):
            y = np.full((T, F), np.nan, BF16)
            if form == "one":
                llm_ops.swiglu(gate_up, None, y, version=v)
            else:
                llm_ops.swiglu(gate, up, y, version=v)
            out[v, form] = y
    return dict(gate_up=gate_up, gate=gate, up=up, out=out, buf=gu_buf, before=before)


def test_swiglu_fused_is_bit_exact_against_unfused(swiglu_runs):
    out = swiglu_runs["out"]
    ref = bits(out["v1_unfused", "two"])
    for key, y in out.items():
        np.testing.assert_array_equal(bits(y), ref, err_msg=str(key))
    np.testing.assert_array_equal(bits(swiglu_runs["buf"]), bits(swiglu_runs["before"]))
    if SIM:     # the host composition's expf is the sim tier's (a GPU's is within 2 ulp)
        np.testing.assert_array_equal(
            bits(llm_ops.swiglu_unfused_host(swiglu_runs["gate_up"])), ref)


def test_swiglu_against_the_golden(swiglu_runs):
    ref = swiglu_golden(swiglu_runs["gate"], swiglu_runs["up"])
    pol = llm_ops.swiglu_tolerance(swiglu_runs["gate"], swiglu_runs["up"])
    for key, y in swiglu_runs["out"].items():
        cmp = compare(y, ref, pol)
        assert cmp.ok and cmp.budget_used < 0.5, (key, cmp.message)


def test_swiglu_errors():
    g, u, y = bf16((2, 8), 0), bf16((2, 8), 1), bf16((2, 8), 2)
    with pytest.raises(ValueError, match="shape"):
        llm_ops.swiglu(g, u[:, :7], y)
    with pytest.raises(ValueError, match="even"):
        llm_ops.swiglu(bf16((2, 7), 0), None, y)
    with pytest.raises(ValueError, match="overlap"):
        llm_ops.swiglu(g, u, g)
    with pytest.raises(TypeError, match="dtype"):
        llm_ops.swiglu(g.astype(np.float16), u, y)
