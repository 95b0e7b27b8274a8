"""A pytest plugin (loaded by the root ``conftest.py``): a chapter that nbval ran top to bottom
without an error goes into the course site's jupyter-cache (:mod:`book.site`), so that
``make book`` after ``make test`` renders it without running it again.

nbval keeps each cell's outputs in ``IPyNbCell.test_outputs`` (nbval 0.11, ``plugin.py``); the
notebook is put together from them in cell order, with execution counts 1, 2, ... as a fresh run
gives, and stored with ``JupyterCacheBase.cache_notebook_bundle``. The record's data holds the
run's seconds, in total (the field myst-nb reads) and per cell. A chapter with a failed or
skipped cell is not cached, and a chapter that cannot be stored (a read-only checkout, a cache
of another jupyter-cache version) is left out with a warning: the site then runs it itself.
"""

from __future__ import annotations

import fcntl
import warnings
from pathlib import Path

import pytest

from book.site import CHAPTERS, cache_path, open_cache

#: notebook path -> {cell_num: (outputs, seconds)}, for notebooks whose cells all passed so far
_runs: dict[Path, dict[int, tuple[list, float]]] = {}
_broken: set[Path] = set()


def _chapter(item) -> Path | None:
    path = Path(str(item.path)).resolve()
    if path.suffix != ".ipynb" or path.parent != CHAPTERS or not hasattr(item, "test_outputs"):
        return None
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    path = _chapter(item)
    if path is None or call.when != "call":
        return
    report = outcome.get_result()
    if not report.passed or item.test_outputs is None:
        _broken.add(path)
        return
    cells = _runs.setdefault(path, {})
    cells[item.cell_num] = (list(item.test_outputs), call.duration)
    n_code = sum(c.cell_type == "code" for c in item.parent.nb.cells)
    if len(cells) == n_code and path not in _broken:
        del _runs[path]
        try:
            _store(path, item.parent.nb, cells)
        except Exception as exc:  # the tests' verdicts stand; only the site loses a shortcut
            warnings.warn(f"{path.name} not stored in the site's cache ({cache_path()}): "
                          f"{type(exc).__name__}: {exc}", stacklevel=1)


def _store(path: Path, nb, cells: dict[int, tuple[list, float]]) -> None:
    import copy

    import nbformat
    try:
        from jupyter_cache.base import CacheBundleIn
    except ImportError:  # no book extra: there is no site to cache for
        return

    nb = copy.deepcopy(nb)
    seconds = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        outputs, duration = cells[i]
        cell.execution_count = i + 1
        cell.outputs = []
        for out in outputs:
            out = nbformat.from_dict(dict(out))
            if out.output_type == "execute_result":
                out.execution_count = i + 1
            cell.outputs.append(out)
        seconds.append(round(duration, 3))
    nbformat.validate(nb)
    lock = cache_path().with_name("jupyter-cache.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:  # two xdist workers may finish chapters at once
        fcntl.flock(fh, fcntl.LOCK_EX)
        open_cache().cache_notebook_bundle(
            CacheBundleIn(nb, str(path), data={"execution_seconds": round(sum(seconds), 3),
                                               "cell_seconds": seconds,
                                               "executed_by": "nbval"}),
            check_validity=True, overwrite=True)
