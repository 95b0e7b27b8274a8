"""Floating-point summation in FP32, FP16 and BF16: orders, errors and Higham's bounds (chapter 3).

One job: sum a 1-D array in a chosen *working precision* — ``"float32"``, ``"float16"`` or
``"bfloat16"`` — in a chosen *order*, and compare the result with the exactly rounded sum and
with the worst-case error bound of that order.

Orders (all compiled with ``numba.njit(cache=True)``, as :mod:`kernellab.kernels.gemm_cpu`):

==============  ===========================================================  =======================
method          order                                                        bound: k of gamma_k
==============  ===========================================================  =======================
``sequential``  ``s = ((x0 + x1) + x2) + ...`` (recursive summation)         ``n - 1``
``pairwise``    recursive halving down to blocks of ``base`` (default 1)     ``ceil(log2 n)``
``kahan``       compensated summation (Kahan 1965)                           none: ``2u + n u²``
``tree``        a CUDA block of T (256) threads: grid-stride sequential      ``ceil(n/T) - 1
                sums, then a shared-memory halving tree                      + log2 T``
``numpy``       numpy's ``np.add.reduce`` (PR #3685): blocks of 128 with 8   :func:`error_depth`
                accumulators, blocks combined by recursive halving
==============  ===========================================================  =======================

Sources
-------
* N. J. Higham, "The accuracy of floating point summation", SIAM J. Sci. Comput. 14(4):783-799,
  1993, and *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, ch. 4: with
  ``u`` the unit roundoff and ``gamma_k = k u / (1 - k u)`` (book Lemma 3.1), an order in which
  every x_i passes through at most ``k`` rounded additions has
  ``|s_computed - s| <= gamma_k * sum|x_i|`` (book §4.2: recursive summation ``k = n - 1``,
  pairwise ``k = ceil(log2 n)``; §4.3: compensated ``(2u + O(n u²)) * sum|x_i|``).
* W. Kahan, "Further remarks on reducing truncation errors", Comm. ACM 8(1):40, 1965
  (compensated summation); the ``2u + O(n u²)`` bound is Knuth's (TAOCP vol. 2, §4.2.2, as
  cited in Higham §4.3), also Goldberg, "What every computer scientist
  should know about floating-point arithmetic", ACM Comput. Surv. 23(1), 1991, Theorem 8.
* numpy PR #3685 (``numpy/_core/src/umath/loops_utils.h.src``, ``pairwise_sum``):
  ``np.add.reduce`` along a contiguous axis sums blocks of ``PW_BLOCKSIZE = 128`` elements with
  8 interleaved accumulators and combines blocks by recursive halving.
* M. Harris, "Optimizing parallel reduction in CUDA", NVIDIA 2007 (the grid-stride loop plus
  sequential-addressing shared-memory tree that :func:`sum_tree` reproduces).

How FP16 and BF16 are computed
------------------------------
Numba has no FP16/BF16 arithmetic on the CPU. Every operation is done in float32 and its result
rounded to the working format (round to nearest, ties to even; overflow to ±inf; FP16
subnormals kept) by integer bit manipulation (:func:`round_to`). That is *exactly* the correctly
rounded FP16/BF16 operation: rounding twice, first to p' = 24 bits then to p bits, is innocuous
for +, -, ×, ÷ and √ when p' >= 2p + 2 (S. A. Figueroa, "When is double rounding innocuous?",
ACM SIGNUM Newsletter 30(3), 1995; Higham ch. 2), and 24 >= 2·11 + 2 (FP16), 24 >= 2·8 + 2
(BF16). Sums whose result is FP16-subnormal are exact in float32, so the subnormal range is
covered too. The tests check the rounding against numpy's and ml_dtypes' casts and the FP16
sums against a reference that rounds each exact float64 sum once.

Inputs are rounded to the working format *before* summing (``np.asarray(x).astype(dtype)``,
``ml_dtypes.bfloat16`` for BF16); that input rounding is not summation error, so the exact sum
(:func:`exact_sum`, ``math.fsum``) is taken over the rounded values.

Bounds assume no overflow (Higham's model): FP16's largest finite value is 65504, so
:func:`measure` scales FP16 data by a power of two (exact) to keep every partial sum far below
it — without that, pairwise and Kahan sums of 10^5+ U(0,1) values are ``inf`` in FP16.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numba import njit

from kernellab.numerics import unit_roundoff

__all__ = [
    "DTYPES", "METHODS", "working_dtype", "to_working", "round_to",
    "sum_sequential", "sum_pairwise", "sum_kahan", "sum_tree", "sum_numpy_order", "summation",
    "exact_sum", "relative_error", "gamma", "error_depth", "error_bound",
    "measure", "stall_demo", "plot_errors", "tree_vs_numpy", "CHAPTER_NS", "CHAPTER_SEED",
]

#: Working precisions, by name.
DTYPES = ("float32", "float16", "bfloat16")
#: Summation orders, by name (see the module docstring).
METHODS = ("sequential", "pairwise", "kahan", "tree", "numpy")

_NP_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
              "bfloat16": np.dtype(ml_dtypes.bfloat16)}
_MODE = {"float32": 0, "float16": 1, "bfloat16": 2}

#: numpy's pairwise-sum block (``PW_BLOCKSIZE``, numpy PR #3685).
NUMPY_BLOCK = 128

#: The n of chapter 3's precision plot (``measure(CHAPTER_NS, seed=CHAPTER_SEED)``): the chapter
#: and tests/test_chapters/test_chapter3.py take them from here, so the test checks the figure the
#: chapter draws.
CHAPTER_NS = (10**3, 10**4, 10**5, 10**6, 10**7)
#: The seed of chapter 3's precision plot.
CHAPTER_SEED = 0


# --------------------------------------------------------------------------- rounding (numba)

@njit(cache=True, inline="always")
def _round_fp16(x):
    """float32 -> nearest FP16 value (ties to even), as float32. NaN stays NaN, overflow -> inf."""
    b = np.int64(np.float32(x).view(np.uint32))
    sign = b & 0x80000000
    a = b & 0x7FFFFFFF
    if a > 0x7F800000:                      # NaN: keep it (quiet)
        return np.uint32(b | 0x00400000).view(np.float32)
    if a >= 0x477FF000:                     # |x| >= 65520 = 65504 + ulp/2: ties to even -> inf
        return np.uint32(sign | 0x7F800000).view(np.float32)
    if a >= 0x38800000:                     # |x| >= 2**-14: FP16 normal, 10 stored bits
        r = (a + 0xFFF + ((a >> 13) & 1)) & 0x7FFFE000
        return np.uint32(sign | r).view(np.float32)
    # FP16 subnormal range: spacing 2**-24. |x| * 2**24 < 1024 is exact in float64, and adding
    # and subtracting 2**52 rounds it to an integer, ties to even (no fastmath here).
    v = np.float64(np.uint32(a).view(np.float32)) * 16777216.0
    r = (v + 4503599627370496.0) - 4503599627370496.0
    y = np.float32(r * 5.9604644775390625e-08)
    if sign:
        y = -y
    return y


@njit(cache=True, inline="always")
def _round_bf16(x):
    """float32 -> nearest BF16 value (ties to even), as float32. NaN stays NaN, overflow -> inf.

    BF16 has float32's exponent range, so float32 subnormals round in the same bit layout."""
    b = np.int64(np.float32(x).view(np.uint32))
    if (b & 0x7FFFFFFF) > 0x7F800000:
        return np.uint32(b | 0x00400000).view(np.float32)
    r = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return np.uint32(r).view(np.float32)


