"""Device tiers: ``gpu`` on a real NVIDIA GPU, else ``sim`` (Numba's CUDA
simulator); ``cpu`` and ``npu`` tiers are named by the chapters that use them.

The choice has to be made before ``numba.cuda`` is first imported, because numba-cuda reads
``NUMBA_ENABLE_CUDASIM`` once, at import. Under the simulator ``numba.cuda.is_available()``
returns True, so it cannot tell a GPU from the simulator: we probe the CUDA driver itself with
ctypes (``cuInit`` then ``cuDeviceGetCount``, CUDA Driver API reference §6.3 and §6.5), which
costs two driver calls and imports nothing.

``KERNELLAB_DEVICE=gpu|sim`` forces a tier.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

TIERS = ("gpu", "sim")
_chosen: dict = {}
_error: list = []


def remember_error(exc: "DeviceError") -> None:
    """Keep the error of the first tier choice; :func:`select_tier` raises it again."""
    _error[:] = [exc]


class DeviceError(RuntimeError):
    """The requested device tier cannot be used (e.g. ``gpu`` forced without a GPU)."""


def probe_cuda_driver() -> tuple[int, str]:
    """Count CUDA devices through the driver library, without importing numba.

    Returns ``(count, note)``: ``count`` is 0 when there is no driver, ``cuInit`` fails or it
    reports no device; ``note`` says which.
    """
    names = ["libcuda.so.1", "libcuda.so", "nvcuda.dll"]
    found = ctypes.util.find_library("cuda")
    if found:
        names.insert(0, found)
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return 0, "no CUDA driver library (libcuda) found"
    rc = lib.cuInit(0)
    if rc != 0:
        return 0, f"cuInit failed (CUresult {rc})"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, f"cuDeviceGetCount failed (CUresult {rc})"
    return count.value, f"{count.value} CUDA device(s) found by the driver"


def select_tier() -> str:
    """Decide the GPU-side tier once per process and configure numba-cuda accordingly.

    Returns ``"gpu"`` or ``"sim"``. Raises :class:`DeviceError` when ``KERNELLAB_DEVICE`` names an
    unknown tier, when ``gpu`` is forced without a device, or when ``numba.cuda`` was already
    imported in the other mode.
    """
    if _chosen:
        return _chosen["tier"]
    if _error:
        raise _error[0]
    forced = os.environ.get("KERNELLAB_DEVICE", "").strip().lower() or None
    if forced is not None and forced not in TIERS:
        raise DeviceError(f"KERNELLAB_DEVICE={forced!r}: expected one of {', '.join(TIERS)}")
    if forced == "sim":
        count, note = 0, "simulator forced by KERNELLAB_DEVICE=sim"
    else:
        count, note = probe_cuda_driver()
        if forced == "gpu" and count == 0:
            raise DeviceError(
                f"KERNELLAB_DEVICE=gpu forces the gpu tier, but no GPU was found ({note}); "
                "unset KERNELLAB_DEVICE (or set KERNELLAB_DEVICE=sim) to use the simulator")
    tier = "gpu" if count > 0 else "sim"
    want_sim = tier == "sim"
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config as cuda_config
        if bool(cuda_config.ENABLE_CUDASIM) != want_sim:
            raise DeviceError(
                "numba.cuda was imported before kernellab in the other mode "
                f"(simulator={'on' if cuda_config.ENABLE_CUDASIM else 'off'}, wanted the "
                f"{tier} tier): import kernellab first, in the notebook's first cell")
    if want_sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    _chosen.update(tier=tier, note=note, gpu_count=count)
    return tier


def tier() -> str:
    """The GPU-side tier of this process (``"gpu"`` or ``"sim"``), choosing it if needed."""
    return select_tier()


def simulator_active() -> bool:
    """Read the mode back from numba-cuda's own configuration (imports ``numba.cuda``)."""
    select_tier()
    from numba.cuda.core import config as cuda_config
    return bool(cuda_config.ENABLE_CUDASIM)


def describe() -> dict:
    """Tier, the reason it was chosen, and (on a GPU) the device name."""
    t = select_tier()
    out = {"tier": t, "reason": _chosen["note"]}
    if t == "gpu":
        try:
            from numba import cuda
            out["gpu_name"] = cuda.get_current_device().name
            if isinstance(out["gpu_name"], bytes):
                out["gpu_name"] = out["gpu_name"].decode()
        except Exception as exc:  # pragma: no cover - needs a GPU
            out["gpu_name"] = f"unknown ({exc})"
    return out


class _AfterCudaImport:
    """A ``sys.meta_path`` finder that runs callbacks right after ``numba.cuda`` is first
    imported (the import itself is done by the finders behind it, numba-cuda's redirector
    included)."""

    def __init__(self):
        self.busy = False
        self.callbacks = []

    def find_spec(self, name, path, target=None):
        if name != "numba.cuda" or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig = spec.loader.exec_module
        hook = self

        def exec_module(module):
            orig(module)
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
            for cb in hook.callbacks:
                cb()

        spec.loader.exec_module = exec_module
        return spec


def after_cuda_import(callback) -> None:
    """Run ``callback()`` once ``numba.cuda`` is imported: now if it already is, else right
    after its import (kernellab uses it to install the sim-tier engine, or on a GPU the
    intrinsics of :mod:`kernellab.cuda_ext`)."""
    if "numba.cuda" in sys.modules:
        callback()
        return
    for f in sys.meta_path:
        if isinstance(f, _AfterCudaImport):
            f.callbacks.append(callback)
            return
    hook = _AfterCudaImport()
    hook.callbacks.append(callback)
    sys.meta_path.insert(0, hook)
