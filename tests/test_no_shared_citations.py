"""No shipped file cites a document the repository lacks.

Two checks over every shipped file (``*.py``, ``*.ipynb``, ``*.md``, ``*.toml``, ``Makefile``
that ``git ls-files`` lists or that exist untracked; outside a git checkout, every such file but
.git, .venv and caches), this test excepted:

* **Markdown documents resolve.** Every ``NAME.md`` or ``dir/NAME.md`` (and any other ``docs/...``
  path) a file mentions exists in the repository: relative to the citing file or to the repository
  root (a bare name may also be a page of ``docs/``), and an ``#anchor`` or a ``§ N`` section after
  it names a heading of that document. A document of another project is cited with its URL on the
  same line or a neighbouring one (e.g. gemmlowp's ``doc/quantization.md`` next to its GitHub
  address).
* **The developers' design notes are never cited.** The notes (:data:`NOTES`, in a
  ``../shared`` folder next to the repository) are for the course's developers and a student's
  clone has none of them: a citation names the primary source (paper and section, vendor
  document, library docs) or states the fact in the project's own words.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
#: the notes' names without their ``.md`` (spelt whole, this file would cite them itself)
NOTES = ("references", "COURSE", "NPU")
CITATION = re.compile("|".join(rf"{n}\.md" for n in NOTES) + r"|\.\./shared\b")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
SHIPPED_SUFFIXES = {".py", ".ipynb", ".md", ".toml"}
SHIPPED_NAMES = {"Makefile"}

#: a Markdown document named in text: ``README.md``, ``docs/sim.md``, ``../START_HERE.md``,
#: then an optional ``#anchor`` or `` § 3.2`` (a path after ``/`` or a word is part of a longer
#: name, e.g. a URL's path, and is not taken)
DOC_REF = re.compile(r"(?<![\w./-])((?:\.\./)*\w[\w./-]*?\.md)(?![\w-])"
                     r"(?:#([\w-]+)|`?,?\s*§\s*(\d+(?:\.\d+)*))?")
#: any other path into a ``docs/`` folder (``docs/``, ``docs/python-api``)
DOCS_PATH = re.compile(r"(?<![\w./-])(docs/(?:[\w-]+(?:\.[\w-]+)*/?)*)(?![\w/-])")
URL = re.compile(r"https?://\S+")


def _shipped(name: str) -> bool:
    p = Path(name)
    return p.suffix in SHIPPED_SUFFIXES or p.name in SHIPPED_NAMES


def project_files() -> list[str]:
    """Every file of the project (tracked or untracked, not ignored), as a root-relative path."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout
        files = sorted({f for f in out.decode("utf-8", "surrogateescape").split("\0") if f})
    except (OSError, subprocess.SubprocessError):
        files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return [f for f in files if f != SELF and not f.startswith(".venv/")
            and (ROOT / f).is_file()]  # a deleted file may still be in the index


def _lines(name: str) -> list[str] | None:
    try:
        return (ROOT / name).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:  # binary (images, ...)
        return None


def citations(files: list[str]) -> list[str]:
    """Lines that cite the developers' design notes."""
    hits = []
    for name in files:
        for n, line in enumerate(_lines(name) or (), 1):
            if CITATION.search(line):
                hits.append(f"{name}:{n}: {line.strip()[:120]}")
    return hits


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def headings(doc: Path) -> list[str]:
    return [ln.lstrip("#").strip() for ln in doc.read_text(encoding="utf-8").splitlines()
            if re.match(r"#{1,6} ", ln)]


def resolve(citing: str, ref: str) -> Path | None:
    """The repository's document ``ref`` names from the file ``citing``, or None."""
    here = (ROOT / citing).parent
    candidates = [here / ref, ROOT / ref]
    if "/" not in ref:
        candidates.append(ROOT / "docs" / ref)
    for c in candidates:
        c = c.resolve()
        if c.is_file() and c.is_relative_to(ROOT):
            return c
    return None


def _near_url(lines: list[str], i: int) -> bool:
    return any(URL.search(lines[j]) for j in range(max(0, i - 1), min(len(lines), i + 2)))


