"""Lab 8a ``moe``, grader side: the MoE layer's align/sort, grouped GEMM and weighted combine in
BF16 with float32 accumulation, in numba-cuda.

Contract (``block``: rows of a GEMM block). BF16 arrays are ``ml_dtypes.bfloat16`` arrays in
the cases (outputs pre-filled with NaN) and uint16 device arrays of their bits when timed
(numba-cuda has no bfloat16 array type: a launcher passes ``x.view(np.uint16)``):

* ``moe_align(topk_ids, E, block, sorted_ids, expert_ids, num_post_pad)``: topk_ids (M, k)
  int32 -> sorted_ids (M k + E (block - 1),) int32, expert_ids (that over block, rounded up,)
  int32, num_post_pad (1,) int32 (:func:`reference_kernels.moe.align_problem`: the invariants).
* ``grouped_gemm(A, W, sorted_ids, expert_ids, num_post_pad, block, C)``: A (M, K), W (E, K,
  N), C (M k, N) BF16; row i of C = A[i // k] @ W[expert of i], k = C.shape[0] // M.
* ``combine(Y, topk_weights, out)``: Y (M k, N) BF16, topk_weights (M, k) float32, out (M, N)
  BF16: out[m] = sum_j w[m, j] Y[m k + j].

Tiers ``sim`` and ``gpu``; the worker side is :mod:`.measure`, the reasoning README.md.

* cases: align by its invariants and, on ``sim``, the same outputs when replayed with the
  threads in other orders (:func:`replay_shuffled`); GEMM and combine against float64 golden
  references of the same BF16 inputs under :func:`bf16_sum_policy` (float32 accumulation over
  K, one BF16 ulp of the output); on ``sim`` the hazard checks (the sentinel row read is past
  A's end) and the result computed by kernels.
* sim rules (grouped GEMM at small batch, ``PERF``): modelled speedup over one launch per
  expert, launch overhead included, >= ``MIN_SPEEDUP``; launches <= ``MAX_LAUNCHES``; a gate:
  C computed by kernels.
* gpu rules: speedup over the per-expert launches (CUDA events) >= ``GPU_MIN_SPEEDUP``,
  provisional.
"""

from __future__ import annotations

import contextlib

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, Gate, fmt_seconds, kernels_gate, modelled, modelled_seconds,
    total_counters, traffic_summary, work_problem,
)
from grader.rules import Rule, median
from grader.spec import Case, CaseData, RuleResult, Whole
from kernellab.numerics import Explicit, compare, ulp, unit_roundoff
from reference_kernels import moe as ref

VISIBLE_SEED = 20261206
#: (M, E, k, block) of the align cases: one token; 257 experts with most receiving none; top-k
#: 1, 2, 3, 8; blocks of 4 (experts spanning several blocks), 16 and 64
ALIGN_SHAPES = [(1, 1, 1, 16), (33, 257, 8, 16), (33, 8, 2, 16), (4, 64, 1, 16),
                (33, 257, 8, 64), (17, 5, 3, 4), (40, 16, 2, 4)]
#: (M, K, N, E, k, block) of the grouped-GEMM cases: K 511 and N 769 (off by one from every
#: tile and vector width) with small other sides, 257 experts with small K and N (the point is
#: the expert count; the simulator runs each access in Python), top-k 1, 2, 8, a block of 64
GEMM_SHAPES = [(1, 1, 1, 1, 1, 16), (33, 8, 8, 257, 8, 16), (2, 511, 8, 4, 2, 16),
               (2, 8, 769, 4, 2, 16), (5, 33, 70, 6, 2, 16), (33, 16, 24, 8, 1, 16),
               (9, 24, 40, 16, 2, 64)]
