"""In-notebook checks: the lab's visible cases and performance rules, run in the notebook's own
process so a student sees results in seconds while working.

This is feedback, not grading: it runs the student's function directly (no sandbox, no static
rules, no hidden cases). ``kernellab grade LAB`` (which grades ``work/<the lab's notebook>``)
is the real thing; every check ends by saying so. It words what it finds as the grader's report
does (:func:`grader.report.fatal_block`, :func:`grader.report.ulp_note`, the sim tier's hazard
text with the source line quoted).
"""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

from grader.labs import get_spec_class
from grader.report import (CaseResult, fatal_block, fmt_number, fmt_percent,
                           missing_function_detail, ulp_note)
from grader.runner import check_case, recheck, signature_checks
from grader.source_map import locate_in_file, rewrite_for_namespace
from grader.spec import RuleResult
from grader.worker import MAX_MESSAGE, _describe_sim_error, _signature
from grader.worker import _defined as _worker_defined

#: files whose frames are not the student's (the course, numba, numpy, the standard library)
_ROOT = Path(__file__).resolve().parent.parent
_NOT_YOURS = (os.path.dirname(os.__file__) + os.sep,) + tuple(
    str(_ROOT / pkg) + os.sep for pkg in ("grader", "kernellab", "reference_kernels"))


def grade_hint(spec) -> str:
    """The last line of every in-notebook check: how to grade for real."""
    return (f"to grade for real (sandbox, hidden cases, the lab's rules): save the notebook, then "
            f"run `kernellab grade {spec.lab_id}` (it grades work/{spec.notebook})")


def _namespace(fn) -> dict:
    try:
        g = getattr(getattr(fn, "py_func", fn), "__globals__", None)
    except Exception:  # noqa: BLE001
        g = None
    return g if isinstance(g, dict) else {}


def _yours(filename: str) -> bool:
    site = ("site-packages" + os.sep, "dist-packages" + os.sep)
    return not (any(s in filename for s in site) or filename.startswith(_NOT_YOURS)
                or filename.startswith("<frozen"))


def describe(exc: BaseException, fn) -> str:
    """An exception raised by the student's ``fn``, in the grader's words: a sim-tier hazard as
    the report gives it ("race: ...", its lines quoted from the notebook's cells), anything
    else as ``Type: message — at line N (`code`)`` at the innermost line of the student's own
    code."""
    sim = _describe_sim_error(exc)
    if sim is not None:
        return rewrite_for_namespace(sim, _namespace(fn), extra=[fn])
    msg = str(exc).strip().splitlines()
    first = msg[0][:MAX_MESSAGE] + ("…" if len(msg[0]) > MAX_MESSAGE else "") if msg else ""
    if isinstance(exc, NotImplementedError):
        return f"not implemented: {first}" if first else "not implemented"
    text = f"{type(exc).__name__}: {first}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _yours(f.filename)]
    if frames:
        text += f" — at {locate_in_file(frames[-1].filename, frames[-1].lineno)}"
    return text


def _defined(functions: dict) -> dict:
    """The functions a notebook defines (its ``globals()``), name -> parameters."""
    return _worker_defined(functions, module="__main__")


def _function_name(spec, fn, function: str | None) -> str:
    """Which of the lab's required functions ``fn`` stands for: ``function`` if given, else
    ``fn.__name__`` when the lab requires a function of that name, else the lab's only one.
    Raises ValueError for a ``function`` the lab does not require, and when a lab with several
    functions cannot tell which one ``fn`` is."""
    if function is not None:
        if function not in spec.functions:
            raise ValueError(f"lab {spec.lab_id!r} has no function {function!r}; it requires "
                             f"{', '.join(spec.functions)}")
        return function
    name = getattr(fn, "__name__", None)
    if name in spec.functions:
        return name
    if len(spec.functions) == 1:
        return next(iter(spec.functions))
    raise ValueError(f"lab {spec.lab_id!r} requires {', '.join(spec.functions)}, and {name!r} "
                     "is none of them: say which it is with function=...")


def _signature_problem(spec, which: str, fn) -> str | None:
    """What the grader's signature step would say against ``fn`` standing for ``which`` (a
    function the lab's call cannot bind to, a kernel where a launcher is asked for), or None."""
    got = _signature({which: fn}, which, list(spec.functions[which]))
    entry = next(s for s in signature_checks(spec, {which: got}) if s["name"] == which)
    return None if entry["ok"] else entry["message"]


