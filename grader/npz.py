"""Arrays between the grader and its worker, in ``.npz`` files: numpy's format (read with
``allow_pickle=False``: data only), plus the dtypes numpy cannot name itself (``ml_dtypes``'
``bfloat16``, float8 ...), stored as their bits (an unsigned integer of the same width) under
``"<name>::<dtype>"`` and restored on load. Without this a bfloat16 array comes back as raw
``V2`` bytes."""

from __future__ import annotations

import numpy as np

SEP = "::"
#: the ml_dtypes names :func:`load` restores
_KNOWN = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                    "float8_e5m2fnuz", "int4", "uint4"})


def _foreign(dt: np.dtype) -> bool:
    return type(dt).__module__.startswith("ml_dtypes") or dt.type.__module__.startswith(
        "ml_dtypes")


def save(path, arrays: dict) -> None:
    """``np.savez(path, **arrays)``, ml_dtypes arrays as their bits."""
    out = {}
    for k, a in arrays.items():
        a = np.asarray(a)
        if _foreign(a.dtype):
            out[f"{k}{SEP}{a.dtype.name}"] = a.view(f"u{a.dtype.itemsize}")
        else:
            out[k] = a
    np.savez(path, **out)


def load(path) -> dict:
    """The arrays :func:`save` wrote (any ``.npz``), with their dtypes."""
    with np.load(path) as z:
        out = {}
        for k in z.files:
            a = z[k]
            if SEP in k:
                import ml_dtypes

                name, dt = k.split(SEP, 1)
                if dt not in _KNOWN:    # the worker's file is not trusted: no arbitrary names
                    raise ValueError(f"array {name!r}: unknown dtype {dt!r}")
                a = a.view(np.dtype(getattr(ml_dtypes, dt)))
                k = name
            out[k] = a
        return out
