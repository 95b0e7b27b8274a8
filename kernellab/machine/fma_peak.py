"""The FMA-throughput microbenchmark behind :func:`kernellab.machine.measured_peak`.

Run as ``python -m kernellab.machine.fma_peak`` (what ``measured_peak`` does, in a subprocess, so
that the caller's process keeps its own Numba code-generation profile); prints one JSON object.

Kernel: ``chains`` independent accumulator rows of ``x`` (shape (chains, n)), each element
updated by ``steps`` dependent FMAs ``a = a * m + c`` per pass. The loop over the n elements is
the innermost loop after LLVM fully unrolls the constant ``steps`` loop, so the loop vectoriser
turns it into vector FMAs at the widest width the target allows (the process runs with the
host's CPU features and ``-prefer-256-bit`` lifted: :mod:`kernellab.codegen`'s ``full_width``
profile, the one the CPU labs are graded under). ``chains`` (:func:`shape`) is FMA latency x
FMA pipes (4 cycles x 2 pipes on current x86 cores: Intel Optimization Reference Manual; AMD
Software Optimization Guide for Family 19h, §2.11) or more, and with ``m`` and ``c`` fits the
vector register file: 16 chains with AVX-512's 32 registers, 8 with AVX2's 16 (16 chains there
spill accumulators to the stack, and the store-to-load latency in their chains lowered the
figure below what numpy's sgemm reaches on a Zen 3 core). ``chains x steps`` = 128 FMAs per
element: a body LLVM's full unroller still takes (a larger one stays a loop, which the loop
vectoriser does not vectorise: a scalar figure); on a Zen 3 core 8 x 16 beat 10 x 12 and
12 x 10 (fewer loads and stores per FMA). The ``chains`` loads and stores per 128 FMAs are far
below the load/store ports' rate. ``fastmath`` is ``contract`` only: no reassociation, so LLVM
cannot fold the chain; m < 1 and c > 0 keep the values normal (no denormal slow path). FLOPs
counted: 2 per FMA, nothing else.

Time: CPU time, not wall time: ``time.thread_time`` for one core (the calling thread runs the
kernel), ``time.process_time`` for all cores (a ``prange`` over one block per thread; rate =
threads x FLOPs / summed CPU time). Another process sharing a core takes wall time from the
kernel but not CPU time, so the rate is what a core does while it runs the kernel. Each figure
is the best of ``REPEATS`` calibrated repetitions of about ``TARGET_S`` seconds: interference
(steal time, cache or frequency effects of other work) only lowers a rate, so for an upper
bound the maximum is the right statistic. For the same reason each figure bounds the other:
one core's is at least the per-core rate of the all-core run, and the all-core figure at least
one core's.

The emitted assembly is inspected once: ``vector_bits`` is the widest register width of the
kernel's FMA instructions (``vfmadd...`` on zmm = 512, ymm = 256, xmm = 128; None when the ISA
has other mnemonics), so a report can say which width the peak was measured at.
"""

from __future__ import annotations

import json
import re
import sys
import time

#: FMAs per element and pass (chains x steps): see the module docstring
FMAS_PER_ELEMENT = 128
REPEATS = 7
TARGET_S = 0.02  # seconds per repetition
N_ELEMS = 64  # per chain and thread: at most 16 x 64 x 8 bytes (8 KiB) stay in L1


def _x86(machine: str | None = None) -> bool:
    """Whether ``machine`` (default: ``platform.machine()``) is an x86 one."""
    import platform

    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i386", "i686")


def shape(features: str | None = None, machine: str | None = None) -> tuple[int, int]:
    """(chains, steps) for this host: 8 x 16 on x86 without AVX-512 (16 vector registers),
    else 16 x 8 (32 registers: AVX-512, Arm's NEON/SVE). ``features``: LLVM's feature string
    (default: the host's, :func:`kernellab.codegen.host_cpu_features`); ``machine``:
    ``platform.machine()``.

    8 chains cover FMA latency x pipes where the latency is 4 cycles; on AVX2 cores with a
    5-cycle FMA (Haswell, Broadwell, Zen 1 and 2) they cover 8 of 10, so the peak may come out
    up to a fifth low there: a lower floor and plausibility limit, never a harsher one. 8 x 16
    was chosen over 10 x 12 and 12 x 10 by a measurement on a Zen 3 core only."""
    if features is None:
        from kernellab.codegen import host_cpu_features

        features = host_cpu_features()
    chains = 8 if _x86(machine) and "+avx512f" not in features.split(",") else 16
    return chains, FMAS_PER_ELEMENT // chains


