"""Grader self-tests for lab torch-op: the solution passes in budget with its figures in the JSON
and under half of every error budget, the untouched lab fails "not implemented", the cases
cover the layouts and checks the lab promises, the tolerances reject what a wrong backward
gives, and a course without PyTorch says how to add it. Elsewhere: the known submissions'
verdicts (tests/known_verdicts.json; the timed one's with KERNELLAB_KNOWN_FULL=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

pytest.importorskip("torch")

from grader.labs.torch_op import spec as lab  # noqa: E402
from grader.spec import Case  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
SOLUTION = ROOT / "solutions" / "09_torch_op.ipynb"
LAB = ROOT / "labs" / "09_torch_op.ipynb"


@pytest.fixture(scope="module")
def graded():
    t0 = time.perf_counter()
    r = cli("grade", "torch-op", str(SOLUTION), "--json")
    return r, time.perf_counter() - t0


@pytest.mark.timed
def test_solution_passes_in_budget_with_margin(graded):
    r, seconds = graded
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 120, seconds        # 60 s on an idle 2-core machine: the budget
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == 100
    assert d["cases_passed"] == d["cases_total"] == len(lab.CASES)
    used = [c["comparison"]["budget_used"] for c in d["cases"]]
    assert all(u < 0.5 for u in used), used
    rules = {x["name"]: x for x in d["rules"]}
    assert list(rules) == [lab.SPEEDUP.name, lab.BACKWARD.name]
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("torch-op", LAB)


def test_cases_cover_layouts_checks_dtypes_and_grad_on_and_off():
    cs = lab.CASES
    assert {c[3] for c in cs} == set(lab.LAYOUTS)
    assert {c[5] for c in cs} == set(lab.CHECKS)
    assert {c[2] for c in cs} == set(lab.DTYPES)
    assert {c[4] for c in cs} == {True, False}
    assert {769, 511, 5125, 1} <= {c[1] for c in cs}
    assert {c[6] for c in cs} == set(lab.EPS_CHOICES)
    assert any(c[5] == "opcheck" and c[4] and c[2] == "bfloat16" for c in cs)
    spec = lab.TorchOp()
    assert all(spec.case_limits(p) is None for p in spec.visible_params())


def test_tolerances_reject_an_operator_that_drops_eps():
    """With eps = 0.1 (mean(h^2) is about 2) the output of eps = 0 is far outside the bound."""
    spec = lab.TorchOp()
    p = next(p for p in spec.visible_params() if p["eps"] == 0.1 and p["dtype"] != "float64")
    case = Case(spec.case_name(p), p, seed=5)
    data = spec.case_data(case)
    no_eps = lab.golden({**p, "eps": 1e-30}, data.inputs)
    dt = data.inputs["x"].dtype
    outs = {k: no_eps[k].astype(np.float32 if k == "rstd" else dt) for k in ("y", "h", "rstd")}
    assert not spec.compare(case, data, outs).ok


def test_tolerances_reject_a_backward_without_the_rstd_term_and_zeros():
    """The golden gradient without the mean(g n) term (the known-wrong backward) and all-zero
    outputs fail; the golden itself rounded to the output dtype passes with margin."""
    from reference_kernels.llm_ops import fused_add_rmsnorm_backward_golden

    spec = lab.TorchOp()
    for p in spec.visible_params():
        if not p["grad"] or p["dtype"] == "float64":
            continue
        case = Case(spec.case_name(p), p, seed=3)
        data = spec.case_data(case)
        ref = lab.golden(p, data.inputs)
        dt = data.inputs["x"].dtype
        outs = {k: ref[k].astype(np.float32 if k == "rstd" else dt)
                for k in ("y", "h", "rstd", "dx", "dresidual", "dweight")}
        got = spec.compare(case, data, outs)
        assert got.ok and got.budget_used < 0.5, (case.name, got.message)
        x, r, w = (lab.f64(data.inputs[k]) for k in ("x", "residual", "weight"))
        gy, gh = lab.f64(data.inputs["grad_out"]), lab.f64(data.inputs["grad_h"])
        h = x + r
        rstd = 1 / np.sqrt(np.mean(h * h, axis=1) + p["eps"])
        wrong = rstd[:, None] * gy * w + gh           # dh without -n mean(g n)
        bad = dict(outs, dx=wrong.astype(dt), dresidual=wrong.astype(dt))
        assert not spec.compare(case, data, bad).ok, case.name
        zeros = {k: np.zeros_like(v) for k, v in outs.items()}
        assert not spec.compare(case, data, zeros).ok, case.name
        dx, _, _ = fused_add_rmsnorm_backward_golden(x, r, w, gy, gh, p["eps"])
        assert np.allclose(dx, ref["dx"])


def test_a_course_without_torch_says_how_to_add_it():
    """With torch hidden (``sys.modules["torch"] = None``: ``import torch`` fails), kernellab
    imports, another lab's spec loads, ``torch_support.require`` raises with the hint, and this
    lab's spec names the same hint as the reason it cannot be graded (the grader's tier
    problem: one line, no traceback)."""
    code = (
        "import importlib.util, sys\n"
        "sys.modules['torch'] = None\n"
        "import kernellab\n"
        "from kernellab.topics import torch_support\n"
        "from grader.labs import get_spec_class\n"
        "get_spec_class('moe')()\n"
        "try:\n"
        "    torch_support.require()\n"
        "except ModuleNotFoundError as e:\n"
        "    print('HINT', e)\n"
        "print('TIER', get_spec_class('torch-op')().tier_problem())\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                               "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "HINT" in r.stdout and "make install" in r.stdout
    assert "TIER PyTorch is the course's optional extra" in r.stdout


@pytest.mark.timed
@pytest.mark.slow
def test_a_backward_that_runs_the_forward_again_fails_the_backward_rule(tmp_path):
    """The known-wrong recompute_in_backward: correct (every case it is graded on passes), but
    its backward costs a forward more, so the backward / forward time rule fails. Timed for
    real, so its verdict is this test's, not the manifest's; graded as the manifest grades
    torch-op's known-wrong ones (every case but the torch.compile one: tests/known.py)."""
    import known

    from grader.runner import grade

    sub = known.submission("torch-op", "recompute_in_backward", "wrong", tmp_path)
    rep = grade("torch-op", sub, **known.grading("torch-op", "wrong", "recompute_in_backward",
                                                 performance=True))
    assert rep.cases and all(c.passed for c in rep.cases), rep.to_text()
    rules = {r.name: r for r in rep.rules}
    assert rules[lab.BACKWARD.name].passed is False, rules[lab.BACKWARD.name]


