"""Test-wide settings: the grader's submission store goes to a temporary folder, so the suite
never writes into the user's ~/.cache."""

import os
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
