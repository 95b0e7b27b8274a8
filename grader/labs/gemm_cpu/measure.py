"""Lab 1 ``gemm-cpu``, worker side: the timed calls, next to the student's code.

:func:`measure_cpu` times the submission in two interleaved groups in one process, one thread,
fresh inputs for every call: against numpy.matmul at ``plan["n"]`` and against the naive ijk
kernel at ``plan["n_naive"]``; every submission call's output is checked right after it returns
(outside the timer, :func:`grader.labs._gemm.probably_correct`) and the last one is saved for the
grader's full re-check (:class:`grader.labs._timed.TimedCalls`). In each round of the numpy
group, right after numpy's call and outside the timer, one core's FMA peak is measured too
(:func:`kernellab.machine.fma_peak.one_core_probe`): the floor under numpy's speed in the
fraction rule comes from the same rounds.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from grader.labs._gemm import probably_correct
from grader.labs._timed import TimedCalls, cpu_figures, threads_words

# Bound when the grader's worker imports this module, before the submission loads: the baseline
# the submission is timed against cannot be swapped out from under the grader.
_NUMPY_MATMUL = np.matmul


def measure_cpu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The measurements ``spec.rules_cpu`` judges (per-round ratios and rates; the setup shown
    in the report; ``"recheck"``: the last timed call, saved under ``workdir``)."""
    from kernellab import machine, timing
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

    # one core's FMA rate, right after each numpy call of the numpy group (outside the timer,
    # in the same round); none if the probe cannot be built here (the rule then says so)
    peak_flops: list = []
    try:
        from kernellab.machine.fma_peak import one_core_probe

        probe = one_core_probe(dt)
    except Exception:  # noqa: BLE001 - any failure to build the probe: no per-round floor
        probe = None

    def after_numpy_group(name, args):
        calls.after(name, args)
        if name == "numpy" and probe is not None:
            peak_flops.append(probe())

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
                                 after=after_numpy_group)
    tn = {k: v.times for k, v in g_naive.timings.items()}
    tb = {k: v.times for k, v in g_numpy.timings.items()}
    n, n2 = int(plan["n"]), int(plan["n_naive"])
    return {
        "speedup_naive": [a / b for a, b in zip(tn["naive"], tn["submission"])],
        "fraction_numpy": [a / b for a, b in zip(tb["numpy"], tb["submission"])],
        "gflops": [2.0 * n**3 / x / 1e9 for x in tb["submission"]],
        "gflops_numpy": [2.0 * n**3 / x / 1e9 for x in tb["numpy"]],
        # the same calls' rates from their CPU time (the last ``rounds``: after the warm-up)
        "gflops_cpu": [2.0 * n**3 / max(x, 1e-9) / 1e9 for x in cpu_s[-rounds:]],
        # one core's FMA peak in the same rounds (the ``after`` hook runs in the rounds only, not
        # in the warm-up); empty if the probe could not be built
        "gflops_peak": [x / 1e9 for x in peak_flops[-rounds:]] if len(peak_flops) >= rounds
        else [],
        "gflops_naive": [2.0 * n2**3 / x / 1e9 for x in tn["naive"]],
        "gflops_small": [2.0 * n2**3 / x / 1e9 for x in tn["submission"]],
        "blas": machine.blas_kernel(),
        **cpu_figures(threads_, f"{dt.name}, {threads_words(threads_)}, {rounds} interleaved "
                                f"rounds per group, fresh inputs per call: vs numpy at "
                                f"M=N=K={n}, vs naive at M=N=K={n2}",
                      {"vs_naive": g_naive.to_dict()["timings"],
                       "vs_numpy": g_numpy.to_dict()["timings"]}, dt),
        # the last timed call: the numpy group, size n
        "recheck": calls.save(workdir, {"M": n, "N": n, "K": n, "dtype": dt.name}),
    }
