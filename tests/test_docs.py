"""The student documents: README.md stays short and free of the labs' spoilers, START_HERE.md
lists every lab in the order and with the facts of the lab specs, and no link in them points at
a file that does not exist (tests/test_no_shared_citations.py checks every document any shipped
file cites, and keeps out the design notes that do not ship)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.labs import all_specs
from grader.labs._cuda import CudaLab

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = ROOT / "START_HERE.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SHIPPED = [README, START, *DOCS]


def _text(p: Path) -> str:
    return p.read_text(encoding="utf-8")


def _expected_tier(spec) -> str:
    """The tier a lab runs on without a GPU (the CUDA labs choose ``gpu`` with one)."""
    return "sim" if isinstance(spec, CudaLab) else spec.tier


def test_readme_is_short():
    n = len(_text(README).splitlines())
    assert n <= 150, f"README.md has {n} lines; the students' README keeps to 150"


def test_readme_gives_the_commands_a_student_needs():
    text = _text(README)
    for cmd in ("make lab", "make test", "make check", "kernellab start", "kernellab grade",
                "--no-perf", "--quiet", "--json", "local.check", "work/", "START_HERE.md",
                "has no attribute 'TIER'", "print(kernellab.__file__)"):
        assert cmd in text, f"README.md does not mention {cmd!r}"


def test_readme_spoils_no_trap():
    """Thresholds and known-wrong submissions belong in docs/grading.md."""
    text = _text(README)
    for word in ("tests/submissions", "submissions/wrong", "known-wrong", "threshold",
                 "hidden-case file"):
        assert word not in text, f"README.md mentions {word!r}: move it to docs/grading.md"


def _start_rows() -> list[str]:
    rows = [ln for ln in _text(START).splitlines() if ln.startswith("| ") and "`" in ln]
    return [r for r in rows if "work/" in r]


def test_start_here_lists_every_lab_in_order():
    rows = _start_rows()
    specs = all_specs()
    assert len(rows) == len(specs), (len(rows), [s.lab_id for s in specs])
    for row, spec in zip(rows, specs):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert f"`{spec.lab_id}`" in cells, (spec.lab_id, row)
        assert f"`work/{spec.notebook}`" in cells, (spec.notebook, row)
        assert any(c.startswith(f"`{_expected_tier(spec)}`") for c in cells), (spec.lab_id, row)


def test_start_here_names_real_chapters():
    names = set(re.findall(r"`(\d\d_[a-z0-9_]+\.ipynb)`", _text(START)))
    chapters = {p.name for p in (ROOT / "chapters").glob("*.ipynb")}
    labs = {s.notebook for s in all_specs()}
    assert chapters <= names, sorted(chapters - names)
    assert names <= chapters | labs, sorted(names - chapters - labs)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    # [text](path) or [text](path#anchor), a path with a letter in it (not `kernel[g, b](...)`)
    for target in re.findall(r"\]\((?=[\w./-]*[A-Za-z])([\w./-]+)(?:#[^)]*)?\)", _text(path)):
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which is missing"


def test_docs_index_lists_every_page():
    index = _text(ROOT / "docs" / "README.md")
    for p in DOCS:
        if p.name != "README.md":
            assert f"]({p.name})" in index, f"docs/README.md does not list {p.name}"


def _doc_sections() -> dict[str, str]:
    """docs/grading.md's sections by the lab ids their headings name."""
    out = {}
    for sec in re.split(r"(?m)^## ", _text(ROOT / "docs" / "grading.md")):
        for lab in re.findall(r"`([a-z0-9-]+)`", sec.splitlines()[0] if sec else ""):
            out[lab] = sec
    return out


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.lab_id)
def test_grading_doc_states_each_threshold_as_the_spec_sets_it(spec):
    """Every MIN_*/MAX_* threshold constant of a lab's spec module appears in that lab's section
    of docs/grading.md with its comparison (``≥ 8×``, ``≤ 1.5 B``, ``≥ 50%``): a changed
    threshold fails here until the documentation says the same. Size limits of hidden cases
    and of the checks (``MAX_HIDDEN_*``, ``MAX_CASE_*``, ``MAX_CHECK_*``) are not rules."""
    import importlib

    sec = _doc_sections().get(spec.lab_id)
    assert sec, f"docs/grading.md has no section for {spec.lab_id}"
    mod = importlib.import_module(type(spec).__module__)
    missing = []
    for name, v in sorted(vars(mod).items()):
        if (not re.match(r"(MIN|MAX)_", name) or re.match(r"MAX_(HIDDEN|CASE|CHECK)_", name)
                or isinstance(v, bool) or not isinstance(v, (int, float))):
            continue
        op = "(?:≥|>=)" if name.startswith("MIN") else "(?:≤|<=)"
        shown = {f"{v:g}"} | ({f"{100 * v:g}%"} if v <= 1 else set())
        if not any(re.search(op + r"\s*" + re.escape(n) + r"(?![\d.])", sec) for n in shown):
            missing.append(f"{name} = {v:g}")
    assert not missing, f"docs/grading.md's {spec.lab_id} section does not state {missing}"
