"""Suite-wide hooks: chapters that nbval runs cleanly fill the course site's output cache
(book/nbval_cache.py); a solution notebook's in-notebook grading cells are left to its lab's
tests, except in one notebook per tier."""

from pathlib import Path

import pytest

pytest_plugins = ("book.nbval_cache",)

SOLUTIONS = Path(__file__).resolve().parent / "solutions"
#: The solution notebooks whose ``local.check`` / ``local.performance`` cells nbval runs: one
#: per tier (cpu, sim, npu), for the in-notebook checker's own sake. In the others those cells
#: repeat what their lab's tests assert, the grading of the same solution
#: (tests/test_grader/labs/<lab>/), and nbval --nbval-lax would assert nothing of them.
LOCAL_CELLS_RUN_IN = ("01_gemm_cpu.ipynb", "02_gemm_cuda.ipynb", "07a_npu_vector_add.ipynb")
LOCAL_CALLS = ("local.check(", "local.check_all(", "local.performance(")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path)).resolve()
        cell = getattr(item, "cell", None)
        if (cell is None or path.parent != SOLUTIONS or path.name in LOCAL_CELLS_RUN_IN
                or not any(call in cell.source for call in LOCAL_CALLS)):
            continue
        item.add_marker(pytest.mark.skip(
            reason="the in-notebook grading of a solution its lab's tests grade "
                   f"(run in {', '.join(LOCAL_CELLS_RUN_IN)})"))
