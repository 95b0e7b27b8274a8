"""What a lab is to the grader: one :class:`LabSpec`.

A spec names the required functions and their parameters, generates the cases (visible ones and
hidden ones from an instructor file or a secret seed), builds each case's inputs from its seed,
computes the golden reference and compares (in the *grader's* process, never the submission's),
and defines the performance rules of each tier. The worker process (:mod:`grader.worker`) only
calls the submission on arrays the grader sent and measures timings.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernellab.numerics import is_float


# --------------------------------------------------------------------- hidden-case parameters
# One meaning for a hidden-case file in every lab. A case is a JSON object of parameters; each
# lab declares its parameters once (name -> Whole, Flag or OneOf) and parses every case with
# :func:`parse_hidden_case`. The rules, the same everywhere:
#   * integers: a JSON integer literal only (17). Never true/false, never a number with a
#     fraction or exponent (1.9, 17.0, 1e3), never a string ("17");
#   * booleans: JSON true or false only (never 0/1, "true" or "yes");
#   * strings: one of the listed choices, spelt exactly (case matters);
#   * a missing parameter takes its default, or is an error where it has none; a parameter the
#     lab does not know is an error (a misspelt key would otherwise be silently dropped).
# Every error is a ValueError "hidden case <i>: <parameter> ..." in plain words.

_REQUIRED = object()


@dataclass(frozen=True)
class Whole:
    """An integer parameter in [lo, hi] (hi None: no upper bound), or one of ``choices``."""

    lo: int = 1
    hi: int | None = None
    default: object = _REQUIRED
    choices: tuple = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        return f"an integer >= {self.lo}" + ("" if self.hi is None else f" and <= {self.hi}")

    def parse(self, name: str, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} must be an integer (a JSON number with no fraction, "
                             f"exponent or quotes, e.g. 17), not {_json(v)}")
        if self.choices and v not in self.choices:
            raise ValueError(f"{name} must be {self.describe()}, not {v}")
        if v < self.lo:
            raise ValueError(f"{name} must be >= {self.lo}, not {v}")
        if self.hi is not None and v > self.hi:
            raise ValueError(f"{name} must be <= {self.hi}, not {v}")
        return v


@dataclass(frozen=True)
class Flag:
    """A boolean parameter: JSON true or false."""

    default: object = _REQUIRED

    def describe(self) -> str:
        return "true or false"

    def parse(self, name: str, v):
        if not isinstance(v, bool):
            raise ValueError(f"{name} must be true or false (JSON booleans), not {_json(v)}")
        return v


@dataclass(frozen=True)
class OneOf:
    """A string parameter: one of ``choices``, spelt exactly."""

    choices: tuple
    default: object = _REQUIRED

    def describe(self) -> str:
        return "one of " + ", ".join(_json(c) for c in self.choices)

    def parse(self, name: str, v):
        if not isinstance(v, str) or v not in self.choices:
            raise ValueError(f"{name} must be {self.describe()}, not {_json(v)}")
        return v


def _json(v) -> str:
    """``v`` as it reads in the JSON file (true, "17", 1.9), shortened."""
    try:
        text = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def case_seed(base: int, name: str) -> int:
    """A case's input seed: a hash of the lab's seed and the case's name (stable across runs)."""
    return int.from_bytes(hashlib.sha256(f"{base}:{name}".encode()).digest()[:4], "little")


def hidden_case_error(index: int, message: str) -> ValueError:
    """The error of hidden case ``index`` (its position in the file, from 0), in plain words."""
    return ValueError(f"hidden case {index}: {message}")


