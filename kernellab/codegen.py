"""LLVM code-generation profiles for Numba, scoped to the process that asks for them.

Chapter 1's packed GEMM (:mod:`kernellab.kernels.gemm_cpu`, v4/v5) only reaches numpy/OpenBLAS
speed when LLVM's SLP vectoriser is on, which Numba does not do by default. Profiles
(:data:`PROFILES`): ``default`` is Numba's own behaviour (:data:`DEFAULT`); ``full_width``
(:data:`FULL_WIDTH`) is Numba's own behaviour at the CPU's full vector width (the
``NUMBA_CPU_FEATURES`` line below, nothing else): the profile the CPU labs are graded under,
since their speed rules compare with numpy/OpenBLAS and with the FMA peak, both of which run
at the full width (:mod:`kernellab.machine.fma_peak`); ``fast_gemm`` (:data:`FAST_GEMM`) sets

* ``NUMBA_SLP_VECTORIZE=1``: the micro-kernel's mr x nr accumulators are unrolled scalar
  variables (Numba has no vector type); the superword-level-parallelism vectoriser is the pass
  that packs them into vector registers (else the hot loop stays scalar ``vfmadd231ss``);
* ``NUMBA_LOOP_VECTORIZE=1``, Numba's default, kept: v2, v3 and the packing loops need it;
* ``NUMBA_CPU_FEATURES`` = the host's features plus ``-prefer-256-bit`` on AVX-512 CPUs: LLVM's
  Intel server tunings prefer 256-bit vectors (``ymm`` only), which halves the reachable FMA
  rate of Numba code on cores with two 512-bit FMA units; its Zen tunings do not, so there the
  flag changes nothing. The features are in Numba's cache key, which also keeps the profile's
  cache apart;
* ``NUMBA_OPT=3``, pinned, so that an exported ``NUMBA_OPT`` cannot change what it means.

Chapter 1, section 6, shows the FMAs ``default`` and ``fast_gemm`` make LLVM emit and times
v4/v5 under both;
``make bench`` times the ladder under ``fast_gemm``. The levers in the kernel code itself
(uint64 indices, ``fastmath={'contract'}``, a flat scratch tile) are in
:mod:`~kernellab.kernels.gemm_cpu`.

Why opt-in and process-scoped (chapter 1, section 6, gives the reasoning): Numba switched SLP
off after LLVM's SLP vectoriser miscompiled real code (numba/numba PR #8852), and the setting
holds for every function the process compiles afterwards. So only processes that ask for it
use it (the GEMM benchmark, chapter 1), and the correctness tests run
the kernels under it in a subprocess: they are the guard against a miscompilation.

When the settings take effect (numba 0.68)
------------------------------------------
* ``NUMBA_*`` variables are read into ``numba.core.config`` at import and by
  ``numba.core.config.reload_config()``, which the compiler calls at the start of every
  compilation; ``NUMBA_SLP_VECTORIZE`` / ``NUMBA_LOOP_VECTORIZE`` are pass-builder options read
  per compilation, so changing them mid-process silently changes every later function.
* ``NUMBA_CPU_FEATURES`` and ``NUMBA_OPT`` are frozen into the LLVM target machine when the
  first ``@njit`` function is *defined*: after ``import numba`` this module calls
  ``reload_config()`` itself, and once any ``@njit`` function exists :func:`apply` raises
  :class:`RuntimeError` instead of half-applying a profile.
* ``NUMBA_CACHE_DIR`` is bound when ``@njit(cache=True)`` is applied, so it too must be set
  before the kernels' modules are imported.
* The on-disk cache's key is the signature, target triple, CPU name and features and the
  bytecode hash (``numba/core/caching.py``, ``_index_key``; ``CPUCodegen.magic_tuple``), not
  the optimisation settings: a kernel cached under one profile would be reused under the other,
  so each profile has its own ``NUMBA_CACHE_DIR`` (:func:`cache_dir`, under
  ``.kernellab-cache/`` at the project root, or ``$KERNELLAB_CACHE_DIR``).

Use
---
First thing in a process, before any module defining ``@njit`` functions is imported::

    import kernellab                      # thread settings, before numpy loads
    from kernellab import codegen
    codegen.apply("fast_gemm")
    from kernellab.kernels import gemm_cpu

or run a subprocess with ``env=codegen.env("fast_gemm")``.

Sources: Numba documentation, "Environment variables" (``NUMBA_OPT``, ``NUMBA_LOOP_VECTORIZE``,
``NUMBA_SLP_VECTORIZE``, ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``, ``NUMBA_CACHE_DIR``);
Numba documentation, "Notes on Caching" (what the cache is keyed on); LLVM documentation,
"Auto-Vectorization in LLVM" (the loop and SLP vectorisers); LLVM ``llvm/lib/Target/X86/X86.td``
(``TuningPrefer256Bit`` in the Intel server tunings, absent from the Zen tunings);
numba/numba PR #8852.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

#: Profile names: ``default`` is Numba's own behaviour, ``full_width`` the same at the CPU's
#: full vector width, ``fast_gemm`` the settings above.
PROFILES = ("default", "full_width", "fast_gemm")

#: The variables a profile controls. ``None`` as a value means "unset" (Numba's default).
VARIABLES = ("NUMBA_SLP_VECTORIZE", "NUMBA_LOOP_VECTORIZE", "NUMBA_CPU_FEATURES", "NUMBA_OPT")

_state: dict = {"applied": None}


def host_cpu_features() -> str:
    """The host CPU's LLVM feature string (``+avx2,+avx512f,...``), as Numba would use it."""
    import llvmlite.binding as ll

    return ll.get_host_cpu_features().flatten()


