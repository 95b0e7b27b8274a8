"""Lab 7b ``npu-matmul`` (grader side): fp16 x fp16 -> fp32 matrix product on the cube units
of the simulated Ascend-style NPU (:mod:`kernellab.npu`): L1/L0 tiling, ping-pong buffers, one
core then all. The reasoning behind every case and threshold: ``README.md`` beside this
module.

Contract: ``matmul(A, B, C)`` writes ``C = A @ B``; A (M, K) and B (K, N) float16, C (M, N)
float32 NumPy arrays, any M, N, K >= 1; C arrives filled with NaN; the function reads core
counts and buffer sizes from ``npu.platform_info()`` and launches its AIC kernel with
``npu.launch`` (what it returns is ignored: the grader reads the launches).

* Correctness: within the K-aware bound with float32 accumulation
  (:class:`kernellab.numerics.KAware`) of the float64 product
  (:func:`reference_kernels.gemm.gemm_golden`), and every call's launches pass
  :func:`grader.labs._npu.device_problem` (2MNK cube FLOPs at least).
* Rules (``npu`` tier, modelled cycles): at ``PERF_ONE_CORE`` on one AIC, the speedup over the
  naive tiling (:mod:`.baseline`) >= ``MIN_SPEEDUP_ONE_CORE`` and the cube utilisation >=
  ``MIN_CUBE_UTIL_ONE_CORE``; at ``PERF_ALL_CORES`` the chip's cube utilisation >=
  ``MIN_CUBE_UTIL_ALL_CORES``.
"""

from __future__ import annotations

import numpy as np

from grader.labs._npu import CARD, ONE_CORE, SIMULATOR_INTERNALS, NPULab, last_launch, modelled
from grader.labs._npu import total_cycles
from grader.labs.npu_matmul.baseline import NAIVE_BLOCK, baseline_cycles
from grader.rules import Rule
from grader.spec import Case, CaseData, RuleResult, Whole
from kernellab.numerics import KAware, compare
from reference_kernels.gemm import gemm_abs_product, gemm_golden

VISIBLE_SEED = 20260706
#: (M, N, K) of the visible cases
SHAPES = [
    (1, 1, 1), (2, 3, 5), (16, 16, 16), (15, 17, 31), (17, 15, 33), (1, 257, 3), (257, 2, 31),
    (31, 33, 65), (33, 31, 127), (65, 127, 33), (127, 65, 257), (128, 256, 128),
    (129, 257, 130),
    # K beyond one L1 chunk and not a multiple of the usual ones (128, 256): the K tail
    (40, 72, 1000), (200, 300, 520),
    # more output blocks than the 24 AICs, with M, N and K tails
    (700, 1100, 40), (300, 520, 1030),
    # K beyond the timed 1024 and several L1 chunks: a kernel that stops summing K early fails
    (20, 24, 2100),
]
MAX_HIDDEN_ELEMENTS = 8 << 20  # M*K + K*N + M*N of one hidden case

PERF_ONE_CORE = (1024, 1024, 1024)
PERF_ALL_CORES = (1536, 2048, 1024)
MIN_SPEEDUP_ONE_CORE = 4.4
MIN_CUBE_UTIL_ONE_CORE = 52.0
MIN_CUBE_UTIL_ALL_CORES = 48.0


def util_pct(M: int, N: int, K: int, cycles: int, cores: int) -> float:
    """Useful cube FLOPs (2MNK) per cycle against ``cores`` AICs' peak, %."""
    return 100.0 * 2 * M * N * K / (cycles * cores * CARD.cube_flops_per_cycle_core) \
        if cycles else 0.0


