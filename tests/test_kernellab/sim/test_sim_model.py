"""kernellab.sim.model: device profiles and the modelled time of a launch.

Every expected number is computed here from the profile's constants and the formula in the
module docstring, never read back from the model's own output.
"""

import dataclasses
import math

import pytest

from kernellab.sim import model
from kernellab.sim.model import PROFILES, describe, modelled_time, speedup, total_seconds

A100 = PROFILES["a100"]
H100 = PROFILES["h100"]


def counters(**kw):
    """A full counters dict (every key SIM_API lists), zeros unless given."""
    keys = ["blocks", "threads", "warps",
            "global_load_requests", "global_store_requests",
            "global_load_sectors", "global_store_sectors",
            "global_load_bytes", "global_store_bytes",
            "global_load_elements", "global_store_elements",
            "dram_read_bytes", "dram_write_bytes",
            "shared_load_requests", "shared_store_requests",
            "shared_load_wavefronts", "shared_store_wavefronts",
            "shared_bytes_per_block", "barriers", "warp_syncs", "shuffles", "votes", "atomics",
            "flops"]
    c = dict.fromkeys(keys, 0)
    for k in kw:
        assert k in c, k
    c.update(kw)
    return c


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


# --- the profiles carry the published figures -----------------------------------------------------

def test_profiles_match_published_figures():
    assert model.DEFAULT_PROFILE == "a100"
    a = A100
    assert (a.sm_count, a.clock_ghz, a.fp32_flops, a.dram_bytes_per_s) == (108, 1.41, 19.5e12,
                                                                            1555e9)
    assert close(a.l2_bytes_per_s, 5120 * 1.41e9)           # 7.22 TB/s, A100 whitepaper
    assert close(a.shared_bytes_per_s_per_sm, 32 * 4 * 1.41e9)
    # The FP32 peak is consistent with 64 FP32 lanes x FMA (2 FLOPs) x SMs x clock.
    assert abs(108 * 64 * 2 * 1.41e9 - a.fp32_flops) / a.fp32_flops < 0.001
    h = H100
    assert (h.sm_count, h.fp32_flops, h.dram_bytes_per_s) == (132, 67e12, 3.35e12)
    assert abs(132 * 128 * 2 * h.clock_hz - 67e12) / 67e12 < 0.002  # the derived 1.98 GHz
    assert close(h.l2_bytes_per_s, 5120 * 1.98e9)
    assert close(h.shared_bytes_per_s_per_sm, 128 * 1.98e9)
    h2 = PROFILES["h200"]
    assert h2.dram_bytes_per_s == 4.8e12
    # H200 is H100 SXM5 compute with faster DRAM: every other field is the same.
    assert dataclasses.replace(h2, name="h100", description=h.description,
                               dram_bytes_per_s=h.dram_bytes_per_s) == h
    for p in PROFILES.values():
        assert p.launch_overhead_s == 3e-6 and p.barrier_cycles == 20
        assert p.max_threads_per_sm == 2048
        assert close(p.shared_bytes_per_s, p.shared_bytes_per_s_per_sm * p.sm_count)
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.sm_count = 1
    assert A100.max_shared_per_sm == 167936 and H100.max_shared_per_sm == 233472
    # L2: A100 whitepaper 40 MB (deviceQuery: 41943040 bytes); H100 whitepaper 50 MB; the
    # H200 is the same GH100 die (the replace() above already holds it equal to the H100's)
    assert (A100.l2_bytes, H100.l2_bytes, h2.l2_bytes) == (41943040, 50 * 2**20, 50 * 2**20)
    with pytest.raises(ValueError, match="l2_bytes must be > 0"):
        dataclasses.replace(A100, l2_bytes=0)


def test_bad_profile_name_lists_the_valid_ones():
    with pytest.raises(ValueError) as e:
        modelled_time(counters(blocks=1), "v100")
    msg = str(e.value)
    assert "v100" in msg and all(name in msg for name in PROFILES)
    with pytest.raises(ValueError):
        speedup(counters(blocks=1), counters(blocks=1), profile="rtx4090")
    assert model.get_profile("A100") is A100 and model.get_profile(H100) is H100
    with pytest.raises(ValueError):
        dataclasses.replace(A100, dram_bytes_per_s=0)


# --- each component, against the formula ----------------------------------------------------------

