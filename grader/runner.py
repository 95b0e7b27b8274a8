"""Grade one submission of one lab: static rules, signatures, every case, performance, re-check.

:func:`grade` never raises for anything the submission does; every failure becomes a line of
the report in plain words, and grading goes on with the next case (a crash or hang costs the
worker process, which is restarted, up to ``spec.max_worker_deaths`` times).

A lab with several required functions grades each on its own: one that is missing, has the
wrong signature, fails to compile, or crashes or hangs in its warm-up call is named once
(``Report.broken``) and its cases are not run; the other functions' cases run and earn their
points. The performance phase runs once every case of the functions it times passes
(:func:`timed_functions`); when one of those is broken, its note names it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from grader.labs import get_spec_class
from grader.report import CaseResult, Report, missing_function_detail
from grader.sandbox import Limits, Worker, WorkerDied, os_sandbox
from grader.source_map import SourceMap, quote_line
from grader.spec import Case, CaseData, HiddenCases
from grader.static_check import check_source
from grader import notebook, npz
from kernellab.numerics import is_float


def cache_root() -> Path:
    """Where submissions are stored as files so ``numba.njit(cache=True)`` can reuse their
    compiled code across gradings (``KERNELLAB_CACHE``, default ``~/.cache/kernellab``)."""
    return Path(os.environ.get("KERNELLAB_CACHE", Path.home() / ".cache" / "kernellab"))


def _store_submission(lab_id: str, source: str) -> Path:
    """Write ``source`` (UTF-8, exactly the checked text) where numba can cache it. Atomic: two
    gradings of the same submission at once never see each other's half-written file."""
    data = source.encode("utf-8", errors="surrogatepass")
    digest = hashlib.sha256(lab_id.encode() + b"\0" + data).hexdigest()[:20]
    d = cache_root() / "submissions" / digest
    d.mkdir(parents=True, exist_ok=True)
    p = d / "submission.py"
    try:
        same = p.read_bytes() == data
    except OSError:
        same = False
    if not same:  # an unchanged file keeps its mtime: numba's cache hit
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".submission-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return p


def signature_checks(spec, sigs: dict, defined: dict | None = None,
                     notebook: bool = False) -> list[dict]:
    """The signature step, one entry per required function: ``{"name", "ok", "message",
    "kind", "detail"}`` (``kind``: "missing-function" or "wrong-signature" when not ok;
    ``detail``: further lines for the report). ``sigs``: what :func:`grader.worker._signature`
    found for each name; ``defined``: the functions the submission defines (name ->
    parameters), listed under a missing one; ``notebook``: the submission is a notebook. Shared
    by the grader and the in-notebook checker (:mod:`grader.local`)."""
    out = []
    for name, params in spec.functions.items():
        got = sigs.get(name)
        if got is None:
            out.append({"name": name, "ok": False, "kind": "missing-function",
                        "message": f"'{name}' is not defined: the lab asks for "
                                   f"{name}({', '.join(params)})",
                        "detail": missing_function_detail(
                            name, defined or {}, tuple(spec.functions), notebook,
                            params=params, launcher=bool(spec.python_entry))})
        elif got == "not callable":
            out.append({"name": name, "ok": False, "message": f"'{name}' is not a function"})
        elif (isinstance(got, dict) and spec.python_entry
              and got.get("jit") in ("cuda-kernel", "cpu-jit")):
            what = ("a @cuda.jit kernel" if got["jit"] == "cuda-kernel"
                    else "an @njit (CPU) function")
            out.append({"name": name, "ok": False,
                        "message": f"'{name}' is {what}; the lab calls {name}("
                                   f"{', '.join(params)}) as a plain Python function that "
                                   "launches your kernel(s): def " + name + "(...): "
                                   "kernel[grid, block](...)"})
        elif isinstance(got, dict) and not got.get("binds"):
            shown = [str(p) for p in got.get("params", [])][:20]
            out.append({"name": name, "ok": False,
                        "message": f"{name}({', '.join(shown)}) cannot be called as "
                                   f"{name}({', '.join(params)}), which is how the lab "
                                   f"calls it ({len(params)} arguments)"})
        else:
            shown = ", ".join(str(p) for p in got.get("params", [])[:20]) \
                if isinstance(got, dict) else "..."
            out.append({"name": name, "ok": True, "message": f"{name}({shown})"})
    for entry in out:
        if not entry["ok"]:
            entry.setdefault("kind", "wrong-signature")
            entry.setdefault("detail", [])
    return out


