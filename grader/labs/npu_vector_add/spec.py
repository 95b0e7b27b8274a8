"""Lab 7a ``npu-vector-add`` (grader side): fp16 vector add on every vector core of the
simulated Ascend-style NPU (:mod:`kernellab.npu`), with host tiling, double buffering and the
tail. The reasoning behind every case and threshold: ``README.md`` beside this module.

Contract: ``vector_add(x, y, z)`` writes ``z = x + y``; x, y, z 1-D float16 NumPy arrays of
one length n >= 1; z arrives filled with NaN; the function reads the core count and the UB size
from ``npu.platform_info()`` and launches its AIV kernel with ``npu.launch`` (what it returns
is ignored: the grader reads the launches).

* Correctness: bit for bit the correctly rounded float16 sum (:data:`EXACT`), and every call's
  launches pass :func:`grader.labs._npu.device_problem`.
* Rules (``npu`` tier, modelled cycles on ``PERF_N`` elements, against :mod:`.baseline`): one
  core's speedup >= ``MIN_SPEEDUP_ONE_CORE``; all cores' speedup >= ``MIN_SPEEDUP_ALL_CORES``;
  all cores' share of the HBM roof >= ``MIN_HBM_ROOF_PCT``.
"""

from __future__ import annotations

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, SIMULATOR_INTERNALS, NPULab, last_launch, modelled
from grader.labs._npu import total_cycles
from grader.labs.npu_vector_add.baseline import BASELINE_TILE, baseline_cycles
from grader.rules import Rule
from grader.spec import Case, CaseData, OneOf, RuleResult, Whole, case_seed
from kernellab.numerics import Exact, compare

VISIBLE_SEED = 20260705
#: lengths of the visible cases
LENGTHS = [1, 2, 3, 15, 16, 17, 31, 33, 127, 129, 255, 257, 1000, 4097, 12287, 12289, 16127,
           16129, 65537, 100003, 262147, 1000003, 2000003]
#: the one case of special values (subnormals, signed zeros, cancellations, large values)
SPECIAL_N = 3001
MAX_HIDDEN_N = 4_000_000

PERF_N = 3_000_017
MIN_SPEEDUP_ONE_CORE = 3.7
MIN_SPEEDUP_ALL_CORES = 55.0
MIN_HBM_ROOF_PCT = 80.0


def golden(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The correctly rounded float16 sum, as float64 (the float64 sum of two float16 values is
    exact, then rounded once to float16; overflow gives +-inf and inf - inf NaN, as IEEE 754
    says, without a warning)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float64) + y.astype(np.float64)).astype(np.float16).astype(np.float64)


#: Every element bit for bit the reference's (a float16 add has one right answer, the sign of
#: a zero included: :class:`kernellab.numerics.Exact` compares the bits of float outputs).
EXACT = Exact(note="the correctly rounded float16 sum, bit for bit (the sign of zero too)")


def case_inputs(rng, n: int, kind: str = "normal"):
    """x, y (float16, n): ``normal`` 8 x standard normal; ``special`` a mix of subnormals,
    signed zeros, exact cancellations (y = -x), values up to +-3e4 and normal ones, and in
    its first 12 elements sums that overflow, infinities (inf - inf = NaN) and NaN."""
    if kind == "special":
        pick = rng.integers(0, 5, size=n)
        x = np.where(pick == 0, rng.uniform(-1, 1, n) * 6e-5,          # subnormal range
                     np.where(pick == 1, rng.uniform(-3e4, 3e4, n),
                              rng.standard_normal(n) * 8))
        x = x.astype(np.float16)
        y = (rng.standard_normal(n) * 8).astype(np.float16)
        y = np.where(pick == 2, -x, y)                                 # exact zeros
        y = np.where(pick == 3, np.float16(-0.0), y)                   # x + (-0)
        # signed zeros, subnormals, overflow to +-inf (a sum clamped to 65504 fails), infinities
        # and NaN: IEEE 754 float16 sums, compared by bits (NaN matches NaN)
        inf, nan = np.inf, np.nan
        xs = np.array([0.0, -0.0, 6e-8, -6e-8, 6e4, -6e4, 65504, inf, -inf, inf, nan, 1.0],
                      dtype=np.float16)
        ys = np.array([-0.0, -0.0, 6e-8, 6e-8, 6e4, -6e4, 32, 1.0, -1.0, -inf, 1.0, nan],
                      dtype=np.float16)
        k = min(n, len(xs))
        x[:k], y[:k] = xs[:k], ys[:k]
        return x, y.astype(np.float16)
    return ((rng.standard_normal(n) * 8).astype(np.float16),
            (rng.standard_normal(n) * 8).astype(np.float16))


