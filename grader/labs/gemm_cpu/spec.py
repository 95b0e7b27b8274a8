"""Lab 1 ``gemm-cpu``: cache-blocked GEMM on the CPU with Numba (grader side).

The student writes ``gemm(A, B, C)``: C = A @ B into the caller's C (kernel style), A (M, K),
B (K, N), C (M, N), all float32 or all float64, any M, N, K >= 1.

* correctness: every case against the float64 golden reference under the K-aware tolerance
  (:class:`kernellab.numerics.KAware`, accumulation in the input dtype);
* speedup over the naive ijk kernel >= ``MIN_SPEEDUP_NAIVE`` at ``PERF_N_NAIVE``;
* fraction of numpy.matmul's speed >= ``MIN_FRACTION_NUMPY`` at ``PERF_N``, numpy floored at
  ``NUMPY_FLOOR_OF_PEAK`` x one core's FMA peak measured in the same rounds;
* the fastest timed call plausible: <= :data:`kernellab.machine.PEAK_MARGIN` x the larger of
  the measured one-core peak and the fastest numpy call (a gate).

The reasoning behind every rule and threshold, with its sources: ``README.md`` beside this
file. The worker side (the timed calls): :mod:`grader.labs.gemm_cpu.measure`.
"""

from __future__ import annotations

import numpy as np

from grader.labs._gemm import gemm_case_data, gemm_check
from grader.rules import Rule, median
from grader.spec import Case, LabSpec, OneOf, RuleResult, Whole
from kernellab.machine import PEAK_MARGIN

PERF_N = 1024
PERF_N_NAIVE = 512  # the naive kernel takes seconds at 1024; its ratio is taken at 512
PERF_ROUNDS = 5
PERF_THREADS = 1  # README: robust to other work on the machine
MIN_SPEEDUP_NAIVE = 20.0
MIN_FRACTION_NUMPY = 0.40  # README: between the reference solution and a plain ikj loop
#: numpy's speed in the fraction rule is never taken below this fraction of one core's FMA
#: peak, measured in the same rounds (README): about what a BLAS kernel made for the core
#: reaches, so it binds in full when numpy runs a kernel that is not (a forced older one)
NUMPY_FLOOR_OF_PEAK = 0.9
#: the per-round FMA probe is believed only at this fraction of the machine's cached peak or
#: more: below it the probe itself ran slow (or scalar), and the cached peak is the floor
PROBE_MIN_OF_PEAK = 0.5

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

RULES = (
    Rule("speedup over the naive ijk kernel", ">=", MIN_SPEEDUP_NAIVE, "x",
         why=f"median of per-round time ratios at M=N=K={PERF_N_NAIVE}, one thread"),
    Rule("fraction of numpy.matmul (OpenBLAS)", ">=", MIN_FRACTION_NUMPY,
         why=f"median per round at M=N=K={PERF_N}, one thread; numpy floored at "
             f"{NUMPY_FLOOR_OF_PEAK:g} x one core's FMA peak, measured in the same rounds"),
    Rule("fastest timed call is plausible", "max<=",
         f"{PEAK_MARGIN:g} x max(measured one-core FMA peak, fastest numpy.matmul call)",
         " GFLOP/s", why="a gate: no points, but failing it voids the speed points"),
)


