"""This machine's CPU: model, cores, SIMD width, nominal peak FLOP/s, measured copy bandwidth
and BLAS GEMM rate — the numbers a roofline (Williams, Waterman & Patterson, "Roofline",
CACM 52(4), 2009) is drawn from.

Nominal peak = cores x FMA units x SIMD lanes x 2 (an FMA is two FLOPs) x GHz.

* SIMD lanes come from the widest vector ISA the CPU reports (AVX-512: 512-bit registers,
  16 fp32 / 8 fp64 lanes; AVX2: 8 / 4; SSE or NEON: 4 / 2).
* FMA units per core: 2 on current x86 server cores (Intel Skylake-SP Gold/Platinum and later;
  AMD Zen 1-5 — Intel 64 and IA-32 Architectures Optimization Reference Manual §2; AMD Software
  Optimization Guide for Family 19h, §2.11). Zen 4 executes a 512-bit FMA as two 256-bit halves,
  so for it this formula overstates the peak. Override with ``KERNELLAB_FMA_UNITS``.
* GHz: the highest of cpufreq's ``cpuinfo_max_freq`` and ``/proc/cpuinfo``'s "cpu MHz"; a VM
  may hide its boost clock, so there the figure can be *below* what the cores reach. Override
  with ``KERNELLAB_CPU_GHZ``.

The nominal peak is therefore an estimate: an upper bound on the course machine (Zen 4's 512-bit
FMAs are double-pumped, which the formula does not count), possibly an underestimate elsewhere
(hidden boost clocks, cores with more than 2 FMA units). Code that flags "faster than the
machine" must not rely on it alone (the grader also compares with the BLAS measured in the
same run).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CPUInfo:
    model: str
    cores: int
    isa: str
    simd_bits: int
    fma_units: int
    ghz: float

    def lanes(self, dtype) -> int:
        """SIMD lanes for ``dtype`` (float32: simd_bits / 32)."""
        return self.simd_bits // (8 * np.dtype(dtype).itemsize)

    def peak_flops(self, dtype=np.float32, cores: int | None = None) -> float:
        """Nominal peak FLOP/s of ``cores`` cores (default: all) in ``dtype``."""
        cores = self.cores if cores is None else cores
        return cores * self.fma_units * self.lanes(dtype) * 2 * self.ghz * 1e9

    def formula(self, dtype=np.float32, cores: int | None = None) -> str:
        """The peak's arithmetic as text, for ``cores`` cores (default: all)."""
        cores = self.cores if cores is None else cores
        return (f"{cores} core{'s' if cores != 1 else ''} x {self.fma_units} FMA units x {self.lanes(dtype)} lanes "
                f"x 2 x {self.ghz:.2f} GHz = {self.peak_flops(dtype, cores) / 1e9:.1f} GFLOP/s")


def _cpuinfo() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    out.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return out


def cpu_info() -> CPUInfo:
    """Read this machine's CPU description (Linux /proc and /sys; elsewhere, best effort)."""
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    if "avx512f" in flags:
        isa, bits = "AVX-512", 512
    elif "avx2" in flags:
        isa, bits = "AVX2", 256
    elif "avx" in flags:
        isa, bits = "AVX", 256
    elif flags & {"sse2", "asimd", "neon"}:
        isa, bits = ("NEON" if flags & {"asimd", "neon"} else "SSE2"), 128
    else:
        isa, bits = "unknown", 128
    fma = 2 if ("fma" in flags or "asimd" in flags) else 1
    fma = int(os.environ.get("KERNELLAB_FMA_UNITS", fma))
    ghz = 0.0
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            ghz = int(f.read()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        ghz = max(ghz, float(info.get("cpu MHz", 0)) / 1e3)
    except ValueError:
        pass
    ghz = float(os.environ.get("KERNELLAB_CPU_GHZ", ghz or 2.0))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    model = info.get("model name") or platform.processor() or platform.machine()
    return CPUInfo(model=model, cores=cores, isa=isa, simd_bits=bits, fma_units=fma, ghz=ghz)


def copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Measured memory copy bandwidth in bytes/s (read + write counted), median of ``repeats``.

    ``nbytes`` should exceed the last-level cache so the copy streams from DRAM.
    """
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(time.perf_counter() - t0)
    return 2 * a.nbytes / float(np.median(ts))


def blas_gemm_flops(n: int = 1024, dtype=np.float32, repeats: int = 5) -> float:
    """Measured FLOP/s of numpy's matmul (the BLAS) at n x n x n, median of ``repeats``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype)
    np.matmul(a, b, out=c)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        ts.append(time.perf_counter() - t0)
    return 2.0 * n**3 / float(np.median(ts))


# ------------------------------------------------------------------------------------------------
# GPU (the gpu tier)

#: FP32 results per clock per SM (FMA counted once; x 2 for FLOPs) by compute capability major,
#: minor: CUDA C++ Programming Guide, "Arithmetic Instructions", throughput table ("32-bit
#: floating-point add, multiply, multiply-add"): 64 for 6.0, 7.x, 8.0; 128 for 5.x, 6.1, 6.2,
#: 8.6, 8.7, 8.9, 9.0 and later.
FP32_LANES_PER_SM = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}


@dataclass(frozen=True)
class GPUInfo:
    """One CUDA device: ``name``, compute capability ``cc`` (major, minor), ``sms``
    (multiprocessors), ``ghz`` (the clock the driver reports as CLOCK_RATE: the maximum boost
    clock), ``fp32_lanes`` per SM (:data:`FP32_LANES_PER_SM`)."""

    name: str
    cc: tuple
    sms: int
    ghz: float
    fp32_lanes: int

    def peak_flops(self) -> float:
        """Nominal FP32 (non-tensor) peak, FLOP/s: SMs x lanes x 2 x GHz."""
        return self.sms * self.fp32_lanes * 2 * self.ghz * 1e9

    def formula(self) -> str:
        return (f"{self.sms} SMs x {self.fp32_lanes} FP32 lanes x 2 x {self.ghz:.2f} GHz = "
                f"{self.peak_flops() / 1e12:.1f} TFLOP/s")


def gpu_info() -> GPUInfo:
    """The current CUDA device as numba-cuda reports it (gpu tier only: imports numba.cuda and
    creates a context). Raises RuntimeError on the sim tier."""
    from kernellab import device

    if device.select_tier() != "gpu":
        raise RuntimeError("gpu_info() needs the gpu tier (a real CUDA device)")
    from numba import cuda

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    cc = tuple(int(x) for x in dev.compute_capability)
    lanes = FP32_LANES_PER_SM.get(cc, 128)
    return GPUInfo(name=name, cc=cc, sms=int(dev.MULTIPROCESSOR_COUNT),
                   ghz=int(dev.CLOCK_RATE) / 1e6, fp32_lanes=lanes)