def test_each_component_full_chip():
    c = counters(blocks=1000, global_load_sectors=3_000_000, global_store_sectors=1_000_000,
                 dram_read_bytes=40_000_000, dram_write_bytes=10_000_000,
                 shared_load_wavefronts=2_000_000, shared_store_wavefronts=500_000,
                 barriers=64_000, flops=1e12)
    mt = modelled_time(c, "a100")
    bd = mt.breakdown
    assert set(bd) == {"dram", "global", "shared", "compute", "sync", "tensor", "launch"}
    assert bd["tensor"] == 0.0       # no MMAs
    assert close(bd["dram"], 50e6 / 1555e9)
    assert close(bd["global"], 4e6 * 32 / (5120 * 1.41e9))
    assert close(bd["shared"], 2.5e6 / (108 * 1.41e9))           # one wavefront/clock/SM
    assert close(bd["compute"], 1e12 / 19.5e12)
    assert close(bd["sync"], 64_000 * 20 / (108 * 1.41e9))
    assert bd["launch"] == 3e-6
    assert mt.bound == "compute" and mt.kernel_bound == "compute"
    assert close(mt.seconds, 1e12 / 19.5e12 + 3e-6)
    assert close(mt.kernel_seconds, 1e12 / 19.5e12)
    assert mt.active_sms == 108 and mt.profile is A100


def test_few_blocks_get_a_share_of_the_chip():
    # 16 blocks on 108 SMs: L2, shared, FP32 and barrier throughput scale by 16/108; DRAM does not.
    c = counters(blocks=16, global_load_sectors=33_000, dram_read_bytes=32_768,
                 shared_load_wavefronts=17_000, barriers=128, flops=2 * 64 ** 3)
    bd = modelled_time(c).breakdown
    f = 16 / 108
    assert close(bd["global"], 33_000 * 32 / (5120 * 1.41e9 * f))
    assert close(bd["shared"], 17_000 / (16 * 1.41e9))
    assert close(bd["compute"], 2 * 64 ** 3 / (19.5e12 * f))
    assert close(bd["sync"], 128 * 20 / (16 * 1.41e9))
    assert close(bd["dram"], 32_768 / 1555e9)
    # With the same per-block work, 1 block and 108 blocks take the same time per block.
    one = modelled_time(counters(blocks=1, shared_load_wavefronts=1000)).breakdown["shared"]
    full = modelled_time(counters(blocks=108, shared_load_wavefronts=108_000)).breakdown["shared"]
    assert close(one, full) and close(one, 1000 / 1.41e9)
    # More blocks than SMs: the whole chip, no more.
    many = modelled_time(counters(blocks=10_000, shared_load_wavefronts=108_000))
    assert many.active_sms == 108 and close(many.breakdown["shared"], full)


def test_the_busiest_block_bounds_a_launch_at_one_sms_throughput():
    """busiest_block: a launch lasts at least its busiest block on one SM (L2 / SMs, one SM's
    shared and barrier rate); a balanced grid is unchanged, a grid with one working block
    models as the one-block grid."""
    work = dict(global_load_sectors=108_000, shared_load_wavefronts=54_000, barriers=1080)
    full = modelled_time(counters(blocks=108, **work))
    even = {"global_sectors": 1000, "shared_wavefronts": 500, "barriers": 10}
    assert modelled_time(counters(blocks=108, **work), busiest_block=even).breakdown == \
        full.breakdown
    many = counters(blocks=1080, **work)                # 10 blocks an SM: below one SM's share
    assert modelled_time(many, busiest_block={k: v / 10 for k, v in even.items()}).breakdown \
        == modelled_time(many).breakdown
    lone = {"global_sectors": 108_000, "shared_wavefronts": 54_000, "barriers": 1080}
    idle = modelled_time(counters(blocks=108, **work), busiest_block=lone).breakdown
    one = modelled_time(counters(blocks=1, **work)).breakdown
    for k in ("global", "shared", "sync"):
        assert close(idle[k], one[k]) and idle[k] > 100 * full.breakdown[k], k
    assert close(idle["global"], 108_000 * 32 / (5120 * 1.41e9 / 108))
    assert idle["dram"] == full.breakdown["dram"]       # HBM is the chip's, not one SM's


def test_zero_counters_cost_the_launch_overhead_only():
    for name, p in PROFILES.items():
        mt = modelled_time(counters(), name)
        assert mt.seconds == p.launch_overhead_s == 3e-6
        assert all(v == 0 for k, v in mt.breakdown.items() if k != "launch")
        assert mt.bound == "launch" and mt.kernel_bound is None and mt.kernel_seconds == 0
    with pytest.raises(ValueError, match="is 0"):
        speedup(counters(), counters(), include_launch=False)


