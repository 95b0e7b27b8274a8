"""Grade one submission of one lab: static rules, signatures, every case, performance, re-check.

:func:`grade` never raises for anything the submission does; every failure becomes a line of
the report in plain words, and grading goes on with the next case (a crash or hang costs the
worker process, which is restarted, up to ``spec.max_worker_deaths`` times).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from grader.labs import get_spec_class
from grader.report import CaseResult, Report
from grader.sandbox import Limits, Worker, WorkerDied
from grader.spec import Case, CaseData, HiddenCases
from grader.static_check import check_source
from kernellab import notebook


def cache_root() -> Path:
    """Where submissions are stored as files so ``numba.njit(cache=True)`` can reuse their
    compiled code across gradings (``KERNELLAB_CACHE``, default ``~/.cache/kernellab``)."""
    return Path(os.environ.get("KERNELLAB_CACHE", Path.home() / ".cache" / "kernellab"))


def _store_submission(lab_id: str, source: str) -> Path:
    digest = hashlib.sha256((lab_id + "\0" + source).encode()).hexdigest()[:20]
    d = cache_root() / "submissions" / digest
    d.mkdir(parents=True, exist_ok=True)
    p = d / "submission.py"
    if not p.exists() or p.read_text() != source:  # unchanged file keeps its mtime: cache hit
        p.write_text(source)
    return p


class _Session:
    """A worker plus the bookkeeping to restart it after a crash or hang."""

    def __init__(self, spec, sub_path: Path, workdir: Path, report: Report):
        self.spec, self.sub_path, self.workdir, self.report = spec, sub_path, workdir, report
        self.worker: Worker | None = None
        self.deaths = 0
        self.load_error: str | None = None

    def start(self) -> bool:
        """Start a worker, load the submission, warm up (JIT). False if it cannot be loaded."""
        spec = self.spec
        self.worker = Worker(spec.lab_id, self.sub_path, self.workdir,
                             Limits(memory_bytes=spec.memory_limit_bytes))
        t0 = time.perf_counter()
        try:
            r = self.worker.request({"op": "load", "functions": list(spec.functions)},
                                    spec.compile_timeout_s)
        except WorkerDied as exc:
            self._died()
            self.load_error = f"loading the submission {exc}"
            return False
        if not r.get("ok"):
            self.load_error = f"loading the submission failed: {r.get('error')}"
            return False
        self.report.codegen = r.get("codegen")
        sigs = r.get("signatures", {})
        if not self.report.signatures:
            self.report.signatures = self._check_signatures(sigs)
        if any(not s["ok"] for s in self.report.signatures):
            self.load_error = "; ".join(s["message"] for s in self.report.signatures if not s["ok"])
            return False
        # Compile numba entry points without running them (own budget); entry points that are
        # plain Python compile what they call on their first call, so that first call gets the
        # compile budget too.
        by_fn: dict[str, list[CaseData]] = {}
        for fn, data in spec.warmup_data():
            by_fn.setdefault(fn, []).append(data)
        for fn, datas in by_fn.items():
            paths = []
            for i, data in enumerate(datas):
                p = self.workdir / f"compile_{fn}_{i}.npz"
                np.savez(p, **data.inputs)
                paths.append(str(p))
            d0 = datas[0]
            try:
                r = self.worker.request(
                    {"op": "compile", "fn": fn, "in": paths, "call": d0.call,
                     "outputs": {k: [list(sh), dt] for k, (sh, dt) in d0.outputs.items()}},
                    spec.compile_timeout_s)
            except WorkerDied as exc:
                self._died()
                self.load_error = f"compiling the submission {exc}"
                return False
            if not r.get("ok"):
                self.load_error = f"compiling the submission failed: {r.get('error')}"
                return False
            if not r.get("compiled"):
                for i, data in enumerate(datas):
                    try:
                        self._call(fn, data, f"warmup{i}", spec.first_call_timeout_s)
                    except WorkerDied as exc:
                        self._died()
                        self.load_error = (f"the first call (which compiles what {fn} calls) {exc}")
                        return False
        self.report.compile_seconds = round(time.perf_counter() - t0, 2)
        return True

    def _check_signatures(self, sigs: dict) -> list[dict]:
        out = []
        for name, params in self.spec.functions.items():
            got = sigs.get(name)
            if got is None:
                out.append({"name": name, "ok": False,
                            "message": f"'{name}' is not defined (the lab asks for "
                                       f"{name}({', '.join(params)}))"})
            elif got == "not callable":
                out.append({"name": name, "ok": False, "message": f"'{name}' is not a function"})
            elif isinstance(got, list) and len(got) != len(params):
                out.append({"name": name, "ok": False,
                            "message": f"{name}({', '.join(got)}) takes {len(got)} parameter(s); "
                                       f"the lab calls {name}({', '.join(params)})"})
            else:
                out.append({"name": name, "ok": True,
                            "message": f"{name}({', '.join(got) if isinstance(got, list) else '...'})"})
        return out

    def _call(self, fn: str, data: CaseData, tag: str, timeout: float) -> dict:
        inp = self.workdir / f"{tag}_in.npz"
        out = self.workdir / f"{tag}_out.npz"
        np.savez(inp, **data.inputs)
        r = self.worker.request({"op": "call", "fn": fn, "in": str(inp), "out": str(out),
                                 "outputs": {k: [list(s), d] for k, (s, d) in data.outputs.items()},
                                 "call": data.call}, timeout)
        if r.get("ok"):
            with np.load(out) as z:
                r["arrays"] = {k: z[k] for k in z.files}
            out.unlink(missing_ok=True)
        inp.unlink(missing_ok=True)
        return r

    def _died(self) -> None:
        self.deaths += 1
        if self.worker:
            self.worker.kill()

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


def _check_case(spec, case: Case, data: CaseData, r: dict) -> CaseResult:
    res = CaseResult(case=case.name, params=case.params, hidden=case.hidden)
    if not r.get("ok"):
        res.error = r.get("error") or "failed"
        return res
    res.seconds = r.get("seconds")
    arrays = r["arrays"]
    for name, original in data.inputs.items():
        after = arrays.get(name)
        if after is None or after.shape != original.shape or after.dtype != original.dtype:
            res.error = f"input {name} was reshaped or retyped by the submission"
            return res
        same = np.array_equal(after, original, equal_nan=after.dtype.kind == "f")
        if not same:
            n = int(np.sum(~((after == original) | (np.isnan(after) & np.isnan(original))
                             if after.dtype.kind == "f" else after == original)))
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
    if not cmp.ok:
        res.error = cmp.message
        if r.get("returned") and all(np.isnan(o).all() for o in outs.values()
                                     if o.dtype.kind == "f"):
            res.error = (f"returned a value (of type {r['returned']}) but left the output "
                         "unwritten: write the result into the output array the caller passes "
                         "(kernel style)")
    return res


def grade(lab_id: str, submission: str | Path, *, hidden: str | Path | None = None,
          run_performance: bool = True, case_timeout_s: float | None = None,
          first_call_timeout_s: float | None = None, progress=None) -> Report:
    """Grade ``submission`` (a lab notebook or a ``.py``) for ``lab_id``; returns the Report.

    Raises grader.labs.UnknownLab for an unknown lab and ValueError for a bad hidden-case file
    (both are the caller's mistakes, not the submission's).
    """
    spec = get_spec_class(lab_id)()
    if case_timeout_s is not None:
        spec.case_timeout_s = case_timeout_s
    if first_call_timeout_s is not None:
        spec.first_call_timeout_s = first_call_timeout_s
    hidden_cases = HiddenCases.load(hidden)
    report = Report.start(spec, str(submission))
    say = progress or (lambda msg: None)
    path = Path(submission)
    if not path.is_file():
        report.fatal = f"no such file: {submission}"
        return report.finish()
    try:
        source = notebook.submission_source(path)
    except (notebook.NotebookError, UnicodeDecodeError, OSError) as exc:
        report.fatal = str(exc)
        return report.finish()
    findings = check_source(source, allowed_imports=spec.allowed_imports,
                            banned_names=spec.banned_names)
    report.static = [str(f) for f in findings]
    cases = spec.cases(hidden_cases)
    if findings:
        report.fatal = "the submission breaks the lab's rules (nothing of it was run)"
        report.cases = [CaseResult(case=c.name, params=c.params, hidden=c.hidden,
                                   error="not run: rule violation") for c in cases]
        return report.finish()
    sub_path = _store_submission(lab_id, source)
    workdir = Path(tempfile.mkdtemp(prefix="kernellab-grade-"))
    session = _Session(spec, sub_path, workdir, report)
    try:
        say("loading and compiling the submission …")
        if not session.start():
            report.fatal = session.load_error
            report.cases = [CaseResult(case=c.name, params=c.params, hidden=c.hidden,
                                       error=session.load_error) for c in cases]
            return report.finish()
        for i, case in enumerate(cases):
            if session.deaths >= spec.max_worker_deaths:
                report.cases.append(CaseResult(case=case.name, params=case.params,
                                               hidden=case.hidden,
                                               error=f"not run: the submission crashed or hung "
                                                     f"{session.deaths} times"))
                continue
            data = spec.case_data(case)
            r = session.call(spec_entry(spec), data, f"case{i}", spec.case_timeout_s)
            res = _check_case(spec, case, data, r)
            report.cases.append(res)
            say(f"case {case.name}: {'pass' if res.passed else 'FAIL'}")
        if run_performance and all(c.passed for c in report.cases):
            say("measuring performance …")
            if session.worker is None or session.worker.proc.poll() is not None:
                session.start()
            _performance(spec, session, report, workdir)
        elif run_performance:
            report.performance_note = "not run: correctness must pass first"
        else:
            report.performance_note = "not run (--no-perf)"
        report.output_tail = session.worker.output_tail() if session.worker else ""
    finally:
        session.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return report.finish()


def spec_entry(spec) -> str:
    return next(iter(spec.functions))


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
    measured = r["measured"]
    report.performance_setup = measured.get("setup", {})
    report.rules = spec.perf_rules(measured)
    # re-check correctness on the fresh inputs of the last timed call
    recheck = measured.get("recheck")
    if recheck:
        case = Case("re-check after timing", recheck["params"], seed=-1)
        with np.load(recheck["path"]) as z:
            arrays = {k: z[k] for k in z.files}
        with np.load(recheck["before"]) as z:
            before = {k: z[k] for k in z.files}
        data = CaseData(inputs={k: before[k] for k in recheck["inputs"]},
                        outputs={k: (arrays[k].shape, str(arrays[k].dtype))
                                 for k in recheck["outputs"]},
                        call=recheck["inputs"] + recheck["outputs"])
        res = _check_case(spec, case, data, {"ok": True, "arrays": arrays})
        if recheck.get("nan_after_return"):
            res.passed = False
            res.error = (f"{recheck['nan_after_return']} timed call(s) returned before their "
                         "output was complete (NaN right after return): work escaped the timer")
        report.recheck = res
