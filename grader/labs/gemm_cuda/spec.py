"""Lab 2 ``gemm-cuda``, grader side: a shared-memory tiled GEMM kernel in numba-cuda.

Contract: ``gemm(A, B, C)`` launches the student's kernels, C = A @ B into C; A (M, K), B (K, N),
C (M, N) float32, any M, N, K >= 1, accumulation in float32; numpy arrays in the cases, device
arrays when timed. Tiers ``sim`` (no GPU) and ``gpu``; the worker side is :mod:`.measure`, the
reasoning behind every rule and threshold is README.md beside this file.

* cases: the float64 golden product under :class:`kernellab.numerics.KAware`; on ``sim`` the
  simulator's hazard checks and the product computed by kernels (:func:`device_work_problem`).
* sim rules: global traffic per FMA <= ``MAX_BYTES_PER_FMA`` (reuse); modelled speedup over
  chapter 2's naive kernel >= ``MIN_MODELLED_SPEEDUP``; coalesced per access site >=
  ``MIN_COALESCED``; a gate: the timed product computed by kernels.
* gpu rules: measured speedup over the naive kernel >= ``MIN_SPEEDUP_GPU``; a gate: no faster
  than ``PLAUSIBLE_VS_CUBLAS`` x cuBLAS or the FP32 peak.
"""

from __future__ import annotations

from grader.labs._cuda import (
    PROFILE, CudaLab, Gate, coalesced_fraction, coalesced_rule, fmt_seconds, kernels_gate,
    modelled, modelled_seconds, total_counters, traffic_summary, unchecked_problem,
    with_costliest,
)
from grader.labs._gemm import device_work_problem, gemm_case_data, gemm_check
from grader.rules import Rule, median
from grader.spec import Case, CaseData, OneOf, RuleResult, Whole

DTYPE = "float32"
VISIBLE_SHAPES = [  # (M, N, K): no side a multiple of 8, 16 or 32 except the 1s; K over tiles
    (1, 1, 1), (2, 3, 1), (3, 1, 2), (17, 17, 17), (1, 33, 65), (33, 1, 31), (31, 33, 17),
    (33, 31, 65), (65, 17, 33), (17, 65, 31), (3, 5, 130), (65, 65, 65),
    # a side far beyond the timed 64 (125 tiles of 16): a grid capped at some size fails here;
    # M N K stays small, the simulator's cost
    (1, 2000, 3), (2000, 1, 3),
]
VISIBLE_SEED = 20261203
MAX_HIDDEN_MNK = 1 << 21  # the simulator's cost grows with M*N*K: about 5 s a case at this size

PERF_N = 64
MAX_BYTES_PER_FMA = 1.5
MIN_MODELLED_SPEEDUP = 8.0
MIN_COALESCED = 0.5

GPU_N = 2048
GPU_ROUNDS = 5
MIN_SPEEDUP_GPU = 4.0
PLAUSIBLE_VS_CUBLAS = 1.5


def bytes_per_fma(launches: list[dict], M: int, N: int, K: int) -> float:
    """Global traffic per fused multiply-add: 32 B x the sectors the launches moved (loads and
    stores, every launch) / (M N K). Numerically also the sectors moved per 32 FMAs."""
    t = total_counters(launches)
    return 32.0 * (t["global_load_sectors"] + t["global_store_sectors"]) / (M * N * K)


TRAFFIC = Rule("global traffic per FMA", "<=", MAX_BYTES_PER_FMA, " B", ("sim",),
               "sector bytes moved / MNK: below every layout without reuse")
SPEED = Rule("modelled speedup over the naive kernel", ">=", MIN_MODELLED_SPEEDUP, "x",
             ("sim",), "between coalescing alone and a 16 x 16 shared tile")
COALESCED = Rule("global memory coalesced", ">=", 100 * MIN_COALESCED, "%", ("sim",),
                 "per source line; the lines below it may move 10% of the sectors")
WORK = Gate("the product was computed by kernels", ("sim",),
            "every element of C stored and every byte of A and B read by kernels")
GPU_SPEED = Rule("measured speedup over the naive kernel", ">=", MIN_SPEEDUP_GPU, "x",
                 ("gpu",), "provisional until make gpu-check measures the course's GPU")
PLAUSIBLE = Rule("fastest timed call is plausible", "max<=",
                 f"the larger of {PLAUSIBLE_VS_CUBLAS:g} x cuBLAS's fastest and the FP32 peak",
                 " GFLOP/s", ("gpu",), "faster than that means the timer was cheated")


def reuse_rule(launches: list[dict], M: int, N: int, K: int) -> RuleResult:
    """The "global traffic per FMA" rule (README.md: the bound without reuse)."""
    t = total_counters(launches)
    return modelled(
        TRAFFIC, bytes_per_fma(launches, M, N, K),
        f"{t['global_load_sectors']}+{t['global_store_sectors']} sectors (load+store) x 32 B / "
        f"{M * N * K} FMAs (M=N=K={M}); a kernel that loads both operands of every FMA from "
        f"global memory moves at least {MAX_BYTES_PER_FMA:g} B per FMA in any layout (4 with A "
        "and B row-major); reuse each loaded value for many FMAs from a shared-memory tile or "
        "registers (a T x T tile: about 8/T B)")


