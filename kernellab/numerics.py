"""Numerical checks against float64 golden references.

A kernel's output is compared with a float64 reference computed from the *same rounded
inputs* the kernel saw. :func:`compare` reports the max absolute and relative error, the error in
ULPs of the output dtype, the worst index, the mismatch count and, for 2-D outputs, a per-tile
mismatch map (wrong tiles only on the last tile row/column point at a tail bug).

Tolerance policies
------------------
* :class:`Elementwise` — ``|out - ref| <= atol + rtol * |ref|`` with the dtype table of
  ``torch.testing.assert_close`` (PyTorch docs, "torch.testing"): fp16 rtol 1e-3, bf16 1.6e-2,
  fp32 1.3e-6, fp64 1e-7; atol 1e-5 (fp64: 1e-7).
* :class:`KAware` — for GEMM-like reductions of length K, element-wise
  ``|err| <= c * sqrt(K) * (u_acc + u_ref) * (|A| @ |B|) + u_out * |ref|`` plus a Frobenius-norm
  check of the same form with ``c = 1`` (an average, not a tail: see
  :meth:`KAware.frobenius_bound`). The sqrt(K) growth is the probabilistic rounding-error bound of
  Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput.
  41(5), 2019, Thm 2.4 and §3 (inner products): with independent, mean-zero rounding errors the
  computed inner product satisfies ``|err| <= lambda * sqrt(K) * u * (|a|^T |b|) + O(u^2)`` with
  probability at least ``1 - 2K exp(-lambda^2 (1-u)^2 / 2)``. ``c = lambda = 6`` gives a failure
  probability below 3e-8 * K per element even under that union bound, and far less in practice:
  for mean-zero data the partial sums are much smaller than ``|a|^T |b|``. Accumulating in a
  lower precision (u 2**13 times larger for fp16 than fp32) fails by orders of magnitude.
  ``u_ref`` is the reference's own rounding (it is computed in finite
  precision too); ``u_out`` covers the final rounding to the output dtype.
* :class:`RowSoftmax` — a row softmax with float32 statistics: a relative bound that grows with
  ``m - x_i``, ``ln N`` and ``sqrt(N)``, plus one ulp of the output dtype (derived in its
  docstring).
* :class:`MeasuredBaseline` — ``|err| <= kappa * (max error of a plain same-precision
  implementation on the same inputs) + floor``: the FlashAttention tests' convention.
* :class:`Explicit` — an element-wise bound the caller derives from the operation's own
  rounding steps.
* :class:`Exact` — every element equal: integers by value; floats by their bits (the
  reference rounded to the output dtype must be the output's bit pattern, so -0 and +0
  differ; a NaN matches only where the reference is NaN, with any payload: IEEE 754 §6.2
  leaves NaN payloads to the implementation, §6.3 fixes the sign of a zero sum).

A reference whose typical magnitude does not dwarf the policy's ``atol`` is an error in the lab
spec (:class:`SpecError`): then an all-zero output could pass.

Margin rule (the course's, for every lab): each lab's reference solution uses under half of
every error budget (``Comparison.budget_used < 0.5``), and the grader self-tests assert it, so a
tolerance too tight for float16/bfloat16 shows up in the tests rather than on a correct kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

try:  # bf16 lives in ml_dtypes
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None
    _BF16 = None


class SpecError(ValueError):
    """A lab specification is unsound (e.g. its reference values are too small for its atol)."""


def finfo(dtype):
    """``np.finfo`` that also knows ``ml_dtypes.bfloat16`` (through ``ml_dtypes.finfo``).
    Raises ValueError for non-float dtypes."""
    dtype = np.dtype(dtype)
    if _BF16 is not None and dtype == _BF16:
        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)


_finfo = finfo


def unit_roundoff(dtype) -> float:
    """Unit roundoff u = 2**-(p) of a float dtype with p significand bits (incl. the hidden one).

    float64 2**-53, float32 2**-24, float16 2**-11, bfloat16 2**-8 (IEEE 754-2019 §3.3;
    Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.1).
    Raises TypeError for non-float dtypes.
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f" and not (_BF16 is not None and dtype == _BF16):
        raise TypeError(f"unit roundoff is defined for float dtypes, got {dtype}")
    return float(2.0 ** -(_finfo(dtype).nmant + 1))


