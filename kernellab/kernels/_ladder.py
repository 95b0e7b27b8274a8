"""The ``main`` every CUDA kernel ladder shares: validate each version, then time the ones that
passed (llm.c's ``dev/cuda/*.cu``: ``validate_result`` for every kernel, then
``benchmark_kernel``).

A ladder module declares its versions (name -> launch function, :data:`LADDER`), a function
that builds a :class:`Case` (the inputs, rounded to the kernel's dtype; the outputs to
allocate; the check against the float64 golden of ``reference_kernels`` with the tolerance of
:mod:`kernellab.numerics`, as its tests use), optionally its gpu-tier baselines, and calls
:func:`cli` from ``python -m kernellab.kernels.<ladder>``. :func:`run` does the work:

1. **validate**: every version is called on the case's inputs with its outputs filled with NaN
   (integer outputs: their minimum), the outputs are compared with the golden reference
   (``Case.check``) and the inputs must come back unchanged. A version that raises, or fails
   the check on the case or on any ``also_check`` case, is reported as failing and not timed.
2. **time** the versions that passed, by tier:

   * ``sim``: the modelled time of the validation run (:func:`kernellab.sim.model.modelled_time`
     of each captured launch, summed; the 3 µs launch overhead of each included; ``Case.flops``
     given to the model of a one-launch version). Deterministic: the same case gives the same
     figures on every machine. ``spread`` is 0.
   * ``gpu``: CUDA events (:func:`kernellab.timing.interleaved`, ``clock="cuda"``) on device
     arrays: ``warmup`` untimed calls each, then ``rounds`` interleaved rounds (v1 v2 ... v1 v2
     ...), the outputs refilled with NaN before every call (outside the timer); ``seconds`` the
     median, ``spread`` the interquartile range over the median. The outputs of the last round's
     calls are checked again: a version whose timed calls do not compute the result fails.
     Baselines (cuBLAS through cupy, a device copy) are timed the same way.

Units: seconds; rates in GFLOP/s or GB/s (``Case.work`` / seconds / 1e9, ``Case.work_unit``
"FLOP" or "B"); speedups over the first version timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import kernellab

__all__ = ["Case", "Baseline", "VersionResult", "LadderResult", "run", "render", "cli",
           "copy_baseline"]


@dataclass
class Case:
    """One input of a ladder.

    ``inputs``: name -> host array (already of the kernel's dtype); ``outputs``: name ->
    ``(shape, dtype)``; ``order``: the arrays' names in the launch function's argument order
    (default: inputs, then outputs); ``kwargs``: further keyword arguments of every call.
    ``check(version, outputs) -> kernellab.numerics.Comparison``: the outputs (host arrays)
    against the float64 golden reference. ``work``: the FLOPs or bytes (``work_unit`` "FLOP" or
    "B") of one call, for the rate column; ``flops``: what the sim tier's model is told a
    one-launch version computes (None: compute not modelled).
    """

    label: str
    inputs: dict
    outputs: dict
    check: Callable
    order: tuple | None = None
    kwargs: dict = field(default_factory=dict)
    work: float = 0.0
    work_unit: str = "FLOP"
    flops: int | None = None

    def names(self) -> tuple:
        return tuple(self.order) if self.order else (*self.inputs, *self.outputs)


@dataclass
class Baseline:
    """A gpu-tier reference point timed beside the versions: ``fn`` takes the case's arrays
    (device arrays, ``Case.order``) and its ``kwargs``. ``validate``: its outputs are checked
    like a version's (cuBLAS computes the same product); False for a different operation (a
    device copy of the input), whose ``work`` (default the case's) gives its rate."""

    name: str
    fn: Callable
    validate: bool = True
    work: float | None = None


@dataclass
class VersionResult:
    """One version's (or baseline's) figures. ``seconds`` is None when it was not timed."""

    name: str
    ok: bool
    message: str = ""
    budget_used: float | None = None
    #: max |output - golden| of the validation call (float64)
    error: float | None = None
    seconds: float | None = None
    spread: float | None = None
    times: list = field(default_factory=list)
    rate: float | None = None
    speedup: float | None = None
    launches: int | None = None
    kernel_seconds: float | None = None
    bound: str | None = None
    baseline: bool = False

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class LadderResult:
    """What :func:`run` found: the tier, the clock ("model <profile>" or "cuda events"), the
    case, the rounds, and one :class:`VersionResult` per version then per baseline."""

    ladder: str
    tier: str
    clock: str
    case: str
    work_unit: str
    rounds: int
    results: "OrderedDict[str, VersionResult]"
    checked: list = field(default_factory=list)
    device: str = ""
    notes: list = field(default_factory=list)
    #: the version the speedups are relative to (the first one timed)
    reference: str = ""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results.values())

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "results"}
        d["ok"] = self.ok
        d["results"] = {k: r.to_dict() for k, r in self.results.items()}
        return d


