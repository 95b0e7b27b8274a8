"""A one-lab course in a folder, for the release and workspace tests: ``solutions/09_t.ipynb``
with a markdown cell and one solution cell whose block is ``answer``."""

from __future__ import annotations

from pathlib import Path

import nbformat

NAME = "09_t.ipynb"


def write_solution(root: Path, answer: str = "return 42", title: str = "# t") -> Path:
    """Write ``root/solutions/09_t.ipynb``; returns the lab path it releases to
    (``root/labs/09_t.ipynb``, not written here)."""
    (root / "solutions").mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(f"def g():\n    ### BEGIN SOLUTION\n    {answer}\n"
                                     "    ### END SOLUTION\n")
    cell.metadata["tags"] = ["solution"]
    nb.cells = [nbformat.v4.new_markdown_cell(title), cell]
    nbformat.write(nb, str(root / "solutions" / NAME))
    return root / "labs" / NAME
