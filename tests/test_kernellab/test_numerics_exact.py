"""The exact rule (:class:`kernellab.numerics.Exact`) on float outputs compares bits: a zero of
the wrong sign fails, a NaN passes only where the reference is NaN (any payload), inf matches
inf of its sign; integer outputs are compared by value as before."""

import numpy as np
import pytest

from kernellab.numerics import Exact, compare

try:
    import ml_dtypes
    FLOATS = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16]
except ImportError:  # pragma: no cover
    FLOATS = [np.float16, np.float32, np.float64]

REF = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("dtype", FLOATS)
def test_signed_zero_and_nan_by_bits(dtype):
    out = REF.astype(dtype)
    r = compare(out, REF, Exact(), tile=None)
    assert r.ok and r.max_ulp == 0, r.message
    flipped = out.copy()
    flipped[1] = 0.0                                   # +0 where the reference is -0
    r = compare(flipped, REF, Exact(), tile=None)
    assert not r.ok and r.mismatches == r.signed_zeros == 1 and r.worst_index == (1,)
    assert "sign of zero" in r.message
    flipped[1], flipped[0] = -0.0, -0.0                # -0 where the reference is +0
    assert compare(flipped, REF, Exact(), tile=None).signed_zeros == 1
    # a NaN with another payload still matches a NaN reference; a number does not
    other = out.copy()
    u = np.dtype(f"u{other.dtype.itemsize}")
    other.view(u)[6] |= 1
    assert np.isnan(other[6].astype(np.float64))
    assert compare(other, REF, Exact(), tile=None).ok
    other[6] = 0.0
    assert not compare(other, REF, Exact(), tile=None).ok
    # a NaN where the reference is a number fails, and is counted as non-finite
    nan = out.copy()
    nan[2] = np.nan
    r = compare(nan, REF, Exact(), tile=None)
    assert not r.ok and r.nonfinite == 1 and r.worst_index == (2,)


def test_a_value_the_output_dtype_cannot_hold_fails():
    assert not compare(np.array([1.0], np.float16), np.array([1.0001]), Exact()).ok


def test_integers_unchanged():
    ints = np.array([[-128, 0, 127]], np.int8)
    assert compare(ints, ints.astype(np.int64), Exact()).ok
    r = compare(np.array([1, 2, 3], np.int32), np.array([1, 2, 4]), Exact())
    assert not r.ok and r.mismatches == 1 and r.signed_zeros == 0
    assert Exact(note="the product").describe() == "exact: every element equal to the product"
