"""Grader self-tests for the NPU labs, ``npu-vector-add`` (Lab 7a), ``npu-matmul`` (Lab 7b),
``npu-rmsnorm`` (Lab 7c) and ``npu-flash-attention`` (Lab 7d, a mix kernel),
on the ``npu`` tier (the simulator's modelled cycles; no GPU, no NPU): the solutions pass
through the CLI with their figures in the JSON, the untouched labs fail "not implemented",
every known-wrong submission fails for the reason in its header, the thresholds sit between
the references and the wrong variants with margin, two runs give the same cycles and trace
hashes, results the device did not compute are refused, and the static rules open
``kernellab.npu`` and nothing else of the course."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import pytest

from grader.labs import get_spec_class
from grader.labs.npu_flash_attention import spec as fa
from grader.labs.npu_matmul import spec as mm
from grader.labs.npu_rmsnorm import spec as rn
from grader.labs.npu_vector_add import spec as va
from grader.labs._npu import CARD, ONE_CORE
from grader.report import judge_verdict
from grader.runner import grade
from grader.spec import HiddenCases
from grader.static_check import check_source
from grader import notebook
from kernellab import npu
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P
from kernellab.npu.launch import content_digest
from known import Folder  # tests/known.py: where each known submission is
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

ROOT = Path(__file__).resolve().parents[4]
LABS = {  # lab -> (solution, generated lab, known-wrong submissions)
    "npu-vector-add": (ROOT / "solutions" / "07a_npu_vector_add.ipynb",
                       ROOT / "labs" / "07a_npu_vector_add.ipynb",
                       Folder("npu-vector-add", "wrong")),
    "npu-matmul": (ROOT / "solutions" / "07b_npu_matmul.ipynb",
                   ROOT / "labs" / "07b_npu_matmul.ipynb",
                   Folder("npu-matmul", "wrong")),
    "npu-rmsnorm": (ROOT / "solutions" / "07c_npu_rmsnorm.ipynb",
                    ROOT / "labs" / "07c_npu_rmsnorm.ipynb",
                    Folder("npu-rmsnorm", "wrong")),
    "npu-flash-attention": (ROOT / "solutions" / "07d_npu_flash_attention.ipynb",
                            ROOT / "labs" / "07d_npu_flash_attention.ipynb",
                            Folder("npu-flash-attention", "wrong")),
}

VA_ONE = "one core: modelled speedup over the baseline"
VA_ALL = "all cores: modelled speedup over the baseline"
VA_ROOF = "all cores: share of the HBM roof"
MM_ONE = "one core: modelled speedup over the naive tiling"
MM_UTIL = "one core: cube utilisation"
MM_CHIP = "all cores: cube utilisation of the chip"
RN_ONE = "one core: modelled speedup over the baseline"
RN_ROOF = "all cores: share of the HBM roof"
FA_UTIL = "cube utilisation"
FA_TRAFFIC = "HBM traffic / compulsory"
#: lab -> its rules in order, and their thresholds (a lab's names may repeat another's)
LAB_RULES = {
    "npu-vector-add": {VA_ONE: va.MIN_SPEEDUP_ONE_CORE, VA_ALL: va.MIN_SPEEDUP_ALL_CORES,
                       VA_ROOF: va.MIN_HBM_ROOF_PCT},
    "npu-matmul": {MM_ONE: mm.MIN_SPEEDUP_ONE_CORE, MM_UTIL: mm.MIN_CUBE_UTIL_ONE_CORE,
                   MM_CHIP: mm.MIN_CUBE_UTIL_ALL_CORES},
    "npu-rmsnorm": {RN_ONE: rn.MIN_SPEEDUP_ONE_CORE, RN_ROOF: rn.MIN_HBM_ROOF_PCT},
    "npu-flash-attention": {FA_UTIL: fa.MIN_CUBE_UTIL_PCT, FA_TRAFFIC: fa.MAX_TRAFFIC},
}
#: rules a lower figure passes
AT_MOST = {FA_TRAFFIC}
#: the reference clears every threshold by this factor, and a known-wrong submission misses the
#: threshold of the rule it must fail by this one (figures in the labs' README.md)
REFERENCE_MARGIN = 1.08
WRONG_MARGIN = 1.04


@functools.lru_cache(maxsize=None)
def solution_report(lab: str):
    """The solution's JSON report from ``kernellab grade LAB SOLUTION --json`` and the
    seconds it took (once per session)."""
    t0 = time.perf_counter()
    r = cli("grade", lab, str(LABS[lab][0]), "--json")
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout), seconds


@functools.lru_cache(maxsize=None)
def graded(lab: str, name: str, perf: bool):
    return grade(lab, LABS[lab][2] / name, run_performance=perf)


def rules_of(report) -> dict:
    return {r.name: r for r in report.rules}


def solution_namespace(lab: str) -> dict:
    """The solution notebook's graded cells, run here as the worker runs them."""
    src = notebook.submission_source(LABS[lab][0])
    module = types.ModuleType("submission")
    sys.modules["submission"] = module
    code = compile(src, "submission.py", "exec", dont_inherit=True)
    exec(code, vars(module))  # noqa: S102 - the course's own solution, as the worker runs it
    return vars(module)


