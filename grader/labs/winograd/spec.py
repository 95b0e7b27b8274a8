"""Lab 4 ``winograd``: Winograd F(2x2, 3x3) convolution on the CPU (Numba, one thread), grader
side.

The student writes ``conv2d_winograd(X, W, Y)``: X float32 (N, C, H, W) "NCHW", W float32
(K, C, 3, 3) "KCRS", Y float32 (N, K, H, W), stride 1, zero padding 1; any N, C, K >= 1 and any
H, W >= 1 (odd H or W leaves partial 2x2 output tiles). Y is written in place.

* correctness: element-wise ``|Y - ref| <= KAPPA * e_direct + GAMMA_TRANSFORMS * B_wino``
  against the float64 golden convolution (:func:`reference_kernels.conv.conv2d_golden`), with
  e_direct the error of a float32 direct convolution of the same inputs and B_wino the
  transforms' worst-case bound (:func:`kernellab.topics.winograd.abs_bound`; Higham 2002, §3.1;
  Lavin & Gray, "Fast algorithms for convolutional neural networks", CVPR 2016);
* speedup over the provided direct kernel >= ``MIN_SPEEDUP_DIRECT`` on ``PERF_SHAPE``;
* the fastest timed call plausible: <= ``MULTIPLY_SAVING`` x the measured one-core FMA peak x
  :data:`kernellab.machine.PEAK_MARGIN` (a gate).

The reasoning behind every rule and threshold: ``README.md`` beside this file. The worker side:
:mod:`grader.labs.winograd.measure`.
"""

from __future__ import annotations

import numpy as np

from grader.rules import Rule, median
from grader.spec import Case, CaseData, LabSpec, RuleResult, Whole
from kernellab.numerics import MeasuredBaseline, compare, unit_roundoff
from kernellab.topics.winograd import abs_bound
from reference_kernels.conv import conv2d_direct_rounded, conv2d_golden

KAPPA = 2.0
TRANSFORM_ROUNDINGS = 11
_U32 = unit_roundoff("float32")
GAMMA_TRANSFORMS = TRANSFORM_ROUNDINGS * _U32 / (1 - TRANSFORM_ROUNDINGS * _U32)

PERF_SHAPE = {"N": 1, "C": 64, "K": 64, "H": 56, "W": 56}
PERF_ROUNDS = 7
PERF_THREADS = 1
MIN_SPEEDUP_DIRECT = 1.6
MULTIPLY_SAVING = 36 / 16  # F(2x2, 3x3): the most the algorithm can gain over direct

#: (N, C, K, H, W): every H, W from 1 to 9 appears (odd sizes leave partial tiles), C = 1 (no
#: channel sum to hide a transform error), long channel sums, several images.
VISIBLE_SHAPES = [
    (1, 1, 1, 1, 1), (1, 1, 1, 1, 2), (1, 1, 1, 2, 1), (1, 1, 1, 2, 2), (1, 1, 1, 3, 3),
    (1, 2, 3, 4, 4), (2, 3, 2, 5, 7), (1, 1, 4, 7, 1), (1, 3, 1, 1, 9), (1, 8, 8, 8, 8),
    (2, 4, 5, 9, 6), (1, 16, 8, 13, 11), (3, 2, 2, 3, 5), (1, 64, 16, 10, 10),
    (1, 5, 64, 6, 7), (1, 32, 32, 17, 16), (1, 1, 1, 31, 33),
]
VISIBLE_SEED = 20261130
#: called again right after itself with a few entries of X and W changed (grader.labs._repeat:
#: a transformed-filter cache keyed on the shapes and a few entries goes stale)
REPEATED = "N1 C16 K8 13x11"
HIDDEN_PARAMS = {k: Whole() for k in ("N", "C", "K", "H", "W")}
MAX_CASE_BYTES = 96 << 20  # X + W + Y of one hidden case (float32)
MAX_CHECK_BYTES = 256 << 20  # the float64 transformed tiles of the grader's bound, one case
MAX_CHECK_PASSES = 200_000  # numpy passes of the grader's float32 direct convolution
MAX_CHECK_ELEMENT_OPS = 2e9  # their element operations (a few seconds of the grader's time)
_KEYS = ("N", "C", "K", "H", "W")

