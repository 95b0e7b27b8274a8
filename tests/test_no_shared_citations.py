"""No project file cites the developers' design notes, which do not ship with the course.

The notes (three Markdown files, :data:`NOTES`, in a ``../shared`` folder next to the
repository) are for the course's developers; a student's clone has none of them. A citation
must name the primary source instead (paper and section, vendor document, library docs) or
state the fact in the project's own words. Scanned: every file ``git ls-files`` lists (or,
outside a git checkout, every file under the repository but .git, .venv and caches), except
this test.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
#: the notes' names without their ``.md`` (spelt whole, this file would cite them itself)
NOTES = ("references", "COURSE", "NPU")
CITATION = re.compile("|".join(rf"{n}\.md" for n in NOTES) + r"|\.\./shared\b")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def project_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout
        files = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
    except (OSError, subprocess.SubprocessError):
        files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return [f for f in files if f != SELF and not f.startswith(".venv/")]


def citations(files: list[str]) -> list[str]:
    hits = []
    for name in files:
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary (images, ...)
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                hits.append(f"{name}:{n}: {line.strip()[:120]}")
    return hits


def test_the_scan_sees_the_project():
    files = project_files()
    assert "kernellab/__init__.py" in files and "README.md" in files, files[:20]
    assert SELF not in files


def test_the_pattern_matches_each_kind_of_citation():
    r, c, n = (f"{name}.md" for name in NOTES)
    for text in (f"({r} §4.4)", f"`{r}` §5", f"{n} §6", c, "see ../shared/design"):
        assert CITATION.search(text), text
    for text in ("shared/local memory", "cuda.shared.array", "docs/grading.md"):
        assert not CITATION.search(text), text


def test_no_file_cites_the_unshipped_design_notes():
    hits = citations(project_files())
    assert not hits, ("files cite the developers' design notes, which do not ship; cite the "
                      "primary source or state the fact:\n" + "\n".join(hits))