# ---------------------------------------------------------------------------- end to end (CLI)
@pytest.mark.parametrize("lab", sorted(LABS))
def test_solution_passes_with_its_figures_in_the_json(lab):
    d, seconds = solution_report(lab)
    # the goal: every lab graded in under 30 s on 2 cores;
    # the bound leaves room for a loaded test machine
    assert seconds < 60, seconds
    assert d["passed"] is True and d["score"] == d["max_score"] == 100 and d["tier"] == "npu"
    n_cases = len(get_spec_class(lab)().cases(HiddenCases()))
    assert d["cases_passed"] == d["cases_total"] == n_cases
    for c in d["cases"]:
        assert c["error"] is None
        assert c["comparison"]["budget_used"] <= 0.5, c   # kernellab.numerics' margin rule: < 50%
    rules = {r["name"]: r for r in d["rules"]}
    assert list(rules) == list(LAB_RULES[lab])
    for name, r in rules.items():
        assert r["passed"] and r["threshold"] == LAB_RULES[lab][name]
        # the thresholds sit on the passing side of the reference with margin
        if name in AT_MOST:
            assert r["measured"] * REFERENCE_MARGIN <= r["threshold"], (name, r)
        else:
            assert r["measured"] >= REFERENCE_MARGIN * r["threshold"], (name, r)
    assert d["recheck"]["passed"] is True
    runs = d["performance_setup"]["runs"]
    assert runs["all_cores"]["launches"][0]["machine"] == CARD.key
    if lab == "npu-flash-attention":  # a mix kernel: the full card only
        assert list(runs) == ["all_cores"]
        assert runs["all_cores"]["launches"][0]["kernel"] == "fa_kernel"
        return
    assert runs["one_core"]["launches"][0]["machine"] == ONE_CORE.key
    assert runs["one_core"]["launches"][0]["block_dim"] == 1


def test_reference_figures_are_the_documented_ones():
    """The figures the labs' README.md quote (they set the thresholds)."""
    rules = {r["name"]: r["measured"] for r in solution_report("npu-vector-add")[0]["rules"]}
    assert rules[VA_ONE] == pytest.approx(4.18, abs=0.02)
    assert rules[VA_ALL] == pytest.approx(68.9, abs=0.3)
    assert rules[VA_ROOF] == pytest.approx(87.6, abs=0.3)
    rules = {r["name"]: r["measured"] for r in solution_report("npu-matmul")[0]["rules"]}
    assert rules[MM_ONE] == pytest.approx(5.51, abs=0.02)
    assert rules[MM_UTIL] == pytest.approx(64.4, abs=0.3)
    assert rules[MM_CHIP] == pytest.approx(60.5, abs=0.3)
    rules = {r["name"]: r["measured"] for r in solution_report("npu-rmsnorm")[0]["rules"]}
    assert rules[RN_ONE] == pytest.approx(2.82, abs=0.02)
    assert rules[RN_ROOF] == pytest.approx(55.7, abs=0.3)
    rules = {r["name"]: r["measured"] for r in
             solution_report("npu-flash-attention")[0]["rules"]}
    assert rules[FA_UTIL] == pytest.approx(8.56, abs=0.02)
    assert rules[FA_TRAFFIC] == pytest.approx(8.0, abs=0.01)


