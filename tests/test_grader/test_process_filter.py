"""The worker forbids itself new processes (:mod:`kernellab.machine.process_filter`, a seccomp
filter): code that got past the static rules (here they are switched off, as a route around them
would) cannot start a process or run a program by any of the usual routes, and the report says
why in plain words; the grading still gets its PTX compile helper when it needs one (the stand-in
of :meth:`kernellab.sim.ptx.helper._Helper.prepare`). Where the platform has no seccomp these
tests say so (skipped), as ``kernellab doctor`` does."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import runner
from grader.labs import get_spec_class
from kernellab.machine.process_filter import REFUSED, unavailable
from grader.runner import grade
from grader.sandbox import os_sandbox

pytestmark = pytest.mark.skipif(unavailable() is not None,
                                reason=f"no seccomp filter here: {unavailable()}")

ROOT = Path(__file__).resolve().parents[2]


def _grade_unchecked(monkeypatch, tmp_path, lab: str, source: str):
    """Grade ``source`` for ``lab`` with the static rules switched off (no performance phase,
    first case only), a CUDA lab on the sim tier (the gpu tier keeps no filter yet)."""
    monkeypatch.setattr(runner, "check_source", lambda *a, **k: [])
    monkeypatch.setenv("KERNELLAB_DEVICE", "sim")
    sub = tmp_path / "submission.py"
    sub.write_text(textwrap.dedent(source))
    first = []
    return grade(lab, sub, run_performance=False,
                 only=lambda case: not first and not first.append(case))


#: clone(2)'s number by machine: with flags SIGCHLD and no stack it is fork(2)
CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220}.get(platform.machine())


@pytest.mark.parametrize("lab", ["gemm-cuda", "gemm-cpu"])
def test_every_route_to_a_new_process_is_refused(monkeypatch, tmp_path, lab):
    marker = tmp_path / "escaped.txt"
    rep = _grade_unchecked(monkeypatch, tmp_path, lab, f"""
        import ctypes, os, subprocess

        def raw_clone():  # clone(2) by its number, past the C library's wrappers
            pid = ctypes.CDLL(None, use_errno=True).syscall({CLONE_SYSCALL}, 17, 0, 0, 0, 0)
            if pid == 0:
                os._exit(0)
            if pid < 0:
                raise OSError(ctypes.get_errno(), "clone refused")

        def children():
            me = os.getpid()
            return [int(p) for t in os.listdir(f"/proc/{{me}}/task")
                    for p in open(f"/proc/{{me}}/task/{{t}}/children").read().split()]

        def take_over_a_child():  # e.g. the compile helper's stand-in, started before the filter
            for pid in children():
                open(f"/proc/{{pid}}/mem", "r+b").close()
            return "no child" if not children() else None

        routes = {{
            "subprocess.run": lambda: subprocess.run(["/bin/true"]),
            "os.fork": os.fork,
            "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {{}}),
            "os.execv": lambda: os.execv("/bin/true", ["true"]),
            "os.popen": lambda: os.popen("true").close(),
            "syscall clone": raw_clone if {CLONE_SYSCALL is not None} else None,
            "child's memory": take_over_a_child,
        }}
        refused = []
        for name, route in routes.items():
            try:
                if route is None or route() is not None:
                    refused.append(name + " (not tried)")
            except OSError:
                refused.append(name)
        os.system("echo escaped > {marker}")  # returns -1: system(3) could not fork
        raise RuntimeError("refused: " + ", ".join(refused) + ".")
        """)
    routes = "subprocess.run, os.fork, os.posix_spawn, os.execv, os.popen"
    assert not rep.passed and f"refused: {routes}, " in (rep.fatal or ""), rep.fatal
    if CLONE_SYSCALL is not None:
        assert "syscall clone, " in rep.fatal, rep.fatal
    # a child of the worker (gemm-cuda: the PTX helper's stand-in) is out of its reach: it is
    # not dumpable, and inside bubblewrap the worker has no CAP_SYS_PTRACE even as root
    if lab == "gemm-cuda" and (os_sandbox() == "bubblewrap" or os.geteuid() != 0):
        assert "child's memory." in rep.fatal, rep.fatal
    assert not marker.exists()


def test_the_report_says_the_worker_forbade_new_processes(monkeypatch, tmp_path):
    rep = _grade_unchecked(monkeypatch, tmp_path, "gemm-cpu", """
        def gemm(A, B, C):
            C[:] = 0.0
        """)
    assert rep.sandbox == f"{os_sandbox()}, no new processes", rep.sandbox
    assert f"worker: {rep.sandbox}" in rep.to_text()


def test_a_refused_process_is_reported_in_plain_words(monkeypatch, tmp_path):
    rep = _grade_unchecked(monkeypatch, tmp_path, "gemm-cuda", """
        import subprocess

        subprocess.run(["nvidia-smi"])
        """)
    assert not rep.passed and REFUSED in (rep.fatal or ""), rep.fatal
    assert "line 4" in rep.fatal or "cell" in rep.fatal, rep.fatal


def test_the_compile_helper_starts_under_the_filter_from_its_stand_in():
    """A cold PTX cache (``use_cache=False``): the first compile turns the stand-in started
    before the filter into the helper, which forbids itself new processes too."""
    from kernellab.sim import ptx

    if not ptx.ptx_available()[0]:
        pytest.skip(f"no GPU compile here: {ptx.ptx_available()[1]}")
    code = textwrap.dedent("""
        import os
        os.environ["KERNELLAB_DEVICE"] = "sim"
        import kernellab.sim  # noqa: F401  numba.cuda is the simulator from here on
        from numba import cuda
        from kernellab.sim import ptx
        from kernellab.machine.process_filter import forbid_new_processes

        @cuda.jit
        def add_one(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] += 1.0

        import numpy as np
        ptx.prepare()
        forbid_new_processes()
        try:
            os.posix_spawn("/bin/true", ["true"], {})
            print("spawned")
        except PermissionError:
            print("refused")
        r = ptx.compile_kernel(add_one, (np.zeros(4, np.float32),), use_cache=False)
        print("compiled", ".entry" in r.ptx)
        status = open(f"/proc/{ptx._helper.pid}/status").read()
        print("helper-filtered", "Seccomp:\t2" in status)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.stdout.split() == ["refused", "compiled", "True", "helper-filtered", "True"], \
        out.stdout + out.stderr


def test_which_labs_are_filtered():
    assert get_spec_class("gemm-cpu")().forbids_new_processes()
    assert get_spec_class("npu-matmul")().forbids_new_processes()
    assert not get_spec_class("torch-op")().forbids_new_processes()  # torch.compile runs g++


def test_with_the_sandbox_off_nothing_is_forbidden_and_the_report_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_SANDBOX", "none")
    rep = _grade_unchecked(monkeypatch, tmp_path, "gemm-cuda", """
        import subprocess

        subprocess.run(["/bin/true"], check=True)
        """)
    assert rep.sandbox == "none, new processes allowed", (rep.sandbox, rep.fatal)