def missing_documents(files: list[str]) -> list[str]:
    """``file:line: ref`` for each Markdown document, anchor or section cited but absent."""
    bad = []
    for name in files:
        if not _shipped(name):
            continue
        lines = _lines(name) or []
        for i, line in enumerate(lines):
            in_url = [m.span() for m in URL.finditer(line)]
            for m in DOC_REF.finditer(line):
                ref, anchor, section = m.groups()
                if any(a <= m.start(1) < b for a, b in in_url):
                    continue  # part of a URL
                doc = resolve(name, ref)
                where = f"{name}:{i + 1}: {m.group(0)}"
                if doc is None:
                    if not _near_url(lines, i):
                        bad.append(f"{where} (no such file in the repository, and no URL)")
                    continue
                hs = headings(doc)
                if anchor and anchor not in {slug(h) for h in hs}:
                    bad.append(f"{where} (no heading with anchor #{anchor})")
                if section and not any(re.match(rf"(§\s*)?{re.escape(section)}\b", h)
                                       for h in hs):
                    bad.append(f"{where} (no section {section})")
            for m in DOCS_PATH.finditer(line):
                ref = m.group(1)
                if (ref.endswith(".md") or any(a <= m.start(1) < b for a, b in in_url)
                        or _near_url(lines, i)):
                    continue
                if not any((base / ref).exists() for base in ((ROOT / name).parent, ROOT)):
                    bad.append(f"{name}:{i + 1}: {ref} (no such path in the repository, "
                               "and no URL)")
    return bad


def test_the_scan_sees_the_project():
    files = project_files()
    assert "kernellab/__init__.py" in files and "README.md" in files, files[:20]
    assert any(f.startswith("chapters/") and f.endswith(".ipynb") for f in files)
    assert SELF not in files


def test_the_pattern_matches_each_kind_of_citation():
    r, c, n = (f"{name}.md" for name in NOTES)
    for text in (f"({r} §4.4)", f"`{r}` §5", f"{n} §6", c, "see ../shared/design"):
        assert CITATION.search(text), text
    for text in ("shared/local memory", "cuda.shared.array", "docs/grading.md"):
        assert not CITATION.search(text), text


@pytest.mark.parametrize("text, ref", [
    ("see docs/sim.md.", "docs/sim.md"), ("(`grading.md`)", "grading.md"),
    ("[x](../README.md#setup)", "../README.md"), ("NOTES.md §1.7", "NOTES.md"),
    ("README.md, START_HERE.md", "README.md"),
])
def test_the_document_pattern_finds_each_form(text, ref):
    assert DOC_REF.search(text).group(1) == ref, text


def test_the_document_check_flags_what_is_missing(tmp_path, monkeypatch):
    """A missing file, anchor, section or docs/ path is each reported; a present one, a URL's
    path and another project's file with its URL are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## 2. Rules of `x`\n", encoding="utf-8")
    (tmp_path / "m.py").write_text(
        '"""Bad: gone.md, docs/a.md#nope, docs/a.md §3, docs/api.\n\n'
        "Good: docs/a.md, a.md#title, docs/a.md#2-rules-of-x, docs/a.md §2, docs/,\n"
        "https://github.com/o/r/blob/main/doc/x.md and BLIS's docs/Performance.md\n"
        '(https://github.com/flame/blis)."""\n', encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = missing_documents(["m.py"])
    assert [b.split(": ", 1)[1] for b in bad] == [
        "gone.md (no such file in the repository, and no URL)",
        "docs/a.md#nope (no heading with anchor #nope)",
        "docs/a.md §3 (no section 3)",
        "docs/api (no such path in the repository, and no URL)"], bad


def test_no_file_cites_the_unshipped_design_notes():
    hits = citations(project_files())
    assert not hits, ("files cite the developers' design notes, which do not ship; cite the "
                      "primary source or state the fact:\n" + "\n".join(hits))


def test_every_cited_document_is_in_the_repository():
    bad = missing_documents(project_files())
    assert not bad, ("files cite Markdown documents, anchors or sections the repository lacks; "
                     "cite one it has, or another project's with its URL:\n" + "\n".join(bad))
