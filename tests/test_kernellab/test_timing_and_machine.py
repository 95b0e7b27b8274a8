"""Timing harness, thread control and machine facts."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from kernellab import machine, threads, timing


def test_time_fn_warmup_and_fresh_args():
    calls = []

    def fn(x):
        calls.append(x)
        time.sleep(0.002)

    counter = iter(range(100))
    t = timing.time_fn(fn, setup=lambda: (next(counter),), warmup=2, repeats=5)
    assert calls == list(range(7))  # 2 warm-up + 5 timed, each with fresh arguments
    assert len(t.times) == 5 and 0.0015 < t.median < 0.5
    assert t.q1 <= t.median <= t.q3 and t.spread >= 0
    d = t.to_dict()
    assert d["n"] == 5 and d["clock"] == "wall"
    with pytest.raises(ValueError):
        timing.time_fn(fn, 1, repeats=0)


def test_interleaved_orders_calls_and_ratios():
    order = []

    def fast():
        order.append("f")
        time.sleep(0.001)

    def slow():
        order.append("s")
        time.sleep(0.004)

    seen = []
    res = timing.interleaved({"slow": slow, "fast": fast}, baseline="slow", warmup=1, rounds=4,
                             after=lambda name, args: seen.append(name))
    assert order == ["s", "f"] + ["s", "f"] * 4  # warm-up, then round-robin
    assert seen == ["slow", "fast"] * 4
    assert 1.5 < res.speedup("fast") < 10
    lo, hi = res.speedup_range("fast")
    assert lo <= res.speedup("fast") <= hi
    assert res.speedup("slow") == 1.0
    assert "in_effect" in res.thread_status
    json.dumps(res.to_dict())
    with pytest.raises(KeyError):
        timing.interleaved({"a": fast}, baseline="b")


def test_thread_settings_reach_the_libraries_when_kernellab_is_first():
    code = ("import kernellab, os; from kernellab import threads; s = threads.status();"
            "print(s['in_effect'], os.environ['OMP_WAIT_POLICY'],"
            " os.environ['OPENBLAS_THREAD_TIMEOUT'])")
    env = {k: v for k, v in os.environ.items() if k not in threads.SETTINGS}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.split() == ["True", "passive", "4"], r.stderr
    late = "import numpy, kernellab; from kernellab import threads; print(threads.status()['note'])"
    r = subprocess.run([sys.executable, "-c", late], capture_output=True, text=True, env=env)
    assert "WARNING" in r.stdout  # numpy first: the report says the ratios may be biased


def test_pin_restores_thread_counts():
    import numba
    before = numba.get_num_threads()
    with threads.pin(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with pytest.raises(ValueError):
        with threads.pin(0):
            pass


def test_cpu_info_and_peak_formula(monkeypatch):
    info = machine.cpu_info()
    assert info.cores >= 1 and info.simd_bits in (128, 256, 512) and info.ghz > 0
    assert info.lanes(np.float32) == 2 * info.lanes(np.float64)
    assert info.peak_flops(np.float32) == pytest.approx(
        info.cores * info.fma_units * info.lanes(np.float32) * 2 * info.ghz * 1e9)
    monkeypatch.setenv("KERNELLAB_CPU_GHZ", "3.0")
    monkeypatch.setenv("KERNELLAB_FMA_UNITS", "1")
    info2 = machine.cpu_info()
    assert info2.ghz == 3.0 and info2.fma_units == 1
    assert "GFLOP/s" in info2.formula()


def test_measured_rates_are_positive_and_below_peak():
    bw = machine.copy_bandwidth(nbytes=16 * 2**20, repeats=3)
    assert 1e8 < bw < 1e13
    f = machine.blas_gemm_flops(n=256, repeats=3)
    peak = machine.measured_peak()
    assert peak is not None
    # the BLAS on all cores never beats the measured all-core FMA peak (with the gates' margin)
    assert 1e8 < f < peak.flops(np.float32) * machine.PEAK_MARGIN


def test_measured_peak_is_the_widest_fma_on_every_core():
    info, peak = machine.cpu_info(), machine.measured_peak()
    assert peak is not None and peak.threads == info.cores
    for dt in ("float32", "float64"):
        one, every = peak.one_core[dt], peak.all_cores[dt]
        # all cores: at most the cores' one-core rates (the figure is never below one core's:
        # fma_peak keeps the larger of the two)
        assert 1e9 < one and every <= info.cores * one * 1.1, (dt, one, every)
    # fp64 lanes are half as many as fp32 lanes: about half the rate
    assert 0.35 < peak.one_core["float64"] / peak.one_core["float32"] < 0.65
    if info.isa in ("AVX-512", "AVX2", "AVX"):  # x86: the JIT's widest FMA is the ISA's width
        assert peak.vector_bits == info.simd_bits
    assert peak.flops(np.float32, 1) == peak.one_core["float32"]
    assert "measured FMA peak, 1 core" in peak.describe(np.float32, 1)


def test_measured_peak_cache_keeps_the_best_and_remeasures_busy_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KERNELLAB_PEAK", raising=False)
    runs = []
    rate = [100e9]

    def fake(info):
        rate[0] += 10e9 if len(runs) % 2 else -30e9  # 70, 80, 50 ...: never monotone
        runs.append(rate[0])
        r = {"one_core_flops": rate[0], "all_cores_flops": 2 * rate[0], "vector_bits": 512}
        return {"threads": 2, "float32": r, "float64": r,
                "background": 0.5 if len(runs) < 3 else 0.0}

    monkeypatch.setattr(machine, "_run_microbenchmark", fake)
    p1 = machine.measured_peak()  # busy: provisional
    assert len(runs) == 1 and not p1.quiet
    p2 = machine.measured_peak()  # measured again, the best kept
    assert len(runs) == 2 and p2.one_core["float32"] == max(runs)
    p3 = machine.measured_peak()  # third run is quiet: final
    assert len(runs) == 3 and p3.quiet and p3.one_core["float32"] == max(runs)
    machine.measured_peak()
    assert len(runs) == 3  # from the cache
    monkeypatch.setenv("KERNELLAB_PEAK", "remeasure")
    assert machine.measured_peak().measurements == 4 and len(runs) == 4
    assert machine.peak_cache_path().parent == tmp_path
    # a cache file edited to lift the limits above any clock is ignored: measured again
    monkeypatch.delenv("KERNELLAB_PEAK")
    fast = {"one_core_flops": 1e18, "all_cores_flops": 2e18}
    machine.peak_cache_path().write_text(json.dumps(
        {"runs": [{"threads": 2, "float32": fast, "float64": fast, "background": 0.0}]}))
    assert machine.measured_peak().one_core["float32"] < 1e18 and len(runs) == 5
    # off: no measured peak; a gate's limit then says it stands on the nominal peak
    monkeypatch.setenv("KERNELLAB_PEAK", "off")
    assert machine.measured_peak() is None
    lim = machine.speed_limit(np.float32, cores=1)
    assert "nominal" in lim.text
    assert lim.gflops == round(machine.PEAK_MARGIN * machine.cpu_info().peak_flops(
        np.float32, 1) / 1e9, 1)


def test_blas_kernel_names_the_variables_that_force_it():
    b = machine.blas_kernel()
    if not b:
        pytest.skip("threadpoolctl sees no BLAS")
    assert b["internal_api"]
    forced = [k for k in machine.BLAS_KERNEL_VARIABLES.get(b["internal_api"], ())
              if os.environ.get(k)]
    assert all(k in b["forced_by"] for k in forced) and bool(b["forced_by"]) == bool(forced)


def test_doctor_cli_prints_the_facts():
    kl = os.path.join(os.path.dirname(sys.executable), "kernellab")
    r = subprocess.run([kl, "doctor"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for word in ("tier", "numba-cuda", "BLAS", "BLAS kernel", "CPU", "cores", "measured peak",
                 "nominal peak", "threads"):
        assert word in r.stdout
    doctor_text = r.stdout
    r = subprocess.run([kl, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    facts = json.loads(r.stdout)
    assert facts["device"]["tier"] in ("gpu", "sim")
    assert facts["cpu"]["peak_fp32_gflops"] > 0
    mp = facts["cpu"]["measured_peak"]
    assert mp["one_core_fp32_gflops"] > 0
    assert mp["all_cores_fp32_gflops"] >= mp["one_core_fp32_gflops"]
    assert "architecture" in facts["blas_kernel"]
    from grader.sandbox import sandbox_off
    from kernellab.machine.process_filter import unavailable

    said = facts["grader_new_processes"]  # the worker's seccomp filter
    assert f"new processes {said}" in doctor_text
    if unavailable() is None and not sandbox_off():
        assert said.startswith("refused") and "torch-op" in said, said
    else:
        assert said.startswith("allowed ("), said
    r = subprocess.run([kl, "list"], capture_output=True, text=True, timeout=120)
    assert "gemm-cpu" in r.stdout


def test_fma_peak_figures_bound_each_other(monkeypatch):
    """Interference only lowers a rate: a one-core run that came out below the all-core run's
    per-core rate is raised to it, and the all-core figure is never below one core's."""
    import time as _time

    from kernellab.machine import fma_peak

    def fake(rates):
        def best_rate(run, flops_per_pass, clock):
            return rates[clock is _time.thread_time], 1
        return best_rate

    # one core measured low (50) beside two cores at 2 x 80: one core is 80
    monkeypatch.setattr(fma_peak, "_best_rate", fake({True: 50e9, False: 160e9}))
    out = fma_peak.measure(2)
    assert out["float32"]["one_core_flops"] == 80e9 and out["float32"]["all_cores_flops"] == 160e9
    # all cores measured below one core: the all-core figure is one core's
    monkeypatch.setattr(fma_peak, "_best_rate", fake({True: 100e9, False: 60e9}))
    out = fma_peak.measure(2)
    assert out["float64"]["one_core_flops"] == 100e9 and out["float64"]["all_cores_flops"] == 100e9
