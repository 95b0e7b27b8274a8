"""Thread-pool settings that make interleaved CPU timings fair on a few cores.

The trap: when Numba ``prange`` code and numpy/OpenBLAS alternate call by call, as the interleaved
benchmarks and the CPU graders' timing rounds do, each library's *idle* worker threads keep
spinning and steal the other library's core, so on a machine with few cores both read far slower
interleaved than alone. ``OMP_WAIT_POLICY=passive`` and ``OPENBLAS_THREAD_TIMEOUT=4`` put idle
threads to sleep (``make bench`` prints :func:`status` with its rates). Both variables are read
once, when the library loads, so they must be in the environment before numpy (OpenBLAS) and
Numba's OpenMP threading layer are first imported.

:func:`apply` sets them (without overriding a value the user chose) and remembers whether it
was early enough; :func:`status` says so in every timing report.

Sources: GNU libgomp manual, "OMP_WAIT_POLICY"; OpenBLAS README, "OPENBLAS_THREAD_TIMEOUT"
(idle threads sleep after 2**N cycles, 4 <= N <= 30).
"""

from __future__ import annotations

import os
import sys

#: Environment settings applied before the BLAS / OpenMP runtimes load.
SETTINGS = {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}

_state: dict = {"applied": False, "early": None, "preset": {}}


def apply() -> None:
    """Put :data:`SETTINGS` into ``os.environ`` unless already set, and record whether numpy or
    numba had already been imported (then the settings may not have reached them)."""
    if _state["applied"]:
        return
    late = [m for m in ("numpy", "numba") if m in sys.modules]
    preset = {}
    for key, value in SETTINGS.items():
        if key in os.environ:
            preset[key] = os.environ[key]
        else:
            os.environ[key] = value
    # Settings already in the environment (e.g. exported by the Makefile) were seen by the
    # libraries whenever they loaded; settings we add now only help if nothing loaded yet.
    added_late = late and any(k not in preset for k in SETTINGS)
    _state.update(applied=True, early=not added_late, preset=preset, late_modules=late)


def status() -> dict:
    """What the timing harness reports about thread control.

    Returns a dict: ``in_effect`` (bool: the anti-spin settings reached the libraries),
    ``settings`` (the values in the environment now), ``note`` (plain words), and the thread
    counts of Numba and of the BLAS numpy uses.
    """
    apply()
    info = {
        "in_effect": bool(_state["early"]),
        "settings": {k: os.environ.get(k) for k in SETTINGS},
    }
    if info["in_effect"]:
        info["note"] = ("idle BLAS/OpenMP threads sleep instead of spinning ("
                        + ", ".join(f"{k}={v}" for k, v in info["settings"].items()) + ")")
    else:
        info["note"] = ("WARNING: numpy/numba were imported before kernellab, so "
                        + " and ".join(SETTINGS) + " may not be in effect; interleaved "
                        "ratios can be biased (import kernellab first, or export them)")
    try:
        import numba
        info["numba_threads"] = numba.get_num_threads()
        info["numba_threading_layer"] = _numba_layer()
    except Exception:  # pragma: no cover - numba is a dependency
        pass
    info["blas"] = blas_info()
    return info


def _numba_layer() -> str:
    import numba
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region run yet: the layer is chosen lazily
        return f"not started (config: {numba.config.THREADING_LAYER})"


def blas_info() -> list[dict]:
    """The BLAS libraries loaded in this process (threadpoolctl): name, version, threads. Empty
    when threadpoolctl is not installed (a GPU machine with only the runtime: make gpu-check)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    out = []
    for lib in threadpool_info():
        out.append({k: lib.get(k) for k in
                    ("user_api", "internal_api", "version", "num_threads", "architecture")})
    return out


def pin(threads: int | None):
    """Context manager: pin Numba's and the BLAS's thread counts to ``threads`` (None: leave).

    Raises ValueError if ``threads`` is below 1.
    """
    from contextlib import contextmanager

    @contextmanager
    def _pin():
        if threads is None:
            yield
            return
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        import numba
        from threadpoolctl import threadpool_limits
        old = numba.get_num_threads()
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            with threadpool_limits(limits=threads):
                yield
        finally:
            numba.set_num_threads(old)

    return _pin()