@njit(cache=True, inline="always")
def _rnd(x, mode):
    if mode == 1:
        return _round_fp16(x)
    if mode == 2:
        return _round_bf16(x)
    return x


@njit(cache=True)
def _round_array(x, mode):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = _rnd(x[i], mode)
    return out


# --------------------------------------------------------------------------- orders (numba)

@njit(cache=True)
def _seq(x, mode):
    s = np.float32(0.0)
    for i in range(x.size):
        s = _rnd(s + x[i], mode)
    return s


@njit(cache=True)
def _seq_range(x, lo, hi, mode):
    s = np.float32(0.0)
    for i in range(lo, hi):
        s = _rnd(s + x[i], mode)
    return s


@njit(cache=True)
def _numpy_block(x, lo, n, mode):
    # numpy/_core/src/umath/loops_utils.h.src, @TYPE@_pairwise_sum's leaves (numpy PR #3685)
    if n < 8:
        res = np.float32(0.0)
        for i in range(lo, lo + n):
            res = _rnd(res + x[i], mode)
        return res
    r = np.empty(8, dtype=np.float32)
    for j in range(8):
        r[j] = x[lo + j]
    m = n - n % 8
    for i in range(8, m, 8):
        for j in range(8):
            r[j] = _rnd(r[j] + x[lo + i + j], mode)
    res = _rnd(_rnd(_rnd(r[0] + r[1], mode) + _rnd(r[2] + r[3], mode), mode)
               + _rnd(_rnd(r[4] + r[5], mode) + _rnd(r[6] + r[7], mode), mode), mode)
    for i in range(m, n):
        res = _rnd(res + x[lo + i], mode)
    return res


