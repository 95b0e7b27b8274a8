"""What a lab is to the grader: one :class:`LabSpec` (COURSE.md §5).

A spec names the required functions and their parameters, generates the cases (visible ones and
hidden ones from an instructor file or a secret seed), builds each case's inputs from its seed,
computes the golden reference and compares (in the *grader's* process, never the submission's),
and defines the performance rules of each tier. The worker process (:mod:`grader.worker`) only
calls the submission on arrays the grader sent and measures timings.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def whole_number(v) -> int:
    """An integer case parameter from a hidden-case file: 17 or "17", never True, 1.5 or "1e3".
    Raises ValueError (or TypeError, OverflowError) otherwise."""
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(v)
    return int(v)


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
        """Fresh output arrays: NaN for floats, the most negative value for integers (a kernel
        that leaves an element unwritten shows up)."""
        out = {}
        for name, (shape, dtype) in self.outputs.items():
            dt = np.dtype(dtype)
            fill = np.nan if dt.kind == "f" else np.iinfo(dt).min
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
    ``KERNELLAB_HIDDEN_SEED`` environment variable (extra random cases from a secret seed)."""

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
            if not isinstance(data, dict) or not isinstance(data.get("cases", []), list):
                raise ValueError(f"hidden-case file {path}: expected "
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
    methods marked "subclass"."""

    lab_id: str = ""
    title: str = ""
    notebook: str = ""  # e.g. "01_gemm_cpu.ipynb" in solutions/ and labs/
    tier: str = "cpu"  # "cpu", or for GPU labs the runtime tier ("sim" or "gpu", a property)
    functions: dict[str, tuple[str, ...]] = {}  # required function -> parameter names
    allowed_imports: frozenset = frozenset({"numpy", "numba", "math"})
    # submodules beyond grader.static_check.ALLOWED_SUBMODULES (numpy.random, numba.types,
    # numba.typed) a lab lets students reach, by full name (e.g. "numba.cuda")
    allowed_submodules: frozenset = frozenset()
    banned_names: frozenset = frozenset()
    codegen: str = "default"  # kernellab.codegen profile the worker compiles under
    python_entry: bool = False  # the required functions must be plain Python (GPU launchers)
    compile_timeout_s: float = 300.0  # loading the submission + JIT warm-up
    case_timeout_s: float = 20.0  # one correctness call
    first_call_timeout_s: float = 60.0  # a plain-Python entry's first call (compiles its callees)
    perf_timeout_s: float = 240.0  # the whole performance phase
    memory_limit_bytes: int = 2 * 2**30
    correctness_points: int = 60
    performance_points: int = 40
    max_worker_deaths: int = 3

    # --- subclass ------------------------------------------------------------------------
    def cases(self, hidden: HiddenCases) -> list[Case]:
        raise NotImplementedError

    def case_function(self, case: Case) -> str:
        """The required function a case calls: ``case.params["fn"]`` when the lab has several
        (e.g. ``row_sum`` and ``softmax``), else the lab's only one."""
        fn = case.params.get("fn") if isinstance(case.params, dict) else None
        return fn if fn in self.functions else next(iter(self.functions))

    def case_data(self, case: Case) -> CaseData:
        raise NotImplementedError

    def warmup_data(self) -> list[tuple[str, CaseData]]:
        """Small calls that trigger JIT compilation (function name, data)."""
        raise NotImplementedError

    def check(self, case: Case, data: CaseData, outputs: dict[str, np.ndarray]):
        """Compare the outputs with the golden reference (grader side). Returns a
        :class:`kernellab.numerics.Comparison`."""
        raise NotImplementedError

    def perf_plan(self) -> dict:
        """Parameters for the worker's performance measurement (JSON-serialisable)."""
        raise NotImplementedError

    def perf_rules(self, measured: dict) -> list[RuleResult]:
        """Turn the worker's measurements into pass/fail rules (grader side)."""
        raise NotImplementedError

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        """Grader side: None if the re-checked timed call's arrays are what ``plan`` asked for,
        else what is wrong, in plain words. The base class accepts anything."""
        return None

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

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        """Grader side: None if what :meth:`call_probe` observed obeys the lab's rules (e.g.
        the result was computed by a GPU kernel), else what is wrong, in plain words. ``info``
        is None or empty when nothing was observed (the in-notebook checker on a tier without
        observations): then nothing is checked. The base class accepts anything."""
        return None

    # worker side (runs in the sandboxed process)
    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        raise NotImplementedError