class NPUMatmul(NPULab):
    lab_id = "npu-matmul"
    title = "fp16 matmul on the NPU's cube units: L1/L0 tiling, ping-pong, multi-core"
    notebook = "07b_npu_matmul.ipynb"
    functions = {"matmul": ("A", "B", "C")}
    banned_names = SIMULATOR_INTERNALS | frozenset({"naive_kernel", "baseline_cycles",
                                                    "gemm_golden", "gemm_abs_product"})
    output_name = "C"
    input_names = ("A", "B")

    params = {"M": Whole(), "N": Whole(), "K": Whole()}
    visible_seed = VISIBLE_SEED
    random_count = 5
    rules = (
        Rule("one core: modelled speedup over the naive tiling", ">=", MIN_SPEEDUP_ONE_CORE,
             "x", ("npu",), "bigger blocks and ping-pong in L1 and L0"),
        Rule("one core: cube utilisation", ">=", MIN_CUBE_UTIL_ONE_CORE, "%", ("npu",),
             "the cube kept busy: ping-pong with blocks that fill L0C"),
        Rule("all cores: cube utilisation of the chip", ">=", MIN_CUBE_UTIL_ALL_CORES, "%",
             ("npu",), "every cube core busy"),
    )

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return [{"M": m, "N": n, "K": k} for m, n, k in SHAPES]

    def case_name(self, p: dict) -> str:
        return f"{p['M']}x{p['N']}x{p['K']}"

    def case_limits(self, p: dict) -> str | None:
        size = p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]
        if size > MAX_HIDDEN_ELEMENTS:
            return f"needs M*K + K*N + M*N <= {MAX_HIDDEN_ELEMENTS}, not {size}"
        return None

    def random_params(self, rng, i: int) -> dict:
        m, n = (int(v) for v in rng.integers(1, 600, size=2))
        return {"M": m, "N": n, "K": int(rng.integers(1, 1500))}

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        A = rng.standard_normal((p["M"], p["K"])).astype(np.float16)
        B = rng.standard_normal((p["K"], p["N"])).astype(np.float16)
        return CaseData(inputs={"A": A, "B": B}, outputs={"C": ((p["M"], p["N"]), "float32")},
                        call=["A", "B", "C"])

    def warmup_data(self):
        return [("matmul", self.case_data(Case("warmup", {"M": 5, "N": 7, "K": 3}, seed=1)))]

    @staticmethod
    def _compare(A, B, C):
        policy = KAware(K=A.shape[1], acc_dtype="float32", out_dtype="float32",
                        abs_product=gemm_abs_product(A, B))
        cmp = compare(C, gemm_golden(A, B), policy)
        if not cmp.ok and not cmp.nonfinite and cmp.mismatches and A.shape[1] > 16:
            cmp.message += ("; wrong values but every element written: is every K chunk "
                            "added (the last one may be shorter), starting with init=True?")
        return cmp

    def compare(self, case: Case, data: CaseData, outputs: dict):
        cmp = self._compare(data.inputs["A"], data.inputs["B"], outputs["C"])
        if "C1" in outputs:  # the re-check after timing: both timed runs
            cmp1 = self._compare(data.inputs["A1"], data.inputs["B1"], outputs["C1"])
            if not cmp1.ok or (cmp.ok and cmp1.budget_used > cmp.budget_used):
                cmp = cmp1
        return cmp

    def work(self, p: dict) -> tuple:
        return ("cube", 2 * p["M"] * p["N"] * p["K"], "FLOPs of C = A B (2MNK)")

    def arrays_of(self, p: dict) -> dict:
        M, N, K = p["M"], p["N"], p["K"]
        return {"A": ((M, K), "float16"), "B": ((K, N), "float16"), "C": ((M, N), "float32")}

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"one_core": list(PERF_ONE_CORE), "all_cores": list(PERF_ALL_CORES)}

    def timed_params(self, plan: dict, tag: str) -> dict:
        return dict(zip("MNK", (int(v) for v in plan[tag])))

    def planned(self, plan: dict) -> dict:
        return {"params": {k: list(plan[k]) for k in ("one_core", "all_cores")},
                "arrays": self.run_arrays(plan), "what": "shapes"}

    def rules_npu(self, m: dict) -> list[RuleResult]:
        M1, N1, K1 = (int(v) for v in m["plan"]["one_core"])
        M, N, K = (int(v) for v in m["plan"]["all_cores"])
        base = baseline_cycles(M1, N1, K1)
        one, chip = m["runs"]["one_core"], m["runs"]["all_cores"]
        c1, cn = total_cycles(one), total_cycles(chip)
        l1, ln = last_launch(one), last_launch(chip)

        def busy(li):
            b = li.get("pipe_busy_pct", {})
            return ", ".join(f"{p} {b.get(p, 0):.0f}%" for p in ("MTE2", "MTE1", "M", "FIX"))

        r_one, r_util, r_chip = self.rules
        return [
            modelled(r_one, base / c1 if c1 else 0.0,
                     f"{M1}x{N1}x{K1} on one AIC ({ONE_CORE.key}): {c1:,} cycles vs the naive "
                     f"tiling's {base:,} ({NAIVE_BLOCK}x{NAIVE_BLOCK} blocks, K steps of "
                     f"{NAIVE_BLOCK}, one buffer)"),
            modelled(r_util, util_pct(M1, N1, K1, c1, 1),
                     f"2MNK / ({c1:,} cycles x {CARD.cube_flops_per_cycle_core} FLOP/cycle); "
                     f"{busy(l1)}; bottleneck {l1.get('bottleneck', '-')}"),
            modelled(r_chip, util_pct(M, N, K, cn, CARD.n_aic),
                     f"{M}x{N}x{K}: {cn:,} cycles ({cn / CARD.freq_mhz:,.1f} us) with block_dim "
                     f"{ln.get('block_dim', '-')}; 2MNK / (cycles x {CARD.n_aic} AICs x "
                     f"{CARD.cube_flops_per_cycle_core}); {busy(ln)} on "
                     f"{ln.get('critical_core', '-')}; trace "
                     f"{str(ln.get('trace_hash', ''))[:16]}"),
        ]
