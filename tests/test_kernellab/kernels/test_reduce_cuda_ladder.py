"""Chapter 3's CUDA reduction ladder (kernellab.kernels.reduce_cuda): every version is correct
for every n (one element, one warp, one block, around each boundary, several blocks with a
ragged last one), within the deterministic error bound of its own summation order; the
harness checks its arguments; the sim tier's counters are exactly the module docstring's
derivation and show what each step claims; the modelled time falls along the ladder as the
model says it must; and the race detector catches the two classic mistakes (a missing barrier
between tree levels, Harris's pre-Volta warp-synchronous last warp).

Sizes stay small (the simulator costs about 1-3 µs per memory access): the whole file runs in
well under a minute.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernellab  # noqa: F401  (selects the gpu/sim tier before numba.cuda is imported)
from kernellab.numerics import unit_roundoff

ROOT = Path(__file__).resolve().parents[3]

VERSIONS = ["v1_interleaved_divergent", "v2_interleaved_strided", "v3_sequential",
            "v4_first_add_on_load", "v5_warp_shuffle", "v6_grid_stride",
            "v7_block_shuffle_atomic"]
#: 1, a warp -1/0/+1, a block -1/0/+1, ragged multi-block sizes, and 12365 = 3 * 4096 + 77:
#: 49 blocks of v1-v3, 25 of v4/v5, 4 of v6/v7 (the last ragged), so v6's grid-stride loop and
#: v7's atomics see several blocks.
SIZES = [1, 2, 31, 32, 33, 255, 256, 257, 1000, 4097, 12365]
CASES = [(v, n) for v in VERSIONS for n in SIZES]
U32 = unit_roundoff(np.float32)


def data(n, seed=0):
    """|x_i| in [0.5, 1.5], random signs: every element matters to the sum, and the error
    bound (below 0.5 for every case here) is tight enough to catch one lost element."""
    rng = np.random.default_rng(seed + 1009 * n)
    mag = rng.uniform(0.5, 1.5, n)
    return (mag * rng.choice([-1.0, 1.0], n)).astype(np.float32)


def exact_sum(x):
    return math.fsum(np.asarray(x, np.float64).tolist())


def within_bound(rc, version, x, got):
    """|got - fsum(x)| <= gamma(k) sum|x| + the rounding of fsum's result to float64."""
    ref = exact_sum(x)
    bound = rc.error_bound(version, x) + 2.0 ** -53 * math.fsum(np.abs(x.astype(np.float64)))
    return abs(float(got) - ref) <= bound, abs(float(got) - ref), bound


@pytest.fixture(scope="module")
def rc():
    from kernellab.kernels import reduce_cuda
    return reduce_cuda


def need_counting_sim():
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim":
        pytest.skip("needs the sim tier")
    if sim.options().get("executor") != "kernellab":
        pytest.skip("the stock executor counts nothing")
    return sim


# ----------------------------------------------------------------------------------------------
# correctness
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version,n", CASES, ids=[f"{v.split('_')[0]}-{n}" for v, n in CASES])
def test_ladder_correct(rc, version, n):
    x = data(n)
    x0 = x.copy()
    out = np.full(1, np.nan, np.float32)
    assert rc.LADDER[version](x, out) is None
    ok, err, bound = within_bound(rc, version, x, out[0])
    assert ok, f"{version} n={n}: |out - sum| = {err:.3g} > bound {bound:.3g} (out={out[0]})"
    assert np.array_equal(x, x0), "x modified"
    assert out.dtype == np.float32 and out.shape == (1,)


