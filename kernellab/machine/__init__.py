"""This machine's CPU: model, cores, SIMD width, peak FLOP/s (nominal and measured), measured
copy bandwidth and BLAS GEMM rate — the numbers a roofline (Williams, Waterman & Patterson,
"Roofline", CACM 52(4), 2009) is drawn from.

Two peaks:

* **measured peak** (:func:`measured_peak`): the best FMA throughput of a calibrated microbenchmark
  (:mod:`kernellab.machine.fma_peak`: independent FMA chains at the widest vector width the JIT
  emits, one core and all cores, fp32 and fp64), cached per machine and software version. This is
  the figure every "faster than the machine" limit and every "% of peak" uses.
* **nominal peak** (:meth:`CPUInfo.peak_flops`): cores x FMA units x SIMD lanes x 2 (an FMA is
  two FLOPs) x GHz, from what ``/proc`` reports. Shown beside the measured one, never used as a
  limit: a VM may hide its boost clock (then it is too low), and Zen 4 executes a 512-bit FMA as
  two 256-bit halves (then it is twice too high).

For the nominal peak:

* SIMD lanes come from the widest vector ISA the CPU reports (AVX-512: 512-bit registers,
  16 fp32 / 8 fp64 lanes; AVX2: 8 / 4; SSE or NEON: 4 / 2).
* FMA units per core: 2 on current x86 server cores (Intel Skylake-SP Gold/Platinum and later;
  AMD Zen 1-5 — Intel 64 and IA-32 Architectures Optimization Reference Manual §2; AMD Software
  Optimization Guide for Family 19h, §2.11). Override with ``KERNELLAB_FMA_UNITS``.
* GHz: the highest of cpufreq's ``cpuinfo_max_freq`` and ``/proc/cpuinfo``'s "cpu MHz". Override
  with ``KERNELLAB_CPU_GHZ`` (the measured peak ignores it).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

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
        """Nominal (from /proc, not measured) peak FLOP/s of ``cores`` cores (default: all) in
        ``dtype``."""
        cores = self.cores if cores is None else cores
        return cores * self.fma_units * self.lanes(dtype) * 2 * self.ghz * 1e9

    def formula(self, dtype=np.float32, cores: int | None = None) -> str:
        """The peak's arithmetic as text, for ``cores`` cores (default: all)."""
        cores = self.cores if cores is None else cores
        return (f"{cores} core{'s' if cores != 1 else ''} x {self.fma_units} FMA units x "
                f"{self.lanes(dtype)} lanes x 2 x {self.ghz:.2f} GHz = "
                f"{self.peak_flops(dtype, cores) / 1e9:.1f} GFLOP/s")

    def flags(self) -> list[str]:
        """The CPU's feature flags as /proc/cpuinfo lists them (sorted)."""
        info = _cpuinfo()
        return sorted(set(info.get("flags", info.get("Features", "")).split()))


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


#: Environment variables that make a BLAS use another kernel than the one it would pick for
#: this CPU (OpenBLAS README, "Runtime variables"; Intel oneMKL Developer Guide,
#: "Instruction Set Specific Dispatching on Intel Architectures").
BLAS_KERNEL_VARIABLES = {
    "openblas": ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"),
    "mkl": ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE"),
}


def blas_kernel() -> dict:
    """numpy's BLAS as threadpoolctl sees it in this process: ``internal_api`` (openblas, mkl,
    blis), ``version``, ``architecture`` (the kernel OpenBLAS chose, e.g. ``SkylakeX`` or
    ``Haswell``; None where the library does not say) and ``forced_by``: the set variables of
    :data:`BLAS_KERNEL_VARIABLES` that steer its choice, as ``NAME=value`` text (empty: none).
    Empty dict when threadpoolctl is not installed or no BLAS is loaded."""
    import numpy  # noqa: F401  (loads the BLAS)

    from kernellab.threads import blas_info

    libs = [lib for lib in blas_info() if lib.get("user_api") == "blas"]
    if not libs:
        return {}
    lib = libs[0]
    api = str(lib.get("internal_api") or "")
    forced = [f"{k}={os.environ[k]}" for k in BLAS_KERNEL_VARIABLES.get(api, ())
              if os.environ.get(k)]
    return {"internal_api": api, "version": lib.get("version"),
            "architecture": lib.get("architecture"), "forced_by": ", ".join(forced)}


# ------------------------------------------------------------------------------------------------
# Measured peak

