"""The caches of the GPU-compile check: in memory and on disk.

In memory, keyed by a sha256 of the pickled function (code, constants, referenced globals and
device functions, all by value), the signature, the compute capability and the options; on
disk (``<cache base>/ptx/<key>.json``, the cache base of :func:`kernellab.codegen.cache_dir`:
``$KERNELLAB_CACHE_DIR`` or ``.kernellab-cache``), keyed by the same material plus the numba,
numba-cuda and NVVM wheel versions and :mod:`kernellab.cuda_ext`, so repeated test runs and
gradings do not recompile; a cache hit does not start the helper.
``KERNELLAB_PTX_DISK_CACHE=0`` switches the disk cache off. Rejections are cached in memory
only. ptxas's resource reports (:func:`kernellab.sim.ptx.kernel_resources`) are cached the same
way (``<cache base>/ptx/res-<key>.json``, keyed by the PTX, the cc and the tool versions,
nvJitLink's included); a report lost to a timeout or a helper's death is kept in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

_memory: dict[str, object] = {}   # key -> PTXResult or (GPUCompileError args)
_memory_lock = threading.Lock()
_versions_cache: list = []


def _versions() -> tuple:
    if not _versions_cache:
        import importlib.metadata as md

        out = []
        for name in ("numba", "numba-cuda", "nvidia-nvvm"):
            try:
                out.append(f"{name}={md.version(name)}")
            except md.PackageNotFoundError:
                out.append(f"{name}=?")
        # the intrinsics the helper installs (kernellab.cuda_ext) are part of the compiler
        ext = Path(__file__).resolve().parents[2] / "cuda_ext.py"
        out.append("cuda_ext=" + hashlib.sha256(ext.read_bytes()).hexdigest()[:16])
        _versions_cache.append(tuple(out))
    return _versions_cache[0]


def _resource_versions() -> tuple:
    """:func:`_versions` plus the nvJitLink wheels (ptxas is part of nvJitLink)."""
    import importlib.metadata as md

    out = list(_versions())
    for name in ("nvidia-nvjitlink", "cuda-bindings"):
        try:
            out.append(f"{name}={md.version(name)}")
        except md.PackageNotFoundError:
            out.append(f"{name}=?")
    return tuple(out)


def _disk_dir() -> Path | None:
    if os.environ.get("KERNELLAB_PTX_DISK_CACHE", "1").strip().lower() in ("0", "no", "false",
                                                                          "off"):
        return None
    from kernellab import codegen

    return Path(codegen.cache_dir("default")).parent / "ptx"


def _disk_load(key: str) -> dict | None:
    d = _disk_dir()
    if d is None:
        return None
    try:
        with open(d / f"{key}.json", encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and (isinstance(entry.get("ptx"), str)
                                      or isinstance(entry.get("note"), str))
    return entry if ok else None


def _disk_store(key: str, entry: dict) -> None:
    d = _disk_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only or full cache folder only costs a recompile


def clear_cache(disk: bool = False) -> None:
    """Forget the in-memory cache (and with ``disk=True`` the on-disk entries too)."""
    with _memory_lock:
        _memory.clear()
    if disk:
        d = _disk_dir()
        if d is not None and d.is_dir():
            for p in d.glob("*.json"):  # PTX and ptxas reports
                try:
                    p.unlink()
                except OSError:
                    pass
