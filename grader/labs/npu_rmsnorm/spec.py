"""Lab 7c ``npu-rmsnorm`` (grader side): RMSNorm on every vector core of the simulated
Ascend-style NPU (:mod:`kernellab.npu`), in float16 or BF16 with float32 statistics, rows longer
than the Unified Buffer included. The reasoning behind every case and threshold:
``README.md`` beside this module.

Contract: ``rms_norm(x, gamma, y, eps)`` writes ``y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) +
eps) * gamma``; x and y (M, N) C-contiguous, gamma (N,), all float16 or all BF16
(``ml_dtypes.bfloat16``) NumPy arrays, M, N >= 1; eps a float; y arrives filled with NaN; the
function reads the core count and the UB size from ``npu.platform_info()`` and launches its
AIV kernel with ``npu.launch`` (the grader reads the launches, not what it returns).

* Correctness: against the float64 RMSNorm of the same rounded inputs within :func:`tolerance`
  (derived from the operator's rounding steps), and every call's launches pass
  :func:`grader.labs._npu.device_problem`.
* Rules (``npu`` tier, modelled cycles on a ``PERF_M`` x ``PERF_N`` float16 matrix): one core's
  speedup over :mod:`.baseline` >= ``MIN_SPEEDUP_ONE_CORE``; all cores' share of the HBM roof
  >= ``MIN_HBM_ROOF_PCT``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, SIMULATOR_INTERNALS, NPULab, last_launch, modelled
from grader.labs._npu import total_cycles
from grader.labs.npu_rmsnorm.baseline import BASELINE_TILE, baseline_cycles
from grader.rules import Rule
from grader.spec import CaseData, OneOf, RuleResult, Whole
from kernellab.numerics import Explicit, compare, finfo, named_dtype, unit_roundoff

VISIBLE_SEED = 20261206
DTYPES = ("float16", "bfloat16")
KINDS = ("normal", "large", "tiny", "zero_rows")
#: the scale of x per kind: "large" squares past float16's range (300^2 = 9e4 > 65504), "tiny"
#: squares below its smallest normal (1e-3^2 = 1e-6 < 6.1e-5)
SCALE = {"normal": 1.0, "large": 300.0, "tiny": 1e-3, "zero_rows": 1.0}
EPS = ("1e-06", "1e-05", "0.01", "0.1")
#: (M, N, dtype, kind, eps) of the visible cases: one element; odd row lengths off by one from
#: the 32 B copy unit and the 64-lane float32 repeat (15, 17, 129, 769, 5125, 8191); more rows
#: than cores (49, 97); rows longer than the UB (100003 float16 = 200 KB, 131071 BF16); squares
#: past float16's range and below its normals; all-zero rows; eps values that move rstd
CASES = [
    (1, 1, "float16", "normal", "1e-06"),
    (3, 15, "float16", "normal", "1e-06"),
    (2, 17, "bfloat16", "normal", "1e-05"),
    (4, 64, "float16", "normal", "0.1"),
    (5, 129, "bfloat16", "normal", "1e-06"),
    (3, 769, "float16", "large", "1e-06"),
    (2, 1000, "float16", "tiny", "1e-06"),
    (49, 256, "float16", "normal", "1e-06"),
    (97, 33, "bfloat16", "zero_rows", "0.01"),
    (3, 5125, "bfloat16", "normal", "1e-06"),
    (2, 8191, "float16", "normal", "1e-05"),
    (50, 4096, "bfloat16", "large", "1e-06"),
    (2, 100003, "float16", "normal", "1e-06"),
    (1, 131071, "bfloat16", "tiny", "1e-05"),
]
MAX_HIDDEN_N = 262_144
MAX_HIDDEN_ELEMENTS = 2_000_000
#: the constant of the sqrt(N) growth of a float32 sum's error, as in the course's other norms
#: (:func:`kernellab.kernels.norms_cuda.rmsnorm_tolerance`, Higham & Mary 2019)
C_SUM = 6.0

PERF_M, PERF_N, PERF_EPS = 192, 4096, 1e-6
#: the reference's one-core speedup is 2.82x; a kernel that reads every row twice although it
#: fits in UB models at 2.43x. 2.6 sits between (the reference 8% above, the two-pass kernel 7%
#: below), not at the usual 0.8 x the reference, which would let the two-pass kernel through:
#: reading x once is what this rule teaches (README.md)
MIN_SPEEDUP_ONE_CORE = 2.6
#: 0.8 x the reference's 55.7%
MIN_HBM_ROOF_PCT = 44.0


def golden(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """The float64 RMSNorm of the rounded inputs, row by row."""
    x64 = np.asarray(x).astype(np.float64)
    ms = np.mean(x64 * x64, axis=1, keepdims=True)
    return x64 / np.sqrt(ms + float(eps)) * np.asarray(gamma).astype(np.float64)


def tolerance(x: np.ndarray, gamma: np.ndarray, eps: float, ref: np.ndarray) -> Explicit:
    """The element-wise bound ``|y - golden|``, from the operator's rounding steps in float32
    (unit roundoff u) and one rounding to the output dtype (u_o):

    * the sum of N squares: each square rounded (u), then a float32 sum of N non-negative terms,
      ``C_SUM sqrt(N) u`` relative (the probabilistic bound the course's norms use; any order of
      the adds, tiles and repeats alike); the mean (1/N and the multiply: 2u), + eps (eps's
      rounding and the add: 2u); the square root halves that, then the sqrt and the reciprocal
      add 2u: ``e_r = (C_SUM sqrt(N) + 5) u / 2 + 2u`` relative in rstd;
    * ``x rstd gamma``: two multiplies, 2u; x and gamma are exact in float32;
    * the output's rounding: half an ulp, at most ``u_o |y|`` for a normal result and half the
      smallest subnormal ``s`` below the normals, so ``u_o |y| + s / 2``; doubled as the
      course's margin (a correct kernel uses under half of the budget): ``2 u_o |y| + s``.
    """
    dt = np.asarray(x).dtype
    n = np.asarray(x).shape[1]
    u, u_o = unit_roundoff(np.float32), unit_roundoff(dt)
    e_r = (C_SUM * math.sqrt(n) + 5.0) * u / 2.0 + 2.0 * u
    rel = e_r + 2.0 * u + 2.0 * u_o
    floor = float(finfo(dt).smallest_subnormal)
    return Explicit(rel * np.abs(ref) + floor,
                    note=f"(({C_SUM:g} sqrt(N={n}) + 5) u/2 + 4u + 2u_o) |y| + the smallest "
                         f"{dt.name} subnormal; u = 2^-24, u_o of {dt.name}")


def _rows_scaled(got: np.ndarray, ref: np.ndarray) -> bool:
    """Whether ``got`` is ``ref`` times one factor per row, within a few roundings of the output
    dtype (8 u_o), and some factor off by more than that: the mark of a wrong rstd."""
    g64 = np.asarray(got, np.float64)
    tol = 8.0 * unit_roundoff(np.asarray(got).dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)         # rows of zeros: all NaN
        ratio = np.where(np.abs(ref) > 0, g64 / ref, np.nan)
        spread = np.nanmax(np.abs(ratio - np.nanmedian(ratio, axis=1, keepdims=True)), axis=1)
        return bool(np.nanmax(spread) < tol and np.nanmax(np.abs(ratio - 1)) > tol)


def case_inputs(rng, M: int, N: int, dtype: str, kind: str):
    """x (M, N) and gamma (N,) in ``dtype``: x standard normal times :data:`SCALE` (every third
    row zero for "zero_rows"), gamma 1 + 0.25 standard normal."""
    dt = named_dtype(dtype)
    x = rng.standard_normal((M, N)) * SCALE[kind]
    if kind == "zero_rows":
        x[::3] = 0.0
    gamma = 1.0 + 0.25 * rng.standard_normal(N)
    return x.astype(dt), gamma.astype(dt)


class NPURmsNorm(NPULab):
    lab_id = "npu-rmsnorm"
    title = "RMSNorm on the NPU's vector cores: float32 statistics, rows longer than UB"
    notebook = "07c_npu_rmsnorm.ipynb"
    functions = {"rms_norm": ("x", "gamma", "y", "eps")}
    banned_names = SIMULATOR_INTERNALS | frozenset({"baseline_kernel", "baseline_cycles"})
    output_name = "y"
    input_names = ("x", "gamma")

    params = {"M": Whole(hi=4096), "N": Whole(hi=MAX_HIDDEN_N), "dtype": OneOf(DTYPES),
              "kind": OneOf(KINDS, "normal"), "eps": OneOf(EPS, "1e-06")}
    visible_seed = VISIBLE_SEED
    random_count = 6
    rules = (
        Rule("one core: modelled speedup over the baseline", ">=", MIN_SPEEDUP_ONE_CORE, "x",
             ("npu",), "a row read once when it fits in UB, and big tiles"),
        Rule("all cores: share of the HBM roof", ">=", MIN_HBM_ROOF_PCT, "%", ("npu",),
             "every vector core busy, and little vector work per element"),
    )

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return [{"M": m, "N": n, "dtype": d, "kind": k, "eps": e} for m, n, d, k, e in CASES]

    def case_name(self, p: dict) -> str:
        kind = p.get("kind", "normal")
        return (f"{p['M']}x{p['N']} {p['dtype']} eps={float(p.get('eps', '1e-06')):g}"
                + ("" if kind == "normal" else f" {kind}"))

    def case_limits(self, p: dict) -> str | None:
        if p["M"] * p["N"] > MAX_HIDDEN_ELEMENTS:
            return f"M x N must be <= {MAX_HIDDEN_ELEMENTS:,}, not {p['M'] * p['N']:,}"
        return None

    def random_params(self, rng, i: int) -> dict:
        if i < 3:
            m, n = int(rng.integers(1, 64)), int(rng.integers(1, 6000))
        elif i < 5:
            m, n = int(rng.integers(1, 3)), int(rng.integers(98_305, 160_000))
        else:
            m, n = int(rng.integers(48, 200)), int(rng.integers(100, 2000))
        return {"M": m, "N": n, "dtype": DTYPES[i % 2], "kind": KINDS[i % len(KINDS)],
                "eps": EPS[i % len(EPS)]}

    def case_arrays(self, case) -> CaseData:
        p = case.params
        x, g = case_inputs(np.random.default_rng(case.seed), p["M"], p["N"], p["dtype"],
                           p.get("kind", "normal"))
        return CaseData(inputs={"x": x, "gamma": g},
                        outputs={"y": ((p["M"], p["N"]), p["dtype"])},
                        call=["x", "gamma", "y", "eps"],
                        scalars={"eps": float(p.get("eps", "1e-06"))})

    def warmup_data(self):
        from grader.spec import Case

        return [("rms_norm", self.case_data(Case("warmup", {"M": 2, "N": 5, "dtype": "float16",
                                                            "kind": "normal", "eps": "1e-06"},
                                                 seed=1)))]

    def compare(self, case, data: CaseData, outputs: dict):
        if "y1" in outputs:  # the re-check after timing: both timed runs at once
            got = np.concatenate([outputs["y"], outputs["y1"]])
            x = np.concatenate([data.inputs["x"], data.inputs["x1"]])
            ref = np.concatenate([golden(data.inputs["x"], data.inputs["gamma"], PERF_EPS),
                                  golden(data.inputs["x1"], data.inputs["gamma1"], PERF_EPS)])
            tol = tolerance(x, data.inputs["gamma"], PERF_EPS, ref)
        else:
            eps = float(data.scalars["eps"])
            ref = golden(data.inputs["x"], data.inputs["gamma"], eps)
            tol = tolerance(data.inputs["x"], data.inputs["gamma"], eps, ref)
            got = outputs["y"]
        cmp = compare(got, ref, tol, tile=None)
        if not cmp.ok and not cmp.nonfinite and cmp.mismatches and _rows_scaled(got, ref):
            cmp.message += ("; whole rows are off by one factor: the row's rstd is wrong "
                                "(the mean over N, not a padded length? eps added inside the "
                                "square root? the sum of squares in float32?)")
        return cmp

    def work(self, p: dict) -> tuple:
        return ("vector", int(p["M"]) * int(p["N"]), "multiplies of y = x rstd gamma")

    def arrays_of(self, p: dict) -> dict:
        m, n, d = int(p["M"]), int(p["N"]), p["dtype"]
        return {"x": ((m, n), d), "gamma": ((n,), d), "y": ((m, n), d)}

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"M": PERF_M, "N": PERF_N}

    def timed_params(self, plan: dict, tag: str) -> dict:
        return {"M": int(plan["M"]), "N": int(plan["N"]), "dtype": "float16"}

    def planned(self, plan: dict) -> dict:
        m, n = int(plan["M"]), int(plan["N"])
        return {"params": {"M": m, "N": n}, "arrays": self.run_arrays(plan),
                "what": f"{m}x{n} float16"}

    def rules_npu(self, m: dict) -> list[RuleResult]:
        M, N = int(m["M"]), int(m["N"])
        base = baseline_cycles(M, N)
        one, chip = m["runs"]["one_core"], m["runs"]["all_cores"]
        c1, cn = total_cycles(one), total_cycles(chip)
        l1, ln = last_launch(one), last_launch(chip)
        comp = 2 * M * N * 2 + N * 2

        def busy(li, pipe):
            return li.get("pipe_busy_pct", {}).get(pipe, 0.0)

        r_one, r_roof = self.rules
        return [
            modelled(r_one, base / c1 if c1 else 0.0,
                     f"{c1:,} cycles on one AIV ({ONE_CORE.key}) vs the baseline's {base:,} "
                     f"(1 AIV, tiles of {BASELINE_TILE}, one buffer, every row read twice); "
                     f"MTE2 busy {busy(l1, 'MTE2'):.0f}%, V {busy(l1, 'V'):.0f}%, bottleneck "
                     f"{l1.get('bottleneck', '-')}"),
            modelled(r_roof, 100.0 * comp / (cn * CARD.hbm_bytes_per_cycle) if cn else 0.0,
                     f"{comp:,} compulsory bytes (read x and gamma once, write y) in {cn:,} "
                     f"cycles = {comp / cn if cn else 0:,.1f} B/cycle of the HBM's "
                     f"{CARD.hbm_bytes_per_cycle:,.1f}; block_dim {ln.get('block_dim', '-')}, "
                     f"bottleneck {ln.get('bottleneck', '-')} on "
                     f"{ln.get('critical_core', '-')}, V busy {busy(ln, 'V'):.0f}%"),
        ]