def ulp(x: np.ndarray, dtype) -> np.ndarray:
    """Size of one unit in the last place of ``dtype`` at the magnitude of ``x`` (float64 array).

    Subnormal range: the spacing of the smallest normal's exponent minus the mantissa bits.
    """
    fi = _finfo(dtype)
    ax = np.maximum(np.abs(np.asarray(x, dtype=np.float64)), float(fi.smallest_normal))
    e = np.floor(np.log2(ax))
    return np.exp2(e - fi.nmant)


#: ``torch.testing.assert_close`` defaults (rtol, atol) by dtype name.
ELEMENTWISE_TABLE = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


@dataclass(frozen=True)
class Elementwise:
    """``|out - ref| <= atol + rtol * |ref|``; defaults from :data:`ELEMENTWISE_TABLE`."""

    dtype: str
    rtol: float | None = None
    atol: float | None = None
    name: str = "elementwise"

    def bounds(self, ref: np.ndarray) -> tuple[np.ndarray, float, float]:
        rtol, atol = ELEMENTWISE_TABLE[np.dtype(self.dtype).name]
        rtol = self.rtol if self.rtol is not None else rtol
        atol = self.atol if self.atol is not None else atol
        return atol + rtol * np.abs(ref), atol, rtol

    def describe(self) -> str:
        rtol, atol = ELEMENTWISE_TABLE[np.dtype(self.dtype).name]
        return (f"elementwise {np.dtype(self.dtype).name}: |err| <= "
                f"{self.atol if self.atol is not None else atol:g} + "
                f"{self.rtol if self.rtol is not None else rtol:g}*|ref|")


@dataclass(frozen=True)
class KAware:
    """K-aware bound for GEMM-like reductions (see the module docstring).

    ``abs_product`` is ``|A| @ |B|`` in float64 (shape of the output); ``K`` the reduction length.
    """

    K: int
    acc_dtype: str
    out_dtype: str
    abs_product: np.ndarray = field(repr=False, compare=False, default=None)
    c: float = 6.0
    ref_dtype: str = "float64"
    name: str = "k-aware"

    def coefficient(self) -> float:
        return self.c * math.sqrt(self.K) * (unit_roundoff(self.acc_dtype)
                                             + unit_roundoff(self.ref_dtype))

    def bounds(self, ref: np.ndarray) -> tuple[np.ndarray, float, float]:
        if self.abs_product is None:
            raise SpecError("KAware needs abs_product = |A| @ |B| (float64)")
        u_out = unit_roundoff(self.out_dtype)
        bound = self.coefficient() * self.abs_product + u_out * np.abs(ref)
        return bound, 0.0, u_out

    c_frobenius: float = 1.0

    def frobenius_bound(self, ref: np.ndarray) -> float:
        """Bound on ||out - ref||_F / ||ref||_F, with ``c_frobenius`` (1) in place of ``c``.

        The element-wise bound's ``c = 6`` is a tail bound for the *worst* of many elements;
        the Frobenius norm averages over all of them, and under the same model of independent,
        mean-zero rounding errors (Higham & Mary 2019, §2) the expected squared error of an
        inner product is at most ``K u^2 (|a|^T |b|)^2``, i.e. ``lambda = 1`` on average. So a
        kernel whose errors are systematically large — but each still under the element-wise
        tail bound — fails here.
        """
        nref = float(np.linalg.norm(ref))
        if nref == 0.0:
            return math.inf
        coef = self.coefficient() * self.c_frobenius / self.c
        return (coef * float(np.linalg.norm(self.abs_product))
                + unit_roundoff(self.out_dtype) * nref) / nref

    def describe(self) -> str:
        return (f"K-aware: |err| <= {self.c:g}*sqrt(K={self.K})*(u_{np.dtype(self.acc_dtype).name}"
                f"+u_ref)*(|A||B|) + u_{np.dtype(self.out_dtype).name}*|C|, plus Frobenius")


