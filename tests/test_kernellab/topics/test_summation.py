"""Chapter 3's summation module: the emulated FP16/BF16 arithmetic is the real one, every order
is the one its docstring names, and the measured errors the chapter plots sit under the Higham
bounds it draws."""

import math

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kernellab.topics import summation as S  # noqa: E402

BF16 = ml_dtypes.bfloat16
#: the n the chapter's precision plot uses
CHAPTER_NS = (10**3, 10**4, 10**5, 10**6, 10**7)


@pytest.fixture(scope="module")
def chapter_rows():
    return S.measure(CHAPTER_NS, seed=0)


# --------------------------------------------------------------------------- rounding

def _rounding_inputs():
    """>= 10^5 float32 values: random bit patterns, the FP16 range on a log scale, exact ties
    between neighbouring FP16 and BF16 values (normal and subnormal) and their float32
    neighbours, the overflow threshold, signed zeros, infinities and NaN."""
    rng = np.random.default_rng(1234)
    parts = [rng.integers(0, 2**32, 40_000, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    mag = np.exp2(rng.uniform(-27.0, 17.0, 40_000))
    parts.append((mag * rng.choice([-1.0, 1.0], mag.size)).astype(np.float32))
    # FP16 ties: the midpoint of every sampled finite FP16 value and its upper neighbour
    h = rng.integers(0, 0x7BFF, 20_000, dtype=np.uint16)          # up to 65504 (excl.)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid16 = ((lo + hi) / 2).astype(np.float32)                    # exact in float32
    assert np.all(mid16.astype(np.float64) == (lo + hi) / 2)
    # BF16 ties: low 16 bits 0x8000 is exactly halfway (subnormal ones included)
    b = rng.integers(0, 0x7F7F, 20_000, dtype=np.uint32)
    mid_bf = ((b << 16) | 0x8000).view(np.float32)
    for mid in (mid16, mid_bf):
        sign = rng.choice(np.array([-1.0, 1.0], np.float32), mid.size)
        parts += [mid * sign, np.nextafter(mid, np.float32(np.inf)) * sign,
                  np.nextafter(mid, np.float32(0)) * sign]
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.0, 65520.0,
                           np.nextafter(np.float32(65520.0), np.float32(0)), 65536.0, -65520.0,
                           2.0**-24, 2.0**-25, -(2.0**-25), 3 * 2.0**-26, 2.0**-14,
                           2.0**-14 - 2.0**-25, 2.0**-149, -(2.0**-149), 2.0**-126,
                           3.3895313892515355e38, 3.4028234663852886e38, -3.4028234663852886e38,
                           1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8],
                          dtype=np.float32))
    return np.concatenate(parts)


