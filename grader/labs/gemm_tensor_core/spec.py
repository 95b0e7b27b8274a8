"""Lab 2b ``gemm-tensor-core``, grader side: C (float32) = A @ B with A, B in FP16 or BF16 on
tensor cores (``mma.m16n8k16``), in numba-cuda.

Contract: ``gemm(A, B, C)``: A (M, K), B (K, N) of one dtype, float16 or bfloat16
(``ml_dtypes.bfloat16``), C (M, N) float32, any M, N, K >= 1, float32 accumulation; numpy
arrays in the cases, float16 device arrays when timed. Tiers ``sim`` and ``gpu``; the worker
side is :mod:`.measure`, the reasoning behind every rule and threshold is README.md beside this
file.

* cases: the float64 product of the rounded inputs under :class:`kernellab.numerics.KAware`
  with float32 accumulation; on ``sim`` the simulator's hazard checks (a shared tile read
  before its ``cp.async`` group completed is a race) and the product computed by kernels.
* sim rules (the SM's modelled time: each grid counted as filling the GPU, DRAM's compulsory
  traffic left out, :func:`sm_seconds`): share of the FP16 tensor-core peak (the product's
  2 n^3 FLOP, however many MMAs were issued) >= ``MIN_PEAK_SHARE``;
  modelled speedup over lab 2's tiled kernel (chapter 2's v3, FP32 cores) >= ``MIN_SPEEDUP``;
  shared-memory bank-conflict degree <= ``MAX_CONFLICT``; global loads in flight across MMAs
  >= ``MIN_OVERLAP``; gates: the timed product computed by kernels, and by the MMAs (the
  call again with every MMA computing 2 A B + C: all of C doubles).
* gpu rules: share of cuBLAS's FP16 GEMM (cupy) >= ``MIN_VS_CUBLAS`` (provisional until
  ``make gpu-check`` measures it); a gate: no faster than 1.5 x cuBLAS.
"""

from __future__ import annotations

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, Gate, fmt_seconds, kernels_gate, modelled, shared_ideal, total_counters,
    traffic_summary, unchecked_problem, with_costliest,
)
from grader.rules import Rule, median
from grader.spec import Case, CaseData, OneOf, RuleResult, Whole
from grader.labs._gemm import device_work_problem, gemm_check
from kernellab.numerics import named_dtype
from kernellab.sim.model import MMA_FLOPS

DTYPES = ("float16", "bfloat16")
VISIBLE_SHAPES = [  # (M, N, K): tails in every dimension, K across several k-tiles; K and N
    # even but not multiples of 8 (rows 4-byte but not 16-byte aligned: 10, 66, 130)
    (1, 1, 1), (16, 8, 16), (17, 9, 33), (3, 130, 7), (65, 17, 24), (33, 65, 40),
    (70, 66, 72), (64, 64, 64), (1, 200, 9), (33, 24, 10),
]
#: bfloat16 cases whose inputs are scaled by 2^SCALE_LOG2: beyond float16's range (65504), so a
#: kernel that converts bfloat16 to float16 fails; float32 accumulation stays far from overflow
BIG_BF16 = [(17, 9, 33), (64, 64, 64)]
SCALE_LOG2 = 16
VISIBLE_SEED = 20261206
MAX_HIDDEN_MNK = 1 << 21

PERF_N = 128
MIN_PEAK_SHARE = 0.2
MIN_SPEEDUP = 8.0
MAX_CONFLICT = 1.25
MIN_OVERLAP = 0.4

GPU_N = 4096
GPU_ROUNDS = 5
MIN_VS_CUBLAS = 0.2
PLAUSIBLE_VS_CUBLAS = 1.5



