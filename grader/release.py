"""``kernellab release`` (instructors): regenerate ``labs/`` from ``solutions/`` (the single
source).

Each ``solutions/NN_topic.ipynb`` becomes ``labs/NN_topic.ipynb`` with every solution block
replaced by a ``NotImplementedError`` stub and all outputs cleared (:mod:`grader.notebook`).
``--check`` writes nothing and exits non-zero when a lab is missing, stale or extra.

A lab is never overwritten when it was edited by hand (a student who filled it in place):
release records in each cell's metadata (``metadata.kernellab.released_sha256``) a hash of the
cell it wrote (its type, source and tags) and in the notebook's metadata
(``metadata.kernellab.released_cells``) the list of them in order; a lab whose cells no longer
match that list — a cell edited, added, deleted, moved, retyped or retagged — was edited. A
change to ``solutions/`` still releases: the old lab matches its own hashes. Outputs and
execution counts are not edits (running a notebook adds them). A lab written before the
notebook-level list existed is judged by its cells' source hashes, and one written before any
hash existed only if its cells' sources equal the ones generated now. ``force`` overwrites
regardless.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
from collections import Counter
from pathlib import Path

import nbformat

from grader import notebook

META_KEY = "kernellab"
HASH_KEY = "released_sha256"
CELLS_KEY = "released_cells"


def source_hash(source: str) -> str:
    """The first 16 hex digits of SHA-256 of a cell's source (UTF-8)."""
    return hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def _tags(cell) -> list[str]:
    meta = cell.get("metadata")
    tags = meta.get("tags", []) if isinstance(meta, dict) else []
    return sorted(str(t) for t in tags) if isinstance(tags, list) else [repr(tags)]


def cell_hash(cell) -> str:
    """The first 16 hex digits of SHA-256 of what a cell is: its type, source and tags."""
    key = json.dumps([str(cell.get("cell_type")), _source(cell), _tags(cell)])
    return source_hash(key)


def _recorded_hash(cell) -> str | None:
    meta = cell.get("metadata")
    own = meta.get(META_KEY) if isinstance(meta, dict) else None
    h = own.get(HASH_KEY) if isinstance(own, dict) else None
    return h if isinstance(h, str) else None


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def _stamp(nb):
    """Record each cell's hash in its metadata and the list of them in the notebook's (in
    place); returns ``nb``."""
    for cell in nb.cells:
        cell.metadata[META_KEY] = {HASH_KEY: cell_hash(cell)}
    nb.metadata[META_KEY] = {CELLS_KEY: [cell_hash(c) for c in nb.cells]}
    return nb


def plan(root: Path) -> dict[Path, str]:
    """Map each lab path to the text it must have. Raises NotebookError on a bad solution."""
    sol_dir, lab_dir = root / "solutions", root / "labs"
    out = {}
    for src in sorted(sol_dir.glob("*.ipynb")):
        try:
            out[lab_dir / src.name] = _render(_stamp(notebook.make_lab(notebook.read(src))))
        except notebook.NotebookError as exc:
            raise notebook.NotebookError(f"{src.relative_to(root)}: {exc}") from None
    return out


def _describe(cells, i: int) -> str:
    """``solution cell 2 (notebook cell 7, `first line`)`` for message text."""
    cell = cells[i]
    first = next((ln.strip() for ln in _source(cell).splitlines() if ln.strip()), "")
    quote = f", `{first[:60]}`" if first else ""
    if notebook.is_solution_cell(cell):
        k = sum(notebook.is_solution_cell(c) for c in cells[:i + 1])
        return f"solution cell {k} (notebook cell {i + 1}{quote})"
    return f"notebook cell {i + 1}{quote}"


def hand_edits(current: str, wanted: str) -> list[str]:
    """The cells of the lab text ``current`` that were edited by hand, in words (empty: safe to
    overwrite with ``wanted``). An unreadable notebook counts as edited."""
    try:
        nb = nbformat.reads(current, as_version=4)
        cells = list(nb.cells)
    except Exception as exc:  # noqa: BLE001 - nbformat raises several types for bad JSON
        return [f"the file is not a readable notebook ({type(exc).__name__})"]
    meta = nb.get("metadata")
    own = meta.get(META_KEY) if isinstance(meta, dict) else None
    released = own.get(CELLS_KEY) if isinstance(own, dict) else None
    if isinstance(released, list):
        return _changes(cells, [str(h) for h in released])
    if any(_recorded_hash(c) for c in cells):  # per-cell source hashes only (older releases)
        out = []
        for i, c in enumerate(cells):
            h = _recorded_hash(c)
            if h is None:
                out.append(f"{_describe(cells, i)} was added")
            elif h not in (source_hash(_source(c)), cell_hash(c)):  # either kind of release
                out.append(f"{_describe(cells, i)} was edited")
        return out
    # written before release recorded hashes: only an exact match with today's lab is safe
    new = [_source(c) for c in nbformat.reads(wanted, as_version=4).cells]
    out = [f"{_describe(cells, i)} differs from the generated lab"
           for i, c in enumerate(cells) if i >= len(new) or _source(c) != new[i]]
    if len(cells) < len(new) and not out:
        out.append(f"it has {len(cells)} cells where the generated lab has {len(new)}")
    return out


