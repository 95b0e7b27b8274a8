"""Every chapter notebook keeps the house rules (tests/notebook_rules.py): committed without
outputs, and every number it shows computed when it runs — no measured figure typed into its
code or quoted in its prose. One parametrised test for all chapters, so a new chapter is
covered the day it lands."""

from __future__ import annotations

from pathlib import Path

import notebook_rules as rules
import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
PATTERNS = (rules.MEASURED, rules.DECIBELS)


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_committed_without_outputs(notebook):
    assert not rules.cells_with_outputs(notebook)


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_code_cells_hard_code_no_measured_figure(notebook):
    bad = rules.hardcoded_figures(notebook, PATTERNS)
    assert not bad, f"code cells hard-code figures (cell index, literal): {bad}"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_prose_quotes_no_measured_figure(notebook):
    bad = rules.quoted_figures(notebook, PATTERNS)
    assert not bad, f"markdown cells quote figures the code could contradict: {bad}"


NOTEBOOKS = CHAPTERS + sorted(
    (Path(__file__).resolve().parents[2] / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS,
                         ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_no_control_characters_in_sources(notebook):
    assert not rules.control_characters(notebook)


def test_every_chapter_is_covered():
    assert len(CHAPTERS) >= 6