def sm_seconds(launches: list[dict], fp32_flops: float, profile: str = PROFILE) -> dict:
    """The SM's modelled time of a sequence of launches: each launch's kernel time on the
    profile with its grid counted as filling the GPU and its DRAM traffic left out (at the
    graded size the compulsory traffic, the same for every correct kernel, would hide the SM's
    work), ``fp32_flops`` charged at the FP32 peak (the product's FLOP not done by MMAs).
    Returns {"seconds", "mma_s" (the MMAs alone at the tensor peak), "bound", "breakdown" (of
    the longest launch)}."""
    from kernellab.sim import model

    p = model.get_profile(profile)
    total, mma_s, worst = 0.0, 0.0, None
    for launch in launches:
        c = dict(launch["counters"])
        blocks = max(int(c["blocks"]), 1)
        c["blocks"] = max(blocks, p.sm_count)
        c["threads"] = int(c.get("threads", 0)) // blocks * c["blocks"]
        c["dram_read_bytes"] = c["dram_write_bytes"] = 0
        mt = model.modelled_time(c, p)
        total += mt.kernel_seconds
        mma_s += int(c.get("mma_ops", 0)) * MMA_FLOPS / p.fp16_tensor_flops
        if worst is None or mt.kernel_seconds > worst.kernel_seconds:
            worst = mt
    compute = fp32_flops / p.fp32_flops
    bound = worst.kernel_bound if worst is not None else None
    if compute > total:
        total, bound = compute, "compute"
    return {"seconds": total, "mma_s": mma_s, "bound": bound,
            "breakdown": dict(worst.breakdown) if worst is not None else {}}


def fp32_flops_left(launches: list[dict], n: int) -> float:
    """The product's FLOP (2 n^3) not done by the launches' MMAs: charged at the FP32 peak."""
    mmas = total_counters(launches)["mma_ops"]
    return max(0.0, 2.0 * n ** 3 - MMA_FLOPS * mmas)


def figures(sub: list[dict], baseline: list[dict], n: int, profile: str = PROFILE) -> dict:
    """The figures of the sim rules for launches ``sub`` at M = N = K = ``n`` (with per-site
    counters), ``baseline`` the launches of lab 2's tiled kernel (chapter 2's v3) at the same
    size in float32: ``peak_share`` (the product's FLOP at the FP16 tensor peak / the SM's
    time, 0..1), ``speedup`` (over the baseline's SM time), ``conflict`` (shared wavefronts /
    conflict-free wavefronts; 1 without shared accesses), ``overlap``
    (:func:`kernellab.sim.model.overlap` of the summed counters), and ``sm``, ``base`` (their
    :func:`sm_seconds`), ``ideal_s``, ``fp32_roof_speedup`` (the most any FP32-core kernel can
    beat the baseline by: its time over 2 n^3 at the FP32 peak), ``wavefronts``,
    ``ideal_waves``."""
    from kernellab.sim import model

    p = model.get_profile(profile)
    ts = sm_seconds(sub, fp32_flops_left(sub, n), profile)
    tb = sm_seconds(baseline, 2.0 * n ** 3, profile)
    t = total_counters(sub)
    waves = t["shared_load_wavefronts"] + t["shared_store_wavefronts"]
    ideal_w = shared_ideal(sub)
    ideal_s = 2.0 * n ** 3 / p.fp16_tensor_flops
    return {"peak_share": ideal_s / ts["seconds"], "speedup": tb["seconds"] / ts["seconds"],
            "conflict": waves / ideal_w if ideal_w else 1.0, "overlap": model.overlap(t),
            "sm": ts, "base": tb, "ideal_s": ideal_s,
            "fp32_roof_speedup": tb["seconds"] / (2.0 * n ** 3 / p.fp32_flops),
            "wavefronts": waves, "ideal_waves": ideal_w}


UTIL = Rule("share of the tensor-core peak", ">=", 100 * MIN_PEAK_SHARE, "%", ("sim",),
            "2 n^3 FLOP at the FP16 tensor peak / the SM's modelled time; SIMT: <= 6.25%")
SPEED = Rule("modelled speedup over lab 2's tiled kernel", ">=", MIN_SPEEDUP, "x", ("sim",),
             "about twice what any FP32-core kernel can reach (the FP32 roof, in the detail)")
BANKS = Rule("shared-memory bank-conflict degree", "<=", MAX_CONFLICT, "x", ("sim",),
             "wavefronts / conflict-free wavefronts; unswizzled 64- and 128-byte rows: 4-8x")
