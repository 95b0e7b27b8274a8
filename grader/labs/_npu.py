"""What the NPU labs share (``npu-vector-add``, ``npu-matmul``): the ``npu`` tier, the cards
they are graded on, the probe of a call (the launches it made, captured inside
:func:`kernellab.npu.launch`, never taken from what the host code returns), those launches as
JSON, and the checks that the result came from the simulated device.

Tier ``npu``: kernels run on :mod:`kernellab.npu` (NumPy, no GPU, no NPU) and speed is graded
by its *modelled* cycles, which are the same on every run and machine (the trace hash says so).

Cards. Correctness cases and the all-core timed run use the frozen ``ascend910b-like@1`` card
(48 AIV, 24 AIC); the one-core timed run uses the same card with one AIC and one AIV
(:data:`ONE_CORE`, entered with :func:`kernellab.npu.use_machine`), so a submission's host code
is timed on one core by reading the core count from ``npu.platform_info()`` as Ascend C host
tiling does. Both cards are bound when this module is imported (in the grader's worker, before
the submission loads): every captured launch must have run on the card the grader chose, so a
submission cannot time itself on a faster card of its own.

How a result must be produced (:func:`device_problem`), checked on every correctness call and on
the timed calls: at least one launch, none failed (an error the host code caught still fails),
every launch on the grader's card, every byte of the output the caller finally holds written by
the device (MTE3 ``data_copy`` / FIX ``fixpipe``) into an array that ended the launches with
exactly that content, every byte of each input read by the device (MTE2) from an array holding
that input, no byte of another array read that the device had not written unless the array
started blank (a workspace of zeros), and at least the lab's useful arithmetic done on the
device (vector additions, cube multiply-adds), and no array a launch read changed by the host
between two launches. Uninitialised on-chip reads are errors while
grading (the simulator's ``strict`` mode), like the simulator's other errors (overflow, queue
misuse, deadlock, leak, multi-core write conflicts ...).

Thresholds. A speed rule's threshold is 0.8 x the reference solution's modelled figure on the
frozen card (headroom for reasonable variants of it); a lab that departs from this says why.
Changing the card means a new card version, re-measured references and new thresholds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import warnings

import numpy as np

from grader.labs._timed import TimedCalls
from grader.spec import LabSpec, RuleResult
from kernellab.npu import errors as npu_errors
from kernellab.npu.launch import capture, content_digest
from kernellab.npu.machine import DEFAULT_MACHINE, get_machine, use_machine

#: The card correctness cases and the all-core timed run use.
CARD = get_machine(DEFAULT_MACHINE)
#: The same card with one AIC and one AIV: the one-core timed run.
ONE_CORE = dataclasses.replace(
    CARD, name=f"{CARD.name}-1core",
    description=f"{CARD.description}, cut to 1 AIC + 1 AIV (the one-core timed run)",
    n_aic=1, n_aiv=1)
#: The timed runs, in order: (tag, card, suffix of the run's array names in the re-check)
RUNS = (("all_cores", CARD, ""), ("one_core", ONE_CORE, "1"))

#: Longest simulator message kept in a report line, as the worker keeps a hazard's
#: (:data:`grader.worker.MAX_SIM_MESSAGE`): the NPU errors name the line, say what went wrong,
#: then how to fix it, and the fix must not be cut off.
MAX_MESSAGE = 1500

#: Names of the simulator a submission has no business reaching: its per-block context and
#: records (``asc.ctx()``), the queue lowering table, the card registry (a faster card), and
#: the hooks the grader captures launches with.
SIMULATOR_INTERNALS = frozenset({
    "ctx", "current", "install", "QUEUE_PIPES", "PRESETS", "capture", "use_machine", "retime",
    "Capture", "LaunchInfo", "ArrayInfo", "content_digest", "BlockContext", "replay",
    "MachineConfig",
})


def one_line(exc: BaseException) -> str:
    """A simulator error's message in one line: its lines joined with `` / `` (the first names
    the kernel's source line), trimmed to :data:`MAX_MESSAGE` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " / ".join(lines)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


def readable(exc: BaseException) -> BaseException:
    """The same error class with the message in one line (the report shows the first line of an
    exception's message only: the table of an overflow follows the line that explains it)."""
    try:
        new = type(exc)(one_line(exc))
    except Exception:  # noqa: BLE001 - a class that does not take one message: keep it
        return exc
    return new