class _Session:
    """A worker plus the bookkeeping to restart it after a crash or hang.

    Per-function: a required function that is missing, has the wrong signature, fails to
    compile, or crashes or hangs in its warm-up call goes into :attr:`broken` (function -> why,
    in plain words, naming it); its cases are not run and the other functions' are. Only when
    every required function is broken (or the module itself cannot be loaded) does
    :meth:`start` fail."""

    def __init__(self, spec, sub_path: Path, workdir: Path, report: Report, hidden=None):
        self.spec, self.sub_path, self.workdir, self.report = spec, sub_path, workdir, report
        #: the instructor's hidden-case file: out of the worker's reach (grader.sandbox)
        self.hidden = [Path(hidden)] if hidden else []
        self.worker: Worker | None = None
        self.deaths = 0
        self.load_error: str | None = None
        self.load_kind: str | None = None  # a grader.report.FATAL_TITLES key
        self.broken: dict[str, str] = {}
        self.broken_kind: dict[str, str] = {}
        self.broken_detail: dict[str, list[str]] = {}

    def _all_broken(self) -> bool:
        if all(f in self.broken for f in self.spec.functions):
            self.load_error = "; ".join(self.broken[f] for f in self.spec.functions)
            self.load_kind = self.broken_kind.get(next(iter(self.spec.functions)), "crash")
            return True
        return False

    def _break(self, fn: str, why: str, kind: str) -> None:
        self.broken[fn] = why
        self.broken_kind[fn] = kind

    def start(self) -> bool:
        """Start a worker, load the submission, warm up (JIT) every function not yet broken.
        False if the submission cannot be loaded or no required function is usable."""
        spec = self.spec
        if self.worker is not None:
            self.worker.close()
        try:
            tier = spec.tier
            self.worker = Worker(spec.lab_id, self.sub_path, self.workdir,
                                 # no address-space limit on a GPU: see grader.sandbox.Limits
                                 Limits(memory_bytes=None if tier == "gpu"
                                        else spec.memory_limit_bytes),
                                 tier=tier, writable=[self.sub_path.parent],
                                 hidden=self.hidden)
        except (OSError, subprocess.SubprocessError) as exc:
            self.worker = None
            self.load_error = (f"the grader could not start its worker process ({exc}); "
                               "this is not the submission's fault — check the machine's "
                               "process and memory limits")
            self.load_kind = "grader-error"
            return False
        t0 = time.perf_counter()
        try:
            functions = {k: list(v) for k, v in spec.functions.items()}
            r = self.worker.request({"op": "load", "functions": functions},
                                    spec.compile_timeout_s)
        except WorkerDied as exc:
            self._died()
            self.load_error = f"loading the submission {exc}"
            self.load_kind = "crash"
            return False
        if not r.get("ok"):
            self.load_error = f"loading the submission failed: {r.get('error')}"
            self.load_kind = "import-error"
            return False
        self.report.codegen = r.get("codegen")
        self.report.sandbox = os_sandbox() + (", no new processes" if r.get("no_new_processes")
                                              else ", new processes allowed")
        sigs = r.get("signatures")
        sigs = sigs if isinstance(sigs, dict) else {}
        defined = r.get("defined")
        defined = ({str(k): [str(p) for p in v] for k, v in defined.items()
                    if isinstance(v, list)} if isinstance(defined, dict) else {})
        if not self.report.signatures:
            self.report.defined = defined
            self.report.signatures = signature_checks(
                spec, sigs, defined, notebook=self.report.submission.endswith(".ipynb"))
        for s in self.report.signatures:
            if not s["ok"] and s["name"] not in self.broken:
                self._break(s["name"], s["message"], s.get("kind", "wrong-signature"))
                self.broken_detail[s["name"]] = list(s.get("detail", []))
        if self._all_broken():
            return False
        # Compile numba entry points without running them (own budget); entry points that are
        # plain Python compile what they call on their first call, so that first call gets the
        # compile budget too. A function that fails here is broken, the others go on; a worker
        # that died here is restarted without it.
        by_fn: dict[str, list[CaseData]] = {}
        for fn, data in spec.warmup_data():
            if fn not in self.broken:
                by_fn.setdefault(fn, []).append(data)
        for fn, datas in by_fn.items():
            paths = []
            for i, data in enumerate(datas):
                p = self.workdir / f"compile_{fn}_{i}.npz"
                npz.save(p, data.inputs)
                paths.append(str(p))
            d0 = datas[0]
            try:
                r = self.worker.request(
                    {"op": "compile", "fn": fn, "in": paths, "call": d0.call,
                     "scalars": d0.scalars,
                     "outputs": {k: [list(sh), dt] for k, (sh, dt) in d0.outputs.items()}},
                    spec.compile_timeout_s)
            except WorkerDied as exc:
                self._died()
                self._break(fn, f"compiling {fn} {exc}", "crash")
                return self._restart_without(fn)
            if not r.get("ok"):
                self._break(fn, f"compiling {fn} failed: {r.get('error')}", "compile-error")
                continue
            if not r.get("compiled"):
                for i, data in enumerate(datas):
                    try:
                        self._call(fn, data, f"warmup{i}", spec.first_call_timeout_s)
                    except WorkerDied as exc:
                        self._died()
                        self._break(fn, f"the first call of {fn} (which compiles what it "
                                        f"calls) {exc}", "crash")
                        return self._restart_without(fn)
        if self._all_broken():
            return False
        self.report.compile_seconds = round(time.perf_counter() - t0, 2)
        return True

    def _restart_without(self, fn: str) -> bool:
        """After the worker died warming up ``fn`` (now broken): a fresh worker for the rest."""
        self.worker = None
        if self._all_broken():
            return False
        if self.deaths >= self.spec.max_worker_deaths:
            self.load_error = (f"{self.broken[fn]}; the submission crashed or hung "
                               f"{self.deaths} times")
            self.load_kind = "crash"
            return False
        return self.start()

    def _call(self, fn: str, data: CaseData, tag: str, timeout: float) -> dict:
        inp = self.workdir / f"{tag}_in.npz"
        out = self.workdir / f"{tag}_out.npz"
        npz.save(inp, data.inputs)
        r = self.worker.request({"op": "call", "fn": fn, "in": str(inp), "out": str(out),
                                 "outputs": {k: [list(s), d] for k, (s, d) in data.outputs.items()},
                                 "call": data.call, "returns": data.returns,
                                 "scalars": data.scalars}, timeout)
        if r.get("ok"):
            try:
                r["arrays"] = npz.load(out)  # allow_pickle=False: data only
            except Exception as exc:  # the worker's file, not ours: never trusted to be sane
                r = {"ok": False, "error": f"its output could not be read back ({exc}): was "
                                           "the grading process tampered with?"}
            out.unlink(missing_ok=True)
        inp.unlink(missing_ok=True)
        return r

    def _died(self) -> None:
        self.deaths += 1
        if self.worker:
            self.worker.close()

    def call(self, fn: str, data: CaseData, tag: str, timeout: float) -> dict:
        """One call; a crash or hang becomes {"ok": False, "error": …, "died": True}."""
        if self.worker is None or self.worker.proc.poll() is not None:
            if not self.start():
                return {"ok": False, "error": self.load_error, "died": True}
        try:
            return self._call(fn, data, tag, timeout)
        except WorkerDied as exc:
            self._died()
            self.worker = None
            return {"ok": False, "error": f"the submission {exc}", "died": True}

    def close(self) -> None:
        if self.worker:
            self.worker.close()


