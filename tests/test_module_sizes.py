"""The size gate: no module outside the kernel ladders is over MAX_LINES lines. A module that
grows past it has more than one job: split it along its seams (the ladders in
kernellab/kernels keep every version side by side, llm.c dev/cuda style, so they are exempt)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800
PACKAGES = ("kernellab", "grader", "reference_kernels", "benchmarks")
LADDERS = ROOT / "kernellab" / "kernels"


def gated() -> list[Path]:
    out = []
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if LADDERS in p.parents or "submissions" in p.relative_to(ROOT).parts:
                continue
            out.append(p)
    return out


def test_no_module_outside_the_ladders_is_over_the_gate():
    assert len(gated()) > 50  # the walk found the packages
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p in gated()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not over, f"over {MAX_LINES} lines (split by job):\n" + "\n".join(over)