@njit(cache=True)
def _cascade(x, lo0, hi0, base, numpy_style, mode):
    """Recursive halving of [lo0, hi0), evaluated left subtree, right subtree, then their sum —
    with explicit stacks (Numba cannot cache self-recursive functions: a cached one crashes when
    it is loaded again). Leaves of at most `base` elements are summed sequentially; with
    `numpy_style` the split and the leaves are numpy's (`base` is then 128)."""
    st_lo = np.empty(192, dtype=np.int64)
    st_hi = np.empty(192, dtype=np.int64)
    st_done = np.empty(192, dtype=np.uint8)
    vals = np.empty(96, dtype=np.float32)
    sp = 0
    vp = 0
    st_lo[0] = lo0
    st_hi[0] = hi0
    st_done[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        lo = st_lo[sp]
        hi = st_hi[sp]
        n = hi - lo
        if st_done[sp] == 1:                 # both halves summed: add them
            vp -= 1
            b = vals[vp]
            vals[vp - 1] = _rnd(vals[vp - 1] + b, mode)
        elif n <= base:                      # a leaf
            if numpy_style:
                vals[vp] = _numpy_block(x, lo, n, mode)
            else:
                s = np.float32(0.0)
                for i in range(lo, hi):
                    s = _rnd(s + x[i], mode)
                vals[vp] = s
            vp += 1
        else:
            if numpy_style:                  # "divide by two but avoid non-multiples of 8"
                mid = n // 2
                mid = lo + mid - mid % 8
            else:
                mid = lo + n // 2
            st_done[sp] = 1                  # revisit to combine, after the right, after the left
            st_lo[sp + 1] = mid
            st_hi[sp + 1] = hi
            st_done[sp + 1] = 0
            st_lo[sp + 2] = lo
            st_hi[sp + 2] = mid
            st_done[sp + 2] = 0
            sp += 3
    return vals[0]


@njit(cache=True)
def _kahan(x, mode):
    s = np.float32(0.0)
    c = np.float32(0.0)
    for i in range(x.size):
        y = _rnd(x[i] - c, mode)
        t = _rnd(s + y, mode)
        c = _rnd(_rnd(t - s, mode) - y, mode)
        s = t
    return s


@njit(cache=True)
def _tree(x, threads, mode):
    acc = np.zeros(threads, dtype=np.float32)
    mask = threads - 1
    for i in range(x.size):             # thread i % T adds x[i]: the grid-stride loop
        t = i & mask
        acc[t] = _rnd(acc[t] + x[i], mode)
    s = threads // 2
    while s >= 1:                       # sequential addressing: sh[t] += sh[t + s], t < s
        for t in range(s):
            acc[t] = _rnd(acc[t] + acc[t + s], mode)
        s //= 2
    return acc[0]


@njit(cache=True)
def _np_reduce(x, mode):
    # np.add.reduce of a contiguous 1-D array (numpy 2.x; bit-equal to np.sum, tested): the
    # output starts at the identity 0 and the inner loop adds pairwise_sum over all n elements
    # in one call (no 8192-element buffer chunks: the array needs no casting).
    return _cascade(x, 0, x.size, 128, True, mode)


# --------------------------------------------------------------------------- inputs

def working_dtype(dtype) -> np.dtype:
    """The numpy dtype of a working precision: ``"float32"``, ``"float16"`` or ``"bfloat16"``
    (a name, a numpy dtype or ``ml_dtypes.bfloat16``). Raises ValueError for anything else."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    for name, d in _NP_DTYPES.items():
        if dt == d or dtype == name:
            return d
    raise ValueError(f"unknown working precision {dtype!r}; expected one of {DTYPES}")


def _name(dtype) -> str:
    return working_dtype(dtype).name


def to_working(x, dtype="float32") -> np.ndarray:
    """``x`` (1-D, any real dtype) rounded to the working precision: ``np.asarray(x).astype(dt)``
    (numpy's / ml_dtypes' round-to-nearest-even cast). Raises ValueError if ``x`` is not 1-D or
    the precision is unknown."""
    dt = working_dtype(dtype)
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"summation needs a 1-D array, got shape {x.shape}")
    return x.astype(dt, copy=False)


def _as_f32(xw: np.ndarray) -> np.ndarray:
    """A working-precision array widened exactly to contiguous float32."""
    if xw.dtype == _NP_DTYPES["bfloat16"]:
        u = np.ascontiguousarray(xw).view(np.uint16)
        return (u.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(xw, dtype=np.float32)


def _prepare(x, dtype):
    name = _name(dtype)
    return _as_f32(to_working(x, name)), _MODE[name], _NP_DTYPES[name]


def round_to(x, dtype) -> np.ndarray:
    """Round float32 values to ``dtype``'s nearest value (ties to even, overflow to ±inf, FP16
    subnormals kept, NaN kept) with the bit manipulation the emulated FP16/BF16 sums use.

    ``x``: any-shape array, converted to float32 first. Returns a float32 array of the same shape
    whose values are exactly representable in ``dtype`` (``"float32"``: unchanged). Equal to
    ``x.astype(np.float16)`` / ``x.astype(ml_dtypes.bfloat16)`` (tested). Raises ValueError for an
    unknown precision.
    """
    mode = _MODE[_name(dtype)]
    a = np.ascontiguousarray(x, dtype=np.float32)
    return _round_array(a.ravel(), mode).reshape(a.shape)


# --------------------------------------------------------------------------- public sums

def _result(s, dt):
    # s is a float32 holding a value representable in dt: the cast is exact
    return dt.type(s) if dt != _NP_DTYPES["bfloat16"] else np.array(s, np.float32).astype(dt)[()]


def sum_sequential(x, dtype="float32"):
    """Recursive summation ``((x0 + x1) + x2) + ...`` in the working precision.

    ``x``: 1-D array (rounded to ``dtype`` first); returns a scalar of ``dtype`` (0 for an empty
    array). Bound: ``gamma_{n-1} * sum|x_i|`` (Higham 1993; book §4.2). Raises ValueError
    for a non-1-D ``x`` or an unknown precision.
    """
    a, mode, dt = _prepare(x, dtype)
    return _result(_seq(a, mode), dt)


def sum_pairwise(x, dtype="float32", base: int = 1):
    """Pairwise (cascade) summation: split ``[lo, hi)`` at ``lo + n // 2`` recursively, sum
    leaves of at most ``base`` elements sequentially, add the two halves' sums.

    ``base = 1`` (default) is Higham's pairwise summation, ``gamma_{ceil(log2 n)}`` (Higham 1993;
    book §4.2); a larger base block trades accuracy for speed:
    ``gamma_{ceil(log2(n / base)) + base - 1}``. Returns a scalar of ``dtype``. Raises ValueError
    for ``base < 1``, a non-1-D ``x`` or an unknown precision.
    """
    base = int(base)
    if base < 1:
        raise ValueError(f"base block must be >= 1, got {base}")
    a, mode, dt = _prepare(x, dtype)
    if a.size == 0:
        return _result(np.float32(0.0), dt)
    return _result(_cascade(a, 0, a.size, base, False, mode), dt)


def sum_kahan(x, dtype="float32"):
    """Kahan's compensated summation (Kahan 1965), every operation in the working precision::

        y = x_i - c;  t = s + y;  c = (t - s) - y;  s = t

    Returns a scalar of ``dtype``. Bound ``(2u + O(n u²)) sum|x_i|`` (Knuth; Higham §4.3);
    :func:`error_bound` uses ``2u + n u²``. Raises ValueError as :func:`sum_sequential`.
    """
    a, mode, dt = _prepare(x, dtype)
    return _result(_kahan(a, mode), dt)


def sum_tree(x, dtype="float32", threads: int = 256):
    """The order of one CUDA block reduction with ``threads`` = T threads (Harris 2007, kernels
    3 and 7): thread t sums ``x[t], x[t+T], x[t+2T], ...`` sequentially from 0 (the grid-stride
    loop), then a shared-memory tree adds ``sh[t] += sh[t + s]`` for ``s = T/2, T/4, ..., 1``.

    Bound ``gamma_{ceil(n/T) - 1 + log2 T}``: an element passes through at most
    ``ceil(n/T) - 1`` rounded additions in its thread's loop (the first addition, to 0, is
    exact) and one at each of the ``log2 T`` tree levels. A grid of B blocks whose partial sums
    are reduced by a second such pass is the same analysis with ``ceil(n/(T B)) - 1 + log2 T +
    ceil(log2 B)``. Returns a scalar of ``dtype``. Raises ValueError unless T is a power of two
    >= 1, and as :func:`sum_sequential`.
    """
    threads = int(threads)
    if threads < 1 or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two, got {threads}")
    a, mode, dt = _prepare(x, dtype)
    return _result(_tree(a, threads, mode), dt)


def sum_numpy_order(x, dtype="float32"):
    """numpy's ``np.add.reduce`` order for a contiguous 1-D array (numpy PR #3685): the output
    starts at 0 and all n elements are summed by one ``pairwise_sum`` call — fewer than 8
    elements sequentially, up to 128 with 8 interleaved accumulators combined as
    ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`` then the ``n % 8`` tail sequentially, longer ranges
    split at ``n/2`` rounded down to a multiple of 8.

    In float32 this is bit-equal to ``np.sum`` (tested). In FP16/BF16 it is that *order* with
    every addition rounded to the working format — not what numpy does: numpy's own float16 sum
    accumulates in float32 and rounds once at the end, and ``np.sum`` of an ml_dtypes bfloat16
    array is a *sequential* BF16 sum (measured with ml_dtypes 0.6.0 and numpy 2.4: it stalls at
    256 like :func:`sum_sequential`). Bound: ``gamma_k``, k = :func:`error_depth`.
    """
    a, mode, dt = _prepare(x, dtype)
    return _result(_np_reduce(a, mode), dt)


_SUMS = {"sequential": sum_sequential, "pairwise": sum_pairwise, "kahan": sum_kahan,
         "tree": sum_tree, "numpy": sum_numpy_order}


def _check_method(method):
    if method not in _SUMS:
        raise ValueError(f"unknown summation method {method!r}; expected one of {METHODS}")


def summation(x, method: str, dtype="float32", **kw):
    """Dispatch to ``sum_<method>``: ``method`` in :data:`METHODS`, ``kw`` its options
    (``base`` for pairwise, ``threads`` for tree). Raises ValueError for an unknown method."""
    _check_method(method)
    return _SUMS[method](x, dtype, **kw)


# --------------------------------------------------------------------------- errors and bounds

def exact_sum(x) -> float:
    """The exactly rounded float64 sum of ``x``'s values (``math.fsum``, Shewchuk's algorithm):
    the reference. ``x``: 1-D array of any real dtype (BF16 included); returns a Python float;
    0.0 for an empty array. Raises ValueError for non-1-D or non-finite input."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"summation needs a 1-D array, got shape {x.shape}")
    v = x.astype(np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("exact_sum needs finite values")
    return math.fsum(v.tolist())


def _rel(s: float, exact: float) -> float:
    s = float(s)
    if not math.isfinite(s):
        return math.inf
    if exact == 0.0:
        return 0.0 if s == 0.0 else math.inf
    return abs(s - exact) / abs(exact)


def relative_error(s, x) -> float:
    """``|s - S| / |S|`` with S = :func:`exact_sum` of ``x`` (the *rounded* inputs the sum saw).

    Defined for S = 0 as 0 when ``s == 0`` and ``inf`` otherwise (no division by zero); ``inf``
    when ``s`` is not finite. Returns a Python float."""
    return _rel(s, exact_sum(x))


def gamma(k, u: float) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)`` (book Lemma 3.1); ``inf`` when ``k u >= 1``
    (no bound). ``k`` >= 0 rounded operations, ``u`` the unit roundoff."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    ku = k * u
    return math.inf if ku >= 1.0 else ku / (1.0 - ku)


