"""The grader under attack: submissions written the way a cheating or careless student would, and
the grader's own weak spots (odd files, hostile output, a tampered worker). Each test is a hole
that was found and closed; each guards the kind of fault, not only the example.

Kept fast (the file runs in well under a minute): gradings use short time limits and no
performance phase; the one timing attack runs the worker's measurement on a small plan.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import threading
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from grader import runner
from grader.labs import get_spec_class
from grader.report import CaseResult, Report, plain
from grader.runner import _Session, _store_submission, grade
from grader.sandbox import Worker, WorkerDied
from grader.spec import HiddenCases
from grader.static_check import ALLOWED_SUBMODULES, check_source
from grader.worker import _describe_exception, _describe_safely
from grader import notebook
from known import Folder  # tests/known.py: where each known submission is

ROOT = Path(__file__).resolve().parents[2]
SUBS = Folder("gemm-cpu", "wrong")
SOLUTION = ROOT / "solutions" / "01_gemm_cpu.ipynb"
ALLOWED = frozenset({"numpy", "numba", "math"})


def quick(path, **kw) -> Report:
    return grade("gemm-cpu", path, run_performance=False, case_timeout_s=5,
                 first_call_timeout_s=10, **kw)


def findings(src: str) -> list[str]:
    return [str(f) for f in check_source(src, allowed_imports=ALLOWED,
                                         banned_names=frozenset({"gemm_naive"}))]


# ------------------------------------------------------------ static rules: ways around them
@pytest.mark.parametrize("src,needle", [
    # a library GEMM without the name of one: np.matrix's '*' is BLAS gemm
    ("import numpy as np\nC = np.asmatrix(A) * B", "'asmatrix' computes the product"),
    ("import numpy as np\nC = np.matrix(A) * np.matrix(B)", "'matrix' computes the product"),
    ("from numpy import bmat", "'bmat' computes the product"),
    ("import numpy as np\nm = np.r_.makemat", "'makemat' computes the product"),
    # BLAS dot products, one per element (np.correlate(a, b) is a . b)
    ("import numpy as np\nc = np.correlate(a, b)", "'correlate' computes the product"),
    ("import numpy as np\nc = np.convolve(a, b[::-1])", "'convolve' computes the product"),
    ("import math\nc = math.sumprod(a, b)", "'sumprod' computes the product"),
    # attribute lookups spelled as match patterns (no Attribute node in the tree)
    ("import numpy as np\nmatch np:\n    case object(matmul=f): pass", "'matmul' computes"),
    ("match x:\n    case object(__dict__=d): pass", "'__dict__'"),
    ("match x:\n    case object(_core=d): pass", "'_core'"),
    # the interpreter's frames: the grader's globals (its baseline, its timer) are two hops away
    ("g = (x for x in [])\nf = g.gi_frame.f_back.f_globals", "frames or code"),
    ("try:\n    1/0\nexcept Exception as e:\n    t = e.with_traceback(None).tb_frame", "frames"),
    ("def f(): pass\nc = f.co_consts", "frames or code"),
    # modules outside the lab's, reached through an allowed one (computed from the libraries)
    ("import numba\nnumba.sys.modules", "'sys' reaches a module outside"),
    ("import numba\nnumba.config.os.system('true')", "'config' reaches a module outside"),
    ("import numba\nx = numba.cloudpickle.loads(b'')", "'cloudpickle' reaches a module"),
    ("import numpy as np\nnp.f2py.subprocess", "'f2py' reaches a module outside"),
    ("import numpy as np\nnp.lib.stride_tricks.as_strided(a, strides=(0,))", "'lib' reaches"),
    ("from numba import np as nnp", "'np' reaches a module outside"),
    ("import numba.misc", "'misc' reaches a module outside"),
    ("import numpy.testing", "'testing' reaches a module outside"),
    # raw memory and other programs
    ("import numpy as np\nct = np.ctypeslib.ctypes", "'ctypeslib' starts other programs"),
    ("p = A.ctypes.data", "'ctypes' starts other programs or reaches raw memory"),
    ("import numba\nnumba.gdb()", "'gdb' starts other programs"),
    ("import numpy as np\nnp.test()", "'test' starts other programs"),
    ("from numba import types\nf = types.ExternalFunction('system', sig)", "'ExternalFunction'"),
    ("from numba import types\nt = types.voidptr", "'voidptr'"),
    ("import numba\nf = numba.njit(g)\nc = f.targetctx.codegen()", "'targetctx'"),
    # files: np.load(allow_pickle=True) runs whatever a file holds
    ("import numpy as np\nnp.load('x.npy', allow_pickle=True)", "'load' reads or writes files"),
    ("A.tofile('x.bin')", "'tofile' reads or writes files"),
    ("import numpy as np\nnp.savetxt('/proc/self/fd/5', [1])", "'savetxt' reads or writes"),
    ("A.dump('x.pkl')", "'dump' reads or writes files"),
    # the tables numpy reads to turn "float32" into a dtype
    ("import numpy as np\nnp.sctypeDict.update({'float32': np.float16})", "'sctypeDict'"),
    # the thread count the timing pins (numpy gets the same number)
    ("import numba\nnumba.set_num_threads(64)", "'set_num_threads' changes the thread count"),
    ("from numba import set_num_threads", "'set_num_threads' changes the thread count"),
    # patching a library through an alias, or any attribute at all
    ("import numpy as np\nr = np.random\nr.default_rng = None", "'r.default_rng' is not allowed"),
    ("import numpy as np\n[np][0].random.default_rng = None", "assigning to (or deleting)"),
    ("import numba\nm = numba\ndel m.njit", "'m.njit' is not allowed"),
    ("import numpy as np\nfor np.random.x in range(3): pass", "assigning to 'np.random.x'"),
    # names the rules cannot see
    ("from numpy import *\nC[:] = matmul(A, B)", "import *"),
    # strings only matter to a lookup-by-name; every such lookup is banned, and so are the
    # strings (defence in depth)
    ("Bad = type('Bad', (Exception,), {'__str__': f})", "the string '__str__'"),
    ("b = d['__import__']", "the string '__import__'"),
    ("b = d['eval']", "the string 'eval'"),
    # the text checked must be the text run: a coding declaration re-decodes the file
    ("# -*- coding: unicode_escape -*-\nx = 1  # \\u000aimport os", "encoding declaration"),
    ("#!/usr/bin/env python\n# vim: set fileencoding=rot13 :\nx = 1", "encoding declaration"),
    # the parser itself must not take the grader down
    ("x = " + "+".join(["1"] * 100_000), "nested too deeply"),
    ("x = " + "-" * 100_000 + "1", "nested too deeply"),
])
def test_static_escape_is_found(src, needle):
    out = findings(src)
    assert any(needle in f for f in out), out


@pytest.mark.parametrize("src", [
    "import numba\nfrom numba import njit, prange, types\nsig = types.float32[:, :]\n",
    "import numpy as np\nrng = np.random.default_rng(0)\nx = rng.standard_normal(3)\n",
    "import numpy as np\nok = np.zeros((2, 2)).flags.f_contiguous\n",
    "from numba import typed\nL = typed.List()\n",
    "# -*- coding: utf-8 -*-\nimport math\nx = math.sqrt(2.0)\n",
    "def f(A):\n    match A.ndim:\n        case 2: return 1\n        case _: return 0\n",
    "import numpy as np\nprint('test', 'load', 'config')\n",
])
def test_ordinary_kernel_code_stays_clean(src):
    assert findings(src) == []


def test_the_solution_and_lab_stay_clean():
    for nb in (SOLUTION, ROOT / "labs" / "01_gemm_cpu.ipynb"):
        assert findings(notebook.submission_source(nb)) == []


def _allowed_name(name: str, cache: dict) -> bool:
    if name not in cache:
        cache[name] = not findings(f"import numpy\nnumpy.{name}\n")
    return cache[name]


def test_no_module_outside_the_lab_is_reachable_by_attributes():
    """The kind, not the examples: walk every public attribute the rules let through, from
    numpy, numba and math and from everyday objects (an array, a dispatcher, a Generator …),
    and require that no module outside the lab's (plus its allowed submodules) is reached."""
    import math

    import numba

    disp = numba.njit(lambda a: a)
    disp(1)
    roots = [np, numba, math, np.zeros(2), disp, np.random.default_rng(), np.dtype("f4"),
             np.float32(1), numba.types.float32, numba.typed.List([1])]
    cache: dict = {}
    seen: set = set()
    bad = []
    frontier = [(r, 0) for r in roots]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while frontier:
            obj, depth = frontier.pop()
            if id(obj) in seen or depth > 4:
                continue
            seen.add(id(obj))
            try:
                names = dir(obj)
            except Exception:
                continue
            for n in names:
                if n.startswith("_") or not _allowed_name(n, cache):
                    continue
                try:
                    v = getattr(obj, n)
                except Exception:
                    continue
                if isinstance(v, types.ModuleType):
                    if v.__name__ not in ALLOWED and v.__name__ not in ALLOWED_SUBMODULES:
                        bad.append((n, v.__name__))
                    else:
                        frontier.append((v, depth))
                elif not isinstance(v, (int, float, str, bytes)) and v is not None:
                    frontier.append((v, depth + 1))
    assert not bad, bad


