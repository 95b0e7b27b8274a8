"""Tier selection happens before numba.cuda loads and reads back from numba's own config."""

import os
import subprocess
import sys

import pytest

from kernellab import device


def run(code, **env):
    e = dict(os.environ)
    e.pop("KERNELLAB_DEVICE", None)
    e.pop("NUMBA_ENABLE_CUDASIM", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=120)


def test_probe_is_fast_and_safe():
    import time
    t0 = time.perf_counter()
    count, note = device.probe_cuda_driver()
    # well under a millisecond without a driver; cuInit on a real GPU can take a few 100 ms
    assert time.perf_counter() - t0 < 5
    assert count >= 0 and isinstance(note, str) and note


def test_auto_tier_matches_driver_and_numba_config():
    count, _ = device.probe_cuda_driver()
    r = run("import kernellab; from kernellab import device; "
            "print(kernellab.TIER, device.simulator_active())")
    assert r.returncode == 0, r.stderr
    tier, sim = r.stdout.split()
    assert tier == ("gpu" if count else "sim")
    assert sim == str(tier == "sim")


def test_forced_sim_enables_numba_simulator():
    r = run("import kernellab\nfrom numba import cuda\n"
            "from numba.cuda.core import config\nprint(kernellab.TIER, config.ENABLE_CUDASIM)",
            KERNELLAB_DEVICE="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["sim", "1"]


def test_bad_tier_value_is_a_clear_error():
    # importing kernellab still works (CPU chapters and labs need no GPU tier) ...
    r = run("import kernellab; print(kernellab.TIER)", KERNELLAB_DEVICE="tpu")
    assert r.returncode == 0 and r.stdout.split() == ["None"], r.stderr
    # ... and whatever needs the tier gets the error in plain words
    r = run("import kernellab\nfrom kernellab import device\ntry:\n    device.select_tier()\n"
            "except device.DeviceError as e:\n    print(e)", KERNELLAB_DEVICE="tpu")
    assert "KERNELLAB_DEVICE='tpu'" in r.stdout
    kl = os.path.join(os.path.dirname(sys.executable), "kernellab")
    r = subprocess.run([kl, "doctor"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, KERNELLAB_DEVICE="tpu"))
    assert r.returncode == 2 and "KERNELLAB_DEVICE='tpu'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(device.probe_cuda_driver()[0] > 0, reason="machine has a GPU")
def test_forcing_gpu_without_one_says_why():
    r = run("import kernellab\nkernellab.device.select_tier()", KERNELLAB_DEVICE="gpu")
    assert r.returncode != 0
    assert "KERNELLAB_DEVICE=gpu forces the gpu tier, but no GPU was found" in r.stderr


@pytest.fixture
def gpu_forced_without_one(monkeypatch):
    """This process as on a machine without a GPU and ``KERNELLAB_DEVICE=gpu`` (the tier not
    chosen yet; the real choice is restored afterwards)."""
    monkeypatch.setattr(device, "_chosen", {})
    monkeypatch.setattr(device, "_error", [])
    monkeypatch.setattr(device, "probe_cuda_driver",
                        lambda: (0, "no CUDA driver library (libcuda) found"))
    monkeypatch.setenv("KERNELLAB_DEVICE", "gpu")
    monkeypatch.setenv("KERNELLAB_PEAK", "off")  # doctor: no FMA-peak measurement


def _says_how_to_fix(text: str) -> None:
    assert "KERNELLAB_DEVICE=gpu forces the gpu tier, but no GPU was found" in text, text
    assert "unset KERNELLAB_DEVICE (or set KERNELLAB_DEVICE=sim) to use the simulator" in text
    assert "neither" not in text and "Traceback" not in text


def test_doctor_with_gpu_forced_without_one_says_how_to_fix(gpu_forced_without_one, capsys):
    from kernellab.cli import main

    assert main(["doctor"]) == 2
    _says_how_to_fix(capsys.readouterr().err)


def test_grade_with_gpu_forced_without_one_says_how_to_fix(gpu_forced_without_one, capsys):
    """The CUDA labs' "cannot grade here" block: nothing is run, so this is cheap."""
    from kernellab.cli import main

    sol = os.path.join(os.path.dirname(__file__), "..", "..", "solutions", "02_gemm_cuda.ipynb")
    assert main(["grade", "gemm-cuda", sol, "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "CANNOT GRADE ON THIS MACHINE" in out
    _says_how_to_fix(out)


def test_numba_cuda_imported_first_in_other_mode_is_detected():
    r = run("import os\nos.environ['NUMBA_ENABLE_CUDASIM']='0'\nfrom numba import cuda\n"
            "import kernellab\nkernellab.device.select_tier()", KERNELLAB_DEVICE="sim")
    assert r.returncode != 0
    assert "import kernellab first" in r.stderr