class GemmCPU(LabSpec):
    lab_id = "gemm-cpu"
    title = "Cache-blocked GEMM on CPU (Numba)"
    notebook = "01_gemm_cpu.ipynb"
    tier = "cpu"
    functions = {"gemm": ("A", "B", "C")}
    allowed_imports = frozenset({"numpy", "numba", "math"})
    banned_names = frozenset({"gemm_naive", "gemm_golden", "gemm_abs_product"})
    params = HIDDEN_PARAMS
    visible_seed = VISIBLE_SEED
    repeated = {REPEATED: ("A", "B")}
    rules = RULES

    # ------------------------------------------------------------------ cases
    def visible_params(self) -> list[dict]:
        return [{"M": m, "N": n, "K": k, "dtype": dt}
                for (m, n, k) in VISIBLE_SHAPES for dt in DTYPES]

    def case_name(self, p: dict) -> str:
        return f"{p['M']}x{p['N']}x{p['K']} {p['dtype']}"

    def case_limits(self, p: dict) -> str | None:
        m, n, k = p["M"], p["N"], p["K"]
        if m * n * k > 2**31:
            return f"needs M*N*K <= 2**31, not {m * n * k}"
        # A, B and C travel as files (the worker may write at most 256 MiB to one) and must fit
        # the worker's memory next to the submission's own: a case too big would be blamed on
        # the student
        if (m * k + k * n + m * n) * np.dtype(p["dtype"]).itemsize > MAX_CASE_BYTES:
            return f"A, B and C together must fit in {MAX_CASE_BYTES >> 20} MiB"
        return None

    def random_params(self, rng, i: int) -> dict:
        m, n, k = (int(x) for x in rng.integers(1, 300, size=3))
        if i == 5:
            k = int(rng.integers(513, 1100))  # beyond the usual kc blockings
        return {"M": m, "N": n, "K": k, "dtype": DTYPES[i % 2]}

    def case_arrays(self, case: Case):
        return gemm_case_data(case)

    def warmup_data(self):
        return [("gemm", self.case_data(Case(f"warmup {dt}", {"M": 5, "N": 7, "K": 3,
                                                               "dtype": dt}, seed=1)))
                for dt in DTYPES]

    def compare(self, case: Case, data, outputs: dict):
        return gemm_check(data, outputs)

    # ------------------------------------------------------------------ performance
    def perf_plan(self) -> dict:
        return {"n": PERF_N, "n_naive": PERF_N_NAIVE, "dtype": "float32", "rounds": PERF_ROUNDS,
                "threads": PERF_THREADS}

    def planned(self, plan: dict) -> dict:
        n, dt = int(plan["n"]), np.dtype(plan["dtype"]).name
        return {"params": {"M": n, "N": n, "K": n, "dtype": dt}, "what": f"M=N=K={n} {dt}",
                "arrays": {name: ((n, n), dt) for name in ("A", "B", "C")}}

    def rules_cpu(self, m: dict) -> list[RuleResult]:
        from kernellab import machine

        limit = machine.speed_limit(np.float32, cores=PERF_THREADS,
                                    witness_gflops=max(m["gflops_numpy"]),
                                    witness="the fastest numpy.matmul call")
        fraction, numpy_note = self._fraction(m, machine.measured_peak())
        naive, numpy_, plausible = RULES
        return [
            naive.judge(m["speedup_naive"],
                        f"at M=N=K={PERF_N_NAIVE}: naive {median(m['gflops_naive']):.2f} "
                        f"GFLOP/s, yours {median(m['gflops_small']):.1f} GFLOP/s"),
            numpy_.judge(fraction, numpy_note),
            plausible.judge(m["gflops"], f"limit = {limit.text}; nominal peak "
                                         f"{m['peak_formula']} (not used); faster than that "
                                         "means the timer was cheated (cached results, work "
                                         "outside the call)", threshold=limit.gflops),
        ]

    @staticmethod
    def _fraction(m: dict, peak=None) -> tuple[list[float], str]:
        """Per round: the submission's speed / max(numpy's, the floor) (README), and the
        rule's note. The floor is NUMPY_FLOOR_OF_PEAK x one core's FMA peak measured in the
        same round (``gflops_peak``). Where those figures are missing, or their median is below
        PROBE_MIN_OF_PEAK x the machine's cached peak ``peak`` (a probe that ran slow or
        scalar), the cached peak is the floor of every round and the note says why; with
        neither, numpy alone (the note says so)."""
        med_numpy = float(np.median(m["gflops_numpy"]))
        blas = m.get("blas") or {}
        kernel = (f" ({blas.get('internal_api')} {blas.get('architecture')} kernel"
                  + (f", forced by {blas['forced_by']}" if blas.get("forced_by") else "") + ")"
                  if blas.get("architecture") else "")
        rounds = len(m["fraction_numpy"])
        peaks = [float(g) for g in (m.get("gflops_peak") or [])]
        cached = peak.flops(np.float32, PERF_THREADS) / 1e9 if peak is not None else None
        probed = len(peaks) == rounds and all(g > 0 for g in peaks)
        if probed and (cached is None or float(np.median(peaks)) >= PROBE_MIN_OF_PEAK * cached):
            what = (f"one core's FMA peak in the same rounds (median "
                    f"{float(np.median(peaks)):.1f} GFLOP/s)")
        elif cached is not None:
            why = (f"the probe in the rounds measured {float(np.median(peaks)):.1f} GFLOP/s, "
                   f"under {PROBE_MIN_OF_PEAK:g} x it" if probed else "no probe in the rounds")
            peaks = [cached] * rounds
            what = f"the {peak.describe(np.float32, PERF_THREADS)} ({why})"
        else:
            return list(m["fraction_numpy"]), (f"numpy.matmul{kernel} {med_numpy:.1f} GFLOP/s in "
                                                "the same run; no measured peak, so no floor")
        floors = [NUMPY_FLOOR_OF_PEAK * g for g in peaks]
        cpu = m.get("gflops_cpu") or m["gflops"]
        by_floor = [g / f if f > 0 else float("inf") for g, f in zip(cpu, floors)]
        fraction = [min(f, g) for f, g in zip(m["fraction_numpy"], by_floor)]
        used = ("the floor" if sum(g < f for f, g in zip(m["fraction_numpy"], by_floor))
                > len(by_floor) / 2 else "numpy")
        return fraction, (f"numpy.matmul{kernel} {med_numpy:.1f} GFLOP/s in the same run, "
                          f"floor {NUMPY_FLOOR_OF_PEAK:g} x {what} = "
                          f"{float(np.median(floors)):.1f} GFLOP/s (median); "
                          f"the baseline in most rounds: {used}")
