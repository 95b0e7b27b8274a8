"""Class reports: the gradings of many submissions of one lab as a CSV (one row per submission)
and an HTML page (each rule's distribution over the class, the commonest failure reasons with
the submissions that hit them, and a leaderboard by the lab's speed metric).

Verdicts (:func:`verdict`): ``PASS``, ``FAIL``, or ``FAIL (hidden cases only)`` for a
submission that passed every visible case and failed a hidden one (the instructor's cases: a
kernel tuned to the visible ones). The first failure (:func:`first_failure`) is the report's own
words: why nothing was graded, a broken function, the first failing case (visible ones first),
the first failing rule, or the re-check of the timed calls.

The leaderboard ranks by the lab's first scored rule (its speed metric, higher first for a
``>=`` rule, lower first for ``<=``), submissions with the same figure sharing a rank
(competition ranking: 1, 2, 2, 4); it states the rule, its threshold, the baseline the figure is
measured against (the rule's own words) and the tier. Submissions whose performance phase did
not run have no figure and are listed after the ranked ones.
"""

from __future__ import annotations

import csv
import html
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

__all__ = ["verdict", "first_failure", "summary_line", "rows", "write_csv", "write_html",
           "leaderboard"]

FIXED = ["submission", "lab", "score", "max_score", "passed", "cases_passed", "cases_total",
         "fatal"]
"""The CSV's first columns (those of the plain scores file before class reports)."""


def verdict(rep) -> str:
    """``PASS``, ``FAIL``, or ``FAIL (hidden cases only)`` (module docstring)."""
    if rep.passed:
        return "PASS"
    vis = [c for c in rep.cases if not c.hidden]
    hid = [c for c in rep.cases if c.hidden]
    if (hid and not rep.fatal and not rep.broken and all(c.passed for c in vis)
            and any(not c.passed for c in hid)):
        return "FAIL (hidden cases only)"
    return "FAIL"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def first_failure(rep) -> str:
    """The first reason ``rep`` failed, in one line of the report's words ("" if it passed)."""
    if rep.passed:
        return ""
    if rep.fatal:
        return _first_line(rep.fatal)
    for fn, why in rep.broken.items():
        return f"{fn}: {_first_line(why)}"
    for hidden in (False, True):  # visible cases first (a hidden case's name says so)
        for c in rep.cases:
            if c.hidden == hidden and not c.passed:
                return f"case {c.case}: {_first_line(c.error)}"
    for r in rep.rules:
        if not r.passed:
            got = "not measured" if r.measured is None else f"{r.measured:.4g}{r.unit}"
            return f"rule {r.name}: {got}, needs {r.op} {r.threshold}{r.unit}"
    if rep.recheck is not None and not rep.recheck.passed:
        return f"re-check of the timed calls: {_first_line(rep.recheck.error)}"
    if rep.performance_requested and not rep.rules:
        return "performance not measured"
    return "not passed"


def summary_line(rep) -> str:
    """One line: the submission, its score, its verdict and its first failure."""
    why = first_failure(rep)
    return (f"{rep.submission}: {rep.score:g}/{rep.max_score:g} {verdict(rep)}"
            + (f" — {why}" if why else ""))


def _groups(reports) -> list[str]:
    """The case groups a class's reports have: the required functions when a lab has several."""
    fns = list(dict.fromkeys(f for r in reports for f in r.functions))
    return fns if len(fns) > 1 else []


def _rule_names(reports) -> list[str]:
    """The rules any report has, in first-seen order."""
    return list(dict.fromkeys(x.name for r in reports for x in r.rules))