RULES = (
    Rule("speedup over the provided direct kernel", ">=", MIN_SPEEDUP_DIRECT, "x",
         why="median of per-round time ratios, N=1 C=K=64 H=W=56, one thread"),
    Rule("fastest timed call is plausible", "max<=",
         f"PEAK_MARGIN x {MULTIPLY_SAVING:g} x the measured one-core FMA peak", " GFLOP/s",
         why="a gate: no points, but failing it voids the speed points"),
)


class Winograd(LabSpec):
    lab_id = "winograd"
    title = "Winograd F(2x2, 3x3) convolution (CPU, Numba)"
    notebook = "04_winograd.ipynb"
    tier = "cpu"
    functions = {"conv2d_winograd": ("X", "W", "Y")}
    allowed_imports = frozenset({"numpy", "numba", "math"})
    # the provided baseline and golden side, and library FFTs (FFT convolution is another fast
    # algorithm, computed by a library)
    banned_names = frozenset({"conv2d_direct", "conv2d_golden", "conv2d_abs",
                              "conv2d_direct_rounded", "fft"})

    params = HIDDEN_PARAMS
    visible_seed = VISIBLE_SEED
    repeated = {REPEATED: ("X", "W")}
    rules = RULES

    def visible_params(self) -> list[dict]:
        return [dict(zip(_KEYS, shape)) for shape in VISIBLE_SHAPES]

    def case_name(self, p: dict) -> str:
        return "N{N} C{C} K{K} {H}x{W}".format(**p)

    def random_params(self, rng, i: int) -> dict:
        return {"N": int(rng.integers(1, 4)), "C": int(rng.integers(1, 97)),
                "K": int(rng.integers(1, 97)), "H": int(rng.integers(1, 41)),
                "W": int(rng.integers(1, 41))}

    def case_limits(self, p: dict) -> str | None:
        """Within the caps on the arrays and on the grader's own check."""
        n, c, k, h, w = (p[x] for x in _KEYS)
        if 4 * (n * c * h * w + k * c * 9 + n * k * h * w) > MAX_CASE_BYTES:
            return f"X, W and Y together must fit in {MAX_CASE_BYTES >> 20} MiB"
        # the grader's own check (kernellab.topics.winograd.abs_bound) holds float64 transformed
        # tiles: 16 values per tile and input or output channel
        tiles = n * -(-h // 2) * -(-w // 2)
        if 8 * 16 * tiles * (c + k) > MAX_CHECK_BYTES:
            return (f"too large for the grader's check (its transformed tiles would need more "
                    f"than {MAX_CHECK_BYTES >> 20} MiB)")
        # and its time: the float32 direct convolution it measures e_direct with is 9 C numpy
        # passes over the output
        if 9 * c > MAX_CHECK_PASSES or 9 * c * n * k * h * w > MAX_CHECK_ELEMENT_OPS:
            return (f"too long for the grader's check (9 C passes over N K H W outputs: at "
                    f"most {MAX_CHECK_PASSES} passes and {MAX_CHECK_ELEMENT_OPS:.0e} element "
                    "operations)")
        return None

    def case_arrays(self, case: Case) -> CaseData:
        """Standard-normal X (N, C, H, W) and W (K, C, 3, 3), float32, from the case's seed;
        Y (N, K, H, W) float32 as the output, called as ``conv2d_winograd(X, W, Y)``."""
        p = case.params
        rng = np.random.default_rng(case.seed)
        X = rng.standard_normal((p["N"], p["C"], p["H"], p["W"]), dtype=np.float32)
        W = rng.standard_normal((p["K"], p["C"], 3, 3), dtype=np.float32)
        return CaseData(inputs={"X": X, "W": W},
                        outputs={"Y": ((p["N"], p["K"], p["H"], p["W"]), "float32")},
                        call=["X", "W", "Y"])

    def warmup_data(self):
        c = Case("warmup", {"N": 1, "C": 2, "K": 3, "H": 5, "W": 5}, seed=1)
        return [("conv2d_winograd", self.case_data(c))]

    def policy(self, X: np.ndarray, W: np.ndarray, ref: np.ndarray) -> MeasuredBaseline:
        """The lab's tolerance for the inputs X, W (module docstring)."""
        e_direct = float(np.abs(conv2d_direct_rounded(X, W, np.float32).astype(np.float64)
                                - ref).max())
        return MeasuredBaseline(
            baseline_error=e_direct, kappa=KAPPA,
            floor=GAMMA_TRANSFORMS * abs_bound(X, W, 2),
            baseline="a float32 direct convolution of the same inputs",
            floor_note=f"gamma_{TRANSFORM_ROUNDINGS} x |A^T|[(|G||g||G^T|)⊙(|B^T||d||B|)]|A| "
                       "(the transforms' worst-case rounding)")

    def compare(self, case: Case, data: CaseData, outputs: dict):
        X, W = data.inputs["X"], data.inputs["W"]
        ref = conv2d_golden(X, W)
        Y = outputs["Y"]
        policy = self.policy(X, W, ref)
        cmp = compare(Y, ref, policy, tile=None)
        if not cmp.ok:
            hint = _diagnose(Y, ref, policy.bounds(ref)[0], policy.floor / GAMMA_TRANSFORMS)
            if hint:
                cmp.message = f"{cmp.message}; {hint}"
        return cmp

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"shape": dict(PERF_SHAPE), "rounds": PERF_ROUNDS, "threads": PERF_THREADS}

    def planned(self, plan: dict) -> dict:
        s = plan["shape"]
        return {"params": s, "what": str(s),
                "arrays": {"X": ((s["N"], s["C"], s["H"], s["W"]), "float32"),
                           "W": ((s["K"], s["C"], 3, 3), "float32"),
                           "Y": ((s["N"], s["K"], s["H"], s["W"]), "float32")}}

    def rules_cpu(self, m: dict) -> list[RuleResult]:
        from kernellab import machine

        s = PERF_SHAPE
        layer = f"N={s['N']} C={s['C']} K={s['K']} H={s['H']} W={s['W']}"
        limit = machine.speed_limit(np.float32, cores=PERF_THREADS, factor=MULTIPLY_SAVING)
        speed, plausible = RULES
        return [
            speed.judge(m["speedup_direct"],
                        f"{layer}, one thread: direct {median(m['gflops_direct']):.1f} GFLOP/s, "
                        f"yours {median(m['gflops']):.1f} effective GFLOP/s (direct-convolution "
                        "FLOPs / time)"),
            plausible.judge(m["gflops"],
                            f"limit = {limit.text}: F(2x2,3x3) saves at most "
                            f"{MULTIPLY_SAVING:g}x the multiplications; nominal peak "
                            f"{m['peak_formula']} (not used); faster means the timer was "
                            "cheated (cached results, work outside the call)",
                            threshold=limit.gflops),
        ]