def check_case(spec, case: Case, data: CaseData, r: dict) -> CaseResult:
    """Judge one call (``r``: the worker's reply with the arrays after the call) in the grader's
    process: inputs unchanged, outputs of the right shape and dtype, values against the golden
    reference. Shared by the grader and the in-notebook checker (:mod:`grader.local`)."""
    res = CaseResult(case=case.name, params=case.params, hidden=case.hidden,
                     function=spec.case_function(case))
    if not r.get("ok"):
        res.error = r.get("error") or "failed"
        res.raised = True
        return res
    res.seconds = r.get("seconds")
    arrays = r["arrays"]
    for name, original in data.inputs.items():
        after = arrays.get(name)
        if after is None or after.shape != original.shape or after.dtype != original.dtype:
            res.error = f"input {name} was reshaped or retyped by the submission"
            return res
        floating = is_float(after.dtype)
        same = np.array_equal(after, original, equal_nan=floating)
        if not same:
            n = int(np.sum(~((after == original) | (np.isnan(after) & np.isnan(original))
                             if floating else after == original)))
            res.error = (f"wrote into its input {name} ({n} element(s) changed): inputs are "
                         "read-only, write only the output")
            return res
    outs = {}
    for name, (shape, dtype) in data.outputs.items():
        got = arrays.get(name)
        if got is None or tuple(got.shape) != tuple(shape) or got.dtype != np.dtype(dtype):
            res.error = (f"output {name} has shape {None if got is None else got.shape} / dtype "
                         f"{None if got is None else got.dtype}; expected {tuple(shape)} {dtype}")
            return res
        outs[name] = got
    cmp = spec.check(case, data, outs)
    res.comparison = cmp.to_dict()
    res.tile_map = cmp.tile_map() if not cmp.ok else ""
    res.passed = bool(cmp.ok)
    # the lab's rules on how the result was produced (a GPU lab: by a kernel), after the values
    # so the report keeps their figures either way
    how = spec.check_call(case, data, r.get("info"))
    if how:
        res.passed = False
        res.error = how
        if not np.isfinite(float(res.comparison.get("max_abs", 0.0))):
            # the call stopped at what ``how`` says before writing its outputs (NaN, or inf
            # away from the golden): figures that say nothing more than the error
            res.comparison, res.tile_map = None, ""
        return res
    if not cmp.ok:
        res.error = cmp.message
        floats = [o for o in outs.values() if is_float(o.dtype)]
        if r.get("returned") and floats and all(np.isnan(o).all() for o in floats):
            res.error = (f"returned a value (of type {r['returned']}) but left the output "
                         "unwritten: write the result into the output array the caller passes "
                         "(kernel style)")
    return res