class NPUVectorAdd(NPULab):
    lab_id = "npu-vector-add"
    title = "fp16 vector add on the NPU's vector cores: tiling, double buffering, multi-core"
    notebook = "07a_npu_vector_add.ipynb"
    functions = {"vector_add": ("x", "y", "z")}
    banned_names = SIMULATOR_INTERNALS | frozenset({"baseline_kernel", "baseline_cycles"})
    output_name = "z"
    input_names = ("x", "y")

    params = {"n": Whole(hi=MAX_HIDDEN_N), "kind": OneOf(("normal", "special"), "normal")}
    visible_seed = VISIBLE_SEED
    random_count = 6
    rules = (
        Rule("one core: modelled speedup over the baseline", ">=", MIN_SPEEDUP_ONE_CORE, "x",
             ("npu",), "tiles of 4096 or more and double buffering"),
        Rule("all cores: modelled speedup over the baseline", ">=", MIN_SPEEDUP_ALL_CORES, "x",
             ("npu",), "every vector core busy"),
        Rule("all cores: share of the HBM roof", ">=", MIN_HBM_ROOF_PCT, "%", ("npu",),
             "all of the above, with aligned blocks"),
    )

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return [{"n": n} for n in LENGTHS]

    def case_name(self, p: dict) -> str:
        return f"n={p['n']}" + (" special" if p.get("kind") == "special" else "")

    def cases(self, hidden):
        """The base cases, with the visible special-values case after the lengths (its name,
        and so its seed, says "special values" where a hidden one says "special")."""
        out = super().cases(hidden)
        name = f"n={SPECIAL_N} special values"
        out.insert(len(LENGTHS), Case(name, {"n": SPECIAL_N, "kind": "special"},
                                      case_seed(VISIBLE_SEED, name)))
        return out

    def random_params(self, rng, i: int) -> dict:
        n = int(rng.integers(1, 40_000)) if i < 4 else int(rng.integers(40_000, 2_000_000))
        return {"n": n, "kind": "special" if i == 5 else "normal"}

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        x, y = case_inputs(np.random.default_rng(case.seed), p["n"], p.get("kind", "normal"))
        return CaseData(inputs={"x": x, "y": y}, outputs={"z": ((p["n"],), "float16")},
                        call=["x", "y", "z"])

    def warmup_data(self):
        return [("vector_add", self.case_data(Case("warmup", {"n": 5}, seed=1)))]

    def compare(self, case: Case, data: CaseData, outputs: dict):
        if "z1" in outputs:  # the re-check after timing: both timed runs at once
            got = np.concatenate([outputs["z"], outputs["z1"]])
            ref = np.concatenate([golden(data.inputs["x"], data.inputs["y"]),
                                  golden(data.inputs["x1"], data.inputs["y1"])])
        else:
            got, ref = outputs["z"], golden(data.inputs["x"], data.inputs["y"])
        cmp = compare(got, ref, EXACT, tile=None)
        if not cmp.ok and cmp.signed_zeros and cmp.signed_zeros == cmp.mismatches:
            cmp.message += ("; IEEE 754 gives (-0) + (-0) = -0 and x + (-x) = +0: add x and "
                            "y once, directly (a sum built another way, e.g. accumulated "
                            "into a zeroed tile, turns -0 into +0)")
        elif not cmp.ok and not cmp.nonfinite and cmp.mismatches:
            cmp.message += ("; a float16 add has one right answer (the simulator rounds "
                            "float32 to float16 as numpy does): is every element added once, "
                            "from the right offsets?")
        return cmp

    def work(self, p: dict) -> tuple:
        return ("vector", int(p["n"]), "additions of z = x + y")

    def arrays_of(self, p: dict) -> dict:
        n = int(p["n"])
        return {"x": ((n,), "float16"), "y": ((n,), "float16"), "z": ((n,), "float16")}

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"n": PERF_N}

    def timed_params(self, plan: dict, tag: str) -> dict:
        return {"n": int(plan["n"])}

    def planned(self, plan: dict) -> dict:
        n = int(plan["n"])
        return {"params": {"n": n}, "arrays": self.run_arrays(plan), "what": f"n={n}"}

    def rules_npu(self, m: dict) -> list[RuleResult]:
        n = int(m["n"])
        base = baseline_cycles(n)
        one, chip = m["runs"]["one_core"], m["runs"]["all_cores"]
        c1, cn = total_cycles(one), total_cycles(chip)
        l1, ln = last_launch(one), last_launch(chip)
        core_roof = 100.0 * 4 * n / CARD.gm_read_miss_bpc / c1 if c1 else 0.0

        def busy(li, pipe):
            return li.get("pipe_busy_pct", {}).get(pipe, 0.0)

        r_one, r_all, r_roof = self.rules
        return [
            modelled(r_one, base / c1 if c1 else 0.0,
                     f"{c1:,} cycles on one AIV ({ONE_CORE.key}) vs the baseline's {base:,} "
                     f"(1 AIV, tiles of {BASELINE_TILE}, one buffer); {core_roof:.1f}% of one "
                     f"core's DMA roof ({CARD.gm_read_miss_bpc} B/cycle read); MTE2 busy "
                     f"{busy(l1, 'MTE2'):.0f}%, V {busy(l1, 'V'):.0f}%, bottleneck "
                     f"{l1.get('bottleneck', '-')}"),
            modelled(r_all, base / cn if cn else 0.0,
                     f"{cn:,} cycles ({cn / CARD.freq_mhz:,.1f} us) with block_dim "
                     f"{ln.get('block_dim', '-')} on {CARD.key}; bottleneck "
                     f"{ln.get('bottleneck', '-')} on {ln.get('critical_core', '-')}; trace "
                     f"{str(ln.get('trace_hash', ''))[:16]}"),
            modelled(r_roof, 100.0 * 6 * n / (cn * CARD.hbm_bytes_per_cycle) if cn else 0.0,
                     f"6n = {6 * n:,} compulsory bytes (read x, y; write z) in {cn:,} cycles "
                     f"= {6 * n / cn if cn else 0:,.1f} B/cycle of the HBM's "
                     f"{CARD.hbm_bytes_per_cycle:,.1f} (the model sustains at most "
                     f"{CARD.hbm_efficiency_pct}%)"),
        ]