def test_the_worker_compiles_into_its_own_folder(tmp_path):
    """Whatever cache folder the environment names (the suite's own process sets the
    project's), the worker side points torch.compile at the grading's folder: Inductor's
    artefacts are pickles, and one grading's must never load in another's. Only a notebook's
    own check (grader.local, which calls the spec's in_notebook) keeps the project's cache,
    and never writes into the notebook's folder. The sandbox drops the variables too."""
    def cache_dir(as_worker: bool, **env_vars) -> str:
        code = ("import os\nfrom grader.labs import get_spec_class\n"
                "from grader.labs.torch_op import measure\n"
                + ("" if as_worker else "get_spec_class('torch-op')().in_notebook()\n")
                + "measure._torch()\nprint(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
        env.update(env_vars, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")]))
        cwd = tmp_path / ("worker" if as_worker else "notebook")
        cwd.mkdir(exist_ok=True)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=cwd, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert cache_dir(True, TORCHINDUCTOR_CACHE_DIR="/elsewhere") == str(
        tmp_path / "worker" / "torch-cache" / "inductor")
    assert cache_dir(False, TORCHINDUCTOR_CACHE_DIR="/elsewhere") == "/elsewhere"
    from kernellab.topics.torch_support import CACHE

    assert cache_dir(False) == str(CACHE / "inductor")
    assert list((tmp_path / "notebook").iterdir()) == []
    from grader import sandbox

    assert "TORCHINDUCTOR_" in Path(sandbox.__file__).read_text()