@pytest.mark.parametrize("lab", sorted(LABS))
def test_untouched_lab_fails_with_not_implemented(lab):
    assert_untouched_fails(lab, LABS[lab][1], "--no-perf")


# ------------------------------------------------------------------ known-wrong submissions
# each fails its cases for its reason (and passes the rest):
# tests/test_grader/test_known_verdicts.py

#: (lab, file) -> (rules that must fail, rules that must pass)
WRONG_SPEED = {
    ("npu-vector-add", "single_buffer.py"): ((VA_ONE,), (VA_ALL, VA_ROOF)),
    ("npu-vector-add", "single_buffer_small_tile.py"): ((VA_ONE, VA_ROOF), (VA_ALL,)),
    ("npu-vector-add", "one_core.py"): ((VA_ALL, VA_ROOF), (VA_ONE,)),
    ("npu-matmul", "no_pingpong.py"): ((MM_ONE, MM_UTIL, MM_CHIP), ()),
    ("npu-matmul", "one_core.py"): ((MM_CHIP,), (MM_ONE, MM_UTIL)),
    ("npu-rmsnorm", "two_passes_always.py"): ((RN_ONE,), (RN_ROOF,)),
    ("npu-rmsnorm", "one_core_only.py"): ((RN_ROOF,), (RN_ONE,)),
    ("npu-flash-attention", "one_vector_core.py"): ((FA_UTIL,), (FA_TRAFFIC,)),
    ("npu-flash-attention", "one_block_in_flight.py"): ((FA_UTIL,), (FA_TRAFFIC,)),
    ("npu-flash-attention", "one_slot.py"): ((FA_UTIL,), (FA_TRAFFIC,)),
    ("npu-flash-attention", "small_key_blocks.py"): ((FA_TRAFFIC, FA_UTIL), ()),
}


@pytest.mark.parametrize("lab,name", sorted(WRONG_SPEED))
def test_known_wrong_submission_is_correct_but_too_slow(lab, name):
    must_fail, must_pass = WRONG_SPEED[(lab, name)]
    rep = graded(lab, name, True)
    assert all(c.passed for c in rep.cases), rep.to_text()
    assert not rep.passed and rep.recheck is not None and rep.recheck.passed, rep.to_text()
    rules = rules_of(rep)
    for r in must_fail:
        assert not rules[r].passed, rep.to_text()
        # the threshold sits on the passing side of the wrong variant with margin
        if r in AT_MOST:
            assert rules[r].measured >= WRONG_MARGIN * rules[r].threshold, (r, rules[r].measured)
        else:
            assert rules[r].measured * WRONG_MARGIN <= rules[r].threshold, (r, rules[r].measured)
    for r in must_pass:
        assert rules[r].passed, rep.to_text()


def test_tbuf_kernel_with_its_ordering_passes_every_case():
    """The correct twin of tbuf_copy_in_unordered.py: the same TBufs, a pipe_barrier between
    the copy-in and the add."""
    rep = graded("npu-vector-add", "tbuf_ordered_twin.py", False)
    assert all(c.passed for c in rep.cases) and rep.cases, rep.to_text()