def grade(lab_id: str, submission: str | Path, *, hidden: str | Path | None = None,
          run_performance: bool = True, case_timeout_s: float | None = None,
          first_call_timeout_s: float | None = None, compile_timeout_s: float | None = None,
          progress=None, only=None) -> Report:
    """Grade ``submission`` (a lab notebook or a ``.py``) for ``lab_id``; returns the Report.
    ``only``: a predicate on :class:`grader.spec.Case`; when given, only the cases it accepts
    run (a partial grading: the report's score covers those cases).

    Raises grader.labs.UnknownLab for an unknown lab and ValueError for a bad hidden-case file
    (both are the caller's mistakes, not the submission's).
    """
    spec = get_spec_class(lab_id)()
    if case_timeout_s is not None:
        spec.case_timeout_s = case_timeout_s
    if first_call_timeout_s is not None:
        spec.first_call_timeout_s = first_call_timeout_s
    if compile_timeout_s is not None:
        spec.compile_timeout_s = compile_timeout_s
    hidden_cases = HiddenCases.load(hidden)
    report = Report.start(spec, str(submission))
    report.performance_requested = run_performance
    say = progress or (lambda msg: None)
    path = Path(submission)
    problem = spec.tier_problem()
    if problem:
        report.fatal, report.fatal_kind = problem, "cannot-grade"
        return report.finish()
    report.fatal_kind = "unreadable"
    if path.is_dir():
        report.fatal = f"{submission} is a folder, not a file: give the notebook or .py file"
        return report.finish()
    if not path.is_file():
        report.fatal = f"no such file: {submission}"
        return report.finish()
    try:
        source, smap = SourceMap.of_submission(path)
    except (notebook.NotebookError, OSError) as exc:
        report.fatal = str(exc)
        return report.finish()
    report.fatal_kind = None
    report.rules_checked = True
    findings = check_source(source, allowed_imports=spec.allowed_imports,
                            banned_names=spec.banned_names,
                            allowed_submodules=spec.allowed_submodules,
                            context_params=spec.context_params)
    report.static = [smap.rewrite(str(f)) for f in findings]
    cases = spec.cases(hidden_cases)
    if only is not None:
        cases = [c for c in cases if only(c)]
    if findings:
        syntax = syntax_error(source, smap)
        if syntax is not None:
            report.fatal_kind = "syntax-error"
            report.fatal, report.fatal_detail = syntax
            why = "syntax error"
        else:
            report.fatal_kind = "rule-violation"
            n = len(findings)
            more = f" (and {n - 1} more)" if n > 1 else ""
            report.fatal = ("it breaks the lab's rules, so nothing of it was run: "
                            f"{report.static[0]}{more}")
            report.fatal_detail = (
                [f"the rules: {rules_summary(spec)}"]
                + [f"- {f}" for f in report.static]
                + ["each line says what is not allowed (and what to write instead): change "
                   "those lines and grade again"])
            why = "rule violation"
        report.cases = [_not_run(spec, c, why) for c in cases]
        return report.finish()
    workdir = Path(tempfile.mkdtemp(prefix="kernellab-grade-"))
    try:
        sub_path = _store_submission(lab_id, source)
    except OSError:  # the cache folder is not writable: grade without numba's cache
        (workdir / "src").mkdir()
        sub_path = workdir / "src" / "submission.py"
        sub_path.write_bytes(source.encode("utf-8", errors="surrogatepass"))
    session = _Session(spec, sub_path, workdir, report, hidden)
    try:
        say("loading and compiling the submission …")
        if not session.start():
            report.fatal = session.load_error
            report.fatal_kind = session.load_kind or "crash"
            _copy_broken(report, session)
            if len(spec.functions) == 1 and session.broken:
                fn = next(iter(spec.functions))
                report.fatal = session.broken.get(fn, report.fatal)
                report.fatal_detail = session.broken_detail.get(fn, [])
            report.cases = [_not_run(spec, c, session.load_error) for c in cases]
            report.output_tail = session.worker.output_tail() if session.worker else ""
            _locate(report, smap)
            return report.finish()
        for i, case in enumerate(cases):
            fn = spec.case_function(case)
            if fn in session.broken:  # named once in the report, not once per case
                report.cases.append(_not_run(spec, case, session.broken[fn]))
                continue
            if session.deaths >= spec.max_worker_deaths:
                report.cases.append(_not_run(spec, case, f"the submission crashed or hung "
                                                         f"{session.deaths} times"))
                continue
            data = spec.case_data(case)
            r = session.call(fn, data, f"case{i}", spec.case_timeout_s)
            res = check_case(spec, case, data, r)
            report.cases.append(res)
            say(f"case {case.name}: {'pass' if res.passed else 'FAIL'}")
        _copy_broken(report, session)
        why_not = _performance_gate(spec, report.cases, session.broken)
        if run_performance and why_not is None:
            say("measuring performance …")
            if session.worker is None or session.worker.proc.poll() is not None:
                if not session.start():
                    report.performance_note = f"not run: {session.load_error}"
            if not report.performance_note:
                _performance(spec, session, report, workdir)
        elif run_performance:
            report.performance_note = f"not run: {why_not}"
        else:
            report.performance_note = "not run (--no-perf)"
        report.output_tail = session.worker.output_tail() if session.worker else ""
    finally:
        session.close()
        shutil.rmtree(workdir, ignore_errors=True)
    _locate(report, smap)
    return report.finish()