def _same_bits_or_both_nan(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(nan_a, nan_b)
    bad = np.flatnonzero(a.view(np.uint32)[~nan_a] != b.view(np.uint32)[~nan_b])
    assert bad.size == 0, (f"{bad.size} values differ, e.g. "
                           f"{[(float(a[~nan_a][i]), float(b[~nan_b][i])) for i in bad[:5]]}")


def test_emulated_rounding_equals_numpy_and_ml_dtypes_casts():
    x = _rounding_inputs()
    assert x.size >= 100_000
    sub16 = (np.abs(x) < 2.0**-14) & (np.abs(x) >= 2.0**-25)
    assert sub16.sum() > 1000                                   # the FP16 subnormal range is hit
    with np.errstate(over="ignore", invalid="ignore"):              # overflow and NaN: wanted
        want16 = x.astype(np.float16).astype(np.float32)
        want_bf = x.astype(BF16).astype(np.float32)
    _same_bits_or_both_nan(S.round_to(x, "float16"), want16)
    _same_bits_or_both_nan(S.round_to(x, "bfloat16"), want_bf)
    _same_bits_or_both_nan(S.round_to(x, "float32"), x)
    # the cases the casts are compared on: ties to even, overflow, signed zero
    r16 = S.round_to(np.array([2049.0, 2051.0, 65519.0, 65520.0, -(2.0**-25)], np.float32),
                     "float16")
    assert list(r16[:4]) == [2048.0, 2052.0, 65504.0, np.inf]
    assert r16[4] == 0 and np.signbit(r16[4])
    assert list(S.round_to(np.array([257.0, 259.0], np.float32), "bfloat16")) == [256.0, 260.0]


# --------------------------------------------------------------------------- orders vs Python

def _round_ref(v: float, p: int, emin: int, maxval: float) -> float:
    """Round a float64 value once to p significand bits (minimum exponent emin, largest finite
    maxval), ties to even: Python's round() on the value scaled by a power of two."""
    if v == 0.0 or not math.isfinite(v):
        return v
    e = max(math.frexp(abs(v))[1] - 1, emin) - (p - 1)
    r = round(math.ldexp(abs(v), -e)) * 2.0**e
    return math.copysign(math.inf if r > maxval else r, v)


FORMATS = {"float16": (11, -14, 65504.0), "bfloat16": (8, -126, float(ml_dtypes.finfo(BF16).max))}


def _py_orders(x, rnd, threads):
    """Pure-Python sequential, pairwise (base 1), Kahan and tree sums with ``rnd`` after every
    addition. x's values are FP16/BF16 numbers of moderate exponents, so each float64 sum and
    difference below is exact and ``rnd`` rounds it once."""
    x = [float(v) for v in x]
    s = 0.0
    for v in x:
        s = rnd(s + v)
    seq = s

    def pw(lo, hi):
        if hi - lo == 1:
            return x[lo]
        mid = lo + (hi - lo) // 2
        return rnd(pw(lo, mid) + pw(mid, hi))

    s = c = 0.0
    for v in x:
        y = rnd(v - c)
        t = rnd(s + y)
        c = rnd(rnd(t - s) - y)
        s = t
    kahan = s
    acc = [0.0] * threads
    for i, v in enumerate(x):
        acc[i % threads] = rnd(acc[i % threads] + v)
    step = threads // 2
    while step:
        for t in range(step):
            acc[t] = rnd(acc[t] + acc[t + step])
        step //= 2
    return {"sequential": seq, "pairwise": pw(0, len(x)), "kahan": kahan, "tree": acc[0]}


def _small_arrays(dtype):
    rng = np.random.default_rng(7)
    return [to.astype(dtype) for to in (
        rng.random(3000),                                       # past FP16's stall at 2048
        rng.standard_normal(1000) * 100,                        # cancellation, both signs
        np.concatenate([rng.random(500) * 1e-5, [1000.0], -rng.random(500)]),  # tiny + large
        np.array([1.0, 2.0**-11, 2.0**-11, 2.0**-11, -1.0]),
        rng.standard_normal(37))]


def test_fp16_sequential_sum_equals_python_float16_reference():
    """The emulated FP16 sequential sum against a Python loop that rounds the exact float64 sum
    through numpy's float64 -> float16 cast (one rounding) after each add: bit-exact."""
    for x in _small_arrays(np.float16):
        s = np.float16(0.0)
        for v in x.astype(np.float64):
            s = np.float16(float(s) + float(v))
        got = S.sum_sequential(x, "float16")
        assert got.dtype == np.float16
        assert got.view(np.uint16) == s.view(np.uint16), (got, s)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_order_equals_a_pure_python_reference(dtype):
    p, emin, maxval = FORMATS[dtype]

    def rnd(v):
        return _round_ref(v, p, emin, maxval)

    if dtype == "float16":                         # the reference rounding is numpy's cast
        vals = np.random.default_rng(3).standard_normal(2000) * 3000
        assert all(rnd(v) == float(np.float16(v)) for v in vals)
    for x in _small_arrays(S.working_dtype(dtype)):
        want = _py_orders(x, rnd, threads=8)
        for method, ref in want.items():
            kw = {"threads": 8} if method == "tree" else {}
            got = float(S.summation(x, method, dtype, **kw))
            assert got == ref, (dtype, method, x.size, got, ref)


def test_numpy_order_is_bit_equal_to_np_sum():
    for n in (1, 7, 8, 9, 100, 128, 129, 1000, 8193, 100_003):
        for seed in range(3):
            x = np.random.default_rng([n, seed]).standard_normal(n).astype(np.float32)
            assert S.sum_numpy_order(x).view(np.uint32) == np.sum(x).view(np.uint32), (n, seed)


# --------------------------------------------------------------------------- errors vs bounds

def test_plotted_errors_sit_under_the_higham_bounds(chapter_rows):
    rows = chapter_rows
    assert len(rows) == len(CHAPTER_NS) * len(S.DTYPES) * len(S.METHODS)
    for r in rows:
        assert r["rel_error"] <= r["bound"], r
        assert math.isfinite(r["rel_error"]), r                # FP16 data scaled: no overflow
    # and what the figure draws: each method's markers under its bound line, at the same n
    fig = S.plot_errors(rows)
    assert len(fig.axes) == len(S.DTYPES)
    checked = 0
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for m in S.METHODS:
            bl = lines.get(f"{m} bound")                       # absent where all are inf
            bound = dict(zip(bl.get_xdata(), bl.get_ydata())) if bl is not None else {}
            for n, err in zip(lines[m].get_xdata(), lines[m].get_ydata()):
                if n in bound:                                  # no line where the bound is inf
                    assert err <= bound[n], (ax.get_title(), m, n, err, bound[n])
                    checked += 1
    assert checked > 50


def test_bounds_are_higham_gammas():
    u32 = 2.0**-24
    assert S.gamma(0, u32) == 0.0
    assert S.gamma(3, 0.25) == 3.0 and S.gamma(4, 0.25) == math.inf
    assert S.error_bound("sequential", 1000, "float32") == S.gamma(999, u32)
    assert S.error_bound("kahan", 1000, "float32") == 2 * u32 + 1000 * u32**2
    assert S.error_bound("sequential", 2049, "float16") == math.inf      # (n-1) u >= 1
    for n in range(2, 3000):
        assert S.error_depth("pairwise", n) == math.ceil(math.log2(n))
    assert S.error_depth("tree", 10**6, threads=256) == math.ceil(10**6 / 256) - 1 + 8
    assert S.error_depth("numpy", 128) == 15 + 3 and S.error_depth("numpy", 7) == 6


def test_kahan_and_pairwise_beat_sequential_in_fp32(chapter_rows):
    err = {r["method"]: r["rel_error"] for r in chapter_rows
           if r["n"] == 10**6 and r["dtype"] == "float32"}
    assert err["kahan"] * 100 < err["sequential"]
    assert err["pairwise"] * 100 < err["sequential"]
    assert err["kahan"] <= 2**-24                  # Kahan: within u, i.e. correctly rounded-ish


def test_sequential_sums_of_ones_stall_at_2_to_the_p():
    h = S.stall_demo("float16")
    assert (h["stall"], h["n_stall"]) == (2048.0, 2048)
    assert h["sequential"] == 2048.0 and h["pairwise"] == h["exact"] == 4096.0
    b = S.stall_demo("bfloat16")
    assert (b["stall"], b["n_stall"]) == (256.0, 256)
    assert float(S.sum_sequential(np.ones(1000), "bfloat16")) == 256.0


def test_tree_sum_vs_numpy_not_bit_equal_but_within_bounds():
    r = S.tree_vs_numpy(10**6, seed=0)
    assert r["numpy_order_matches"]
    assert not r["bit_equal"] and r["bit_equal_fraction"] < 0.5
    assert r["err_tree"] <= r["bound_tree"] and r["err_numpy"] <= r["bound_numpy"]
    assert r["diff"] <= r["tolerance"]


# --------------------------------------------------------------------------- edge cases

def test_zero_and_empty_inputs():
    zeros = np.zeros(1000, np.float32)
    for m in S.METHODS:
        for d in S.DTYPES:
            assert float(S.summation(zeros, m, d)) == 0.0
            assert float(S.summation(np.array([], np.float32), m, d)) == 0.0
    assert S.exact_sum(zeros) == 0.0 and S.exact_sum([]) == 0.0
    assert S.relative_error(0.0, zeros) == 0.0               # defined, no division by zero
    assert S.relative_error(1e-3, zeros) == math.inf
    assert S.relative_error(np.inf, np.ones(3)) == math.inf
    rows = S.measure([100], distribution="normal")
    assert all(r["rel_error"] <= r["bound"] for r in rows)


def test_bad_input_raises_value_error():
    x = np.ones(10, np.float32)
    with pytest.raises(ValueError):
        S.sum_sequential(x, "float64")
    with pytest.raises(ValueError):
        S.summation(x, "sequential", "int8")
    with pytest.raises(ValueError):
        S.summation(x, "reverse")
    with pytest.raises(ValueError):
        S.sum_pairwise(np.ones((2, 3)))
    with pytest.raises(ValueError):
        S.exact_sum(np.ones((2, 3)))
    with pytest.raises(ValueError):
        S.sum_tree(x, threads=100)
    with pytest.raises(ValueError):
        S.sum_pairwise(x, base=0)
    with pytest.raises(ValueError):
        S.measure([10], methods=["reverse"])
    with pytest.raises(ValueError):
        S.measure([10], distribution="cauchy")
    with pytest.raises(ValueError):
        S.exact_sum([1.0, np.inf])
