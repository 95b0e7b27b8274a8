"""Wall-clock and CUDA-event timing with warm-up, repeats, medians and spread.

* :func:`time_fn` — one callable: warm-up calls (JIT compilation excluded), then ``repeats``
  timed calls; median, quartiles, min/max.
* :func:`interleaved` — several callables timed round-robin in one process (A B C A B C …) so
  that drifting machine load hits them alike; per-round ratios to a baseline give the speedup's
  median and spread. On noisy shared machines quote these ratios, not absolute times.

Every result carries :func:`kernellab.threads.status` (thread counts, and whether idle BLAS /
OpenMP threads were told to sleep instead of spinning: without that, interleaving Numba
``prange`` code with numpy/OpenBLAS is biased on few cores) and the clock used.

``setup`` callables return the arguments of one call, so each timed call can get fresh inputs
(outputs cannot be cached across calls); setup time is not counted.

On the ``gpu`` tier pass ``clock="cuda"``: CUDA events bracket each call (resolution about
0.5 us, CUDA Runtime API ``cudaEventElapsedTime``). The simulator has no clock; its tiers grade
modelled metrics instead.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from kernellab import threads


@dataclass
class Timing:
    """Seconds per call of one callable."""

    name: str
    times: list[float]
    clock: str
    warmup: int

    @property
    def median(self) -> float:
        return float(statistics.median(self.times))

    @property
    def q1(self) -> float:
        return float(np.percentile(self.times, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.times, 75))

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "median_s": self.median, "q1_s": self.q1, "q3_s": self.q3,
                "min_s": min(self.times), "max_s": max(self.times), "n": len(self.times),
                "spread": self.spread, "clock": self.clock, "warmup": self.warmup}


@dataclass
class Interleaved:
    """Result of :func:`interleaved`: per-callable timings and per-round speedups."""

    timings: dict[str, Timing]
    baseline: str
    speedups: dict[str, list[float]]  # name -> per-round baseline_time / time
    thread_status: dict = field(default_factory=dict)

    def speedup(self, name: str) -> float:
        """Median over rounds of (baseline time / ``name``'s time) in the same round."""
        return float(statistics.median(self.speedups[name]))

    def speedup_range(self, name: str) -> tuple[float, float]:
        """(min, max) of the per-round speedups: the spread to quote with the median."""
        return float(min(self.speedups[name])), float(max(self.speedups[name]))

    def to_dict(self) -> dict:
        return {"baseline": self.baseline,
                "timings": {k: v.to_dict() for k, v in self.timings.items()},
                "speedup_median": {k: self.speedup(k) for k in self.speedups},
                "speedup_range": {k: list(self.speedup_range(k)) for k in self.speedups},
                "threads": self.thread_status}


def _clock(kind: str):
    if kind == "wall":
        def run(fn, args):
            t0 = time.perf_counter()
            fn(*args)
            return time.perf_counter() - t0
        return run
    if kind == "cuda":
        from numba import cuda

        def run(fn, args):
            start, stop = cuda.event(), cuda.event()
            start.record()
            fn(*args)
            stop.record()
            stop.synchronize()
            return cuda.event_elapsed_time(start, stop) / 1e3
        return run
    raise ValueError(f"clock must be 'wall' or 'cuda', got {kind!r}")


def _args(setup: Callable | None, args: tuple) -> tuple:
    return tuple(setup()) if setup is not None else args


def time_fn(fn: Callable, *args, setup: Callable | None = None, warmup: int = 1,
            repeats: int = 5, clock: str = "wall", threads_: int | None = None,
            name: str | None = None) -> Timing:
    """Time ``fn(*args)`` (or ``fn(*setup())`` with fresh arguments per call).

    ``warmup`` untimed calls first (they include Numba's JIT compilation), then ``repeats``
    timed calls. ``threads_`` pins Numba's and the BLAS's thread counts for the duration.
    Returns a :class:`Timing` (seconds). Raises ValueError for repeats < 1.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    run = _clock(clock)
    with threads.pin(threads_):
        for _ in range(warmup):
            fn(*_args(setup, args))
        times = [run(fn, _args(setup, args)) for _ in range(repeats)]
    return Timing(name or getattr(fn, "__name__", "fn"), times, clock, warmup)


def interleaved(fns: dict[str, Callable], *, baseline: str, setup: Callable | None = None,
                args: tuple = (), warmup: int = 1, rounds: int = 5, clock: str = "wall",
                threads_: int | None = None, repeats: dict[str, int] | None = None,
                after: Callable | None = None) -> Interleaved:
    """Time several callables round-robin in one process and return speedups over ``baseline``.

    Each round calls every callable once (``repeats[name]`` times for a slow one, taking the
    median of those) on arguments from ``setup()`` (fresh per call) or ``args``. The speedup of
    ``name`` in a round is baseline time / its time in that round; the result gives the median
    and range over rounds. ``after(name, args)``, if given, runs right after each timed call,
    outside the timer (e.g. to check the output is complete the moment the call returns).
    Raises KeyError if ``baseline`` is not among ``fns``.
    """
    if baseline not in fns:
        raise KeyError(f"baseline {baseline!r} is not one of {list(fns)}")
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    repeats = repeats or {}
    run = _clock(clock)
    times: dict[str, list[float]] = {k: [] for k in fns}
    with threads.pin(threads_):
        for fn in fns.values():
            for _ in range(warmup):
                fn(*_args(setup, args))
        for _ in range(rounds):
            for name, fn in fns.items():
                ts = []
                for _ in range(max(1, repeats.get(name, 1))):
                    call_args = _args(setup, args)
                    ts.append(run(fn, call_args))
                    if after is not None:
                        after(name, call_args)
                times[name].append(float(statistics.median(ts)))
    timings = {k: Timing(k, v, clock, warmup) for k, v in times.items()}
    base = times[baseline]
    speedups = {k: [b / t for b, t in zip(base, v)] for k, v in times.items()}
    return Interleaved(timings, baseline, speedups, threads.status())


def gflops(flops: float, seconds: float) -> float:
    """FLOPs / seconds in GFLOP/s."""
    return flops / seconds / 1e9
