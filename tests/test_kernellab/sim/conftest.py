"""Fixtures of the sim-tier tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ptx_cache_dir(tmp_path_factory):
    """The module's PTX and ptxas reports go to a temporary cache folder (the top conftest
    only redirects the grader's), emptied of what the process cached before."""
    from kernellab.sim import ptx

    old = os.environ.get("KERNELLAB_CACHE_DIR")
    os.environ["KERNELLAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptx-cache"))
    ptx.clear_cache()
    yield
    if old is None:
        os.environ.pop("KERNELLAB_CACHE_DIR", None)
    else:
        os.environ["KERNELLAB_CACHE_DIR"] = old
