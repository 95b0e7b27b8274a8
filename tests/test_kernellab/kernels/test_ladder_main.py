"""The ``main`` the CUDA ladders share (kernellab.kernels._ladder): a version is validated
against the float64 golden before it is timed, and one that fails is reported, not timed; the
sim tier's times are the model's, deterministic and equal to the closed-form counters'; every
ladder's ``python -m kernellab.kernels.<ladder>`` runs on the sim tier; bad arguments get plain
words. The gpu tier's bookkeeping (device arrays, NaN refills, the last round re-checked,
baselines) runs here on the simulator with a wall clock standing in for CUDA events.

Sizes are tiny (the simulator interprets every thread): the file takes about 25 s of CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernellab

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim", reason="needs the sim tier")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mods():
    from kernellab.kernels import _ladder, gemm_cuda
    return _ladder, gemm_cuda


def test_a_wrong_version_is_reported_failing_and_not_timed(mods):
    _ladder, g = mods

    def corner_dropped(A, B, C):        # the last element of C never written
        g.gemm_v2(A, B, C)
        C[-1, -1] = np.nan

    def stub(A, B, C):                  # touches nothing: C stays NaN
        return None

    def raises(A, B, C):
        raise ValueError("no kernel here")

    def scribbles_on_a(A, B, C):
        g.gemm_v2(A, B, C)
        A[0, 0] += 1.0

    versions = {"v2_coalesced": g.gemm_v2, "corner_dropped": corner_dropped, "stub": stub,
                "raises": raises, "scribbles_on_a": scribbles_on_a}
    res = _ladder.run(versions, g.ladder_case(16, 16, 16), ladder="gemm_cuda")
    r = res.results
    assert r["v2_coalesced"].ok and r["v2_coalesced"].seconds > 0
    assert r["v2_coalesced"].message == "correct"
    for name in ("corner_dropped", "stub", "raises", "scribbles_on_a"):
        assert not r[name].ok and r[name].seconds is None and r[name].rate is None, name
    assert "1 of 256 elements outside the tolerance" in r["corner_dropped"].message
    assert "256 of 256 elements outside the tolerance" in r["stub"].message
    assert r["raises"].message == "raised ValueError: no kernel here"
    assert r["scribbles_on_a"].message == "modified its input(s) A"
    assert not res.ok
    text = _ladder.render(res)
    assert "FAILED (not timed): corner_dropped, stub, raises, scribbles_on_a" in text


def test_a_version_wrong_only_at_a_ragged_size_is_not_timed(mods):
    _ladder, g = mods

    def square_only(A, B, C):           # right when M = N = K, wrong otherwise
        if A.shape[0] == B.shape[1] == A.shape[1]:
            g.gemm_v2(A, B, C)
        else:
            C[...] = 0.0

    res = _ladder.run({"square_only": square_only}, g.ladder_case(16, 16, 16),
                      also_check=[g.ladder_case(9, 5, 7, seed=1)])
    r = res.results["square_only"]
    assert not r.ok and r.seconds is None and r.message.startswith("at M=9 N=5 K=7: ")
    assert res.checked == ["M=N=K=16", "M=9 N=5 K=7"]


def test_sim_times_are_the_models_and_deterministic(mods):
    """Two runs give the same bits, and each equals the model of the closed-form counters of
    gemm_cuda.expected_counters (independent of the runner's own bookkeeping)."""
    _ladder, g = mods
    from kernellab.sim import model

    n = 32
    versions = {k: g.LADDER[k] for k in ("v1_naive", "v2_coalesced", "v3_shared_tiles")}
    a = _ladder.run(versions, g.ladder_case(n, n, n))
    b = _ladder.run(versions, g.ladder_case(n, n, n))
    assert a.clock == "model a100" and a.tier == "sim"
    for name in versions:
        ra, rb = a.results[name], b.results[name]
        assert ra.ok and ra.seconds == rb.seconds and ra.spread == 0.0 and ra.launches == 1
        c = g.expected_counters(name, n, n, n)
        c["flops"] = g.gemm_flops(n, n, n)
        assert ra.seconds == pytest.approx(model.modelled_time(c, "a100").seconds, rel=1e-12)
        assert ra.rate == pytest.approx(g.gemm_flops(n, n, n) / ra.seconds / 1e9)
    assert a.results["v2_coalesced"].seconds < a.results["v1_naive"].seconds  # coalescing
    assert a.results["v1_naive"].speedup == 1.0


def test_python_m_gemm_cuda_runs_on_the_sim_tier(tmp_path):
    out = tmp_path / "gemm.json"
    env = {**os.environ, "KERNELLAB_DEVICE": "sim", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "kernellab.kernels.gemm_cuda", "--size", "16",
                        "--json", str(out)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gemm_cuda: M=N=K=16 (sim tier; clock: model a100)" in r.stdout
    assert "every version correct" in r.stdout and "Traceback" not in r.stderr
    d = json.loads(out.read_text())
    assert d["ok"] is True and d["checked"] == ["M=N=K=16", "M=N=K=1", "M=33 N=17 K=20"]
    assert list(d["results"]) == ["v1_naive", "v2_coalesced", "v3_shared_tiles",
                                  "v4_register_tiles"]
    assert all(v["ok"] and v["seconds"] > 0 for v in d["results"].values())


@pytest.mark.parametrize("argv,needle", [
    (["--size", "0"], "need M, N, K >= 1"),
    (["--size", "4", "--rounds", "0"], "--rounds must be >= 1"),
    (["--profile", "nosuchgpu", "--size", "4"], "nosuchgpu"),
])
def test_bad_arguments_get_plain_words(mods, capsys, argv, needle):
    _, g = mods
    with pytest.raises(SystemExit) as exc:
        g.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize("module,argv", [
    ("reduce_cuda", ["--n", "700"]),
    ("softmax_cuda", ["--shape", "2", "100"]),
    ("softmax_cuda", ["--shape", "1", "40", "--dtype", "float16"]),
    ("conv_cuda", ["--shape", "1", "2", "5", "6", "3"]),
    ("attention_cuda", ["--shape", "1", "1", "20", "16", "--causal"]),
])
def test_every_ladder_main_validates_and_times(module, argv, tmp_path, capsys):
    import importlib

    mod = importlib.import_module(f"kernellab.kernels.{module}")
    out = tmp_path / "r.json"
    assert mod.main(argv + ["--json", str(out)]) == 0
    assert "every version correct" in capsys.readouterr().out
    d = json.loads(out.read_text())
    assert list(d["results"]) == list(mod.LADDER)
    assert all(v["ok"] and v["seconds"] > 0 and v["rate"] > 0 for v in d["results"].values())


def test_gpu_bookkeeping_on_the_simulator(mods, monkeypatch):
    """The gpu tier's path, with a wall clock for the CUDA events: each version checked on the
    device arrays, timed with NaN-refilled outputs, the last round's output checked again (a
    version that computes C on its first call only fails there), baselines timed beside."""
    _ladder, g = mods
    from kernellab import timing

    real_clock = timing._clock
    monkeypatch.setattr(timing, "_clock", lambda kind: real_clock("wall"))
    monkeypatch.setattr(kernellab, "TIER", "gpu")
    calls = {"n": 0}

    def first_call_only(A, B, C):
        calls["n"] += 1
        if calls["n"] == 1:
            g.gemm_v2(A, B, C)

    case = g.ladder_case(16, 16, 16)
    res = _ladder.run({"v2_coalesced": g.gemm_v2, "first_call_only": first_call_only}, case,
                      baselines=[_ladder.copy_baseline(case, "A")], rounds=2, warmup=0)
    r = res.results
    assert res.tier == "gpu" and res.clock == "cuda events" and res.rounds == 2
    assert r["v2_coalesced"].ok and len(r["v2_coalesced"].times) == 2
    assert not r["first_call_only"].ok and r["first_call_only"].seconds is None
    assert r["first_call_only"].message.startswith("its timed calls' output is wrong")
    base = r["device copy (cudaMemcpy D2D)"]
    assert base.baseline and base.ok and base.seconds > 0
    assert base.rate == pytest.approx(2 * case.inputs["A"].nbytes / base.seconds / 1e9)


def test_reduce_measure_gpu_goes_through_the_runner(monkeypatch):
    """reduce_cuda.measure_gpu (chapter 3, make gpu-check) is the runner's gpu path: its
    figures are the runner's, on the simulator with a wall clock for the CUDA events."""
    from kernellab import device, timing
    from kernellab.kernels import reduce_cuda as rc

    real_clock = timing._clock
    monkeypatch.setattr(timing, "_clock", lambda kind: real_clock("wall"))
    monkeypatch.setattr(kernellab, "TIER", "gpu")
    monkeypatch.setattr(device, "select_tier", lambda: "gpu")
    n = 700                             # 3 blocks of v1, the last ragged
    m = rc.measure_gpu(n, 1)
    assert list(m["seconds"]) == list(rc.LADDER) and m["rounds"] == 1
    for name, s in m["seconds"].items():
        assert m["gbps"][name] == pytest.approx(4 * n / s / 1e9)
        assert m["fraction_of_copy"][name] == pytest.approx(m["gbps"][name] / m["copy_gbps"])
        assert 0 <= m["errors"][name] <= m["error_bounds"][name]
    assert m["copy_gbps"] > 0 and m["copy_kernel_gbps"] > 0
    assert {"copy", "copy_kernel"} <= set(m["spread"])
