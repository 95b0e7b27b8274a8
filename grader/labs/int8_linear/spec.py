"""Lab 6 ``int8-linear``: a W8A8 linear layer — per-channel weight quantisation, an exact int8
GEMM and per-token activation quantisation (CPU, Numba), grader side.

The student writes three functions (the rounding rule of :mod:`reference_kernels.quant`:
``q = clip(rint(x / S), -127, 127)``, x / S a float32 division, rint half to even, S =
max|row| / 127 in float32 and S = 1 for an all-zero row):

* ``quantize_per_channel(W) -> (Wq, scales)``: W float32 (N, K) -> Wq int8 (N, K), scales
  float32 (N,); graded exactly (every Wq element and every scale bit);
* ``int8_gemm(Aq, Bq, C)``: Aq int8 (M, K), Bq int8 (K, N), C int32 (M, N) = Aq @ Bq, exact
  against an int64 product;
* ``linear_w8a8(X, Wq, w_scales, bias, Y)``: X float32 (M, K) quantised per token, Wq int8
  (N, K), w_scales float32 (N,), bias float32 (N,), Y float32 (M, N); the pipeline rule
  ``|Y - Y_q| <= DEQUANT_ROUNDINGS u32 (|acc| s_x s_w + |bias|)`` and, on layers of at least
  ``SQNR_MIN_OUTPUTS`` outputs, SQNR >= the uniform-noise prediction less ``SQNR_MARGIN_DB``;
* performance (``int8_gemm`` alone): speedup over the naive integer loop >=
  ``MIN_SPEEDUP_NAIVE`` at M = N = K = ``PERF_N``; the fastest call plausible: <=
  ``INT8_OPS_PER_FP32_FLOP`` x the measured fp32 FMA peak x
  :data:`kernellab.machine.PEAK_MARGIN` int8 operations per second (a gate; Intel SDM,
  VPDPBUSD).

The reasoning behind every rule, case kind and threshold: ``README.md`` beside this file. The
golden checks and their diagnoses: :mod:`grader.labs.int8_linear.checks`; the worker side:
:mod:`grader.labs.int8_linear.measure`.
"""

from __future__ import annotations

import numpy as np

from grader.rules import Rule, median
from grader.spec import Case, CaseData, LabSpec, OneOf, RuleResult, Whole
from grader.labs.int8_linear.checks import (SQNR_MARGIN_DB, SQNR_MIN_OUTPUTS,  # noqa: F401
                                            check_gemm, check_linear, check_quantize)
from reference_kernels.quant import OUTLIER_FACTOR, QMAX, quantize_per_channel_golden

PERF_N = 512
PERF_ROUNDS = 5
PERF_THREADS = 1
MIN_SPEEDUP_NAIVE = 6.0
INT8_OPS_PER_FP32_FLOP = 4  # VPDPBUSD: 4 int8 MACs per 32-bit lane vs 1 fp32 FMA (Intel SDM)

