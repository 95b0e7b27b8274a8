"""`make lab` serves the course: JupyterLab starts on this checkout and /api/status answers."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUPYTER = Path(sys.executable).parent / "jupyter"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not JUPYTER.exists() or shutil.which("make") is None,
                    reason="jupyter (the lab extra) or make not installed")
def test_make_lab_serves_the_course(tmp_path):
    port = _free_port()
    env = dict(os.environ, LAB_PORT=str(port), JUPYTER_RUNTIME_DIR=str(tmp_path))
    proc = subprocess.Popen(["make", "-s", "lab"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = []
    try:
        token, status = None, None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and status is None:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            log.append(line)
            m = re.search(rf"127\.0\.0\.1:{port}(/lab[^?\s]*)\?token=([0-9a-f]+)", line)
            if m:
                assert m.group(1) == "/lab/tree/START_HERE.md", line  # opens on the path
                token = m.group(2)
                url = f"http://127.0.0.1:{port}/api/status?token={token}"
                for _ in range(60):  # the URL can be printed just before the socket listens
                    try:
                        status = urllib.request.urlopen(url, timeout=10).read().decode()
                        break
                    except OSError:
                        time.sleep(0.5)
        assert status is not None, "".join(log[-30:])
        assert '"started"' in status
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