def full_width_features() -> str:
    """The host's LLVM features with ``-prefer-256-bit`` added on AVX-512 CPUs (x86 only: other
    targets do not know the flag, and LLVM would warn on every compile)."""
    features = host_cpu_features()
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    return features


#: Numba's defaults (numba 0.68: SLP off, loop vectoriser on, host CPU features, -O3).
DEFAULT: dict = {"NUMBA_SLP_VECTORIZE": "0", "NUMBA_LOOP_VECTORIZE": "1",
                 "NUMBA_CPU_FEATURES": None, "NUMBA_OPT": "3"}

#: Numba's defaults at the full vector width of this host (the CPU labs' grading profile).
FULL_WIDTH: dict = dict(DEFAULT, NUMBA_CPU_FEATURES=full_width_features())

#: The fast-GEMM settings for this host: the full width plus the SLP vectoriser.
FAST_GEMM: dict = dict(FULL_WIDTH, NUMBA_SLP_VECTORIZE="1")


def settings(profile: str) -> dict:
    """The environment settings of ``profile`` (a copy). Raises ValueError for an unknown name."""
    table = {"default": DEFAULT, "full_width": FULL_WIDTH, "fast_gemm": FAST_GEMM}
    if profile in table:
        return dict(table[profile])
    raise ValueError(f"unknown codegen profile {profile!r}; expected one of {PROFILES}")


def _project_root() -> Path:
    return Path(__file__).resolve().parent.parent


#: Part of every profile's cache key. Raised when entries an older kernellab wrote cannot be
#: loaded: 2 = entries of functions whose module was not in ``sys.modules`` when they were
#: compiled (Numba recorded it as ``'<dynamic>'`` and a fresh process failed to load them).
CACHE_FORMAT = 2  # 1: before the key held it


def cache_base() -> str:
    """kernellab's cache folder: ``$KERNELLAB_CACHE_DIR`` if set, else ``.kernellab-cache`` at
    the project root when writable, else ``~/.cache/kernellab``."""
    base = os.environ.get("KERNELLAB_CACHE_DIR")
    if not base:
        root = _project_root()
        base = str(root / ".kernellab-cache") if os.access(root, os.W_OK) \
            else str(Path.home() / ".cache" / "kernellab")
    return base


def cache_dir(profile: str) -> str:
    """The ``NUMBA_CACHE_DIR`` of ``profile``: ``<base>/numba-<profile>-<hash of its settings>``.

    ``<base>`` is :func:`cache_base`. The hash covers the settings (host CPU features
    included), the Numba version and :data:`CACHE_FORMAT`, so machines sharing a home directory
    do not mix caches.
    """
    conf = settings(profile)
    import importlib.metadata as md

    try:
        numba_version = md.version("numba")
    except md.PackageNotFoundError:  # pragma: no cover - numba is a dependency
        numba_version = "?"
    key = [conf, numba_version, CACHE_FORMAT]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    return str(Path(cache_base()) / f"numba-{profile}-{digest.hexdigest()[:10]}")


def env(profile: str, base: dict | None = None) -> dict:
    """A full environment for a subprocess running under ``profile``: ``base`` (default
    ``os.environ``) with the profile's variables set or removed and its ``NUMBA_CACHE_DIR``."""
    out = dict(os.environ if base is None else base)
    for key, value in settings(profile).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    out["NUMBA_CACHE_DIR"] = cache_dir(profile)
    return out


