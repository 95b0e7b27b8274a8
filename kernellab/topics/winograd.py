"""Winograd minimal filtering F(m, r): the transforms, built from Cook–Toom interpolation in exact
rational arithmetic, and checked symbolically.

One output tile of F(m, r) in 1-D (correlation, as convolution layers compute it)::

    y = A^T [ (G g) ⊙ (B^T d) ]          d: alpha = m + r - 1 inputs, g: r taps, y: m outputs
    y_i = sum_k g_k d_{i+k}              (i = 0 .. m-1)

and in 2-D, by nesting the 1-D algorithm along both axes (Lavin & Gray 2016, §4, eq. 8)::

    Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A   d: alpha x alpha, g: r x r, Y: m x m

How the matrices arise (Toom–Cook / Lagrange interpolation; Blahut, "Fast Algorithms for Signal
Processing", 2010, §5.2; Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks",
CVPR 2016, §4). The *linear convolution* s = u * g of a length-m vector u and a length-r filter
g is the coefficient vector of the product polynomial u(x) g(x), of degree alpha - 1. Evaluate
both factors at alpha - 1 finite points a_j and at infinity (the leading coefficient), multiply
the alpha values pointwise (the alpha multiplications), and interpolate::

    s = C [ (E_r g) ⊙ (E_m u) ]           E_n: alpha x n evaluation matrix, rows (1, a_j, a_j^2 …)
                                          and, for infinity, (0, …, 0, 1); C = E_alpha^-1

Correlation is the transpose of convolution: ``y = Conv(g)^T d``, so by the transposition
principle ``y = E_m^T [ (E_r g) ⊙ (C^T d) ]``, i.e. ``A^T = E_m^T``, ``G = E_r``, ``B^T = C^T``.
Row j of C^T is the Lagrange basis polynomial L_j(x) = N_j(x) / c_j with
N_j(x) = prod_{k != j}(x - a_k) and c_j = prod_{k != j}(a_j - a_k); the row for infinity is
M(x) = prod_k (x - a_k). The diagonal scaling 1/c_j is moved from B^T into G (Lavin & Gray's
convention: then B^T is integral for integer points), with the sign chosen so that c_j > 0.
With points (0, 1, -1) this gives Lavin & Gray's F(2, 3) up to the sign of the infinity
column of A^T and row of B^T.

Every matrix here is a tuple of tuples of :class:`fractions.Fraction` (exact); :func:`as_array`
converts to float64/float32. The symbolic check (:func:`verify`, :func:`verify_2d`) uses
bilinearity: both sides of ``y = A^T[(G g) ⊙ (B^T d)]`` are bilinear in (d, g), so they agree
for *every* d and g exactly when they agree, in exact arithmetic, on every pair of basis vectors
(e_i, e_k) — alpha * r pairs in 1-D, alpha^2 * r^2 in 2-D. That is a proof, not a sample.

Point sets (``POINTS``): the standard ones of Lavin & Gray and andravin/wincnn — F(2,3): 0, ±1;
F(4,3): 0, ±1, ±2; F(6,3): 0, ±1, ±2, ±1/2 — and, for chapter 4's error comparison, a second
choice per size (``ALT_POINTS``). Larger tiles need larger or fractional points, so the entries
grow and the transforms become ill-conditioned: the error grows with the tile (Barabasz,
Anderson, Soodhalter & Gregg, "Error Analysis and Improving the Accuracy of Winograd
Convolution for Deep Neural Networks", ACM TOMS 46(4), 2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

__all__ = ["Transforms", "cook_toom", "transforms", "verify", "verify_2d", "as_array", "abs_bound",
           "POINTS", "ALT_POINTS", "multiplications", "format_matrix"]

Matrix = tuple[tuple[Fraction, ...], ...]

#: The standard finite interpolation points (plus infinity) per (m, r), as in Lavin & Gray 2016
#: and andravin/wincnn.
POINTS: dict[tuple[int, int], tuple[Fraction, ...]] = {
    (2, 3): (Fraction(0), Fraction(1), Fraction(-1)),
    (4, 3): (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2)),
    (6, 3): (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2),
             Fraction(1, 2), Fraction(-1, 2)),
}

#: A second, worse-conditioned choice per size, for chapter 4's error chart: larger integer
#: points instead of small or reciprocal ones.
ALT_POINTS: dict[tuple[int, int], tuple[Fraction, ...]] = {
    (2, 3): (Fraction(0), Fraction(1), Fraction(2)),
    (4, 3): (Fraction(0), Fraction(1), Fraction(2), Fraction(3), Fraction(4)),
    (6, 3): (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2),
             Fraction(3), Fraction(-3)),
}


@dataclass(frozen=True)
class Transforms:
    """The three matrices of F(m, r): ``AT`` (m x alpha), ``G`` (alpha x r), ``BT``
    (alpha x alpha), exact; ``points`` the finite interpolation points (infinity is implied)."""

    m: int
    r: int
    points: tuple[Fraction, ...]
    AT: Matrix
    G: Matrix
    BT: Matrix

    @property
    def alpha(self) -> int:
        """Input tile size m + r - 1 (the number of multiplications in 1-D)."""
        return self.m + self.r - 1

    def arrays(self, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(AT, G, BT) as numpy arrays of ``dtype`` (see :func:`as_array` for the rounding)."""
        return as_array(self.AT, dtype), as_array(self.G, dtype), as_array(self.BT, dtype)


