"""Lab 4 ``winograd``, worker side: the timed calls, next to the student's code.

:func:`measure_cpu`: the submission and the provided direct kernel
(:func:`reference_kernels.conv.conv2d_direct` under ``numba.njit``) interleaved in one process,
one thread, fresh inputs for every call; every submission call's output sampled right after it
returns (:func:`sampled_ok`, outside the timer); the last one saved for the grader's full
re-check (:class:`grader.labs._timed.TimedCalls`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._timed import TimedCalls, cpu_figures, threads_words
from reference_kernels.conv import conv2d_flops


def measure_cpu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The measurements ``spec.rules_cpu`` judges (per-round ratios and rates, the setup shown
    in the report, ``"recheck"``: the last timed call, saved under ``workdir``)."""
    from kernellab import timing
    import numba

    from reference_kernels.conv import conv2d_direct

    direct = numba.njit(cache=True)(conv2d_direct)
    fn = namespace["conv2d_winograd"]
    s = plan["shape"]
    N, C, K, H, Wd = (int(s[k]) for k in ("N", "C", "K", "H", "W"))
    rng = np.random.default_rng()
    check_rng = np.random.default_rng()
    calls = TimedCalls(("X", "W"), ("Y",),
                       is_correct=lambda xw, y: sampled_ok(*xw, y[0], check_rng),
                       is_unwritten=lambda y: bool(np.isnan(y[0]).any()))
    fresh = calls.setup(
        lambda: (rng.standard_normal((N, C, H, Wd), dtype=np.float32),
                 rng.standard_normal((K, C, 3, 3), dtype=np.float32)),
        lambda: (np.full((N, K, H, Wd), np.nan, np.float32),))

    tiny = fresh()
    direct(*tiny)  # compile outside the timed rounds
    threads_ = int(plan["threads"])
    rounds = int(plan["rounds"])
    g = timing.interleaved({"submission": fn, "direct": direct}, baseline="submission",
                           setup=fresh, warmup=1, rounds=rounds, threads_=threads_,
                           after=calls.after)
    t = {k: v.times for k, v in g.timings.items()}
    flops = conv2d_flops(N, C, K, H, Wd)
    return {
        "speedup_direct": [a / b for a, b in zip(t["direct"], t["submission"])],
        "gflops": [flops / x / 1e9 for x in t["submission"]],
        "gflops_direct": [flops / x / 1e9 for x in t["direct"]],
        **cpu_figures(threads_, f"float32, {threads_words(threads_)}, {rounds} interleaved "
                                f"rounds, fresh inputs per call, N={N} C={C} K={K} H={H} "
                                f"W={Wd}; effective GFLOP/s = direct-convolution FLOPs / time",
                      g.to_dict()["timings"]),
        "recheck": calls.save(workdir, dict(plan["shape"])),
    }


def sampled_ok(X: np.ndarray, W: np.ndarray, Y: np.ndarray, rng, samples: int = 256) -> bool:
    """Worker side, after every timed call (outside the timer): did the call compute the whole
    convolution? ``samples`` random outputs against float64 sums, within 2^-12 of
    sum_c (sum of |X| over the 5x5 window around the output) (sum |W[k, c]|), which bounds every
    honest float32 F(2x2, 3x3) or direct result by orders of magnitude (B_wino <= 9 x that sum
    and the error <= gamma_11 B_wino + the channel sum's) while a skipped, stale or zeroed output
    misses it. The full check is the grader's, on the last call."""
    N, C, H, Wd = X.shape
    K = W.shape[0]
    if Y.shape != (N, K, H, Wd) or not np.isfinite(Y).all():
        return False
    X64 = np.zeros((N, C, H + 4, Wd + 4))
    X64[:, :, 2:2 + H, 2:2 + Wd] = X
    W64 = W.astype(np.float64)
    n = rng.integers(0, N, samples)
    k = rng.integers(0, K, samples)
    p = rng.integers(0, H, samples)
    q = rng.integers(0, Wd, samples)
    r = np.arange(5)
    win5 = X64[n[:, None, None, None], np.arange(C)[None, :, None, None],
               (p[:, None, None, None] + r[None, None, :, None]),
               (q[:, None, None, None] + r[None, None, None, :])]        # samples C 5 5
    win3 = win5[:, :, 1:4, 1:4]
    ref = (win3 * W64[k]).sum(axis=(1, 2, 3))
    scale = (np.abs(win5).sum(axis=(2, 3)) * np.abs(W64[k]).sum(axis=(2, 3))).sum(axis=1)
    err = np.abs(Y[n, k, p, q].astype(np.float64) - ref)
    return bool((err <= 2.0**-12 * scale).all())
