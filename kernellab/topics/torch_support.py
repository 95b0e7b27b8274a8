"""PyTorch, the course's optional extra (chapter 9 and Lab 9 ``torch-op``).

``pip install -e '.[torch]'`` adds it (``make lab`` and ``make test`` install it, the CPU build
of the version ``Makefile`` pins); every other chapter and lab runs without it.
:func:`require` imports it or raises with that instruction; :func:`compile_cache` keeps
``torch.compile``'s caches (Inductor's generated code, about 150 MB) inside the project, under
``.kernellab-cache/torch``, never in the user's home.

:func:`shares_memory` is the aliasing check by address ranges that opcheck lacks (chapter 9,
Lab 9's grader).

Errors: :func:`require` raises ``ModuleNotFoundError`` (the message says how to add the extra).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

#: what to do when torch is missing
HINT = ("PyTorch is the course's optional extra for chapter 9 and Lab 9 (torch-op): run "
        "`make install` in the project folder (or `pip install -e '.[torch]'`)")

#: the project's cache folder (gitignored; ``make clean`` removes it)
CACHE = Path(__file__).resolve().parents[2] / ".kernellab-cache" / "torch"


def available() -> bool:
    """True when ``import torch`` would find a package (it is not imported here)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):       # sys.modules["torch"] is None, or no spec
        return False


def require():
    """The ``torch`` module; ``ModuleNotFoundError`` with :data:`HINT` when it is missing."""
    if not available():
        raise ModuleNotFoundError(HINT, name="torch")
    compile_cache()
    import torch

    return torch


def compile_cache(root: Path | None = None, *, force: bool = False) -> Path:
    """Point torch.compile's caches (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``) at
    ``root`` (default :data:`CACHE`) unless the environment already names them (``force``:
    whatever it names; the grader's worker, whose compiled artefacts, pickles, must come from
    no other grading); returns the Inductor folder in use. Call before ``torch.compile`` first
    runs."""
    root = Path(root) if root is not None else CACHE
    for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        if force:
            os.environ[var] = str(root / sub)
        else:
            os.environ.setdefault(var, str(root / sub))
    path = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def shares_memory(out, *inputs) -> bool:
    """True when the address range ``out`` spans overlaps any input's (conservative: two
    interleaved views count as sharing). ``opcheck`` and custom_op's own check compare
    storages, so an output built on a fresh storage over an input's memory
    (``torch.from_numpy(x.numpy()[:])``) passes them; address ranges do not."""
    def span(t):
        if t.numel() == 0:
            return 0, 0
        steps = [(n - 1) * st * t.element_size() for n, st in zip(t.shape, t.stride())]
        lo = t.data_ptr() + sum(min(0, s) for s in steps)
        return lo, t.data_ptr() + sum(max(0, s) for s in steps) + t.element_size()
    a0, a1 = span(out)
    return any(b0 < a1 and a0 < b1 for b0, b1 in map(span, inputs))