def _poly_mul_linear(p: list[Fraction], a: Fraction) -> list[Fraction]:
    """Coefficients (ascending) of p(x) * (x - a)."""
    out = [Fraction(0)] * (len(p) + 1)
    for i, c in enumerate(p):
        out[i + 1] += c
        out[i] -= a * c
    return out


def cook_toom(m: int, r: int, points) -> Transforms:
    """F(m, r) from the m + r - 2 finite ``points`` (distinct rationals; infinity is added).

    Returns exact :class:`Transforms`. Raises ValueError if m < 1, r < 1, the number of points
    is not m + r - 2 or the points repeat. Construction: module docstring (Blahut 2010, §5.2;
    Lavin & Gray 2016, §4).
    """
    if m < 1 or r < 1:
        raise ValueError(f"F(m, r) needs m >= 1 and r >= 1, got F({m}, {r})")
    pts = tuple(Fraction(p) for p in points)
    alpha = m + r - 1
    if len(pts) != alpha - 1:
        raise ValueError(f"F({m}, {r}) needs {alpha - 1} finite points (plus infinity), "
                         f"got {len(pts)}")
    if len(set(pts)) != len(pts):
        raise ValueError(f"interpolation points must be distinct: {pts}")
    AT, G, BT = [], [], []
    for j, a in enumerate(pts):
        c = Fraction(1)
        num = [Fraction(1)]
        for k, b in enumerate(pts):
            if k != j:
                c *= a - b
                num = _poly_mul_linear(num, b)
        sign = 1 if c > 0 else -1
        G.append(tuple(sign * a**i / c for i in range(r)))
        BT.append(tuple(sign * x for x in num + [Fraction(0)] * (alpha - len(num))))
    # the point at infinity: E row (0, ..., 0, 1), interpolation row M(x) = prod (x - a_k)
    G.append(tuple(Fraction(int(i == r - 1)) for i in range(r)))
    mx = [Fraction(1)]
    for b in pts:
        mx = _poly_mul_linear(mx, b)
    BT.append(tuple(mx))
    # A^T = E_m^T: column j = (1, a_j, ..., a_j^(m-1)), column infinity = (0, ..., 0, 1)
    for i in range(m):
        AT.append(tuple([a**i for a in pts] + [Fraction(int(i == m - 1))]))
    return Transforms(m, r, pts, tuple(AT), tuple(G), tuple(BT))