@dataclass(frozen=True)
class RowSoftmax:
    """Element-wise bound for a row softmax ``y_i = exp(x_i - m) / sum_j exp(x_j - m)`` of rows
    of length ``N``, computed with statistics in ``acc_dtype`` and written in ``out_dtype``.

    ``|y_i - ref_i| <= rel_i * ref_i + floor`` with ::

        rel_i = u_acc * (8 + 3.35 (t_i + ln N) + c sqrt(N)) + 2 u_out + u_ref
        floor = max(ulp of out_dtype at 0, smallest normal of acc_dtype)

    where ``t_i = m - x_i >= 0`` (``shift``, :func:`reference_kernels.reductions.softmax_shift`).
    Derivation (first order in u = u_acc, each step a rounding of relative size <= u):

    * ``fl(x_i - m)`` is off by at most ``u t_i``, which ``exp`` turns into a relative error
      ``u t_i``; ``exp`` itself is within ``2 + 1.173 t_i`` ulp even in its fast form
      (``__expf``; CUDA C++ Programming Guide, "Intrinsic Functions" table; the accurate
      ``expf`` is within 2 ulp), and one ulp is at most ``2u`` relative: each term
      ``e_i = exp(x_i - m)`` carries ``|eps_i| <= u (4 + 3.35 t_i)``.
    * The sum ``s`` of the ``e_i`` inherits their weighted mean error
      ``sum e_i |eps_i| / s <= u (4 + 3.35 E_p[t])`` where ``p = y`` and
      ``E_p[t] = H(p) - ln s <= ln N`` (entropy at most ln N; ``s >= 1`` because the max term
      is 1), plus its own rounding: ``c sqrt(N) u`` with ``c = 6`` (the probabilistic bound
      of Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019, as in :class:`KAware`; the terms
      are positive, so ``sum |e_i| = s``).
    * The division adds ``u``; the float64 reference ``u_ref``. Summing:
      ``u (8 + 3.35 (t_i + ln N) + c sqrt(N)) + u_ref`` (the ``+1`` of the division is
      absorbed in 8 = 4 + 4).
    * Writing the output: ``2 u_out``, one ulp of the output dtype — the output must be
      *faithfully* rounded (either neighbour of the exact value), so a correctly rounded
      result uses at most half of this term. (With ``u_out`` alone, a float16 output that is
      correctly rounded could use 100% of its budget and leave no margin; see the margin rule
      above.)
    * ``floor``: GPUs flush subnormal results of ``expf`` (``ex2.approx.ftz``) and of
      fast-math division to zero, an absolute error below the smallest normal float32
      (1.2e-38); a float16 output cannot resolve less than its smallest subnormal (6e-8).

    A sum accumulated in float16 (u 8192x larger than float32's) misses this bound on long
    rows: one ulp of output rounding is then the only float16-sized term allowed.
    """

    N: int
    acc_dtype: str
    out_dtype: str
    shift: np.ndarray = field(repr=False, compare=False, default=None)
    c: float = 6.0
    ref_dtype: str = "float64"
    name: str = "row-softmax"

    def relative(self) -> np.ndarray:
        if self.shift is None:
            raise SpecError("RowSoftmax needs shift = m - x (float64, >= 0)")
        u = unit_roundoff(self.acc_dtype)
        t = np.asarray(self.shift, dtype=np.float64)
        return (u * (8.0 + 3.35 * (t + math.log(max(self.N, 1))) + self.c * math.sqrt(self.N))
                + 2.0 * unit_roundoff(self.out_dtype) + unit_roundoff(self.ref_dtype))

    def floor(self) -> float:
        out, acc = _finfo(self.out_dtype), _finfo(self.acc_dtype)
        return max(float(out.smallest_subnormal), float(acc.smallest_normal))

    def bounds(self, ref: np.ndarray) -> tuple[np.ndarray, float, float]:
        return self.relative() * np.abs(ref) + self.floor(), self.floor(), 0.0

    def describe(self) -> str:
        return (f"row softmax: |err| <= u_{np.dtype(self.acc_dtype).name}*(8 + 3.35*(m - x + "
                f"ln N) + {self.c:g}*sqrt(N={self.N}))*y + 2u_{np.dtype(self.out_dtype).name}*y "
                f"+ {self.floor():.2g}")