@contextlib.contextmanager
def npu_call(card):
    """Run host code on ``card`` (``platform_info()`` and ``launch`` without ``machine=``),
    uninitialised reads raising, every launch captured. Yields the Capture; a simulator error
    leaves as the same class with a one-line message."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", npu_errors.UninitializedReadWarning)
        with use_machine(card), capture() as cap:
            try:
                yield cap
            except npu_errors.NPUError as exc:
                raise readable(exc) from None


def launch_dict(li, card) -> dict:
    """One captured launch as JSON: kernel, block_dim, the card (``machine_ok``: the one the
    grader chose), the error it raised (``"Class: message"``) and, if it ran, its figures as
    they were when the launch returned (``LaunchInfo.figures``: the RunResult handed to the
    host code is the submission's to change, its flops or bytes dicts included)."""
    try:
        block_dim = operator.index(li.block_dim)
    except TypeError:  # a bad block_dim (the launch then failed): shown as given
        block_dim = str(li.block_dim)
    d = {"kernel": str(li.kernel), "core_type": str(li.core_type), "block_dim": block_dim,
         "machine": li.machine.key, "machine_ok": li.machine == card,
         "error": None if li.error is None else f"{type(li.error).__name__}: {one_line(li.error)}"}
    r = li.figures  # copied when the launch returned: the host code cannot change them
    if li.result is not None and r is not None:
        d.update({"cycles": int(r["cycles"]), "cores_used": int(r["cores_used"]),
                  "bottleneck": r["bottleneck"], "critical_core": r["critical_core"],
                  "pipe_busy_pct": {k: round(float(v), 3)
                                    for k, v in r["pipe_busy_pct"].items()},
                  "bytes": {k: int(v) for k, v in r["bytes"].items()},
                  "hbm_bytes": int(r["hbm_bytes"]),
                  "flops": {k: int(v) for k, v in r["flops"].items()},
                  "trace_hash": r["trace_hash"], "n_records": int(r["n_records"]),
                  "functional_s": round(float(r["functional_s"]), 3),
                  "timing_s": round(float(r["timing_s"]), 3)})
    return d


def _read_not_written(read, written, nbytes: int) -> int:
    """Bytes in the union of ``read`` that no interval of ``written`` covers."""
    if not read:
        return 0
    mask = np.zeros(nbytes, dtype=bool)
    for s, e in read:
        mask[s:e] = True
    for s, e in written:
        mask[s:e] = False
    return int(mask.sum())


def _merge(ivs) -> int:
    """Bytes covered by the union of the intervals."""
    from kernellab.npu.launch import merge_intervals

    return sum(e - s for s, e in merge_intervals(ivs))


def capture_dict(cap, card) -> dict:
    """A capture as JSON: ``launches`` (:func:`launch_dict`) and ``arrays``, one entry per
    array *object* passed to the launches (an output written over several launches is one
    entry): name, shape, dtype, nbytes, content digest before its first launch and after its
    last successful one, whether it started blank (zeros or NaN), distinct bytes the device
    wrote to it and read from it and read without writing them, how many blocks wrote to it
    out of how many launched, and ``host_changed``: whether its content at the start of a
    launch differed from what the launch before left in it (the host wrote it in between)."""
    objs: dict[int, dict] = {}
    for li in cap.launches:
        for ai in li.arrays:
            o = objs.get(id(ai.array))
            if o is None:
                o = objs[id(ai.array)] = {
                    "name": str(ai.name), "shape": [int(s) for s in ai.shape],
                    "dtype": str(ai.dtype), "nbytes": int(ai.nbytes),
                    "digest_start": ai.digest_start, "digest_end": None,
                    "blank_start": bool(ai.blank_start), "host_changed": False,
                    "_w": [], "_r": [], "blocks_writing": 0, "blocks_launched": 0}
            elif ai.digest_start != o["digest_end"]:
                o["host_changed"] = True
            if li.error is None and ai.digest_end is not None:
                o["digest_end"] = ai.digest_end
                o["_w"].extend(ai.written)
                o["_r"].extend(ai.read)
                o["blocks_writing"] += sum(1 for b in ai.writers.values() if b)
                o["blocks_launched"] += operator.index(li.block_dim)
    arrays = []
    for o in objs.values():
        w, r = o.pop("_w"), o.pop("_r")
        o["written"] = _merge(w)
        o["read"] = _merge(r)
        o["read_not_written"] = _read_not_written(r, w, o["nbytes"])
        arrays.append(o)
    return {"launches": [launch_dict(li, card) for li in cap.launches], "arrays": arrays}


def run_summary(info: dict) -> dict:
    """What a report keeps of a timed call: per launch its kernel, block_dim, card, cycles and
    trace hash (the same every run: the figures are modelled)."""
    return {"cycles": total_cycles(info),
            "launches": [{k: li.get(k) for k in ("kernel", "block_dim", "machine", "cycles",
                                                 "trace_hash", "bottleneck", "n_records")}
                         for li in info.get("launches", [])]}


def total_cycles(info: dict) -> int:
    """Device cycles of a call's launches, one after the other (0 if none ran)."""
    return sum(int(li.get("cycles", 0)) for li in info.get("launches", []))


def total(info: dict, key: str, sub: str | None = None) -> int:
    """A figure summed over the launches (``flops``/``cube``, ``hbm_bytes`` ...)."""
    out = 0
    for li in info.get("launches", []):
        v = li.get(key, 0)
        out += int(v.get(sub, 0)) if sub is not None else int(v or 0)
    return out


def last_launch(info: dict) -> dict:
    """The launch that took longest (the one a report describes)."""
    runs = [li for li in info.get("launches", []) if "cycles" in li]
    return max(runs, key=lambda li: li["cycles"]) if runs else {}


#: How :func:`device_problem`'s messages about inputs and work begin (when the values are
#: wrong as well, the comparison's message is shown instead: it says where and why).
INPUT_PROBLEMS = ("the device read ", "the kernels did ")


def device_problem(info: dict, *, output: tuple, inputs: list, work: tuple,
                   card_name: str) -> str | None:
    """None if the captured launches computed the result the caller holds, else what is wrong,
    in plain words (module docstring).

    Args:
        info: :func:`capture_dict` of the call.
        output: ``(name, digest, nbytes)`` of the output the caller holds after the call.
        inputs: ``[(name, digest, nbytes), ...]`` of the inputs.
        work: ``(flops key, least count, what)``, e.g. ``("vector", n, "additions")``, or
            a list of them (a mix kernel's cube and vector work).
        card_name: the card the grader ran the call on (for the message).
    """
    launches = info.get("launches", [])
    if not launches:
        return ("no kernel was launched: the result must be computed on the simulated NPU "
                "(npu.launch(kernel, block_dim, args)); this lab grades the kernel, not host "
                "code")
    for li in launches:
        if li.get("error"):
            return (f"launch of kernel {li['kernel']} failed and the host code carried on: "
                    f"{li['error']}")
    for li in launches:
        if not li.get("machine_ok"):
            return (f"kernel {li['kernel']} ran on the card {li['machine']}, not on the one the "
                    f"grader runs ({card_name}): call npu.launch without machine= and read "
                    "core counts and buffer sizes from npu.platform_info()")
    name, digest, nbytes = output
    arrays = info.get("arrays", [])
    final = [a for a in arrays if a.get("digest_end") == digest and a["nbytes"] == nbytes]
    if not final:
        return (f"the {name} the caller holds is not what any launch left in an array: it was "
                f"written (or changed) on the host; pass {name} itself to the kernel and write "
                "every element on the device")
    best = max(final, key=lambda a: a["written"])
    if best["written"] < nbytes:
        pct = min(99.9, 100.0 * best["written"] / nbytes) if nbytes else 0.0
        return (f"the device wrote {best['written']} of the {nbytes} bytes of {name} "
                f"({pct:.1f}%; {best['blocks_writing']} of {best['blocks_launched']} launched "
                f"block(s) wrote to it): every output element must be written by the device "
                "(data_copy UB->GM or fixpipe) — is the work split over the blocks (and the "
                "tail of the last one) complete?")
    for iname, idigest, inbytes in inputs:
        held = [a for a in arrays if a.get("digest_start") == idigest and a["nbytes"] == inbytes]
        got = max((a["read"] for a in held), default=0)
        if got < inbytes:
            return (f"the device read {got} of the {inbytes} bytes of {iname}: every byte of "
                    f"{iname} must be read by the device, from {iname} itself (is a tail of it "
                    "left out? a copy transformed on the host, or a result prepared on the host, "
                    "does not count)")
    in_digests = {(d, nb) for _n, d, nb in inputs}
    for a in arrays:
        if a.get("host_changed") and a.get("read"):
            return (f"the host changed the array the kernel was passed as {a['name']} between "
                    f"two launches, and a launch read it: a result prepared on the host between "
                    f"launches does not count; every byte a launch reads must be an input's or "
                    f"written by a launch")
    for a in arrays:
        if a.get("read_not_written") and not a.get("blank_start", True) \
                and (a.get("digest_start"), a["nbytes"]) not in in_digests:
            names = ", ".join(n for n, _, _ in inputs)
            return (f"the device read {a['read_not_written']} bytes it had not written of an "
                    f"array the kernel was passed as {a['name']}, which holds neither an input "
                    f"({names}) nor a blank workspace (zeros, NaN): a result prepared on the "
                    f"host, or an input transformed there, does not count; pass the inputs "
                    f"themselves and compute on the device")
    for key, least, what in (work if isinstance(work, list) else [work]):
        done = total(info, "flops", key)
        if done < least:
            return (f"the kernels did {done} {key} operations, fewer than the {least} {what} "
                    "the result needs: it must be computed on the device")
    return None


class NPULab(LabSpec):
    """A lab graded on the ``npu`` tier: kernels written against ``kernellab.npu`` (Ascend-C
    style), speed from the simulator's modelled cycles (deterministic).

    A lab sets :attr:`output_name` and :attr:`input_names` and defines :meth:`work` (the
    useful arithmetic of a call), :meth:`arrays_of` (a call's arrays), :meth:`timed_params`
    (each timed run's parameters) and ``rules_npu``; its ``measure.py`` defines
    ``measure_npu`` with :func:`timed_runs`. The base checks every call's launches
    (:func:`device_problem`) and the timed runs' arrays and launches
    (:meth:`perf_data_check`)."""

    tier = "npu"
    # each case line also in an online judge's words (Accepted, Wrong Answer ...)
    judge_words = True
    allowed_imports = frozenset({"numpy", "math", "kernellab"})
    # kernellab opens only its NPU API: the package, the kernel API and the module of launch
    # (whose name is also npu.launch, the function); not kernellab.npu.examples, not the rest
    allowed_submodules = frozenset({"kernellab.npu", "kernellab.npu.asc",
                                    "kernellab.npu.launch"})
    codegen = "default"
    compile_timeout_s = 120.0
    case_timeout_s = 60.0
    first_call_timeout_s = 60.0
    perf_timeout_s = 240.0
    timed_calls_words = ("the timed calls were", "the timed call's")

    #: the output's name and the inputs' names in a case (subclass)
    output_name = ""
    input_names: tuple = ()
    #: the timed runs (:data:`RUNS`: all cores, then one core); a lab whose kernel needs more
    #: than one core of a kind (a mix kernel's 1 AIC + 2 AIV) times on the full card only
    runs: tuple = RUNS

    def __init__(self):
        # (case name, final output digest, values ok) from check(), for check_call()
        self._last = None

    # ------------------------------------------------------------------------ subclass
    def work(self, p: dict) -> tuple:
        """``(flops key, least count, what)`` a call with parameters ``p`` needs, e.g.
        ``("vector", n, "additions of z = x + y")``, or a list of them."""
        raise NotImplementedError

    def arrays_of(self, p: dict) -> dict:
        """A call's arrays with parameters ``p``: ``{name: (shape, dtype)}``, inputs then the
        output."""
        raise NotImplementedError

    def timed_params(self, plan: dict, tag: str) -> dict:
        """The parameters of timed run ``tag`` (:data:`RUNS`) of ``plan``."""
        raise NotImplementedError

    # ------------------------------------------------- how the result was produced
    def call_probe(self, arrays=None):
        """Capture the call's launches on the full card; fills ``{"tier": "npu", "launches":
        [...], "arrays": [...]}`` (:func:`capture_dict`)."""

        @contextlib.contextmanager
        def probe():
            info: dict = {"tier": "npu"}
            with npu_call(CARD) as cap:
                yield info
            info.update(capture_dict(cap, CARD))
        return probe()

    def check(self, case, data, outputs: dict):
        """The lab's comparison; remembers the digest of the output the caller holds and
        whether its values passed, for :meth:`check_call` (which sees the probe's figures but
        not the arrays)."""
        cmp = super().check(case, data, outputs)
        out = outputs.get(self.output_name)
        self._last = (case.name, None if out is None else content_digest(out), bool(cmp.ok))
        return cmp

    def check_call(self, case, data, info: dict | None) -> str | None:
        if not info or info.get("tier") != "npu" or "launches" not in info:
            return None
        last = self._last if self._last and self._last[0] == case.name else None
        out_nbytes = _nbytes(data.outputs[self.output_name])
        why = device_problem(
            info, output=(self.output_name, last[1] if last else None, out_nbytes),
            inputs=[(k, content_digest(data.inputs[k]), int(data.inputs[k].nbytes))
                    for k in self.input_names],
            work=self.work(case.params), card_name=CARD.key)
        if why and last is not None and not last[2] and why.startswith(INPUT_PROBLEMS):
            # wrong values and an input not read in full (a K tail left out ...): the values'
            # message says more (where, and the lab's hint)
            return None
        return why

    # ------------------------------------------------------------------ timed runs
    def run_arrays(self, plan: dict) -> dict:
        """Every timed run's arrays, ``{name + suffix: (shape, dtype)}`` in :attr:`runs`
        order (what :meth:`planned` expects back)."""
        return {name + sfx: spec for tag, _card, sfx in self.runs
                for name, spec in self.arrays_of(self.timed_params(plan, tag)).items()}

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        """The planned parameters and arrays (:meth:`grader.spec.LabSpec.perf_data_check`),
        then each timed run's launches (:func:`device_problem`, from the re-check's
        arrays)."""
        why = super().perf_data_check(plan, recheck, arrays)
        if why:
            return why
        runs = recheck.get("runs", {})
        for tag, card, sfx in self.runs:
            why = device_problem(
                runs.get(tag, {}),
                output=(self.output_name, content_digest(arrays[self.output_name + sfx]),
                        int(arrays[self.output_name + sfx].nbytes)),
                inputs=[(k, content_digest(arrays[k + sfx]), int(arrays[k + sfx].nbytes))
                        for k in self.input_names],
                work=self.work(self.timed_params(plan, tag)), card_name=card.key)
            if why:
                return f"the timed call on {card.key}: {why}"
        return None


def modelled(rule, value: float, detail: str) -> RuleResult:
    """:class:`grader.rules.Rule` ``rule`` judged on one modelled figure. The ``npu`` tier's
    figures are the same on every run, so there is one sample and no spread to show (the
    rule builders' (min, max) of one sample would only repeat the figure)."""
    res = rule.judge([value], detail)
    res.spread = None
    return res


# Every timed call is re-checked in full by the grader (its values, and device_problem on its
# launches), and a launch returns only when the simulated device is done: there is no timer for
# work to escape and nothing to judge right after the call returns.
def _rechecked_in_full(*_args) -> bool:
    return True


def _left_to_the_recheck(*_args) -> bool:
    return False


def timed_runs(spec: NPULab, fn, plan: dict, make_inputs, workdir) -> tuple[dict, dict]:
    """Worker side: ``fn`` called once per timed run of ``spec.runs``, on its card, with fresh
    inputs ``make_inputs(p)`` (a tuple in :attr:`NPULab.input_names` order; ``p`` the run's
    :meth:`NPULab.timed_params`) and a NaN-filled output, every launch captured.

    Returns ``(runs, recheck)``: ``runs`` tag -> :func:`capture_dict`; ``recheck`` the
    measurement's ``"recheck"`` entry, both runs' arrays (run names suffixed as in
    :data:`RUNS`) written for the grader's full re-check (:func:`grader.runner.recheck`)."""
    runs, before, after = {}, {}, {}
    for tag, card, sfx in spec.runs:
        p = spec.timed_params(plan, tag)
        out = spec.arrays_of(p)[spec.output_name]
        calls = TimedCalls([k + sfx for k in spec.input_names], [spec.output_name + sfx],
                           is_correct=_rechecked_in_full, is_unwritten=_left_to_the_recheck)
        args = calls.setup(lambda p=p: make_inputs(p),
                           lambda out=out: (np.full(out[0], np.nan, dtype=out[1]),))()
        with npu_call(card) as cap:
            fn(*args)
        calls.after("submission", args)
        runs[tag] = capture_dict(cap, card)
        was, ins, outs = calls.last
        before.update(zip(calls.inputs, was))
        after.update({**dict(zip(calls.inputs, ins)), **dict(zip(calls.outputs, outs))})
    np.savez(workdir / "recheck_before.npz", **before)
    np.savez(workdir / "recheck.npz", **after)
    return runs, {"path": str(workdir / "recheck.npz"),
                  "before": str(workdir / "recheck_before.npz"),
                  "params": spec.planned(plan)["params"], "inputs": list(before),
                  "outputs": [k for k in after if k not in before], "runs": runs}


def _nbytes(spec) -> int:
    shape, dtype = spec
    n = 1
    for s in shape:
        n *= int(s)
    return n * np.dtype(dtype).itemsize