@lru_cache(maxsize=None)
def transforms(m: int, r: int = 3, points: tuple | None = None) -> Transforms:
    """F(m, r) with the standard points of :data:`POINTS` (or the given ``points``), verified
    symbolically before it is returned (raises AssertionError if the construction were wrong)."""
    if points is None:
        if (m, r) not in POINTS:
            raise ValueError(f"no standard points for F({m}, {r}); pass points= "
                             f"(known: {sorted(POINTS)})")
        points = POINTS[(m, r)]
    t = cook_toom(m, r, points)
    if not verify(t):
        raise AssertionError(f"F({m}, {r}) with points {points} fails the symbolic check")
    return t


def _matvec(M: Matrix, v) -> list[Fraction]:
    return [sum((a * b for a, b in zip(row, v)), Fraction(0)) for row in M]


def _matmul(X, Y) -> list[list[Fraction]]:
    cols = list(zip(*Y))
    return [[sum((a * b for a, b in zip(row, col)), Fraction(0)) for col in cols] for row in X]


def _transpose(X) -> list[list[Fraction]]:
    return [list(c) for c in zip(*X)]


def verify(t: Transforms) -> bool:
    """Exact check of ``A^T[(G g) ⊙ (B^T d)] = correlate(d, g)`` for all d, g (1-D).

    By bilinearity it suffices to check every pair of basis vectors (e_i, e_k), i < alpha,
    k < r: the output must be the vector with a 1 at position i - k (when 0 <= i - k < m).
    """
    alpha = t.alpha
    for k in range(t.r):
        g = [Fraction(int(q == k)) for q in range(t.r)]
        Gg = _matvec(t.G, g)
        for i in range(alpha):
            d = [Fraction(int(q == i)) for q in range(alpha)]
            y = _matvec(t.AT, [a * b for a, b in zip(Gg, _matvec(t.BT, d))])
            want = [Fraction(int(i - k == q)) for q in range(t.m)]
            if y != want:
                return False
    return True


def _integral(M) -> tuple[np.ndarray, int]:
    """(D M as an object array of Python ints, D): D > 0 the least common denominator of M's
    entries. Exact: scaling by D moves no rational off its value."""
    D = 1
    for row in M:
        for x in row:
            D = D * x.denominator // math.gcd(D, x.denominator)
    return np.array([[int(x * D) for x in row] for row in M], dtype=object), D


def verify_2d(t: Transforms) -> bool:
    """Exact check of ``A^T[(G g G^T) ⊙ (B^T d B)]A = correlate2d(d, g)`` for all alpha x alpha
    d and r x r g, on every pair of basis matrices (alpha^2 * r^2 pairs).

    The formula is evaluated literally, matrix product by matrix product, on integer matrices:
    A^T, G and B^T are each scaled by the least common denominator of their entries (D_A,
    D_G, D_B), so the left side comes out multiplied by (D_A D_G D_B)^2 — all in Python
    integers, exact, and much faster than Fractions (F(6, 3): 576 pairs in about a tenth of a
    second). U = G g G^T is computed once per basis g and V = B^T d B once per basis d."""
    alpha, r, m = t.alpha, t.r, t.m
    (AT, da), (G, dg), (BT, db) = _integral(t.AT), _integral(t.G), _integral(t.BT)
    scale = (da * dg * db) ** 2

    def basis(n, i, j):
        e = np.zeros((n, n), dtype=object)
        e[i, j] = 1
        return e

    Us = {(kr, ks): G.dot(basis(r, kr, ks)).dot(G.T) for kr in range(r) for ks in range(r)}
    Vs = {(ih, iw): BT.dot(basis(alpha, ih, iw)).dot(BT.T)
          for ih in range(alpha) for iw in range(alpha)}
    for (kr, ks), U in Us.items():
        for (ih, iw), V in Vs.items():
            Y = AT.dot(U * V).dot(AT.T)
            for p in range(m):
                for q in range(m):
                    if Y[p, q] != scale * int(ih - kr == p and iw - ks == q):
                        return False
    return True


