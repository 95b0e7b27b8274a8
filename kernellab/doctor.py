"""``kernellab doctor``: what this machine is, as the course sees it.

Prints the device tier and why, Python / numba / numba-cuda / numpy versions, the BLAS numpy
uses, the CPU model, core count, SIMD ISA and nominal peak FLOP/s
(:mod:`kernellab.machine`), the thread settings (:mod:`kernellab.threads`), and the GPU's name
on the gpu tier.
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
                "peak_formula_fp32": info.formula(np.float32)},
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
    lines += [
        f"  python        {f['python']}",
        f"  numpy         {f['numpy']}",
        f"  numba         {f['numba']}",
        f"  numba-cuda    {f['numba-cuda']}",
        f"  cupy          {f['cupy']}",
        f"  BLAS          {blas}",
        f"  CPU           {c['model']}",
        f"  cores         {c['cores']}",
        f"  SIMD          {c['isa']} ({c['simd_bits']}-bit)",
        f"  nominal peak  fp32 {c['peak_formula_fp32']}; fp64 {c['peak_fp64_gflops']:.1f} GFLOP/s",
        f"  threads       numba {t.get('numba_threads')} ({t.get('numba_threading_layer')}); "
        f"{t['note']}",
    ]
    return "\n".join(lines)