#: (M, N, k) of the combine cases
COMBINE_SHAPES = [(1, 1, 1), (33, 33, 8), (2, 769, 2), (5, 70, 2), (3, 33, 1), (7, 129, 4)]
MAX_HIDDEN_ACCESSES = 1 << 18      # grouped GEMM: M k K N, the simulator's cost
MAX_CASE_EXPERTS = 1024
#: the seeds of the thread orders (``kernellab.sim`` option ``shuffle``) an align call is
#: replayed under on the sim tier: its outputs must not change (determinism)
SHUFFLE_SEEDS = (1, 2)
ALIGN_OUTPUTS = ("sorted_ids", "expert_ids", "num_post_pad")

#: the timed grouped GEMM: small batch (8 tokens, top-2 of 32 experts)
PERF = {"M": 8, "K": 32, "N": 64, "E": 32, "k": 2, "block": 16}
MIN_SPEEDUP = 3.0
MAX_LAUNCHES = 2

GPU = {"M": 8, "K": 2048, "N": 1024, "E": 64, "k": 2, "block": 16}
GPU_ROUNDS = 5
GPU_MIN_SPEEDUP = 2.0

SPEED = Rule("modelled speedup over one GEMM launch per expert", ">=", MIN_SPEEDUP, "x",
             ("sim",), "launch overhead included: one launch pays it once, one launch per "
             "expert once per expert with tokens")
LAUNCHES = Rule("kernel launches of the grouped GEMM", "<=", MAX_LAUNCHES, "", ("sim",),
                "one launch for all experts; per expert: one per expert with tokens")
WORK = Gate("the grouped GEMM was computed by kernels", ("sim",),
            "every element of C stored and every byte of A read by kernels")
GPU_SPEED = Rule("speedup over one GEMM launch per expert", ">=", GPU_MIN_SPEEDUP, "x",
                 ("gpu",), "provisional until make gpu-check measures the course's GPU")


def bf16_values(x) -> np.ndarray:
    """A BF16 array, or uint16 BF16 bits, as float64 values."""
    from kernellab.numerics import _BF16

    x = np.asarray(x)
    return (x if x.dtype == _BF16 else x.astype(np.uint16).view(_BF16)).astype(np.float64)


def bf16_array(rng, shape) -> np.ndarray:
    """Standard-normal values rounded to BF16 (an ``ml_dtypes.bfloat16`` array)."""
    from kernellab.numerics import _BF16

    return rng.standard_normal(shape, dtype=np.float32).astype(_BF16)


def bf16_bits(rng, shape) -> np.ndarray:
    """:func:`bf16_array` as its uint16 bits (what a device array holds)."""
    return bf16_array(rng, shape).view(np.uint16)


def routing(rng, M: int, E: int, k: int):
    """Random router logits (M, E) routed top-k (:func:`reference_kernels.moe.topk_route`):
    (weights (M, k) float32, ids (M, k) int32)."""
    w, ids = ref.topk_route(rng.standard_normal((M, E)), k)
    return w.astype(np.float32), ids