def _changes(cells, released: list[str]) -> list[str]:
    """How ``cells`` differ from the released list of cell hashes, in words (empty: none)."""
    now = [cell_hash(c) for c in cells]
    if now == released:
        return []
    left = Counter(released)  # released cells not (yet) matched by a cell of the lab now
    out = []
    for i, (c, h) in enumerate(zip(cells, now)):
        if left[h]:
            left[h] -= 1
        else:
            out.append(f"{_describe(cells, i)} was "
                       + ("edited" if _recorded_hash(c) is not None else "added"))
    gone = sum(left.values())
    if gone:
        out.append(f"{gone} released cell{'s' * (gone != 1)} edited or deleted")
    if not out:  # the same cells, another order or a cell twice
        out.append("its cells were moved or copied")
    return out


def _umask() -> int:
    """This process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one step (a temporary file, then ``os.replace``). The file
    keeps the old file's permission bits; a new file gets ``0o666 & ~umask``, as ``open`` gives
    (mkstemp's 0600 would hide labs/ from the other users of a shared course machine)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _lab_id(notebook_name: str) -> str:
    """The lab id whose notebook is ``notebook_name`` (for advice), or ``LAB``."""
    try:
        from grader.labs import all_specs

        return next((s.lab_id for s in all_specs() if s.notebook == notebook_name), "LAB")
    except Exception:  # noqa: BLE001 - advice only: a course without grader/ still releases
        return "LAB"


def _free_name(root: Path, name: str) -> str:
    """``work/<stem>-from-labs.ipynb`` (``-2``, ``-3`` ... when taken): a name not yet in
    ``work/``."""
    stem, n = Path(name).stem, 1
    while True:
        dst = f"work/{stem}-from-labs{'' if n == 1 else f'-{n}'}.ipynb"
        if not (root / dst).exists():
            return dst
        n += 1


def _keep_advice(root: Path, rel: str) -> str:
    """How to keep the hand-edited ``labs/<name>`` before ``--force``: copy it into ``work/``
    under a name that is free (``work/<name>`` itself when the student has no copy there yet;
    else :func:`_free_name`, never over the existing copy). The commands run in ``root``."""
    name = Path(rel).name
    here = Path.cwd().resolve() == root.resolve()
    cd = "" if here else f"cd {shlex.quote(str(root))} && "
    if not (root / "work" / name).exists():
        return (f"to keep this work, copy it to work/ first (`{cd}mkdir -p work && cp {rel} "
                f"work/{name}`)")
    dst = _free_name(root, name)
    graded = dst if here else shlex.quote(str(root / dst))
    return (f"work/{name} exists already (your copy, left as it is); to keep this work too, copy "
            f"it to a new name first (`{cd}cp {rel} {dst}`; grade that with `kernellab grade "
            f"{_lab_id(name)} {graded}`)")


def _shown(edits: list[str]) -> str:
    return "; ".join(edits[:3]) + (f"; and {len(edits) - 3} more" if len(edits) > 3 else "")


def _refusal(root: Path, rel: str, edits: list[str]) -> str:
    lab = _lab_id(Path(rel).name)
    return (f"refused: {rel} was edited by hand ({_shown(edits)}), left unchanged. Students "
            f"work in their own copy in work/ (`kernellab start {lab}`, ignored by git); "
            f"{_keep_advice(root, rel)}. `kernellab release --force` then overwrites it.")


def _edited_on_check(root: Path, rel: str, edits: list[str]) -> str:
    return (f"edited by hand: {rel} ({_shown(edits)}), so `kernellab release` would refuse to "
            f"overwrite it; {_keep_advice(root, rel)}, then run `kernellab release --force`.")


def release(root: Path, check: bool = False, force: bool = False) -> tuple[int, list[str]]:
    """Write (or, with ``check``, verify) the labs. Returns (exit status, messages): 0 done or
    up to date; 1 ``check`` found a lab missing, stale or extra, or a lab edited by hand was
    left unchanged (unless ``force``); 2 a solution notebook breaks the conventions."""
    root = Path(root)
    try:
        wanted = plan(root)
    except notebook.NotebookError as exc:
        return 2, [str(exc)]
    msgs, bad = [], False
    for path, text in wanted.items():
        rel = str(path.relative_to(root))
        current = path.read_text(encoding="utf-8", errors="surrogateescape") \
            if path.exists() else None
        if current == text:
            msgs.append(f"up to date: {rel}")
            continue
        edits = hand_edits(current, text) if current is not None else []
        if check:
            bad = True
            msgs.append(_edited_on_check(root, rel, edits) if edits else
                        f"{'missing' if current is None else 'stale'}: {rel} "
                        "(run `kernellab release`)")
        elif edits and not force:
            bad = True
            msgs.append(_refusal(root, rel, edits))
        else:
            _write_atomic(path, text)
            msgs.append(f"wrote {rel}" + (" (--force: hand edits overwritten)" if edits else ""))
    for extra in sorted((root / "labs").glob("*.ipynb")):
        if extra not in wanted:
            bad = True
            msgs.append(f"extra: {extra.relative_to(root)} has no source in solutions/")
    return (1 if bad else 0), msgs
