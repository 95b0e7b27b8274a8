"""kernellab.topics.winograd: every transform chapter 4 derives passes the exact (symbolic) check in
1-D and 2-D, a wrong one fails it, the construction's argument errors, F(2, 3) against Lavin &
Gray's published matrices, and the multiplication counts."""

from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np
import pytest

from kernellab.topics import winograd as W

ALL = [(m, kind, pts) for m in (2, 4, 6)
       for kind, pts in (("standard", W.POINTS[(m, 3)]), ("alternative", W.ALT_POINTS[(m, 3)]))]


@pytest.mark.parametrize("m, kind, points", ALL, ids=[f"F({m},3)-{k}" for m, k, _ in ALL])
def test_every_chapter_transform_is_exact_in_1d_and_2d(m, kind, points):
    t = W.cook_toom(m, 3, points)
    assert (len(t.AT), len(t.AT[0])) == (m, m + 2)
    assert (len(t.G), len(t.G[0])) == (m + 2, 3)
    assert (len(t.BT), len(t.BT[0])) == (m + 2, m + 2)
    assert all(isinstance(x, Fr) for M in (t.AT, t.G, t.BT) for row in M for x in row)
    assert W.verify(t)
    assert W.verify_2d(t)


def test_transforms_returns_the_standard_points_verified():
    for m in (2, 4, 6):
        t = W.transforms(m)
        assert t.points == W.POINTS[(m, 3)] and t.alpha == m + 2


def _flip(M, i, j):
    return tuple(tuple(-x if (a, b) == (i, j) else x for b, x in enumerate(row))
                 for a, row in enumerate(M))


@pytest.mark.parametrize("which, i, j", [("BT", 1, 2), ("G", 1, 1), ("AT", 1, 1), ("BT", 3, 1)])
def test_a_sign_error_fails_both_checks(which, i, j):
    t = W.transforms(4)
    mats = {"AT": t.AT, "G": t.G, "BT": t.BT}
    mats[which] = _flip(mats[which], i, j)
    bad = W.Transforms(4, 3, t.points, mats["AT"], mats["G"], mats["BT"])
    assert not W.verify(bad)
    assert not W.verify_2d(bad)


def test_a_wrong_scale_fails():
    t = W.transforms(2)
    G2 = tuple(tuple(2 * x for x in row) if k == 1 else row for k, row in enumerate(t.G))
    assert not W.verify(W.Transforms(2, 3, t.points, t.AT, G2, t.BT))


@pytest.mark.parametrize("m, r, points, msg", [
    (0, 3, (), "m >= 1"), (2, 0, (0,), "r >= 1"),
    (2, 3, (0, 1), "needs 3 finite points"), (2, 3, (0, 1, 1), "distinct"),
    (4, 3, (0, 1, -1, 2), "needs 5 finite points")])
def test_cook_toom_argument_errors(m, r, points, msg):
    with pytest.raises(ValueError, match=msg):
        W.cook_toom(m, r, points)


def test_transforms_without_standard_points_raises():
    with pytest.raises(ValueError, match="no standard points"):
        W.transforms(3)


def test_f23_equals_lavin_and_gray_up_to_the_infinity_sign():
    """Lavin & Gray 2016, §4.1 (F(2, 3)); the module negates the infinity column of A^T and row
    of B^T together (its docstring), D = diag(1, 1, 1, -1): A^T_LG = A^T D, B^T_LG = D B^T."""
    h = Fr(1, 2)
    BT_lg = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G_lg = [[1, 0, 0], [h, h, h], [h, -h, h], [0, 0, 1]]
    AT_lg = [[1, 1, 1, 0], [0, 1, -1, -1]]
    t = W.transforms(2)
    D = np.diag([1, 1, 1, -1])
    AT, G, BT = (np.array(M, dtype=object) for M in (t.AT, t.G, t.BT))
    assert (AT.dot(D) == np.array(AT_lg, dtype=object)).all()
    assert (D.dot(BT) == np.array(BT_lg, dtype=object)).all()
    assert (G == np.array(G_lg, dtype=object)).all()
    lg = W.Transforms(2, 3, t.points, tuple(map(tuple, AT_lg)), tuple(map(tuple, G_lg)),
                      tuple(map(tuple, BT_lg)))
    assert W.verify(lg) and W.verify_2d(lg)


def test_standard_f43_and_f63_entries_from_the_literature():
    """wincnn's F(4, 3) G has 1/4, 1/6, 1/24, 1/12 and F(6, 3) 2/9, 1/90, 32/45 (andravin/wincnn's
    points 0, +-1, +-2 and 0, +-1, +-2, +-1/2): the same denominators appear here."""
    g4 = {abs(x) for row in W.transforms(4).G for x in row}
    assert {Fr(1, 4), Fr(1, 6), Fr(1, 24), Fr(1, 12)} <= g4
    g6 = {abs(x) for row in W.transforms(6).G for x in row}
    assert {Fr(2, 9), Fr(1, 90), Fr(32, 45)} <= g6


def test_float_arrays_match_the_exact_matrices():
    t = W.transforms(6)
    for M, A in zip((t.AT, t.G, t.BT), t.arrays(np.float64)):
        assert A.shape == (len(M), len(M[0]))
        assert all(A[i, j] == float(x) for i, row in enumerate(M) for j, x in enumerate(row))
    assert t.arrays(np.float32)[1].dtype == np.float32


def test_multiplication_counts():
    assert W.multiplications(2) == (16, 36)
    assert W.multiplications(4) == (36, 144)
    assert W.multiplications(6) == (64, 324)
    assert W.multiplications(2, dims=1) == (4, 6)
    assert W.multiplications(4, dims=1) == (6, 12)
    assert W.multiplications(6, dims=1) == (8, 18)


def test_format_matrix():
    text = W.format_matrix(W.transforms(2).G)
    assert text.splitlines()[1] == "[ 1/2   1/2   1/2]"