#: The factor by which a timed call may exceed the measured peak before a grader calls it
#: implausible ("the timer was cheated"). The peak is the best of short repetitions, measured
#: at another moment than the call: what can make an honest kernel faster than it is a higher
#: clock during the call (boost clocks move with load and temperature; x86 server parts boost
#: one core well above the all-core clock — vendor data sheets) or a peak measured on a busy
#: machine. 1.5 leaves the call half again above the measured peak; a cheated timer (a cached
#: result, work done outside the call) reads many times faster.
PEAK_MARGIN = 1.5

#: Bumped when the microbenchmark changes, so that cached results of an older one are not used
#: (2: the one-core figure is at least the all-core run's per-core rate; 3: as many chains as
#: the vector registers hold, :func:`kernellab.machine.fma_peak.shape`).
PEAK_VERSION = 3
#: A measurement during which other processes kept more than this fraction of the machine busy
#: is provisional: later calls measure again (at most ``PEAK_MAX_TRIES`` in all) and keep the
#: best. Interference only lowers a peak, so the best over measurements is the upper bound.
PEAK_BUSY = 0.10
PEAK_MAX_TRIES = 3


@dataclass(frozen=True)
class MeasuredPeak:
    """FMA peak FLOP/s as measured by :mod:`kernellab.machine.fma_peak`: ``one_core`` and
    ``all_cores`` (``threads`` threads) per dtype name (``"float32"``, ``"float64"``),
    ``vector_bits`` the widest FMA register width in the kernel's assembly (None if not x86),
    ``quiet`` False when every measurement so far ran on a busy machine, ``source`` the cache
    file."""

    one_core: dict
    all_cores: dict
    threads: int
    vector_bits: int | None
    measurements: int
    quiet: bool
    source: str

    def flops(self, dtype=np.float32, cores: int | None = None) -> float:
        """Measured peak FLOP/s of ``cores`` cores (default: all) in ``dtype``."""
        name = np.dtype(dtype).name
        cores = self.threads if cores is None else cores
        if cores <= 1:
            return self.one_core[name]
        if cores >= self.threads:
            return self.all_cores[name]
        return min(self.all_cores[name], cores * self.one_core[name])

    def describe(self, dtype=np.float32, cores: int | None = None) -> str:
        """E.g. ``measured FMA peak, 1 core: 116.0 GFLOP/s (float32, 512-bit vectors)``."""
        cores = self.threads if cores is None else min(cores, self.threads)
        bits = f", {self.vector_bits}-bit vectors" if self.vector_bits else ""
        return (f"measured FMA peak, {cores} core{'s' if cores != 1 else ''}: "
                f"{self.flops(dtype, cores) / 1e9:.1f} GFLOP/s ({np.dtype(dtype).name}{bits})")


def _peak_key(info: CPUInfo) -> dict:
    import importlib.metadata as md

    from kernellab import codegen

    def version(dist):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:  # pragma: no cover
            return "?"
    return {"model": info.model, "flags": info.flags(), "cores": info.cores,
            "numba": version("numba"), "llvmlite": version("llvmlite"),
            "codegen": codegen.settings("full_width"), "version": PEAK_VERSION}


def peak_cache_path(info: CPUInfo | None = None) -> Path:
    """Where :func:`measured_peak` keeps its result for this machine and software version:
    ``<kernellab.codegen.cache_base()>/fma-peak-<hash>.json``."""
    from kernellab import codegen

    key = _peak_key(info or cpu_info())
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(codegen.cache_base()) / f"fma-peak-{digest}.json"


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; (0, 0) where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8])


def _run_microbenchmark(info: CPUInfo) -> dict:
    """One measurement in a subprocess under the full_width profile (the widest
    vectors), with ``background``: the fraction of the machine other processes used meanwhile."""
    import resource

    from kernellab import codegen

    env = codegen.env("full_width")
    env["NUMBA_NUM_THREADS"] = str(info.cores)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    busy0, total0 = _busy_jiffies()
    own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "kernellab.machine.fma_peak", str(info.cores)],
                       capture_output=True, text=True, env=env, cwd=root, timeout=300)
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, total1 = _busy_jiffies()
    if r.returncode != 0:
        raise RuntimeError(f"the FMA microbenchmark failed: {r.stderr.strip()[-500:]}")
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("the FMA microbenchmark printed nothing")
    out = json.loads(lines[-1])
    if not _valid_run(out, info):
        raise RuntimeError(f"the FMA microbenchmark's figures are not plausible: {lines[-1][:300]}")
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    own = (own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime) * hz
    out["background"] = (max(0.0, (busy1 - busy0) - own) / (total1 - total0)
                         if total1 > total0 else 0.0)
    return out


#: No measured rate is believed above the nominal formula at this clock (no shipping x86 or Arm
#: core runs above about 6 GHz), with at least 512-bit vectors and 2 FMA units whatever /proc
#: reports (it may not name the ISA): a cache file edited to lift the limits is ignored.
PEAK_MAX_GHZ = 8.0