def rows(reports) -> tuple[list[str], list[dict]]:
    """The CSV's header and one dict per submission: :data:`FIXED`, then the verdict, visible
    and hidden cases passed, a pair of columns per function (labs with several), three per rule
    (measured value, threshold, pass), the first failure and the fatal kind."""
    groups, rules = _groups(reports), _rule_names(reports)
    header = list(FIXED) + ["verdict", "visible_passed", "visible_total", "hidden_passed",
                            "hidden_total"]
    for g in groups:
        header += [f"{g}: cases_passed", f"{g}: cases_total"]
    for n in rules:
        header += [f"{n}: measured", f"{n}: threshold", f"{n}: passed"]
    header += ["first_failure", "fatal_kind"]
    out = []
    for r in reports:
        row = {"submission": r.submission, "lab": r.lab, "score": r.score,
               "max_score": r.max_score, "passed": r.passed,
               "cases_passed": sum(c.passed for c in r.cases), "cases_total": len(r.cases),
               "fatal": r.fatal or "", "verdict": verdict(r)}
        for hidden, key in ((False, "visible"), (True, "hidden")):
            cs = [c for c in r.cases if c.hidden == hidden]
            row[f"{key}_passed"] = sum(c.passed for c in cs)
            row[f"{key}_total"] = len(cs)
        for g in groups:
            cs = [c for c in r.cases if c.function == g]
            row[f"{g}: cases_passed"] = sum(c.passed for c in cs)
            row[f"{g}: cases_total"] = len(cs)
        by_name = {x.name: x for x in r.rules}
        for n in rules:
            x = by_name.get(n)
            row[f"{n}: measured"] = "" if x is None or x.measured is None else x.measured
            row[f"{n}: threshold"] = "" if x is None else x.threshold
            row[f"{n}: passed"] = "" if x is None else x.passed
        row["first_failure"] = first_failure(r)
        row["fatal_kind"] = r.fatal_kind or ""
        out.append(row)
    return header, out


def write_csv(reports, path) -> Path:
    """Write :func:`rows` to ``path``; returns it."""
    header, data = rows(reports)
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(data)
    return path


def _speed_rule(reports):
    """The lab's speed metric: the first scored rule any report has (its RuleResult)."""
    for r in reports:
        for x in r.rules:
            if x.scored:
                return x
    return None


def leaderboard(reports) -> tuple[object, list[tuple[int | None, object, float | None]]]:
    """``(rule, [(rank, report, figure), ...])``: the ranked submissions first (ties share a
    rank), then those with no figure (rank None). ``rule`` is None when no report has a scored
    rule."""
    rule = _speed_rule(reports)
    if rule is None:
        return None, [(None, r, None) for r in reports]
    figs = []
    for r in reports:
        x = next((y for y in r.rules if y.name == rule.name), None)
        figs.append((r, None if x is None else x.measured))
    ranked = sorted(((r, v) for r, v in figs if v is not None),
                    key=lambda rv: -rv[1] if rule.op.startswith(">") else rv[1])
    out, rank, last = [], 0, object()
    for i, (r, v) in enumerate(ranked):
        if v != last:
            rank, last = i + 1, v
        out.append((rank, r, v))
    out += [(None, r, None) for r, v in figs if v is None]
    return rule, out


def _reason_key(text: str) -> str:
    """A failure reason with its figures and quoted code folded, so that the same mistake on
    different cases or sizes counts once."""
    text = re.sub(r"`[^`]*`", "`…`", text)
    text = re.sub(r"\bcase [^:]*:", "case …:", text)
    return re.sub(r"[-+]?\d[\d.,eE+-]*", "#", text)


def _histogram_svg(values, threshold, width=240, height=60, bins=12) -> str:
    lo, hi = min(values + [threshold]), max(values + [threshold])
    span = (hi - lo) or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / span * bins))] += 1
    top = max(counts) or 1
    bw = width / bins
    bars = "".join(
        f'<rect x="{i * bw:.1f}" y="{height - 12 - (c / top) * (height - 16):.1f}" '
        f'width="{bw - 1:.1f}" height="{(c / top) * (height - 16):.1f}" fill="#4a7bb7"/>'
        for i, c in enumerate(counts) if c)
    tx = (threshold - lo) / span * width
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="distribution">'
            f'{bars}<line x1="{tx:.1f}" x2="{tx:.1f}" y1="0" y2="{height - 12}" '
            f'stroke="#c0392b" stroke-width="2"/>'
            f'<text x="0" y="{height - 1}" font-size="10">{lo:.3g}</text>'
            f'<text x="{width}" y="{height - 1}" font-size="10" text-anchor="end">{hi:.3g}'
            f'</text></svg>')