def as_array(M: Matrix, dtype=np.float64) -> np.ndarray:
    """An exact matrix as a numpy array of ``dtype``: each entry p/q correctly rounded once for
    float64 (``float(Fraction)``) and float32 (one float32 division of p and q, both exact in
    float32 for these small integers); other dtypes go through float32 (two roundings). Entries
    such as 1/6 or 2/9 are not representable: the rounded matrices differ from the exact ones by
    up to half an ulp per entry."""
    dt = np.dtype(dtype)
    if dt == np.float64:
        return np.array([[float(x) for x in row] for row in M], dtype=np.float64)
    num = np.array([[x.numerator for x in row] for row in M], dtype=np.float32)
    den = np.array([[x.denominator for x in row] for row in M], dtype=np.float32)
    return (num / den).astype(dt)


def format_matrix(M: Matrix) -> str:
    """Right-aligned text rendering of an exact matrix (``1/2``, ``-1/6`` …)."""
    cells = [[str(x) for x in row] for row in M]
    w = max(len(c) for row in cells for c in row)
    return "\n".join("[" + "  ".join(c.rjust(w) for c in row) + "]" for row in cells)


def multiplications(m: int, r: int = 3, dims: int = 2) -> tuple[int, int]:
    """General multiplications per output tile per (input channel, output channel) pair:
    (Winograd F(m^dims, r^dims), direct) = ((m + r - 1)^dims, (m r)^dims). Lavin & Gray 2016,
    §4: F(2x2, 3x3) 16 vs 36 (2.25x), F(4x4, 3x3) 36 vs 144 (4x). Transform additions are
    amortised over channels and not counted."""
    return (m + r - 1) ** dims, (m * r) ** dims


def abs_bound(X: np.ndarray, Wt: np.ndarray, m: int = 2) -> np.ndarray:
    """The scale of F(m x m, 3 x 3)'s rounding errors, per output (float64, (N, K, H, W)):
    ``|A^T| [ sum_c (|G| |g| |G^T|) ⊙ (|B^T| |d| |B|) ] |A|`` for each output tile, i.e. the
    algorithm run on absolute values with absolute transforms (the standard points).

    X (N, C, H, W), Wt (K, C, 3, 3), any float dtype; stride 1, padding 1. A first-order
    rounding-error analysis of the bilinear algorithm (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2nd ed., 2002, §3.1 and §3.5, applied stage by stage) bounds the
    error of each output by ``gamma_n`` times this, n = the number of roundings on the longest
    path through the stages. It is larger than ``|X| ⋆ |W|`` (direct convolution's scale):
    Winograd mixes all taps of g, and all pixels of the tile, before multiplying.
    """
    X = np.abs(np.asarray(X, dtype=np.float64))
    Wt = np.abs(np.asarray(Wt, dtype=np.float64))
    AT, G, BT = (np.abs(a) for a in transforms(m, 3).arrays())
    N, C, H, Wd = X.shape
    K = Wt.shape[0]
    alpha = m + 2
    th, tw = -(-H // m), -(-Wd // m)
    Xp = np.zeros((N, C, th * m + 2, tw * m + 2))
    Xp[:, :, 1:1 + H, 1:1 + Wd] = X
    d = np.lib.stride_tricks.sliding_window_view(Xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    U = np.einsum("ij,kcjl,ml->kcim", G, Wt, G, optimize=True)             # K C a a
    V = np.einsum("ij,nctujl,ml->nctuim", BT, d, BT, optimize=True)         # N C th tw a a
    Mx = np.einsum("kcim,nctuim->nktuim", U, V, optimize=True)              # N K th tw a a
    Yt = np.einsum("ij,nktujl,ml->nktuim", AT, Mx, AT, optimize=True)       # N K th tw m m
    Y = Yt.transpose(0, 1, 2, 4, 3, 5).reshape(N, K, th * m, tw * m)
    return np.ascontiguousarray(Y[:, :, :H, :Wd])