def parse_hidden_case(index: int, raw, params: dict, *, by: str | None = None,
                      variants: dict | None = None) -> dict:
    """The parameters of hidden case ``index`` (``raw``: the JSON object) under the schema
    ``params`` (name -> :class:`Whole`, :class:`Flag` or :class:`OneOf`). A lab with several
    functions selects by the string parameter ``by`` (e.g. "fn"), whose value names one of
    ``variants`` (value -> that variant's extra parameters). Returns every declared parameter
    (defaults filled in), in declaration order. Raises ValueError naming the case and the
    parameter (the rules: the comment above)."""
    if not isinstance(raw, dict):
        raise hidden_case_error(index, "expected an object of parameters such as "
                                       f'{{"M": 64, ...}}, not {_json(raw)}')
    schema = dict(params)
    if by is not None:
        sel = OneOf(tuple(variants))
        if by not in raw:
            raise hidden_case_error(index, f"missing parameter {by} ({sel.describe()})")
        try:
            which = sel.parse(by, raw[by])
        except ValueError as exc:
            raise hidden_case_error(index, str(exc)) from None
        schema = {by: sel, **schema, **variants[which]}
    unknown = [k for k in raw if k not in schema]
    if unknown:
        raise hidden_case_error(index, f"unknown parameter {_json(unknown[0])} (this lab's "
                                       f"parameters are {', '.join(schema)})")
    out = {}
    for name, kind in schema.items():
        if name not in raw:
            if kind.default is _REQUIRED:
                raise hidden_case_error(index, f"missing parameter {name} "
                                               f"({kind.describe()})")
            out[name] = kind.default
            continue
        try:
            out[name] = kind.parse(name, raw[name])
        except ValueError as exc:
            raise hidden_case_error(index, str(exc)) from None
    return out


@dataclass(frozen=True)
class Case:
    """One correctness case: parameters (shapes, dtype …), the seed of its inputs, visibility."""

    name: str
    params: dict
    seed: int
    hidden: bool = False