def kernel_source(chains: int, steps: int) -> str:
    """Python source of ``fma_chains(x, m, c, passes)`` for ``chains`` rows of ``x``."""
    lines = ["def fma_chains(x, m, c, passes):",
             "    n = x.shape[1]",
             "    for _ in range(passes):",
             "        for j in range(n):"]
    lines += [f"            a{i} = x[{i}, j]" for i in range(chains)]
    lines += [f"            for _s in range({steps}):"]
    lines += [f"                a{i} = a{i} * m + c" for i in range(chains)]
    lines += [f"            x[{i}, j] = a{i}" for i in range(chains)]
    return "\n".join(lines) + "\n"


def _compiled(chains: int, steps: int):
    """:func:`kernel_source`'s kernel as a Numba dispatcher (``fastmath`` contract only)."""
    from numba import njit

    namespace: dict = {}
    exec(compile(kernel_source(chains, steps), f"<kernellab.machine.fma_peak {chains}x{steps}>",
                 "exec"), namespace)
    return njit(fastmath={"contract"})(namespace["fma_chains"])


_KERNELS: list = []


def _kernels():
    """(numba, one-core kernel, all-cores kernel, (chains, steps)), defined once per process."""
    if _KERNELS:
        return _KERNELS[0]
    import numba
    from numba import njit, prange

    chains, steps = shape()
    fma_chains = _compiled(chains, steps)

    @njit(parallel=True, fastmath={"contract"})
    def fma_chains_threads(x3, m, c, passes):
        for t in prange(x3.shape[0]):
            fma_chains(x3[t], m, c, passes)

    _KERNELS.append((numba, fma_chains, fma_chains_threads, (chains, steps)))
    return _KERNELS[0]


#: An encoding pseudo-prefix LLVM prints before an instruction whose VEX and EVEX forms both
#: exist (``{vex} vpdpwssd`` on cores with AVX-VNNI): part of the line, not of the mnemonic.
ENCODING_PREFIX = r"(?:\{(?:vex|vex2|vex3|evex)\}\s*)?"

_FMA_REG = re.compile(r"^\s*" + ENCODING_PREFIX + r"vfn?madd\w*\s+.*%([xyz])mm\d+\s*$")


def _vector_bits(asm: str) -> int | None:
    widths = {"x": 128, "y": 256, "z": 512}
    found = [widths[m.group(1)] for line in asm.splitlines() if (m := _FMA_REG.match(line))]
    return max(found) if found else None


def hot_loop_stack_refs(asm: str) -> int | None:
    """Stack references (x86 AT&T syntax: ``(%rsp)``) from the first FMA of ``asm`` to the
    first jump after it: the kernel's unrolled loop body, where an accumulator spilled to the
    stack shows as a store and a reload. None without FMAs, or on a non-x86 host. A heuristic
    for :func:`kernel_source`'s kernel (its vector loop comes first in LLVM's listing, and
    frame-pointer ``(%rbp)`` slots are not counted), not a general spill detector."""
    if not _x86():
        return None
    lines = asm.splitlines()
    first = next((i for i, line in enumerate(lines) if "vfmadd" in line or "vfnmadd" in line),
                 None)
    if first is None:
        return None
    end = next((i for i in range(first, len(lines)) if lines[i].strip().startswith("j")),
               len(lines))
    return sum("(%rsp)" in line for line in lines[first:end])


def chains_rate(chains: int, steps: int, dtype=None) -> dict:
    """One core's FLOP/s of :func:`kernel_source`'s kernel with ``chains`` x ``steps``, compiled
    now under this process's code-generation profile (the best of ``REPEATS`` calibrated
    repetitions, CPU time), with its FMA width and :func:`hot_loop_stack_refs`:
    ``{"chains", "steps", "gflops", "vector_bits", "stack_refs"}``. ``dtype``: float32 (default)
    or float64. A compile and about ``REPEATS x TARGET_S`` seconds. Chapter 1 times a shape
    that fits the register file against one that does not."""
    import numpy as np

    dt = np.dtype(dtype or np.float32).type
    kernel = _compiled(chains, steps)
    x, m, c = np.ones((chains, N_ELEMS), dt), dt(0.999), dt(0.001)
    kernel(x, m, c, 1)
    rate, _ = _best_rate(lambda p: kernel(x, m, c, p), 2.0 * chains * steps * N_ELEMS,
                         time.thread_time)
    asm = kernel.inspect_asm(kernel.signatures[0])
    return {"chains": chains, "steps": steps, "gflops": rate / 1e9,
            "vector_bits": _vector_bits(asm), "stack_refs": hot_loop_stack_refs(asm)}


