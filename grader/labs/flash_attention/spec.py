"""Lab 5 ``flash-attention``, grader side: FlashAttention's forward pass in numba-cuda.

Contract: ``flash_attention(Q, K, V, O, causal)``: O = softmax(Q K^T / sqrt(d)) V per batch and
head, key j masked for query i when ``causal`` and j > i; Q, K, V, O (B, H, N, d) all float32
or all float16, d in {32, 64}, any N >= 1, statistics and both products in float32; numpy
arrays in the cases, device arrays when timed. Tiers ``sim`` and ``gpu``; the worker side is
:mod:`.measure`, the known-mistake diagnoses :mod:`.diagnose`, the reasoning behind every rule
and threshold README.md beside this file.

* cases: the float64 golden attention under FlashAttention's test rule with the float32
  rounding bound of a fused kernel (:func:`rule`; Dao-AILab/flash-attention,
  ``tests/test_flash_attn.py``); on ``sim`` the hazard checks, O stored by kernels and the
  replay on new Q, K, V (:func:`replay_problem`).
* sim rules: DRAM traffic / compulsory <= ``MAX_TRAFFIC``; modelled speedup over the
  materialised attention >= ``MIN_MODELLED_SPEEDUP``; a gate: the timed attention computed by
  kernels (and its replay).
* gpu rules: speedup over the materialised attention >= ``MIN_GPU_SPEEDUP``; a gate: the
  compulsory bytes no faster than ``PLAUSIBLE_VS_COPY`` x a device copy's bandwidth.
"""

from __future__ import annotations

import numpy as np

from grader.labs._cuda import (
    PROFILE, REPLAY_SLOTS, CudaLab, Gate, fmt_seconds, kernels_gate, modelled, modelled_seconds,
    tampered, total_counters, traffic_summary, with_atomic_reads, with_costliest, work_problem,
)
from grader.labs.flash_attention.diagnose import diagnose
from grader.rules import Rule, median
from grader.spec import Case, CaseData, Flag, OneOf, RuleResult, Whole
from kernellab.numerics import compare, flash_attention_rule
from reference_kernels.attention import attention_golden, fused_rounding_bound, plain_error

VISIBLE_SEED = 20261130
DTYPES = ("float32", "float16")
HEAD_DIMS = (32, 64)
KINDS = ("normal", "large", "negative")
#: (B, H, N, d, dtype, causal, kind) of the visible cases
CASES = [
    (1, 1, 1, 32, "float32", False, "normal"),
    (1, 1, 1, 64, "float16", True, "normal"),
    (1, 1, 17, 32, "float16", True, "normal"),
    (1, 1, 17, 64, "float32", True, "normal"),
    (1, 1, 17, 32, "float32", False, "normal"),
    (1, 1, 17, 64, "float16", False, "normal"),
    (2, 3, 17, 32, "float32", True, "normal"),
    (1, 2, 33, 64, "float16", False, "normal"),
    (1, 1, 40, 32, "float32", False, "large"),
    (1, 1, 100, 32, "float32", True, "normal"),
    (1, 1, 100, 64, "float16", True, "normal"),
    (1, 1, 100, 32, "float16", False, "normal"),
    (1, 1, 100, 64, "float32", False, "normal"),
    (1, 1, 257, 32, "float16", True, "normal"),
    (1, 1, 17, 32, "float32", False, "negative"),
    (1, 1, 17, 64, "float16", True, "negative"),
    (1, 1, 33, 32, "float16", False, "negative"),
]
#: Q and K of the "large" cases are 10 x standard normal: scores q.k / sqrt(d) of standard
#: deviation 100, so exp overflows (float32 past 88.7) unless the running max is subtracted
LARGE_SCALE = 10.0
#: Q of the "negative" cases is this + standard normal, K minus it + standard normal: scores
#: q.k / sqrt(d) about -NEGATIVE_SHIFT^2 sqrt(d) (-141 at d = 32, -200 at d = 64) with a spread
#: of about 7, so every score of every row lies far below zero and exp(s) underflows float32
#: (below -103.97) unless the running max starts at -inf and is subtracted
NEGATIVE_SHIFT = 5.0
#: cap on the work of a hidden case, B H N^2 d (halved when causal: the kernels skip the
#: masked key blocks). The simulator runs every thread, and a case runs twice (the replay):
#: on the course machine (2 cores shared with other jobs) chapter 5's v2 took 25 s for
#: N = 256, d = 32 and 137 s for N = 640, d = 32 causal, and the lab's solution 54 s for the
#: whole N = 640 causal case, replay included; so the cap, 2^23 (N = 724 causal or 512 not
#: causal at d = 32), reaches past the 512 keys a kernel with a fixed 512-entry row or tile
#: stops at, within :attr:`FlashAttention.case_timeout_s`
MAX_HIDDEN_WORK = 1 << 23
#: keys of the long case among the random hidden cases: past 512 (fixed-size rows and
#: tiles of 2 KiB of float32 break there), within MAX_HIDDEN_WORK at d = 32, causal
LONG_HIDDEN_N = (513, 640)
#: cap on B H of a hidden case (every (b, h) is at least one thread block the simulator runs)
MAX_HIDDEN_HEADS = 64