def _copy_broken(report: Report, session: _Session) -> None:
    report.broken = dict(session.broken)
    report.broken_kind = dict(session.broken_kind)
    report.broken_detail = {k: list(v) for k, v in session.broken_detail.items()}


def _locate(report: Report, smap: SourceMap) -> None:
    """Every source location in the grader's own messages told by cell and quoted line
    (:class:`grader.source_map.SourceMap`); applied once, at the end of :func:`grade`. What the
    submission printed (``output_tail``) is left as it is."""
    rw = smap.rewrite
    report.fatal = rw(report.fatal)
    report.performance_note = rw(report.performance_note)
    report.broken = {k: rw(v) for k, v in report.broken.items()}
    for sig in report.signatures:
        sig["message"] = rw(sig.get("message", ""))
    for c in report.cases + ([report.recheck] if report.recheck else []):
        c.error = rw(c.error)
    for r in report.rules:
        r.detail = rw(r.detail)


def rules_summary(spec) -> str:
    """The lab's static rules in one line, for a rule-violation block, from the spec: its
    allowed imports (and the submodules it opens), and what no lab allows."""
    subs = sorted(spec.allowed_submodules)
    imports = ", ".join(sorted(spec.allowed_imports))
    opened = (f" (with {', '.join(subs)}" + ("; nothing else of kernellab" if any(
        m.startswith("kernellab") for m in subs) else "") + ")") if subs else ""
    return (f"imports of {imports}{opened} only; no library or reference product (@, dot, "
            "matmul, einsum …, the course's reference and baseline code); no escape hatches "
            "(eval, getattr, files, dunder names, attribute assignment …)")