def golden_from_align(A, W, sorted_ids, expert_ids, num_post_pad, block: int, MK: int):
    """The grouped GEMM's float64 result and its |A| |W| scale from an align result: C[i] =
    A[i // k] @ W[e] for each flat index i of sorted_ids in a block of expert e."""
    A64, W64 = bf16_values(A), bf16_values(W)
    k = MK // A64.shape[0]
    total = int(num_post_pad[0])
    s = np.asarray(sorted_ids[:total], np.int64)
    e = np.repeat(np.asarray(expert_ids[:total // block], np.int64), block)
    keep = s < MK
    s, e = s[keep], e[keep]
    C = np.zeros((MK, W64.shape[2]))
    S = np.zeros_like(C)
    C[s] = np.einsum("ik,ikn->in", A64[s // k], W64[e])
    S[s] = np.einsum("ik,ikn->in", np.abs(A64[s // k]), np.abs(W64[e]))
    return C, S


def bf16_sum_policy(K: int, scale, ref) -> Explicit:
    """The error budget of a K-term sum accumulated in float32 and written once in BF16:
    ``6 sqrt(K) (u_fp32 + u_fp64) scale`` (``scale``: the sum of the terms' magnitudes; the
    K-aware bound of :class:`kernellab.numerics.KAware`, Higham & Mary 2019) plus one BF16 ulp,
    ``2 u_bf16 |ref|``, and the BF16 ulp at 0 (a correctly rounded output uses at most half of
    the ulp: the course's margin rule, as :class:`kernellab.numerics.RowSoftmax` writes its
    output). A BF16 accumulator misses it by orders of magnitude at K = 511."""
    acc = 6.0 * np.sqrt(K) * (unit_roundoff("float32") + unit_roundoff("float64"))
    bound = (acc * np.asarray(scale, np.float64) + 2.0 * unit_roundoff("bfloat16") * np.abs(ref)
             + ulp(0.0, "bfloat16"))
    return Explicit(bound, f"float32 accumulation over K = {K} "
                           "(6 sqrt(K) u |a| |b|) plus one BF16 ulp of the output")


def gemm_case(p: dict, rng):
    """The arrays of a grouped-GEMM case: A, W (BF16 bits), the align of a random routing."""
    M, K, N, E, k, block = (p[x] for x in ("M", "K", "N", "E", "k", "block"))
    _, ids = routing(rng, M, E, k)
    s, eb, npp = ref.align_golden(ids, E, block)
    return {"A": bf16_array(rng, (M, K)), "W": bf16_array(rng, (E, K, N)), "sorted_ids": s,
            "expert_ids": eb, "num_post_pad": npp}


class MoE(CudaLab):
    lab_id = "moe"
    title = "Mixture of experts in BF16: align/sort, grouped GEMM and combine (numba-cuda)"
    notebook = "08a_moe.ipynb"
    functions = {"moe_align": ("topk_ids", "E", "block", "sorted_ids", "expert_ids",
                               "num_post_pad"),
                 "grouped_gemm": ("A", "W", "sorted_ids", "expert_ids", "num_post_pad",
                                  "block", "C"),
                 "combine": ("Y", "topk_weights", "out")}
    perf_functions = ("grouped_gemm",)
    banned_names = frozenset({"align_golden", "grouped_gemm_golden", "combine_golden",
                              "gemm_per_expert", "cupy"})
    case_timeout_s = 60.0
    first_call_timeout_s = 120.0
    perf_timeout_s = 300.0
    params = {"M": Whole(), "k": Whole(lo=1, hi=8)}
    select_by = "fn"
    variants = {"moe_align": {"E": Whole(hi=MAX_CASE_EXPERTS), "block": Whole(hi=128)},
                "grouped_gemm": {"K": Whole(), "N": Whole(), "E": Whole(hi=MAX_CASE_EXPERTS),
                                 "block": Whole(hi=128)},
                "combine": {"N": Whole()}}
    visible_seed = VISIBLE_SEED
    rules = (SPEED, LAUNCHES, WORK, GPU_SPEED)

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return ([{"fn": "moe_align", "M": m, "k": k, "E": e, "block": b}
                 for (m, e, k, b) in ALIGN_SHAPES]
                + [{"fn": "grouped_gemm", "M": m, "k": k, "K": K, "N": n, "E": e, "block": b}
                   for (m, K, n, e, k, b) in GEMM_SHAPES]
                + [{"fn": "combine", "M": m, "k": k, "N": n} for (m, n, k) in COMBINE_SHAPES])

    def case_name(self, p: dict) -> str:
        if p["fn"] == "moe_align":
            return f"moe_align M={p['M']} E={p['E']} top{p['k']} block {p['block']}"
        if p["fn"] == "grouped_gemm":
            return (f"grouped_gemm M={p['M']} K={p['K']} N={p['N']} E={p['E']} top{p['k']} "
                    f"block {p['block']}")
        return f"combine M={p['M']} N={p['N']} top{p['k']}"

    def case_limits(self, p: dict) -> str | None:
        if p.get("E") is not None and p["k"] > p["E"]:
            return f"needs k <= E, not k = {p['k']} > E = {p['E']}"
        if p["fn"] == "grouped_gemm":
            work = p["M"] * p["k"] * p["K"] * p["N"]
            if work > MAX_HIDDEN_ACCESSES:
                return (f"needs M*k*K*N <= {MAX_HIDDEN_ACCESSES} (the simulator runs a few µs "
                        f"a memory access), not {work}")
        return None

    def random_params(self, rng, i: int) -> dict:
        fn = ("moe_align", "grouped_gemm", "combine")[i % 3]
        k = int(rng.integers(1, 9))
        p = {"fn": fn, "M": int(rng.integers(1, 40)), "k": k}
        if fn != "combine":
            p["E"] = int(rng.integers(k, 300))
            p["block"] = int((4, 16, 64)[int(rng.integers(0, 3))])
        if fn == "grouped_gemm":
            p["K"], p["N"] = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        if fn == "combine":
            p["N"] = int(rng.integers(1, 800))
        return p

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        M, k = p["M"], p["k"]
        if p["fn"] == "moe_align":
            E, block = p["E"], p["block"]
            _, ids = routing(rng, M, E, k)
            rows, blocks = ref.align_capacity(M, k, E, block)
            return CaseData(inputs={"topk_ids": ids},
                            outputs={"sorted_ids": ((rows,), "int32"),
                                     "expert_ids": ((blocks,), "int32"),
                                     "num_post_pad": ((1,), "int32")},
                            call=list(self.functions["moe_align"]),
                            scalars={"E": E, "block": block})
        if p["fn"] == "grouped_gemm":
            return CaseData(inputs=gemm_case(p, rng), outputs={"C": ((M * k, p["N"]), "bfloat16")},
                            call=list(self.functions["grouped_gemm"]),
                            scalars={"block": p["block"]})
        w, _ = routing(rng, M, max(k, 8), k)
        return CaseData(inputs={"Y": bf16_array(rng, (M * k, p["N"])), "topk_weights": w},
                        outputs={"out": ((M, p["N"]), "bfloat16")},
                        call=["Y", "topk_weights", "out"])

    def warmup_data(self):
        out = []
        for p in ({"fn": "moe_align", "M": 2, "k": 2, "E": 3, "block": 4},
                  {"fn": "grouped_gemm", "M": 2, "k": 2, "K": 3, "N": 5, "E": 3, "block": 4},
                  {"fn": "combine", "M": 2, "k": 2, "N": 5}):
            out.append((p["fn"], self.case_data(Case(f"warmup {p['fn']}", p, seed=1))))
        return out

    def compare(self, case: Case, data: CaseData, outputs: dict):
        fn = case.params.get("fn")
        if fn == "moe_align":
            return align_check(data, outputs)
        if fn == "grouped_gemm":
            d = data.inputs
            MK = outputs["C"].shape[0]
            C, S = golden_from_align(d["A"], d["W"], d["sorted_ids"], d["expert_ids"],
                                     d["num_post_pad"], int(data.scalars["block"]), MK)
            policy = bf16_sum_policy(d["A"].shape[1], S, C)
            cmp = compare(bf16_values(outputs["C"]), C, policy, out_dtype="bfloat16")
            if not cmp.ok and not cmp.nonfinite and cmp.budget_used < 1e3:
                cmp.message += ("; errors of the size of BF16 rounding over K: is the sum "
                                "accumulated in BF16 (narrowed each step)? Keep a float32 "
                                "accumulator and narrow once")
            return cmp
        Y, w = data.inputs["Y"], data.inputs["topk_weights"]
        Y64 = bf16_values(Y)
        want = ref.combine_golden(Y64, w)
        policy = bf16_sum_policy(w.shape[1], ref.combine_abs(Y64, w), want)
        cmp = compare(bf16_values(outputs["out"]), want, policy,
                      out_dtype="bfloat16")
        if not cmp.ok and np.allclose(bf16_values(outputs["out"]),
                                      Y64.reshape(w.shape[0], w.shape[1], -1).sum(axis=1),
                                      rtol=2.0 ** -7, atol=1e-6):
            cmp.message += ("; out is the plain sum of the k rows: multiply each by its "
                            "routing weight topk_weights[m, j]")
        return cmp

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        fn = case.params.get("fn")
        if fn == "moe_align":
            if info.get("nondeterministic"):
                return info["nondeterministic"]
            x = data.inputs["topk_ids"]
            return work_problem(info["launches"], {"topk_ids": (x.nbytes, _digests(x))},
                                1, "moe_align", unchecked=info.get("unchecked", ()))
        if fn == "grouped_gemm":
            A = data.inputs["A"]
            MK = case.params["M"] * case.params["k"]
            return work_problem(info["launches"], {"A": (A.nbytes, _digests(A))},
                                MK * case.params["N"], "grouped_gemm",
                                unchecked=info.get("unchecked", ()))
        Y = data.inputs["Y"]
        return work_problem(info["launches"], {"Y": (Y.nbytes, _digests(Y))},
                            case.params["M"] * case.params["N"], "combine",
                            unchecked=info.get("unchecked", ()))

    def call_probe(self, arrays=None):
        """:meth:`CudaLab.call_probe`; on the sim tier an align call's launches are replayed
        on the same topk_ids with the threads run in other orders (:data:`SHUFFLE_SEEDS`):
        ``info["nondeterministic"]`` says what changed (:func:`replay_shuffled`)."""
        base = super().call_probe(arrays)
        if arrays is None or "topk_ids" not in arrays:
            return base

        @contextlib.contextmanager
        def probe():
            from kernellab import device

            if device.select_tier() != "sim":
                with base as info:
                    yield info
                return
            from kernellab import sim

            with base as info:
                with sim.capture(record=True) as cap:
                    yield info
            if "launches" in info and cap.recorded:
                why = replay_shuffled(cap.recorded, arrays)
                if why:
                    info["nondeterministic"] = why
        return probe()

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            return {"tier": "gpu", **GPU, "rounds": GPU_ROUNDS}
        return {"tier": "sim", **PERF, "profile": PROFILE}

    def planned(self, plan: dict) -> dict:
        p = timed_params(plan)
        M, K, N, E, k, block = (p[x] for x in ("M", "K", "N", "E", "k", "block"))
        rows, blocks = ref.align_capacity(M, k, E, block)
        return {"params": p, "what": f"grouped GEMM M={M} K={K} N={N} E={E} top{k}",
                "arrays": {"A": ((M, K), "uint16"), "W": ((E, K, N), "uint16"),
                           "sorted_ids": ((rows,), "int32"), "expert_ids": ((blocks,), "int32"),
                           "num_post_pad": ((1,), "int32"), "C": ((M * k, N), "uint16")}}

    def rules_sim(self, m: dict) -> list[RuleResult]:
        sub, base = m["submission"], m["per_expert"]
        work = work_problem(sub, {"A": (int(m["a_bytes"]), [str(m["a_digest"])])},
                            int(m["M"]) * int(m["k"]) * int(m["N"]), "grouped_gemm",
                            unchecked=m["unchecked"], final_digest=str(m["c_digest"]))
        rules = []
        if work is None:
            ts = modelled_seconds(sub, 0.0, m["profile"], as_launched=True)
            tb = modelled_seconds(base, 0.0, m["profile"], as_launched=True)
            t, tbc = total_counters(sub), total_counters(base)
            shape = (f"{m['profile']} model, M={m['M']} tokens, top{m['k']} of {m['E']} "
                     f"experts, K={m['K']}, N={m['N']}, each grid as launched, launch overhead "
                     "included")
            rules.append(modelled(
                SPEED, tb["as_launched_s"] / ts["as_launched_s"],
                f"{shape}: per expert {fmt_seconds(tb['as_launched_s'])} in {len(base)} "
                f"launches ({tbc['dram_read_bytes'] + tbc['dram_write_bytes']} DRAM bytes), "
                f"yours {fmt_seconds(ts['as_launched_s'])} in {len(sub)} launch(es) "
                f"({t['dram_read_bytes'] + t['dram_write_bytes']} DRAM bytes; "
                f"{traffic_summary(sub)})"))
            rules.append(modelled(
                LAUNCHES, float(len(sub)),
                f"{len(sub)} launch(es); one GEMM launch per expert with tokens takes "
                f"{len(base)} here, each paying the launch overhead: read the expert of each "
                "block from expert_ids inside one launch"))
        rules.append(kernels_gate(WORK, work, sub))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        detail = (f"M={m['M']} tokens, top{m['k']} of {m['E']} experts, K={m['K']}, "
                  f"N={m['N']}: yours {median(m['seconds']) * 1e6:.1f} µs, one launch per "
                  f"expert {median(m['seconds_per_expert']) * 1e6:.1f} µs")
        return [GPU_SPEED.judge(m["speedup"], detail)]


def replay_shuffled(recorded, arrays: dict) -> str | None:
    """Worker side, sim tier: replay an align call's launches (:func:`kernellab.sim.replay`)
    on the same topk_ids with the outputs reset, once per seed of :data:`SHUFFLE_SEEDS` (the
    block's threads run in that seeded order between barriers); None if every output came out
    as the call left it, else what changed, in plain words. The outputs are restored."""
    from kernellab import sim

    saved = {k: arrays[k].copy() for k in ALIGN_OUTPUTS}
    try:
        for seed in SHUFFLE_SEEDS:
            for k in ALIGN_OUTPUTS:
                arrays[k].fill(np.iinfo(np.int32).min)
            try:
                with sim.capture(gpu_compile=False, shuffle=seed):
                    sim.replay(recorded, fresh=[arrays["topk_ids"]])
            except Exception as exc:  # noqa: BLE001 - reported in words
                return (f"the align launches, run again on the same topk_ids with the threads "
                        f"in another order, raised {type(exc).__name__}: {exc}")
            for k in ALIGN_OUTPUTS:
                if not np.array_equal(arrays[k], saved[k]):
                    i = int(np.flatnonzero(arrays[k] != saved[k])[0])
                    return (f"not deterministic: run again on the same topk_ids with the "
                            f"block's threads in another order, {k}[{i}] became "
                            f"{arrays[k][i]} (was {saved[k][i]}): the order of the indices "
                            "depends on which thread gets there first (an atomic cursor?); "
                            "place them in an order fixed by the input, e.g. ascending flat "
                            "index within each expert")
    finally:
        for k, v in saved.items():
            np.copyto(arrays[k], v)
    return None


def _digests(x) -> list[str]:
    from kernellab.sim import content_digest

    return [content_digest(x)]


def timed_params(plan: dict) -> dict:
    """The case parameters of the timed grouped GEMM."""
    return {"fn": "grouped_gemm", **{x: int(plan[x]) for x in ("M", "K", "N", "E", "k",
                                                                 "block")}}


def align_check(data: CaseData, outputs: dict):
    """The align outputs against :func:`reference_kernels.moe.align_problem`, as a
    :class:`kernellab.numerics.Comparison` (ok, message)."""
    from kernellab.numerics import Comparison

    why = ref.align_problem(data.inputs["topk_ids"], int(data.scalars["E"]),
                            int(data.scalars["block"]), outputs["sorted_ids"],
                            outputs["expert_ids"], outputs["num_post_pad"])
    n = int(outputs["sorted_ids"].size)
    return Comparison(ok=why is None, policy="align invariants", shape=(n,), n=n,
                      mismatches=0 if why is None else 1, max_abs=0.0, max_rel=0.0,
                      max_ulp=0.0, worst_index=None, worst_out=None, worst_ref=None,
                      worst_bound=None, budget_used=0.0 if why is None else float("inf"),
                      nonfinite=0, message=why or "")
