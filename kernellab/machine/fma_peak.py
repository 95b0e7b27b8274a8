"""The FMA-throughput microbenchmark behind :func:`kernellab.machine.measured_peak`.

Run as ``python -m kernellab.machine.fma_peak`` (what ``measured_peak`` does, in a subprocess, so
that the caller's process keeps its own Numba code-generation profile); prints one JSON object.

Kernel: ``CHAINS`` independent accumulator rows of ``x`` (shape (CHAINS, n)), each element
updated by ``STEPS`` dependent FMAs ``a = a * m + c`` per pass. The loop over the n elements is
the innermost loop after LLVM fully unrolls the constant ``STEPS`` loop, so the loop vectoriser
turns it into vector FMAs at the widest width the target allows (the process runs with the
host's CPU features and ``-prefer-256-bit`` lifted: :mod:`kernellab.codegen`'s ``full_width``
profile, the one the CPU labs are graded under); ``CHAINS`` independent chains are twice FMA
latency x FMA pipes (4 cycles x 2 pipes on current x86 cores: Intel Optimization Reference
Manual; AMD Software Optimization Guide for Family 19h, §2.11), and the ``CHAINS`` loads and
stores per ``CHAINS`` x ``STEPS`` FMAs are far below the load/store ports' rate. ``fastmath`` is
``contract`` only: no reassociation, so LLVM cannot fold the chain; m < 1 and c > 0 keep the
values normal (no denormal slow path). FLOPs counted: 2 per FMA, nothing else.

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

CHAINS = 16
STEPS = 8
REPEATS = 7
TARGET_S = 0.02  # seconds per repetition
N_ELEMS = 64  # per chain and thread: CHAINS x N_ELEMS x 8 bytes (8 KiB) stay in L1


_KERNELS: list = []


def _kernels():
    """(numba, one-core kernel, all-cores kernel), defined once per process."""
    if _KERNELS:
        return _KERNELS[0]
    import numba
    from numba import njit, prange

    @njit(fastmath={"contract"})
    def fma_chains(x, m, c, passes):
        n = x.shape[1]
        for _ in range(passes):
            for j in range(n):
                a0 = x[0, j]
                a1 = x[1, j]
                a2 = x[2, j]
                a3 = x[3, j]
                a4 = x[4, j]
                a5 = x[5, j]
                a6 = x[6, j]
                a7 = x[7, j]
                a8 = x[8, j]
                a9 = x[9, j]
                a10 = x[10, j]
                a11 = x[11, j]
                a12 = x[12, j]
                a13 = x[13, j]
                a14 = x[14, j]
                a15 = x[15, j]
                for _s in range(STEPS):
                    a0 = a0 * m + c
                    a1 = a1 * m + c
                    a2 = a2 * m + c
                    a3 = a3 * m + c
                    a4 = a4 * m + c
                    a5 = a5 * m + c
                    a6 = a6 * m + c
                    a7 = a7 * m + c
                    a8 = a8 * m + c
                    a9 = a9 * m + c
                    a10 = a10 * m + c
                    a11 = a11 * m + c
                    a12 = a12 * m + c
                    a13 = a13 * m + c
                    a14 = a14 * m + c
                    a15 = a15 * m + c
                x[0, j] = a0
                x[1, j] = a1
                x[2, j] = a2
                x[3, j] = a3
                x[4, j] = a4
                x[5, j] = a5
                x[6, j] = a6
                x[7, j] = a7
                x[8, j] = a8
                x[9, j] = a9
                x[10, j] = a10
                x[11, j] = a11
                x[12, j] = a12
                x[13, j] = a13
                x[14, j] = a14
                x[15, j] = a15

    @njit(parallel=True, fastmath={"contract"})
    def fma_chains_threads(x3, m, c, passes):
        for t in prange(x3.shape[0]):
            fma_chains(x3[t], m, c, passes)

    _KERNELS.append((numba, fma_chains, fma_chains_threads))
    return _KERNELS[0]


#: An encoding pseudo-prefix LLVM prints before an instruction whose VEX and EVEX forms both
#: exist (``{vex} vpdpwssd`` on cores with AVX-VNNI): part of the line, not of the mnemonic.
ENCODING_PREFIX = r"(?:\{(?:vex|vex2|vex3|evex)\}\s*)?"

_FMA_REG = re.compile(r"^\s*" + ENCODING_PREFIX + r"vfn?madd\w*\s+.*%([xyz])mm\d+\s*$")


def _vector_bits(asm: str) -> int | None:
    widths = {"x": 128, "y": 256, "z": 512}
    found = [widths[m.group(1)] for line in asm.splitlines() if (m := _FMA_REG.match(line))]
    return max(found) if found else None


def _best_rate(run, flops_per_pass: float, clock) -> tuple[float, int]:
    """Calibrate passes to about TARGET_S of CPU time, then the best of REPEATS: FLOP/s."""
    passes = 1
    while True:
        t0 = clock()
        run(passes)
        dt = clock() - t0
        if dt >= TARGET_S / 4 or passes >= 1 << 24:
            break
        passes *= 4
    passes = max(1, int(passes * TARGET_S / max(dt, 1e-9)))
    best = 0.0
    for _ in range(REPEATS):
        t0 = clock()
        run(passes)
        dt = clock() - t0
        if dt > 0:
            best = max(best, flops_per_pass * passes / dt)
    return best, passes


def measure(threads: int) -> dict:
    """FMA peak FLOP/s of one core and of ``threads`` threads, fp32 and fp64 (see module doc)."""
    import numpy as np

    numba, one, many = _kernels()
    numba.set_num_threads(threads)
    out: dict = {"threads": threads, "chains": CHAINS, "steps": STEPS, "repeats": REPEATS,
                 "clock": "CPU time (thread for one core, process for all cores)"}
    t_start = time.perf_counter()
    for dt in (np.float32, np.float64):
        name = np.dtype(dt).name
        m, c = dt(0.999), dt(0.001)
        x = np.ones((CHAINS, N_ELEMS), dt)
        x3 = np.ones((threads, CHAINS, N_ELEMS), dt)
        one(x, m, c, 1)
        many(x3, m, c, 1)  # compile outside the timing
        flops = 2.0 * CHAINS * STEPS * N_ELEMS
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
