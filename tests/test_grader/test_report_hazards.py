"""What a failing sim-tier speed rule says about where the cost is (grader/labs/_cuda.py), on
synthetic launch figures (no simulation, so the file runs in well under a second): the global
site that moved the most sectors, each bank-conflicted shared site by array, line and degree
(wavefronts over the conflict-free wavefronts of the same requests), each kernel's local
memory; passing rules are left as they are. The engine's side (per-site shared counters, the
race wording) is tested in tests/test_kernellab/sim/test_sim_engine.py, the labs' reports in
tests/test_grader_{gemm_cuda,softmax_cuda,flash_attention}.py."""

from __future__ import annotations

from grader.labs import _cuda as cuda_lab
from grader.spec import RuleResult


def _launch(name="k", sites=(), shared=None, **counters):
    c = dict.fromkeys(cuda_lab.LAUNCH_COUNTERS, 0)
    c.update(counters)
    out = {"name": name, "grid": [1, 1, 1], "block": [32, 1, 1], "counters": c,
           "sites": [{"where": f"line {ln}", "line": ln, "array": a, "kind": kind,
                      "requests": 1, "bytes_moved": 32 * sec, "bytes_asked": used,
                      "bytes_used": used} for ln, a, kind, sec, used in sites]}
    if shared is not None:
        out["shared_sites"] = [{"where": f"line {ln}", "line": ln, "array": a, "kind": kind,
                                "requests": r, "wavefronts": w, "ideal_wavefronts": i,
                                "worst_wavefronts": x} for ln, a, kind, r, w, i, x in shared]
    return out


def test_conflict_degree_is_wavefronts_over_the_conflict_free_wavefronts():
    assert cuda_lab.conflict_degree(16, 1) == "16-way bank conflict"
    assert cuda_lab.conflict_degree(471, 100) == "4.71-way bank conflict"
    # a float64 row read takes 2 wavefronts because it moves 64 words: no conflict
    assert cuda_lab.conflict_degree(2, 2) == "no bank conflict"
    assert cuda_lab.conflict_degree(0, 0) == "no bank conflict"


def test_costliest_names_the_global_site_the_conflicts_and_local_memory():
    launch = _launch(
        "gemm_kernel",
        sites=[(28, "A", "load", 300, 300 * 32), (30, "B", "load", 100, 3200),
               (40, "C", "store", 20, 640)],
        shared=[(35, "As", "store", 10, 10, 10, 1), (40, "As", "load", 100, 1600, 100, 16),
                (41, "Bs", "load", 100, 200, 100, 2)],
        local_frame_bytes=64, local_touched_bytes=4096)
    got = cuda_lab.costliest([launch])
    assert ("most global traffic: the load of A at line 28 of gemm_kernel, 300 sectors (71% "
            "of the call's)") in got, got
    assert ("the load of As at line 40 of gemm_kernel: 16-way bank conflict, 16 wavefronts "
            "per request (worst 16), 88% of the shared wavefronts") in got, got
    assert "the load of Bs at line 41 of gemm_kernel: 2-way bank conflict" in got, got
    assert got.index("As at line 40") < got.index("Bs at line 41")     # worst first
    assert "line 35" not in got                                        # conflict-free
    assert "local memory of gemm_kernel: a 64-byte frame a thread, 4096 bytes stored to it" \
        in got, got


def test_costliest_says_when_shared_memory_has_no_conflict():
    launch = _launch(sites=[(3, "x", "load", 4, 128)],
                     shared=[(5, "s", "load", 8, 8, 8, 1)])
    assert cuda_lab.costliest([launch]).endswith("no shared-memory bank conflict")
    # without per-site counters nothing is claimed about sites
    bare = {"name": "k", "counters": dict.fromkeys(cuda_lab.LAUNCH_COUNTERS, 0)}
    assert cuda_lab.costliest([bare]) == ""


def test_a_failing_rule_gets_the_costliest_site_and_a_passing_one_does_not():
    launch = _launch(sites=[(7, "X", "load", 10, 320)])
    fail = RuleResult("speed", 1.0, 2.0, ">=", "x", False, "detail")
    ok = RuleResult("speed", 3.0, 2.0, ">=", "x", True, "detail")
    assert cuda_lab.with_costliest(ok, [launch]) is ok
    got = cuda_lab.with_costliest(fail, [launch])
    assert got.detail == ("detail. Where the cost is: most global traffic: the load of X at "
                          "line 7 of k, 10 sectors (100% of the call's)")
    assert (got.name, got.measured, got.passed) == ("speed", 1.0, False)


def test_traffic_summary_calls_an_average_above_one_an_n_way_conflict():
    c = dict(shared_load_requests=100, shared_load_wavefronts=471)
    with_sites = _launch(shared=[(4, "s", "load", 100, 471, 100, 8)], **c)
    assert ("4.71 wavefronts/request (a 4.71-way bank conflict on average)"
            in cuda_lab.traffic_summary([with_sites]))
    # without per-site counters the conflict-free wavefronts are unknown: the figure alone
    plain = _launch(**c)
    del plain["sites"]
    assert "4.71 wavefronts/request," in cuda_lab.traffic_summary([plain])
    assert "bank conflict" not in cuda_lab.traffic_summary([plain])


def test_a_site_in_a_device_function_names_its_kernel_once():
    from grader.labs._cuda import site_in

    assert site_in("line 28", "gemm_kernel") == "line 28 of gemm_kernel"
    assert site_in("line 3 of dev", "gemm_kernel") == "line 3 of dev, in gemm_kernel"