def test_bounds_catch_one_lost_element(rc):
    """The tolerance is meaningful: for every case (and up to n = 2^16) the bound is below
    0.5 <= min |x_i|, so a sum that drops or repeats any one element fails the same check."""
    for version in VERSIONS:
        for n in SIZES + [2 ** 14, 2 ** 16]:
            x = data(n)
            assert rc.error_bound(version, x) < 0.5, (version, n)
    x = data(4097)
    for version in VERSIONS:
        dropped = np.float32(exact_sum(x[:-1]))
        doubled = np.float32(exact_sum(x) + float(x[0]))
        assert not within_bound(rc, version, x, dropped)[0]
        assert not within_bound(rc, version, x, doubled)[0]
        assert not within_bound(rc, version, x, np.float32(np.nan))[0]


def test_addition_depth(rc):
    """k per version, by hand from the module docstring's table."""
    d = rc.addition_depth
    assert [d(v, 1) for v in VERSIONS] == [8, 8, 8, 9, 9, 10, 1 + 1 + 8 + 1]
    assert d("v1", 256) == 8 and d("v1", 257) == 16 and d("v3", 65537) == 24
    assert d("v4", 512) == 9 and d("v4", 513) == 18 and d("v5", 2 ** 14) == 18
    assert d("v6", 4096) == 8 + 1 + 8              # one block, 8 iterations (16 elements)
    assert d("v6", 4097) == (5 + 1 + 8) + (1 + 1 + 8)   # 2 blocks, 5 iterations; then 2 partials
    assert d("v6", 2 ** 14) == 27 and d("v7", 2 ** 14) == 8 + 1 + 5 + 3 + 4
    assert d("v7", 4097) == 5 + 1 + 5 + 3 + 2
    # far below a sequential loop's n - 1
    assert all(d(v, 2 ** 14) < 30 for v in VERSIONS)
    u = U32
    assert rc.error_bound("v3", np.ones(257, np.float32)) == pytest.approx(
        16 * u / (1 - 16 * u) * 257)


def test_device_arrays(rc):
    """Device arrays are used as they are (the GPU timing path); mixed host/device too."""
    from numba import cuda

    x = data(1000)
    dx = cuda.to_device(x)
    for version in VERSIONS:
        dout = cuda.to_device(np.full(1, np.nan, np.float32))
        rc.LADDER[version](dx, dout)
        cuda.synchronize()
        assert within_bound(rc, version, x, dout.copy_to_host()[0])[0], version
    out = np.full(1, np.nan, np.float32)
    rc.reduce_v5(dx, out)
    assert within_bound(rc, "v5", x, out[0])[0]
    dout = cuda.to_device(np.full(1, np.nan, np.float32))
    rc.reduce_v7(x, dout)
    assert within_bound(rc, "v7", x, dout.copy_to_host()[0])[0]
    assert np.array_equal(dx.copy_to_host(), x)


def test_noncontiguous_x_and_out_view(rc):
    big = data(2 * 777)
    x = big[::2]
    holder = np.full(3, np.nan, np.float32)
    out = holder[1:2]
    for version in ("v2", "v6"):
        holder[:] = np.nan
        rc.LADDER[rc._version_name(version)](x, out)
        assert within_bound(rc, version, np.ascontiguousarray(x), out[0])[0]
        assert np.isnan(holder[0]) and np.isnan(holder[2])


def test_raw_kernels_any_grid(rc):
    """The grid-stride kernels are correct for any grid, not only launch_config's: several
    loop iterations per thread, a ragged tail, one and three blocks."""
    from numba import cuda

    x = data(5000)
    dx = cuda.to_device(x)
    for grid in (1, 3):
        part = cuda.to_device(np.full(grid, np.nan, np.float32))
        rc.KERNELS["v6_grid_stride"][grid, rc.BLOCK](dx, part)
        assert math.isclose(math.fsum(part.copy_to_host().astype(np.float64)), exact_sum(x),
                            abs_tol=1e-3)
        out = cuda.to_device(np.zeros(1, np.float32))
        rc.KERNELS["v7_block_shuffle_atomic"][grid, rc.BLOCK](dx, out)
        assert math.isclose(float(out.copy_to_host()[0]), exact_sum(x), abs_tol=1e-3)


