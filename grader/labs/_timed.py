"""Worker side: the bookkeeping of a CPU lab's timed calls, shared by the labs that time a
submission against a baseline with :func:`kernellab.timing.interleaved`.

Every call gets fresh inputs (a cache of results keyed by the inputs cannot help); right after
each of the *submission's* calls returns, outside the timer, its outputs are checked (a kernel
that skips work on the calls it guesses are timed fails) and counted if still unwritten (work
that escaped the timer); the last call is kept — its inputs from before the call, its inputs and
outputs after it — and :meth:`TimedCalls.save` writes them for the grader's full re-check
(:func:`grader.runner.recheck`: the outputs in full, and the inputs unchanged).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np


class TimedCalls:
    """``inputs`` / ``outputs``: the argument names, in call order (inputs first).
    ``is_correct(inputs_before, outputs) -> bool`` and ``is_unwritten(outputs) -> bool`` judge a
    submission call right after it returns."""

    def __init__(self, inputs: Sequence[str], outputs: Sequence[str],
                 is_correct: Callable[[tuple, tuple], bool],
                 is_unwritten: Callable[[tuple], bool]):
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.is_correct, self.is_unwritten = is_correct, is_unwritten
        self.checked = self.wrong = self.unwritten = 0
        self._before: tuple = ()
        self.last: tuple | None = None

    def setup(self, make_inputs: Callable[[], tuple], make_outputs: Callable[[], tuple]):
        """A ``setup`` for :func:`kernellab.timing.interleaved`: fresh inputs (remembered as
        they were before the call) and fresh outputs for every call."""
        def fresh():
            ins = tuple(make_inputs())
            self._before = tuple(a.copy() for a in ins)
            return ins + tuple(make_outputs())
        return fresh

    def after(self, name: str, args: tuple) -> None:
        """The ``after`` hook of :func:`kernellab.timing.interleaved` (outside the timer)."""
        if name != "submission":
            return
        n = len(self.inputs)
        outs = tuple(args[n:])
        self.checked += 1
        if self.is_unwritten(outs):
            self.unwritten += 1
        if not self.is_correct(self._before, outs):
            self.wrong += 1
        self.last = (self._before, tuple(a.copy() for a in args[:n]),
                     tuple(o.copy() for o in outs))

    def save(self, workdir: Path, params: dict) -> dict:
        """Write the last submission call for the grader; returns the measurement's
        ``"recheck"`` entry. Raises RuntimeError if the submission was never called."""
        if self.last is None:
            raise RuntimeError("no timed call of the submission was recorded")
        before, ins, outs = self.last
        np.savez(workdir / "recheck_before.npz", **dict(zip(self.inputs, before)))
        np.savez(workdir / "recheck.npz", **dict(zip(self.inputs, ins)),
                 **dict(zip(self.outputs, outs)))
        return {"path": str(workdir / "recheck.npz"),
                "before": str(workdir / "recheck_before.npz"),
                "params": params, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "nan_after_return": self.unwritten, "wrong_calls": self.wrong,
                "checked_calls": self.checked}


def cpu_figures(threads_: int, description: str, timings: dict, dtype=np.float32) -> dict:
    """The figures every CPU lab's measurement reports beside its ratios: the nominal peak of
    ``threads_`` cores from /proc (``peak_gflops``, ``peak_formula``: shown, never a limit) and
    ``setup`` (``description``, the thread settings' note, the interleaved ``timings``)."""
    from kernellab import machine, threads

    info = machine.cpu_info()
    cores = min(info.cores, threads_)
    return {"peak_gflops": info.peak_flops(dtype, cores=cores) / 1e9,
            "peak_formula": info.formula(dtype, cores=cores),
            "setup": {"description": description, "threads_note": threads.status()["note"],
                      "timings": timings}}


def threads_words(threads_: int) -> str:
    """``"1 thread"``, ``"2 threads"``."""
    return f"{threads_} thread" + ("s" if threads_ != 1 else "")