PERF_SHAPE = (1, 1, 128, 32)        # B, H, N, d; float16, not causal
PERF_DTYPE = "float16"
MAX_TRAFFIC = 1.5
MIN_MODELLED_SPEEDUP = 1.5

GPU_SHAPE = (4, 8, 1024, 64)
GPU_ROUNDS = 5
MIN_GPU_SPEEDUP = 1.5
PLAUSIBLE_VS_COPY = 1.5



TRAFFIC = Rule("DRAM traffic / compulsory", "<=", MAX_TRAFFIC, "x", ("sim",),
               "a fused kernel: 1.0x; an N x N array in device memory adds 2 N^2 s bytes")
SPEED = Rule("modelled speedup over the materialised attention", ">=", MIN_MODELLED_SPEEDUP,
             "x", ("sim",), "each grid counted as filling the GPU, launch overhead excluded")
WORK = Gate("the attention was computed by kernels", ("sim",),
            "every element of O stored and every byte of Q, K and V read by kernels")
GPU_SPEED = Rule("speedup over the materialised attention", ">=", MIN_GPU_SPEEDUP, "x",
                 ("gpu",), "provisional until make gpu-check measures the course's GPU")
PLAUSIBLE = Rule("fastest timed call is plausible", "max<=",
                 f"{PLAUSIBLE_VS_COPY:g} x the fastest device copy's bandwidth", " GB/s",
                 ("gpu",), "faster than that means the timer was cheated")


def attention_inputs(rng, B: int, H: int, N: int, d: int, dtype: str, kind: str = "normal"):
    """Q, K, V (B, H, N, d) of ``dtype``: standard normal; ``large``: Q and K times
    :data:`LARGE_SCALE`; ``negative``: Q shifted by +:data:`NEGATIVE_SHIFT` and K by minus it
    (every score far below zero)."""
    dt = np.dtype(dtype)
    s = LARGE_SCALE if kind == "large" else 1.0
    Q, K, V = (rng.standard_normal((B, H, N, d)) for _ in range(3))
    if kind == "negative":
        Q, K = Q + NEGATIVE_SHIFT, K - NEGATIVE_SHIFT
    return (s * Q).astype(dt), (s * K).astype(dt), V.astype(dt)



def compare_attention(data: CaseData, causal: bool, out):
    """``out`` against the float64 attention of the case's Q, K, V by :func:`rule`, with the
    diagnosis of a known mistake appended to a failure's message (:mod:`.diagnose`)."""
    Q, K, V = (data.inputs[k] for k in ("Q", "K", "V"))
    ref, _ = attention_golden(Q, K, V, causal)
    policy = rule(Q, K, V, causal, ref)
    cmp = compare(out, ref, policy, tile=None)
    if not cmp.ok:
        hint = diagnose(Q, K, V, causal, out, policy.bounds(ref)[0], cmp.budget_used)
        if hint:
            cmp.message += "; " + hint
    return cmp


def attention_limits(p: dict, max_work: int, max_heads: int, why: str = "") -> str | None:
    """Why a hidden attention case with parameters ``p`` is too big (its :func:`hidden_work`
    above ``max_work``, or B*H above ``max_heads``; ``why`` says why a cap exists), or None."""
    if hidden_work(p) > max_work:
        return (f"needs B*H*N*N*d (halved when causal) <= {max_work}{why}, not "
                f"{hidden_work(p)}")
    if p["B"] * p["H"] > max_heads:
        return f"needs B*H <= {max_heads}, not {p['B'] * p['H']}"
    return None