def _spec(lab_id: str):
    """The lab's spec, told that it runs in a notebook (:meth:`grader.spec.LabSpec.in_notebook`)."""
    spec = get_spec_class(lab_id)()
    spec.in_notebook()
    return spec


def check(lab_id: str, fn, *, function: str | None = None, limit: int | None = None,
          verbose: bool = True) -> bool:
    """Run ``fn`` on the lab's visible cases; print one line per case. Returns True if all pass.

    A lab with several required functions (``softmax-cuda``: ``row_sum`` and ``softmax``) runs
    the cases of the one ``fn`` stands for (``function``, or ``fn.__name__``; see
    :func:`check_all` for all of them). As in the grader, a signature the lab cannot call is
    one named block and no case runs. ``limit`` runs only the first ``limit`` cases. Exceptions
    raised by ``fn`` are reported per case, not raised; an error repeated by later cases is
    printed once. Under the cases: what the ulp and budget figures mean, then how to grade for
    real. Raises ValueError for a ``function`` the lab does not require, or when a lab with
    several functions cannot tell which ``fn`` is.
    """
    spec = _spec(lab_id)
    ok, policies = _check(spec, fn, function, limit, verbose)
    if verbose:
        for line in ulp_note(policies) + [grade_hint(spec)]:
            print(line)
    return ok


def _check(spec, fn, function, limit, verbose) -> tuple[bool, list[str]]:
    """:func:`check` without its closing lines: (all passed, the tolerance rules seen)."""
    from grader.spec import HiddenCases

    which = _function_name(spec, fn, function)
    cases = [c for c in spec.cases(HiddenCases()) if spec.case_function(c) == which][:limit]
    problem = _signature_problem(spec, which, fn)
    if problem:
        if verbose:
            print("\n".join(fatal_block("wrong-signature", problem, who=which,
                                         cases=len(cases))))
        return False, []
    results: list[CaseResult] = []
    first_with: dict[str, str] = {}  # error text -> the first case that had it
    width = max([22] + [len(c.name) for c in cases])      # the column fits the longest name
    for case in cases:
        data = spec.case_data(case)
        arrays = {k: v.copy() for k, v in data.inputs.items()}
        arrays.update(data.allocate_outputs())
        try:
            with spec.call_probe(arrays) as info:  # a GPU lab: the kernel launches it saw
                ret = spec.run_call(fn, data.args(arrays), data.call, info)
            wrong = data.take_returned(ret, arrays)
            r = ({"ok": False, "error": wrong} if wrong else
                 {"ok": True, "arrays": arrays, "info": info,
                  "returned": None if ret is None else type(ret).__name__})
        except Exception as exc:  # feedback for the student, one line per case
            r = {"ok": False, "error": describe(exc, fn)}
        res = check_case(spec, case, data, r)
        results.append(res)
        if verbose:
            cm = res.comparison or {}
            figs = (f"max abs err {fmt_number(cm['max_abs'])}, {fmt_number(cm['max_ulp'])} ulp, "
                    f"{fmt_percent(cm['budget_used'])} of budget") if cm else ""
            seen = None if res.passed else first_with.setdefault(res.error, case.name)
            tail = ("" if res.passed else f"\n      {res.error}" if seen == case.name
                    else f" (same error as {seen})")
            print(f"{'pass' if res.passed else 'FAIL'}  {case.name:<{width}} {figs}{tail}")
            if res.tile_map:
                print("      output tiles (# wrong):\n" + "\n".join(
                    "        " + row for row in res.tile_map.splitlines()[:16]))
    ok = all(r.passed for r in results)
    if verbose:
        print(f"{sum(r.passed for r in results)}/{len(results)} cases pass")
    return ok, [r.comparison.get("policy", "") for r in results if r.comparison]