# ----------------------------------------------------------------------------------------------
# harness, metadata, launch configurations
# ----------------------------------------------------------------------------------------------

def test_ladder_order_and_metadata(rc):
    assert list(rc.LADDER) == VERSIONS == list(rc.KERNELS) == list(rc.VERSIONS)
    for name, f in rc.LADDER.items():
        assert f.description and "\n" not in f.description
        assert f.__doc__ and f.ladder_name == name
        assert f.kernel is rc.KERNELS[name]
        assert f.__name__ == f"reduce_{name.split('_')[0]}"
    assert rc.reduce_v3 is rc.LADDER["v3_sequential"]
    assert rc.BLOCK == 256


def test_argument_errors(rc):
    f = rc.reduce_v3
    x = np.ones(10, np.float32)
    out = np.zeros(1, np.float32)
    with pytest.raises(TypeError, match="numpy array or a numba device array"):
        f([1.0, 2.0], out)
    with pytest.raises(TypeError):
        f(x, [0.0])
    with pytest.raises(ValueError, match="1-D"):
        f(np.ones((2, 5), np.float32), out)
    with pytest.raises(ValueError, match="empty"):
        f(np.ones(0, np.float32), out)
    with pytest.raises(ValueError, match="float32 only"):
        f(x.astype(np.float64), out)
    with pytest.raises(ValueError, match="out has dtype"):
        f(x, np.zeros(1, np.float64))
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        f(x, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        f(x, np.zeros((), np.float32))
    ro = np.zeros(1, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(x, ro)
    with pytest.raises(ValueError, match="overlap"):
        f(x, x[3:4])


@pytest.mark.parametrize("version", VERSIONS)
def test_launch_config_and_plan(rc, version):
    per_thread = {"v1": 1, "v2": 1, "v3": 1, "v4": 2, "v5": 2, "v6": rc.ITEMS, "v7": rc.ITEMS}
    short = version.split("_")[0]
    for n in (1, 31, 256, 257, 12365, 10 ** 6, 10 ** 9):
        grid, block = rc.launch_config(version, n)
        assert block == rc.BLOCK
        if grid < rc.MAX_GRID or short not in ("v6", "v7"):
            assert grid == -(-n // (block * per_thread[short]))     # covers n, no idle block
        else:
            assert grid == rc.MAX_GRID                               # the fixed grid
        plan = rc.launch_plan(version, n)
        assert plan[-1]["output"] == "out" and plan[-1]["n"] == (n if short == "v7" else
                                                                  plan[-1]["n"])
        assert all(s["output"] == "partial" for s in plan[:-1] if s["kernel"] != "zero")
        for a, b in zip(plan, plan[1:]):
            if a["kernel"] != "zero":
                assert b["n"] == a["grid"]                           # next pass: the partials
    assert rc.launch_config(short, 1000) == rc.launch_config(version, 1000)
    assert rc.launch_config(int(short[1:]), 1000) == \
        rc.LADDER[version].launch_config(1000) == rc.launch_config(rc.KERNELS[version], 1000)
    assert len(rc.launch_plan(version, 1)) == (2 if short == "v7" else 1)
    with pytest.raises(ValueError):
        rc.launch_config(version, 0)


def test_launch_config_errors(rc):
    with pytest.raises(ValueError, match="unknown version"):
        rc.launch_config("v9", 4)
    with pytest.raises(ValueError):
        rc.launch_config(print, 4)
    with pytest.raises(TypeError):
        rc.launch_config("v1", 4.0)


# ----------------------------------------------------------------------------------------------
# counters and the modelled time
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 300, 2 ** 14, 12365])
def test_sim_counters_match_predictions(rc, n):
    """Every counter of every version, summed over its launches, equals expected_counters."""
    sim = need_counting_sim()
    from kernellab.sim.engine import COUNTER_KEYS

    assert set(rc.PREDICTED_KEYS) == set(COUNTER_KEYS)
    x = data(n)
    for version in VERSIONS:
        out = np.full(1, np.nan, np.float32)
        with sim.capture() as cap:
            rc.LADDER[version](x, out)
        assert len(cap.launches) == len(rc.launch_plan(version, n))
        got = cap.total()
        want = rc.expected_counters(version, n)
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not diff, f"{version} n={n}: (engine, predicted) {diff}"


@pytest.fixture(scope="module")
def metrics(rc):
    need_counting_sim()
    return rc.ladder_metrics(2 ** 14, "a100")


def test_counters_show_each_step(rc, metrics):
    n = metrics["n"]
    m = metrics["versions"]
    v1, v2, v3, v4, v5, v6, v7 = (m[v] for v in VERSIONS)
    # v1 -> v2: divergence removed (more active lanes per shared request), at the price of
    # bank conflicts that cost exactly the wavefronts v1's divergent requests did.
    assert v1["lanes_per_shared_request"] < 8 < 22 < v2["lanes_per_shared_request"]
    assert v1["bank_conflict_degree"] == 1 and v2["bank_conflict_degree"] > 3
    assert v2["shared_wavefronts"] == v1["shared_wavefronts"]
    assert v2["shared_requests"] * 3 < v1["shared_requests"]
    # v2 -> v3: conflict-free, same requests
    assert v3["bank_conflict_degree"] == 1
    assert v3["shared_requests"] == v2["shared_requests"]
    assert v3["shared_wavefronts"] * 3 < v2["shared_wavefronts"]
    # v3 -> v4: half the blocks, half the barriers of the first pass
    assert v4["grid"] * 2 == v3["grid"] == n // 256
    plan3, plan4 = rc.launch_plan("v3", n), rc.launch_plan("v4", n)
    assert v3["barriers"] == 9 * sum(s["grid"] for s in plan3)
    assert v4["barriers"] == 9 * sum(s["grid"] for s in plan4)
    assert v4["barriers"] - 9 == (v3["barriers"] - 9) // 2
    # v4 -> v5: shuffles replace the last 5 levels + 1; a third of the barriers; full warps
    assert v4["shuffles"] == 0 and v5["shuffles"] == 5 * (v5["grid"] + 1)
    assert v5["barriers"] * 3 == v4["barriers"]
    assert v5["lanes_per_shared_request"] == 32 and v5["bank_conflict_degree"] == 1
    # v5 -> v6: far fewer blocks, each thread sums ITEMS elements
    assert v6["grid"] * 8 == v5["grid"] and v6["grid"] == n // (256 * rc.ITEMS)
    assert v6["barriers"] == 3 * (v6["grid"] + 1)
    # v6 -> v7: one atomic and one barrier per block, no second pass
    assert v7["atomics"] == v7["grid"] == v6["grid"] and v7["barriers"] == v7["grid"]
    assert v7["shuffles"] == v7["grid"] * (8 * 5 + 3)
    assert all(m[v]["atomics"] == 0 for v in VERSIONS[:-1])
    assert [s["kernel"] for s in rc.launch_plan("v7", n)] == ["zero", "v7_block_shuffle_atomic"]
    # every version reads x exactly once, coalesced (n/8 sectors), then its partials
    for v in VERSIONS:
        passes = [s for s in rc.launch_plan(v, n) if s["kernel"] != "zero"]
        assert passes[0]["n"] == n
        assert m[v]["counters"]["global_load_sectors"] == sum(-(-s["n"] // 8) for s in passes)
        assert m[v]["counters"]["global_load_requests"] == sum(-(-s["n"] // 32) for s in passes)


def test_modelled_time_along_the_ladder(rc, metrics):
    """Full GPU (kernel time, grids counted as filling the GPU): v1 = v2 = v3 (barrier-bound)
    > v4 > v5 >= v6 >= v7, and v4-v7 on the DRAM roof. As launched at n = 2^14: the launch
    overheads dominate; v5 < v4 (fewer barriers per block), v6 > v5 (4 blocks get 4 SMs' share
    of the L2 bandwidth)."""
    from kernellab.sim import model

    p = model.get_profile("a100")
    m = metrics["versions"]
    t = [m[v]["seconds_full_gpu"] for v in VERSIONS]
    assert t[0] == t[1] == t[2]
    assert t[2] > t[3] > t[4] >= t[5] >= t[6] > 0
    assert [m[v]["bound_full_gpu"] for v in VERSIONS] == ["sync"] * 3 + ["dram"] * 4
    shared = [m[v]["breakdown_full_gpu"]["shared"] for v in VERSIONS]
    assert shared[0] == shared[1] > 3 * shared[2]
    dram_s = 4 * metrics["n"] / p.dram_bytes_per_s
    for v in VERSIONS:
        assert m[v]["seconds_full_gpu"] >= dram_s                 # nobody beats the roof
        assert m[v]["fraction_of_dram"] <= 1.0
        assert m[v]["gbps_full_gpu"] == pytest.approx(4 * metrics["n"] / t[VERSIONS.index(v)]
                                                      / 1e9)
    assert all(m[v]["fraction_of_dram"] > 0.95 for v in VERSIONS[3:])
    assert m[VERSIONS[0]]["fraction_of_dram"] < 0.6
    # as launched
    for v in VERSIONS:
        launch = m[v]["launches"] * p.launch_overhead_s
        assert launch <= m[v]["seconds_as_launched"] <= launch / 0.9
    a = [m[v]["seconds_as_launched"] for v in VERSIONS]
    assert a[4] < a[3] and a[5] > a[4]
    assert metrics["dram_gbps"] == pytest.approx(1555.0)
    # every version's result is within its bound
    for v in VERSIONS:
        assert m[v]["abs_error"] <= m[v]["error_bound"]


def test_metrics_table_and_plot(rc, metrics):
    table = rc.metrics_table(metrics)
    assert all(v in table for v in VERSIONS) and "GB/s" in table
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = rc.plot_ladder(metrics)
    assert len(fig.axes) == 2
    plt.close(fig)
    measured = {"n": 2 ** 24, "device": "fake", "copy_gbps": 1300.0,
                "gbps": {v: 100.0 * (i + 1) for i, v in enumerate(VERSIONS)}}
    fig = rc.plot_ladder(metrics, measured)
    assert len(fig.axes[1].patches) == 3 * len(VERSIONS)
    plt.close(fig)


def test_measure_gpu_refuses_the_sim_tier(rc):
    if kernellab.TIER != "sim":
        pytest.skip("on a GPU, measure_gpu runs (make gpu-check)")
    with pytest.raises(RuntimeError, match="gpu tier"):
        rc.measure_gpu(2 ** 10, 2)


# ----------------------------------------------------------------------------------------------
# the race detector and the two classic mistakes
# ----------------------------------------------------------------------------------------------

def _sim_or_skip():
    sim = pytest.importorskip("kernellab.sim")
    if kernellab.TIER != "sim" or sim.options().get("executor") != "kernellab":
        pytest.skip("needs the sim tier's race detector")
    return sim


def test_missing_barrier_between_levels_is_a_race(rc):
    """v3 with the syncthreads between tree levels removed: thread 0 reads sdata[64] at level
    64 while thread 64 writes it at level 128, in one barrier interval."""
    sim = _sim_or_skip()
    from numba import cuda, float32

    BLOCK = rc.BLOCK

    @cuda.jit
    def v3_no_barrier(x, partial):
        sdata = cuda.shared.array(BLOCK, float32)
        n = x.shape[0]
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * BLOCK + tid
        if i < n:
            sdata[tid] = x[i]
        else:
            sdata[tid] = float32(0.0)
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 0:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            s //= 2                        # BUG: no syncthreads between the levels
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]

    x = cuda.to_device(data(512))
    part = cuda.to_device(np.zeros(2, np.float32))
    with pytest.raises(sim.RaceError):
        v3_no_barrier[2, BLOCK](x, part)


def test_pre_volta_warp_synchronous_last_warp_is_a_race(rc):
    """Harris's kernel 5 unrolls the last warp through (volatile) shared memory with no
    barrier, counting on lockstep lanes. Since Volta the lanes are scheduled independently and
    this is a race; the same steps with __syncwarp between the read and the write are not."""
    sim = _sim_or_skip()
    from numba import cuda, float32

    BLOCK = rc.BLOCK

    @cuda.jit
    def last_warp_implicit(x, partial):
        sdata = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        sdata[tid] = x[cuda.blockIdx.x * BLOCK + tid]
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 32:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()
            s //= 2
        if tid < 32:                       # BUG since Volta: no __syncwarp
            sdata[tid] += sdata[tid + 32]
            sdata[tid] += sdata[tid + 16]
            sdata[tid] += sdata[tid + 8]
            sdata[tid] += sdata[tid + 4]
            sdata[tid] += sdata[tid + 2]
            sdata[tid] += sdata[tid + 1]
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]

    @cuda.jit
    def last_warp_syncwarp(x, partial):
        sdata = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        sdata[tid] = x[cuda.blockIdx.x * BLOCK + tid]
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 32:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()
            s //= 2
        if tid < 32:
            s = 32
            while s > 0:
                v = sdata[tid + s]         # everyone reads ...
                cuda.syncwarp()
                sdata[tid] += v            # ... before anyone writes
                cuda.syncwarp()
                s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]

    hx = data(512)
    x = cuda.to_device(hx)
    part = cuda.to_device(np.zeros(2, np.float32))
    with pytest.raises(sim.RaceError):
        last_warp_implicit[2, BLOCK](x, part)
    last_warp_syncwarp[2, BLOCK](x, part)
    assert math.isclose(math.fsum(part.copy_to_host().astype(np.float64)), exact_sum(hx),
                        abs_tol=1e-4)


# ----------------------------------------------------------------------------------------------
# a real GPU compiler
# ----------------------------------------------------------------------------------------------

def test_kernels_compile_for_a_gpu():
    """Every kernel compiles to PTX (numba-cuda's compiler, no GPU needed, in a fresh process
    without the simulator). The tree loops are unrolled (BLOCK is a constant): v1-v4 have
    1 + 8 barriers, v5/v6 1 + 2 and 5 shuffles, v7 one barrier, 5 + 3 shuffles and one global
    atomic add; nothing spills to local memory."""
    code = r"""
import json, os, re
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda, types              # real numba.cuda, before kernellab picks a tier
from kernellab.kernels import reduce_cuda
arr = types.Array(types.float32, 1, "C")
out = {}
for name, k in reduce_cuda.KERNELS.items():
    ptx, _ = cuda.compile_ptx(k.py_func, (arr, arr), cc=(8, 0))
    out[name] = {"bar": len(re.findall(r"\bbar(rier)?\.sync", ptx)),
                 "shfl": len(re.findall(r"shfl\.sync\.down", ptx)),
                 "atom": len(re.findall(r"\b(atom|red)\.global\.add\.f32", ptx)),
                 "local": len(re.findall(r"\.local\b", ptx))}
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
    assert [out[v]["bar"] for v in VERSIONS] == [9, 9, 9, 9, 3, 3, 1]
    assert [out[v]["shfl"] for v in VERSIONS] == [0, 0, 0, 0, 5, 5, 5 + 3]
    assert [out[v]["atom"] for v in VERSIONS] == [0] * 6 + [1]
    assert all(out[v]["local"] == 0 for v in VERSIONS)