@dataclass(frozen=True)
class MeasuredBaseline:
    """``|out - ref| <= kappa * baseline_error + floor``: no worse than ``kappa`` times the max
    error a plain implementation in the same precision makes *on the same inputs*, plus a floor.

    The convention of the FlashAttention test suites (Dao-AILab/flash-attention,
    ``tests/test_flash_attn.py``: ``max|out - ref| <= 2 max|out_pt - ref|``; the FA3/FA4 tests add
    an absolute floor, ``hopper/test_flash_attn.py``): the tolerance adapts by itself to shape,
    data and accumulation length because it is measured, not guessed.

    ``baseline_error`` (float, >= 0): max |baseline - ref| over the output, measured by the
    caller; ``kappa``: the documented multiple; ``floor``: a float or an array of the output's
    shape (e.g. a rounding-error bound of the steps the baseline does not have);
    ``baseline`` / ``floor_note``: words for the report.
    """

    baseline_error: float
    kappa: float
    floor: object = 0.0
    baseline: str = "a same-precision baseline"
    floor_note: str = ""
    name: str = "measured-baseline"

    def bounds(self, ref: np.ndarray) -> tuple[np.ndarray, float, float]:
        atol = self.kappa * float(self.baseline_error)
        return np.broadcast_to(atol + np.asarray(self.floor, dtype=np.float64),
                               ref.shape), atol, 0.0

    def describe(self) -> str:
        floor = f" + {self.floor_note}" if self.floor_note else ""
        return (f"measured baseline: |err| <= {self.kappa:g} x {self.baseline_error:.3g} "
                f"(max error of {self.baseline}){floor}")


def flash_attention_rule(baseline_error: float, ref: np.ndarray, dtype, *, rounding=None,
                         kappa: float = 2.0, floor_ulps: int = 1) -> MeasuredBaseline:
    """FlashAttention's test rule for an attention output of ``dtype`` (Dao-AILab/flash-attention
    ``tests/test_flash_attn.py``, ``hopper/test_flash_attn.py``):
    ``|O - ref| <= kappa * baseline_error + floor_ulps ulp(max|ref|) + rounding``, with
    ``baseline_error`` = max|O_plain - ref| of a plain attention in the kernel's own dtype with
    its operations reordered (:func:`reference_kernels.attention.plain_error`) and ``ref`` the
    float64 golden output (B, H, N, d). kappa = 2 as the FA2-era tests; the floor is one ulp of
    the output dtype at the output's largest magnitude, as the FA3/FA4 tests'
    ``2 max|(ref + 0.3 - 0.3) - ref|``.

    ``rounding`` (optional, an array of ref's shape): the float32 rounding bound of a fused
    kernel (:func:`reference_kernels.attention.fused_rounding_bound`), added to the floor.
    FlashAttention's tests apply the rule to float16/bfloat16 only, where the plain baseline
    rounds S and P to the low dtype and a float32-accumulating kernel is far more accurate. For
    a float32 kernel the baseline computes at the kernel's own precision, and "at most twice
    its error" compares two draws of the same rounding noise, which a correct kernel can lose
    on some inputs, more often the larger the scores. The derived bound is the noise both
    share, as a worst case: for float32 it dominates the measured part, so float32 outputs are
    in effect held to it; for a float16 kernel it adds little to the budget (chapter 5 prints
    both parts for its inputs). Raises SpecError for an unsupported dtype."""
    dt = np.dtype(dtype)
    peak = float(np.abs(ref).max()) if np.size(ref) else 0.0
    floor = floor_ulps * float(ulp(np.array(peak), dt))
    note = f"{floor_ulps} ulp of {dt.name} at max|O|"
    if rounding is not None:
        floor = floor + np.asarray(rounding, dtype=np.float64)
        note += " + the float32 rounding bound of a fused kernel"
    return MeasuredBaseline(float(baseline_error), kappa=kappa, floor=floor,
                            baseline=f"a plain {dt.name} attention, operations reordered",
                            floor_note=note)