def _diagnose(Y: np.ndarray, ref: np.ndarray, bound: np.ndarray, B: np.ndarray) -> str:
    """A plain-words guess at the cause of a failed comparison."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(Y.astype(np.float64) - ref) <= bound)
    if not bad.any():
        return ""
    N, K, H, Wd = Y.shape
    edge = np.zeros((H, Wd), bool)
    if H % 2:
        edge[H - 1, :] = True
    if Wd % 2:
        edge[:, Wd - 1] = True
    edge_b = np.broadcast_to(edge, bad.shape)
    only_edge = edge.any() and not (bad & ~edge_b).any()
    if only_edge and ((~edge).any() or np.isnan(Y[bad]).all()):
        return (f"every wrong element is in the last row (H={H} is odd) or the last column "
                f"(W={Wd} is odd): the partial output tiles are missing; a 2x2 tile that "
                "hangs over the edge must still write its rows/columns that fall inside Y")
    finite = np.isfinite(Y)
    if not finite.all():
        return ""
    err = np.abs(Y.astype(np.float64) - ref)[bad]
    rel = err / np.maximum(B[bad], np.finfo(float).tiny)
    if float(np.median(err)) > 0.05 * float(np.median(np.abs(ref))):
        return ("the errors are as large as the outputs themselves: check the transform "
                "matrices (signs, the 1/2 in G) and the tile offsets against chapter 4")
    if 2.0**-16 <= float(np.max(rel)) <= 2.0**-7:
        return ("the errors are the size of float16 rounding (about 2^-11 of the transformed "
                "values): are the transforms or the products computed in float16?")
    return ""