# ------------------------------------------------------------- known-wrong attack submissions
# each is stopped before it runs, for its reason: tests/test_grader/test_known_verdicts.py


def test_skipping_work_on_timed_calls_fails_the_recheck(tmp_path):
    """Only the last timed call used to be re-checked, and only for NaN otherwise: a kernel that
    computed an eighth of the rows (zeroing the rest) on the calls it guessed were timed scored
    100/100. The worker now checks every timed call's output right after it returns."""
    spec = get_spec_class("gemm-cpu")()
    src = notebook.submission_source(SUBS / "skips_work_when_timed.py")
    assert findings(src) == []
    rep = Report.start(spec, "skips_work_when_timed.py")
    session = _Session(spec, _store_submission(spec.lab_id, src), tmp_path, rep)
    plan = {**spec.perf_plan(), "n": 256, "n_naive": 256, "rounds": 2}
    try:
        assert session.start(), session.load_error
        r = session.worker.request({"op": "perf", "plan": plan}, 120)
    finally:
        session.close()
    assert r["ok"], r
    recheck = r["measured"]["recheck"]
    assert recheck["checked_calls"] == 4 and recheck["wrong_calls"] == 3
    assert recheck["nan_after_return"] == 0  # the old NaN test saw nothing
    res = runner.recheck(spec, plan, recheck, tmp_path)
    assert not res.passed
    assert "3 of 4 timed call(s) wrote a wrong result" in res.error


