"""Grader self-tests for lab gemm-cuda (on the sim tier: the suite runs without a GPU): the
solution passes with its figures in the JSON, the untouched lab fails "not implemented", every
known-wrong submission fails for the reason in its header, honest styles pass, the thresholds
sit where the model puts them, and the gpu-tier measurement runs (on the simulator, with a wall
clock and a numpy stand-in for cuBLAS)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import kernellab
from grader.labs import _cuda as cuda_lab
from grader.labs.gemm_cuda import spec as lab
from grader.runner import grade, recheck
from grader.worker import _describe_exception
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
SUBS = Folder("gemm-cuda", "wrong")
OK = Folder("gemm-cuda", "ok")
SOLUTION = ROOT / "solutions" / "02_gemm_cuda.ipynb"
LAB = ROOT / "labs" / "02_gemm_cuda.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the known-wrong verdicts are the sim tier's")


def failing(report) -> list:
    return [c for c in report.cases if not c.passed]


def rule(report, name):
    return next(r for r in report.rules if r.name == name)


REUSE = "global traffic per FMA"
SPEED = "modelled speedup over the naive kernel"
COALESCED = "global memory coalesced"
BY_KERNELS = "the product was computed by kernels"


# ---------------------------------------------------------------------------- end to end (CLI)
def test_solution_passes_in_budget_and_json_has_the_figures():
    t0 = time.perf_counter()
    r = cli("grade", "gemm-cuda", str(SOLUTION), "--json")
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the budget: 60 s on 2 cores
    assert seconds < 60, seconds
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == d["max_score"] == 100
    assert d["tier"] == "sim"
    assert d["cases_passed"] == d["cases_total"] == len(lab.VISIBLE_SHAPES)
    for c in d["cases"]:
        cm = c["comparison"]
        for key in ("max_abs", "max_rel", "max_ulp", "worst_index", "mismatches", "budget_used"):
            assert key in cm
        assert c["error"] is None
        assert cm["budget_used"] < 0.5, c  # the reference uses < 50% of its budget (§5)
    rules = {x["name"]: x for x in d["rules"]}
    assert list(rules) == [REUSE, SPEED, COALESCED, BY_KERNELS]
    # a 16 x 16 tile: 4 (1/16 + 1/16) B/FMA of A and B plus C's stores, 4/K (module docstring)
    assert rules[REUSE]["measured"] == pytest.approx(0.5 + 4 / lab.PERF_N)
    assert rules[REUSE]["threshold"] == lab.MAX_BYTES_PER_FMA
    assert all(x["passed"] for x in rules.values())
    # the model's figures for a 16 x 16 tile (module docstring): 10.6x, every sector used
    assert rules[SPEED]["measured"] == pytest.approx(10.64, abs=0.05)
    assert rules[SPEED]["threshold"] == lab.MIN_MODELLED_SPEEDUP
    assert rules[COALESCED]["measured"] == pytest.approx(100.0)
    assert "shared-bound" in rules[SPEED]["detail"] and "global-bound" in rules[SPEED]["detail"]
    assert "wavefronts" in rules[SPEED]["detail"] and "sectors" in rules[SPEED]["detail"]
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("gemm-cuda", LAB)


def test_gpu_tier_forced_without_a_gpu_is_a_plain_fatal():
    r = cli("grade", "gemm-cuda", str(SOLUTION), env={"KERNELLAB_DEVICE": "gpu"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "KERNELLAB_DEVICE=gpu forces the gpu tier" in r.stdout, r.stdout
    assert "KERNELLAB_DEVICE=sim" in r.stdout and "simulator" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


# ------------------------------------------------------------------ known-wrong submissions
# each fails its cases for its reason (and passes the rest):
# tests/test_grader/test_known_verdicts.py


def test_the_shells_sim_settings_do_not_reach_the_worker(monkeypatch):
    """KERNELLAB_SIM_CHECKS=fast (no race detector, no counters) or the stock executor in the
    caller's environment must not switch the grader's checks off."""
    from kernellab import sim

    # this process's simulator reads its settings once, on first use: settle them before the
    # shell's are faked, or the later in-process tests run on the stock executor
    sim.options()
    monkeypatch.setenv("KERNELLAB_SIM_CHECKS", "fast")
    monkeypatch.setenv("KERNELLAB_SIM_EXECUTOR", "stock")
    rep = grade("gemm-cuda", SUBS / "race_no_second_sync.py", run_performance=False)
    assert "race: " in failing(rep)[0].error, rep.to_text()


def test_race_report_names_both_threads_the_array_and_both_lines():
    """The race is this k-step's read against the next k-step's write, with the
    loop's one barrier between their lines; the report says so, and where the missing
    barrier goes."""
    rep = grade("gemm-cuda", SUBS / "race_no_second_sync.py", run_performance=False)
    err = failing(rep)[0].error
    path = SUBS / "race_no_second_sync.py"
    read, write = _line_of(path, "acc += As"), _line_of(path, "As[ty, tx] = A[i, k0 + tx]")
    sync = next(i for i, t in enumerate(path.read_text().splitlines(), 1)
                if t.strip() == "cuda.syncthreads()")
    assert "shared array As[" in err and err.count("tid=") == 2, err
    assert err.index(f"read by tid=(1, 0, 0) at line {read}") < err.index(
        f"write by tid=(0, 0, 0) at line {write}"), err
    assert f"both after 1 syncthreads() and before the 2nd (both at line {sync}" in err, err
    assert "the write is in the next pass of the loop" in err, err
    assert f"A syncthreads() is needed after the read at line {read}" in err, err
    assert f"before the loop's next write at line {write}" in err, err
    assert err.endswith("at the end of the loop body"), err


def test_out_of_bounds_report_names_thread_array_and_index():
    rep = grade("gemm-cuda", SUBS / "no_bounds_check.py", run_performance=False)
    err = failing(rep)[0].error
    assert "tid=" in err and "ctaid=" in err and "global access A[0, 1]" in err, err


def test_calls_cupy_breaks_the_static_rules():
    rep = grade("gemm-cuda", SUBS / "calls_cupy.py", run_performance=False)
    assert not rep.passed and rep.score == 0
    assert any("import of 'cupy' is not allowed" in s for s in rep.static), rep.static


_STORES = 4 / lab.PERF_N        # C's stores, B/FMA
#: file -> (rule that must fail, rules that must pass, check of the figures (B/FMA, speedup, %
#: coalesced) the thresholds were set from: module docstring, docs/grading.md); every case must pass
WRONG_SPEED = {
    # (d) the A tile loaded with threadIdx.x walking down A's column: correct, uncoalesced
    # (its A loads: a warp's 16 rows x 2 floats, 8 of each sector's 32 bytes)
    "uncoalesced_a_tile.py": (COALESCED, {SPEED, REUSE},
                              lambda b, s, c: lab.MIN_MODELLED_SPEEDUP < s < 10.6
                              and c == pytest.approx(25.0)),
    # (e) the naive kernel handed in: fails everything; its traffic is exactly chapter 2's v1
    # (A read down a column, 32 of its 33 sectors per 32 FMAs: 4 of each sector's 32 bytes)
    "naive.py": (SPEED, set(), lambda b, s, c: s == pytest.approx(1.0)
                 and c == pytest.approx(12.5) and b == pytest.approx(33 + 32 / lab.PERF_N)),
    # coalescing without shared-memory reuse (chapter 2's v2, 32 x 8 blocks): 5 sectors per 32
    # FMAs instead of 33, not enough
    "coalesced_no_shared.py": (REUSE, {COALESCED},
                               lambda b, s, c: s == pytest.approx(33 / 5, abs=0.05) and c == 100
                               and b == pytest.approx(5 + _STORES)),
    # the case that once passed: no reuse, 16 x 16 blocks, 4 sectors per 32 FMAs: the speed rule
    # passes
    "no_reuse.py": (REUSE, {SPEED, COALESCED},
                    lambda b, s, c: b == pytest.approx(4 + _STORES) and s > 8 and c == 100),
}


@pytest.mark.parametrize("name", sorted(WRONG_SPEED))
def test_known_wrong_submission_is_correct_but_fails_a_speed_rule(name):
    must_fail, must_pass, figures = WRONG_SPEED[name]
    rep = grade("gemm-cuda", SUBS / name)
    assert all(c.passed for c in rep.cases), rep.to_text()
    assert not rep.passed and rep.recheck is not None and rep.recheck.passed
    assert not rule(rep, must_fail).passed, rep.to_text()
    for r in (REUSE, SPEED, COALESCED):
        assert rule(rep, r).passed == (r in must_pass), (r, rep.to_text())
    assert rule(rep, BY_KERNELS).passed
    assert figures(rule(rep, REUSE).measured, rule(rep, SPEED).measured,
                   rule(rep, COALESCED).measured), rep.to_text()


# ------------------------------------------------ reuse, for every block shape (in-process)
@pytest.fixture(scope="module")
def naive_launches():
    """Chapter 2's v1 at the lab's perf size, from its analytic counters (the speed rule's
    baseline; ``test_known_wrong_submission_is_correct_but_fails_a_speed_rule[naive.py]``
    shows the simulated v1 models the same)."""
    return [_launch("v1", lab.PERF_N)]


def _sim_rules(path: Path, naive, replace=None):
    """The spec's sim-tier perf rules on a submission's timed call at M = N = K = PERF_N,
    in this process (the worker's measurement without the re-check files), and its C."""
    from numba import cuda

    from kernellab import sim

    src = path.read_text()
    for old, new in (replace or {}).items():
        assert old in src
        src = src.replace(old, new)
    ns = {"__name__": "submission"}
    exec(compile(src, str(path), "exec"), ns)
    n = lab.PERF_N
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n),
                                                                              dtype=np.float32)
    dC = cuda.to_device(np.full((n, n), np.nan, np.float32))
    with sim.capture(sites=True) as cap:
        ns["gemm"](cuda.to_device(A), cuda.to_device(B), dC)
    C = dC.copy_to_host()
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    m = {"tier": "sim", "profile": cuda_lab.PROFILE, "n": n,
         "submission": [cuda_lab.launch_dict(s) for s in cap.launches], "naive": naive}
    return {r.name: r for r in lab.GemmCUDA().perf_rules(json.loads(json.dumps(m)))}


