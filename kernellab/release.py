"""``kernellab release``: regenerate ``labs/`` from ``solutions/`` (the single source).

Each ``solutions/NN_topic.ipynb`` becomes ``labs/NN_topic.ipynb`` with every solution block
replaced by a ``NotImplementedError`` stub and all outputs cleared (:mod:`kernellab.notebook`).
``--check`` writes nothing and exits non-zero when a lab is missing, stale or extra.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from kernellab import notebook


def _render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def plan(root: Path) -> dict[Path, str]:
    """Map each lab path to the text it must have. Raises NotebookError on a bad solution."""
    sol_dir, lab_dir = root / "solutions", root / "labs"
    out = {}
    for src in sorted(sol_dir.glob("*.ipynb")):
        try:
            out[lab_dir / src.name] = _render(notebook.make_lab(notebook.read(src)))
        except notebook.NotebookError as exc:
            raise notebook.NotebookError(f"{src.relative_to(root)}: {exc}") from None
    return out


def release(root: Path, check: bool = False) -> tuple[int, list[str]]:
    """Write (or, with ``check``, verify) the labs. Returns (exit status, messages)."""
    root = Path(root)
    try:
        wanted = plan(root)
    except notebook.NotebookError as exc:
        return 2, [str(exc)]
    msgs, bad = [], False
    for path, text in wanted.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            msgs.append(f"up to date: {path.relative_to(root)}")
            continue
        if check:
            bad = True
            msgs.append(f"{'missing' if current is None else 'stale'}: {path.relative_to(root)} "
                        "(run `kernellab release`)")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            msgs.append(f"wrote {path.relative_to(root)}")
    for extra in sorted((root / "labs").glob("*.ipynb")):
        if extra not in wanted:
            bad = True
            msgs.append(f"extra: {extra.relative_to(root)} has no source in solutions/")
    return (1 if bad else 0), msgs
