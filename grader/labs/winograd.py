"""Lab 4 ``winograd``: Winograd F(2x2, 3x3) convolution on the CPU (Numba, one thread).

The student writes ``conv2d_winograd(X, W, Y)``: X float32 (N, C, H, W) "NCHW", W float32
(K, C, 3, 3) "KCRS", Y float32 (N, K, H, W), stride 1, zero padding 1; any N, C, K >= 1 and any
H, W >= 1 (odd H or W leaves partial 2x2 output tiles). Y is written in place.

Correctness: every case against the float64 golden convolution of the same inputs
(:func:`reference_kernels.conv.conv2d_golden`), element-wise::

    |Y - ref| <= KAPPA * e_direct + GAMMA_TRANSFORMS * B_wino

* ``e_direct``: the max error of a plain float32 direct convolution on the same inputs (the
  provided baseline's order: a sequential sum over c, r, s, no FMA;
  :func:`reference_kernels.conv.conv2d_direct_rounded`), measured per case;
* ``KAPPA = 2``: the FlashAttention tests' multiple (Dao-AILab/flash-attention
  ``tests/test_flash_attn.py``: at most twice the error of a plain implementation in the same
  precision). Winograd's only long sum is over C (16
  independent sums of C products), direct's is over 9 C, so an honest F(2x2, 3x3) sits at or
  below ``e_direct`` once C is more than a few (measured in chapter 4);
* the floor, ``gamma_11 B_wino`` with ``gamma_n = n u / (1 - n u)``, u = 2^-24 (Higham 2002,
  §3.1): B_wino = |A^T|[sum_c (|G||g||G^T|) ⊙ (|B^T||d||B|)]|A| per output
  (:func:`kernellab.topics.winograd.abs_bound`), and 11 the roundings outside the channel sum on the
  longest path through F(2x2, 3x3) with Lavin & Gray's matrices: G g and (G g) G^T 2 + 2
  (three-term sums; the halving is exact), B^T d and (B^T d) B 1 + 1, the product 1, A^T M and
  (A^T M) A 2 + 2. A worst-case bound of the transform stages, not a fit: it is needed because
  the transforms mix all nine taps and the whole 4x4 tile before the multiplication, so for
  small C a correct Winograd output can be off by many ulps of itself where direct convolution
  is almost exact (one channel, one pixel: 90x the direct error, measured). The issue asked for
  a one-ULP floor; one ulp of the output is not a bound here (see chapter 4).

Both terms are far below what the known bugs produce: transforms in float16 err by about
2^-11 B_wino (a few hundred times the floor), a sign error in G or a dropped partial tile by
the size of the output itself.

Performance (cpu tier, one thread, the same run): the median over interleaved rounds of
(time of the provided direct kernel / time of the submission) on a ResNet-like layer
(N = 1, C = K = 64, H = W = 56), fresh inputs for every call, >= ``MIN_SPEEDUP_DIRECT``.
The direct kernel is :func:`reference_kernels.conv.conv2d_direct` under ``numba.njit``
(vectorised inner loop, about 13 GFLOP/s on the course machine). F(2x2, 3x3) does 16 instead
of 36 multiplications per output tile and channel pair (2.25x fewer), and its transforms are
cheap next to the 16 GEMMs when C = K = 64. Thresholds from measurements on the course machine
(2-core AMD EPYC Zen 4, graded with ``kernellab grade``; ``tests/test_grader_winograd.py``): the
reference solution 3.2-4.0x, a straightforward Winograd (tile-by-tile transforms with padding
branches, plain ikj GEMM loops) 1.8-2.1x, the direct kernel handed in 0.96x, the filter
transform recomputed for every tile 0.10x. Also: every timed call's output is checked right after it returns (sampled,
outside the timer) and the last one in full; a call faster than 2.25x the machine's measured
single-core FMA peak (the most the saved multiplications allow; times
:data:`kernellab.machine.PEAK_MARGIN` for clock changes, :func:`kernellab.machine.speed_limit`)
means the timer was cheated.

No library GEMM or FFT (the static check bans ``@``, ``matmul``, ``dot``, ``einsum``,
``fft`` …): the submission and the direct kernel are both hand-written loops, so the ratio
measures the algorithm, not OpenBLAS. Known limit: the speed rule cannot tell Winograd from
another fast hand-written convolution (im2col with a well-blocked GEMM, chapter 4's v2, runs
at about 2x); the instructor reads the code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._gemm import case_seed
from grader.labs._timed import TimedCalls
from grader.labs._repeat import change_inputs, repeat_case, stale_note
from grader.spec import (Case, CaseData, HiddenCases, LabSpec, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)
from kernellab.numerics import MeasuredBaseline, compare, unit_roundoff
from kernellab.topics.winograd import abs_bound
from reference_kernels.conv import conv2d_direct_rounded, conv2d_flops, conv2d_golden

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
MAX_CHECK_ELEMENT_OPS = 2e9  # their element operations (a few seconds on the course machine)


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
    codegen = "default"

    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for shape in VISIBLE_SHAPES:
            p = dict(zip(("N", "C", "K", "H", "W"), shape))
            name = "N{N} C{C} K{K} {H}x{W}".format(**p)
            out.append(Case(name, p, case_seed(VISIBLE_SEED, name)))
            if name == REPEATED:
                out.append(repeat_case(out[-1], ("X", "W")))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = "hidden{} N{N} C{C} K{K} {H}x{W}".format(i, **p)
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(6):
                p = {"N": int(rng.integers(1, 4)), "C": int(rng.integers(1, 97)),
                     "K": int(rng.integers(1, 97)), "H": int(rng.integers(1, 41)),
                     "W": int(rng.integers(1, 41))}
                name = "hidden{} N{N} C{C} K{K} {H}x{W}".format(i, **p)
                out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the caps on
        the arrays and on the grader's own check. Raises ValueError in plain words."""
        keys = ("N", "C", "K", "H", "W")
        q = parse_hidden_case(i, p, HIDDEN_PARAMS)
        n, c, k, h, w = (q[x] for x in keys)
        if 4 * (n * c * h * w + k * c * 9 + n * k * h * w) > MAX_CASE_BYTES:
            raise hidden_case_error(i, f"X, W and Y together must fit in "
                                       f"{MAX_CASE_BYTES >> 20} MiB")
        # the grader's own check (kernellab.topics.winograd.abs_bound) holds float64 transformed
        # tiles: 16 values per tile and input or output channel
        tiles = n * -(-h // 2) * -(-w // 2)
        if 8 * 16 * tiles * (c + k) > MAX_CHECK_BYTES:
            raise hidden_case_error(i, f"too large for the grader's check (its transformed "
                                       f"tiles would need more than {MAX_CHECK_BYTES >> 20} MiB)")
        # and its time: the float32 direct convolution it measures e_direct with is 9 C numpy
        # passes over the output
        if 9 * c > MAX_CHECK_PASSES or 9 * c * n * k * h * w > MAX_CHECK_ELEMENT_OPS:
            raise hidden_case_error(i, f"too long for the grader's check (9 C passes over "
                                       f"N K H W outputs: at most {MAX_CHECK_PASSES} passes and "
                                       f"{MAX_CHECK_ELEMENT_OPS:.0e} element operations)")
        return q

    def case_data(self, case: Case) -> CaseData:
        """Standard-normal X (N, C, H, W) and W (K, C, 3, 3), float32, from the case's seed;
        Y (N, K, H, W) float32 as the output, called as ``conv2d_winograd(X, W, Y)``."""
        p = case.params
        rng = np.random.default_rng(case.seed)
        X = rng.standard_normal((p["N"], p["C"], p["H"], p["W"]), dtype=np.float32)
        W = rng.standard_normal((p["K"], p["C"], 3, 3), dtype=np.float32)
        return change_inputs(case, CaseData(
            inputs={"X": X, "W": W}, outputs={"Y": ((p["N"], p["K"], p["H"], p["W"]), "float32")},
            call=["X", "W", "Y"]))

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

    def check(self, case: Case, data: CaseData, outputs: dict):
        X, W = data.inputs["X"], data.inputs["W"]
        ref = conv2d_golden(X, W)
        Y = outputs["Y"]
        policy = self.policy(X, W, ref)
        cmp = compare(Y, ref, policy, tile=None)
        if not cmp.ok:
            hint = _diagnose(Y, ref, policy.bounds(ref)[0], policy.floor / GAMMA_TRANSFORMS)
            if hint:
                cmp.message = f"{cmp.message}; {hint}"
        return stale_note(self, case, data, outputs, cmp)

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"shape": dict(PERF_SHAPE), "rounds": PERF_ROUNDS, "threads": PERF_THREADS}

    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        """Worker side: the submission and the direct kernel interleaved in one process, one
        thread, fresh inputs for every call; every submission call's output sampled right after
        it returns (outside the timer); the last one saved for the grader's full re-check."""
        from kernellab import machine, threads, timing
        import numba

        from reference_kernels.conv import conv2d_direct

        direct = numba.njit(cache=True)(conv2d_direct)
        fn = namespace["conv2d_winograd"]
        s = plan["shape"]
        N, C, K, H, Wd = (int(s[k]) for k in ("N", "C", "K", "H", "W"))
        rng = np.random.default_rng()
        check_rng = np.random.default_rng()
        calls = TimedCalls(("X", "W"), ("Y",),
                           is_correct=lambda xw, y: sampled_ok(*xw, y[0], check_rng),
                           is_unwritten=lambda y: bool(np.isnan(y[0]).any()))
        fresh = calls.setup(
            lambda: (rng.standard_normal((N, C, H, Wd), dtype=np.float32),
                     rng.standard_normal((K, C, 3, 3), dtype=np.float32)),
            lambda: (np.full((N, K, H, Wd), np.nan, np.float32),))

        tiny = fresh()
        direct(*tiny)  # compile outside the timed rounds
        threads_ = int(plan["threads"])
        rounds = int(plan["rounds"])
        g = timing.interleaved({"submission": fn, "direct": direct}, baseline="submission",
                               setup=fresh, warmup=1, rounds=rounds, threads_=threads_,
                               after=calls.after)
        t = {k: v.times for k, v in g.timings.items()}
        flops = conv2d_flops(N, C, K, H, Wd)
        info = machine.cpu_info()
        return {
            "speedup_direct": [a / b for a, b in zip(t["direct"], t["submission"])],
            "gflops": [flops / x / 1e9 for x in t["submission"]],
            "gflops_direct": [flops / x / 1e9 for x in t["direct"]],
            "peak_gflops": info.peak_flops(np.float32, cores=min(info.cores, threads_)) / 1e9,
            "peak_formula": info.formula(np.float32, cores=min(info.cores, threads_)),
            "setup": {"description": f"float32, {threads_} thread{'s' if threads_ != 1 else ''}, "
                                     f"{rounds} interleaved rounds, fresh inputs per call, "
                                     f"N={N} C={C} K={K} H={H} W={Wd}; effective GFLOP/s = "
                                     "direct-convolution FLOPs / time",
                      "threads_note": threads.status()["note"],
                      "timings": g.to_dict()["timings"]},
            "recheck": calls.save(workdir, dict(plan["shape"])),
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        s = plan["shape"]
        if recheck.get("params") != s:
            return (f"the timed calls were not the planned {s} ({recheck.get('params')!r}): "
                    "was the grading process tampered with?")
        want = {"X": (s["N"], s["C"], s["H"], s["W"]), "W": (s["K"], s["C"], 3, 3),
                "Y": (s["N"], s["K"], s["H"], s["W"])}
        for name, shape in want.items():
            a = arrays.get(name)
            if a is None or a.shape != shape or a.dtype != np.float32:
                got = "missing" if a is None else f"{a.shape} {a.dtype}"
                return (f"the last timed call's {name} is {got}, not the planned {shape} "
                        "float32: was the grading process tampered with?")
        return None

    def perf_rules(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        s = PERF_SHAPE
        layer = f"N={s['N']} C={s['C']} K={s['K']} H={s['H']} W={s['W']}"
        from kernellab import machine

        limit = machine.speed_limit(np.float32, cores=PERF_THREADS, factor=MULTIPLY_SAVING)
        plausible = limit.gflops
        return [
            RuleResult("speedup over the provided direct kernel", med(m["speedup_direct"]),
                       MIN_SPEEDUP_DIRECT, ">=", "x",
                       med(m["speedup_direct"]) >= MIN_SPEEDUP_DIRECT,
                       f"{layer}, one thread: direct {med(m['gflops_direct']):.1f} GFLOP/s, "
                       f"yours {med(m['gflops']):.1f} effective GFLOP/s (direct-convolution "
                       "FLOPs / time)", rng(m["speedup_direct"])),
            RuleResult("fastest timed call is plausible", max(m["gflops"]), plausible, "<=",
                       " GFLOP/s", max(m["gflops"]) <= plausible,
                       f"limit = {limit.text}: F(2x2,3x3) saves at most {MULTIPLY_SAVING:g}x "
                       f"the multiplications; nominal peak {m['peak_formula']} (not used); "
                       "faster means the timer was cheated (cached results, work outside the "
                       "call)",
                       rng(m["gflops"]), scored=False),
        ]


def sampled_ok(X: np.ndarray, W: np.ndarray, Y: np.ndarray, rng, samples: int = 256) -> bool:
    """Worker side, after every timed call (outside the timer): did the call compute the whole
    convolution? ``samples`` random outputs against float64 sums, within 2^-12 of
    sum_c (sum of |X| over the 5x5 window around the output) (sum |W[k, c]|), which bounds every
    honest float32 F(2x2, 3x3) or direct result by orders of magnitude (B_wino <= 9 x that sum
    and the error <= gamma_11 B_wino + the channel sum's) while a skipped, stale or zeroed output
    misses it. The full check is the grader's, on the last call."""
    N, C, H, Wd = X.shape
    K = W.shape[0]
    if Y.shape != (N, K, H, Wd) or not np.isfinite(Y).all():
        return False
    X64 = np.zeros((N, C, H + 4, Wd + 4))
    X64[:, :, 2:2 + H, 2:2 + Wd] = X
    W64 = W.astype(np.float64)
    n = rng.integers(0, N, samples)
    k = rng.integers(0, K, samples)
    p = rng.integers(0, H, samples)
    q = rng.integers(0, Wd, samples)
    r = np.arange(5)
    win5 = X64[n[:, None, None, None], np.arange(C)[None, :, None, None],
               (p[:, None, None, None] + r[None, None, :, None]),
               (q[:, None, None, None] + r[None, None, None, :])]        # samples C 5 5
    win3 = win5[:, :, 1:4, 1:4]
    ref = (win3 * W64[k]).sum(axis=(1, 2, 3))
    scale = (np.abs(win5).sum(axis=(2, 3)) * np.abs(W64[k]).sum(axis=(2, 3))).sum(axis=1)
    err = np.abs(Y[n, k, p, q].astype(np.float64) - ref)
    return bool((err <= 2.0**-12 * scale).all())


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