def _valid_run(run, info: CPUInfo) -> bool:
    try:
        cap = replace(info, ghz=PEAK_MAX_GHZ, simd_bits=max(info.simd_bits, 512),
                      fma_units=max(info.fma_units, 2))
        return int(run["threads"]) >= 1 and all(
            0 < float(run[n][k]) <= cap.peak_flops(n, int(run["threads"]) if k[0] == "a" else 1)
            for n in ("float32", "float64") for k in ("one_core_flops", "all_cores_flops"))
    except (KeyError, TypeError, ValueError):
        return False


def measured_peak(refresh: bool | None = None) -> MeasuredPeak | None:
    """This machine's measured FMA peak (:class:`MeasuredPeak`), from the cache
    (:func:`peak_cache_path`) or measured now (a subprocess; a few seconds, once per machine and
    software version).

    ``KERNELLAB_PEAK``: ``off`` returns None (callers fall back to the nominal peak and say so);
    ``remeasure`` (or ``refresh=True``) measures again and keeps the best with the cached
    result. A measurement during which other processes kept the machine busy is provisional
    (see :data:`PEAK_BUSY`). Returns None, with a warning on stderr, if the microbenchmark fails.
    """
    mode = os.environ.get("KERNELLAB_PEAK", "").strip().lower()
    if mode == "off":
        return None
    if refresh is None:
        refresh = mode == "remeasure"
    info = cpu_info()
    path = peak_cache_path(info)
    try:
        runs = [run for run in json.loads(path.read_text())["runs"] if _valid_run(run, info)]
    except (OSError, ValueError, TypeError, KeyError):
        runs = []  # none yet, or unreadable: measured again
    quiet = any(run.get("background", 1.0) <= PEAK_BUSY for run in runs)
    if refresh or not runs or (not quiet and len(runs) < PEAK_MAX_TRIES):
        try:
            runs.append(_run_microbenchmark(info))
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            print(f"kernellab: {exc}", file=sys.stderr)
            if not runs:
                return None
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"key": _peak_key(info), "runs": runs}, indent=1))
                os.replace(tmp, path)
            except OSError:
                pass
    names = ("float32", "float64")
    best = lambda kind, n: max(run[n][kind] for run in runs)  # noqa: E731
    bits = [run["float32"].get("vector_bits") for run in runs if run["float32"].get("vector_bits")]
    return MeasuredPeak(one_core={n: best("one_core_flops", n) for n in names},
                        all_cores={n: best("all_cores_flops", n) for n in names},
                        threads=int(runs[-1]["threads"]), vector_bits=max(bits) if bits else None,
                        measurements=len(runs),
                        quiet=any(run.get("background", 1.0) <= PEAK_BUSY for run in runs),
                        source=str(path))


@dataclass(frozen=True)
class SpeedLimit:
    """The fastest rate a timed call may show: ``gflops``, and ``text`` saying what it is."""

    gflops: float
    text: str


def speed_limit(dtype=np.float32, cores: int = 1, factor: float = 1.0,
                witness_gflops: float = 0.0, witness: str = "",
                unit: str = "GFLOP/s") -> SpeedLimit:
    """:data:`PEAK_MARGIN` x ``factor`` x the larger of this machine's measured peak for
    ``cores`` cores in ``dtype`` (:func:`measured_peak`) and ``witness_gflops`` (a rate
    measured in the same run, e.g. the BLAS's fastest call; named ``witness``). ``factor``:
    how many times the peak's rate the algorithm may show (e.g. effective FLOPs of a fast
    algorithm); ``unit`` names the limit's unit in the text. Without a measured peak
    (``KERNELLAB_PEAK=off`` or a failed measurement) the nominal peak stands in, and the text
    says so."""
    info = cpu_info()
    cores = max(1, min(cores, info.cores))
    mp = measured_peak()
    if mp is not None:
        peak, what = mp.flops(dtype, cores) / 1e9, mp.describe(dtype, cores)
    else:
        peak = info.peak_flops(dtype, cores) / 1e9
        what = f"nominal peak, no measured one: {info.formula(dtype, cores)}"
    base, basis = peak, what
    if witness_gflops > peak:
        base, basis = witness_gflops, f"{witness} ({witness_gflops:.1f} GFLOP/s), above the {what}"
    limit = round(PEAK_MARGIN * factor * base, 1)
    times = f"{factor:g} x " if factor != 1 else ""
    return SpeedLimit(limit, f"{PEAK_MARGIN:g} (margin for clock changes) x {times}{basis} = "
                             f"{limit:.1f} {unit}")


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
