"""What the CUDA labs share, worker side (run next to the student's code; the grader side is
:mod:`grader.labs._cuda`): a timed call captured on the sim tier (:func:`captured_call`), the
course baselines' launches (:func:`baseline_launches`), the re-check files
(:func:`save_recheck`), the gpu tier's timed-call bookkeeping (:class:`DeviceTimedCalls`) and
the replay of a call's launches on new inputs (:func:`replay`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import REPLAY_SLOTS, launch_dict
from grader.labs._timed import TimedCalls


def captured_call(fn, args: tuple, call: str, *, record: bool = False, sites: bool = True):
    """Worker side, sim tier: ``fn(*args)`` under :func:`kernellab.sim.capture` with per-site
    counters unless not ``sites`` (per-site counters keep launches off the simulator's compiled
    path: :mod:`kernellab.sim.compiled`), and the launches and copies recorded for a replay with
    ``record``; returns the
    capture. A simulator error (a hazard, an unsupported feature) propagates as it is; any
    other exception becomes a RuntimeError naming ``call`` (e.g. ``"gemm(A, B, C)"``) and the
    device arrays the performance phase passes."""
    from kernellab import sim

    try:
        with sim.capture(record=record, sites=sites) as cap:
            fn(*args)
    except Exception as exc:
        if isinstance(exc, (sim.SimError, NotImplementedError)):
            raise
        raise RuntimeError(
            f"{call} on numba device arrays (the performance phase passes cuda.to_device "
            f"arrays, so copies are not measured) raised {type(exc).__name__}: {exc}") from exc
    return cap


def baseline_launches(name: str, shape: dict, fn, args, *, sites: bool = False) -> list[dict]:
    """Worker side, sim tier: the launches of the course kernel ``fn(*args())`` (``args``
    makes its arguments, the output a fresh array), from the baseline cache
    (:mod:`grader.labs._baseline`) keyed by ``name`` and ``shape``, or simulated once (with
    per-site counters when ``sites``)."""
    def run():
        from kernellab import sim

        with sim.capture(sites=sites) as cap:
            fn(*args())
        return [launch_dict(s) for s in cap.launches]

    from grader.labs import _baseline

    return _baseline.launches(name, shape, run)


def save_recheck(workdir: Path, params: dict, before: dict, after: dict, inputs, outputs,
                 **extra) -> dict:
    """Worker side: write the timed call's inputs as they were before it (``before``) and its
    inputs and outputs after it (``after``) for :func:`grader.runner.recheck`; returns the
    measurement's ``"recheck"`` entry (``extra`` added to it, e.g. ``scalars``)."""
    np.savez(workdir / "recheck_before.npz", **before)
    np.savez(workdir / "recheck.npz", **after)
    return {"path": str(workdir / "recheck.npz"), "before": str(workdir / "recheck_before.npz"),
            "params": params, "inputs": list(inputs), "outputs": list(outputs), **extra}


class DeviceTimedCalls(TimedCalls):
    """:class:`grader.labs._timed.TimedCalls` for device arrays (gpu tier): each call's inputs
    are made on the host and sent to the device, its outputs are NaN device arrays, and
    ``scalars`` follow them in the call; after each submission call (outside the timer) its
    outputs and inputs are copied back to the host and judged there. ``is_unwritten``
    defaults to "any NaN in an output"."""

    def __init__(self, inputs, outputs, is_correct, is_unwritten=None, scalars: tuple = ()):
        super().__init__(inputs, outputs, is_correct,
                         is_unwritten or (lambda outs: any(np.isnan(o).any() for o in outs)))
        self.scalars = tuple(scalars)

    def setup(self, make_inputs, make_outputs):
        from numba import cuda

        def fresh():
            ins = tuple(make_inputs())
            self._before = ins                  # the device gets copies: never written
            return (tuple(cuda.to_device(x) for x in ins)
                    + tuple(cuda.to_device(o) for o in make_outputs()) + self.scalars)
        return fresh

    def after(self, name: str, args: tuple) -> None:
        if name != "submission":
            return
        n, k = len(self.inputs), len(self.outputs)
        outs = tuple(a.copy_to_host() for a in args[n:n + k])
        self.checked += 1
        if self.is_unwritten(outs):
            self.unwritten += 1
        if not self.is_correct(self._before, outs):
            self.wrong += 1
        self.last = (self._before, tuple(a.copy_to_host() for a in args[:n]), outs)


