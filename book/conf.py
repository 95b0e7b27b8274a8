"""Sphinx configuration of the course site (``make book``): the chapters with their outputs, the
lab handouts (``labs/``, no solutions, not executed) and the instructor and maintainer
documentation (``docs/``), rendered by myst-nb (MyST Markdown and notebooks) with the
sphinx-book-theme.

Run from the project root with this folder as the configuration directory::

    sphinx-build -b html -c book . build/book

Chapters are executed through jupyter-cache (``nb_execution_mode = "cache"``): outputs are
cached under ``.kernellab-cache/book/`` keyed by a hash of the notebook's code cells, so a
rebuild after editing one chapter runs that chapter alone. ``make test`` fills the same cache
from its nbval run of the chapters (``book/nbval_cache.py``), so the suite builds the site
without running a chapter twice.

Sources: Sphinx documentation, "Configuration" (``include_patterns``, ``root_doc``); MyST-NB
documentation, "Execute and cache" (``nb_execution_mode``, ``nb_execution_cache_path``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from book.site import cache_path  # noqa: E402

project = "Kernel Lab"
author = "Kernel Lab contributors"
copyright = "Kernel Lab contributors"

extensions = ["myst_nb"]
root_doc = "book/index"
#: What the site is made of; everything else in the checkout is out of it.
include_patterns = ["book/*.md", "chapters/*.ipynb", "labs/*.ipynb", "docs/*.md",
                    "grader/labs/*/README.md", "README.md", "START_HERE.md"]
exclude_patterns = [".venv", ".git", "build", ".kernellab-cache", "work", "torch-cache",
                    "**/.ipynb_checkpoints"]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

#: Execute chapters once per content hash; never the lab handouts (their stubs raise).
nb_execution_mode = "cache"
nb_execution_cache_path = str(cache_path())
nb_execution_excludepatterns = ["labs/*"]
nb_execution_raise_on_error = True
nb_execution_timeout = 600
nb_execution_in_temp = False
nb_merge_streams = True

html_theme = "sphinx_book_theme"
html_title = "Kernel Lab"
html_theme_options = {"show_toc_level": 2}
#: ``build/book/index.html`` forwards to the start page (``book/index.html``).
html_extra_path = ["extra"]  # relative to this folder