def test_flops_zero_means_compute_is_not_modelled():
    c = counters(blocks=108, global_load_sectors=1000)
    assert modelled_time(c).breakdown["compute"] == 0
    c.pop("flops")  # flops is optional, default 0
    assert modelled_time(c).breakdown["compute"] == 0


# --- the effects the course teaches ---------------------------------------------------------------

def test_more_sectors_cost_more_time():
    prev = -1.0
    for sectors in [0, 1, 10, 1000, 10_000, 1_000_000, 10 ** 8]:
        mt = modelled_time(counters(blocks=200, global_load_sectors=sectors))
        assert mt.breakdown["global"] > prev or sectors == 0
        assert mt.seconds >= prev
        prev = mt.breakdown["global"]
    # Strictly monotonic in total time once the sectors dominate.
    t = [modelled_time(counters(blocks=200, global_load_sectors=s)).seconds
         for s in (10 ** 6, 2 * 10 ** 6, 4 * 10 ** 6)]
    assert t[0] < t[1] < t[2]
    # Stores cost what loads cost.
    assert close(modelled_time(counters(blocks=200, global_store_sectors=5000)).seconds,
                 modelled_time(counters(blocks=200, global_load_sectors=5000)).seconds)


def test_uncoalesced_costs_8x_coalesced():
    # A warp reading 32 consecutive floats touches 4 sectors; reading 32 floats a row apart
    # touches 32. Same requests, same bytes asked for.
    requests = 256 * 1024
    base = dict(blocks=1024, global_load_requests=requests, global_load_bytes=requests * 128,
                global_load_elements=requests * 32, dram_read_bytes=requests * 128)
    coal = modelled_time(counters(global_load_sectors=4 * requests, **base))
    uncoal = modelled_time(counters(global_load_sectors=32 * requests, **base))
    assert close(uncoal.breakdown["global"] / coal.breakdown["global"], 8.0)
    assert close(coal.breakdown["global"], 4 * requests * 32 / (5120 * 1.41e9))
    assert uncoal.bound == "global"
    # Streamed once, the coalesced read is DRAM-bound, so the whole-launch ratio is smaller.
    g = 32 / (5120 * 1.41e9)
    dram = requests * 128 / 1555e9
    assert coal.bound == "dram"
    assert close(uncoal.seconds / coal.seconds,
                 (32 * requests * g + 3e-6) / (dram + 3e-6))
    # The same data read 16 times (L2-resident after the first pass): the 8x shows in the total.
    r16 = 16 * requests
    base.update(global_load_requests=r16, global_load_bytes=r16 * 128,
                global_load_elements=r16 * 32)
    coal = modelled_time(counters(global_load_sectors=4 * r16, **base))
    uncoal = modelled_time(counters(global_load_sectors=32 * r16, **base))
    assert coal.bound == "global"
    assert close(uncoal.seconds / coal.seconds, (32 * r16 * g + 3e-6) / (4 * r16 * g + 3e-6))
    assert 7.0 < uncoal.seconds / coal.seconds < 8.0  # the launch overhead dilutes it a little


def test_two_way_bank_conflict_doubles_the_shared_component():
    requests = 1_000_000
    free = modelled_time(counters(blocks=64, shared_load_requests=requests,
                                  shared_load_wavefronts=requests))
    conflict = modelled_time(counters(blocks=64, shared_load_requests=requests,
                                      shared_load_wavefronts=2 * requests))
    assert close(conflict.breakdown["shared"], 2 * free.breakdown["shared"])
    assert close(free.breakdown["shared"], requests / (64 * 1.41e9))
    assert conflict.bound == "shared"


def test_bound_names_the_largest_component():
    cases = {
        "dram": counters(blocks=108, dram_read_bytes=10 ** 9),
        "global": counters(blocks=108, global_load_sectors=10 ** 8),
        "shared": counters(blocks=108, shared_load_wavefronts=10 ** 8),
        "compute": counters(blocks=108, flops=10 ** 12),
        "sync": counters(blocks=108, barriers=10 ** 8),
        "launch": counters(blocks=1, global_load_sectors=10),
    }
    for want, c in cases.items():
        mt = modelled_time(c)
        assert mt.bound == want, (want, mt.breakdown)
        assert mt.breakdown[want] == max(mt.breakdown.values())
    # Ties go to the first component in COMPONENTS order (deterministic).
    t = counters(blocks=108, shared_load_wavefronts=10 ** 6)
    t["flops"] = 10 ** 6 * 19.5e12 / (108 * 1.41e9)  # the same seconds as the shared component
    mt = modelled_time(t)
    assert math.isclose(mt.breakdown["shared"], mt.breakdown["compute"], rel_tol=1e-12)
    assert mt.bound in ("shared", "compute")


