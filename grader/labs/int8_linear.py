"""Lab 6 ``int8-linear``: a W8A8 linear layer — per-channel weight quantisation, an exact int8 GEMM
and per-token activation quantisation (CPU, Numba).

The student writes three functions (the rounding rule of :mod:`reference_kernels.quant`:
``q = clip(rint(x / S), -127, 127)``, x / S a float32 division, rint half to even, S =
max|row| / 127 in float32 and S = 1 for an all-zero row):

* ``quantize_per_channel(W) -> (Wq, scales)``: W float32 (N, K), one symmetric scale per output
  channel (row). Graded **exactly**: every Wq element and every scale bit equal to the reference.
  Cases include rows whose values sit exactly on a half step (ties: half to even differs from
  half away from zero), an all-zero row, rows whose max |w| is negative, and rows whose
  magnitudes span twelve decades (one scale for the whole matrix flattens the small rows to 0).
* ``int8_gemm(Aq, Bq, C)``: Aq int8 (M, K), Bq int8 (K, N), C int32 (M, N) = Aq @ Bq, **exact**
  against an int64 product; cases include K = 3000 with every value -128 (each product 2^14:
  int16 accumulation overflows after two terms, int8 after none), K = 3001 with values near
  +-127 signed so that every product is positive (every C about 4.6e7 > 2^24, most of them
  not multiples of 4, float32's spacing there: no float32 accumulator, in any order, can end
  on them), K = 2101 with every product 127 * 127 (odd: a float32 partial sum of more than 1040
  of them rounds, so float32 accumulated in chunks longer than that fails, while chunks of at
  most 1024 products are exact for any int8 data) and random full-range data.
* ``linear_w8a8(X, Wq, w_scales, bias, Y)``: X float32 (M, K) quantised per token (per row,
  the same rule), the int8 GEMM Xq Wq^T with int32 accumulation, then
  ``Y[m, n] = acc[m, n] * s_x[m] * w_scales[n] + bias[n]`` in float32. Wq (N, K) int8 and
  w_scales (N,) come from the reference quantiser. X includes near-tie rows (the
  ``near_ties`` data of quantize_per_channel: x / S in float32 lands exactly on a half step,
  the exact quotient does not), so an activation quantiser with x * (1 / S) or a float64
  division fails here too. Two rules:

  1. *the pipeline*: ``|Y - Y_q| <= 6 u32 (|acc| s_x s_w + |bias|)`` element-wise, Y_q the float64
     value of that formula from the reference's Xq, s_x and the int64 product: the float32
     dequantisation has at most four roundings (int32 -> float32, two products, the bias add)
     and the bound allows six (another order of the products); anything that quantises X
     differently (another rounding, another scale) is off by whole steps s_x s_w |Wq|;
  2. *accuracy* (reported; implied by rule 1 — an output within rule 1 has the reference
     pipeline's SQNR — so it names the failure in dB rather than deciding it alone), on Gaussian
     data and on the same data with one input channel scaled 60x like an LLM outlier feature (M =
     64, K = 4096, N = 128; the outlier of chapter 6's study): SQNR against the float64 layer X
     (Wq w_scales)^T + bias (the activation quantisation's noise; the weights are the reference's)
     >= the SQNR the uniform-noise model predicts for per-token quantisation of that X
     (:func:`reference_kernels.quant.predicted_sqnr_db`) less :data:`SQNR_MARGIN_DB` = 3 dB (twice
     the predicted noise power). Measured: per-token 41.2 dB (predicted 41.2) and 19.9-20.6 dB
     with the outlier (predicted 19.9-20.5; the anchor of
     :data:`kernellab.topics.quant_study.REFERENCE_SQNR_DB` 19.7); one scale for all tokens 39-40 dB and
     11.2-11.9 dB (anchor 10.9): the outlier case fails it. Only for layers of at least
     SQNR_MIN_OUTPUTS = 1024 outputs: the prediction is an average (the pipeline rule holds
     everywhere).

Performance (cpu tier, one thread, interleaved, fresh inputs per call): ``int8_gemm`` at
M = N = K = 512 against the provided naive integer loop
(:func:`reference_kernels.quant.int8_gemm_naive` under ``numba.njit``: i, j, k, the inner loop
down a column of Bq), speedup >= :data:`MIN_SPEEDUP_NAIVE`. Measured on the course machine
(2-core AMD EPYC Zen 4): the naive loop 1.6-3.5 GOP/s; a plain ikj loop with int32 rows 11x;
the solution (pairs of int16 products summed into int32, the ``vpmaddwd`` pattern) 16x. (Numba
types the product of two int32 scalars as int64, so the naive loop accumulates in int64.) Every
timed call's C is checked exactly right after it returns (Freivalds: C x = Aq (Bq x) in int64
for random +-1 vectors x, outside the timer) and the last one in full; a call faster than 4 x
the measured fp32 FMA peak in int8 operations (AVX-512 VNNI's ratio: one ``VPDPBUSD`` does four
u8 x s8 multiply-adds per 32-bit lane where an fp32 FMA does one; Intel SDM, VPDPBUSD; times
:data:`kernellab.machine.PEAK_MARGIN` for clock changes, :func:`kernellab.machine.speed_limit`)
voids the speed points.

Every function is also called again right after one of its cases with a few entries of
its inputs changed at fresh random positions (:mod:`grader.labs._repeat`): a cache of packed
weights keyed on the shapes and a few entries returns the earlier call's output and fails.

The clamp: with S = max|row| / 127 every |x / S| is at most 127 (1 + u) for normal floats, so
the clamp acts only where S underflows — rows of subnormal magnitude, where S = max / 127
rounds to a whole ulp of the subnormal range and |x / S| reaches 190 (the ``subnormal`` case;
without the clamp int8 wraps). In practice it matters with calibrated (percentile) scales:
chapter 6.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._gemm import case_seed
from grader.labs._timed import TimedCalls
from grader.labs._repeat import change_inputs, repeat_case, stale_note
from grader.spec import (Case, CaseData, HiddenCases, LabSpec, OneOf, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)
from kernellab.numerics import Comparison, Exact, Explicit, compare, unit_roundoff
from reference_kernels.quant import (OUTLIER_FACTOR, QMAX, int_gemm_golden, linear_golden,
                                     predicted_sqnr_db, quantize_per_channel_golden,
                                     quantize_per_token_golden, quantize_symmetric, sqnr_db,
                                     symmetric_scale)

SQNR_MARGIN_DB = 3.0
SQNR_KINDS = ("gaussian", "outlier")
#: the SQNR rule needs many outputs: the prediction is an average (with a handful of outputs,
#: one near zero decides the ratio; measured: the reference fails 3 dB on 12-40% of seeds at
#: M N <= 16, never at M N >= 64)
SQNR_MIN_OUTPUTS = 1024
DEQUANT_ROUNDINGS = 6
PERF_N = 512
PERF_ROUNDS = 5
PERF_THREADS = 1
MIN_SPEEDUP_NAIVE = 6.0
INT8_OPS_PER_FP32_FLOP = 4  # VPDPBUSD: 4 int8 MACs per 32-bit lane vs 1 fp32 FMA (Intel SDM)

QUANT_CASES = [  # (N, K, kind)
    (1, 1, "normal"), (1, 7, "normal"), (3, 1, "normal"), (16, 64, "normal"),
    (64, 33, "decades"), (127, 255, "normal"), (5, 4097, "decades"), (8, 300, "ties"),
    (33, 65, "ties"), (16, 200, "near_ties"), (8, 64, "subnormal"), (4, 16, "zero_row"), (6, 50, "negative_max"), (9, 40, "tiny"),
    (9, 40, "huge"),
]
GEMM_CASES = [  # (M, N, K, kind)
    (1, 1, 1, "random"), (2, 3, 5, "random"), (31, 33, 65, "random"), (64, 64, 64, "random"),
    (1, 257, 2, "random"), (33, 1, 129, "random"), (17, 130, 1100, "random"),
    (3, 5, 3000, "min"), (7, 9, 301, "extremes"), (2, 2, 2, "min"),
    (5, 7, 3001, "float32_inexact"), (3, 4, 2101, "float32_chunks"),
]
LINEAR_CASES = [  # (M, K, N, kind)
    (1, 1, 1, "gaussian_small"), (3, 5, 2, "gaussian_small"), (4, 33, 7, "zero_token"),
    (64, 4096, 128, "gaussian"), (64, 4096, 128, "outlier"), (17, 300, 9, "gaussian_small"),
    (16, 200, 9, "near_ties"),
]
#: the cases called again right after themselves with a few entries changed: name -> inputs
REPEATED = {"quantize 16x64 normal": ("W",), "gemm 31x33x65 random": ("Aq", "Bq"),
            "linear 17x300->9 gaussian_small": ("X", "Wq")}
QUANT_KINDS = ("normal", "decades", "ties", "near_ties", "subnormal", "zero_row",
               "negative_max", "tiny", "huge")
GEMM_KINDS = ("random", "min", "extremes", "float32_inexact", "float32_chunks")
LINEAR_KINDS = ("gaussian", "outlier", "zero_token", "gaussian_small", "near_ties")
MAX_HIDDEN_K = 100_000  # int32 holds K * 2^14
#: a hidden case's parameters (grader.spec.parse_hidden_case), by function
HIDDEN_PARAMS = {
    "quantize_per_channel": {"N": Whole(), "K": Whole(), "kind": OneOf(QUANT_KINDS, "normal")},
    "int8_gemm": {"M": Whole(), "N": Whole(), "K": Whole(hi=MAX_HIDDEN_K),
                  "kind": OneOf(GEMM_KINDS, "random")},
    "linear_w8a8": {"M": Whole(), "K": Whole(hi=MAX_HIDDEN_K), "N": Whole(),
                    "kind": OneOf(LINEAR_KINDS, "gaussian")},
}
VISIBLE_SEED = 20261206
MAX_CASE_BYTES = 96 << 20


def _quant_data(N: int, K: int, kind: str, rng) -> np.ndarray:
    """W (N, K) float32 for a quantize_per_channel case of ``kind``."""
    W = rng.standard_normal((N, K)).astype(np.float32)
    if kind == "decades":       # row magnitudes from 1e-6 to 1e6
        W *= (10.0 ** rng.uniform(-6, 6, size=(N, 1))).astype(np.float32)
    elif kind == "ties":        # every value on a half step of a power-of-two scale
        s = (2.0 ** rng.integers(-8, 4, size=(N, 1))).astype(np.float32)
        j = rng.integers(-127, 127, size=(N, K)) + 0.5
        W = (j * s).astype(np.float32)
        W[:, 0] = (QMAX * s[:, 0]).astype(np.float32)  # the max: S = s exactly
    elif kind == "near_ties":   # float32 x / S lands exactly on a half step, the exact quotient
        # does not: one float32 division rounds to the tie (then half to even), float64
        # division or x * (1 / S) land beside it and round the other way for about half
        amax = (10.0 ** rng.uniform(-2, 2, size=N)).astype(np.float32)
        S = amax / np.float32(QMAX)
        W = (rng.uniform(-126, 126, size=(N, K)) * S[:, None]).astype(np.float32)  # filler
        for n in range(N):
            k = rng.integers(-126, 126, size=4 * K)
            x0 = ((k + 0.5) * float(S[n])).astype(np.float32)
            cand = [x0]
            up, down = x0, x0
            for _ in range(3):  # the 3 float32 neighbours on each side
                up = np.nextafter(up, np.float32(np.inf))
                down = np.nextafter(down, np.float32(-np.inf))
                cand += [up, down]
            x = np.concatenate(cand)
            kk = np.tile(k, 7) + 0.5
            hit = (x / S[n] == kk) & (x.astype(np.float64) / float(S[n]) != kk)
            picked = x[hit][:K - 1]
            W[n, 1:1 + len(picked)] = picked
            W[n, 0] = amax[n]
    elif kind == "subnormal":   # rows of subnormal magnitude: S = max / 127 rounds to one ulp
        # of the subnormal range, far below max / 127, so |x / S| reaches up to max / 2^-149 >
        # 127: the only inputs where the clamp acts under max-based scales (the IEEE default,
        # no flush to zero, in numpy and in Numba's CPU code)
        tiny = np.float32(2.0 ** -149)
        k = rng.integers(150, 191, size=N)                 # max |w| = k ulps, S = 1 ulp
        j = rng.integers(-10**6, 10**6, size=(N, K)) % (2 * k[:, None] + 1) - k[:, None]
        W = (j.astype(np.float32) * tiny).astype(np.float32)
        W[:, 0] = (k.astype(np.float32) * tiny).astype(np.float32)
    elif kind == "zero_row":
        W[N // 2] = 0.0
    elif kind == "negative_max":
        W = np.abs(W)
        W[np.arange(N), rng.integers(0, K, N)] = -4.0 * W.max(axis=1)
    elif kind == "tiny":
        W *= np.float32(1e-30)
    elif kind == "huge":
        W *= np.float32(1e30)
    return W


def _gemm_data(M: int, N: int, K: int, kind: str, rng) -> tuple[np.ndarray, np.ndarray]:
    if kind == "float32_inexact":  # |values| 120..128, A[:, k] and B[k, :] of one sign: every
        # product positive, every C[m, n] about 15000 K
        sign = rng.choice(np.array([-1, 1]), size=K)
        A = np.where(sign[None, :] > 0, rng.integers(120, 128, (M, K)),
                     -rng.integers(120, 129, (M, K))).astype(np.int8)
        B = np.where(sign[:, None] > 0, rng.integers(120, 128, (K, N)),
                     -rng.integers(120, 129, (K, N))).astype(np.int8)
        return A, B
    if kind == "float32_chunks":  # A[:, k] = B[k, :] = +-127, one sign per k: every product
        # 127 * 127 = 16129, odd, so any float32 running sum of 1041 or more of them passes 2^24
        # at an odd value and rounds: float32 accumulated in chunks longer than 1040 k (exact
        # only while a chunk stays within 2^24) fails; chunks of <= 1024 k are exact for any
        # int8 data. K odd: C = 16129 K is odd and above 2^24, so no float32 value either.
        sign = rng.choice(np.array([-1, 1]), size=K)
        return (np.broadcast_to(127 * sign[None, :], (M, K)).astype(np.int8),
                np.broadcast_to(127 * sign[:, None], (K, N)).astype(np.int8))
    if kind == "min":
        return np.full((M, K), -128, np.int8), np.full((K, N), -128, np.int8)
    if kind == "extremes":
        A = rng.choice(np.array([-128, 127], np.int8), size=(M, K))
        B = rng.choice(np.array([-128, 127], np.int8), size=(K, N))
        return A, B
    return (rng.integers(-128, 128, size=(M, K), dtype=np.int8),
            rng.integers(-128, 128, size=(K, N), dtype=np.int8))


def _linear_data(M: int, K: int, N: int, kind: str, rng):
    X = (_quant_data(M, K, "near_ties", rng) if kind == "near_ties"
         else rng.standard_normal((M, K)).astype(np.float32))
    if kind == "outlier":
        X[:, int(rng.integers(0, K))] *= np.float32(OUTLIER_FACTOR)
    if kind == "zero_token":
        X[M // 2] = 0.0
    W = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(N)).astype(np.float32)
    Wq, w_scales = quantize_per_channel_golden(W)
    return X, Wq, w_scales, bias


class Int8Linear(LabSpec):
    lab_id = "int8-linear"
    title = "INT8 W8A8 linear layer: quantisation, exact int8 GEMM, dequantisation (CPU, Numba)"
    notebook = "06_int8_linear.ipynb"
    tier = "cpu"
    functions = {"quantize_per_channel": ("W",),
                 "int8_gemm": ("Aq", "Bq", "C"),
                 "linear_w8a8": ("X", "Wq", "w_scales", "bias", "Y")}
    perf_functions = ("int8_gemm",)  # the speed rules time int8_gemm alone
    allowed_imports = frozenset({"numpy", "numba", "math"})
    banned_names = frozenset({"int8_gemm_naive", "int_gemm_golden", "linear_golden",
                              "quantize_per_channel_golden", "quantize_per_token_golden",
                              "dequantize_linear_golden", "quantize_symmetric"})
    codegen = "default"

    # ------------------------------------------------------------------ cases
    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for n, k, kind in QUANT_CASES:
            name = f"quantize {n}x{k} {kind}"
            out.append(Case(name, {"fn": "quantize_per_channel", "N": n, "K": k, "kind": kind},
                            case_seed(VISIBLE_SEED, name)))
            if name in REPEATED:
                out.append(repeat_case(out[-1], REPEATED[name]))
        for m, n, k, kind in GEMM_CASES:
            name = f"gemm {m}x{n}x{k} {kind}"
            out.append(Case(name, {"fn": "int8_gemm", "M": m, "N": n, "K": k, "kind": kind},
                            case_seed(VISIBLE_SEED, name)))
            if name in REPEATED:
                out.append(repeat_case(out[-1], REPEATED[name]))
        for m, k, n, kind in LINEAR_CASES:
            name = f"linear {m}x{k}->{n} {kind}"
            out.append(Case(name, {"fn": "linear_w8a8", "M": m, "K": k, "N": n, "kind": kind},
                            case_seed(VISIBLE_SEED, name)))
            if name in REPEATED:
                out.append(repeat_case(out[-1], REPEATED[name]))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            out.append(Case(f"hidden{i} {self._label(p)}", p,
                            case_seed(hidden.seed or 0, f"hidden{i}"), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(6):
                r = lambda a, b: int(rng.integers(a, b))  # noqa: E731
                if i % 3 == 0:
                    p = {"fn": "quantize_per_channel", "N": r(1, 200), "K": r(1, 600),
                         "kind": ("normal", "decades", "ties")[r(0, 3)]}
                elif i % 3 == 1:
                    p = {"fn": "int8_gemm", "M": r(1, 80), "N": r(1, 80), "K": r(1, 5000),
                         "kind": ("random", "extremes", "float32_inexact")[r(0, 3)]}
                else:
                    p = {"fn": "linear_w8a8", "M": r(1, 80), "K": r(1, 700), "N": r(1, 80),
                         "kind": ("gaussian_small", "near_ties")[r(0, 2)]}
                out.append(Case(f"hidden{i} {self._label(p)}", p,
                                case_seed(hidden.seed, f"hidden{i}"), hidden=True))
        return out

    @staticmethod
    def _label(p: dict) -> str:
        if p["fn"] == "quantize_per_channel":
            return f"quantize {p['N']}x{p['K']} {p['kind']}"
        if p["fn"] == "int8_gemm":
            return f"gemm {p['M']}x{p['N']}x{p['K']} {p['kind']}"
        return f"linear {p['M']}x{p['K']}->{p['N']} {p['kind']}"

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the arrays'
        size cap. Raises ValueError in plain words."""
        q = parse_hidden_case(i, p, {}, by="fn", variants=HIDDEN_PARAMS)
        fn = q["fn"]
        if fn == "quantize_per_channel":
            nbytes = 5 * q["N"] * q["K"]
        elif fn == "int8_gemm":
            nbytes = q["M"] * q["K"] + q["K"] * q["N"] + 4 * q["M"] * q["N"]
        else:
            nbytes = 4 * q["M"] * q["K"] + 5 * q["N"] * q["K"] + 4 * q["M"] * q["N"]
        if nbytes > MAX_CASE_BYTES:
            raise hidden_case_error(i, f"the arrays must fit in {MAX_CASE_BYTES >> 20} MiB "
                                       f"(these need {nbytes / 2**20:.0f} MiB)")
        return q

    def case_data(self, case: Case) -> CaseData:
        return change_inputs(case, self._case_data(case))

    @staticmethod
    def _case_data(case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        if p["fn"] == "quantize_per_channel":
            W = _quant_data(p["N"], p["K"], p["kind"], rng)
            return CaseData(inputs={"W": W},
                            outputs={"Wq": ((p["N"], p["K"]), "int8"),
                                     "scales": ((p["N"],), "float32")},
                            call=["W"], returns=["Wq", "scales"])
        if p["fn"] == "int8_gemm":
            A, B = _gemm_data(p["M"], p["N"], p["K"], p["kind"], rng)
            return CaseData(inputs={"Aq": A, "Bq": B},
                            outputs={"C": ((p["M"], p["N"]), "int32")}, call=["Aq", "Bq", "C"])
        X, Wq, w_scales, bias = _linear_data(p["M"], p["K"], p["N"], p["kind"], rng)
        return CaseData(inputs={"X": X, "Wq": Wq, "w_scales": w_scales, "bias": bias},
                        outputs={"Y": ((p["M"], p["N"]), "float32")},
                        call=["X", "Wq", "w_scales", "bias", "Y"])

    def warmup_data(self):
        out = []
        for fn, p in (("quantize_per_channel", {"N": 3, "K": 5, "kind": "normal"}),
                      ("int8_gemm", {"M": 3, "N": 4, "K": 5, "kind": "random"}),
                      ("linear_w8a8", {"M": 3, "K": 5, "N": 4, "kind": "gaussian_small"})):
            out.append((fn, self.case_data(Case(f"warmup {fn}", {"fn": fn, **p}, seed=1))))
        return out

    # ------------------------------------------------------------------ checks
    def check(self, case: Case, data: CaseData, outputs: dict):
        return stale_note(self, case, data, outputs, self._check(case, data, outputs))

    @staticmethod
    def _check(case: Case, data: CaseData, outputs: dict):
        fn = case.params["fn"]
        if fn == "quantize_per_channel":
            return _check_quantize(data.inputs["W"], outputs["Wq"], outputs["scales"])
        if fn == "int8_gemm":
            A, B = data.inputs["Aq"], data.inputs["Bq"]
            cmp = compare(outputs["C"], int_gemm_golden(A, B), Exact(), tile=(32, 32))
            if not cmp.ok:
                cmp.message += "; " + _gemm_hint(A, B, outputs["C"])
            return cmp
        return _check_linear(data.inputs, outputs["Y"], case.params["kind"])

    # ------------------------------------------------------------------ performance
    def perf_plan(self) -> dict:
        return {"n": PERF_N, "rounds": PERF_ROUNDS, "threads": PERF_THREADS}

    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        """Worker side: int8_gemm vs the naive integer loop, interleaved, one thread, fresh
        inputs for every call; each of the submission's C checked exactly right after it
        returns (Freivalds, outside the timer); the last one saved for the grader."""
        from kernellab import machine, threads, timing
        import numba

        from reference_kernels.quant import int8_gemm_naive

        naive = numba.njit(cache=True)(int8_gemm_naive)
        fn = namespace["int8_gemm"]
        n = int(plan["n"])
        rng = np.random.default_rng()
        check_rng = np.random.default_rng()
        fill = np.iinfo(np.int32).min
        calls = TimedCalls(("Aq", "Bq"), ("C",),
                           is_correct=lambda ab, c: exact_freivalds(*ab, c[0], check_rng),
                           is_unwritten=lambda c: bool((c[0] == fill).any()))
        fresh = calls.setup(
            lambda: (rng.integers(-128, 128, size=(n, n), dtype=np.int8),
                     rng.integers(-128, 128, size=(n, n), dtype=np.int8)),
            lambda: (np.full((n, n), fill, np.int32),))

        small = fresh()
        naive(small[0][:2], small[1], small[2][:2])  # compile outside the timed rounds
        threads_ = int(plan["threads"])
        rounds = int(plan["rounds"])
        g = timing.interleaved({"submission": fn, "naive": naive}, baseline="submission",
                               setup=fresh, warmup=1, rounds=rounds, threads_=threads_,
                               after=calls.after)
        t = {k: v.times for k, v in g.timings.items()}
        ops = 2.0 * n ** 3
        info = machine.cpu_info()
        return {
            "speedup_naive": [a / b for a, b in zip(t["naive"], t["submission"])],
            "gops": [ops / x / 1e9 for x in t["submission"]],
            "gops_naive": [ops / x / 1e9 for x in t["naive"]],
            "peak_gflops": info.peak_flops(np.float32, cores=min(info.cores, threads_)) / 1e9,
            "peak_formula": info.formula(np.float32, cores=min(info.cores, threads_)),
            "setup": {"description": f"int8 x int8 -> int32, M=N=K={n}, {threads_} thread"
                                     f"{'s' if threads_ != 1 else ''}, {rounds} interleaved "
                                     "rounds, fresh inputs per call",
                      "threads_note": threads.status()["note"],
                      "timings": g.to_dict()["timings"]},
            "recheck": calls.save(workdir, {"fn": "int8_gemm", "M": n, "N": n, "K": n,
                                            "kind": "random"}),
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        n = int(plan["n"])
        if recheck.get("params") != {"fn": "int8_gemm", "M": n, "N": n, "K": n,
                                     "kind": "random"}:
            return (f"the timed calls were not the planned {n}^3 int8 GEMM "
                    f"({recheck.get('params')!r}): was the grading process tampered with?")
        for name, dt in (("Aq", np.int8), ("Bq", np.int8), ("C", np.int32)):
            a = arrays.get(name)
            if a is None or a.shape != (n, n) or a.dtype != dt:
                got = "missing" if a is None else f"{a.shape} {a.dtype}"
                return (f"the last timed call's {name} is {got}, not ({n}, {n}) "
                        f"{np.dtype(dt).name}: was the grading process tampered with?")
        return None

    def perf_rules(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        from kernellab import machine

        limit = machine.speed_limit(np.float32, cores=PERF_THREADS,
                                    factor=INT8_OPS_PER_FP32_FLOP, unit="GOP/s")
        plausible = limit.gflops
        return [
            RuleResult("int8_gemm: speedup over the naive integer loop", med(m["speedup_naive"]),
                       MIN_SPEEDUP_NAIVE, ">=", "x",
                       med(m["speedup_naive"]) >= MIN_SPEEDUP_NAIVE,
                       f"M=N=K={PERF_N}, one thread: naive {med(m['gops_naive']):.2f} GOP/s, "
                       f"yours {med(m['gops']):.1f} GOP/s", rng(m["speedup_naive"])),
            RuleResult("fastest timed call is plausible", max(m["gops"]), plausible, "<=",
                       " GOP/s", max(m["gops"]) <= plausible,
                       f"limit = {limit.text} (int8 operations): AVX-512 VNNI's int8 rate is "
                       f"{INT8_OPS_PER_FP32_FLOP}x the fp32 one; nominal fp32 peak "
                       f"{m['peak_formula']} (not used); faster means the timer was cheated "
                       "(cached results, work outside the call)",
                       rng(m["gops"]), scored=False),
        ]


def exact_freivalds(A: np.ndarray, B: np.ndarray, C: np.ndarray, rng, rounds: int = 2) -> bool:
    """C == A @ B exactly? Two random +-1 vectors x: C x == A (B x) in int64 (exact, O(n^2)); a
    wrong C passes with probability at most 2^-rounds per wrong row, in practice never."""
    if C.shape != (A.shape[0], B.shape[1]) or C.dtype.kind not in "iu":
        return False
    A64, B64, C64 = A.astype(np.int64), B.astype(np.int64), C.astype(np.int64)
    for _ in range(rounds):
        x = rng.choice(np.array([-1, 1], np.int64), size=B.shape[1])
        if not np.array_equal(C64 @ x, A64 @ (B64 @ x)):
            return False
    return True


def _bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).view(np.uint32) == b.astype(np.float32).view(np.uint32)


def _check_quantize(W: np.ndarray, Wq: np.ndarray, scales: np.ndarray) -> Comparison:
    ref_q, ref_s = quantize_per_channel_golden(W)
    cmp = compare(Wq, ref_q, Exact(), tile=(32, 32))
    same_s = _bits_equal(scales, ref_s)
    if not same_s.all():
        n = int(np.argmin(same_s))
        cmp.ok = False
        msg = (f"{int((~same_s).sum())} of {len(ref_s)} scales differ; scales[{n}] = "
               f"{float(scales[n]):.9g}, expected {float(ref_s[n]):.9g} "
               f"(S = max|W[n, :]| / 127 in float32; 1 for an all-zero row)")
        cmp.message = msg if cmp.mismatches == 0 else f"{cmp.message}; {msg}"
    if not cmp.ok:
        hint = _quantize_hint(W, Wq, scales, ref_q, ref_s)
        if hint:
            cmp.message += "; " + hint
    return cmp


def _quantize_hint(W, Wq, scales, ref_q, ref_s) -> str:
    with np.errstate(all="ignore"):  # the alternatives overflow on subnormal rows (1 / S = inf)
        return _quantize_hint_quiet(W, Wq, scales, ref_q, ref_s)


def _quantize_hint_quiet(W, Wq, scales, ref_q, ref_s) -> str:
    if len(scales) > 1 and np.all(scales == scales[0]) and not np.all(ref_s == ref_s[0]):
        Wd = Wq.astype(np.float64) * float(scales[0])
        Wr = ref_q.astype(np.float64) * ref_s.astype(np.float64)[:, None]
        worst = min(sqnr_db(W[n], Wd[n]) for n in range(len(W)))
        best = min(sqnr_db(W[n], Wr[n]) for n in range(len(W)))
        zeros = int(sum(1 for n in range(len(W)) if not Wq[n].any() and ref_q[n].any()))
        return (f"one scale for the whole weight: the worst row's SQNR is {worst:.1f} dB "
                f"against {best:.1f} dB with one scale per output channel"
                + (f"; {zeros} row(s) quantised to all zeros" if zeros else ""))
    bad = Wq.astype(np.int64) != ref_q.astype(np.int64)
    if bad.any() and _bits_equal(scales, ref_s).all():
        W32, S32 = W.astype(np.float32), ref_s[:, None]
        ratio = W32 / S32
        tie = np.abs(ratio - np.trunc(ratio)) == 0.5
        for why, q in _other_roundings(W32, ref_s):
            if np.array_equal(Wq, q):
                return why
        away = np.trunc(ratio + np.copysign(np.float32(0.5), ratio))
        if tie[bad].all() and np.array_equal(Wq[bad], np.clip(away, -QMAX, QMAX)[bad]):
            return ("every wrong element is an exact tie (x / S = k + 1/2): round half to "
                    "even (np.rint), not half away from zero")
        if (np.abs(ref_q[bad]) == QMAX).all():
            return "the wrong elements are at +-127: clamp to [-127, 127]"
    return ""


_FLOAT64_DIVISION = ("x / S was computed in float64 (in Numba, amax / 127.0 or a float64 "
                     "literal makes it so): the rule is one float32 division")
_RECIPROCAL = "x * (1 / S) rounds differently from x / S: divide, in float32"


def _other_roundings(X32: np.ndarray, S: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The usual wrong quantisations of the rows of X32 (float32) under the reference scales
    S (one per row), as int8 arrays, each with what it did wrong: x / S in float64 (with S in
    float32, and with S = amax / 127 in float64), and x * (1 / S) in float32."""
    S32 = S.astype(np.float32)[:, None]
    with np.errstate(all="ignore"):  # 1 / S overflows on subnormal rows
        amax64 = np.abs(X32.astype(np.float64)).max(axis=1, keepdims=True)
        S64 = np.where(amax64 > 0, amax64 / QMAX, 1.0)
        qs = [(_FLOAT64_DIVISION, X32.astype(np.float64) / S32.astype(np.float64)),
              (_FLOAT64_DIVISION, X32.astype(np.float64) / S64),
              (_RECIPROCAL, X32 * (np.float32(1) / S32))]
        return [(why, np.clip(np.rint(np.nan_to_num(q)), -QMAX, QMAX).astype(np.int8))
                for why, q in qs]


def _gemm_hint(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> str:
    if (C == 0).all():
        return "C is all zeros"
    if (C == np.iinfo(np.int32).min).any():
        return "some of C was never written (it still holds the fill value -2^31)"
    diff = C.astype(np.int64) - int_gemm_golden(A, B)
    for bits in (16, 8):  # wrapping arithmetic is exact modulo 2^bits
        if np.all(diff % (1 << bits) == 0):
            return (f"every wrong element is off by a multiple of 2^{bits}: the sum wrapped in "
                    f"int{bits}; accumulate in int32 (widen each int8 before the multiply)")
    ref = int_gemm_golden(A, B)
    bad = C.astype(np.int64) != ref
    if (np.abs(ref[bad]) > 2 ** 24).all() and (
            C[bad].astype(np.float32).astype(np.int64) == C[bad]).all():
        return ("every wrong element is a sum beyond 2^24 that came out a float32 value: "
                "float32 holds integers exactly only up to 2^24; accumulate in int32")
    if (np.abs(ref[bad]) > 2 ** 24).all() and (
            np.abs(diff[bad]) <= np.abs(ref[bad]) * 2.0 ** -20).all():
        return ("every wrong element is a sum beyond 2^24, off by a few units: a float32 "
                "partial sum passed 2^24 and rounded (float32 holds integers exactly only up to "
                "2^24): accumulate in int32, or in float32 over at most 1024 products (each "
                "|a b| <= 2^14)")
    return "compare with A @ B computed in int64"


def _check_linear(inp: dict, Y: np.ndarray, kind: str) -> Comparison:
    X, Wq, sw, bias = inp["X"], inp["Wq"], inp["w_scales"], inp["bias"]
    Xq, sx = quantize_per_token_golden(X)
    acc = int_gemm_golden(Xq, Wq.T).astype(np.float64)
    scale = sx.astype(np.float64)[:, None] * sw.astype(np.float64)[None, :]
    ref = acc * scale + bias.astype(np.float64)[None, :]
    u = unit_roundoff("float32")
    bound = DEQUANT_ROUNDINGS * u * (np.abs(acc) * scale + np.abs(bias.astype(np.float64)))
    cmp = compare(Y, ref, Explicit(bound, f"{DEQUANT_ROUNDINGS} u32 (|acc| s_x s_w + |bias|): "
                                          "the float32 dequantisation's roundings"),
                  tile=(32, 32))
    layer = linear_golden(X, Wq.astype(np.float64) * sw.astype(np.float64)[:, None], bias)
    sq = sqnr_db(layer, Y) if np.isfinite(Y).all() else float("-inf")
    notes = []
    if kind in SQNR_KINDS and Y.size >= SQNR_MIN_OUTPUTS:
        pred = predicted_sqnr_db(X)
        need = pred - SQNR_MARGIN_DB
        if not sq >= need:
            if cmp.ok:
                cmp.message = ""
            cmp.ok = False
            notes.append(f"SQNR {sq:.1f} dB against the float64 layer < {need:.1f} dB (per-token "
                         f"quantisation of this X predicts {pred:.1f} dB, less {SQNR_MARGIN_DB:g})")
        else:
            cmp.message += f"; SQNR {sq:.1f} dB (>= {need:.1f}, predicted {pred:.1f})"
    if not cmp.ok:
        notes.append(_linear_hint(X, Wq, sw, bias, Y, acc, scale))
    notes = [n for n in notes if n]
    if notes:
        cmp.message = "; ".join(([cmp.message] if cmp.message else []) + notes)
    return cmp


def _linear_hint(X, Wq, sw, bias, Y, acc, scale) -> str:
    Y64 = Y.astype(np.float64)
    if not np.isfinite(Y64).all():
        return ""
    b = bias.astype(np.float64)[None, :]
    W64 = Wq.astype(np.float64) * sw.astype(np.float64)[:, None]
    unquantised = X.astype(np.float64) @ W64.T + b
    if np.allclose(Y64, unquantised, rtol=1e-5, atol=1e-6 * np.abs(unquantised).max()):
        return ("Y matches the layer with X not quantised: quantise X per token (the rule of "
                "quantize_per_channel, applied to the rows of X) before the int8 GEMM")
    _, sx_ref = quantize_per_token_golden(X)
    for why, Xq in _other_roundings(X.astype(np.float32), sx_ref):
        acc_o = int_gemm_golden(Xq, Wq.T).astype(np.float64)
        Y_o = acc_o * scale + b
        bound = DEQUANT_ROUNDINGS * unit_roundoff("float32") * (np.abs(acc_o) * scale
                                                                 + np.abs(b))
        if not np.array_equal(acc_o, acc) and (np.abs(Y64 - Y_o) <= bound).all():
            return f"quantising X (per token): {why}"
    amax_rows = np.abs(X).max(axis=1)
    if np.all(amax_rows == amax_rows[0]):
        return ""  # per-token and per-tensor scales coincide (one row, or equal row maxima)
    # one scale for all of X (per-tensor)
    st = symmetric_scale(np.abs(X).max())
    Xt = quantize_symmetric(X, st).astype(np.float64)
    per_tensor = (Xt @ Wq.T.astype(np.float64)) * float(st) * sw.astype(np.float64)[None, :] + b
    if np.allclose(Y64, per_tensor, rtol=1e-5, atol=1e-6 * np.abs(per_tensor).max()):
        return "X was quantised with one scale for all tokens: use one scale per row (token)"
    mask = np.abs(acc * scale) > 1e-3 * np.abs(acc * scale).max()
    if mask.any():
        r = (Y64 - b)[mask] / (acc * scale)[mask]
        med = float(np.median(r))
        if np.allclose(r, med, rtol=1e-3) and abs(med - 1) > 1e-3:
            return (f"Y - bias is {med:.4g} x acc s_x[m] s_w[n]: check the dequantisation "
                    "scale (the product of the token's scale and the channel's)")
    return ""