def check_all(lab_id: str, functions: dict, *, limit: int | None = None,
              verbose: bool = True) -> bool:
    """:func:`check` for every function the lab requires, taken by name from ``functions`` (a
    dict, e.g. ``globals()``). As in the grader, a missing function is one named block (with the
    functions the notebook does define, and the closest name) and the others are still
    checked. Returns True if every case of every function passes."""
    from grader.spec import HiddenCases

    spec = _spec(lab_id)
    ok = True
    policies: list[str] = []
    for name, params in spec.functions.items():
        fn = functions.get(name)
        if verbose and len(spec.functions) > 1:
            print(f"--- {name}")
        if fn is None:
            ok = False
            if verbose:
                n = sum(spec.case_function(c) == name for c in spec.cases(HiddenCases()))
                n = n if limit is None else min(n, limit)
                detail = missing_function_detail(name, _defined(functions), tuple(spec.functions),
                                                 who="the notebook", params=params,
                                                 launcher=bool(spec.python_entry))
                print("\n".join(fatal_block(
                    "missing-function",
                    f"'{name}' is not defined: the lab asks for {name}({', '.join(params)})",
                    detail, who=name, cases=n)))
            continue
        one, seen = _check(spec, fn, name, limit, verbose)
        ok = one and ok
        policies += seen
    if verbose:
        for line in ulp_note(policies) + [grade_hint(spec)]:
            print(line)
    return ok


def codegen_note(spec) -> str | None:
    """A warning when this process compiles under another :mod:`kernellab.codegen` profile than
    the grader's worker does for ``spec`` (CPU labs: its kernels run at another vector width, so
    the speed here can differ from the grade's); None when they agree or for other tiers."""
    if spec.tier != "cpu":
        return None
    from kernellab import codegen

    if spec.codegen in codegen.matching():  # the same settings, whatever the name
        return None
    here = codegen.active()
    return (f"note: this process compiles under the {here!r} codegen profile, the grader under "
            f"{spec.codegen!r}: run `from kernellab import codegen; "
            f"codegen.apply({spec.codegen!r})` first thing in the notebook (before anything is "
            "compiled), or the speed here can differ from the grade's")


def performance(lab_id: str, fn, *, function: str | None = None, verbose: bool = True,
                **plan_overrides) -> list:
    """Measure ``fn`` by the lab's performance rules, in this process. Returns the RuleResults.

    ``fn`` stands for the lab's function named ``function`` (default: ``fn.__name__`` if the
    lab requires it, else the lab's first function). ``plan_overrides`` change the measurement
    plan (e.g. ``rounds=3``) for a quicker look.
    """
    spec = _spec(lab_id)
    which = _function_name(spec, fn, function)
    problem = _signature_problem(spec, which, fn)
    if problem:
        if verbose:
            print("\n".join(fatal_block("wrong-signature", problem, who=which)
                            + ["not timed", grade_hint(spec)]))
        return []
    plan = {**spec.perf_plan(), **plan_overrides}
    with tempfile.TemporaryDirectory() as d:
        try:
            measured = spec.measure({which: fn}, plan, Path(d))
        except Exception as exc:  # feedback, not a traceback through the harness
            if verbose:
                print(f"cannot time it: {describe(exc, fn)}\n{grade_hint(spec)}")
            return []
        after = recheck(spec, plan, measured["recheck"], Path(d))
    rules = spec.perf_rules(measured)
    ns = _namespace(fn)
    for r in rules:  # a speed rule's detail names lines of the student's kernels: quote them
        r.detail = rewrite_for_namespace(r.detail, ns, extra=[fn])
    if verbose:
        print(measured["setup"]["description"])
        note = codegen_note(spec)
        if note:
            print(note)
        for r in rules:
            spread = f" ({r.spread[0]:.3g}–{r.spread[1]:.3g})" if r.spread else ""
            meas = "-" if r.measured is None else f"{r.measured:.3g}{r.unit}"
            print(f"{'pass' if r.passed else 'FAIL'}  {r.name:<38} {meas}"
                  f"{spread}  {r.op} {r.threshold:g}{r.unit}" + ("" if r.scored else "  (gate)"))
            if r.detail:
                print(f"      {r.detail}")
        if measured["setup"].get("threads_note"):
            print(f"threads: {measured['setup']['threads_note']}")
        print("re-check of the timed calls: " + ("ok" if after.passed else f"FAIL — {after.error}"))
        print(grade_hint(spec))
    if not after.passed:
        rules = rules + [RuleResult("timed calls computed the right result", None, 1.0, ">=", "",
                                    False, after.error or "")]
    return rules
