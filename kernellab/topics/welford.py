"""Chapter 3: one-pass variance (Welford) and the parallel merge (Chan, Golub & LeVeque), on
the CPU, in a chosen working precision.

Why it matters for LayerNorm: a kernel that wants the mean and the variance of a row in one
pass over memory could accumulate ``sum(x)`` and ``sum(x*x)`` and use the textbook formula
``var = E[x^2] - E[x]^2`` (:func:`naive_variance`). When the mean is large compared with the
standard deviation, both terms are about ``mean^2`` and their difference loses
``log2(mean^2 / var)`` bits: with mean 1e4 and std 1 in float32 (24 bits) E[x^2] ~ 1e8 has a
rounding error of about 4, larger than the variance itself, so the result is noise or even
negative (:func:`cancellation_demo`). Welford's update keeps the running mean and the sum of
squared deviations ``M2`` instead, and never forms ``mean^2``::

    n += 1;  delta = x - mean;  mean += delta / n;  M2 += delta * (x - mean)     # var = M2 / n

(B. P. Welford, "Note on a method for calculating corrected sums of squares and products",
Technometrics 4(3):419-420, 1962.) Its error bound grows like ``n * kappa * u`` with the
condition number ``kappa = sqrt(1 + mean^2 / var)``, the naive formula's like
``n * kappa^2 * u`` (T. F. Chan, G. H. Golub & R. J. LeVeque, "Algorithms for computing the
sample variance: analysis and recommendations", The American Statistician 37(3):242-247,
1983).

A parallel reduction (a thread's elements, then the lanes of a warp, then the warps of a block)
needs to combine two partial results ``(n_a, mean_a, M2_a)`` and ``(n_b, mean_b, M2_b)``
(Chan, Golub & LeVeque, Stanford CS tech. report STAN-CS-79-773, 1979)::

    n = n_a + n_b;  delta = mean_b - mean_a
    mean = mean_a + delta * n_b / n
    M2   = M2_a + M2_b + delta^2 * n_a * n_b / n

(:func:`chan_merge`; :func:`tree_merge` applies it the way a warp-shuffle tree does). Merging
an empty partial (n = 0, mean = 0, M2 = 0) changes nothing, exactly -- what a GPU lane that got
no element of a short row contributes. Note that the merge is not commutative in floating
point (``merge(a, b)`` and ``merge(b, a)`` may differ in the last bit): a butterfly (xor)
shuffle leaves lanes with slightly different results; a down-shuffle tree gives one result, in
lane 0. PyTorch's CUDA LayerNorm uses the same two rules (``WelfordDataLN``, ``cuWelfordOnlineSum``
and ``cuWelfordCombine`` in ``aten/src/ATen/native/cuda/layer_norm_kernel.cu``).

All arithmetic here is done in numpy scalars of the working dtype (float32 by default; float64,
float16 also work): with numpy >= 2 (NEP 50) float32 op float32 stays float32, and every
constant is converted explicitly. Plain Python loops (interpreted steps per element): fine
for the chapter's sizes (<= 10^6), not for a benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["Moments", "welford", "chan_merge", "naive_variance", "two_pass_variance",
           "tree_merge", "cancellation_demo", "CancellationDemo"]


class Moments(NamedTuple):
    """A partial result of a variance reduction: count ``n`` (int), ``mean`` and ``m2`` (the sum
    of squared deviations from the mean), the last two numpy scalars of the working dtype."""

    n: int
    mean: np.floating
    m2: np.floating

    @property
    def variance(self) -> np.floating:
        """Biased (population) variance ``m2 / n`` in the working dtype (LayerNorm's); NaN if
        n = 0."""
        dt = type(self.m2)
        return dt(self.m2 / dt(self.n)) if self.n else dt(np.nan)

    @property
    def sample_variance(self) -> np.floating:
        """Unbiased variance ``m2 / (n - 1)``; NaN if n < 2."""
        dt = type(self.m2)
        return dt(self.m2 / dt(self.n - 1)) if self.n > 1 else dt(np.nan)


def _working_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"the working precision must be a numpy float dtype, got {dt}")
    return dt


def _as_vector(x, dt) -> np.ndarray:
    """x flattened and rounded to the working dtype (the values the algorithm sees)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and not (a.dtype.kind == "V" and
                                          a.dtype.name.startswith(("bfloat", "float"))):
        raise TypeError(f"x must be real numbers, got dtype {a.dtype}")
    return a.astype(dt).reshape(-1)


def welford(x, dtype=np.float32) -> Moments:
    """One-pass mean and M2 of ``x`` (any shape, flattened) with Welford's update, every operation
    rounded to ``dtype`` (default float32).

    ``x`` is first rounded to ``dtype``. Returns :class:`Moments` ``(n, mean, m2)``; for empty
    ``x`` ``(0, 0, 0)``. The count is kept as a float of ``dtype`` inside the loop (as a GPU
    kernel does), so float32 is exact up to 2**24 elements: ValueError beyond the working
    dtype's exact integer range. TypeError for a non-float ``dtype`` or non-real ``x``.
    """
    dt = _working_dtype(dtype)
    v = _as_vector(x, dt)
    if v.size > 2 ** (np.finfo(dt).nmant + 1):
        raise ValueError(f"{v.size} elements: a {dt} count is exact only up to "
                         f"2**{np.finfo(dt).nmant + 1}")
    f = dt.type
    one = f(1)
    n = f(0)
    mean = f(0)
    m2 = f(0)
    for xi in v:                      # xi: a numpy scalar of dtype dt
        n = n + one
        delta = xi - mean
        mean = mean + delta / n
        m2 = m2 + delta * (xi - mean)
    return Moments(int(v.size), mean, m2)


def chan_merge(a, b) -> Moments:
    """Combine two partial results ``a = (n_a, mean_a, m2_a)`` and ``b`` (tuples or
    :class:`Moments`) into the result for the union of their elements (Chan, Golub & LeVeque
    1979): ``delta = mean_b - mean_a``, ``mean = mean_a + delta*n_b/n``,
    ``m2 = m2_a + m2_b + delta**2 * n_a * n_b / n``.

    Arithmetic in the dtype of the means (``np.result_type``; float64 for Python floats). Either
    part may be empty (n = 0): the result is then the other part, exactly (for an empty part
    with mean 0 and m2 0, as :func:`welford` returns). Both empty: ``(0, 0, 0)``. Raises
    ValueError for a negative count.
    """
    na, ma, m2a = a
    nb, mb, m2b = b
    na, nb = int(na), int(nb)
    if na < 0 or nb < 0:
        raise ValueError(f"counts must be >= 0, got {na} and {nb}")
    dt = np.result_type(ma, mb, m2a, m2b)
    if dt.kind != "f":
        dt = np.dtype(np.float64)
    f = dt.type
    ma, mb, m2a, m2b = f(ma), f(mb), f(m2a), f(m2b)
    n = na + nb
    if n == 0:
        return Moments(0, f(0), f(0))
    fna, fnb, fn = f(na), f(nb), f(n)
    delta = mb - ma
    w = fnb / fn                       # the weight of b: 0 if b is empty, 1 if a is
    mean = ma + delta * w
    m2 = m2a + m2b + delta * delta * fna * w
    return Moments(n, mean, m2)


def naive_variance(x, dtype=np.float32) -> np.floating:
    """The textbook one-pass formula ``E[x^2] - E[x]^2`` (biased variance), every operation in
    ``dtype``: x rounded to ``dtype``, squared in ``dtype``, both means by numpy's (pairwise)
    sum accumulated in ``dtype``. Suffers catastrophic cancellation when ``|mean| >> std``; the
    result can be negative. Raises ValueError for empty ``x``."""
    dt = _working_dtype(dtype)
    v = _as_vector(x, dt)
    if v.size == 0:
        raise ValueError("the variance of 0 elements is undefined")
    f = dt.type
    n = f(v.size)
    ex = np.sum(v, dtype=dt) / n
    ex2 = np.sum(v * v, dtype=dt) / n
    return f(ex2 - ex * ex)


def two_pass_variance(x, dtype=np.float32) -> np.floating:
    """Biased variance by two passes in ``dtype``: the mean, then the mean of squared deviations
    (numpy's pairwise sums). Accurate, but it reads the data twice. ValueError for empty x."""
    dt = _working_dtype(dtype)
    v = _as_vector(x, dt)
    if v.size == 0:
        raise ValueError("the variance of 0 elements is undefined")
    f = dt.type
    n = f(v.size)
    mean = np.sum(v, dtype=dt) / n
    d = v - mean
    return f(np.sum(d * d, dtype=dt) / n)


def tree_merge(x, leaves: int, dtype=np.float32, layout: str = "strided") -> Moments:
    """Welford on each of ``leaves`` parts of ``x``, then a pairwise tree of :func:`chan_merge`.

    ``layout="strided"`` gives leaf ``i`` the elements ``x[i::leaves]`` -- what GPU thread ``i``
    of a block of ``leaves`` threads reads in a grid-stride loop; ``"contiguous"`` splits ``x``
    into ``leaves`` consecutive chunks (``np.array_split``). Leaves may be empty (more leaves
    than elements). The tree is the one a down-shuffle reduction builds: at step ``s = 1, 2,
    4, ...`` leaf ``i`` (a multiple of ``2s``) absorbs leaf ``i + s``; the result is leaf 0.
    It equals :func:`welford` of the whole ``x`` up to rounding (exactly in exact arithmetic).
    Raises ValueError for ``leaves < 1`` or an unknown layout.
    """
    dt = _working_dtype(dtype)
    leaves = int(leaves)
    if leaves < 1:
        raise ValueError(f"need at least one leaf, got {leaves}")
    v = _as_vector(x, dt)
    if layout == "strided":
        parts = [v[i::leaves] for i in range(leaves)]
    elif layout == "contiguous":
        parts = np.array_split(v, leaves)
    else:
        raise ValueError(f"layout must be 'strided' or 'contiguous', got {layout!r}")
    level = [welford(p, dt) for p in parts]
    step = 1
    while step < leaves:
        for i in range(0, leaves - step, 2 * step):
            level[i] = chan_merge(level[i], level[i + step])
        step *= 2
    return level[0]


@dataclass(frozen=True)
class CancellationDemo:
    """Result of :func:`cancellation_demo`: the reference variance (float64, two-pass, on the
    same rounded data) and each float32 method's value and relative error."""

    n: int
    mean: float
    std: float
    dtype: str
    reference: float
    values: dict          # method -> variance in the working dtype (as a Python float)
    rel_errors: dict      # method -> |value - reference| / reference

    def __str__(self) -> str:
        lines = [f"variance of {self.n} values, mean {self.mean:g}, std {self.std:g}, "
                 f"working precision {self.dtype}; reference (float64) {self.reference:.9g}",
                 f"{'method':<24}{'variance':>16}{'rel. error':>14}"]
        for k, v in self.values.items():
            lines.append(f"{k:<24}{v:>16.9g}{self.rel_errors[k]:>14.2e}")
        return "\n".join(lines)


def cancellation_demo(n: int = 10_000, mean: float = 1e4, std: float = 1.0, seed: int = 0,
                      dtype=np.float32, leaves: int = 256) -> CancellationDemo:
    """Variance of ``n`` normal samples with the given ``mean`` and ``std``, rounded to
    ``dtype``, by four methods in ``dtype``: naive ``E[x^2] - E[x]^2``, two-pass, Welford, and
    Welford per leaf + Chan tree (``leaves`` strided leaves, like a thread block). The
    reference is float64 two-pass on the same rounded values.

    With the defaults (float32, mean 1e4, std 1) the naive formula is wrong in its first digit
    (or negative), the others agree with the reference to about 1e-4 relative. Print the result
    for a table.
    """
    dt = _working_dtype(dtype)
    rng = np.random.default_rng(seed)
    x = (mean + std * rng.standard_normal(int(n))).astype(dt)
    x64 = x.astype(np.float64)
    ref = float(np.mean(np.square(x64 - x64.mean())))
    values = {
        "naive E[x^2]-E[x]^2": float(naive_variance(x, dt)),
        "two-pass": float(two_pass_variance(x, dt)),
        "Welford": float(welford(x, dt).variance),
        f"Welford + Chan tree ({leaves})": float(tree_merge(x, leaves, dt).variance),
    }
    rel = {k: abs(v - ref) / ref for k, v in values.items()}
    return CancellationDemo(int(n), float(mean), float(std), dt.name, ref, values, rel)
