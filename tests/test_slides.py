"""Lecture decks (:mod:`grader.slides`): every chapter carries the slide metadata the rule
gives (a chapter edited without it fails here: ``python -m grader.slides --mark``), opens
with a title slide and a slide per section, skips its sources, and converts to a reveal.js
deck with a section per slide (``make slides`` does every chapter, run first)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest

from grader import slides

CHAPTERS = sorted(slides.CHAPTERS.glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_carries_the_slide_metadata_of_the_rule(path):
    nb = nbformat.read(path, as_version=4)
    assert not slides.mark(copy.deepcopy(nb)), f"run python -m grader.slides --mark {path}"
    kinds = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
    assert kinds[0] == "slide" and kinds.count("slide") >= 3
    for c, k in zip(nb.cells, kinds):
        if c.cell_type == "markdown" and c.source.startswith("## ") and k != "skip":
            assert k == "slide", c.source[:60]
        if c.cell_type == "markdown" and re.match(r"##\s+Sources", c.source):
            assert k == "skip"


def test_a_chapter_converts_to_a_deck_with_a_section_per_slide(tmp_path):
    path = next(p for p in CHAPTERS if p.stem.startswith("04"))
    out = slides.write_deck(path, tmp_path)
    page = out.read_text(encoding="utf-8")
    nb = nbformat.read(path, as_version=4)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
    # reveal.js: a <section> per slide, and one more around each stack of sub-slides
    n = kinds.count("slide") + kinds.count("subslide")
    assert n <= page.count("<section") <= n + kinds.count("slide")
    assert "Reveal.initialize" in page and Path(out).name == f"{path.stem}.slides.html"


def test_a_deck_takes_the_outputs_of_the_sites_cached_run(tmp_path, monkeypatch):
    """With the site's cache holding a run of the same code, the deck shows that run's outputs
    and the chapter is not run again (its cached output differs from what running prints)."""
    jc = pytest.importorskip("jupyter_cache.base")
    monkeypatch.setenv("KERNELLAB_BOOK_CACHE", str(tmp_path / "cache"))
    from book.site import open_cache

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('run now')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = tmp_path / "ch.ipynb"
    nbformat.write(nb, path)
    ran = nbformat.read(path, as_version=4)
    ran.cells[0].execution_count = 1
    ran.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                   text="from the cache\n")]
    open_cache().cache_notebook_bundle(jc.CacheBundleIn(ran, str(path)))
    html = slides.write_deck(path, tmp_path / "out", execute=True).read_text()
    assert "from the cache" in html
