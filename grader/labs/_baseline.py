"""The sim tier's modelled baselines, simulated once per code version and shape.

The CUDA labs model a submission's speed against one of the course's own kernels (chapter 2's
naive GEMM, chapter 3's three-pass softmax, chapter 5's materialised attention), simulated in
the worker at the timed shape. Those kernels' control flow and addresses do not depend on the
values of their inputs, so their counters (sectors, wavefronts, barriers, DRAM bytes) are a
function of the code and the shape alone; simulating them again in every grading cost up to
half of a softmax grading. :func:`launches` keeps each baseline's launch records (name,
grid, block, counters and sites: what the speed rules read of a baseline; not the per-argument
digests) in a JSON file under kernellab's cache folder (:func:`kernellab.codegen.cache_base`),
keyed by the baseline's name and shape, the sources of the simulator, the kernels and the lab
specs (which launch the baselines), numba-cuda's version and the simulator's settings
(``KERNELLAB_SIM_*``, ``KERNELLAB_CUDA_*`` and its live options). ``KERNELLAB_BASELINE_CACHE=0``
turns it off. ``tests/test_grader/labs/test_baseline_cache.py`` checks that the counters are the
same on other
data and that a cached entry equals a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent.parent
#: the code a baseline's counters depend on: the simulator, the kernels, the lab specs (not
#: the labs' known submissions)
_SOURCES = ("kernellab/sim", "kernellab/kernels", "grader/labs")
#: what every baseline launch record has (:func:`grader.labs._cuda.launch_dict`)
_KEEP = ("name", "grid", "block", "counters")
#: left out of the cache: per-argument content digests and outside reads depend on the data
_DROP = ("arrays", "outside")
_SOURCE_DIGEST: list[str] = []


def _source_digest() -> str:
    if not _SOURCE_DIGEST:
        h = hashlib.sha256()
        for rel in _SOURCES:
            p = _ROOT / rel
            for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
                if "submissions" in f.relative_to(p).parts:  # students' code, not a baseline's
                    continue
                h.update(str(f.relative_to(_ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
        _SOURCE_DIGEST.append(h.hexdigest())
    return _SOURCE_DIGEST[0]


def _path(name: str, shape: dict) -> Path:
    import importlib.metadata as md

    from kernellab import codegen
    from kernellab.sim import engine

    material = json.dumps({"name": name, "shape": shape, "sources": _source_digest(),
                           "numba_cuda": md.version("numba-cuda"),
                           # every setting of the simulator (executor, checks, GPU compile...)
                           "sim": sorted((k, v) for k, v in os.environ.items()
                                         if k.startswith(("KERNELLAB_SIM", "KERNELLAB_CUDA"))),
                           "options": repr(sorted(engine._OPTS.items()))},
                          sort_keys=True)
    key = hashlib.sha256(material.encode()).hexdigest()[:24]
    return Path(codegen.cache_base()) / "sim-baselines" / f"{name}-{key}.json"


def _valid(entry) -> bool:
    return (isinstance(entry, list) and len(entry) > 0
            and all(isinstance(x, dict) and set(_KEEP) <= set(x)
                    and isinstance(x["counters"], dict) for x in entry))


def _kept(launch: dict) -> dict:
    return {k: v for k, v in launch.items() if k not in _DROP}


def launches(name: str, shape: dict, run) -> list[dict]:
    """The launches of baseline ``name`` at ``shape`` (a JSON-serialisable dict): from the cache,
    or ``run()`` (which simulates the baseline and returns its launches as
    :func:`grader.labs._cuda.launch_dict` records), stored without the data-dependent
    ``arrays`` and ``outside``. A missing, unreadable or malformed cache file is simulated
    again."""
    if os.environ.get("KERNELLAB_BASELINE_CACHE", "1") == "0":
        return [_kept(x) for x in run()]
    path = _path(name, shape)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if _valid(entry):
            return entry
    except (OSError, ValueError):
        pass
    entry = [_kept(x) for x in run()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".baseline-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
    except OSError:  # a read-only cache folder: simulate every time
        pass
    return entry
