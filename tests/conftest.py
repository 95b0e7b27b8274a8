"""Test-wide settings: the grader's submission store goes to a temporary folder, so the suite
never writes into the user's ~/.cache; figures a test opens are closed after it.

The tests mirror the packages (tests/test_kernellab/sim/ tests kernellab/sim/ ...). A lab's tests
live in tests/test_grader/labs/<lab>/ and carry that lab's marker (its id with underscores, declared
in pyproject.toml), so ``pytest -m gemm_cuda`` runs one lab's tests; tests/test_grader/labs/npu/
holds the tests the NPU labs share and carries their markers. A test whose verdict rests on
wall-clock ratios measured on this machine's CPU (a cpu lab's performance phase) is marked
``timed``: ``make test`` runs those last, alone, so that no other test's load slows one side of a
ratio; the rest of a lab's tests run beside the others. The helper modules the tests
import (known, one_lab_course, notebook_rules, lab_markers, browser) sit in tests/, which
pytest puts on sys.path because this file is there."""

import os
import sys
import tempfile

import pytest
from lab_markers import lab_markers

def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in lab_markers(item.path):
            item.add_marker(getattr(pytest.mark, name))


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