def test_h100_is_faster_than_a100_on_the_same_counters():
    sets = [
        counters(blocks=4096, dram_read_bytes=10 ** 9),
        counters(blocks=4096, global_load_sectors=10 ** 8),
        counters(blocks=4096, shared_load_wavefronts=10 ** 8),
        counters(blocks=4096, flops=10 ** 12),
        counters(blocks=4096, barriers=10 ** 8),
    ]
    for c in sets:
        a, h = modelled_time(c, "a100"), modelled_time(c, "h100")
        assert h.seconds < a.seconds and h.bound == a.bound
    # The DRAM roof by exactly the bandwidth ratio.
    a = modelled_time(sets[0], "a100").breakdown["dram"]
    h = modelled_time(sets[0], "h100").breakdown["dram"]
    h2 = modelled_time(sets[0], "h200").breakdown["dram"]
    assert close(a / h, 3.35e12 / 1555e9) and close(h / h2, 4.8e12 / 3.35e12)
    # Shared memory by SMs x clock.
    a = modelled_time(sets[2], "a100").breakdown["shared"]
    h = modelled_time(sets[2], "h100").breakdown["shared"]
    assert close(a / h, (132 * 1.98) / (108 * 1.41))


# --- input checking -------------------------------------------------------------------------------

def test_missing_keys_are_named():
    c = counters(blocks=4)
    del c["shared_load_wavefronts"], c["dram_write_bytes"]
    with pytest.raises(KeyError) as e:
        modelled_time(c)
    assert "shared_load_wavefronts" in str(e.value) and "dram_write_bytes" in str(e.value)
    with pytest.raises(KeyError, match="blocks"):
        modelled_time({k: v for k, v in counters().items() if k != "blocks"})


def test_bad_values_are_refused():
    for bad in (-1, float("nan"), float("inf"), "12", True):
        with pytest.raises(ValueError, match="global_load_sectors"):
            modelled_time(counters(blocks=1, global_load_sectors=bad))
    with pytest.raises(TypeError):
        modelled_time([1, 2, 3])


def test_numpy_ints_and_launchstats_like_objects_are_accepted():
    np = pytest.importorskip("numpy")
    c = {k: np.int64(v) for k, v in counters(blocks=8, global_load_sectors=800).items()}

    class Launch:  # the shape of kernellab.sim.LaunchStats
        counters = c

    assert close(modelled_time(Launch()).breakdown["global"],
                 800 * 32 / (5120 * 1.41e9 * 8 / 108))


# --- speedup, totals, describe --------------------------------------------------------------------

def test_speedup_is_the_ratio_of_modelled_times():
    slow = counters(blocks=256, global_load_sectors=8_000_000)
    fast = counters(blocks=256, global_load_sectors=1_000_000)
    g = 32 / (5120 * 1.41e9)
    assert close(speedup(slow, fast, "a100"), (8e6 * g + 3e-6) / (1e6 * g + 3e-6))
    assert close(speedup(slow, fast, "a100", include_launch=False), 8.0)
    assert close(speedup(fast, slow), 1 / speedup(slow, fast))
    # A list is its launches one after another: two launches cost two launch overheads.
    assert close(total_seconds([fast, fast]), 2 * (1e6 * g + 3e-6))
    assert close(total_seconds([fast, fast], include_launch=False), 2e6 * g)
    assert close(speedup([fast, fast], fast), 2.0)

    class Capture:  # the shape of kernellab.sim.Capture
        launches = [fast, fast]

    assert close(speedup(Capture(), fast), 2.0)
    with pytest.raises(ValueError):
        total_seconds([])


def test_describe_is_one_readable_line():
    mt = modelled_time(counters(blocks=16, global_load_sectors=200_000,
                                shared_load_wavefronts=1000))
    line = describe(mt)
    assert "\n" not in line and line == str(mt)
    assert line.startswith(f"{mt.seconds * 1e6:.3g} µs on a100-model, 16/108 SMs busy (bound: ")
    g = 200_000 * 32 / (5120 * 1.41e9 * 16 / 108)
    assert f"global sectors {g * 1e6:.3g} µs" in line
    assert line.index("global sectors") < line.index("launch") < line.index("shared wavefronts")
    assert "DRAM" not in line  # zero components are left out
    assert describe(modelled_time(counters())) == "3 µs on a100-model (bound: launch 3 µs)"
    d = mt.as_dict()
    assert d["profile"] == "a100" and d["bound"] == "global" and d["active_sms"] == 16