def _calibrated(run, clock, target_s: float = TARGET_S) -> int:
    """Passes for ``run(passes)`` to take about ``target_s`` of ``clock``."""
    passes = 1
    while True:
        t0 = clock()
        run(passes)
        dt = clock() - t0
        if dt >= target_s / 4 or passes >= 1 << 24:
            break
        passes *= 4
    return max(1, int(passes * target_s / max(dt, 1e-9)))


def _best_of(run, passes: int, flops_per_pass: float, clock, repeats: int) -> float:
    """The best FLOP/s of ``repeats`` calls ``run(passes)`` by ``clock``."""
    best = 0.0
    for _ in range(repeats):
        t0 = clock()
        run(passes)
        dt = clock() - t0
        if dt > 0:
            best = max(best, flops_per_pass * passes / dt)
    return best


def _best_rate(run, flops_per_pass: float, clock) -> tuple[float, int]:
    """Calibrate passes to about TARGET_S of CPU time, then the best of REPEATS: FLOP/s."""
    passes = _calibrated(run, clock)
    return _best_of(run, passes, flops_per_pass, clock, REPEATS), passes


def one_core_probe(dtype=None, target_s: float = 0.005, runs: int = 3):
    """A callable that measures one core's FMA rate now, in this process: ``probe()`` runs the
    one-core kernel ``runs`` times for about ``target_s`` seconds of CPU time each (passes
    calibrated here, once) and returns the best rate in FLOP/s (thread CPU time, as
    :func:`measure`). For a rule that compares a kernel with the peak in the same rounds, so
    that the clock the core ran at, whatever moved it, is the same on both sides. ``dtype``:
    float32 (default) or float64. Compiles the kernel on the first call in a process."""
    import numpy as np

    _, one, _, (chains, steps) = _kernels()
    dt = np.dtype(dtype or np.float32).type
    x, m, c = np.ones((chains, N_ELEMS), dt), dt(0.999), dt(0.001)

    def run(passes):
        one(x, m, c, passes)

    run(1)
    flops_per_pass = 2.0 * chains * steps * N_ELEMS
    passes = _calibrated(run, time.thread_time, target_s)

    def probe() -> float:
        return _best_of(run, passes, flops_per_pass, time.thread_time, runs)

    return probe


def measure(threads: int) -> dict:
    """FMA peak FLOP/s of one core and of ``threads`` threads, fp32 and fp64 (see module doc)."""
    import numpy as np

    numba, one, many, (chains, steps) = _kernels()
    numba.set_num_threads(threads)
    out: dict = {"threads": threads, "chains": chains, "steps": steps, "repeats": REPEATS,
                 "clock": "CPU time (thread for one core, process for all cores)"}
    t_start = time.perf_counter()
    for dt in (np.float32, np.float64):
        name = np.dtype(dt).name
        m, c = dt(0.999), dt(0.001)
        x = np.ones((chains, N_ELEMS), dt)
        x3 = np.ones((threads, chains, N_ELEMS), dt)
        one(x, m, c, 1)
        many(x3, m, c, 1)  # compile outside the timing
        flops = 2.0 * chains * steps * N_ELEMS
        # the loop variables are bound as default arguments: each run uses this dtype's arrays
        r1, _ = _best_rate(lambda p, x=x, m=m, c=c: one(x, m, c, p), flops, time.thread_time)
        # all cores: threads x FLOPs per thread's CPU second
        rn, _ = _best_rate(lambda p, x3=x3, m=m, c=c: many(x3, m, c, p),
                           flops * threads * threads, time.process_time)
        sig = one.signatures[0]
        # interference only lowers a rate, so each figure bounds the other: one core does at
        # least the per-core rate of the all-core run, all cores at least what one core does
        out[name] = {"one_core_flops": max(r1, rn / threads), "all_cores_flops": max(rn, r1),
                     "vector_bits": _vector_bits(one.inspect_asm(sig))}
        if not np.isfinite(x).all():  # pragma: no cover - the chain converges to c / (1 - m)
            raise RuntimeError("FMA microbenchmark produced non-finite values")
    out["seconds"] = time.perf_counter() - t_start
    return out


if __name__ == "__main__":
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(json.dumps(measure(threads)))