def hidden_work(p: dict) -> int:
    """The simulator's work of a case with parameters ``p``: B H N^2 d, halved when causal
    (compared with :data:`MAX_HIDDEN_WORK`)."""
    w = p["B"] * p["H"] * p["N"] * p["N"] * p["d"]
    return w // 2 if p["causal"] else w


def rule(Q, K, V, causal: bool, ref):
    """The lab's correctness rule for one case (module docstring): FlashAttention's, with the
    float32 rounding bound of a fused kernel in its floor
    (:func:`kernellab.numerics.flash_attention_rule`)."""
    return flash_attention_rule(plain_error(Q, K, V, causal, ref), ref, Q.dtype,
                                rounding=fused_rounding_bound(Q, K, V, causal))


def replay_problem(replayed: dict, causal: bool, what: str = "the call") -> str | None:
    """Grader side: None if the replayed launches and copies
    (:meth:`grader.labs._cuda.CudaLab.replay`) computed attention of the new Q, K, V by the
    lab's rule in one of the candidate arrays (``replayed``: the new Q, K, V and ``O`` of
    shape (REPLAY_SLOTS, B, H, N, d)), else why not, in plain words."""
    Q, K, V = (replayed[k] for k in ("Q", "K", "V"))
    ref, _ = attention_golden(Q, K, V, causal)
    policy = rule(Q, K, V, causal, ref)
    first = None
    for i, cand in enumerate(replayed["O"]):
        if i and np.isnan(cand).all():         # an empty slot (slot 0 is O itself)
            continue
        cmp = compare(cand, ref, policy, tile=None)
        if cmp.ok:
            return None
        first = first or cmp
    return (f"{what}'s kernels and copies, run again exactly as it ran them but on new "
            "Q, K and V, did not compute the new attention (in O: " + first.message.split(";")[0]
            + "): the result must be computed by the kernels from Q, K and V -- not on the "
            "host, and not from arrays, scalars or closures prepared on the host (pass Q, K "
            "and V themselves, views or device copies of them, to the kernels; the replay "
            "repeats launches and host-device copies, not other host code)")


def timed_params(plan: dict) -> dict:
    """The case parameters of the timed call ``plan`` asks for (normal inputs)."""
    return {"B": int(plan["B"]), "H": int(plan["H"]), "N": int(plan["N"]),
            "d": int(plan["d"]), "dtype": str(plan["dtype"]),
            "causal": bool(plan["causal"]), "kind": "normal"}