BLOCK_SHAPES = [(8, 32), (16, 16), (32, 8), (32, 32), (64, 4), (4, 64)]


def _no_reuse_bytes(bx: int, n: int = lab.PERF_N) -> float:
    """B/FMA of the reuse-free kernel with blockDim.x = bx (module docstring): a warp on a
    p x q patch of C, q = min(bx, 32) consecutive columns in p = 32 / q rows, loads p sectors
    of A and ceil(q/8) of B per k step and stores p ceil(q/8) sectors of C once."""
    q = min(bx, 32)
    p = 32 // q
    return (p + -(-q // 8)) + p * -(-q // 8) / n


@pytest.mark.parametrize("block", BLOCK_SHAPES, ids=lambda b: f"{b[0]}x{b[1]}")
def test_no_reuse_fails_the_traffic_rule_for_every_block_shape(block, naive_launches):
    """One thread per element of C, threadIdx.x along a row of C: whatever the block shape, a
    warp on a p x q patch of C moves p + ceil(q/8) >= 4 sectors of A and B per 32 FMAs (the
    module docstring's bound), and the rule that measures reuse fails."""
    rules = _sim_rules(SUBS / "no_reuse.py", naive_launches,
                       {"BLOCK = (16, 16)": f"BLOCK = {block!r}"})
    got = rules[REUSE]
    assert not got.passed and got.measured == pytest.approx(_no_reuse_bytes(block[0]))
    assert got.measured >= 4 > 2.5 * lab.MAX_BYTES_PER_FMA


def _cases_pass(path: Path, names=("17x17x17", "3x5x130")):
    """A few visible (ragged) cases in this process, judged by the spec's check."""
    from grader.spec import HiddenCases

    ns = {"__name__": "submission"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    spec = lab.GemmCUDA()
    for case in (c for c in spec.cases(HiddenCases()) if c.name in names):
        data = spec.case_data(case)
        arrays = {k: v.copy() for k, v in data.inputs.items()}
        arrays.update(data.allocate_outputs())
        ns["gemm"](*[arrays[k] for k in data.call])
        assert spec.check(case, data, {"C": arrays["C"]}).ok, case.name


@pytest.mark.parametrize("block", [(8, 32), (16, 16)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_no_reuse_with_a_transposed_fails_for_every_block_shape(block, naive_launches):
    """The least traffic without reuse with 4-byte loads: A transposed on the device,
    threadIdx.x down a column of C, a warp's p x q patch loading ceil(p/8) + ceil(q/8) >= 2
    sectors per 32 FMAs (8 x 32 blocks: 2; 16 x 16: 3). It passes the speed rule; its
    transpose stores At down a column (lanes along k), 13-19% of the sectors at 4 of 32 bytes
    used, which the per-site coalescing rule catches too."""
    rules = _sim_rules(SUBS / "no_reuse_transposed_a.py", naive_launches,
                       {"BLOCK = (8, 32)": f"BLOCK = {block!r}"})
    assert not rules[REUSE].passed and rules[REUSE].measured > 2.0 + _STORES, rules[REUSE]
    assert rules[SPEED].passed
    assert not rules[COALESCED].passed and rules[COALESCED].measured == pytest.approx(12.5)
    line = _line_of(SUBS / "no_reuse_transposed_a.py", "At[k, i] = A[i, k]")
    assert f"the store of At at line {line} of transpose_kernel" in rules[COALESCED].detail


def test_no_reuse_with_8_byte_loads_fails_the_traffic_rule(naive_launches):
    """8-byte (complex64) loads of operands packed in pairs along k: the product kernel's
    loads are 1.5 B/FMA, the floor of any reuse-free layout; with C's stores and the packing
    the rule fails. Correct on ragged cases (odd K is padded)."""
    path = SUBS / "no_reuse_complex64_pairs.py"
    _cases_pass(path)
    rules = _sim_rules(path, naive_launches)
    assert not rules[REUSE].passed and rules[REUSE].measured > 1.5 + _STORES, rules[REUSE]
    assert rules[SPEED].passed
    # pack_rows reads A down a column (lanes along i): caught per site as well
    got = rules[COALESCED]
    assert not got.passed and got.measured == pytest.approx(12.5), got.detail
    assert "of A at line" in got.detail and "of pack_rows" in got.detail, got.detail


def _line_of(path: Path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def test_broadcasts_do_not_hide_an_uncoalesced_tile(naive_launches):
    """Two broadcast loads of A[0, 0] per tile step (128 bytes asked for one sector each) next
    to an A tile loaded down a column: judged per site, the column load's 25% stands, and the
    report names its line."""
    path = SUBS / "uncoalesced_padded_broadcasts.py"
    rules = _sim_rules(path, naive_launches)
    got = rules[COALESCED]
    assert not got.passed and got.measured == pytest.approx(25.0), got.detail
    line = _line_of(path, "lanes walk down a column of A")
    assert f"the load of A at line {line} of gemm_kernel, 25% of its bytes used" in got.detail
    assert rules[SPEED].passed and rules[REUSE].passed


def test_bank_conflicted_tile_fails_the_speedup_and_names_the_conflict(naive_launches):
    """The B tile stored transposed without padding and read down a column: an 8-way bank
    conflict (16 words a row: a warp row's 16 lanes fall in 2 banks); traffic and
    coalescing are the solution's, the modelled speedup fails, and its detail names the
    array, the line and the degree."""
    path = SUBS / "bank_conflict_column.py"
    rules = _sim_rules(path, naive_launches)
    got = rules[SPEED]
    assert not got.passed and got.measured < lab.MIN_MODELLED_SPEEDUP / 2, got.detail
    assert rules[REUSE].passed and rules[COALESCED].passed
    read = _line_of(path, "down a column of Bt")
    assert (f"the load of Bt at line {read} of gemm_kernel: 8-way bank conflict, 8 wavefronts "
            "per request") in got.detail, got.detail
    assert "bank conflict on average" in got.detail
    assert "most global traffic: the load of A at line" in got.detail


def test_coalescing_is_judged_per_site_and_names_the_worst():
    """Synthetic sites: a broadcast site or coalesced traffic elsewhere does not lift an
    uncoalesced site that moves more than UNCOALESCED_SHARE of the sectors; one that moves
    less passes; sites below the threshold are summed, so splitting one does not help."""
    def launch(*sites):
        return {"name": "k", "counters": {}, "sites": [
            {"where": f"line {i}", "line": i, "array": "A", "kind": "load",
             "bytes_moved": 32 * sec, "bytes_used": used, "bytes_asked": used, "requests": 1}
            for i, (sec, used) in enumerate(sites, 1)]}
    share = cuda_lab.UNCOALESCED_SHARE
    bad = launch((100, 800), (50, 1600))              # 25%, 67% of the sectors; a broadcast
    assert cuda_lab.coalesced_fraction([bad]) == pytest.approx(0.25)
    assert not lab.coalesced_rule([bad], 0.5, "").passed
    assert "at line 1 of k, 25% of its bytes used, 67% of the sectors" in \
        lab.coalesced_rule([bad], 0.5, "").detail
    small = launch((10, 80), (100, 3200))             # 9% of the sectors at 25%
    assert 10 / 110 <= share and lab.coalesced_rule([small], 0.5, "").passed
    split = launch(*[(10, 80)] * 5, (100, 3200))      # five such sites: 33% together
    assert not lab.coalesced_rule([split], 0.5, "").passed


# ------------------------------------------------------------------ honest styles pass
#: honest file -> its B/FMA, 4 (1/BM + 1/BN) + C's stores (module docstring)
HONEST_BYTES = {"explicit_copies_tile8.py": 1.0 + _STORES, "padded_transposed.py": 0.5 + _STORES,
                "tile32.py": 0.25 + _STORES, "register_column.py": 0.125 + _STORES,
                # per warp and k: 16 A sectors (broadcasts) and 2 x 4 of B for 32 x 32 FMAs
                "register_tile_no_shared.py": 0.75 + _STORES}


@pytest.mark.parametrize("name", sorted(p.name for p in OK.glob("*.py")))
def test_honest_styles_pass_everything(name):
    rep = grade("gemm-cuda", OK / name)
    assert rep.passed, rep.to_text()
    assert rule(rep, SPEED).measured >= 1.1 * lab.MIN_MODELLED_SPEEDUP, rep.to_text()
    assert rule(rep, REUSE).measured == pytest.approx(HONEST_BYTES[name]), rep.to_text()
    assert rule(rep, REUSE).measured <= 0.75 * lab.MAX_BYTES_PER_FMA, rep.to_text()


# ------------------------------------------------------------ thresholds from the model
def _launch(version, n):
    from kernellab.kernels.gemm_cuda import expected_counters, launch_config

    (gx, gy), (bx, by) = launch_config(version, n, n, n)
    return {"name": version, "grid": [gx, gy, 1], "block": [bx, by, 1],
            "counters": {k: expected_counters(version, n, n, n).get(k, 0)
                         for k in cuda_lab.LAUNCH_COUNTERS}}


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_the_ladder_brackets_the_threshold_at_every_size(n):
    """From chapter 2's analytic counters (no simulation): coalescing alone (v2) stays below
    the threshold and a 16 x 16 shared tile (v3) above it, at any size that is a multiple of
    the tiles, because each grid is counted as filling the GPU."""
    flops = 2.0 * n ** 3
    t = {v: lab.modelled_seconds([_launch(v, n)], flops)["seconds"] for v in ("v1", "v2", "v3",
                                                                             "v4")}
    s = {v: t["v1"] / t[v] for v in t}
    assert s["v2"] == pytest.approx(33 / 5, rel=0.02)
    assert s["v2"] < lab.MIN_MODELLED_SPEEDUP < s["v3"]
    assert s["v3"] == pytest.approx(10.6, rel=0.02)
    assert s["v4"] > s["v3"]


def test_device_work_problem_and_coalesced_fraction():
    launch = {"name": "k", "grid": [1, 1, 1], "block": [1, 1, 1],
              "counters": dict.fromkeys(cuda_lab.LAUNCH_COUNTERS, 0)}
    assert "no kernel was launched" in lab.device_work_problem([], 2, 2, 2)
    launch["counters"].update(global_store_elements=3, dram_read_bytes=10 ** 6)
    assert "fewer than the 4 of C" in lab.device_work_problem([launch], 2, 2, 2)
    launch["counters"].update(global_store_elements=4, dram_read_bytes=31)
    assert "fewer than the 32 of A and B" in lab.device_work_problem([launch], 2, 2, 2)
    launch["counters"]["dram_read_bytes"] = 64
    assert lab.device_work_problem([launch], 2, 2, 2) is None
    assert lab.coalesced_fraction([launch]) == 0.0
    launch["counters"].update(global_load_bytes=128, global_load_sectors=4)
    assert lab.coalesced_fraction([launch]) == 1.0
    launch["counters"].update(global_load_bytes=128, global_load_sectors=32)
    assert lab.coalesced_fraction([launch]) == pytest.approx(0.125)
    launch["counters"].update(global_load_bytes=4096, global_load_sectors=1)  # broadcast
    assert lab.coalesced_fraction([launch]) == 1.0


# ------------------------------------------------------- hazards across the worker boundary
def test_sim_errors_cross_the_worker_boundary_with_kind_and_message():
    from kernellab.sim.errors import (GPUCompileError, KernelError, OutOfBoundsError, RaceError,
                                      UninitialisedReadError)

    assert _describe_exception(RaceError("ctaid=(0, 0, 0): race on shared array s[1]"),
                               "x.py", 0) == "race: ctaid=(0, 0, 0): race on shared array s[1]"
    assert _describe_exception(OutOfBoundsError("A[0, 9]"), "x.py", 0).startswith("out-of-bounds")
    assert _describe_exception(UninitialisedReadError("s[0]"), "x.py", 0).startswith(
        "uninitialised-read: ")
    multi = GPUCompileError("kernel 'k' runs on the simulator but ...:\nTypingError: str\n\nline 3")
    assert _describe_exception(multi, "x.py", 0) == (
        "gpu-compile: kernel 'k' runs on the simulator but ...: / TypingError: str / line 3")
    try:
        try:
            raise NotImplementedError("write the kernel")
        except NotImplementedError as inner:
            raise KernelError("tid=(0, 0, 0): NotImplementedError: write the kernel") from inner
    except KernelError as exc:
        assert _describe_exception(exc, "x.py", 0) == "not implemented: write the kernel"


# ---------------------------------------------------------------------------- static rules
def test_static_rules_allow_numba_cuda_and_close_its_back_doors():
    from grader.static_check import check_source

    spec = lab.GemmCUDA()

    def findings(src):
        return [str(f) for f in check_source(src, allowed_imports=spec.allowed_imports,
                                             banned_names=spec.banned_names,
                                             allowed_submodules=spec.allowed_submodules)]

    assert findings((OK / "padded_transposed.py").read_text()) == []
    assert findings("from numba import cuda, float32, types\nimport numba.cuda\n") == []
    for src, needle in [
        ("from numba import cuda\nk = cuda.simulator.kernel", "'simulator'"),
        ("from numba import cuda\nd = cuda.cudadrv.driver", "'cudadrv'"),
        ("from numba import cuda\nk = cuda.kernelapi", "'kernelapi'"),
        ("from numba.cuda import libdevice", "'libdevice'"),
        ("from kernellab.kernels.gemm_cuda import gemm_v3", "course's own code"),
        ("import numba\nf = numba.cuda.gemm_v1", "'gemm_v1'"),
    ]:
        got = " ".join(findings(src))
        assert needle in got, (src, got)


# ------------------------------------------------- the gpu-tier code path, on the simulator
def test_gpu_tier_measurement_runs_on_the_simulator_with_a_wall_clock(tmp_path):
    from grader import notebook

    ns: dict = {}
    exec(compile(notebook.submission_source(SOLUTION), str(SOLUTION), "exec"), ns)

    def fake_cublas(dA, dB, dC):
        dC.copy_to_device(np.matmul(dA.copy_to_host(), dB.copy_to_host()))

    spec = lab.GemmCUDA()
    plan = {"tier": "gpu", "n": 24, "rounds": 2}
    m = spec.measure({"gemm": ns["gemm"]}, plan, tmp_path, clock="wall", cublas=fake_cublas)
    assert m["tier"] == "gpu" and m["clock"] == "wall" and len(m["speedup_naive"]) == 2
    rules = spec.perf_rules(json.loads(json.dumps(m)))  # what crosses the worker boundary
    assert [r.name for r in rules] == ["measured speedup over the naive kernel",
                                       "fastest timed call is plausible"]
    assert "of cupy.matmul" in rules[0].detail
    after = recheck(spec, plan, m["recheck"], tmp_path)
    assert after.passed, after.error
    assert m["recheck"]["checked_calls"] == plan["rounds"] and m["recheck"]["wrong_calls"] == 0


def test_gpu_rules_flag_a_call_faster_than_cublas_allows():
    spec = lab.GemmCUDA()
    base = {"tier": "gpu", "n": 2048, "speedup_naive": [9.0] * 5, "gflops_naive": [300.0] * 5,
            "gflops_cublas": [20000.0] * 5, "peak_gflops": 66900.0, "peak_formula": "test"}
    honest = spec.perf_rules({**base, "gflops": [2700.0] * 5})
    assert all(r.passed for r in honest)
    assert "13.5% of cupy.matmul" in honest[0].detail and "of the FP32 peak" in honest[0].detail
    cheat = spec.perf_rules({**base, "gflops": [2700.0] * 4 + [10 ** 6]})
    gate = cheat[1]
    assert not gate.passed and not gate.scored
    slow = spec.perf_rules({**base, "gflops": [500.0] * 5, "speedup_naive": [1.7] * 5})
    assert not slow[0].passed
    no_cupy = spec.perf_rules({**base, "gflops": [2700.0] * 5, "gflops_cublas": None,
                               "peak_gflops": None})
    assert [r.name for r in no_cupy] == ["measured speedup over the naive kernel"]


def test_hidden_cases_are_bounded_by_the_simulators_cost():
    from grader.spec import HiddenCases

    spec = lab.GemmCUDA()
    with pytest.raises(ValueError, match="M\\*N\\*K <="):
        spec.cases(HiddenCases(cases=[{"M": 300, "N": 300, "K": 300}]))
    got = spec.cases(HiddenCases(seed=5))
    assert sum(c.hidden for c in got) == 4
    assert all(c.params["M"] * c.params["N"] * c.params["K"] <= lab.MAX_HIDDEN_MNK for c in got)
