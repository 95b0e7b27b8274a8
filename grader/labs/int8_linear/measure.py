"""Lab 6 ``int8-linear``, worker side: the timed calls, next to the student's code.

:func:`measure_cpu`: ``int8_gemm`` and the provided naive integer loop
(:func:`reference_kernels.quant.int8_gemm_naive` under ``numba.njit``) interleaved in one
process, one thread, fresh inputs for every call; each of the submission's C checked exactly
right after it returns (:func:`exact_freivalds`, outside the timer); the last one saved for the
grader's full re-check (:class:`grader.labs._timed.TimedCalls`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._timed import TimedCalls, cpu_figures, threads_words


def measure_cpu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The measurements ``spec.rules_cpu`` judges (per-round ratios and rates, the setup shown
    in the report, ``"recheck"``: the last timed call, saved under ``workdir``)."""
    from kernellab import timing
    import numba

    from reference_kernels.quant import int8_gemm_naive

    naive = numba.njit(cache=True)(int8_gemm_naive)
    fn = namespace["int8_gemm"]
    n = int(plan["n"])
    rng = np.random.default_rng()
    check_rng = np.random.default_rng()
    fill = np.iinfo(np.int32).min
    calls = TimedCalls(("Aq", "Bq"), ("C",),
                       is_correct=lambda ab, c: exact_freivalds(*ab, c[0], check_rng),
                       is_unwritten=lambda c: bool((c[0] == fill).any()))
    fresh = calls.setup(
        lambda: (rng.integers(-128, 128, size=(n, n), dtype=np.int8),
                 rng.integers(-128, 128, size=(n, n), dtype=np.int8)),
        lambda: (np.full((n, n), fill, np.int32),))

    small = fresh()
    naive(small[0][:2], small[1], small[2][:2])  # compile outside the timed rounds
    threads_ = int(plan["threads"])
    rounds = int(plan["rounds"])
    g = timing.interleaved({"submission": fn, "naive": naive}, baseline="submission",
                           setup=fresh, warmup=1, rounds=rounds, threads_=threads_,
                           after=calls.after)
    t = {k: v.times for k, v in g.timings.items()}
    ops = 2.0 * n ** 3
    return {
        "speedup_naive": [a / b for a, b in zip(t["naive"], t["submission"])],
        "gops": [ops / x / 1e9 for x in t["submission"]],
        "gops_naive": [ops / x / 1e9 for x in t["naive"]],
        **cpu_figures(threads_, f"int8 x int8 -> int32, M=N=K={n}, {threads_words(threads_)}, "
                                f"{rounds} interleaved rounds, fresh inputs per call",
                      g.to_dict()["timings"]),
        "recheck": calls.save(workdir, {"fn": "int8_gemm", "M": n, "N": n, "K": n,
                                        "kind": "random"}),
    }


def exact_freivalds(A: np.ndarray, B: np.ndarray, C: np.ndarray, rng, rounds: int = 2) -> bool:
    """C == A @ B exactly? Two random +-1 vectors x: C x == A (B x) in int64 (exact, O(n^2)); a
    wrong C passes with probability at most 2^-rounds per wrong row, in practice never."""
    if C.shape != (A.shape[0], B.shape[1]) or C.dtype.kind not in "iu":
        return False
    A64, B64, C64 = A.astype(np.int64), B.astype(np.int64), C.astype(np.int64)
    for _ in range(rounds):
        x = rng.choice(np.array([-1, 1], np.int64), size=B.shape[1])
        if not np.array_equal(C64 @ x, A64 @ (B64 @ x)):
            return False
    return True
