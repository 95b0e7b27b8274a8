"""Test-wide settings: the grader's submission store goes to a temporary folder, so the suite
never writes into the user's ~/.cache; figures a test opens are closed after it."""

import os
import sys
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _kernellab_cache():
    old = os.environ.get("KERNELLAB_CACHE")
    with tempfile.TemporaryDirectory(prefix="kernellab-test-cache-") as d:
        os.environ["KERNELLAB_CACHE"] = d
        yield d
    if old is None:
        os.environ.pop("KERNELLAB_CACHE", None)
    else:
        os.environ["KERNELLAB_CACHE"] = old


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test opened (the chapters' plot helpers leave theirs
    open for the notebook to show), if the test imported pyplot at all."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")
