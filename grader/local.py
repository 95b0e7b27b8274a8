"""In-notebook checks: the lab's visible cases and performance rules, run in the notebook's own
process so a student sees results in seconds while working.

This is feedback, not grading: it runs the student's function directly (no sandbox, no static
rules, no hidden cases). ``kernellab grade LAB NOTEBOOK`` is the real thing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from grader.labs import get_spec_class
from grader.report import CaseResult, fmt_number, fmt_percent
from grader.runner import check_case, recheck, signature_checks
from grader.spec import RuleResult
from grader.worker import _describe_sim_error, _signature


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


def check(lab_id: str, fn, *, function: str | None = None, limit: int | None = None,
          verbose: bool = True) -> bool:
    """Run ``fn`` on the lab's visible cases; print one line per case. Returns True if all pass.

    A lab with several required functions (``softmax-cuda``: ``row_sum`` and ``softmax``) runs
    the cases of the one ``fn`` stands for (``function``, or ``fn.__name__``; see
    :func:`check_all` for all of them). As in the grader, a signature the lab cannot call is
    one line and no case runs. ``limit`` runs only the first ``limit`` cases. Exceptions raised
    by ``fn`` are reported per case, not raised; an error repeated by later cases is printed
    once. Raises ValueError for a ``function`` the lab does not require, or when a lab with
    several functions cannot tell which ``fn`` is.
    """
    from grader.spec import HiddenCases

    spec = get_spec_class(lab_id)()
    which = _function_name(spec, fn, function)
    cases = [c for c in spec.cases(HiddenCases()) if spec.case_function(c) == which][:limit]
    problem = _signature_problem(spec, which, fn)
    if problem:
        if verbose:
            print(f"FAIL  {which}: {problem}; its {len(cases)} cases not run")
        return False
    results: list[CaseResult] = []
    first_with: dict[str, str] = {}  # error text -> the first case that had it
    width = max([22] + [len(c.name) for c in cases])      # the column fits the longest name
    for case in cases:
        data = spec.case_data(case)
        arrays = {k: v.copy() for k, v in data.inputs.items()}
        arrays.update(data.allocate_outputs())
        try:
            with spec.call_probe(arrays) as info:  # a GPU lab: the kernel launches it saw
                ret = fn(*data.args(arrays))
            wrong = data.take_returned(ret, arrays)
            r = ({"ok": False, "error": wrong} if wrong else
                 {"ok": True, "arrays": arrays, "info": info,
                  "returned": None if ret is None else type(ret).__name__})
        except NotImplementedError as exc:
            r = {"ok": False, "error": f"not implemented: {exc}"}
        except Exception as exc:  # feedback for the student, one line per case
            # a sim-tier hazard reads as the grader reports it ("race: ...")
            r = {"ok": False, "error": _describe_sim_error(exc) or f"{type(exc).__name__}: {exc}"}
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
    return ok


def check_all(lab_id: str, functions: dict, *, limit: int | None = None,
              verbose: bool = True) -> bool:
    """:func:`check` for every function the lab requires, taken by name from ``functions`` (a
    dict, e.g. ``globals()``). As in the grader, a missing function is one line ("softmax: not
    defined") and the others are still checked. Returns True if every case of every function
    passes."""
    spec = get_spec_class(lab_id)()
    ok = True
    for name, params in spec.functions.items():
        fn = functions.get(name)
        if verbose and len(spec.functions) > 1:
            print(f"--- {name}")
        if fn is None:
            ok = False
            if verbose:
                print(f"FAIL  {name}: not defined (the lab asks for {name}({', '.join(params)}))")
            continue
        ok = check(lab_id, fn, function=name, limit=limit, verbose=verbose) and ok
    return ok


def performance(lab_id: str, fn, *, function: str | None = None, verbose: bool = True,
                **plan_overrides) -> list:
    """Measure ``fn`` by the lab's performance rules, in this process. Returns the RuleResults.

    ``fn`` stands for the lab's function named ``function`` (default: ``fn.__name__`` if the
    lab requires it, else the lab's first function). ``plan_overrides`` change the measurement
    plan (e.g. ``rounds=3``) for a quicker look.
    """
    spec = get_spec_class(lab_id)()
    which = _function_name(spec, fn, function)
    problem = _signature_problem(spec, which, fn)
    if problem:
        if verbose:
            print(f"cannot time it: {problem}")
        return []
    plan = {**spec.perf_plan(), **plan_overrides}
    with tempfile.TemporaryDirectory() as d:
        try:
            measured = spec.measure({which: fn}, plan, Path(d))
        except Exception as exc:  # feedback, not a traceback through the harness
            if verbose:
                why = _describe_sim_error(exc) or f"{type(exc).__name__}: {exc}"
                print(f"cannot time it: {why}")
            return []
        after = recheck(spec, plan, measured["recheck"], Path(d))
    rules = spec.perf_rules(measured)
    if verbose:
        print(measured["setup"]["description"])
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
    if not after.passed:
        rules = rules + [RuleResult("timed calls computed the right result", None, 1.0, ">=", "",
                                    False, after.error or "")]
    return rules
