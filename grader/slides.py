"""Lecture decks from the chapters: each chapter's cells carry Jupyter's ``slideshow`` metadata
(what RISE in JupyterLab and ``jupyter nbconvert --to slides`` read), and ``make slides``
writes one reveal.js deck per chapter into ``build/slides/``, with the outputs of the course
site's cached run where the chapter's code matches it (after ``make test`` or ``make book``),
else running the chapter.

The rule (:func:`slide_type`): the chapter's first cell and every ``## `` section open a slide,
every ``### `` subsection a sub-slide (reveal.js's vertical stack), the "Sources" and
"Appendix" sections are skipped, and every other cell joins the slide above it. A chapter whose
committed metadata differs from the rule fails ``tests/test_slides.py``; ``python -m
grader.slides --mark`` writes it.

    python -m grader.slides --mark            # the metadata, into chapters/*.ipynb
    python -m grader.slides [--execute] [--out build/slides] [CHAPTER ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
SKIPPED = re.compile(r"^##\s+(Sources|Appendix)\b")

__all__ = ["slide_type", "mark", "write_deck", "main"]


def slide_type(cell, first: bool, skipping: bool) -> tuple[str, bool]:
    """``(slide_type, skipping)`` of ``cell`` (module docstring); ``skipping``: inside a skipped
    section."""
    src = cell.get("source", "")
    src = "".join(src) if isinstance(src, list) else src
    if cell.get("cell_type") == "markdown":
        head = src.lstrip()
        if SKIPPED.match(head):
            return "skip", True
        if first or head.startswith("# ") or head.startswith("## "):
            return "slide", False
        if head.startswith("### "):
            return ("skip" if skipping else "subslide"), skipping
    return ("skip" if skipping else "-"), skipping


def mark(nb) -> bool:
    """Set every cell's ``metadata.slideshow.slide_type`` by the rule; True if anything
    changed."""
    changed, skipping = False, False
    for i, cell in enumerate(nb["cells"]):
        kind, skipping = slide_type(cell, i == 0, skipping)
        meta = cell.setdefault("metadata", {})
        if meta.get("slideshow", {}).get("slide_type") != kind:
            meta["slideshow"] = {"slide_type": kind}
            changed = True
    return changed


def _site_cached(nb):
    """``nb`` with the outputs of the course site's cached run of the same code (``make test``
    and ``make book`` fill it: book/site.py), or None when there is none (or no book extra)."""
    try:
        from book.site import open_cache
        cache = open_cache()
        cache.match_cache_notebook(nb)
    except (ImportError, KeyError):
        return None
    return cache.merge_match_into_notebook(nb)[1]


def write_deck(path: Path, out_dir: Path, execute: bool = False) -> Path:
    """A reveal.js deck of the chapter at ``path`` (with ``execute``, its outputs: those of the
    course site's cached run of the same code, else its cells run now) in ``out_dir``; returns
    the HTML file. Raises nbconvert's errors (a cell that fails)."""
    import nbformat
    from nbconvert import SlidesExporter

    nb = nbformat.read(path, as_version=4)
    if execute:
        cached = _site_cached(nb)
        if cached is not None:
            nb = cached
        else:
            from nbclient import NotebookClient

            NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(path.parent)}}
                           ).execute()
    body, _ = SlidesExporter().from_notebook_node(nb)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / (path.stem + ".slides.html")
    out.write_text(body, encoding="utf-8")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.slides",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", type=Path, help="chapter notebooks (default: all)")
    ap.add_argument("--mark", action="store_true", help="write the slide metadata into the "
                    "chapters (nothing else)")
    ap.add_argument("--execute", action="store_true", help="run each chapter first, so that "
                    "the deck has its outputs")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "slides")
    args = ap.parse_args(argv)
    paths = args.chapters or sorted(CHAPTERS.glob("*.ipynb"))
    import nbformat

    for p in paths:
        if args.mark:
            nb = nbformat.read(p, as_version=4)
            if mark(nb):
                nbformat.write(nb, p)
                print(f"marked {p}")
            continue
        print(f"wrote {write_deck(p, args.out, args.execute)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
