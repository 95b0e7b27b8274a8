"""Lab 1 ``gemm-cpu``: cache-blocked GEMM on the CPU with Numba.

The student writes ``gemm(A, B, C)``: C = A @ B into the caller's C (kernel style), A (M, K),
B (K, N), C (M, N), all float32 or all float64, any M, N, K >= 1.

Correctness: every case against the float64 golden reference on the same inputs under the
K-aware tolerance (:class:`kernellab.numerics.KAware`, accumulation in the input dtype).
Sizes mix 1, 2, 3, 31, 33, 65, 127, 257 (tails of every common tile size), non-square, both
dtypes; hidden cases add random sizes and K beyond common kc blockings.

Performance (cpu tier): fp32, **one thread** for the submission and for numpy/OpenBLAS alike,
fresh inputs for every call, each rule on the median of per-round ratios measured interleaved
in one process. One thread, because the ratio must not depend on what else runs on a 2-core
machine: with 2 threads each, one busy core slowed OpenBLAS about 3x but a simple kernel only
1.5x, so a kernel at 0.29 of numpy passed a 0.5 threshold under load (measured); with one thread
the other core absorbs the load. Threads are measured by ``make bench`` and chapter 1.

* fraction of numpy.matmul's speed >= ``MIN_FRACTION_NUMPY``, at M = N = K = ``PERF_N`` (one call
  of a passing kernel takes >= 10 ms there), where numpy's speed is floored at
  ``NUMPY_FLOOR_OF_PEAK`` x this machine's measured one-core FMA peak
  (:func:`kernellab.machine.measured_peak`). Why a floor: OpenBLAS picks its kernel per CPU, and
  an environment variable (``OPENBLAS_CORETYPE=Haswell``, as on the course machine) can force an
  older one: on a core with full-width AVX-512 FMAs the AVX2 kernel runs at about half the
  speed of the core's own, which halved the rule's difficulty. A BLAS kernel made for the core
  reaches most of its FMA peak on one thread (Goto & van de Geijn, "Anatomy of high-performance
  matrix multiplication", TOMS 34(3), 2008; Van Zee & van de Geijn, "BLIS", TOMS 41(3), 2015):
  about 0.85 on a Zen 4 core here, more on full-width AVX-512 cores; a forced older kernel (about
  half of that) is replaced by the floor. The two baselines then differ by at most 1 / 0.9: a
  kernel within 11% of the threshold may get different verdicts with and without a forced
  kernel, one further away gets the same. Per round: the smaller of numpy's time / the
  submission's time (wall clock, interleaved) and the submission's rate / the floor, the rate
  from the call's CPU time (as the peak is measured: another process sharing the core takes
  wall time, not CPU time, from the call);
* speedup over the naive ijk kernel >= ``MIN_SPEEDUP_NAIVE``, at ``PERF_N_NAIVE`` (the naive
  kernel takes seconds a call at ``PERF_N``);
* the fastest timed call at most :data:`kernellab.machine.PEAK_MARGIN` x the larger of this
  machine's measured one-core peak and the fastest numpy.matmul call of the run (above both, the
  timer was cheated: :func:`kernellab.machine.speed_limit` gives the margin's reasons). Both
  are measured rates, so a wrong /proc clock cannot move the limit; numpy's call is a second
  witness measured in the same run, and can only raise the limit;
* every timed call's output right after it returns, outside the timer (:func:`grader.labs._gemm.probably_correct`,
  a Freivalds check), and the last one in full: a kernel that skips work on the calls it guesses
  are timed fails, and the timing points with it.

Thresholds were set from measurements on the course machine (2-core AMD EPYC Zen 4, see
``tests/test_grader_gemm_cpu.py`` and the benchmark table in docs/maintainers.md) so that the
reference solution passes with at least a 1.5x margin and a plain unblocked ikj loop with
``prange`` fails (one thread, medians: solution about 0.9 of numpy, ikj about 0.3-0.4).
The submission and the naive baseline are compiled with numba's default settings, in the same
process (chapter 1's ``fast_gemm`` codegen profile is a lesson, not a grading condition: under
the defaults a register tile of unrolled scalars stays scalar, while a loop over a small tile
in L1 is vectorised by LLVM's loop vectoriser).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from grader.labs._gemm import case_seed, gemm_case_data, gemm_check, probably_correct
from grader.labs._timed import TimedCalls
from grader.labs._repeat import change_inputs, repeat_case, stale_note
from grader.spec import (Case, CaseData, HiddenCases, LabSpec, OneOf, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)

PERF_N = 1024
PERF_N_NAIVE = 512  # the naive kernel takes seconds at 1024; its ratio is taken at 512
PERF_ROUNDS = 5
PERF_THREADS = 1  # see the module docstring: robust to other work on the machine
MIN_SPEEDUP_NAIVE = 20.0
MIN_FRACTION_NUMPY = 0.50
#: numpy's speed in the fraction rule is never taken below this fraction of the measured
#: one-core FMA peak (see the module docstring): below what a BLAS kernel made for the core
#: reaches, so it binds only when numpy runs a kernel that is not
NUMPY_FLOOR_OF_PEAK = 0.9

VISIBLE_SHAPES = [  # (M, N, K)
    (1, 1, 1), (2, 3, 1), (3, 1, 2), (1, 257, 3), (31, 33, 65), (33, 31, 127),
    (65, 127, 33), (127, 65, 257), (257, 2, 31), (33, 257, 257),
    # K beyond every usual kc (256/512/1024): a kernel that mishandles its depth panels fails
    # here, not only on the timed calls
    (33, 65, 1100), (7, 130, 2100),
    # M and N beyond every usual blocking (mc, nc up to 1024) and the timed size, not multiples
    # of them: a kernel that drops its last partial row or column panel fails here
    (1100, 3, 5), (3, 1100, 5),
]
DTYPES = ("float32", "float64")
VISIBLE_SEED = 20261129
MAX_CASE_BYTES = 192 << 20  # A + B + C of one hidden case
#: called again right after itself with a few entries of A and B changed (grader.labs._repeat:
#: a packed-panel cache keyed on the shapes and a few entries goes stale)
REPEATED = "31x33x65 float32"
HIDDEN_PARAMS = {"M": Whole(), "N": Whole(), "K": Whole(), "dtype": OneOf(DTYPES, "float32")}


# Bound when the grader's worker imports this module, before the submission loads: the baseline
# the submission is timed against cannot be swapped out from under the grader.
_NUMPY_MATMUL = np.matmul


class GemmCPU(LabSpec):
    lab_id = "gemm-cpu"
    title = "Cache-blocked GEMM on CPU (Numba)"
    notebook = "01_gemm_cpu.ipynb"
    tier = "cpu"
    functions = {"gemm": ("A", "B", "C")}
    allowed_imports = frozenset({"numpy", "numba", "math"})
    banned_names = frozenset({"gemm_naive", "gemm_golden", "gemm_abs_product"})
    codegen = "default"

    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for (m, n, k) in VISIBLE_SHAPES:
            for dt in DTYPES:
                name = f"{m}x{n}x{k} {dt}"
                out.append(Case(name, {"M": m, "N": n, "K": k, "dtype": dt},
                                case_seed(VISIBLE_SEED, name)))
                if name == REPEATED:
                    out.append(repeat_case(out[-1], ("A", "B")))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = f"hidden{i} {p['M']}x{p['N']}x{p['K']} {p['dtype']}"
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(6):
                m, n, k = (int(x) for x in rng.integers(1, 300, size=3))
                if i == 5:
                    k = int(rng.integers(513, 1100))  # beyond the usual kc blockings
                p = {"M": m, "N": n, "K": k, "dtype": DTYPES[i % 2]}
                name = f"hidden{i} {m}x{n}x{k} {p['dtype']}"
                out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the size
        caps. Raises ValueError in plain words."""
        q = parse_hidden_case(i, p, HIDDEN_PARAMS)
        m, n, k, dt = q["M"], q["N"], q["K"], q["dtype"]
        if m * n * k > 2**31:
            raise hidden_case_error(i, f"needs M*N*K <= 2**31, not {m * n * k}")
        # A, B and C travel as files (the worker may write at most 256 MiB to one) and must fit
        # the worker's memory next to the submission's own: a case too big would be blamed on
        # the student
        if (m * k + k * n + m * n) * np.dtype(dt).itemsize > MAX_CASE_BYTES:
            raise hidden_case_error(i, f"A, B and C together must fit in "
                                       f"{MAX_CASE_BYTES >> 20} MiB")
        return q

    def case_data(self, case: Case) -> CaseData:
        return change_inputs(case, gemm_case_data(case))

    def warmup_data(self):
        out = []
        for dt in DTYPES:
            c = Case(f"warmup {dt}", {"M": 5, "N": 7, "K": 3, "dtype": dt}, seed=1)
            out.append(("gemm", self.case_data(c)))
        return out

    def check(self, case: Case, data: CaseData, outputs: dict):
        return stale_note(self, case, data, outputs, gemm_check(data, outputs))

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"n": PERF_N, "n_naive": PERF_N_NAIVE, "dtype": "float32", "rounds": PERF_ROUNDS,
                "threads": PERF_THREADS}

    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        """Worker side: two interleaved groups in one process, fresh inputs for every call:
        submission vs numpy.matmul at ``n``; submission vs the naive kernel at ``n_naive``."""
        from kernellab import machine, threads, timing
        import numba

        from reference_kernels.gemm import gemm_naive

        naive = numba.njit(cache=True)(gemm_naive)

        dt = np.dtype(plan["dtype"])
        fn = namespace["gemm"]
        rng = np.random.default_rng()
        check_rng = np.random.default_rng()
        # every timed call checked, not only the last one re-checked in full: a kernel that
        # skips work on calls it guesses are timed must not get away with it
        calls = TimedCalls(("A", "B"), ("C",),
                           is_correct=lambda ab, c: probably_correct(*ab, c[0], check_rng),
                           is_unwritten=lambda c: bool(np.isnan(c[0]).any()))

        def fresh(n):
            return calls.setup(lambda: (rng.standard_normal((n, n), dtype=dt),
                                        rng.standard_normal((n, n), dtype=dt)),
                               lambda: (np.full((n, n), np.nan, dtype=dt),))

        def numpy_matmul(A, B, C):
            _NUMPY_MATMUL(A, B, out=C)

        cpu_s: list = []  # CPU time of each call of the submission in the numpy group

        def submission_cpu_timed(A, B, C):
            t0 = time.process_time()
            fn(A, B, C)
            cpu_s.append(time.process_time() - t0)

        tiny = fresh(8)()
        naive(*tiny)  # compile outside the timed rounds
        threads_ = int(plan["threads"])
        rounds = int(plan["rounds"])
        g_naive = timing.interleaved({"submission": fn, "naive": naive}, baseline="submission",
                                     setup=fresh(int(plan["n_naive"])), warmup=1, rounds=rounds,
                                     threads_=threads_, after=calls.after)
        g_numpy = timing.interleaved({"submission": submission_cpu_timed, "numpy": numpy_matmul},
                                     baseline="submission", setup=fresh(int(plan["n"])),
                                     warmup=1, rounds=rounds, threads_=threads_,
                                     after=calls.after)
        tn = {k: v.times for k, v in g_naive.timings.items()}
        tb = {k: v.times for k, v in g_numpy.timings.items()}
        n, n2 = int(plan["n"]), int(plan["n_naive"])
        info = machine.cpu_info()
        return {
            "speedup_naive": [a / b for a, b in zip(tn["naive"], tn["submission"])],
            "fraction_numpy": [a / b for a, b in zip(tb["numpy"], tb["submission"])],
            "gflops": [2.0 * n**3 / x / 1e9 for x in tb["submission"]],
            "gflops_numpy": [2.0 * n**3 / x / 1e9 for x in tb["numpy"]],
            # the same calls' rates from their CPU time (the last ``rounds``: after the warm-up)
            "gflops_cpu": [2.0 * n**3 / max(x, 1e-9) / 1e9 for x in cpu_s[-rounds:]],
            "gflops_naive": [2.0 * n2**3 / x / 1e9 for x in tn["naive"]],
            "gflops_small": [2.0 * n2**3 / x / 1e9 for x in tn["submission"]],
            # nominal (from /proc): shown, never a limit
            "peak_gflops": info.peak_flops(dt, cores=min(info.cores, threads_)) / 1e9,
            "peak_formula": info.formula(dt, cores=min(info.cores, threads_)),
            "blas": machine.blas_kernel(),
            "setup": {"description": f"{dt.name}, {threads_} thread{'s' if threads_ != 1 else ''}, {rounds} interleaved rounds "
                                     f"per group, fresh inputs per call: vs numpy at M=N=K={n}, "
                                     f"vs naive at M=N=K={n2}",
                      "threads_note": threads.status()["note"],
                      "timings": {"vs_naive": g_naive.to_dict()["timings"],
                                  "vs_numpy": g_numpy.to_dict()["timings"]}},
            # the last timed call: the numpy group, size n
            "recheck": calls.save(workdir, {"M": n, "N": n, "K": n, "dtype": dt.name}),
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        n, dt = int(plan["n"]), np.dtype(plan["dtype"])
        if recheck.get("params") != {"M": n, "N": n, "K": n, "dtype": dt.name}:
            return (f"the timed calls were not the planned M=N=K={n} {dt.name} "
                    f"({recheck.get('params')!r}): was the grading process tampered with?")
        for name in ("A", "B", "C"):
            a = arrays.get(name)
            if a is None or a.shape != (n, n) or a.dtype != dt:
                got = "missing" if a is None else f"{a.shape} {a.dtype}"
                return (f"the last timed call's {name} is {got}, not the planned ({n}, {n}) "
                        f"{dt.name}: was the grading process tampered with?")
        return None

    def perf_rules(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        from kernellab import machine

        limit = machine.speed_limit(np.float32, cores=PERF_THREADS,
                                    witness_gflops=max(m["gflops_numpy"]),
                                    witness="the fastest numpy.matmul call")
        fraction, numpy_note = self._fraction(m, machine.measured_peak())
        rules = [
            RuleResult("speedup over the naive ijk kernel", med(m["speedup_naive"]),
                       MIN_SPEEDUP_NAIVE, ">=", "x", med(m["speedup_naive"]) >= MIN_SPEEDUP_NAIVE,
                       f"at M=N=K={PERF_N_NAIVE}: naive {med(m['gflops_naive']):.2f} GFLOP/s, "
                       f"yours {med(m['gflops_small']):.1f} GFLOP/s",
                       rng(m["speedup_naive"])),
            RuleResult("fraction of numpy.matmul (OpenBLAS)", med(fraction),
                       MIN_FRACTION_NUMPY, ">=", "", med(fraction) >= MIN_FRACTION_NUMPY,
                       numpy_note, rng(fraction)),
            RuleResult("fastest timed call is plausible", max(m["gflops"]), limit.gflops, "<=",
                       " GFLOP/s", max(m["gflops"]) <= limit.gflops,
                       f"limit = {limit.text}; nominal peak {m['peak_formula']} (not used); "
                       "faster than that means the timer was cheated (cached results, work "
                       "outside the call)", rng(m["gflops"]), scored=False),
        ]
        return rules

    @staticmethod
    def _fraction(m: dict, peak) -> tuple[list[float], str]:
        """Per round: the submission's speed / max(numpy's, the floor) (module docstring), and
        the rule's note. Without a measured peak, numpy alone (and the note says so)."""
        med_numpy = float(np.median(m["gflops_numpy"]))
        blas = m.get("blas") or {}
        kernel = (f" ({blas.get('internal_api')} {blas.get('architecture')} kernel"
                  + (f", forced by {blas['forced_by']}" if blas.get("forced_by") else "") + ")"
                  if blas.get("architecture") else "")
        if peak is None:
            return list(m["fraction_numpy"]), (f"numpy.matmul{kernel} {med_numpy:.1f} GFLOP/s in "
                                                "the same run; no measured peak, so no floor")
        floor = NUMPY_FLOOR_OF_PEAK * peak.flops(np.float32, PERF_THREADS) / 1e9
        cpu = m.get("gflops_cpu") or m["gflops"]
        by_floor = [g / floor for g in cpu]
        fraction = [min(f, g) for f, g in zip(m["fraction_numpy"], by_floor)]
        used = ("the floor" if sum(g < f for f, g in zip(m["fraction_numpy"], by_floor))
                > len(by_floor) / 2 else "numpy")
        return fraction, (f"numpy.matmul{kernel} {med_numpy:.1f} GFLOP/s in the same run, "
                          f"floor {NUMPY_FLOOR_OF_PEAK:g} x {peak.describe(np.float32, PERF_THREADS)}"
                          f" = {floor:.1f} GFLOP/s; the baseline in most rounds: {used}")