class GemmCUDA(CudaLab):
    lab_id = "gemm-cuda"
    title = "Shared-memory tiled GEMM in CUDA (numba-cuda)"
    notebook = "02_gemm_cuda.ipynb"
    functions = {"gemm": ("A", "B", "C")}
    banned_names = frozenset({"gemm_naive", "gemm_golden", "gemm_abs_product", "gemm_v1",
                              "gemm_v2", "gemm_v3", "gemm_v4", "cupy", "cublas"})
    case_timeout_s = 60.0  # one correctness call on the simulator (65^3: about 1 s)
    first_call_timeout_s = 120.0  # the first launch compiles the kernel for a GPU (PTX)
    perf_timeout_s = 300.0
    params = {"M": Whole(), "N": Whole(), "K": Whole(), "dtype": OneOf((DTYPE,), DTYPE)}
    visible_seed = VISIBLE_SEED
    random_count = 4
    rules = (TRAFFIC, SPEED, COALESCED, WORK, GPU_SPEED, PLAUSIBLE)

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return [{"M": m, "N": n, "K": k, "dtype": DTYPE} for (m, n, k) in VISIBLE_SHAPES]

    def case_name(self, p: dict) -> str:
        return f"{p['M']}x{p['N']}x{p['K']}"

    def case_limits(self, p: dict) -> str | None:
        mnk = p["M"] * p["N"] * p["K"]
        if mnk > MAX_HIDDEN_MNK:
            return (f"needs M*N*K <= {MAX_HIDDEN_MNK} (the simulator runs about 2.5 µs a "
                    f"memory access), not {mnk}")
        return None

    def random_params(self, rng, i: int) -> dict:
        m, n, k = (int(x) for x in rng.integers(1, 80, size=3))
        return {"M": m, "N": n, "K": k, "dtype": DTYPE}

    def case_arrays(self, case: Case) -> CaseData:
        return gemm_case_data(case)

    def warmup_data(self):
        # one small call: the first launch compiles the kernel (GPU: the JIT; sim: the PTX check)
        return [("gemm", self.case_data(Case("warmup", {"M": 5, "N": 7, "K": 3,
                                                        "dtype": DTYPE}, seed=1)))]

    def compare(self, case: Case, data: CaseData, outputs: dict):
        return gemm_check(data, outputs)

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        p = case.params
        return (unchecked_problem(info["launches"], info.get("unchecked", ()))
                or device_work_problem(info["launches"], p["M"], p["N"], p["K"]))

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            return {"tier": "gpu", "n": GPU_N, "rounds": GPU_ROUNDS}
        return {"tier": "sim", "n": PERF_N, "profile": PROFILE}

    def measure(self, namespace: dict, plan: dict, workdir, *, clock: str = "cuda",
                cublas=None) -> dict:
        """Worker side (:meth:`grader.labs._cuda.CudaLab.measure`); ``cublas``, a
        ``f(dA, dB, dC)`` standing in for cupy.matmul on the gpu tier, lets tests and
        ``gpu_check --simulate`` run that path on the simulator."""
        hooks = {} if plan["tier"] == "sim" else {"cublas": cublas}
        return super().measure(namespace, plan, workdir, clock=clock, **hooks)

    def planned(self, plan: dict) -> dict:
        n = int(plan["n"])
        return {"params": {"M": n, "N": n, "K": n, "dtype": DTYPE},
                "arrays": dict.fromkeys(("A", "B", "C"), ((n, n), DTYPE)),
                "what": f"M=N=K={n} {DTYPE}"}

    def rules_sim(self, m: dict) -> list[RuleResult]:
        n = int(m["n"])
        flops = 2.0 * n ** 3
        sub, naive = m["submission"], m["naive"]
        work = unchecked_problem(sub) or device_work_problem(sub, n, n, n)
        rules = []
        if work is None:
            ts = modelled_seconds(sub, flops, m["profile"])
            tn = modelled_seconds(naive, flops, m["profile"])
            eff_naive = coalesced_fraction(naive)
            rules.append(with_costliest(reuse_rule(sub, n, n, n), sub))
            rules.append(with_costliest(modelled(
                SPEED, tn["seconds"] / ts["seconds"],
                f"{m['profile']} model, M=N=K={n}, each grid counted as filling the GPU, launch "
                f"overhead excluded: naive {fmt_seconds(tn['seconds'])} ({tn['bound']}-bound), "
                f"yours {fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; "
                f"{traffic_summary(sub)}); as launched at this size (launch overhead "
                f"included): naive {fmt_seconds(tn['as_launched_s'])}, yours "
                f"{fmt_seconds(ts['as_launched_s'])}"), sub))
            rules.append(coalesced_rule(
                sub, MIN_COALESCED, f"the naive kernel: {eff_naive:.0%}; a warp should read 32 "
                "consecutive floats, not a column"))
        rules.append(kernels_gate(WORK, work, sub))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        n = int(m["n"])
        cub = m.get("gflops_cublas")
        peak = m.get("peak_gflops")
        yours = median(m["gflops"])
        parts = [f"M=N=K={n}: naive {median(m['gflops_naive']):.0f} GFLOP/s, yours "
                 f"{yours:.0f} GFLOP/s"]
        if cub:
            parts.append(f"{yours / median(cub):.1%} of cupy.matmul (cuBLAS, "
                         f"{median(cub):.0f} GFLOP/s)")
        if peak:
            parts.append(f"{yours / peak:.1%} of the FP32 peak ({m['peak_formula']})")
        rules = [GPU_SPEED.judge(
            m["speedup_naive"], "; ".join(parts))]
        limits = [x for x in (PLAUSIBLE_VS_CUBLAS * max(cub) if cub else None, peak) if x]
        if limits:
            rules.append(PLAUSIBLE.judge(
                m["gflops"], f"limit = the larger of {PLAUSIBLE_VS_CUBLAS:g} x cuBLAS's fastest "
                "call and the nominal FP32 peak; faster than that means the timer was cheated",
                threshold=round(max(limits), 1)))
        return rules
