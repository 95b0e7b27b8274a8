"""The course site's and JupyterLab's tests in a real browser: Debian's Chromium (``make test``
installs the package where it can) driven by Playwright, never a downloaded browser. Marked
``site``: ``make test`` runs them after the chapters have run, so the site is built from the
outputs that run cached (book/nbval_cache.py).

A failing test keeps a screenshot of its page in ``build/test-artifacts/`` (the path is in the
failure report)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import chromium_path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts"


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium on this machine (make test installs Debian's `chromium` "
                    "package where it runs as root; or set KERNELLAB_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: Chromium's own sandbox cannot start as root (CI containers)
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, a screenshot of the test's page, named in the report."""
    outcome = yield
    rep = outcome.get_result()
    pg = getattr(item, "funcargs", {}).get("page")
    if rep.when != "call" or not rep.failed or pg is None:
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / (re.sub(r"[^\w.-]+", "_", item.name) + ".png")
    try:
        pg.screenshot(path=str(shot), full_page=True)
        rep.sections.append(("screenshot", f"the failing page: {shot}"))
    except Exception as exc:  # the page may be gone; the test's own error stands
        rep.sections.append(("screenshot", f"none taken: {exc}"))


@pytest.fixture
def page(browser):
    """A fresh page; its script errors and failed requests are collected in
    ``page.problems``. A screenshot is kept when the test fails (the hook above)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.problems = []
    pg.on("pageerror", lambda exc: pg.problems.append(f"page error: {exc}"))
    pg.on("requestfailed", lambda r: pg.problems.append(f"request failed: {r.url}"))
    yield pg
    context.close()