@dataclass
class CaseData:
    """The arrays of one call. ``inputs`` are sent to the submission; ``outputs`` maps each output
    name to (shape, dtype), allocated by the worker and pre-filled with NaN (or a sentinel for
    integer outputs); ``call`` is the argument order."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, tuple[tuple, str]]
    call: list[str]
    #: outputs the function *returns* (in this order, as a tuple; one name: the array itself)
    #: instead of writing them into arrays it is passed (e.g. ``Wq, scales = quantize(W)``)
    returns: list[str] = field(default_factory=list)
    #: scalar arguments (bool, int or float; JSON-serialisable) that ``call`` may name besides
    #: the arrays, e.g. ``flash_attention(Q, K, V, O, causal)``
    scalars: dict = field(default_factory=dict)

    def args(self, arrays: dict) -> list:
        """The call's arguments in ``call`` order: each name from ``arrays`` (inputs and outputs)
        or, failing that, from :attr:`scalars`."""
        return [arrays[n] if n in arrays else self.scalars[n] for n in self.call]

    def take_returned(self, ret, arrays: dict) -> str | None:
        """Put the returned outputs ``ret`` into ``arrays`` under :attr:`returns`' names.
        Returns None, or what is wrong with ``ret`` in plain words (nothing is stored then)."""
        if not self.returns:
            return None
        want = ", ".join(self.returns)
        values = ret if isinstance(ret, (tuple, list)) else (ret,)
        if ret is None or len(values) != len(self.returns):
            got = "nothing" if ret is None else (f"{len(values)} value(s)"
                                                 if isinstance(ret, (tuple, list))
                                                 else f"one {type(ret).__name__}")
            return f"returned {got}; expected the tuple ({want})"
        for name, v in zip(self.returns, values):
            if not isinstance(v, np.ndarray):
                return (f"returned {type(v).__name__} for {name}; expected a numpy array "
                        f"(the tuple ({want}))")
            if name in self.outputs:  # checked before anything is copied or saved
                shape, dtype = self.outputs[name]
                if tuple(v.shape) != tuple(shape) or v.dtype != np.dtype(dtype):
                    return (f"returned {name} of shape {tuple(v.shape)} and dtype {v.dtype}; "
                            f"expected {tuple(shape)} {np.dtype(dtype).name}")
        for name, v in zip(self.returns, values):
            arrays[name] = np.array(v, copy=True)
        return None

    def allocate_outputs(self) -> dict[str, np.ndarray]:
        """Fresh output arrays: NaN for floats (``ml_dtypes.bfloat16`` included), the most
        negative value for integers (a kernel that leaves an element unwritten shows up)."""
        out = {}
        for name, (shape, dtype) in self.outputs.items():
            dt = np.dtype(dtype)
            fill = np.nan if is_float(dt) else np.iinfo(dt).min
            out[name] = np.full(tuple(shape), fill, dtype=dt)
        return out


@dataclass
class RuleResult:
    """A performance (or plausibility) rule: measured value vs threshold."""

    name: str
    measured: float | None
    threshold: float
    op: str  # ">=" or "<="
    unit: str
    passed: bool
    detail: str = ""
    spread: tuple | None = None  # (min, max) over interleaved rounds
    scored: bool = True  # False: a gate (e.g. plausibility) that earns no points but, failed,
    # voids the performance points

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["spread"] = list(self.spread) if self.spread else None
        return d


@dataclass
class HiddenCases:
    """Instructor-supplied cases: a JSON file ``{"seed": int, "cases": [{params}…]}`` and/or the
    ``KERNELLAB_HIDDEN_SEED`` environment variable (extra random cases from a secret seed).
    Each lab parses the cases' parameters with :func:`parse_hidden_case` (one rule for all)."""

    seed: int | None = None
    cases: list[dict] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path | None) -> "HiddenCases":
        hc = cls()
        if path is not None:
            try:
                data = json.loads(Path(path).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ValueError(f"hidden-case file {path}: {exc}") from None
            except RecursionError:
                raise ValueError(f"hidden-case file {path}: nested too deeply") from None
            if not isinstance(data, dict) or not isinstance(data.get("cases", []), list):
                raise ValueError(f"hidden-case file {path}: expected "
                                 '{"seed": int, "cases": [{...}, ...]}')
            unknown = sorted(set(data) - {"seed", "cases"})
            if unknown:  # a misspelt "cases" would otherwise grade no hidden case at all
                raise ValueError(f"hidden-case file {path}: unknown key(s) "
                                 f"{', '.join(map(repr, unknown))}; expected "
                                 '{"seed": int, "cases": [{...}, ...]}')
            hc.seed = data.get("seed")
            hc.cases = list(data.get("cases", []))
            if hc.seed is not None and (isinstance(hc.seed, bool) or not isinstance(hc.seed, int)
                                        or hc.seed < 0):
                raise ValueError(f"hidden-case file {path}: \"seed\" must be a non-negative "
                                 f"integer, not {hc.seed!r}")
        env = os.environ.get("KERNELLAB_HIDDEN_SEED")
        if env:
            try:
                hc.seed = int(env)
            except ValueError:
                raise ValueError("KERNELLAB_HIDDEN_SEED must be an integer") from None
            if hc.seed < 0:
                raise ValueError("KERNELLAB_HIDDEN_SEED must be a non-negative integer")
        return hc


class LabSpec:
    """Base class of a lab's grading spec. Subclasses set the attributes and implement the
    methods marked "subclass".

    A lab is data plus the code only it needs. Cases: :attr:`params` (the hidden-case schema,
    parsed by :func:`parse_hidden_case`; :attr:`select_by`/:attr:`variants` for labs with
    several functions), :meth:`visible_params`, :meth:`case_name`, :meth:`case_limits` and
    :meth:`random_params`; the base :meth:`cases` builds visible, hidden-from-file and
    random-from-seed cases from them. Arrays: :meth:`case_arrays` (the base :meth:`case_data`
    changes the entries a :attr:`repeated` case changes, :mod:`grader.labs._repeat`). Check:
    :meth:`compare` (the base :meth:`check` adds the stale-cache note). Performance:
    :meth:`planned` (the base :meth:`perf_data_check` words every mismatch), the worker
    module's ``measure_<tier>`` (base :meth:`measure`) and ``rules_<tier>`` (base
    :meth:`perf_rules`); :attr:`rules` declares the rules as data (:class:`grader.rules.Rule`).
    """

    lab_id: str = ""
    title: str = ""
    notebook: str = ""  # e.g. "01_gemm_cpu.ipynb" in solutions/ and labs/
    tier: str = "cpu"  # "cpu", or for GPU labs the runtime tier ("sim" or "gpu", a property)
    functions: dict[str, tuple[str, ...]] = {}  # required function -> parameter names
    # the required functions the performance phase times: it runs once all their cases pass
    # (the other functions' cases need not); empty: all of :attr:`functions`
    perf_functions: tuple[str, ...] = ()
    allowed_imports: frozenset = frozenset({"numpy", "numba", "math"})
    # submodules beyond grader.static_check.ALLOWED_SUBMODULES (numpy.random, numba.types,
    # numba.typed) a lab lets students reach, by full name (e.g. "numba.cuda")
    allowed_submodules: frozenset = frozenset()
    banned_names: frozenset = frozenset()
    #: first parameters whose attributes a function may set when it is only ever handed to
    #: ``register_autograd`` (PyTorch's autograd context: ``ctx.eps = eps``); see
    #: :func:`grader.static_check.check_source`
    context_params: frozenset = frozenset()
    # kernellab.codegen profile the worker compiles under: for CPU labs the CPU's full vector
    # width, the width numpy/OpenBLAS and the measured FMA peak run at (GPU and NPU labs set
    # "default": Numba's own behaviour)
    codegen: str = "full_width"
    python_entry: bool = False  # the required functions must be plain Python (GPU launchers)
    compile_timeout_s: float = 300.0  # loading the submission + JIT warm-up
    case_timeout_s: float = 20.0  # one correctness call
    first_call_timeout_s: float = 60.0  # a plain-Python entry's first call (compiles its callees)
    perf_timeout_s: float = 240.0  # the whole performance phase
    memory_limit_bytes: int = 2 * 2**30
    correctness_points: int = 60
    performance_points: int = 40
    max_worker_deaths: int = 3

    # --- declarative cases -----------------------------------------------------------------
    #: the hidden-case schema: parameter -> Whole, Flag or OneOf (:func:`parse_hidden_case`)
    params: dict = {}
    #: several functions: the string parameter that names the case's function, and per value
    #: the function's own parameters (``params`` then holds the shared ones, often none)
    select_by: str | None = None
    variants: dict | None = None
    #: the seed the visible cases' input seeds are hashed from (:func:`case_seed`)
    visible_seed: int = 0
    #: how many random hidden cases a secret seed without a case file generates
    random_count: int = 6
    #: visible case name -> the inputs its repeat changes (:func:`grader.labs._repeat.repeat_cases`:
    #: called again right after itself, a few times, with a few entries changed)
    repeated: dict[str, tuple[str, ...]] = {}
    #: hash a hidden case's seed from "hidden<i>" instead of its whole name
    hidden_seed_by_index: bool = False
    #: the rules as data (:class:`grader.rules.Rule`): the rule builders and the README tables
    rules: tuple = ()
    #: the worker-side module (``measure_<tier>`` functions); default: ``measure`` beside a
    #: lab folder's ``spec``, else the spec's own module
    measure_module: str = ""
    #: each case's report line also gives an online judge's verdict (Accepted, Wrong Answer,
    #: Runtime Error, Time Limit Exceeded: :func:`grader.report.judge_verdict`)
    judge_words: bool = False
    #: the grading itself starts processes after the submission has loaded (Lab 9:
    #: torch.compile runs the C++ compiler), so its worker cannot forbid new processes
    #: (:mod:`kernellab.machine.process_filter`)
    starts_processes: bool = False

    def visible_params(self) -> list[dict]:
        """Subclass: the visible cases' parameters, in order."""
        raise NotImplementedError

    def case_name(self, p: dict) -> str:
        """Subclass: a case's name from its parameters (hidden ones get "hidden<i> " in front)."""
        raise NotImplementedError

    def case_limits(self, p: dict) -> str | None:
        """What makes the parsed hidden case ``p`` too big (size caps), in plain words; None
        when it is within them."""
        return None

    def random_params(self, rng, i: int) -> dict:
        """Subclass: random hidden case ``i``'s parameters from the secret seed's ``rng``."""
        raise NotImplementedError

    def parse_case(self, raw, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (:func:`parse_hidden_case`), within
        :meth:`case_limits`. Raises ValueError "hidden case <i>: ..." in plain words."""
        if self.select_by is None:
            q = parse_hidden_case(i, raw, self.params)
        else:
            q = parse_hidden_case(i, raw, self.params, by=self.select_by, variants=self.variants)
        problem = self.case_limits(q)
        if problem:
            raise hidden_case_error(i, problem)
        return q

    def _hidden(self, i: int, p: dict, seed: int) -> Case:
        name = f"hidden{i} {self.case_name(p)}"
        key = f"hidden{i}" if self.hidden_seed_by_index else name
        return Case(name, p, case_seed(seed, key), hidden=True)

    def cases(self, hidden: HiddenCases) -> list[Case]:
        """The visible cases (each :attr:`repeated` one followed by its repeats), then the
        hidden cases of the file, or, with a seed and no file cases, :attr:`random_count`
        random ones."""
        from grader.labs._repeat import repeat_cases

        out = []
        for p in self.visible_params():
            name = self.case_name(p)
            out.append(Case(name, p, case_seed(self.visible_seed, name)))
            if name in self.repeated:
                out.extend(repeat_cases(out[-1], tuple(self.repeated[name])))
        for i, raw in enumerate(hidden.cases):
            out.append(self._hidden(i, self.parse_case(raw, i), hidden.seed or 0))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(self.random_count):
                out.append(self._hidden(i, self.random_params(rng, i), hidden.seed))
        return out

    def case_function(self, case: Case) -> str:
        """The required function a case calls: ``case.params["fn"]`` when the lab has several
        (e.g. ``row_sum`` and ``softmax``), else the lab's only one."""
        fn = case.params.get("fn") if isinstance(case.params, dict) else None
        return fn if fn in self.functions else next(iter(self.functions))

    def case_data(self, case: Case) -> CaseData:
        """A case's arrays: :meth:`case_arrays`, with the entries a repeat case changes
        changed (:func:`grader.labs._repeat.change_inputs`)."""
        from grader.labs._repeat import change_inputs

        return change_inputs(case, self.case_arrays(case))

    def case_arrays(self, case: Case) -> CaseData:
        """Subclass (or override :meth:`case_data`): a case's arrays from its seed."""
        raise NotImplementedError

    def warmup_data(self) -> list[tuple[str, CaseData]]:
        """Small calls that trigger JIT compilation (function name, data)."""
        raise NotImplementedError

    def check(self, case: Case, data: CaseData, outputs: dict[str, np.ndarray]):
        """Compare the outputs with the golden reference (grader side): :meth:`compare`, with
        the note of :func:`grader.labs._repeat.stale_note` on a failed repeat case. Returns a
        :class:`kernellab.numerics.Comparison`."""
        from grader.labs._repeat import stale_note

        return stale_note(self, case, data, outputs, self.compare(case, data, outputs))

    def compare(self, case: Case, data: CaseData, outputs: dict[str, np.ndarray]):
        """Subclass (or override :meth:`check`): the outputs against the golden reference."""
        raise NotImplementedError

    def perf_plan(self) -> dict:
        """Parameters for the worker's performance measurement (JSON-serialisable)."""
        raise NotImplementedError

    def perf_tier(self, measured: dict | None = None) -> str:
        """The tier whose measurement and rules apply: the measurements' own ``"tier"`` when
        they name one, else :attr:`tier`."""
        t = measured.get("tier") if isinstance(measured, dict) else None
        return t if isinstance(t, str) and t else self.tier

    def perf_rules(self, measured: dict) -> list[RuleResult]:
        """Turn the worker's measurements into pass/fail rules (grader side): the lab's
        ``rules_<tier>(measured)``. Raises ValueError for a tier the lab has no rules for."""
        tier = self.perf_tier(measured)
        fn = getattr(self, f"rules_{tier}", None)
        if fn is None:
            raise ValueError(f"measurements of an unknown tier {tier!r}")
        return fn(measured)

    def planned(self, plan: dict) -> dict | None:
        """The timed call ``plan`` asks for: ``{"params": dict, "arrays": {name: (shape,
        dtype)}, "what": str}`` ("what" names it in messages; default: the params), or None
        (nothing checked)."""
        return None

    #: how the planned-arrays messages name the timed calls and the re-checked one
    timed_calls_words: tuple[str, str] = ("the timed calls were", "the last timed call's")

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        """Grader side: None if the re-checked timed call's parameters and arrays are what
        :meth:`planned` says ``plan`` asked for, else what is wrong, in plain words (a worker
        whose numpy was tampered with could time something smaller or cheaper)."""
        want = self.planned(plan)
        if want is None:
            return None
        calls, last = self.timed_calls_words
        problem = None
        if recheck.get("params") != want["params"]:
            what = want.get("what") or repr(want["params"])
            problem = f"{calls} not the planned {what} ({recheck.get('params')!r})"
        else:
            for name, (shape, dtype) in want["arrays"].items():
                a = arrays.get(name)
                if a is None or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
                    got = "missing" if a is None else f"{a.shape} {a.dtype}"
                    problem = (f"{last} {name} is {got}, not the planned {tuple(shape)} "
                               f"{np.dtype(dtype).name}")
                    break
        return None if problem is None else f"{problem}: was the grading process tampered with?"

    def tier_problem(self) -> str | None:
        """Grader side, before anything runs: why this lab cannot be graded on this machine
        (e.g. the gpu tier forced without a GPU), in plain words; None when it can."""
        return None

    def call_probe(self, arrays=None):
        """Worker side: a context manager around each correctness call, yielding a dict the
        lab fills with what it observed during the call (JSON-serialisable; sent back with the
        reply as ``info``). ``arrays``: the call's inputs and outputs by name (the probe may
        add arrays of its own, sent back with the outputs). The base class observes
        nothing."""
        return contextlib.nullcontext({})

    def run_call(self, fn, args: list, names: list, info: dict):
        """Worker side (and the in-notebook checks): call the required function ``fn`` for one
        case, ``args`` in the order of ``names`` (the case's call list: inputs, scalars and the
        output arrays to fill). The base class calls ``fn(*args)``; a lab whose function is not
        called with arrays (Lab 9: a PyTorch operator) adapts the call here and records what
        it observes in ``info`` (:meth:`call_probe`'s dict, judged by :meth:`check_call`)."""
        return fn(*args)

    def in_notebook(self) -> None:
        """Called by :mod:`grader.local` before it runs the lab's calls in the notebook's own
        process, never in the grader's worker: what differs there (Lab 9: torch.compile keeps
        the project's cache instead of a grading's own folder). The base class does nothing."""

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        """Grader side: None if what :meth:`call_probe` observed obeys the lab's rules (e.g.
        the result was computed by a GPU kernel), else what is wrong, in plain words. ``info``
        is None or empty when nothing was observed (the in-notebook checker on a tier without
        observations): then nothing is checked. The base class accepts anything."""
        return None

    # worker side (runs in the sandboxed process)
    def forbids_new_processes(self) -> bool:
        """Worker side: whether the worker forbids new processes before the submission loads
        (:mod:`kernellab.machine.process_filter`): unless :attr:`starts_processes`."""
        return not self.starts_processes

    def before_submission(self) -> None:
        """Worker side, after :meth:`worker_module`, before the submission loads, and only when
        the worker is about to forbid new processes (:mod:`grader.worker`): start what the
        grading will need to start later. The base class starts nothing."""

    def not_forbidden_after_all(self) -> None:
        """Worker side: :meth:`before_submission` ran, but the filter could not be installed;
        undo what it started for a filtered process. The base class started nothing."""

    def worker_module(self):
        """The lab's worker-side module (:attr:`measure_module`, default the ``measure``
        module beside the spec), imported on first use. The worker imports it before the
        submission loads (what it binds at import cannot be swapped by the submission);
        the grader's own process never imports it at import time."""
        name = self.measure_module or type(self).__module__
        if not self.measure_module and name.endswith(".spec"):  # a lab folder
            name = name[:-len("spec")] + "measure"
        return importlib.import_module(name)

    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        """Worker side: the worker module's ``measure_<tier>(spec, namespace, plan, workdir)``.
        Raises ValueError for a tier the lab does not measure on."""
        tier = self.perf_tier()
        fn = getattr(self.worker_module(), f"measure_{tier}", None)
        if fn is None:
            raise ValueError(f"lab {self.lab_id} has no measurement for the {tier} tier")
        return fn(self, namespace, plan, workdir)