# --- sanity against a published ladder ------------------------------------------------------------

def gemm_counters(kind, n):
    """Counters of an n x n x n fp32 GEMM, from SIM_API's definitions, for the three first kernels
    of Boehm's CUDA worklog (siboehm.com/articles/22/CUDA-MMM; siboehm/SGEMM_CUDA). n is a
    multiple of 32; blocks are 32 x 32 threads, so a warp is 32 threads of one block row."""
    warps = n * n // 32
    c = counters(blocks=n * n // 1024, threads=n * n, warps=warps, flops=2 * n ** 3,
                 dram_read_bytes=2 * n * n * 4, dram_write_bytes=n * n * 4)
    if kind == "uncoalesced":  # lane = row: A[row, k] is 32 sectors, B[k, col] one (broadcast)
        c.update(global_load_sectors=warps * n * (32 + 1), global_store_sectors=warps * 32)
    elif kind == "coalesced":  # lane = col: A[row, k] broadcast (1), B[k, cols] 4 sectors
        c.update(global_load_sectors=warps * n * (1 + 4), global_store_sectors=warps * 4)
    elif kind == "smem":  # 32x32 tiles; per tile: 4+4 sectors, 2 stores, 32 x 2 loads
        tiles = n // 32
        c.update(global_load_sectors=warps * tiles * 8, global_store_sectors=warps * 4,
                 shared_store_wavefronts=warps * tiles * 2,
                 shared_load_wavefronts=warps * tiles * 64,
                 barriers=(n * n // 1024) * tiles * 2)
    return c


def test_gemm_ladder_is_in_line_with_boehms_measurements():
    # Boehm, A6000, n=4092: naive 309.0, coalesced 1986.5, smem 2980.3 GFLOP/s: 6.43x, 1.50x.
    # The model is not calibrated on these; it has to land near them.
    n = 4096
    unc, coal, smem = (gemm_counters(k, n) for k in ("uncoalesced", "coalesced", "smem"))
    for c in (unc, coal):
        assert modelled_time(c).bound == "global"
    assert modelled_time(smem).bound == "shared"
    s1 = speedup(unc, coal)
    s2 = speedup(coal, smem)
    # Independent numbers: sector ratio, and sectors at L2 vs wavefronts at 1/clock/SM.
    want1 = (33 * n + 32) / (5 * n + 4)
    want2 = ((5 * n + 4) * 32 / (5120 * 1.41e9)) / ((n // 32) * 66 / (108 * 1.41e9))
    assert math.isclose(s1, want1, rel_tol=1e-3) and math.isclose(s2, want2, rel_tol=1e-3)
    assert 5.5 < s1 < 7.5 and 1.2 < s2 < 2.0


def test_small_grids_keep_the_ratio_and_the_launch_dilutes_it():
    # At simulator sizes (4 blocks of 32x32 for n=64) only 4 SMs work and the launch overhead
    # is as large as the kernel. Without it, the kernels' ratio differs from the full-chip one
    # only by the per-warp work, because every scaled roof is scaled alike.
    small = speedup(gemm_counters("coalesced", 64), gemm_counters("smem", 64),
                    include_launch=False)
    big = speedup(gemm_counters("coalesced", 4096), gemm_counters("smem", 4096),
                  include_launch=False)
    assert math.isclose(small, (5 * 64 + 4) / (5 * 4096 + 4) * 4096 / 64 * big, rel_tol=1e-9)
    with_launch = speedup(gemm_counters("coalesced", 64), gemm_counters("smem", 64))
    assert 1.2 < with_launch < small
    # The independent number: sectors at 4/108 of L2 vs wavefronts on 4 SMs, plus 3 µs each.
    coal = 128 * (5 * 64 + 4) * 32 / (5120 * 1.41e9 * 4 / 108) + 3e-6
    smem = 128 * 2 * 66 / (4 * 1.41e9) + 3e-6
    assert math.isclose(with_launch, coal / smem, rel_tol=1e-12)


# --- local memory (module docstring, "Local memory") ----------------------------------------------

def local(frame, touched, blocks, tpb, smem=0, **kw):
    return counters(blocks=blocks, threads=blocks * tpb, shared_bytes_per_block=smem,
                    **kw) | {"local_frame_bytes": frame, "local_touched_bytes": touched}


def test_local_profile_figures():
    # unified L1/shared per SM and the carveouts (Ampere / Hopper tuning guides)
    assert A100.l1_shared_bytes_per_sm == 192 * 1024 and H100.l1_shared_bytes_per_sm == 256 * 1024
    assert A100.shared_carveouts[-1] == A100.max_shared_per_sm == 164 * 1024
    assert H100.shared_carveouts[-1] == H100.max_shared_per_sm == 228 * 1024
    assert A100.max_blocks_per_sm == H100.max_blocks_per_sm == 32


def test_no_local_frame_costs_nothing_and_changes_nothing():
    c = counters(blocks=4, threads=512, global_load_sectors=1000, dram_read_bytes=32000)
    lt = model.local_traffic(c)
    assert lt.frame_bytes == 0 and lt.miss == 0 and lt.device_bytes == 0
    mt = modelled_time(c)
    assert mt.local is None
    assert close(mt.breakdown["dram"], 32000 / A100.dram_bytes_per_s)


def test_frames_that_fit_l1_cost_nothing():
    # chapter 5's v2 at d = 32, float16: a 512-byte depot (its scores), blocks of 128 threads,
    # 25 KiB of shared memory; at least 256 threads resident (2 blocks: 49 KiB, the 64 KiB
    # carveout): 128 KiB of frames in 128 KiB of L1, even for a grid of one block
    assert model.MIN_RESIDENT_THREADS == 256
    c = local(512, 128 * 512, blocks=1, tpb=128, smem=25088, dram_read_bytes=32768)
    lt = model.local_traffic(c)
    assert (lt.resident_threads, lt.working_set_bytes, lt.l1_bytes) == (256, 131072, 128 * 1024)
    assert lt.miss == 0 and lt.device_bytes == 0
    assert close(modelled_time(c).breakdown["dram"], 32768 / A100.dram_bytes_per_s)


def test_frames_that_overflow_l1_are_charged_as_device_memory():
    # a 2 KiB row a thread, blocks of 128 threads, 4 KiB of shared memory: 2 blocks resident
    # (8 KiB carveout), 512 KiB of frames for 184 KiB of L1; the share that does not fit
    # misses, stored and read back
    touched = 128 * 512
    c = local(2048, touched, blocks=1, tpb=128, smem=4096)
    lt = model.local_traffic(c)
    miss = 1 - 184 / 512
    assert lt.l1_bytes == 184 * 1024 and close(lt.miss, miss)
    assert close(lt.device_bytes, 2 * miss * touched)
    mt = modelled_time(c)
    assert close(mt.breakdown["dram"], 2 * miss * touched / A100.dram_bytes_per_s)
    assert close(mt.breakdown["global"], 2 * miss * touched / (A100.l2_bytes_per_s / 108))
    assert mt.local == lt and mt.as_dict()["local"]["miss"] == lt.miss


def test_resident_threads_follow_the_grid_and_the_occupancy_limits():
    # 1000 blocks of 256 threads: ceil(1000/108) = 10 a SM, capped at 2048 threads (8 blocks)
    assert model.local_traffic(local(4, 0, 1000, 256)).resident_threads == 2048
    # 48 KiB of shared memory a block: 3 blocks fit in 164 KiB; carveout 164 KiB, 28 KiB of L1
    lt = model.local_traffic(local(4, 0, 1000, 256, smem=48 * 1024))
    assert lt.resident_threads == 3 * 256 and lt.l1_bytes == 28 * 1024
    # a block of 33 threads takes two warps: 2048 / 64 = 32 blocks, the block limit too
    assert model.local_traffic(local(4, 0, 10000, 33)).resident_threads == 32 * 33
    assert model.local_traffic(local(4, 0, 1000, 33)).resident_threads == 10 * 33
    # the H100 has its own L1 and carveouts
    lt = model.local_traffic(local(4, 0, 1, 64, smem=170 * 1024), "h100")
    assert lt.l1_bytes == (256 - 196) * 1024


def test_describe_names_local_memory_past_l1_only_when_charged():
    spilled = modelled_time(local(2048, 128 * 512, blocks=1, tpb=128, smem=4096))
    assert "local memory past L1" in describe(spilled) and "2048-byte frame" in describe(spilled)
    fits = modelled_time(local(512, 128 * 512, blocks=1, tpb=128, smem=25088))
    assert "local" not in describe(fits)