def _codegen_exists() -> bool:
    """True once Numba's CPU target context (and with it the LLVM target machine) exists."""
    if "numba" not in sys.modules:
        return False
    from numba.core import registry

    return "_toplevel_target_context" in registry.cpu_target.__dict__


def apply(profile: str = "fast_gemm") -> None:
    """Switch this process to ``profile``: set the variables in ``os.environ`` (and
    ``NUMBA_CACHE_DIR`` to :func:`cache_dir`) and, if Numba is already imported, make it re-read
    them with ``numba.core.config.reload_config()``.

    Must run before any ``@njit`` function is defined (importing :mod:`kernellab.kernels.gemm_cpu`
    defines some). Applying the profile already in effect is a no-op. Raises ValueError for an
    unknown profile and RuntimeError when it is too late: Numba's CPU code generator already
    exists, so the CPU features and optimisation level can no longer change and functions
    already defined keep their cache directory.
    """
    wanted = settings(profile)
    directory = cache_dir(profile)
    if _codegen_exists():
        if profile in matching() and _config_cache_dir() == directory:
            _state["applied"] = profile
            return
        raise RuntimeError(
            f"kernellab.codegen.apply({profile!r}) is too late: Numba's CPU code generator "
            "already exists (an @njit function was defined or compiled in this process), so "
            "NUMBA_CPU_FEATURES / NUMBA_OPT can no longer change and cached kernels are bound "
            "to their cache directory. Call apply() before importing any module that defines "
            "@njit functions, or run a subprocess with env=kernellab.codegen.env("
            f"{profile!r}).")
    for key, value in wanted.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.environ["NUMBA_CACHE_DIR"] = directory
    if "numba" in sys.modules:
        from numba.core import config

        config.reload_config()
    _state["applied"] = profile


def _config_cache_dir() -> str:
    from numba.core import config

    return config.CACHE_DIR


def in_effect() -> dict:
    """The settings Numba compiles with now, read back from Numba (imports it).

    Returns a dict with the four variables as Numba holds them (``NUMBA_CPU_FEATURES`` taken
    from the code generator once it exists, else from the config; ``None`` means the host's
    features) plus ``NUMBA_CACHE_DIR``.
    """
    from numba.core import config

    config.reload_config()  # what the compiler does before every compilation
    features = config.CPU_FEATURES
    opt = config.OPT
    if _codegen_exists():
        from numba.core import registry

        features = registry.cpu_target.target_context.codegen()._tm_features
    return {
        "NUMBA_SLP_VECTORIZE": str(int(config.SLP_VECTORIZE)),
        "NUMBA_LOOP_VECTORIZE": str(int(config.LOOP_VECTORIZE)),
        "NUMBA_CPU_FEATURES": features,
        "NUMBA_OPT": "max" if opt.is_opt_max else str(int(opt)),
        "NUMBA_CACHE_DIR": config.CACHE_DIR,
    }


def matching() -> list:
    """The profiles whose settings Numba compiles with now (several where they coincide:
    without AVX-512, ``full_width`` is ``default``)."""
    now = in_effect()
    host = host_cpu_features()
    out = []
    for name in PROFILES:
        conf = settings(name)
        expected_features = conf["NUMBA_CPU_FEATURES"] or host
        if (now["NUMBA_SLP_VECTORIZE"] == conf["NUMBA_SLP_VECTORIZE"]
                and now["NUMBA_LOOP_VECTORIZE"] == conf["NUMBA_LOOP_VECTORIZE"]
                and now["NUMBA_OPT"] == conf["NUMBA_OPT"]
                and (now["NUMBA_CPU_FEATURES"] or host) == expected_features):
            out.append(name)
    return out


def active() -> str:
    """Which profile this process compiles with: one of :data:`PROFILES` or ``"custom"``
    (some other combination), read back from Numba's configuration (imports numba). Where
    two profiles have the same settings, the one whose cache directory is in use is named."""
    matches = matching()
    if not matches:
        return "custom"
    cache = _config_cache_dir()
    return next((name for name in matches if cache_dir(name) == cache), matches[0])


def describe() -> dict:
    """For reports: the active profile, the settings in effect, and the Numba/llvmlite versions."""
    import llvmlite
    import numba

    info = {"profile": active(), "settings": in_effect(), "applied": _state["applied"],
            "numba": numba.__version__, "llvmlite": llvmlite.__version__}
    features = (info["settings"]["NUMBA_CPU_FEATURES"] or "").split(",")
    # Only what differs from the host's feature list, not the whole list.
    host = set(host_cpu_features().split(","))
    info["cpu_features_vs_host"] = [f for f in features if f and f not in host]
    return info