def test_rmsnorm_gamma_in_a_tbuf_passes_with_its_event_and_fails_without():
    """ok/gamma_tbuf_event orders MTE2's copy into a TBuf before V's cast with a raw MTE2 -> V
    event and passes every case; without the event, or with one on the wrong pair of pipes,
    every one-pass case fails with a race naming both pipes."""
    rep = grade("npu-rmsnorm", Folder("npu-rmsnorm", "ok") / "gamma_tbuf_event.py",
                run_performance=False)
    assert rep.cases and all(c.passed for c in rep.cases), rep.to_text()
    # their tile (the solution's UB budget, plus gamma's TBuf: 6 x 2 + 12 B an element)
    tile = (npu.platform_info().ub_size - 4096) // 24 // 64 * 64
    for name in ("gamma_tbuf_no_event.py", "gamma_tbuf_wrong_event.py"):
        rep = graded("npu-rmsnorm", name, False)
        bad = [c for c in rep.cases if not c.passed]
        assert {c.case for c in bad} == {c.case for c in rep.cases
                                         if -(-c.params["N"] // 64) * 64 <= tile}, rep.to_text()
        assert all("DataRaceError" in c.error and "V reads them in cast" in c.error
                   and "MTE2 wrote them in data_copy" in c.error for c in bad), rep.to_text()


def test_rmsnorm_tolerance_passes_float32_statistics_and_fails_float16_ones():
    """The derived bound: the reference's float32 statistics use about half of it, float16
    statistics of rows of 4096 values near 1 (no overflow) already break it; a wrong rstd
    is named as such."""
    rng = np.random.default_rng(3)
    x, g = rn.case_inputs(rng, 4, 4096, "float16", "normal")
    ref = rn.golden(x, g, 1e-6)
    tol = rn.tolerance(x, g, 1e-6, ref)
    x32 = x.astype(np.float32)
    rstd32 = 1 / np.sqrt(np.mean(x32 * x32, axis=1, keepdims=True, dtype=np.float32)
                         + np.float32(1e-6))
    good = (x32 * rstd32 * g.astype(np.float32)).astype(np.float16)
    from kernellab.numerics import compare
    assert compare(good, ref, tol).ok
    sq16 = (x * x).astype(np.float16)
    s16 = np.float16(0)
    for part in sq16.reshape(4, -1, 64).transpose(1, 0, 2):
        s16 = (s16 + part.sum(axis=1, dtype=np.float16)).astype(np.float16)
    rstd16 = 1 / np.sqrt(s16.astype(np.float32)[:, None] / 4096 + np.float32(1e-6))
    bad = (x32 * rstd16 * g.astype(np.float32)).astype(np.float16)
    assert not compare(bad, ref, tol).ok
    case = rn.NPURmsNorm().cases(HiddenCases())[5]
    data = rn.NPURmsNorm().case_data(case)
    x, g, eps = data.inputs["x"], data.inputs["gamma"], data.scalars["eps"]
    off = rn.golden(x, g, eps) * np.array([[1.0], [1.02], [0.99]])
    cmp = rn.NPURmsNorm().compare(case, data, {"y": off.astype(x.dtype)})
    assert not cmp.ok and "whole rows are off by one factor" in cmp.message


def test_each_case_line_carries_an_online_judges_verdict(tmp_path):
    """Accepted, Wrong Answer (values wrong, or rows left unwritten), Runtime Error (a simulator
    error) and Time Limit Exceeded, in the text and in the JSON."""
    d = solution_report("npu-rmsnorm")[0]
    assert {c["judge"] for c in d["cases"]} == {"Accepted"}
    for name, word in (("mean_over_padded.py", "Wrong Answer"),
                       ("missing_tail.py", "Runtime Error")):
        rep = graded("npu-rmsnorm", name, False)
        text = rep.to_text()
        assert f"FAIL  {word}" in text and "pass  Accepted" in text, text
    src = notebook.submission_source(LABS["npu-rmsnorm"][0])
    short = tmp_path / "short.py"           # the last row of each block left out: NaN stays
    short.write_text(src.replace("    r1 = min(t.M, r0 + t.rows)\n",
                                 "    r1 = min(t.M, r0 + t.rows) - 1\n", 1), encoding="utf-8")
    rep = grade("npu-rmsnorm", short, run_performance=False)
    bad = [c for c in rep.cases if not c.passed]
    assert bad and all(judge_verdict(c) == "Wrong Answer" for c in bad), rep.to_text()
    slow = tmp_path / "slow.py"
    slow.write_text(src.replace('    M, N = x.shape\n', '    M, N = x.shape\n'
                                '    while N > 100000:\n        pass\n', 1), encoding="utf-8")
    rep = grade("npu-rmsnorm", slow, run_performance=False, case_timeout_s=2,
                only=lambda c: c.name in ("1x1 float16 eps=1e-06", "2x100003 float16 eps=1e-06"))
    verdicts = {c.case: c for c in rep.cases}
    text = rep.to_text()
    assert verdicts["1x1 float16 eps=1e-06"].passed, text
    assert "FAIL  Time Limit Exceeded" in text and "did not finish within 2 s" in text, text


def test_forgotten_b_flag_report_names_the_load_line_and_the_flag():
    """b_no_transpose.py: the report says where B was loaded and what to add there, in plain
    words before the ZN/ZZ explanation (not only the mmad line where the layout is read)."""
    rep = graded("npu-matmul", "b_no_transpose.py", False)
    text = rep.to_text()
    assert rep.cases and not any(c.passed for c in rep.cases), text
    for c in rep.cases:
        err = c.error or ""
        assert "LayoutError" in err and "B was loaded at line " in err, text
        assert "without transpose=True; add transpose=True to that call." in err, text
        assert err.index("add transpose=True") < err.index("as ZN"), text


def test_best_single_buffered_kernel_misses_the_one_core_rule():
    """One buffer with the largest tile UB allows is the best a single-buffered kernel does
    (3.55x); with tiles of 8192 it is 2.85x: both below the one-core threshold, which the
    double-buffered reference clears (4.18x)."""
    one = rules_of(graded("npu-vector-add", "single_buffer.py", True))[VA_ONE].measured
    small = rules_of(graded("npu-vector-add", "single_buffer_small_tile.py", True))[VA_ONE]
    assert one == pytest.approx(3.55, abs=0.02) and small.measured == pytest.approx(2.85, abs=0.02)


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("lab", sorted(LABS))
def test_two_runs_give_the_same_cycles_and_trace_hashes(lab):
    """The timed runs measured twice here (fresh random inputs each time) and once by the
    CLI's worker: the same cycles and trace hashes (the trace holds no data values)."""
    spec = get_spec_class(lab)()
    ns = solution_namespace(lab)
    runs = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as d:
            runs.append(spec.measure(ns, spec.perf_plan(), Path(d))["setup"]["runs"])
    assert runs[0] == runs[1]
    cli_runs = solution_report(lab)[0]["performance_setup"]["runs"]
    assert cli_runs == runs[0]
    for run in runs[0].values():
        assert run["cycles"] > 0 and all(len(li["trace_hash"]) == 64 for li in run["launches"])


# ------------------------------------------------------------ results the device did not make
HEADER = """import numpy as np
from kernellab import npu
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P
"""
COPY_KERNEL = """
@asc.kernel(core="aiv")
def copy_kernel(s, z, n):
    pipe = asc.TPipe()
    qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
    pipe.init_buffer(qi, 1, 4096)
    pipe.init_buffer(qo, 1, 4096)
    for off in range(0, n, 2048):
        cnt = min(2048, n - off)
        a = qi.alloc_tensor(asc.half)
        asc.data_copy_pad(a, s[off:], cnt)
        qi.enque(a)
        a = qi.deque(asc.half)
        c = qo.alloc_tensor(asc.half)
        asc.muls(c, a, 1.0, cnt)          # a copy, bit for bit (adds 0.0 would turn -0 into +0)
        qo.enque(c)
        qi.free_tensor(a)
        c = qo.deque(asc.half)
        asc.data_copy_pad(z[off:], c, cnt)
        qo.free_tensor(c)
"""
CHEATS = {
    # numpy on the host, no kernel
    "host_only": ("def vector_add(x, y, z):\n    z[:] = x + y\n", "no kernel was launched"),
    # a launch that fails, caught, then numpy
    "caught_error": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n    try:\n"
                     "        npu.launch(copy_kernel, 1, (x, z, x.size + 1))\n"
                     "    except Exception:\n        pass\n    z[:] = x + y\n",
                     "failed and the host code carried on"),
    # the sum computed on the host, then copied by the device
    "device_copies_host_sum": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n"
                               "    npu.launch(copy_kernel, 1, (x + y, z, x.size))\n",
                               "the device read 0 of the"),
    # the right kernel idea, on a card of its own choosing
    "other_card": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n"
                   "    npu.launch(copy_kernel, 1, (x + y, z, x.size), machine='tiny')\n",
                   "not on the one the grader runs"),
    # every input read by the device, then the host's sum copied in by it
    "host_sum_beside_the_inputs": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n"
                                   "    w = np.zeros_like(z)\n"
                                   "    npu.launch(copy_kernel, 1, (x, w, x.size))\n"
                                   "    npu.launch(copy_kernel, 1, (y, w, y.size))\n"
                                   "    npu.launch(copy_kernel, 1, (x + y, z, x.size))\n",
                                   "holds neither an input (x, y) nor a blank workspace"),
    # the device's result overwritten on the host afterwards
    "host_after_device": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n"
                          "    npu.launch(copy_kernel, 1, (x, z, x.size))\n    z[:] = x + y\n",
                          "not what any launch left in an array"),
    # the device writes a workspace, the host overwrites it with the sum, the device copies it
    "host_sum_between_launches": (COPY_KERNEL + "\ndef vector_add(x, y, z):\n"
                                  "    w = np.zeros_like(z)\n"
                                  "    npu.launch(copy_kernel, 1, (x, w, x.size))\n"
                                  "    npu.launch(copy_kernel, 1, (y, z, y.size))\n"
                                  "    w[:] = x + y\n"
                                  "    npu.launch(copy_kernel, 1, (w, z, x.size))\n",
                                  "the host changed the array the kernel was passed as"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_result_the_device_did_not_compute_fails(name, tmp_path):
    body, reason = CHEATS[name]
    p = tmp_path / f"{name}.py"
    p.write_text(HEADER + body, encoding="utf-8")
    rep = grade("npu-vector-add", p, run_performance=False)
    assert not rep.static, rep.static
    bad = [c for c in rep.cases if not c.passed]
    assert len(bad) == len(rep.cases), rep.to_text()
    assert all(reason in c.error for c in bad), [c.error for c in bad][:3]


# ------------------------------------------------------------------------------ static rules
@pytest.mark.parametrize("lab", sorted(LABS))
def test_static_rules_open_the_npu_api_and_nothing_else(lab):
    spec = get_spec_class(lab)()

    def findings(src):
        return check_source(src, allowed_imports=spec.allowed_imports,
                            banned_names=spec.banned_names,
                            allowed_submodules=spec.allowed_submodules)

    assert findings(notebook.submission_source(LABS[lab][0])) == []
    assert findings("import kernellab.npu.asc\nfrom kernellab.npu.launch import launch\n"
                    "p = kernellab.npu.platform_info()\nkernellab.npu.launch\n") == []
    for bad in ("from kernellab.npu import examples", "from kernellab.npu.examples import x",
                "import kernellab.sim", "from kernellab import machine", "import grader",
                "from reference_kernels.gemm import gemm_golden",
                "from kernellab.npu import asc\nasc.ctx().records", "from kernellab import npu\n"
                "npu.PRESETS['ascend910b-like@1'] = None", "from kernellab import npu\nnpu.capture",
                "from kernellab import npu\nnpu.use_machine", "t.np()",
                "from kernellab.npu import runtime"):
        assert findings(bad), bad
    assert findings(f"from grader.labs import {spec.__class__.__module__.split('.')[2]}")


# ----------------------------------------------------------------- capture and use_machine
@asc.kernel(core="aiv")
def _half_kernel(x, z, n):
    """Block b copies x's b-th half into z (b = 0 only when launched with one block)."""
    half_len = n // 2
    base = asc.get_block_idx() * half_len
    pipe = asc.TPipe()
    qi, qo = asc.TQue(P.VECIN, 1), asc.TQue(P.VECOUT, 1)
    pipe.init_buffer(qi, 1, half_len * 2)
    pipe.init_buffer(qo, 1, half_len * 2)
    a = qi.alloc_tensor(asc.half)
    asc.data_copy(a, x[base:], half_len)
    qi.enque(a)
    a = qi.deque(asc.half)
    c = qo.alloc_tensor(asc.half)
    asc.adds(c, a, 0.0, half_len)
    qo.enque(c)
    qi.free_tensor(a)
    c = qo.deque(asc.half)
    asc.data_copy(z[base:], c, half_len)
    qo.free_tensor(c)


def test_capture_sees_writes_reads_cards_and_failures():
    n = 512
    x = np.arange(n, dtype=np.float16)
    z = np.full(n, np.nan, dtype=np.float16)
    with npu.capture() as cap:
        npu.launch(_half_kernel, 1, (x, z, n))
        with npu.use_machine(ONE_CORE):
            assert npu.platform_info().vector_core_num == 1
            npu.launch(_half_kernel, 2, (x, z, n))
        with pytest.raises(npu.errors.ShapeError):
            npu.launch(_half_kernel, 1, (x, z, 0))
    assert npu.get_machine() is CARD and npu.platform_info().vector_core_num == 48
    first, second, failed = cap.launches
    xi, zi = first.arrays[0], first.arrays[1]
    assert (xi.read_bytes, xi.written_bytes) == (n, 0)          # half of x: n/2 fp16 = n bytes
    assert (zi.written_bytes, zi.writers) == (n, {0: n})
    assert first.machine is CARD and second.machine is ONE_CORE
    assert second.arrays[1].written_bytes == 2 * n and second.arrays[1].writers == {0: n, 1: n}
    assert second.arrays[1].digest_end == content_digest(z)
    assert failed.result is None and isinstance(failed.error, npu.errors.ShapeError)
    assert cap.cycles == first.cycles + second.cycles > 0
    np.testing.assert_array_equal(z, x)


def test_captured_figures_are_the_launch_s_not_what_host_code_made_of_them():
    """The grader reads the figures copied when the launch returned; the RunResult the host
    code gets back is its own to change (its dicts are mutable)."""
    from grader.labs._npu import capture_dict

    n = 512
    x = np.arange(n, dtype=np.float16)
    z = np.full(n, np.nan, dtype=np.float16)
    with npu.capture() as cap:
        res = npu.launch(_half_kernel, 1, (x, z, n))
        res.flops["vector"] = 10 ** 12
        res.bytes.clear()
        res.pipe_busy_pct["MTE2"] = 0.0
    d = capture_dict(cap, CARD)["launches"][0]
    assert d["flops"]["vector"] == n // 2 and d["bytes"]["GM->UB"] == n
    assert d["pipe_busy_pct"]["MTE2"] > 0 and d["cycles"] == cap.launches[0].figures["cycles"]


# ------------------------------------------------------------------ grader side, worker side
def test_the_grader_side_never_imports_the_worker_side():
    """Building the cases, the plan and the planned arrays imports each lab's spec and baseline
    but not its measure module, which only the worker imports (base ``measure`` dispatches to
    its ``measure_npu``)."""
    code = ("import json, sys\nfrom grader.labs import get_spec_class\nfrom grader.spec import "
            "HiddenCases\nfor lab in ('npu-vector-add', 'npu-matmul'):\n"
            "    s = get_spec_class(lab)()\n    s.cases(HiddenCases(seed=1))\n"
            "    s.planned(s.perf_plan())\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m.startswith('grader.labs.npu'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = json.loads(r.stdout.strip().splitlines()[-1])
    assert loaded and not [m for m in loaded if m.endswith(".measure")], loaded
    for lab in LABS:
        assert callable(get_spec_class(lab)().worker_module().measure_npu)
