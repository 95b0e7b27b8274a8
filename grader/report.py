"""The grading report: plain text for people, ``--json`` for machines (the same data).

Score: ``correctness_points`` in proportion to the cases passed (all cases, hidden included;
every case weighs the same, whichever function it calls, so in a lab with several functions a
function's share is its share of the cases, and a broken function loses only its own), plus
``performance_points`` split evenly over the scored performance rules passed (rules run only
once every case of the functions they time passes, ``LabSpec.perf_functions``; a failed
re-check after timing or a failed gate — the plausibility rule, which earns nothing itself —
voids them). ``passed`` — and exit status 0 —
only when every check passes (with ``--no-perf``: every case).
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import dataclass, field

from grader.spec import RuleResult

# Bidirectional-text controls: they reorder what a terminal shows (a "Trojan Source" line).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def plain(text, *, newlines: bool = True) -> str:
    """``text`` made safe to print: control characters (ANSI escapes that clear the screen or
    hide the lines after them, carriage returns), bidirectional controls and lone surrogates
    (which no terminal or file encoding accepts) become visible escapes such as ``\\x1b``.
    Newlines (if ``newlines``) and tabs stay. Everything a submission can put into the report
    (its output, its exception messages, its file name) goes through this."""
    if not isinstance(text, str):
        text = str(text)
    out = []
    for ch in text:
        o = ord(ch)
        if (ch == "\n" and newlines) or ch == "\t":
            out.append(ch)
        elif o < 0x20 or 0x7F <= o < 0xA0:
            out.append(f"\\x{o:02x}")
        elif ch in _BIDI or 0xD800 <= o < 0xE000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass
class CaseResult:
    case: str
    params: dict
    hidden: bool = False
    passed: bool = False
    error: str | None = None
    seconds: float | None = None
    comparison: dict | None = None
    tile_map: str = ""
    function: str = ""  # the required function the case calls
    not_run: bool = False  # True: never called (rule violation, broken function, crashes)
    raised: bool = False  # True: the call raised, crashed or hung (no outputs came back)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Report:
    lab: str
    title: str
    submission: str
    tier: str
    correctness_points: int
    performance_points: int
    environment: dict = field(default_factory=dict)
    static: list[str] = field(default_factory=list)
    signatures: list[dict] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)  # the lab's required functions
    #: required function -> why its cases were not run (missing, wrong signature, compile or
    #: warm-up failure), in plain words that name it
    broken: dict[str, str] = field(default_factory=dict)
    #: required function -> what is wrong with it, as a :data:`FATAL_TITLES` key
    broken_kind: dict[str, str] = field(default_factory=dict)
    #: required function -> further lines of its block (what the submission defines instead …)
    broken_detail: dict[str, list[str]] = field(default_factory=dict)
    #: why nothing (or no case) was graded, in one line (the csv's ``fatal`` column) ...
    fatal: str | None = None
    #: ... what kind of stop it is (a :data:`FATAL_TITLES` key: "syntax-error",
    #: "missing-function", "rule-violation", "import-error" …) ...
    fatal_kind: str | None = None
    #: ... and the further lines of its block (the quoted line and a caret, the findings …)
    fatal_detail: list[str] = field(default_factory=list)
    #: the functions the submission defines, name -> parameters (a missing function's report
    #: lists them)
    defined: dict[str, list[str]] = field(default_factory=dict)
    cases: list[CaseResult] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    recheck: CaseResult | None = None
    performance_setup: dict = field(default_factory=dict)
    performance_note: str = ""
    codegen: str | None = None
    #: the worker's isolation as it ran: the OS sandbox and whether it forbade new processes
    #: (grader.sandbox, kernellab.machine.process_filter), e.g. "bubblewrap, no new processes"
    sandbox: str | None = None
    compile_seconds: float | None = None
    output_tail: str = ""
    rules_checked: bool = False  # False: the source could not even be read
    score: float = 0.0
    correctness_score: float = 0.0
    performance_score: float = 0.0
    passed: bool = False
    performance_requested: bool = True
    when: str = ""
    #: each case's line also carries an online judge's verdict (:func:`judge_verdict`)
    judge: bool = False

    @classmethod
    def start(cls, spec, submission: str) -> "Report":
        import numba
        import numpy

        env = {"python": platform.python_version(), "numpy": numpy.__version__,
               "numba": numba.__version__, "machine": platform.machine()}
        return cls(lab=spec.lab_id, title=spec.title, submission=submission, tier=spec.tier,
                   correctness_points=spec.correctness_points,
                   performance_points=spec.performance_points, environment=env,
                   functions=list(spec.functions),
                   when=_dt.datetime.now().isoformat(timespec="seconds"),
                   judge=spec.judge_words)

    def _make_plain(self) -> None:
        """Every text a submission can influence, made safe to print (see :func:`plain`)."""
        self.submission = plain(self.submission, newlines=False)
        self.fatal = None if self.fatal is None else plain(self.fatal)
        self.fatal_detail = [plain(s) for s in self.fatal_detail]
        self.broken_detail = {k: [plain(s) for s in v] for k, v in self.broken_detail.items()}
        self.defined = {plain(k, newlines=False): [plain(p, newlines=False) for p in v]
                        for k, v in self.defined.items()}
        self.static = [plain(s) for s in self.static]
        self.output_tail = plain(self.output_tail)
        self.performance_note = plain(self.performance_note)
        for s in self.signatures:
            s["message"] = plain(s.get("message", ""))
        self.broken = {k: plain(v) for k, v in self.broken.items()}
        for c in self.cases + ([self.recheck] if self.recheck else []):
            if c.error is not None:
                c.error = plain(c.error)
        for r in self.rules:  # details quote source lines (the costliest site, a strided load)
            r.name = plain(r.name, newlines=False)
            r.detail = plain(r.detail or "")

    def finish(self) -> "Report":
        self._make_plain()
        n = len(self.cases)
        ok_cases = sum(c.passed for c in self.cases)
        corr = self.correctness_points * ok_cases / n if n else 0.0
        perf = 0.0
        recheck_ok = self.recheck is None or self.recheck.passed
        scored = [r for r in self.rules if r.scored]
        gates_ok = all(r.passed for r in self.rules if not r.scored)
        if scored and recheck_ok and gates_ok:  # a failed gate (implausible speed) voids them
            perf = self.performance_points * sum(r.passed for r in scored) / len(scored)
        self.correctness_score = round(corr, 1)
        self.performance_score = round(perf, 1)
        self.score = round(corr + perf, 1)
        correct = self.fatal is None and n > 0 and ok_cases == n
        if not self.performance_requested:  # --no-perf: a verdict on correctness alone
            self.passed = correct
        else:
            self.passed = (correct and bool(self.rules) and all(r.passed for r in self.rules)
                           and recheck_ok)
        return self

    @property
    def max_score(self) -> int:
        return self.correctness_points + (self.performance_points if self.performance_requested
                                          else 0)

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("cases", "rules", "recheck")}
        d["cases"] = [c.to_dict() for c in self.cases]
        if self.judge:
            for cd, c in zip(d["cases"], self.cases):
                cd["judge"] = judge_verdict(c)
        d["rules"] = [r.to_dict() for r in self.rules]
        d["recheck"] = self.recheck.to_dict() if self.recheck else None
        d["cases_passed"] = sum(c.passed for c in self.cases)
        d["cases_total"] = len(self.cases)
        d["max_score"] = self.max_score
        return d

    def to_text(self) -> str:
        L = []
        L.append(f"Kernel Lab grader — lab {self.lab}: {self.title}")
        L.append(f"submission: {self.submission}")
        env = self.environment
        codegen = f" · codegen: {self.codegen}" if self.codegen else ""
        compile_load = (f" · compile+load {self.compile_seconds:.1f} s"
                        if self.compile_seconds else "")
        worker = f" · worker: {self.sandbox}" if self.sandbox else ""
        L.append(f"tier: {self.tier} · python {env.get('python')} · numpy {env.get('numpy')} · "
                 f"numba {env.get('numba')}" + codegen + compile_load + worker)
        L.append("")
        if self.fatal:
            L.extend(self._fatal_lines())
            return "\n".join(L)
        if self.static:
            L.append("1. rules: FAIL")
            L.extend(f"   - {s}" for s in self.static)
        elif not self.rules_checked:
            L.append("1. rules: not checked (no code could be taken from the submission)")
        else:
            L.append("1. rules: ok (allowed imports only, no library GEMM, no reference code)")
        if self.signatures:
            bad = [s for s in self.signatures if not s["ok"]]
            L.append("2. signatures: " + ("FAIL" if bad else "ok"))
            L.extend(f"   - {s['message']}" for s in self.signatures)
        if self.cases:
            npass = sum(c.passed for c in self.cases)
            L.append(f"3. correctness: {npass}/{len(self.cases)} cases pass")
            L.extend(self._case_lines())
        if self.rules or self.performance_note:
            setup = self.performance_setup
            head = "4. performance"
            if setup:
                head += f" ({setup.get('description', '')})"
            L.append(head)
            if self.performance_note:
                L.append(f"   {self.performance_note}")
            for r in self.rules:
                meas = "-" if r.measured is None else f"{r.measured:.3g}{r.unit}"
                if r.spread:
                    meas += f" ({r.spread[0]:.3g}–{r.spread[1]:.3g})"
                L.append(f"   {r.name:<38} {meas:>24}  {r.op} {r.threshold:g}{r.unit}  "
                         f"{'pass' if r.passed else 'FAIL'}" + ("" if r.scored else "  (gate)"))
                if r.detail:
                    L.append(f"      {r.detail}")
            if setup.get("threads_note"):
                L.append(f"   threads: {setup['threads_note']}")
            if self.recheck is not None:
                L.append("   re-check of the timed calls (each one's output, the last one in "
                         "full): " + ("ok" if self.recheck.passed
                                      else f"FAIL — {self.recheck.error}"))
        L.extend(self._printed_lines())
        L.append("")
        parts = f"correctness {self.correctness_score:g}/{self.correctness_points}"
        if self.performance_requested:
            parts += f" + performance {self.performance_score:g}/{self.performance_points}"
        L.append(f"score: {self.score:g}/{self.max_score} ({parts})  {self._verdict()}")
        return "\n".join(L)

    def _verdict(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if not self.performance_requested:
            verdict += " (correctness only: performance not measured)"
        return verdict

    def _printed_lines(self) -> list[str]:
        if not self.output_tail.strip():
            return []
        return (["", "the submission printed (last lines):"]
                + ["   | " + ln for ln in self.output_tail.strip().splitlines()[-10:]])

    def _fatal_lines(self) -> list[str]:
        """A stop before any case ran: one named block, what the submission printed, the
        score. In a lab with several functions, each broken one is a block of its own."""
        # a rule violation's block lists every finding: its one-line summary would repeat one
        # (a syntax error's says "syntax error at line 2: …" for the csv: the title says it)
        message = None if self.fatal_kind == "rule-violation" else self.fatal
        if self.fatal_kind == "syntax-error" and message:
            message = message.removeprefix("syntax error ")
        L = fatal_block(self.fatal_kind, message, self.fatal_detail)
        several = [f for f in self.functions if f in self.broken] if len(self.functions) > 1 \
            else []
        if len(several) > 1 and self.fatal_kind in FUNCTION_KINDS:
            L = []
            for fn in several:
                L.extend(fatal_block(self.broken_kind.get(fn, self.fatal_kind),
                                     self.broken[fn], self.broken_detail.get(fn, []), who=fn,
                                     cases=sum(c.function == fn for c in self.cases)))
        L.extend(self._printed_lines())
        L.append("")
        n = len(self.cases)
        what = f"{n} case{'s' * (n != 1)} not run" if n else "nothing graded"
        L.append(f"score: {self.score:g}/{self.max_score} ({what})  {self._verdict()}")
        return L


    def _case_lines(self) -> list[str]:
        """The case table. Cases never run are one line per reason, or the named block of a
        broken function ("softmax: MISSING FUNCTION — its 10 cases not run"); a function none
        of whose cases produced an output to compare (it raised each time) gets one line per
        distinct error; the other cases get a row each, except that failures without figures
        repeating an error shown above are one line together. Under the rows: what the ulp and
        budget columns mean (:func:`ulp_note`)."""
        L = []
        several = len(self.functions) > 1
        ran = [c for c in self.cases if not c.not_run]
        by_fn: dict[str, list[CaseResult]] = {}
        for c in ran:
            by_fn.setdefault(c.function, []).append(c)
        alike = {fn for fn, cs in by_fn.items()
                 if len(cs) > 1 and all(not c.passed and not c.comparison and c.error
                                        for c in cs)}
        rows = [c for c in ran if c.function not in alike]
        if rows:
            names = [c.case + (" (hidden)" if c.hidden else "") for c in rows]
            w = max(28, *(len(n) for n in names))      # the column fits the longest name
            L.append(f"   {'case':<{w}} {'max abs err':>11} {'max ulp':>9} {'budget':>7}  result")
            first_with: dict[str, str] = {}  # error text -> the first case that had it
            again: dict[str, list[str]] = {}  # ... -> the later cases, without figures, too
            for c, name in zip(rows, names):
                if not c.passed and not c.comparison and c.error in first_with:
                    again.setdefault(c.error, []).append(name)  # one line for them all, below
                    continue
                judged = f"  {judge_verdict(c)}" if self.judge else ""
                if c.comparison:
                    cm = c.comparison
                    verdict = "pass" if c.passed else "FAIL"
                    L.append(f"   {name:<{w}} {fmt_number(cm['max_abs']):>11} "
                             f"{fmt_number(cm['max_ulp']):>9} "
                             f"{fmt_percent(cm['budget_used']):>7}  {verdict}{judged}")
                else:
                    L.append(f"   {name:<{w}} {'-':>11} {'-':>9} {'-':>7}  FAIL{judged}")
                if not c.passed and c.error:
                    if c.error not in first_with:
                        first_with[c.error] = c.case
                        L.append(f"      ↳ {c.error}")
                        if c.tile_map:
                            L.append("      output tiles (# wrong):")
                            L.extend("        " + row for row in c.tile_map.splitlines()[:16])
                    else:
                        L.append(f"      ↳ same error as case {first_with[c.error]}")
            for error, later in again.items():
                shown = ", ".join(later[:8]) + (f" … ({len(later)} in all)" if len(later) > 8
                                                else "")
                n = len(later)
                L.append(f"   {n} more case{'s' * (n != 1)} FAIL with the same error as "
                         f"{first_with[error]}: {shown}")
        for fn in (f for f in by_fn if f in alike):
            cs = by_fn[fn]
            errors: dict[str, list[str]] = {}
            for c in cs:
                errors.setdefault(c.error, []).append(c.case)
            if len(errors) == 1:
                L.append(f"   {fn}: all {len(cs)} of its cases FAIL: {cs[0].error}")
                continue
            L.append(f"   {fn}: all {len(cs)} of its cases FAIL, with {len(errors)} errors:")
            for error, names in errors.items():
                more = f" and {len(names) - 1} more" if len(names) > 1 else ""
                L.append(f"      ↳ {names[0]}{more}: {error}")
        if rows:
            L.extend("   " + ln for ln in ulp_note(
                [c.comparison.get("policy", "") for c in rows if c.comparison]))
        groups: dict[str, list[CaseResult]] = {}
        for c in self.cases:
            if c.not_run:
                groups.setdefault(c.error or "not run", []).append(c)
        for error, cs in groups.items():
            why = error[len("not run: "):] if error.startswith("not run: ") else error
            fns = {c.function for c in cs}
            fn = cs[0].function
            n = "all " * (len(cs) == len(self.cases)) + f"{len(cs)} case" + "s" * (len(cs) != 1)
            if len(fns) == 1 and fn in self.broken and fn in self.broken_kind:
                # a broken function: the same named block as a stop, for its cases only
                L.extend("   " + ln for ln in fatal_block(
                    self.broken_kind[fn], self.broken[fn], self.broken_detail.get(fn, []),
                    who=fn, cases=len(cs)))
                continue
            who = f"{fn}: " if several and len(fns) == 1 else ""
            L.append(f"   {who}{n} not run: {why}")
        return L


#: the block title of each kind of stop (``Report.fatal_kind``; the csv and ``--json`` carry
#: the key)
FATAL_TITLES = {
    "syntax-error": "SYNTAX ERROR",
    "rule-violation": "RULE VIOLATION",
    "missing-function": "MISSING FUNCTION",
    "wrong-signature": "WRONG SIGNATURE",
    "import-error": "ERROR WHILE LOADING (the cells' top-level code raised)",
    "compile-error": "COMPILE ERROR",
    "crash": "CRASH OR HANG",
    "unreadable": "SUBMISSION NOT READABLE",
    "cannot-grade": "CANNOT GRADE ON THIS MACHINE",
    "grader-error": "GRADER ERROR (not the submission's fault)",
}
#: the kinds that concern one required function (a lab with several names each)
FUNCTION_KINDS = frozenset({"missing-function", "wrong-signature", "compile-error", "crash"})
#: what did not happen, by kind: nothing of the code ran, or it loaded but no case ran
_NOT_RUN = {"syntax-error": "nothing was run", "rule-violation": "nothing was run",
            "unreadable": "nothing was checked", "cannot-grade": "nothing was run",
            "grader-error": "nothing was graded"}


def fatal_block(kind: str | None, message: str | None, detail=(), *, who: str = "",
                cases: int | None = None) -> list[str]:
    """The lines of one named stop: ``SYNTAX ERROR — nothing was run``, then the message and its
    detail lines, indented. ``who``: the required function it concerns (a lab with several);
    ``cases``: how many of its cases were not run. Shared by the report and the in-notebook
    checker (:mod:`grader.local`), so both say it the same way."""
    title = FATAL_TITLES.get(kind or "", "STOPPED")
    if cases is not None:
        tail = f"its {cases} case{'s' * (cases != 1)} not run"
    else:
        tail = _NOT_RUN.get(kind or "", "no case was run")
    head = f"{who}: " if who else ""
    L = [f"{head}{title} — {tail}"]
    if message:
        L.extend("   " + ln for ln in str(message).splitlines())
    L.extend("   " + ln for ln in detail)
    return L


def missing_function_detail(name: str, defined: dict, required=(), notebook: bool = False,
                            who: str = "the submission", params=None,
                            launcher: bool = False) -> list[str]:
    """What a report adds under "'gemm' is not defined": the functions the submission does
    define (``defined``: name -> parameters) and, if one is spelt close to ``name`` (a typo:
    :func:`difflib.get_close_matches` at 0.75, ignoring case), that it may be the one; else, if
    one has ``name`` in its name (``softmax_kernel``), that the lab needs ``name`` itself
    (``launcher``: a GPU lab, where it is a plain function that launches the kernel).
    ``required``: the lab's functions, never suggested; ``params``: the lab's parameters of
    ``name``; ``notebook``: remind that only the cells tagged solution are graded."""
    import difflib

    L = []
    if defined:
        shown = [f"{n}({', '.join(p)})" for n, p in list(defined.items())[:12]]
        more = f" and {len(defined) - 12} more" if len(defined) > 12 else ""
        L.append(f"{who} defines: " + ", ".join(shown) + more)
        pool = {n.lower(): n for n in defined if n not in required}
        close = difflib.get_close_matches(name.lower(), list(pool), n=1, cutoff=0.75)
        near = [n for n in pool.values() if name.lower() in n.lower()]
        if close:
            L.append(f"did you mean {pool[close[0]]}? the lab calls it {name}: rename it")
        elif near:
            call = f"{name}({', '.join(params)})" if params is not None else name
            L.append(f"{near[0]} is not {name}: the lab calls {call} itself"
                     + (", a plain Python function that launches your kernel" if launcher
                        else ""))
    else:
        L.append(f"{who} defines no function")
    if notebook:
        L.append("only the cells tagged 'solution' are graded: is the function in another cell?")
    return L


#: the verdicts of an online judge, as contest and operator judges word them
JUDGE_WORDS = ("Accepted", "Wrong Answer", "Runtime Error", "Time Limit Exceeded")


def judge_verdict(c: CaseResult) -> str:
    """A case's verdict in an online judge's words (:data:`JUDGE_WORDS`): passed, Accepted;
    stopped at its time limit, Time Limit Exceeded; the call raised or crashed (a simulator
    error among them), Runtime Error; it returned and its outputs are wrong, incomplete or
    made where the lab does not allow, Wrong Answer."""
    if c.passed:
        return "Accepted"
    if c.error and "did not finish within" in c.error:
        return "Time Limit Exceeded"
    return "Runtime Error" if c.raised else "Wrong Answer"


def ulp_note(policies) -> list[str]:
    """The lines that explain the ``max ulp`` and ``budget`` columns under a case table, for the
    tolerance rules (``Comparison.policy`` texts, :mod:`kernellab.numerics`) of its rows; empty
    when there are none."""
    kinds = []
    for p in policies:
        k = next((k for k in _BUDGETS if str(p).startswith(k)), None)
        if k and k not in kinds:
            kinds.append(k)
    if not kinds:
        return []
    if kinds == ["exact"]:
        return ["max ulp: the error in units in the last place of the output dtype; this lab "
                "compares bits (integers by value): anything but 0 fails"]
    return ["max ulp: the error in units in the last place (ulp) of the output dtype at the "
            "reference value; budget: the error as a share of the error the lab allows "
            "(<= 100% passes: the verdict)",
            "allowed: " + "; ".join(_BUDGETS[k] for k in kinds)]


#: how each tolerance rule of :mod:`kernellab.numerics` sets the allowed error, in words
_BUDGETS = {
    "K-aware": ("a K-term sum may be off by about 6·sqrt(K)·u·Σ|a·b| (u: the unit roundoff of "
                "the accumulation), so an output that nearly cancels is tiny and so is each of "
                "its ulps: thousands of ulps can pass"),
    "row softmax": ("relative to each output, growing with ln N and sqrt(N) (float32 "
                    "statistics) plus one ulp: small outputs have tiny ulps"),
    "measured baseline": ("a multiple of the error a plain implementation in the same "
                          "precision makes on the same inputs, plus a floor"),
    "explicit": "the rounding of the operation's own float steps, element by element",
    "elementwise": "atol + rtol·|ref| (the torch.testing table for the dtype)",
    "exact": "bit for bit (any ulp other than 0 fails)",
}


def fmt_number(x) -> str:
    """A figure for a report: 3 significant digits; non-finite values arrive as strings."""
    if isinstance(x, str):
        return x
    return "-" if x is None else f"{x:.3g}"


def fmt_percent(x) -> str:
    """A fraction of an error budget as a percentage (">10000%" past 100x)."""
    if isinstance(x, str):
        return x
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if x < 100 else f">{100 * 100:.0f}%"
