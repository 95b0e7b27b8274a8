"""Helpers of the tests that drive a real browser (tests/test_site/): which Chromium to drive,
a free local port."""

from __future__ import annotations

import os
import shutil
import socket

#: where Debian, Ubuntu and Chrome put the browser; $KERNELLAB_CHROMIUM wins
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """The Chromium binary to drive: ``$KERNELLAB_CHROMIUM`` or the first of :data:`BROWSERS`
    on PATH; None when there is none."""
    env = os.environ.get("KERNELLAB_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
