"""JupyterLab in a real browser, started as ``make lab`` starts it (the Makefile's own recipe,
on a free port): a lab notebook opens and its first cells run with their output and figure
seen; a chapter opens and runs to its first figure.

The server's root is a temporary copy of the notebooks it opens, and Jupyter's settings,
workspaces, data, config and runtime folders are temporary ones: the notebooks in the checkout,
``work/`` and the user's Jupyter files are never written (the kernels compile into
``.kernellab-cache/`` as any run does). Skipped where ``make`` or JupyterLab is missing, or where
``make lab`` would first reinstall ``.venv`` (run ``make install``)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser import free_port

pytestmark = pytest.mark.site
pytest.importorskip("jupyterlab", reason="JupyterLab is in the lab extra")

ROOT = Path(__file__).resolve().parents[2]
#: (notebook, the code cell whose output holds the first figure): the cells up to it are run
OPENED = [("labs/01_gemm_cpu.ipynb", 1), ("chapters/02_cuda_tiled_gemm.ipynb", 1)]
#: user settings of the temporary settings folder: every cell in the page (no windowing, so
#: that the n-th cell in the page is the notebook's n-th) and no news pop-up
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


def _lab_would_install() -> str | None:
    """Why ``make lab`` cannot be started as is (no make; its dry run shows an install), or
    None."""
    if shutil.which("make") is None:
        return "no make on this machine"
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True)
    if dry.returncode != 0 or "pip install" in dry.stdout:
        return ".venv is out of date with pyproject.toml: make lab would reinstall it first " \
               "(run make install)"
    return None


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    why = _lab_would_install()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("jupyterlab")
    root = tmp / "root"
    for rel, _ in OPENED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    for name, value in SETTINGS.items():
        (tmp / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "settings" / name).write_text(json.dumps(value))
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"))
    log = open(tmp / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_PORT={port}", f"LAB_ROOT={root}",
         f"LAB_ARGS=--IdentityProvider.token={token} --ServerApp.port_retries=0"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp / "jupyterlab.log")
                                .read_text()[-3000:])
                time.sleep(0.5)
        yield base, token, root
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.parametrize(("rel", "figure_cell"), OPENED, ids=[o[0] for o in OPENED])
def test_a_notebook_opens_and_its_first_cells_run(jupyterlab, page, rel, figure_cell):
    base, token, root = jupyterlab
    cells = nbformat.read(str(ROOT / rel), as_version=4).cells
    code_at = [i for i, c in enumerate(cells) if c.cell_type == "code"]
    page.goto(f"{base}/lab/tree/{rel}?token={token}")
    panel = page.locator(".jp-NotebookPanel:visible")
    panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
        timeout=90_000)
    in_page = panel.locator(".jp-Notebook .jp-Cell")
    in_page.nth(len(cells) - 1).wait_for(state="attached", timeout=60_000)  # all rendered
    assert in_page.count() == len(cells)
    in_page.first.locator(".jp-InputPrompt").click()  # select the first cell
    page.keyboard.press("Escape")                     # command mode
    for _ in range(code_at[figure_cell] + 1):         # run each cell and go to the next
        page.keyboard.press("Shift+Enter")
        page.wait_for_timeout(250)
    target = in_page.nth(code_at[figure_cell])
    # the prompt reads [n] once the n-th execution is done ([*] while it runs)
    target.locator(".jp-InputPrompt").filter(has_text=f"[{figure_cell + 1}]").wait_for(
        timeout=180_000)
    errors = panel.locator("[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()
    for k in range(figure_cell + 1):
        prompt = in_page.nth(code_at[k]).locator(".jp-InputPrompt").inner_text()
        assert f"[{k + 1}]" in prompt, f"code cell {k} did not run: {prompt!r}"
    figure = target.locator(".jp-OutputArea-output img")
    figure.wait_for(timeout=30_000)
    assert figure.evaluate("img => img.naturalWidth") > 100