@dataclass(frozen=True)
class Explicit:
    """``|out - ref| <= bound`` with the bound given element by element (an array of the
    output's shape, float64), derived by the caller from the operation's own rounding steps
    (e.g. a dequantisation: an int32-to-float conversion and a few float32 multiplies and adds
    each off by at most u |value|). ``note`` says how it was derived, for the report."""

    bound: object
    note: str = ""
    name: str = "explicit"

    def bounds(self, ref: np.ndarray) -> tuple[np.ndarray, float, float]:
        return np.broadcast_to(np.asarray(self.bound, dtype=np.float64), ref.shape), 0.0, 0.0

    def describe(self) -> str:
        return f"explicit bound: {self.note}" if self.note else "explicit element-wise bound"


@dataclass(frozen=True)
class Exact:
    """Every element equal. Integer outputs: by value. Float outputs (float16/32/64,
    bfloat16): by bits against the float64 reference rounded to the output dtype, so a zero
    of the wrong sign is wrong (IEEE 754-2019 §6.3: x + x keeps x's sign for a zero, a
    cancellation gives +0); where the reference is NaN any NaN passes (payloads are the
    implementation's, §6.2) and only a NaN does. The reference must hold values of the output
    dtype (the correctly rounded result), or every element it does not hold fails."""

    name: str = "exact"
    #: what the reference is, for the report ("the correctly rounded float16 sum")
    note: str = ""

    def bounds(self, ref: np.ndarray):
        return np.zeros(ref.shape), 0.0, 0.0

    def describe(self) -> str:
        return "exact: every element equal" + (f" to {self.note}" if self.note else "")


@dataclass
class Comparison:
    """Result of :func:`compare`. All errors are in float64 against the golden reference."""

    ok: bool
    policy: str
    shape: tuple
    n: int
    mismatches: int
    max_abs: float
    max_rel: float
    max_ulp: float
    worst_index: tuple | None
    worst_out: float | None
    worst_ref: float | None
    worst_bound: float | None
    budget_used: float  # max over elements of |err| / bound (<= 1 passes)
    nonfinite: int
    signed_zeros: int = 0  # exact float rules: zeros whose sign differs from the reference's
    frobenius_rel: float | None = None
    frobenius_bound: float | None = None
    tile: tuple | None = None
    bad_tiles: list = field(default_factory=list)
    tile_grid: tuple | None = None
    message: str = ""

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["shape"] = list(self.shape)
        d["worst_index"] = list(self.worst_index) if self.worst_index is not None else None
        d["bad_tiles"] = [list(t) for t in self.bad_tiles]
        d["tile"] = list(self.tile) if self.tile else None
        d["tile_grid"] = list(self.tile_grid) if self.tile_grid else None
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = repr(v)
        return d

    def tile_map(self) -> str:
        """ASCII map of the output tiles: ``#`` wrong, ``.`` right (2-D outputs only)."""
        if not self.tile_grid or self.tile_grid[0] * self.tile_grid[1] < 2:
            return ""
        grid = [["."] * self.tile_grid[1] for _ in range(self.tile_grid[0])]
        for i, j in self.bad_tiles:
            grid[i][j] = "#"
        return "\n".join("".join(row) for row in grid)


def check_reference_scale(ref: np.ndarray, atol: float, factor: float = 100.0) -> None:
    """Raise :class:`SpecError` unless the median |ref| is at least ``factor`` x ``atol``."""
    if atol <= 0 or ref.size == 0:
        return
    med = float(np.median(np.abs(ref)))
    if med < factor * atol:
        raise SpecError(f"reference magnitude (median |ref| = {med:.3g}) does not dwarf "
                        f"atol = {atol:.3g}: an all-zero output could pass; rescale the inputs")