def syntax_error(source: str, smap: SourceMap) -> tuple[str, list[str]] | None:
    """``(message, detail)`` when ``source`` does not parse: ``syntax error at <where>: <what
    Python says>`` (where, and the lines Python's words name, "on line 8": by
    :class:`SourceMap`), then the line quoted with a caret under the column Python points at
    (if it says one). None when it parses."""
    import ast

    try:
        ast.parse(source)
    except SyntaxError as exc:
        n = exc.lineno or 0
        msg = exc.msg or "invalid syntax"
        if not smap.valid(n):
            return f"syntax error: {msg}", []
        line = smap.source_line(n).rstrip()
        head = f"syntax error at {smap.where(n)}: {smap.rewrite(msg, shown=n)}"
        if len(line) > 160:
            return head, [f"| {quote_line(line, 160)}"]
        detail = [f"| {line}"]
        off = exc.offset or 0
        if smap.lines[n - 1].rstrip() != line:  # an IPython magic: the offset is the comment's
            off = 0
        if 1 <= off <= len(line) + 1:
            pad = "".join("\t" if ch == "\t" else " " for ch in line[: off - 1])
            detail.append(f"| {pad}^")
        return head, detail
    except ValueError as exc:  # null bytes (older Pythons)
        return f"syntax error: {exc}", []
    except (RecursionError, MemoryError):
        return None
    return None


def _not_run(spec, case: Case, why: str) -> CaseResult:
    return CaseResult(case=case.name, params=case.params, hidden=case.hidden,
                      function=spec.case_function(case), not_run=True, error=f"not run: {why}")