def assemble_pieces(result, pieces) -> np.ndarray:
    """The output rebuilt from replayed copies: ``result`` is what the call left in the output
    and ``pieces`` (host array, its content when the call returned) the host arrays device
    copies wrote; wherever a piece's content stood as a contiguous run of ``result``, the
    piece's replayed content is put (NaN elsewhere). For a host that assembles the output
    from per-head copies, ``O[b, h] = dO.copy_to_host()``, which the replay does not repeat;
    the values still come only from replayed copies of device arrays."""
    flat = np.asarray(result).ravel()
    out = np.full(flat.shape, np.nan, dtype=flat.dtype)
    for dest, before in pieces:
        b = np.asarray(before).ravel().astype(flat.dtype)
        if b.size == 0 or b.size > flat.size or b.dtype.kind != "f":
            continue
        for st in np.flatnonzero(flat[:flat.size - b.size + 1] == b[0])[:256]:
            if np.array_equal(flat[st:st + b.size], b):
                out[st:st + b.size] = np.asarray(dest).ravel().astype(flat.dtype)
    return out.reshape(np.shape(result))


def replay_candidates(recorded, output, inputs=(), extra=()) -> np.ndarray:
    """(REPLAY_SLOTS, *output.shape) array of ``output``'s dtype, NaN-filled: where a replayed
    call's result may be -- ``output`` itself, then every floating-point array of its size a
    replayed launch or copy used (a device output, the host array a ``copy_to_host``
    returned: the host's own ``O[...] = ...`` is not replayed), in order, each reshaped to
    ``output``'s shape -- leaving out the ``inputs`` (the refilled arrays, host or device
    buffers), their views and the device copies made of them (for some inputs an input *is*
    the answer: attention over one key is V) -- and then the ``extra`` arrays (e.g.
    :func:`assemble_pieces`). Only kernels and copies ran in the replay, so a slot that holds
    the right answer for the new inputs was computed on the device."""
    shape = np.shape(output)
    out = np.full((REPLAY_SLOTS, *shape), np.nan, dtype=np.asarray(output).dtype)
    # the recorded operations hold numpy buffers (kernellab.sim.engine); inputs may be device
    # arrays
    inputs = [np.asarray(getattr(a, "_ary", a)) for a in inputs]

    def is_input(a):
        return any(np.may_share_memory(a, x) for x in inputs)

    slots = [np.asarray(output)] + [np.asarray(a) for a in extra]
    for op in recorded:
        source = getattr(op, "source", None)
        if isinstance(source, np.ndarray) and is_input(source):
            inputs.append(op.dest)              # a copy of an input is an input
        slots.extend(op.arrays())
    seen, i = set(), 0
    for k, a in enumerate(slots):
        if i == REPLAY_SLOTS:
            break
        if (id(a) in seen or a.size != out[0].size or a.dtype.kind != "f"
                or (k > len(extra) and is_input(a))):
            continue
        seen.add(id(a))
        out[i] = a.reshape(shape)
        i += 1
    return out


def replay(recorded, arrays: dict, inputs, outputs) -> str | None:
    """Worker side: repeat the call's launches and host-device copies
    (:func:`kernellab.sim.replay`) with each of ``inputs`` in ``arrays`` refilled with new
    values (normal, with the original's mean and spread, from fresh entropy) and each
    of ``outputs`` with NaN; store the inputs as ``arrays["replay_" + name]`` and, for each
    output, :data:`REPLAY_SLOTS` candidates for the replayed result
    (:func:`replay_candidates`) as ``arrays["replay_" + name]``; restore the originals.
    The kernels of a call that computes its result on the device recompute it from the new
    inputs; a result computed on the host -- brought in through an argument, a scalar, a
    closure or a copy -- stays what it was, since no host code runs again. Returns None,
    or what went wrong in plain words."""
    from kernellab import sim

    saved = {k: arrays[k].copy() for k in (*inputs, *outputs)}
    # host arrays copies from the device wrote, as the call left them: the pieces the host
    # may have assembled the output from (``O[b, h] = dO.copy_to_host()``)
    pieces = [(op.dest, op.dest.copy()) for op in recorded
              if getattr(op, "to_host", False)]
    try:
        for k in inputs:
            a = arrays[k]
            rng = np.random.default_rng()      # fresh entropy: not predictable
            x = saved[k].astype(np.float64)
            fresh = x.mean() + (x.std() or 1.0) * rng.standard_normal(a.shape)
            np.copyto(a, fresh.astype(a.dtype))
        for k in outputs:
            arrays[k].fill(np.nan)
        try:
            # checked once already: no hazard checks or GPU compile the second time
            with sim.capture(checks="fast", gpu_compile=False):
                sim.replay(recorded, fresh=[arrays[k] for k in inputs])
        except Exception as exc:  # noqa: BLE001 - reported in words
            return (f"the call's launches, replayed on new inputs, raised "
                    f"{type(exc).__name__}: {exc}")
        replayed = {k: arrays[k].copy() for k in inputs}
        for k in outputs:
            assembled = assemble_pieces(saved[k], pieces)
            replayed[k] = replay_candidates(recorded, arrays[k],
                                            [arrays[j] for j in inputs], [assembled])
        for k, v in replayed.items():
            arrays["replay_" + k] = v
    finally:
        for k, v in saved.items():
            np.copyto(arrays[k], v)
    return None