def write_html(reports, path, title: str = "", tier: str = "") -> Path:
    """Write the class report page to ``path`` (module docstring); returns it."""
    e = html.escape
    lab = reports[0].lab if reports else ""
    title = title or (reports[0].title if reports else "")
    tier = tier or (reports[0].tier if reports else "")
    n = len(reports)
    n_pass = sum(r.passed for r in reports)
    hidden_only = [r for r in reports if verdict(r) == "FAIL (hidden cases only)"]
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>Class report: {e(lab)}</title><style>"
             "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
             "padding:3px 8px;text-align:left;vertical-align:top}th{background:#eee}"
             ".PASS{color:#1e7b34}.FAIL{color:#b03a2e}</style></head><body>",
             f"<h1>Class report: <code>{e(lab)}</code></h1>",
             f"<p>{e(title)} · tier <code>{e(tier)}</code> · {n} submission(s): {n_pass} "
             f"PASS, {n - n_pass} FAIL ({len(hidden_only)} of them on hidden cases only).</p>"]
    # ---- submissions
    parts.append("<h2>Submissions</h2><table><tr><th>submission</th><th>score</th>"
                 "<th>verdict</th><th>visible cases</th><th>hidden cases</th>"
                 "<th>first failure</th></tr>")
    _, data = rows(reports)
    for r, d in zip(reports, data):
        v = verdict(r)
        parts.append(f"<tr><td>{e(r.submission)}</td><td>{r.score:g}/{d['max_score']:g}</td>"
                     f"<td class='{v.split()[0]}'>{e(v)}</td>"
                     f"<td>{d['visible_passed']}/{d['visible_total']}</td>"
                     f"<td>{d['hidden_passed']}/{d['hidden_total']}</td>"
                     f"<td>{e(first_failure(r))}</td></tr>")
    parts.append("</table>")
    # ---- rules
    parts.append("<h2>Each rule across the class</h2>")
    rule_names = _rule_names(reports)
    if not rule_names:
        parts.append("<p>No performance rule was measured (correctness only, or no submission "
                     "passed its cases).</p>")
    for name in rule_names:
        xs = [x for r in reports for x in r.rules if x.name == name]
        vals = [x.measured for x in xs if x.measured is not None]
        x0 = xs[0]
        parts.append(f"<h3>{e(name)}</h3><p>threshold {e(x0.op)} {x0.threshold:g}{e(x0.unit)}"
                     f" · {sum(x.passed for x in xs)} of {len(xs)} measured pass</p>")
        if vals:
            parts.append(f"<p>min {min(vals):.4g} · median {statistics.median(vals):.4g} · max "
                         f"{max(vals):.4g} (red line: the threshold)</p>"
                         + _histogram_svg(vals, x0.threshold))
    # ---- failure reasons
    parts.append("<h2>Commonest failure reasons</h2>")
    groups: dict[str, list] = defaultdict(list)
    for r in reports:
        why = first_failure(r)
        if why:
            groups[_reason_key(why)].append((r, why))
    counts = Counter({k: len(v) for k, v in groups.items()})
    if not counts:
        parts.append("<p>None: every submission passed.</p>")
    else:
        parts.append("<table><tr><th>submissions</th><th>reason (an example)</th>"
                     "<th>who</th></tr>")
        for key, c in counts.most_common():
            example = groups[key][0][1]
            who = ", ".join(e(r.submission) for r, _ in groups[key])
            parts.append(f"<tr><td>{c}</td><td>{e(example)}</td><td>{who}</td></tr>")
        parts.append("</table>")
    # ---- leaderboard
    rule, board = leaderboard(reports)
    parts.append("<h2>Leaderboard</h2>")
    if rule is None:
        parts.append("<p>No speed metric was measured.</p>")
    else:
        better = "higher" if rule.op.startswith(">") else "lower"
        parts.append(f"<p>By <b>{e(rule.name)}</b> ({better} is better; the threshold is "
                     f"{e(rule.op)} {rule.threshold:g}{e(rule.unit)}; what it is measured "
                     f"against: {e(rule.detail.split(';')[0]) or 'the rule itself'}); tier "
                     f"<code>{e(tier)}</code>. Equal figures share a rank.</p>")
        parts.append("<table><tr><th>rank</th><th>submission</th><th>figure</th>"
                     "<th>verdict</th></tr>")
        for rank, r, v in board:
            parts.append(f"<tr><td>{'' if rank is None else rank}</td><td>{e(r.submission)}"
                         f"</td><td>{'—' if v is None else f'{v:.4g}{e(rule.unit)}'}</td>"
                         f"<td>{e(verdict(r))}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    path = Path(path)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