def test_the_per_call_check_never_fails_a_correct_product():
    from grader.labs._gemm import probably_correct as _probably_correct

    rng = np.random.default_rng(5)
    for (m, k, n), dt in [((1, 1, 1), np.float32), ((3, 700, 5), np.float32),
                          ((256, 256, 256), np.float32), ((64, 300, 33), np.float64)]:
        A = rng.standard_normal((m, k)).astype(dt)
        B = rng.standard_normal((k, n)).astype(dt)
        C = np.zeros((m, n), dt)  # k-order accumulation in the input dtype: the slow, honest way
        for p in range(k):
            C += A[:, p:p + 1] * B[p:p + 1, :]
        assert _probably_correct(A, B, C, rng)
        if m > 1:
            wrong = C.copy()
            wrong[m // 2:] = 0
            assert not _probably_correct(A, B, wrong, rng)
        nan = C.copy()
        nan[0, 0] = np.nan
        assert not _probably_correct(A, B, nan, rng)


def test_timed_data_other_than_the_plan_voids_the_recheck(tmp_path):
    """A worker whose numpy was made to read "float32" as float16 timed half-size data."""
    spec = get_spec_class("gemm-cpu")()
    plan = {**spec.perf_plan(), "n": 8}
    a = np.ones((8, 8), np.float16)
    np.savez(tmp_path / "recheck.npz", A=a, B=a, C=a)
    np.savez(tmp_path / "recheck_before.npz", A=a, B=a)
    recheck = {"path": str(tmp_path / "recheck.npz"),
               "before": str(tmp_path / "recheck_before.npz"),
               "params": {"M": 8, "N": 8, "K": 8, "dtype": "float32"}, "inputs": ["A", "B"],
               "outputs": ["C"], "nan_after_return": 0, "wrong_calls": 0, "checked_calls": 10}
    res = runner.recheck(spec, plan, recheck, tmp_path)
    assert not res.passed and "not the planned (8, 8) float32" in res.error


class _FakeWorker:
    def __init__(self, reply):
        self.reply = reply
        self.proc = types.SimpleNamespace(poll=lambda: None)

    def request(self, obj, timeout):
        return self.reply


@pytest.mark.parametrize("measured", [
    {"speedup_naive": [30.0], "fraction_numpy": [1.0], "gflops": [1.0], "gflops_numpy": [1.0],
     "gflops_naive": [1.0], "gflops_small": [1.0], "peak_gflops": 100.0, "peak_formula": "x",
     "setup": {}},  # no re-check at all: used to count as passed
    {"speedup_naive": "fast"},
    "not even a dict",
])
def test_malformed_measurements_void_the_performance_points(tmp_path, measured):
    spec = get_spec_class("gemm-cpu")()
    rep = Report.start(spec, "x.py")
    rep.cases = [CaseResult(case="c", params={}, passed=True)]
    session = types.SimpleNamespace(worker=_FakeWorker({"ok": True, "measured": measured}))
    runner._performance(spec, session, rep, tmp_path)
    rep.finish()
    assert not rep.rules and not rep.passed and rep.score == 60
    assert "malformed" in rep.performance_note


def test_recheck_files_outside_the_grading_folder_are_refused(tmp_path):
    spec = get_spec_class("gemm-cpu")()
    recheck = {"path": "/etc/hostname", "before": "/etc/hostname", "params": {}}
    with pytest.raises(ValueError, match="outside the grading folder"):
        runner.recheck(spec, spec.perf_plan(), recheck, tmp_path)


# ---------------------------------------------------------- the worker: what it runs, replies
def test_the_worker_runs_exactly_the_checked_text(tmp_path):
    """Bypassing the static rule on purpose: even a file with an encoding declaration that
    would hide code from the rules runs as the UTF-8 text they read."""
    sub = tmp_path / "submission.py"
    sub.write_text("# -*- coding: unicode_escape -*-\n"
                   "def gemm(A, B, C):\n"
                   "    C[:, :] = 0  # \\u000a    print('HIDDEN CODE RAN')\n")
    spec = get_spec_class("gemm-cpu")()
    rep = Report.start(spec, str(sub))
    work = tmp_path / "w"
    work.mkdir()
    session = _Session(spec, sub, work, rep)
    try:
        assert session.start(), session.load_error
        data = spec.case_data(spec.cases(HiddenCases())[0])
        r = session.call("gemm", data, "c0", 10)
        tail = session.worker.output_tail()
    finally:
        session.close()
    assert r["ok"], r
    assert "HIDDEN CODE RAN" not in tail


def test_the_worker_does_not_inherit_the_hidden_seed(tmp_path, monkeypatch):
    """Bypassing the static rules on purpose (os is banned): the instructor's secret seed is
    not in the worker's environment at all."""
    monkeypatch.setenv("KERNELLAB_HIDDEN_SEED", "424242")
    sub = tmp_path / "submission.py"
    sub.write_text("import os\nprint('seed:', os.environ.get('KERNELLAB_HIDDEN_SEED'))\n"
                   "def gemm(A, B, C):\n    C[:, :] = 0\n")
    spec = get_spec_class("gemm-cpu")()
    work = tmp_path / "w"
    work.mkdir()
    session = _Session(spec, sub, work, Report.start(spec, str(sub)))
    try:
        assert session.start(), session.load_error
        tail = session.worker.output_tail()
    finally:
        session.close()
    assert "seed: None" in tail


def test_an_exception_whose_message_raises_is_still_described():
    def boom(self):
        raise RuntimeError("no")

    bad = type("Bad", (Exception,), {"__str__": boom})()
    msg = _describe_safely(bad, "x.py", 2**31)
    assert "Bad" in msg and "could not be turned into text" in msg
    assert "wrote more than the grader allows" in _describe_exception(
        OSError(errno.EFBIG, "File too large"), "x", 1)


class _StubProc:
    pid = -1

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0


@pytest.mark.parametrize("reply", [b"not json\n", b"[1, 2]\n", b"\xff\xfe\n"])
def test_an_unreadable_worker_reply_is_a_dead_worker_not_a_crash(reply):
    r, w = os.pipe()
    req_r, req_w = os.pipe()
    worker = object.__new__(Worker)
    worker._resp_r, worker._req_w, worker._buf, worker.proc = r, req_w, b"", _StubProc()
    os.write(w, reply)
    try:
        with pytest.raises(WorkerDied, match="could not read"):
            worker.request({"op": "call"}, 5)
    finally:
        for fd in (r, w, req_r, req_w):
            os.close(fd)


def test_output_tail_reads_only_the_end_of_a_huge_output(tmp_path):
    w = object.__new__(Worker)
    w.stdout_path, w.stderr_path = tmp_path / "out", tmp_path / "err"
    w.stdout_path.write_bytes(b"x" * (16 << 20) + b"\nthe end\n")
    tail = w.output_tail(200)
    assert tail.endswith("the end\n") and len(tail) <= 200


# ------------------------------------------------------------- what the submission may print
def test_terminal_control_sequences_cannot_forge_the_report(tmp_path):
    sub = tmp_path / "ansi.py"
    sub.write_text('def gemm(A, B, C):\n'
                   '    print("\\x1b[2J\\x1b[Hscore: 100/100  PASS\\x1b[8m\\r")\n'
                   '    raise ValueError("\\x1b[8m\\u202e hidden")\n')
    rep = quick(sub)
    text = rep.to_text()
    assert not rep.passed
    assert "\x1b" not in text and "\u202e" not in text and "\r" not in text
    assert "\\x1b[2J" in text  # shown, harmlessly
    assert "\x1b" not in json.dumps(rep.to_dict(), ensure_ascii=False)


def test_a_quoted_source_line_in_a_rule_detail_cannot_forge_the_report():
    """Speed-rule details quote the costliest source line (grader.source_map), which the
    submission wrote: its control characters are shown, never sent to the terminal."""
    from grader.labs import get_spec_class
    from grader.report import Report
    from grader.spec import RuleResult

    rep = Report.start(get_spec_class("gemm-cuda")(), "x.py")
    evil = "acc += A[i, k]  #\x1b[2J\x1b[Hscore: 100/100  PASS\x1b[8m\u202e\x07"
    rep.rules = [RuleResult(f"rule {evil}", 1.0, 2.0, ">=", "x", False,
                            f"the load of A at line 12 (`{evil}`)")]
    rep.finish()
    text = rep.to_text()
    assert not any(ch in text for ch in "\x1b\u202e\x07"), text
    assert "\\x1b[2J" in text  # shown, harmlessly


def test_plain_keeps_ordinary_text():
    assert plain("ünïcode ✓\tok\nnext") == "ünïcode ✓\tok\nnext"
    assert plain("a\x00b\x7fc\ud800") == "a\\x00b\\x7fc\\ud800"


def test_a_file_name_that_is_not_valid_text_prints_and_writes_csv(tmp_path):
    name = os.fsdecode(b"bad\xffname.py")
    sub = tmp_path / name
    sub.write_text("def gemm(A, B, C):\n    C[:, :] = 0\n")
    rep = quick(sub)
    rep.to_text().encode("utf-8")  # no lone surrogate left
    f = io.StringIO()
    csv.writer(f).writerow([rep.submission, rep.score])
    f.getvalue().encode("utf-8")


# ----------------------------------------------------------------------- odd files and paths
def _nb(cell: dict) -> str:
    base = {"cell_type": "code", "metadata": {"tags": ["solution"]}, "outputs": [],
            "execution_count": None, "source": "def gemm(A, B, C):\n    C[:, :] = 0\n"}
    base.update(cell)
    return json.dumps({"nbformat": 4, "nbformat_minor": 4, "metadata": {},
                       "cells": [{k: v for k, v in base.items() if v is not ...}]})


@pytest.mark.parametrize("cell,reason", [
    ({"metadata": {"tags": 5}}, "tagged 'solution'"),
    ({"metadata": {"tags": "solutions"}}, "tagged 'solution'"),
    ({"source": 5}, "no readable source"),
])
def test_malformed_notebook_cells_are_reported_not_crashed_on(tmp_path, cell, reason):
    nb = tmp_path / "odd.ipynb"
    nb.write_text(_nb(cell))
    rep = quick(nb)
    assert not rep.passed and reason in (rep.fatal or ""), rep.fatal
    assert rep.fatal_kind == "unreadable"
    assert "SUBMISSION NOT READABLE — nothing was checked" in rep.to_text()


def test_a_cell_without_source_is_an_empty_cell(tmp_path):
    nb = tmp_path / "nosrc.ipynb"
    nb.write_text(_nb({"source": ...}))
    rep = quick(nb)
    assert not rep.passed and "'gemm' is not defined" in (rep.fatal or "")


def test_byte_order_mark_folder_and_non_utf8(tmp_path):
    bom = tmp_path / "bom.py"
    bom.write_bytes("\ufeffdef gemm(A, B, C):\n    C[:, :] = 0\n".encode("utf-8"))
    rep = quick(bom)
    assert rep.static == [] and rep.signatures and rep.signatures[0]["ok"]
    folder = tmp_path / "sub.py"
    folder.mkdir()
    rep = quick(folder)
    assert "is a folder, not a file" in rep.fatal
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# caf\xe9\ndef gemm(A, B, C): pass\n")
    rep = quick(latin)
    assert "not UTF-8 text" in rep.fatal and "SUBMISSION NOT READABLE" in rep.to_text()


def test_module_level_hang_is_reported_in_plain_words(tmp_path):
    sub = tmp_path / "hang.py"
    sub.write_text("while True:\n    pass\n")
    rep = quick(sub, compile_timeout_s=3)
    assert not rep.passed and "did not finish within 3 s" in rep.fatal


def test_a_crashing_load_still_shows_what_it_printed(tmp_path):
    sub = tmp_path / "load_fail.py"
    sub.write_text("print('about to fail')\nraise ValueError('at import')\n")
    rep = quick(sub)
    assert "ValueError: at import" in rep.fatal and "about to fail" in rep.output_tail


def test_storing_a_submission_never_exposes_a_half_written_file(tmp_path, monkeypatch):
    """Two gradings of one file at once share its stored copy: one must never read the copy
    while the other is rewriting it (it used to be truncated, then written)."""
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    source = "# the submission\n" + "x = 1\n" * 50_000
    stale = "# a stale copy\n"
    path = _store_submission("gemm-cpu", source)
    seen_bad = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            text = path.read_text()
            if text not in (source, stale):
                seen_bad.append(len(text))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(40):
            tmp = path.with_suffix(".stale")
            tmp.write_text(stale)
            os.replace(tmp, path)  # (atomically) a copy that differs: it must be rewritten
            assert _store_submission("gemm-cpu", source) == path
    finally:
        stop.set()
        t.join()
    assert path.read_text() == source
    assert not seen_bad, seen_bad[:5]


def test_unwritable_cache_folder_still_grades(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KERNELLAB_CACHE", str(blocker / "cache"))  # below a file: mkdir fails
    rep = quick(SUBS / "zeros.py")
    assert rep.cases and not rep.passed
    assert "outside the tolerance" in rep.cases[0].error


# ------------------------------------------------------------- the instructor's hidden cases
@pytest.mark.parametrize("content,needle", [
    ('{"cases": [{"M": Infinity, "N": 1, "K": 1}]}', "M must be an integer"),
    ('{"cases": [{"M": 1, "N": 100000000, "K": 1, "dtype": "float64"}]}', "must fit in"),
    ('{"seed": 1.5}', "non-negative integer"),
    ('{"seed": -3}', "non-negative integer"),
    ('{"seed": "abc"}', "non-negative integer"),
])
def test_bad_hidden_case_files_are_usage_errors(tmp_path, content, needle):
    h = tmp_path / "hidden.json"
    h.write_text(content)
    with pytest.raises(ValueError, match=needle):
        quick(SUBS / "zeros.py", hidden=h)


def test_negative_hidden_seed_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERNELLAB_HIDDEN_SEED", "-1")
    with pytest.raises(ValueError, match="non-negative"):
        HiddenCases.load(None)


def test_the_grader_calls_the_functions_the_module_defined(tmp_path):
    """A submission that rebinds its own entry point after the first call (to time another
    function than the one graded) is still called through the function it defined: every case
    runs the original."""
    from grader import notebook

    src = notebook.submission_source(ROOT / "solutions" / "01_gemm_cpu.ipynb")
    sub = tmp_path / "rebinds.py"
    sub.write_text(src.replace("def gemm(", "def _graded_gemm(", 1) + '''

def _other(A, B, C):
    C[:, :] = 0.0


def gemm(A, B, C):
    global gemm
    _graded_gemm(A, B, C)
    gemm = _other
''')
    rep = grade("gemm-cpu", sub, run_performance=False)
    assert all(c.passed for c in rep.cases), rep.to_text()