def _filled(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind in "fc" else np.iinfo(dtype).min
    return np.full(shape, fill, dtype)


def _host_args(case: Case) -> tuple[dict, tuple]:
    arrays = {k: v.copy() for k, v in case.inputs.items()}
    arrays.update({k: _filled(*spec) for k, spec in case.outputs.items()})
    return arrays, tuple(arrays[k] for k in case.names())


def _verdict(case: Case, name: str, outputs: dict, inputs_now: dict) -> tuple:
    """(ok, message, budget used, max abs error) of one call's outputs and inputs."""
    changed = [k for k, v in case.inputs.items() if not np.array_equal(inputs_now[k], v,
                                                                      equal_nan=True)]
    if changed:
        return False, f"modified its input(s) {', '.join(changed)}", None, None
    cmp = case.check(name, outputs)
    return (bool(cmp.ok), ("correct" if cmp.ok else cmp.message), float(cmp.budget_used),
            float(cmp.max_abs))


def _call_host(case: Case, name: str, fn, capture=None):
    """Call ``fn`` on fresh host arrays of ``case`` (under ``capture``, a context manager
    factory, if given); return (ok, message, budget, error, captured)."""
    arrays, args = _host_args(case)
    try:
        if capture is None:
            fn(*args, **case.kwargs)
            cap = None
        else:
            with capture() as cap:
                fn(*args, **case.kwargs)
    except Exception as exc:  # noqa: BLE001 - a failing version is reported, not raised
        return False, f"raised {type(exc).__name__}: {exc}", None, None, None
    verdict = _verdict(case, name, {k: arrays[k] for k in case.outputs},
                       {k: arrays[k] for k in case.inputs})
    return (*verdict, cap)


def _modelled(launches, case: Case, profile) -> dict:
    from kernellab.sim import model

    total = kernel = 0.0
    longest = None
    for launch in launches:
        c = dict(launch.counters)
        if case.flops is not None and len(launches) == 1:
            c["flops"] = case.flops
        mt = model.modelled_time(c, profile)
        total += mt.seconds
        kernel += mt.kernel_seconds
        if longest is None or mt.kernel_seconds > longest.kernel_seconds:
            longest = mt
    return {"seconds": total, "kernel_seconds": kernel, "launches": len(launches),
            "bound": longest.kernel_bound if longest is not None else None}


def _device_name() -> str:
    try:
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - a name only
        return "GPU"


def run(versions, case: Case, *, ladder: str = "ladder", baselines=(), also_check=(),
        rounds: int = 5, warmup: int = 1, profile: str = "a100") -> LadderResult:
    """Validate every version of ``versions`` (name -> launch function) on ``case`` (and on
    each case of ``also_check``, validated only), then time those that passed: modelled on the
    sim tier (``profile`` of :mod:`kernellab.sim.model`), CUDA events on the gpu tier with the
    ``baselines`` (:class:`Baseline`; ignored on the sim tier, which cannot time them). Returns a
    :class:`LadderResult`. Raises RuntimeError when the process has no CUDA tier, ValueError for
    rounds < 1 or no versions."""
    tier = kernellab.TIER
    if tier not in ("sim", "gpu"):
        raise RuntimeError("no CUDA tier in this process (KERNELLAB_DEVICE is wrong, or the "
                           "GPU could not be used): set KERNELLAB_DEVICE=sim or gpu")
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    versions = OrderedDict(versions)
    if not versions:
        raise ValueError("a ladder needs at least one version")
    results = OrderedDict((n, VersionResult(n, True)) for n in versions)
    for extra in also_check:
        for name, fn in versions.items():
            r = results[name]
            if not r.ok:
                continue
            ok, msg, *_ = _call_host(extra, name, fn)
            if not ok:
                r.ok, r.message = False, f"at {extra.label}: {msg}"
    baselines = list(baselines) if tier == "gpu" else []
    if tier == "sim":
        out = _run_sim(versions, case, results, profile)
    else:
        out = _run_gpu(versions, case, results, baselines, rounds, warmup)
    out.ladder = ladder
    out.checked = [case.label] + [c.label for c in also_check]
    work = {b.name: (case.work if b.work is None else b.work) for b in baselines}
    timed = [r for r in out.results.values() if r.seconds]
    first = next((r for r in timed if not r.baseline), None)
    out.reference = first.name if first is not None else ""
    for r in timed:
        w = work.get(r.name, case.work)
        r.rate = w / r.seconds / 1e9 if w else None
        if first is not None and r.speedup is None:
            r.speedup = first.seconds / r.seconds
    return out


def _run_sim(versions, case, results, profile) -> LadderResult:
    from kernellab import sim
    from kernellab.sim import model

    p = model.get_profile(profile)
    for name, fn in versions.items():
        r = results[name]
        if not r.ok:
            continue
        r.ok, r.message, r.budget_used, r.error, cap = _call_host(case, name, fn,
                                                                  capture=sim.capture)
        if not r.ok:
            continue
        if not cap.launches or cap.unchecked:
            r.message = ("correct, but " + (f"{', '.join(cap.unchecked)} ran on numba's stock "
                         "simulator, which counts nothing" if cap.unchecked else
                         "it launched no kernel on the device") + ": nothing to model")
            continue
        m = _modelled(cap.launches, case, p)
        r.seconds, r.kernel_seconds = m["seconds"], m["kernel_seconds"]
        r.launches, r.bound = m["launches"], m["bound"]
        r.spread, r.times = 0.0, [m["seconds"]]
    return LadderResult("", "sim", f"model {p.name}", case.label, case.work_unit, 1, results,
                        notes=[f"modelled on {p.description} (kernellab.sim.model), "
                               "launch overhead included: deterministic"])


def _run_gpu(versions, case, results, baselines, rounds, warmup) -> LadderResult:
    from numba import cuda

    from kernellab import timing

    fill = {k: _filled(*spec) for k, spec in case.outputs.items()}
    d_in = {k: cuda.to_device(v) for k, v in case.inputs.items()}
    d_out = {k: cuda.to_device(v) for k, v in fill.items()}
    arrays = {**d_in, **d_out}

    def fresh():                       # outside the timer: every call starts from NaN
        for k, d in d_out.items():
            d.copy_to_device(fill[k])
        return tuple(arrays[k] for k in case.names())

    def verdict(name):
        cuda.synchronize()
        return _verdict(case, name, {k: d.copy_to_host() for k, d in d_out.items()},
                        {k: d.copy_to_host() for k, d in d_in.items()})

    entries = OrderedDict((n, (f, True)) for n, f in versions.items())
    for b in baselines:
        entries[b.name] = (b.fn, b.validate)
        results[b.name] = VersionResult(b.name, True, baseline=True)
    timed = OrderedDict()
    for name, (fn, validate) in entries.items():
        r = results[name]
        if not r.ok:
            continue
        try:
            fn(*fresh(), **case.kwargs)        # also compiles the kernels
            if validate:
                r.ok, r.message, r.budget_used, r.error = verdict(name)
            else:
                cuda.synchronize()
                r.message = "not checked (a reference point, not this operation)"
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            r.ok, r.message = False, f"raised {type(exc).__name__}: {exc}"
        if r.ok:
            timed[name] = (lambda *a, f=fn: f(*a, **case.kwargs))
    calls = dict.fromkeys(timed, 0)

    def after(name, _args):            # the last round's outputs are checked again
        calls[name] += 1
        if calls[name] == rounds and entries[name][1]:
            ok, msg, *_ = verdict(name)
            if not ok:
                results[name].ok = False
                results[name].message = f"its timed calls' output is wrong: {msg}"

    if timed:
        first = next(iter(timed))
        res = timing.interleaved(timed, baseline=first, setup=fresh, warmup=warmup,
                                 rounds=rounds, clock="cuda", after=after)
        for name, t in res.timings.items():
            r = results[name]
            if r.ok:
                r.seconds, r.spread, r.times = t.median, t.spread, list(t.times)
                if results[first].ok and not results[first].baseline:
                    r.speedup = res.speedup(name)     # median of the per-round ratios
    return LadderResult("", "gpu", "cuda events", case.label, case.work_unit, rounds, results,
                        device=_device_name(),
                        notes=[f"CUDA events: {warmup} warm-up call(s), median of {rounds} "
                               "interleaved rounds; spread = IQR / median"])


def _fmt_s(s) -> str:
    if s is None:
        return "-"
    for unit, f in (("s", 1.0), ("ms", 1e3), ("us", 1e6)):
        if s * f >= 1.0:
            return f"{s * f:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def render(res: LadderResult) -> str:
    """A plain-text table of :func:`run`'s result, one row per version then per baseline."""
    unit = {"FLOP": "GFLOP/s", "B": "GB/s"}.get(res.work_unit, f"G{res.work_unit}/s")
    where = f"{res.tier} tier" + (f", {res.device}" if res.device else "")
    lines = [f"{res.ladder}: {res.case} ({where}; clock: {res.clock})"] + list(res.notes)
    if len(res.checked) > 1:
        lines.append("also validated at " + "; ".join(res.checked[1:]))
    ref = "vs " + (res.reference.split("_")[0] or "-")
    head = (f"{'version':<28} {'check':<6} {'budget':>7} {'time':>10} {'spread':>7} "
            f"{unit:>9} {ref:>8}  notes")
    lines += [head, "-" * len(head)]
    for r in res.results.values():
        budget = "-" if r.budget_used is None else f"{100 * r.budget_used:.0f}%"
        spread = "-" if r.spread is None or r.seconds is None else f"{100 * r.spread:.0f}%"
        rate = "-" if r.rate is None else f"{r.rate:.4g}"
        sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        note = (f"{r.launches} launch(es), {r.bound}-bound" if r.bound else "")
        if not r.ok or r.seconds is None:
            note = r.message
        check = ("ok" if r.ok else "FAIL") if not (r.baseline and r.message.startswith("not"))\
            else "-"
        lines.append(f"{r.name:<28} {check:<6} {budget:>7} {_fmt_s(r.seconds):>10} "
                     f"{spread:>7} {rate:>9} {sp:>8}  {note}")
    failed = [r.name for r in res.results.values() if not r.ok]
    lines.append("every version correct" if not failed else
                 f"FAILED (not timed): {', '.join(failed)}")
    return "\n".join(lines)


def cli(argv, *, prog: str, doc: str, versions, make_case: Callable, add_arguments: Callable,
        baselines: Callable | None = None, also_check: Callable | None = None) -> int:
    """``python -m kernellab.kernels.<ladder>``: parse ``argv`` (the ladder's own options from
    ``add_arguments(parser, tier)``, then ``--rounds``, ``--warmup``, ``--profile``,
    ``--json``), build the case (``make_case(args)``; a ValueError is a usage error), call
    :func:`run`, print :func:`render`'s table (and write the JSON of the result to ``--json``,
    ``-`` for stdout). Exit status 0 when every version is correct, 1 when one fails, 2 for bad
    arguments or no CUDA tier."""
    tier = kernellab.TIER
    ap = argparse.ArgumentParser(prog=prog, description=doc)
    add_arguments(ap, tier)
    ap.add_argument("--rounds", type=int, default=5,
                    help="gpu tier: interleaved timed rounds (default 5)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="gpu tier: untimed calls per version first (default 1)")
    ap.add_argument("--profile", default="a100",
                    help="sim tier: the device the model describes (default a100)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON ('-': stdout)")
    args = ap.parse_args(argv)
    if tier not in ("sim", "gpu"):
        print(f"{prog}: no CUDA tier in this process (KERNELLAB_DEVICE="
              f"{__import__('os').environ.get('KERNELLAB_DEVICE', '')!r}); "
              "use KERNELLAB_DEVICE=sim or gpu", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be >= 1 and --warmup >= 0")
    try:
        case = make_case(args)
        extra = also_check(args) if also_check else ()
        if tier == "sim":
            from kernellab.sim import model

            model.get_profile(args.profile)
    except (ValueError, KeyError) as exc:
        ap.error(str(exc).strip("'\""))
    base = baselines(case) if (baselines and tier == "gpu") else ()
    res = run(versions, case, ladder=prog.split()[-1].rsplit(".", 1)[-1], baselines=base,
              also_check=extra, rounds=args.rounds, warmup=args.warmup, profile=args.profile)
    if args.json == "-":
        print(json.dumps(res.to_dict(), default=str))
    else:
        print(render(res))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(res.to_dict(), fh, indent=2, default=str)
    return 0 if res.ok else 1


def copy_baseline(case: Case, array: str) -> Baseline:
    """gpu tier: a device-to-device copy of the case's input ``array`` (``cudaMemcpy``) into a
    scratch array: the bandwidth a memory-bound kernel is measured against. Its work is the
    bytes it moves, read and write (2 x the array's bytes); not checked."""
    from numba import cuda

    src = case.inputs[array]
    dst = cuda.device_array(src.shape, src.dtype)
    pos = case.names().index(array)
    return Baseline("device copy (cudaMemcpy D2D)", lambda *a, **_: dst.copy_to_device(a[pos]),
                    validate=False, work=2 * src.nbytes)
