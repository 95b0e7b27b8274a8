"""The worker's OS sandbox (:func:`grader.sandbox.sandboxed`, bubblewrap): code inside it, as a
submission that got past the static rules would run, cannot read the hidden-case file (it reads
empty, or not at all), write
outside its work folder, or reach a server on the machine's network; it can write its work
folder. And a grading runs inside it: the same verdicts as without. ``make test`` installs
bubblewrap where it can; where no bwrap runs, the worker has resource limits only and these
tests say so (skipped), as ``kernellab doctor`` does."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.sandbox import os_sandbox, sandboxed

pytestmark = pytest.mark.skipif(os_sandbox() != "bubblewrap",
                                reason="no working bubblewrap here: resource limits only")


def run_inside(code: str, workdir: Path, hidden: Path) -> subprocess.CompletedProcess:
    cmd = sandboxed([sys.executable, "-c", textwrap.dedent(code)], writable=[workdir],
                    hidden=[hidden])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def places(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    hidden = tmp_path / "instructor" / "hidden.json"
    hidden.parent.mkdir()
    hidden.write_text('{"seed": 7, "cases": [{"N": 123}]}')
    return work, hidden


def test_the_hidden_case_file_cannot_be_read(places):
    work, hidden = places
    r = run_inside(f"""
        try:
            print(repr(open({str(hidden)!r}).read()))
        except OSError as e:
            print("refused", type(e).__name__)
        """, work, hidden)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("''", "refused PermissionError", "refused FileNotFoundError")


def test_writes_outside_the_work_folder_are_refused_and_inside_allowed(places):
    work, hidden = places
    outside = Path(__file__).resolve().parent / "written_by_the_sandbox.txt"
    r = run_inside(f"""
        import errno
        open({str(work / 'ok.txt')!r}, 'w').write('fine')
        try:
            open({str(outside)!r}, 'w').write('escaped')
            print('escaped')
        except OSError as e:
            print('refused', errno.errorcode[e.errno])
        """, work, hidden)
    assert r.stdout.split() == ["refused", "EROFS"], r.stdout + r.stderr
    assert (work / "ok.txt").read_text() == "fine" and not outside.exists()


def test_a_socket_to_a_server_on_this_machine_is_refused(places):
    work, hidden = places
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        r = run_inside(f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3)
                print("connected")
            except OSError as e:
                print("refused", type(e).__name__)
            """, work, hidden)
    finally:
        srv.close()
    assert r.stdout.startswith("refused"), r.stdout + r.stderr


def test_a_grading_inside_the_sandbox_gives_the_usual_verdicts():
    from grader.runner import grade

    sol = Path(__file__).resolve().parents[2] / "solutions" / "07a_npu_vector_add.ipynb"
    rep = grade("npu-vector-add", sol, run_performance=False)
    assert rep.passed and all(c.passed for c in rep.cases), rep.to_text()
