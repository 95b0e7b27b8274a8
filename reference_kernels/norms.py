"""LayerNorm and RMSNorm: the golden references (numpy, float64).

Both normalise over the **last axis** of X (length N), independently for every row (every
index of the leading axes):

* LayerNorm (Ba, Kiros & Hinton, "Layer Normalization", arXiv:1607.06450, 2016)::

      mean = sum(x) / N
      var  = sum((x - mean)**2) / N          # biased (1/N) variance, as torch.nn.LayerNorm
      rstd = 1 / sqrt(var + eps)             # eps inside the square root; PyTorch default 1e-5
      y    = (x - mean) * rstd * gamma + beta

* RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019,
  arXiv:1910.07467)::

      rstd = 1 / sqrt(sum(x**2) / N + eps)   # no re-centering; eps 1e-6 as LLaMA / T5 code
      y    = x * rstd * g

Inputs of any float dtype (float16, float32, float64, ``ml_dtypes.bfloat16``) are widened
*exactly* to float64 first, so the reference sees the same rounded values the kernel saw.
Everything after that is float64, with numpy's pairwise sums and the two-pass
variance (mean first, then the mean of squared deviations), whose error is a few units of
2**-53 relative to the row's scale: far below any float32 kernel's.

``eps`` must be finite and > 0. PyTorch accepts eps = 0, but then a constant row (variance 0)
gives 0 * inf = NaN; requiring eps > 0 keeps every golden output finite on finite inputs.

This module imports numpy only, like all of reference_kernels: ``ml_dtypes`` arrays are converted
through the casts ml_dtypes registers with numpy, without importing it here.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["layernorm_golden", "layernorm_stats_golden", "rmsnorm_golden"]


def _widen(X, name: str = "X") -> np.ndarray:
    """X as float64, exactly: float dtypes only (incl. ml_dtypes' bfloat16 / float8 types)."""
    X = np.asarray(X)
    dt = X.dtype
    is_float = dt.kind == "f" or (dt.kind == "V" and dt.name.startswith(("bfloat", "float")))
    if not is_float:
        raise TypeError(f"{name} must have a float dtype (float16/32/64 or ml_dtypes.bfloat16), "
                        f"got {dt}")
    if X.ndim < 1:
        raise ValueError(f"{name} must have at least one axis (the normalised one), got a scalar")
    if X.shape[-1] == 0:
        raise ValueError(f"{name} has an empty last axis: the mean of 0 elements is undefined")
    return X.astype(np.float64)


def _affine(p, N: int, name: str) -> np.ndarray | None:
    if p is None:
        return None
    p = _widen(p, name)
    if p.shape != (N,):
        raise ValueError(f"{name} must have shape ({N},) (the last axis of X), got {p.shape}")
    return p


def _check_eps(eps) -> float:
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer,
                                                                 np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not (math.isfinite(eps) and eps > 0.0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    return eps


def layernorm_stats_golden(X, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """Per-row ``(mean, rstd)`` of LayerNorm in float64, each of shape ``X.shape[:-1]``.

    ``mean = sum(x)/N``, ``rstd = 1/sqrt(var + eps)`` with the biased variance
    ``var = sum((x - mean)**2)/N`` (two-pass). Raises as :func:`layernorm_golden`.
    """
    X = _widen(X)
    eps = _check_eps(eps)
    mean = X.mean(axis=-1)
    var = np.square(X - mean[..., None]).mean(axis=-1)
    return mean, 1.0 / np.sqrt(var + eps)


def layernorm_golden(X, gamma=None, beta=None, eps: float = 1e-5, *,
                     return_stats: bool = False):
    """Golden LayerNorm over the last axis, float64.

    ``X``: shape (..., N), N >= 1, any float dtype (widened exactly to float64).
    ``gamma``, ``beta``: shape (N,) float arrays, or None (gamma = 1, beta = 0).
    ``eps``: finite, > 0 (default 1e-5, PyTorch's ``nn.LayerNorm``).

    Returns ``Y`` (float64, shape of X); with ``return_stats=True`` the tuple
    ``(Y, mean, rstd)``, mean and rstd float64 of shape ``X.shape[:-1]``.

    Raises TypeError for non-float X, gamma or beta, or a non-numeric eps; ValueError for a
    scalar X, an empty last axis, gamma/beta of the wrong shape, or eps <= 0 / not finite.
    Source: Ba, Kiros & Hinton 2016 (arXiv:1607.06450), eq. for the layer statistics with the
    1/H (biased) variance; eps placement and default as ``torch.nn.LayerNorm``.
    """
    X = _widen(X)
    N = X.shape[-1]
    g = _affine(gamma, N, "gamma")
    b = _affine(beta, N, "beta")
    mean, rstd = layernorm_stats_golden(X, eps)
    Y = (X - mean[..., None]) * rstd[..., None]
    if g is not None:
        Y = Y * g
    if b is not None:
        Y = Y + b
    return (Y, mean, rstd) if return_stats else Y


def rmsnorm_golden(X, g=None, eps: float = 1e-6, *, return_rstd: bool = False):
    """Golden RMSNorm over the last axis, float64.

    ``X``: shape (..., N), N >= 1, any float dtype (widened exactly to float64).
    ``g``: shape (N,) float array (the gain), or None (g = 1). ``eps``: finite, > 0 (default
    1e-6, as LLaMA's and T5's implementations; PyTorch's ``nn.RMSNorm`` defaults to the
    dtype's machine eps instead).

    Returns ``Y`` = x / sqrt(mean(x**2) + eps) * g (float64, shape of X); with
    ``return_rstd=True`` the tuple ``(Y, rstd)``, rstd float64 of shape ``X.shape[:-1]``.

    Raises TypeError for non-float X or g or a non-numeric eps; ValueError for a scalar X, an
    empty last axis, g of the wrong shape, or eps <= 0 / not finite.
    Source: Zhang & Sennrich 2019 (arXiv:1910.07467), eq. 4.
    """
    X = _widen(X)
    N = X.shape[-1]
    gg = _affine(g, N, "g")
    eps = _check_eps(eps)
    rstd = 1.0 / np.sqrt(np.square(X).mean(axis=-1) + eps)
    Y = X * rstd[..., None]
    if gg is not None:
        Y = Y * gg
    return (Y, rstd) if return_rstd else Y