def compare(out: np.ndarray, ref: np.ndarray, policy, *, out_dtype=None,
            tile: tuple[int, int] | None = (32, 32)) -> Comparison:
    """Compare ``out`` with the float64 golden ``ref`` under ``policy``.

    Parameters
    ----------
    out : ndarray, any float/int dtype, same shape as ``ref``.
    ref : ndarray, float64 (int64 for :class:`Exact`).
    policy : :class:`Elementwise`, :class:`KAware` or :class:`Exact`.
    out_dtype : dtype for the ULP figures (default ``out.dtype``).
    tile : tile shape of the per-tile mismatch map for 2-D outputs (None: no map).

    Raises ValueError if the shapes differ (check shape and dtype before comparing values).
    """
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} differs from the reference's {ref.shape}")
    out_dtype = np.dtype(out_dtype or out.dtype)
    exact = isinstance(policy, Exact)
    bits = None
    if exact and is_float(out.dtype):
        bits = _bitwise(out, ref)
        bad_bits, diff, signed_zeros = bits
        o64 = out.astype(np.float64)
        nonfinite = ~np.isfinite(o64) & np.isfinite(ref)
    elif exact:
        diff = np.abs(out.astype(np.int64) - ref.astype(np.int64)).astype(np.float64)
        o64 = out.astype(np.float64)
        nonfinite = np.zeros(out.shape, bool)
    else:
        o64 = out.astype(np.float64)
        nonfinite = ~np.isfinite(o64) & np.isfinite(ref)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(o64 - ref)
        diff = np.where(nonfinite, np.inf, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
    bound, _, _ = policy.bounds(ref)
    bad = diff > bound if bits is None else bad_bits
    n_bad = int(bad.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(bound > 0, diff / np.where(bound > 0, bound, 1),
                        np.where(diff > 0, np.inf, 0))
        if bits is not None:
            used = np.where(bad, np.inf, 0.0)
        rel = np.where(np.abs(ref) > 0, diff / np.abs(ref), np.where(diff > 0, np.inf, 0))
        ulps = (diff / ulp(ref, out_dtype)) if out_dtype.kind == "f" or (
            _BF16 is not None and out_dtype == _BF16) else diff
        if bits is not None:  # equal bits: 0 ulp (also where the reference is NaN or inf)
            ulps = np.where(diff == 0, 0.0, ulps)
    pick = used
    if bits is not None:  # the largest wrong difference first, then the first wrong element
        pick = np.where(bad, 1.0 + np.minimum(diff, np.finfo(np.float64).max / 2), 0.0)
    if out.size:
        w = np.unravel_index(int(np.argmax(pick)), out.shape)
        worst = (tuple(int(i) for i in w), float(o64[w]), float(ref[w]), float(bound[w]))
    else:
        worst = (None, None, None, None)
    res = Comparison(
        ok=n_bad == 0, policy=policy.describe(), shape=tuple(out.shape), n=int(out.size),
        mismatches=n_bad, max_abs=float(diff.max()) if out.size else 0.0,
        max_rel=float(rel.max()) if out.size else 0.0,
        max_ulp=float(ulps.max()) if out.size else 0.0,
        worst_index=worst[0], worst_out=worst[1], worst_ref=worst[2], worst_bound=worst[3],
        budget_used=float(used.max()) if out.size else 0.0, nonfinite=int(nonfinite.sum()),
        signed_zeros=int(signed_zeros.sum()) if bits is not None else 0,
    )
    if isinstance(policy, KAware) and out.size:
        nref = float(np.linalg.norm(ref))
        fr = float(np.linalg.norm(np.where(np.isfinite(diff), diff, 0.0))) / nref if nref else 0.0
        if res.nonfinite:
            fr = math.inf
        res.frobenius_rel, res.frobenius_bound = fr, policy.frobenius_bound(ref)
        if fr > res.frobenius_bound:
            res.ok = False
    if tile and out.ndim == 2 and out.size:
        th, tw = tile
        gi, gj = -(-out.shape[0] // th), -(-out.shape[1] // tw)
        padded = np.zeros((gi * th, gj * tw), bool)
        padded[: out.shape[0], : out.shape[1]] = bad
        per_tile = padded.reshape(gi, th, gj, tw).any(axis=(1, 3))
        res.tile, res.tile_grid = (th, tw), (gi, gj)
        res.bad_tiles = [(int(i), int(j)) for i, j in zip(*np.nonzero(per_tile))]
    res.message = _explain(res)
    return res


def is_float(dtype) -> bool:
    """Whether ``dtype`` is a float dtype, ``ml_dtypes.bfloat16`` (NumPy kind "V") included."""
    return np.dtype(dtype).kind == "f" or (_BF16 is not None and np.dtype(dtype) == _BF16)


def named_dtype(name: str) -> np.dtype:
    """The dtype called ``name``: NumPy's, or ``ml_dtypes.bfloat16`` for "bfloat16"."""
    return _BF16 if name == "bfloat16" else np.dtype(name)


def _bitwise(out: np.ndarray, ref: np.ndarray):
    """:class:`Exact` for a float ``out``: ``(bad, diff, signed_zeros)`` element-wise, where
    ``bad`` is "not the reference's bits" (any NaN matches a NaN reference), ``diff`` the
    absolute difference (inf where one side is NaN, 0 where the values are equal) and
    ``signed_zeros`` the zeros whose sign differs from the reference's."""
    r64 = np.asarray(ref, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r_out = r64.astype(out.dtype)
        held = (r_out.astype(np.float64) == r64) | np.isnan(r64)
    u = np.dtype(f"u{out.dtype.itemsize}")
    o_nan, r_nan = np.isnan(out.astype(np.float64)), np.isnan(r64)
    same = np.where(r_nan, o_nan, (out.view(u) == r_out.view(u)) & held)
    o64 = out.astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(o64 - r64)
    diff = np.where(o_nan != r_nan, np.inf, np.where(np.isnan(diff), 0.0, diff))
    diff = np.where(same, 0.0, diff)
    zeros = (o64 == 0) & (r64 == 0) & (np.signbit(o64) != np.signbit(r64))
    return ~same, diff, zeros


def _explain(res: Comparison) -> str:
    if res.ok:
        return (f"ok: max abs err {res.max_abs:.3g}, {res.max_ulp:.3g} ulp, "
                f"{100 * res.budget_used:.1f}% of the error budget")
    parts = []
    if res.nonfinite:
        parts.append(f"{res.nonfinite} element(s) are NaN/inf where the reference is finite "
                     "(outputs start as NaN: were some never written, or did the kernel compute "
                     "inf/NaN?)")
    if res.signed_zeros:
        parts.append(f"{res.signed_zeros} element(s) have the wrong sign of zero (+0 where "
                     "the reference is -0, or -0 for +0): the exact rule compares bits")
    if res.mismatches:
        parts.append(f"{res.mismatches} of {res.n} elements outside the tolerance; worst at "
                     f"{res.worst_index}: got {res.worst_out:.7g}, expected {res.worst_ref:.7g} "
                     f"(allowed error {res.worst_bound:.3g})")
    if res.frobenius_rel is not None and res.frobenius_bound is not None and \
            res.frobenius_rel > res.frobenius_bound:
        parts.append(f"Frobenius relative error {res.frobenius_rel:.3g} > bound "
                     f"{res.frobenius_bound:.3g}")
    if res.bad_tiles and res.tile_grid:
        gi, gj = res.tile_grid
        edge = all(i == gi - 1 or j == gj - 1 for i, j in res.bad_tiles)
        if edge and gi > 1 and gj > 1 and len(res.bad_tiles) < gi * gj:
            parts.append("only the last tile row/column is wrong: look for a tail (boundary) bug")
        elif len(res.bad_tiles) == gi * gj:
            parts.append("every output tile is wrong")
        else:
            parts.append(f"{len(res.bad_tiles)} of {gi * gj} output tiles are wrong")
    return "; ".join(parts)