def timed_functions(spec) -> tuple[str, ...]:
    """The required functions the lab's performance phase times (``spec.perf_functions``;
    all of them when the lab does not say)."""
    return tuple(spec.perf_functions) or tuple(spec.functions)


def _performance_gate(spec, cases: list[CaseResult], broken: dict[str, str]) -> str | None:
    """None when the performance phase may run: every case of the functions it times passed
    (the other functions' cases need not: each function earns its own points). Otherwise why
    not, in plain words, naming a broken timed function."""
    timed = timed_functions(spec)
    declared = len(timed) < len(spec.functions)  # the lab times only some of its functions
    dead = [f for f in timed if f in broken]
    if dead:
        why = "; ".join(broken[f] for f in dead)
        return (f"it times {' and '.join(timed)}: {why}" if declared
                else f"correctness must pass first ({why})")
    gate = [c for c in cases if c.function in timed]
    if not gate or not all(c.passed for c in gate):
        return (f"the cases of {' and '.join(timed)} must pass first" if declared
                else "correctness must pass first")
    return None


def _performance(spec, session: _Session, report: Report, workdir: Path) -> None:
    plan = spec.perf_plan()
    try:
        r = session.worker.request({"op": "perf", "plan": plan}, spec.perf_timeout_s)
    except WorkerDied as exc:
        session._died()
        report.performance_note = f"the submission {exc} while being timed"
        return
    if not r.get("ok"):
        report.performance_note = f"failed while being timed: {r.get('error')}"
        return
    # The measurements come from the submission's process: anything malformed voids them.
    try:
        measured = r["measured"]
        rules = spec.perf_rules(measured)
        res = recheck(spec, plan, measured["recheck"], workdir)
    except Exception as exc:  # noqa: BLE001
        report.rules = []
        report.performance_note = (f"the measurements came back malformed ({type(exc).__name__}: "
                                   f"{exc}): was the grading process tampered with?")
        return
    report.performance_setup = measured.get("setup", {}) if isinstance(measured, dict) else {}
    report.rules = rules
    report.recheck = res


def recheck(spec, plan: dict, recheck: dict, workdir: Path) -> CaseResult:
    """Correctness after timing: the last timed call's output on its fresh inputs, checked here
    in full; every timed call's output, checked by the worker right after it returned (outside
    the timer, see the lab's ``measure``); and the timed data, which must be what the plan says
    (a worker whose numpy was tampered with could time something smaller or cheaper)."""
    case = Case("re-check after timing", recheck["params"], seed=-1)
    for key in ("path", "before"):
        if Path(recheck[key]).resolve().parent != workdir.resolve():
            raise ValueError(f"re-check file {recheck[key]!r} is outside the grading folder")
    with np.load(recheck["path"]) as z:
        arrays = {k: z[k] for k in z.files}
    with np.load(recheck["before"]) as z:
        before = {k: z[k] for k in z.files}
    data = CaseData(inputs={k: before[k] for k in recheck["inputs"]},
                    outputs={k: (arrays[k].shape, str(arrays[k].dtype))
                             for k in recheck["outputs"]},
                    call=recheck["inputs"] + recheck["outputs"],
                    scalars=dict(recheck.get("scalars") or {}))
    expected = spec.perf_data_check(plan, recheck, arrays)
    if expected:
        return CaseResult(case=case.name, params=case.params, hidden=False, passed=False,
                          error=expected)
    res = check_case(spec, case, data, {"ok": True, "arrays": arrays})
    if recheck.get("nan_after_return"):
        res.passed = False
        res.error = (f"{recheck['nan_after_return']} timed call(s) returned before their "
                     "output was complete (NaN right after return): work escaped the timer")
    elif recheck.get("wrong_calls"):
        res.passed = False
        res.error = (f"{recheck['wrong_calls']} of {recheck.get('checked_calls', '?')} timed "
                     "call(s) wrote a wrong result (each is checked right after it returns, "
                     "outside the timer): every timed call must compute the whole product")
    return res