def _numpy_pairwise_depth(n: int, memo: dict) -> int:
    # most rounded additions any element passes through in numpy's pairwise_sum(n)
    if n in memo:
        return memo[n]
    if n < 8:
        d = max(n - 1, 0)                      # res = 0 + x0 is exact
    elif n <= NUMPY_BLOCK:
        rem = n % 8
        d = (n - rem) // 8 - 1 + 3 + rem       # accumulator, 3 combine levels, tail
    else:
        n2 = n // 2
        n2 -= n2 % 8
        d = 1 + max(_numpy_pairwise_depth(n2, memo), _numpy_pairwise_depth(n - n2, memo))
    memo[n] = d
    return d


def error_depth(method: str, n: int, *, threads: int = 256, base: int = 1) -> int | None:
    """The ``k`` of an order's bound ``gamma_k sum|x_i|``: the most rounded additions any one
    element passes through (Higham 1993). ``None`` for ``"kahan"`` (its bound is not of
    that form). n <= 1: 0.

    sequential ``n - 1``; pairwise ``ceil(log2(n / base)) + base - 1`` (``ceil(log2 n)`` for
    base 1); tree ``ceil(n/T) - 1 + log2 T``; numpy: counted on numpy's recursion (per block of
    at most 128: ``n/8 - 1`` accumulator adds + 3 combine levels + ``n % 8`` tail adds; plus one
    per halving). Raises ValueError for an unknown method.
    """
    _check_method(method)
    n = int(n)
    if n <= 1:
        return 0
    if method == "sequential":
        return n - 1
    if method == "pairwise":
        levels = 0
        m = n
        while m > base:                      # the larger half has ceil(m / 2) elements
            m = (m + 1) // 2
            levels += 1
        return levels + min(base, n) - 1
    if method == "tree":
        return -(-n // threads) - 1 + int(math.log2(threads))
    if method == "numpy":
        return _numpy_pairwise_depth(n, {})
    return None


def error_bound(method: str, n: int, dtype="float32", *, threads: int = 256,
                base: int = 1) -> float:
    """Higham's worst-case bound on ``|s_computed - s| / sum|x_i|`` for ``n`` terms summed in
    ``dtype`` by ``method`` (for positive data: on the relative error). ``inf`` where there is
    no bound (``k u >= 1``). Assumes no overflow.

    sequential ``gamma_{n-1}``, pairwise ``gamma_{ceil(log2 n)}``, tree
    ``gamma_{ceil(n/T)-1+log2 T}``, numpy ``gamma_k`` with k = :func:`error_depth`; kahan
    ``2u + n u²``: Knuth's ``2u + O(n u²)`` (Higham §4.3) with the second-order constant taken
    as 1 — a first-order bound, not a proven constant; for n u << 1 the u² term is negligible,
    and where ``n u >= 2`` (FP16 n >= 4096, BF16 n >= 512) it dominates and the bound says little.
    """
    u = unit_roundoff(working_dtype(dtype))
    if method == "kahan":
        return 2.0 * u + n * u * u
    return gamma(error_depth(method, n, threads=threads, base=base), u)


# --------------------------------------------------------------------------- experiments

def _fp16_scale(n: int, dtype: str) -> float:
    # the power of two <= 1 with n * scale <= 2**15: sums of n values in [0, 1) stay < 2**15
    if dtype != "float16" or n <= 2**15:
        return 1.0
    return 2.0 ** -(math.ceil(math.log2(n)) - 15)


def _data(n: int, seed: int, distribution: str) -> np.ndarray:
    rng = np.random.default_rng([int(seed), int(n)])
    if distribution == "uniform":
        return rng.random(n)
    if distribution == "normal":
        return rng.standard_normal(n)
    raise ValueError(f"unknown distribution {distribution!r}; expected 'uniform' or 'normal'")


def measure(ns=CHAPTER_NS, dtypes=DTYPES, methods=METHODS,
            seed: int = 0, distribution: str = "uniform", threads: int = 256) -> list[dict]:
    """Relative error of each (n, dtype, method) against ``math.fsum``, with its Higham bound.

    Data: for each n, float64 draws from ``U(0, 1)`` (``"uniform"``, positive: error/sum|x| is
    the relative error) or ``N(0, 1)`` (``"normal"``), from ``np.random.default_rng([seed, n])``
    (deterministic; the same draws for every dtype), times ``scale`` and rounded to the dtype.
    ``scale`` is 1 except for FP16 with n > 2**15: the power of two that keeps ``n * scale <=
    2**15``, so no partial sum overflows FP16 (max 65504); power-of-two scaling is exact.

    Returns a list of dicts with keys ``n, dtype, method, sum`` (float, the computed sum),
    ``exact`` (fsum of the rounded inputs), ``rel_error`` (:func:`relative_error`), ``bound``
    (:func:`error_bound` times ``sum|x|/|S|``, i.e. a bound on the relative error; ``inf`` where
    none), ``depth`` (:func:`error_depth`), ``scale``. Raises ValueError for an unknown dtype,
    method or distribution.
    """
    names = [_name(d) for d in dtypes]
    for m in methods:
        _check_method(m)
    rows = []
    for n in ns:
        n = int(n)
        base = _data(n, seed, distribution)
        for name in names:
            scale = _fp16_scale(n, name)
            xw = to_working(base * scale, name)
            a = _as_f32(xw)
            vals = a.astype(np.float64)
            exact = math.fsum(vals.tolist())
            cond = math.fsum(np.abs(vals).tolist()) / abs(exact) if exact else math.inf
            mode = _MODE[name]
            for m in methods:
                if m == "sequential":
                    s = _seq(a, mode)
                elif m == "pairwise":
                    s = _cascade(a, 0, a.size, 1, False, mode)
                elif m == "kahan":
                    s = _kahan(a, mode)
                elif m == "tree":
                    s = _tree(a, threads, mode)
                else:
                    s = _np_reduce(a, mode)
                bound = error_bound(m, n, name, threads=threads) * cond
                rows.append({"n": n, "dtype": name, "method": m, "sum": float(s),
                             "exact": exact, "rel_error": _rel(s, exact),
                             "bound": bound if math.isfinite(bound) else math.inf,
                             "depth": error_depth(m, n, threads=threads), "scale": scale})
    return rows


@njit(cache=True)
def _stall(mode, limit):
    s = np.float32(0.0)
    for i in range(limit):
        t = _rnd(s + np.float32(1.0), mode)
        if t == s:
            return s, i
        s = t
    return s, limit


def stall_demo(dtype="float16", n: int | None = None) -> dict:
    """Sequential sum of ones in ``dtype``: where it stops growing.

    With p significand bits the sum reaches ``2**p`` exactly, then ``2**p + 1`` is a tie between
    ``2**p`` and ``2**p + 2`` and rounds to the even one, ``2**p``: FP16 (p = 11) stalls at 2048,
    BF16 (p = 8) at 256, float32 (p = 24) at 16777216.

    Returns a dict: ``dtype``, ``stall`` (the value, float), ``n_stall`` (ones added when it is
    first reached), ``n`` (default ``2 * n_stall``), ``sequential`` and ``pairwise`` (the sums of
    ``n`` ones in ``dtype``) and ``exact`` (n). Raises ValueError for an unknown precision.
    """
    name = _name(dtype)
    p = -int(round(math.log2(unit_roundoff(_NP_DTYPES[name])))) + 1
    s, k = _stall(_MODE[name], 2 ** (p + 2))
    n = 2 * k if n is None else int(n)
    ones = np.ones(n, dtype=_NP_DTYPES[name])
    return {"dtype": name, "stall": float(s), "n_stall": int(k), "n": n,
            "sequential": float(sum_sequential(ones, name)),
            "pairwise": float(sum_pairwise(ones, name)), "exact": float(n)}


_COLORS = {"sequential": "tab:red", "pairwise": "tab:blue", "kahan": "tab:green",
           "tree": "tab:purple", "numpy": "tab:orange"}
_MARKERS = {"sequential": "o", "pairwise": "s", "kahan": "^", "tree": "D", "numpy": "v"}


def plot_errors(rows, ax=None):
    """Log-log plot of :func:`measure`'s rows: one panel per dtype; per method the measured
    relative errors as markers (label ``"<method>"``) and Higham's bounds as a line through the
    same n (label ``"<method> bound"``, only where finite), and the unit roundoff u dotted.
    Zero errors (exact sums) are drawn at ``u / 100`` so a log axis can show them; the y axis
    stops at 10 (bounds above 1 say nothing). The legend sits right of the last panel.

    ``ax``: None (a new figure), or a sequence of Axes, one per dtype in the rows' order.
    Returns the matplotlib Figure. Raises ValueError for no rows or too few axes.
    """
    import matplotlib.pyplot as plt

    rows = list(rows)
    if not rows:
        raise ValueError("no rows to plot")
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    if ax is None:
        fig, axes = plt.subplots(1, len(dtypes), figsize=(4.2 * len(dtypes), 3.8),
                                 squeeze=False, sharex=True)
        axes = list(axes[0])
    else:
        axes = list(np.atleast_1d(ax))
        if len(axes) < len(dtypes):
            raise ValueError(f"need {len(dtypes)} axes, got {len(axes)}")
        fig = axes[0].figure
    for a, name in zip(axes, dtypes):
        u = unit_roundoff(_NP_DTYPES[name])
        sub = [r for r in rows if r["dtype"] == name]
        methods = list(dict.fromkeys(r["method"] for r in sub))
        for m in methods:
            rs = sorted((r for r in sub if r["method"] == m), key=lambda r: r["n"])
            ns = [r["n"] for r in rs]
            err = [r["rel_error"] if r["rel_error"] > 0 else u / 100 for r in rs]
            a.plot(ns, err, linestyle="none", marker=_MARKERS.get(m, "x"),
                   color=_COLORS.get(m), label=m)
            fin = [(r["n"], r["bound"]) for r in rs if math.isfinite(r["bound"])]
            if fin:
                a.plot([f[0] for f in fin], [f[1] for f in fin], "-", lw=1.2,
                       color=_COLORS.get(m), alpha=0.7, label=f"{m} bound")
        a.axhline(u, color="0.4", ls=":", lw=1, label="u")
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_title(f"{name} (u = 2^{int(round(math.log2(u)))})")
        a.set_xlabel("n")
        a.grid(True, which="major", alpha=0.3)
        if a.get_ylim()[1] > 10:                # a bound above 1 says nothing: don't squash
            a.set_ylim(top=10)
    axes[0].set_ylabel("relative error vs math.fsum")
    handles = {}
    for a in axes[:len(dtypes)]:                # every label once, from whichever panel has it
        for h, lab in zip(*a.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    axes[len(dtypes) - 1].legend(handles.values(), handles.keys(), fontsize=7,
                                 loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def tree_vs_numpy(n: int = 10**6, seed: int = 0, threads: int = 256,
                  distribution: str = "normal", trials: int = 20) -> dict:
    """A GPU-style tree sum (:func:`sum_tree`) and ``np.sum`` of the same float32 data.

    Data: float32 draws (``"normal"``: N(0, 1), mean zero as activations and gradients are —
    the default; ``"uniform"``: U(0, 1)) from ``np.random.default_rng([seed, n])``. The two
    orders differ, so on mean-zero data the sums are usually not bit-equal (their rounding
    errors are many ulps of a sum that cancels), yet each sits within its own Higham bound. On
    U(0, 1) data at these n both are usually the correctly rounded sum and often agree. A test
    comparing a GPU reduction with a CPU one must therefore allow the sum of both bounds, not
    bit equality, unless it pins the order (CUB promises run-to-run determinism only on one
    device).

    Returns a dict: ``n, threads, distribution, tree, numpy, exact`` (floats), ``err_tree,
    err_numpy`` (relative errors), ``bound_tree, bound_numpy`` (:func:`error_bound` times
    ``sum|x| / |S|``: bounds on the relative errors), ``tolerance`` (their sum: the relative
    difference between the two a worst case can reach), ``diff`` (``|tree - numpy| / |S|``),
    ``diff_ulps`` (in float32 ulps at ``|S|``), ``bit_equal``, ``bit_equal_fraction`` (over
    seeds ``seed .. seed + trials - 1``), ``numpy_order_matches`` (:func:`sum_numpy_order` is
    bit-equal to ``np.sum`` here). Raises ValueError for an unknown distribution, n < 1 or
    trials < 1.
    """
    n, trials = int(n), int(trials)
    if n < 1 or trials < 1:
        raise ValueError(f"need n >= 1 and trials >= 1, got n={n}, trials={trials}")
    equal = 0
    for k in range(trials):
        xk = _data(n, seed + k, distribution).astype(np.float32)
        t, s_np = sum_tree(xk, "float32", threads=threads), np.sum(xk)
        equal += int(np.float32(t).view(np.uint32) == np.float32(s_np).view(np.uint32))
        if k == 0:
            x, tree, numpy_sum = xk, t, s_np
    vals = x.astype(np.float64)
    exact = math.fsum(vals.tolist())
    cond = math.fsum(np.abs(vals).tolist()) / abs(exact) if exact else math.inf
    b_tree = error_bound("tree", n, "float32", threads=threads) * cond
    b_np = error_bound("numpy", n, "float32") * cond
    spacing = float(np.spacing(np.float32(abs(exact))))
    return {"n": n, "threads": int(threads), "distribution": distribution,
            "tree": float(tree), "numpy": float(numpy_sum), "exact": exact,
            "err_tree": _rel(tree, exact), "err_numpy": _rel(numpy_sum, exact),
            "bound_tree": b_tree, "bound_numpy": b_np, "tolerance": b_tree + b_np,
            "diff": (abs(float(tree) - float(numpy_sum)) / abs(exact) if exact
                     else (0.0 if float(tree) == float(numpy_sum) else math.inf)),
            "diff_ulps": abs(float(tree) - float(numpy_sum)) / spacing,
            "bit_equal": bool(np.float32(tree).view(np.uint32)
                              == np.float32(numpy_sum).view(np.uint32)),
            "bit_equal_fraction": equal / trials,
            "numpy_order_matches": bool(np.float32(sum_numpy_order(x, "float32")).view(np.uint32)
                                        == np.float32(numpy_sum).view(np.uint32))}