class FlashAttention(CudaLab):
    lab_id = "flash-attention"
    title = "FlashAttention forward: tiled attention with an online softmax (numba-cuda)"
    notebook = "05_flash_attention.ipynb"
    functions = {"flash_attention": ("Q", "K", "V", "O", "causal")}
    banned_names = frozenset({
        "attention_golden", "attention_plain", "plain_error", "attention_v1",
        "attention_v1_lse", "attention_v2", "attention_v2_lse", "flash_kernel",
        "flash_attention_cpu", "LADDER", "LADDER_LSE", "cupy"})
    case_timeout_s = 480.0          # a case runs twice (the replay); hidden ones up to N = 724
    first_call_timeout_s = 120.0    # the first launch compiles the kernel for a GPU (PTX)
    perf_timeout_s = 300.0
    replay_inputs = ("Q", "K", "V")
    replay_outputs = ("O",)
    params = {"B": Whole(default=1), "H": Whole(default=1), "N": Whole(),
              "d": Whole(choices=HEAD_DIMS), "dtype": OneOf(DTYPES, "float32"),
              "causal": Flag(False), "kind": OneOf(KINDS, "normal")}
    visible_seed = VISIBLE_SEED
    random_count = 5                # four up to N = 200, then one past 512 keys
    rules = (TRAFFIC, SPEED, WORK, GPU_SPEED, PLAUSIBLE)

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        keys = ("B", "H", "N", "d", "dtype", "causal", "kind")
        return [dict(zip(keys, c)) for c in CASES]

    def case_name(self, p: dict) -> str:
        return (f"{p['dtype']} {p['B']}x{p['H']}x{p['N']}x{p['d']}"
                + (" causal" if p["causal"] else "")
                + ("" if p.get("kind", "normal") == "normal" else f" {p['kind']}"))

    def case_limits(self, p: dict) -> str | None:
        return attention_limits(p, MAX_HIDDEN_WORK, MAX_HIDDEN_HEADS,
                                " (the simulator runs every thread)")

    def random_params(self, rng, i: int) -> dict:
        if i == 4:  # one long case: a kernel that only works up to some N (a fixed-size row)
            return {"B": 1, "H": 1,
                    "N": int(rng.integers(LONG_HIDDEN_N[0], LONG_HIDDEN_N[1] + 1)),
                    "d": 32, "dtype": DTYPES[int(rng.integers(0, 2))], "causal": True,
                    "kind": "normal"}
        d = HEAD_DIMS[i % 2]
        H = int(rng.integers(1, 3))
        n_max = min(200, int((MAX_HIDDEN_WORK / (H * d)) ** 0.5))
        N = int(rng.integers(1, n_max + 1))
        return {"B": 1, "H": H, "N": N, "d": d, "dtype": DTYPES[(i // 2) % 2],
                "causal": bool(rng.integers(0, 2)), "kind": "negative" if i == 2 else "normal"}

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        Q, K, V = attention_inputs(rng, p["B"], p["H"], p["N"], p["d"], p["dtype"],
                                   p.get("kind", "normal"))
        # the replay's inputs and output candidates (CudaLab.replay) travel back as outputs
        outputs = {k: (Q.shape, p["dtype"]) for k in ("O", "replay_Q", "replay_K", "replay_V")}
        outputs["replay_O"] = ((REPLAY_SLOTS, *Q.shape), p["dtype"])
        return CaseData(inputs={"Q": Q, "K": K, "V": V}, outputs=outputs,
                        call=["Q", "K", "V", "O", "causal"],
                        scalars={"causal": bool(p["causal"])})

    def warmup_data(self):
        # the first launch of each (d, dtype) compiles its kernel (GPU: the JIT; sim: PTX)
        out = []
        for d in HEAD_DIMS:
            for dt in DTYPES:
                p = {"B": 1, "H": 1, "N": 5, "d": d, "dtype": dt, "causal": True}
                out.append(("flash_attention",
                            self.case_data(Case(f"warmup {dt} d{d}", p, seed=1))))
        return out

    def compare(self, case: Case, data: CaseData, outputs: dict):
        causal = bool(data.scalars.get("causal", case.params.get("causal", False)))
        cmp = compare_attention(data, causal, outputs["O"])
        if cmp.ok and "replay_Q" in outputs and not np.isnan(outputs["replay_Q"]).all():
            why = replay_problem({k: outputs["replay_" + k] for k in ("Q", "K", "V", "O")},
                                 causal)
            if why:
                cmp.ok = False
                cmp.message = why
        return cmp


    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        # the replay (CudaLab.replay, checked in check()) shows the kernels computed O from Q,
        # K and V, however they were passed (views, device copies): no digest of reads needed
        why = work_problem(info["launches"], {}, data.inputs["Q"].size, "attention",
                           unchecked=info.get("unchecked", []))
        if why:
            return why
        if info.get("replay_error"):
            return (f"{info['replay_error']}: the call's launches and copies are run again on "
                    "new Q, K and V to check that the kernels compute O from them")
        if not info.get("replayed"):
            return tampered("the call's launches were not replayed on new inputs")
        return None

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            B, H, N, d = GPU_SHAPE
            return {"tier": "gpu", "B": B, "H": H, "N": N, "d": d, "dtype": PERF_DTYPE,
                    "causal": False, "rounds": GPU_ROUNDS}
        B, H, N, d = PERF_SHAPE
        return {"tier": "sim", "B": B, "H": H, "N": N, "d": d, "dtype": PERF_DTYPE,
                "causal": False, "profile": PROFILE}

    def planned(self, plan: dict) -> dict:
        want = timed_params(plan)
        shape = tuple(want[k] for k in ("B", "H", "N", "d"))
        return {"params": want, "what": repr(want), "scalars": {"causal": want["causal"]},
                "arrays": dict.fromkeys(("Q", "K", "V", "O"), (shape, want["dtype"]))}

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        """The base check (parameters and arrays) with the ``causal`` scalar; on the sim tier
        also the timed call's replay on new Q, K, V (:mod:`.measure`)."""
        want = self.planned(plan)
        if recheck.get("scalars") != want["scalars"]:
            return tampered(f"the timed call was not the planned {want['what']} "
                            f"({recheck.get('params')!r})")
        bad = super().perf_data_check(plan, recheck, arrays)
        if bad or plan.get("tier") != "sim":
            return bad
        if recheck.get("replay_error"):
            return str(recheck["replay_error"])
        shape, dt = want["arrays"]["Q"]
        replay = {"replay_Q": shape, "replay_K": shape, "replay_V": shape,
                  "replay_O": (REPLAY_SLOTS, *shape)}
        if any(k not in arrays or arrays[k].shape != s or arrays[k].dtype != np.dtype(dt)
               for k, s in replay.items()):
            return tampered("the timed call's replay is missing")
        return replay_problem({k: arrays["replay_" + k] for k in ("Q", "K", "V", "O")},
                              want["params"]["causal"], "the timed call")

    def rules_sim(self, m: dict) -> list[RuleResult]:
        B, H, N, d = (int(x) for x in m["shape"])
        s = np.dtype(m["dtype"]).itemsize
        sub, base = with_atomic_reads(m["submission"]), m["materialised"]
        reads = {k: (B * H * N * d * s, [str(m["digests"][k])]) for k in ("Q", "K", "V")}
        work = work_problem(sub, reads, B * H * N * d, "attention", unchecked=m["unchecked"],
                            final_digest=str(m["o_digest"]))
        rules = []
        if work is None:
            from kernellab.sim import model

            compulsory = 4 * B * H * N * d * s
            t, tb = total_counters(sub), total_counters(base)
            local = [model.local_traffic(launch["counters"], m["profile"]) for launch in sub]
            local_bytes = int(round(sum(x.device_bytes for x in local)))
            dram = t["dram_read_bytes"] + t["dram_write_bytes"] + local_bytes
            ratio = dram / compulsory
            scratch = sorted({a["nbytes"] for launch in sub for a in launch.get("arrays", [])
                              if a["elements_stored"] and a["digest_end"] != m["o_digest"]
                              and a["nbytes"] > 4 * B * H * N}, reverse=True)
            extra = (f"; arrays stored to besides O of {', '.join(map(str, scratch[:3]))} "
                     f"bytes (an N x N float32 array per head is {4 * B * H * N * N})"
                     if scratch else "")
            frame = max((x for x in local if x.frame_bytes), default=None,
                        key=lambda x: x.working_set_bytes)
            if frame is not None:
                extra += (f"; local memory (device memory behind L1/L2): a {frame.frame_bytes}-"
                          f"byte frame a thread, {frame.resident_threads} threads on an SM "
                          f"need {frame.working_set_bytes} bytes of the {frame.l1_bytes} of L1 "
                          f"beside shared memory, so {100 * frame.miss:.0f}% of local accesses "
                          f"miss L1: {local_bytes} of the DRAM bytes"
                          + (" -- a per-thread row of scores is an N x N array in device "
                             "memory too" if local_bytes else ""))
            rules.append(with_costliest(modelled(
                TRAFFIC, ratio,
                f"{dram} DRAM bytes moved (each 32-byte sector once a launch) over the "
                f"{compulsory} of reading Q, K, V and writing O once; the materialised "
                f"attention moves "
                f"{(tb['dram_read_bytes'] + tb['dram_write_bytes']) / compulsory:.1f}x"
                f"{extra}; keep S and P on chip (registers, shared memory): no N x N array in "
                "global memory"), sub))
            ts = modelled_seconds(sub, 0.0, m["profile"])
            tm = modelled_seconds(base, 0.0, m["profile"])
            rules.append(with_costliest(modelled(
                SPEED, tm["seconds"] / ts["seconds"],
                f"{m['profile']} model, B x H x N x d = {B} x {H} x {N} x {d} {m['dtype']}, each "
                f"grid counted as filling the GPU, launch overhead excluded: materialised "
                f"{fmt_seconds(tm['seconds'])} ({len(base)} launches), yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; {traffic_summary(sub)})"),
                sub))
        rules.append(kernels_gate(WORK, work, sub))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        shape = " x ".join(str(x) for x in m["shape"])
        return [
            GPU_SPEED.judge(m["speedup"], f"B x H x N x d = {shape} {m['dtype']}: yours "
                            f"{median(m['ms']):.3g} ms, materialised "
                            f"{median(m['ms_materialised']):.3g} ms (medians)"),
            PLAUSIBLE.judge(m["gbs"], f"compulsory bytes (Q, K, V read, O written) / time; limit "
                            f"= {PLAUSIBLE_VS_COPY:g} x the fastest device copy's bandwidth: "
                            "faster than that means the timer was cheated",
                            threshold=round(PLAUSIBLE_VS_COPY * max(m["gbs_copy"]), 1)),
        ]