OVERLAP = Rule("global loads in flight across MMAs", ">=", 100 * MIN_OVERLAP, "%", ("sim",),
               "cp.async double buffering: (n-1)/n over n k-tiles, 50% at two; synchronous: 0%")
WORK = Gate("the product was computed by kernels", ("sim",),
            "every element of C stored and every byte of A and B read by kernels")
FROM_MMA = Gate("C is the tensor cores' product", ("sim",),
                "with every MMA computing 2 A B + C, every element of C doubles")
GPU_SPEED = Rule("share of cuBLAS's FP16 GEMM", ">=", 100 * MIN_VS_CUBLAS, "%", ("gpu",),
                 "provisional until make gpu-check measures the course's GPU")
PLAUSIBLE = Rule("fastest timed call is plausible", "max<=",
                 f"{PLAUSIBLE_VS_CUBLAS:g} x cuBLAS's fastest FP16 call", " GFLOP/s", ("gpu",),
                 "faster than that means the timer was cheated")


class GemmTensorCore(CudaLab):
    lab_id = "gemm-tensor-core"
    title = "Tensor-core GEMM in FP16/BF16 (numba-cuda, mma.sync)"
    notebook = "02b_gemm_tensor_core.ipynb"
    functions = {"gemm": ("A", "B", "C")}
    banned_names = frozenset({"gemm_tc1", "gemm_tc2", "gemm_tc3", "gemm_tc4", "gemm_golden",
                              "gemm_abs_product", "cupy", "cublas", "gemm_v4"})
    case_timeout_s = 60.0
    first_call_timeout_s = 120.0
    perf_timeout_s = 300.0
    params = {"M": Whole(), "N": Whole(), "K": Whole(), "dtype": OneOf(DTYPES, "float16"),
              "scale_log2": Whole(lo=0, hi=60, default=0)}
    visible_seed = VISIBLE_SEED
    random_count = 4
    rules = (UTIL, SPEED, BANKS, OVERLAP, WORK, FROM_MMA, GPU_SPEED, PLAUSIBLE)

    def visible_params(self) -> list[dict]:
        return ([{"M": m, "N": n, "K": k, "dtype": dt, "scale_log2": 0}
                 for dt in DTYPES for (m, n, k) in VISIBLE_SHAPES]
                + [{"M": m, "N": n, "K": k, "dtype": "bfloat16", "scale_log2": SCALE_LOG2}
                   for (m, n, k) in BIG_BF16])

    def case_name(self, p: dict) -> str:
        big = f" x2^{p['scale_log2']}" if p.get("scale_log2") else ""
        return f"{p['dtype']} {p['M']}x{p['N']}x{p['K']}{big}"

    def case_limits(self, p: dict) -> str | None:
        mnk = p["M"] * p["N"] * p["K"]
        if mnk > MAX_HIDDEN_MNK:
            return f"needs M*N*K <= {MAX_HIDDEN_MNK} (the simulator's cost), not {mnk}"
        return None

    def random_params(self, rng, i: int) -> dict:
        m, n, k = (int(x) for x in rng.integers(1, 80, size=3))
        return {"M": m, "N": n, "K": k, "dtype": DTYPES[i % 2], "scale_log2": 0}

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        dt = named_dtype(p["dtype"])
        scale = np.float32(2.0 ** p.get("scale_log2", 0))
        A = (rng.standard_normal((p["M"], p["K"]), dtype=np.float32) * scale).astype(dt)
        B = (rng.standard_normal((p["K"], p["N"]), dtype=np.float32) * scale).astype(dt)
        return CaseData(inputs={"A": A, "B": B},
                        outputs={"C": ((p["M"], p["N"]), "float32")}, call=["A", "B", "C"])

    def warmup_data(self):
        return [("gemm", self.case_data(Case("warmup", {"M": 5, "N": 7, "K": 3,
                                                        "dtype": "float16", "scale_log2": 0},
                                             seed=1)))]

    def compare(self, case: Case, data: CaseData, outputs: dict):
        return gemm_check(data, outputs, acc_dtype="float32")

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        p = case.params
        return (unchecked_problem(info["launches"], info.get("unchecked", ()))
                or device_work_problem(info["launches"], p["M"], p["N"], p["K"], 2))

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            return {"tier": "gpu", "n": GPU_N, "rounds": GPU_ROUNDS}
        return {"tier": "sim", "n": PERF_N, "profile": PROFILE}

    def measure(self, namespace: dict, plan: dict, workdir, *, clock: str = "cuda",
                cublas=None) -> dict:
        hooks = {} if plan["tier"] == "sim" else {"cublas": cublas}
        return super().measure(namespace, plan, workdir, clock=clock, **hooks)

    def planned(self, plan: dict) -> dict:
        n = int(plan["n"])
        return {"params": {"M": n, "N": n, "K": n, "dtype": "float16", "scale_log2": 0},
                "arrays": {"A": ((n, n), "float16"), "B": ((n, n), "float16"),
                           "C": ((n, n), "float32")},
                "what": f"M=N=K={n} float16"}

    def rules_sim(self, m: dict) -> list[RuleResult]:
        n = int(m["n"])
        sub = m["submission"]
        work = unchecked_problem(sub) or device_work_problem(sub, n, n, n, 2)
        rules = []
        if work is None:
            f = figures(sub, m["baseline"], n, m["profile"])
            ts, tb, t = f["sm"], f["base"], total_counters(sub)
            rules.append(with_costliest(modelled(
                UTIL, 100 * f["peak_share"],
                f"{m['profile']} model, M=N=K={n} float16: the product's {2 * n ** 3} FLOP take "
                f"{fmt_seconds(f['ideal_s'])} at the FP16 tensor peak, yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; each grid counted as "
                f"filling the GPU, DRAM left out; {t['mma_ops']} mma.m16n8k16 issued)"
                + ("" if t["mma_ops"] else "; no MMA: FP32 cores reach at most 19.5/312 = "
                   "6.25% of it")), sub))
            rules.append(with_costliest(modelled(
                SPEED, f["speedup"],
                f"lab 2's tiled kernel (chapter 2's v3, FP32) {fmt_seconds(tb['seconds'])} "
                f"({tb['bound']}-bound; no FP32-core kernel can beat it by more than "
                f"{f['fp32_roof_speedup']:.2f}x, the FP32 roof), yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; {traffic_summary(sub)})"),
                sub))
            rules.append(modelled(
                BANKS, f["conflict"],
                f"{f['wavefronts']} shared wavefronts for requests that need {f['ideal_waves']} "
                "without conflicts (ldmatrix: 8 rows of 16 bytes a phase; swizzle or pad each "
                "row's 16-byte chunks)"))
            rules.append(modelled(
                OVERLAP, 100 * f["overlap"],
                f"{t['cp_async_overlapped_bytes']} of {t['global_load_bytes']} global bytes "
                "loaded were cp.async copies in flight across a pipeline stage's MMAs (a copy "
                "in flight across fewer counts in part): copy tile k+1 while the MMAs of tile "
                "k run"))
        rules.append(kernels_gate(WORK, work, sub))
        share = float(m.get("from_mma", 0.0))
        rules.append(RuleResult(
            FROM_MMA.name, share, 1.0, ">=", "", share >= 1.0,
            f"the call ran again with every mma computing 2 A B + C: {share:.1%} of C's "
            "elements doubled" + ("" if share >= 1.0 else "; the rest of C was computed another "
                                  "way (FP32 cores, the host, MMAs whose results are dropped or "
                                  "on zeros), which this lab does not grade as a tensor-core "
                                  "GEMM"), scored=False))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        yours = median(m["gflops"])
        cub = m.get("gflops_cublas")
        parts = [f"M=N=K={m['n']} float16: yours {yours:.0f} GFLOP/s"]
        rules = []
        if cub:
            parts.append(f"cupy.matmul (cuBLAS) {median(cub):.0f} GFLOP/s")
            rules.append(GPU_SPEED.judge([100 * g / median(cub) for g in m["gflops"]],
                                         "; ".join(parts)))
            rules.append(PLAUSIBLE.judge(
                m["gflops"], "faster than 1.5 x cuBLAS means the timer was cheated",
                threshold=round(PLAUSIBLE_VS_CUBLAS * max(cub), 1)))
        return rules
