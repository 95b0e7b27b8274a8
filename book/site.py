"""Where the course site's pieces live, shared by ``book/conf.py``, the nbval bridge
(``book/nbval_cache.py``) and the site's tests.

The executed chapters are cached with jupyter-cache, keyed by a hash of each notebook's code
cells and kernelspec (``jupyter_cache.cache.main.JupyterCacheBase.create_hashed_notebook``).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The chapters: executed, cached, rendered with their outputs.
CHAPTERS = ROOT / "chapters"


def cache_path() -> Path:
    """The jupyter-cache folder: ``$KERNELLAB_BOOK_CACHE``, else
    ``.kernellab-cache/book/jupyter-cache`` in the checkout (git ignores it)."""
    env = os.environ.get("KERNELLAB_BOOK_CACHE")
    return Path(env) if env else ROOT / ".kernellab-cache" / "book" / "jupyter-cache"


def open_cache():
    """The jupyter-cache at :func:`cache_path` (created when missing)."""
    from jupyter_cache import get_cache

    path = cache_path()
    path.mkdir(parents=True, exist_ok=True)
    return get_cache(str(path))


def cached_record(notebook: Path):
    """The cache record whose code matches ``notebook`` now, or None."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    try:
        return open_cache().match_cache_notebook(nb)
    except KeyError:
        return None
