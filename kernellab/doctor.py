"""``kernellab doctor``: what this machine is, as the course sees it.

Prints the device tier and why, Python / numba / numba-cuda / numpy versions, the BLAS numpy
uses (library, version, the kernel it chose, and the environment variables that force one), the
CPU model, core count, SIMD ISA, the measured FMA peak (one core, all cores) and the nominal peak
from /proc (:mod:`kernellab.machine`), the thread settings (:mod:`kernellab.threads`), and the
GPU's name on the gpu tier. The measured peak is measured the first time (a few seconds) and
cached (``KERNELLAB_PEAK=off`` skips it).
"""

from __future__ import annotations

import platform
from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def collect() -> dict:
    """The doctor's facts as a dict (JSON-serialisable)."""
    from kernellab import device, machine, threads

    info = machine.cpu_info()
    import numpy as np

    mp = machine.measured_peak()
    measured = None if mp is None else {
        "one_core_fp32_gflops": mp.flops(np.float32, 1) / 1e9,
        "all_cores_fp32_gflops": mp.flops(np.float32) / 1e9,
        "one_core_fp64_gflops": mp.flops(np.float64, 1) / 1e9,
        "all_cores_fp64_gflops": mp.flops(np.float64) / 1e9,
        "threads": mp.threads, "vector_bits": mp.vector_bits,
        "measurements": mp.measurements, "quiet": mp.quiet, "cache": mp.source}

    facts = {
        "device": device.describe(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "numba-cuda": _version("numba-cuda"),
        "cupy": _version("cupy-cuda12x") if _version("cupy-cuda12x") != "not installed"
        else _version("cupy-cuda13x"),
        "cpu": {"model": info.model, "cores": info.cores, "isa": info.isa,
                "simd_bits": info.simd_bits, "fma_units": info.fma_units, "ghz": info.ghz,
                "peak_fp32_gflops": info.peak_flops(np.float32) / 1e9,
                "peak_fp64_gflops": info.peak_flops(np.float64) / 1e9,
                "peak_formula_fp32": info.formula(np.float32),
                "measured_peak": measured},
        "blas_kernel": machine.blas_kernel(),
        "threads": threads.status(),
    }
    facts["simulator_active"] = device.simulator_active()
    if facts["simulator_active"]:
        from kernellab import sim
        from kernellab.sim import ptx
        ok, why = ptx.ptx_available()
        facts["sim"] = {"options": sim.options(), "gpu_compile": ok, "gpu_compile_note": why,
                        "greenlet": _version("greenlet")}
    return facts


def render(f: dict) -> str:
    d, c, t = f["device"], f["cpu"], f["threads"]
    blas = ", ".join(f"{b.get('internal_api')} {b.get('version')} ({b.get('num_threads')} threads, "
                     f"{b.get('architecture')})" for b in t.get("blas", [])
                     if b.get("user_api") == "blas") or "none found"
    lines = [
        "Kernel Lab doctor",
        f"  tier          {d['tier']}  ({d['reason']}; numba-cuda simulator "
        f"{'on' if f['simulator_active'] else 'off'})",
    ]
    if d.get("gpu_name"):
        lines.append(f"  GPU           {d['gpu_name']}")
    if f.get("sim"):
        o = f["sim"]["options"]
        lines.append(f"  sim engine    executor {o['executor']}, checks {o['checks']}, greenlet "
                     f"{f['sim']['greenlet']}; GPU compile check "
                     + ("on (numba-cuda compile_ptx, sm_80)" if f["sim"]["gpu_compile"]
                        else f"unavailable: {f['sim']['gpu_compile_note']}"))
    if "grader_sandbox" in f:  # added by `kernellab doctor` (the grader's, not the runtime's)
        lines.append(f"  grader        worker in {f['grader_sandbox']}"
                     + (" (no network, read-only filesystem but its work folder and caches)"
                        if f["grader_sandbox"] == "bubblewrap" else
                        " (resource limits only: install bubblewrap for an OS sandbox)"))
    if "grader_new_processes" in f:
        lines.append(f"                new processes {f['grader_new_processes']}")
    lines += [
        f"  python        {f['python']}",
        f"  numpy         {f['numpy']}",
        f"  numba         {f['numba']}",
        f"  numba-cuda    {f['numba-cuda']}",
        f"  cupy          {f['cupy']}",
        f"  BLAS          {blas}",
        _blas_kernel_line(f.get("blas_kernel") or {}),
        f"  CPU           {c['model']}",
        f"  cores         {c['cores']}",
        f"  SIMD          {c['isa']} ({c['simd_bits']}-bit)",
        _measured_line(c.get("measured_peak")),
        f"  nominal peak  fp32 {c['peak_formula_fp32']}; fp64 {c['peak_fp64_gflops']:.1f} GFLOP/s"
        " (from /proc's clock: not used as a limit)",
        f"  threads       numba {t.get('numba_threads')} ({t.get('numba_threading_layer')}); "
        f"{t['note']}",
    ]
    return "\n".join(lines)


def _measured_line(m: dict | None) -> str:
    if not m:
        return "  measured peak none (KERNELLAB_PEAK=off, or the microbenchmark failed)"
    bits = f", {m['vector_bits']}-bit FMAs" if m.get("vector_bits") else ""
    from kernellab import machine

    busy = "" if m.get("quiet") else (
        "; the machine was busy: measured again next time" if m["measurements"]
        < machine.PEAK_MAX_TRIES else "; the machine was busy every time: KERNELLAB_PEAK="
        "remeasure measures again")
    return (f"  measured peak fp32 {m['one_core_fp32_gflops']:.1f} GFLOP/s one core, "
            f"{m['all_cores_fp32_gflops']:.1f} all {m['threads']} cores; fp64 "
            f"{m['one_core_fp64_gflops']:.1f} / {m['all_cores_fp64_gflops']:.1f} GFLOP/s "
            f"(FMA microbenchmark{bits}, best of {m['measurements']} run(s){busy})")


def _blas_kernel_line(b: dict) -> str:
    if not b:
        return "  BLAS kernel   unknown (threadpoolctl not installed or no BLAS loaded)"
    forced = (f"forced by {b['forced_by']}" if b.get("forced_by")
              else "its own choice for this CPU (no variable forces one)")
    return f"  BLAS kernel   {b.get('internal_api')} {b.get('architecture') or '?'}: {forced}"