QUANT_CASES = [  # (N, K, kind)
    (1, 1, "normal"), (1, 7, "normal"), (3, 1, "normal"), (16, 64, "normal"),
    (64, 33, "decades"), (127, 255, "normal"), (5, 4097, "decades"), (8, 300, "ties"),
    (33, 65, "ties"), (16, 200, "near_ties"), (8, 64, "subnormal"), (4, 16, "zero_row"),
    (6, 50, "negative_max"), (9, 40, "tiny"), (9, 40, "huge"),
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

RULES = (
    Rule("int8_gemm: speedup over the naive integer loop", ">=", MIN_SPEEDUP_NAIVE, "x",
         why=f"median of per-round time ratios at M=N=K={PERF_N}, one thread"),
    Rule("fastest timed call is plausible", "max<=",
         f"PEAK_MARGIN x {INT8_OPS_PER_FP32_FLOP} x the measured one-core fp32 FMA peak",
         " GOP/s", why="a gate: no points, but failing it voids the speed points"),
)


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

    select_by = "fn"
    variants = HIDDEN_PARAMS
    visible_seed = VISIBLE_SEED
    repeated = REPEATED
    hidden_seed_by_index = True
    rules = RULES

    # ------------------------------------------------------------------ cases
    def visible_params(self) -> list[dict]:
        return ([{"fn": "quantize_per_channel", "N": n, "K": k, "kind": kind}
                 for n, k, kind in QUANT_CASES]
                + [{"fn": "int8_gemm", "M": m, "N": n, "K": k, "kind": kind}
                   for m, n, k, kind in GEMM_CASES]
                + [{"fn": "linear_w8a8", "M": m, "K": k, "N": n, "kind": kind}
                   for m, k, n, kind in LINEAR_CASES])

    def case_name(self, p: dict) -> str:
        if p["fn"] == "quantize_per_channel":
            return f"quantize {p['N']}x{p['K']} {p['kind']}"
        if p["fn"] == "int8_gemm":
            return f"gemm {p['M']}x{p['N']}x{p['K']} {p['kind']}"
        return f"linear {p['M']}x{p['K']}->{p['N']} {p['kind']}"

    def random_params(self, rng, i: int) -> dict:
        def r(a, b):
            return int(rng.integers(a, b))

        if i % 3 == 0:
            return {"fn": "quantize_per_channel", "N": r(1, 200), "K": r(1, 600),
                    "kind": ("normal", "decades", "ties")[r(0, 3)]}
        if i % 3 == 1:
            return {"fn": "int8_gemm", "M": r(1, 80), "N": r(1, 80), "K": r(1, 5000),
                    "kind": ("random", "extremes", "float32_inexact")[r(0, 3)]}
        return {"fn": "linear_w8a8", "M": r(1, 80), "K": r(1, 700), "N": r(1, 80),
                "kind": ("gaussian_small", "near_ties")[r(0, 2)]}

    def case_limits(self, q: dict) -> str | None:
        """Within the arrays' size cap."""
        fn = q["fn"]
        if fn == "quantize_per_channel":
            nbytes = 5 * q["N"] * q["K"]
        elif fn == "int8_gemm":
            nbytes = q["M"] * q["K"] + q["K"] * q["N"] + 4 * q["M"] * q["N"]
        else:
            nbytes = 4 * q["M"] * q["K"] + 5 * q["N"] * q["K"] + 4 * q["M"] * q["N"]
        if nbytes > MAX_CASE_BYTES:
            return (f"the arrays must fit in {MAX_CASE_BYTES >> 20} MiB "
                    f"(these need {nbytes / 2**20:.0f} MiB)")
        return None

    def case_arrays(self, case: Case) -> CaseData:
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
    def compare(self, case: Case, data: CaseData, outputs: dict):
        fn = case.params["fn"]
        if fn == "quantize_per_channel":
            return check_quantize(data.inputs["W"], outputs["Wq"], outputs["scales"])
        if fn == "int8_gemm":
            return check_gemm(data.inputs["Aq"], data.inputs["Bq"], outputs["C"])
        return check_linear(data.inputs, outputs["Y"], case.params["kind"])

    # ------------------------------------------------------------------ performance
    def perf_plan(self) -> dict:
        return {"n": PERF_N, "rounds": PERF_ROUNDS, "threads": PERF_THREADS}

    def planned(self, plan: dict) -> dict:
        n = int(plan["n"])
        return {"params": {"fn": "int8_gemm", "M": n, "N": n, "K": n, "kind": "random"},
                "what": f"{n}^3 int8 GEMM",
                "arrays": {"Aq": ((n, n), "int8"), "Bq": ((n, n), "int8"),
                           "C": ((n, n), "int32")}}

    def rules_cpu(self, m: dict) -> list[RuleResult]:
        from kernellab import machine

        limit = machine.speed_limit(np.float32, cores=PERF_THREADS,
                                    factor=INT8_OPS_PER_FP32_FLOP, unit="GOP/s")
        speed, plausible = RULES
        return [
            speed.judge(m["speedup_naive"],
                        f"M=N=K={PERF_N}, one thread: naive {median(m['gops_naive']):.2f} "
                        f"GOP/s, yours {median(m['gops']):.1f} GOP/s"),
            plausible.judge(m["gops"],
                            f"limit = {limit.text} (int8 operations): AVX-512 VNNI's int8 rate "
                            f"is {INT8_OPS_PER_FP32_FLOP}x the fp32 one; nominal fp32 peak "
                            f"{m['peak_formula']} (not used); faster means the timer was "
                            "cheated (cached results, work outside the call)",
                            threshold=limit.gflops),
        ]
