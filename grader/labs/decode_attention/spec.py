"""Lab 8b ``decode-attention``, grader side: paged decode attention in BF16 with grouped-query
heads and split-KV (flash-decoding) in numba-cuda.

Contract: ``decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits,
out)``: the operands of :mod:`reference_kernels.decode_attention`: q (B, Hq, d), k_cache and
v_cache (num_blocks, 16, Hkv, d), out (B, Hq, d) written, all bfloat16 (``ml_dtypes``) numpy
arrays in the cases and numba device arrays of their uint16 bits when timed (numba has no
bfloat16 type: ``x.view(np.uint16)`` works on both); block_table (B, max_blocks) and seq_lens
(B,) int32; d in {64, 128}; Hq / Hkv in {1, 4, 8}; ``scale`` a float (1/sqrt(d));
``num_splits`` >= 1: how many parts to cut each sequence's keys into (a part may hold no key).
Statistics and products in float32, out rounded to nearest even. Tiers ``sim`` and ``gpu``;
the worker side is :mod:`.measure`, the reasoning behind every rule and threshold README.md
beside this file.

* cases: the float64 golden output under FlashAttention's test rule (at most 2x a plain BF16
  implementation's error plus one BF16 ulp at max|o|: :func:`rule`); unused cache slots NaN
  and unused block-table entries -1; empty splits; lse past 88.7 (the merge must subtract the
  max); a last key that carries the output (``TAIL_SHIFT``); on ``sim`` the hazard checks and
  out stored by kernels.
* sim rules, batch 1 (B = 1, Hkv = 1, Hq = 8, d = 128): share of the modelled DRAM roof on
  the compulsory K and V bytes of 2048 keys at ``PERF_SPLITS`` splits >= ``MIN_ROOF_SHARE``;
  the split's gain (modelled time at 1 split / at ``GAIN_SPLITS``, ``GAIN_SEQ`` keys) >=
  ``MIN_SPLIT_GAIN``; a gate: the timed call computed by kernels that read all of K and V.
* gpu rule (provisional until ``make gpu-check`` measures it): bandwidth on the K and V bytes
  >= ``MIN_COPY_FRACTION`` of a device copy's.

Thresholds, frozen from the reference solution (``solutions/08b_decode_attention.ipynb``,
chapter 8's v3) with the known-wrong submissions' figures beside them (a100 profile, measured
by ``kernellab grade --json`` on the ``submissions/wrong`` diffs)::

    figure at batch 1          solution   per_q_head_reads   no_split   threshold
    share of the DRAM roof     64.8%      43.7%              4.0%       >= 50%
    split-KV gain              5.95x      6.78x              1.00x      >= 4x

(per_q_head_reads gains more from splitting than the solution because at 1 split it already
has Hq = 8 blocks; its mistake is the roof's: 8x the K and V bytes through L2.)
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, Gate, fmt_seconds, kernels_gate, modelled, modelled_seconds,
    total_counters, traffic_summary, unchecked_problem, with_costliest, work_problem,
)
from grader.rules import Rule, median
from grader.spec import Case, CaseData, OneOf, RuleResult, Whole
from kernellab.numerics import compare, flash_attention_rule
from reference_kernels.decode_attention import decode_golden, plain_error

VISIBLE_SEED = 20261206
BLOCK_SIZE = 16
HEAD_DIMS = (64, 128)
GROUPS = (1, 4, 8)
KINDS = ("normal", "large", "tail")
#: q and k of the "large" cases are standard normal + LARGE_SHIFT: scores about
#: LARGE_SHIFT^2 sqrt(d) (128 at d = 64), so a split's lse passes 88.7 and exp(lse) overflows
#: float32 unless the merge subtracts the largest lse first
LARGE_SHIFT = 4.0
#: "tail" cases: q and the last key of each sequence are standard normal + TAIL_SHIFT, so that
#: key scores about TAIL_SHIFT^2 sqrt(d) above the rest (12.5 at d = 64: e^12.5 outweighs a
#: thousand keys) and dominates the output; a dropped last key (a count of full blocks, an
#: off-by-one end) is an error of the order of |v|, where among a thousand equal keys it is
#: one thousandth of that and can pass the rule
TAIL_SHIFT = 1.25
#: (B, Hq, Hkv, d, L, num_splits, kind) of the visible cases; L is the longest sequence,
#: sequence 1 (with B >= 2) has one key, the others random lengths in 1..L (case_arrays)
CASES = [
    (1, 1, 1, 64, 1, 1, "normal"),          # one key
    (1, 4, 1, 128, 1, 4, "normal"),         # one key, three empty splits
    (1, 4, 1, 64, 32, 4, "normal"),         # two full blocks, two empty splits
    (3, 8, 2, 64, 37, 1, "normal"),         # GQA 4 on 2 kv heads, lengths 37, 1, random
    (3, 8, 1, 128, 50, 8, "normal"),        # GQA 8, empty splits in short sequences
    (2, 4, 4, 64, 33, 2, "normal"),         # GQA 1 (multi-head)
    (2, 16, 2, 64, 20, 3, "normal"),        # GQA 8 on 2 kv heads
    (1, 8, 1, 128, 1025, 16, "normal"),     # one key past 64 blocks
    (1, 4, 1, 64, 1027, 7, "normal"),       # three keys past, no empty split
    (2, 8, 2, 64, 40, 3, "large"),          # lse > 88.7: the merge must subtract the max
    (1, 4, 1, 64, 1025, 16, "tail"),        # the one key past 64 blocks carries the output
    (3, 8, 2, 128, 37, 1, "tail"),          # each sequence's last key carries its output
]
#: cap on sum(L) * Hq * d of a hidden case (the simulator runs every lane of every key)
MAX_HIDDEN_WORK = 1 << 21

PERF_SEQ, PERF_HQ, PERF_HKV, PERF_D = 2048, 8, 1, 128
PERF_SPLITS = 32
#: the split's gain is measured on a shorter sequence: at 1 split a long one runs in one block,
#: whose every access the compiled simulator logs, and 2048 keys overflow its log (the greenlet
#: re-run takes minutes); 256 keys at 16 splits is one cache block a split
GAIN_SEQ, GAIN_SPLITS = 256, 16
MIN_ROOF_SHARE = 0.5
MIN_SPLIT_GAIN = 4.0

GPU_SHAPE = (1, 32, 8, 128, 16384)          # B, Hq, Hkv, d, L
GPU_SPLITS = 64
GPU_ROUNDS = 5
MIN_COPY_FRACTION = 0.3

ROOF = Rule("share of the DRAM roof at batch 1", ">=", 100 * MIN_ROOF_SHARE, "%", ("sim",),
            "the K and V bytes at the DRAM peak / the call's modelled time, grids as launched")
GAIN = Rule("split-KV gain at batch 1", ">=", MIN_SPLIT_GAIN, "x", ("sim",),
            "modelled time at 1 split / at the planned splits: a few blocks use a few SMs")
WORK = Gate("the attention was computed by kernels", ("sim",),
            "every element of out stored and every byte of K and V read by kernels")
BANDWIDTH = Rule("bandwidth on K and V vs a device copy", ">=", MIN_COPY_FRACTION, "",
                 ("gpu",), "provisional until make gpu-check measures the course's GPU")


def bf16(x: np.ndarray) -> np.ndarray:
    """uint16 bits (or a bfloat16 array) as bfloat16 (:func:`kernellab.bf16.as_bf16`)."""
    from kernellab.bf16 import as_bf16

    return as_bf16(x)


def seq_lens_of(rng, B: int, L: int) -> list[int]:
    """The sequence lengths of a case: L, then 1, then random in 1..L."""
    lens = [L, 1][:B] + [int(x) for x in rng.integers(1, L + 1, size=max(0, B - 2))]
    return lens


def operands(p: dict, rng) -> tuple:
    """A case's (q, k_cache, v_cache, block_table, seq_lens): q, k_cache, v_cache bfloat16."""
    # imported here: the kernels module defines kernels, which the worker's process must not do
    # before kernellab.codegen.apply
    from kernellab.kernels.decode_attention import paged_operands

    lens = seq_lens_of(rng, p["B"], p["L"])
    kind = p.get("kind", "normal")
    q, k, v, bt, sl = paged_operands(rng, lens, p["Hq"], p["Hkv"], p["d"], BLOCK_SIZE,
                                     shift=LARGE_SHIFT if kind == "large" else 0.0,
                                     tail_shift=TAIL_SHIFT if kind == "tail" else 0.0)
    return q, k, v, bt, sl


def rule(ops, scale: float, ref):
    """FlashAttention's test rule for one case (:func:`kernellab.numerics.
    flash_attention_rule`): 2 x the error of a plain BF16 decode attention
    (:func:`reference_kernels.decode_attention.plain_error`) plus one BF16 ulp at max|o|. The
    float32 rounding of a fused kernel (about 2^-24 relative per step) is 2^16 times below
    that ulp: no term of its own."""
    from kernellab.numerics import _BF16

    return flash_attention_rule(plain_error(*ops, scale, ref), ref, _BF16)


def diagnose(p: dict, ops, out) -> str:
    """What a non-finite output most likely means, from which sequences it hit."""
    bad = ~np.isfinite(out.astype(np.float32)).all(axis=(1, 2))
    if not bad.any():
        if p.get("kind") == "tail":
            return ("here each sequence's last key carries most of the weight: a last key "
                    "left out (full blocks only, an end off by one) shows as this error")
        return ""
    if p.get("kind") == "large":
        return ("inf/NaN with every lse above 88.7: exp(lse) overflows float32; merge with "
                "M = max lse first: w_s = exp(lse_s - M)")
    lens = ops[4][bad]
    blocks = -(-lens // BLOCK_SIZE)
    empty = blocks < p["num_splits"]
    ragged = lens % BLOCK_SIZE != 0
    if empty.all() and not ragged.any():
        return ("NaN in sequences whose blocks are fewer than num_splits: a split with no key "
                "must give lse = -inf and o = 0 (0 * NaN is NaN: never divide by its zero sum)")
    if ragged.all() and not empty.any():
        return ("NaN in sequences that end inside a block: slots past seq_lens[b] (NaN here) "
                "were read; stop at seq_lens[b], and read block_table[b, t // block_size]")
    return ("NaN: slots past seq_lens[b] or block-table entries past the last block (NaN and "
            "-1 here) were read, or a split with no key divided by its zero sum")


@contextlib.contextmanager
def _compiled_always(inner):
    """``inner`` (a context manager) run with ``kernellab.sim.configure(compiled="always")`` on
    the sim tier, the previous setting restored after."""
    from kernellab import device

    if device.select_tier() != "sim":
        with inner as info:
            yield info
        return
    from kernellab import sim

    old = sim.configure(compiled="always")
    try:
        with inner as info:
            yield info
    finally:
        sim.configure(**old)


def timed_params() -> dict:
    return {"B": 1, "Hq": PERF_HQ, "Hkv": PERF_HKV, "d": PERF_D, "L": PERF_SEQ,
            "num_splits": PERF_SPLITS, "kind": "normal"}


class DecodeAttention(CudaLab):
    lab_id = "decode-attention"
    title = "Paged decode attention: BF16, grouped-query heads, split-KV (numba-cuda)"
    notebook = "08b_decode_attention.ipynb"
    functions = {"decode_attention": ("q", "k_cache", "v_cache", "block_table", "seq_lens",
                                      "scale", "num_splits", "out")}
    banned_names = frozenset({"decode_v1", "decode_v2", "decode_v3", "decode_golden",
                              "decode_plain", "merge_lse", "LADDER", "KERNELS", "cupy"})
    case_timeout_s = 120.0
    first_call_timeout_s = 180.0    # compiles the kernels for a GPU (PTX) and the sim's path
    perf_timeout_s = 300.0
    params = {"B": Whole(), "Hq": Whole(), "Hkv": Whole(), "d": Whole(choices=HEAD_DIMS),
              "L": Whole(), "num_splits": Whole(), "kind": OneOf(KINDS, "normal")}
    visible_seed = VISIBLE_SEED
    random_count = 4
    rules = (ROOF, GAIN, WORK, BANDWIDTH)

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        keys = ("B", "Hq", "Hkv", "d", "L", "num_splits", "kind")
        return [dict(zip(keys, c)) for c in CASES]

    def case_name(self, p: dict) -> str:
        return (f"B{p['B']} Hq{p['Hq']}/Hkv{p['Hkv']} d{p['d']} L{p['L']} "
                f"splits{p['num_splits']}" + ("" if p.get("kind", "normal") == "normal"
                                              else f" {p['kind']}"))

    def case_limits(self, p: dict) -> str | None:
        if p["Hq"] % p["Hkv"] or p["Hq"] // p["Hkv"] not in GROUPS:
            return f"needs Hq / Hkv in {GROUPS}, not {p['Hq']} / {p['Hkv']}"
        work = p["B"] * p["L"] * p["Hq"] * p["d"]
        if work > MAX_HIDDEN_WORK:
            return f"needs B * L * Hq * d <= {MAX_HIDDEN_WORK} (the simulator's cost), not {work}"
        return None

    def random_params(self, rng, i: int) -> dict:
        Hkv = int(rng.integers(1, 3))
        Hq = Hkv * GROUPS[i % 3]
        d = HEAD_DIMS[i % 2]
        B = int(rng.integers(1, 4))
        L = int(rng.integers(1, max(2, MAX_HIDDEN_WORK // (B * Hq * d * 4))))
        return {"B": B, "Hq": Hq, "Hkv": Hkv, "d": d, "L": L,
                "num_splits": int(rng.integers(1, 9)), "kind": KINDS[i % 3]}

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        q, k, v, bt, sl = operands(p, np.random.default_rng(case.seed))
        return CaseData(inputs={"q": q, "k_cache": k, "v_cache": v, "block_table": bt,
                                "seq_lens": sl},
                        outputs={"out": (q.shape, "bfloat16")},
                        call=list(self.functions["decode_attention"]),
                        scalars={"scale": 1.0 / math.sqrt(p["d"]),
                                 "num_splits": int(p["num_splits"])})

    def warmup_data(self):
        # every launch of a first call compiles (GPU: PTX; sim: the compiled path as well,
        # call_probe); one warm-up per head dimension
        out = []
        for d in HEAD_DIMS:
            p = {"B": 8, "Hq": 8, "Hkv": 1, "d": d, "L": 3, "num_splits": 64, "kind": "normal"}
            out.append(("decode_attention", self.case_data(Case(f"warmup d{d}", p, seed=1))))
        return out

    def compare(self, case: Case, data: CaseData, outputs: dict):
        ops = tuple(bf16(data.inputs[k]) if k in ("q", "k_cache", "v_cache") else data.inputs[k]
                    for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens"))
        scale = float(data.scalars.get("scale", 1.0 / math.sqrt(ops[0].shape[-1])))
        ref, _ = decode_golden(*ops, scale)
        out = bf16(outputs["out"])
        cmp = compare(out, ref, rule(ops, scale, ref), tile=None)
        if not cmp.ok:
            hint = diagnose(case.params, ops, out)
            if hint:
                cmp.message += "; " + hint
        return cmp

    def call_probe(self, arrays=None):
        """:meth:`grader.labs._cuda.CudaLab.call_probe` with, on the sim tier, every launch the
        simulator's compiled path can express taken on it (``compiled="always"``: the same
        checks and counters, entry for entry, :mod:`kernellab.sim.compiled`), so that the long
        cases' small grids do not run thread by thread."""
        return _compiled_always(super().call_probe(arrays))

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        return work_problem(info["launches"], {}, data.inputs["q"].size, "decode attention",
                            unchecked=info.get("unchecked", []))

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            B, Hq, Hkv, d, L = GPU_SHAPE
            return {"tier": "gpu", "B": B, "Hq": Hq, "Hkv": Hkv, "d": d, "L": L,
                    "num_splits": GPU_SPLITS, "rounds": GPU_ROUNDS}
        return {"tier": "sim", "B": 1, "Hq": PERF_HQ, "Hkv": PERF_HKV, "d": PERF_D,
                "L": PERF_SEQ, "num_splits": PERF_SPLITS, "gain_L": GAIN_SEQ,
                "gain_splits": GAIN_SPLITS, "profile": PROFILE}

    def planned(self, plan: dict) -> dict:
        B, Hq, Hkv, d, L = (int(plan[k]) for k in ("B", "Hq", "Hkv", "d", "L"))
        nb = B * -(-L // BLOCK_SIZE)
        return {"params": {"B": B, "Hq": Hq, "Hkv": Hkv, "d": d, "L": L,
                           "num_splits": int(plan["num_splits"]), "kind": "normal"},
                "what": f"B={B} Hq={Hq} Hkv={Hkv} d={d}, {L} keys, {plan['num_splits']} splits",
                "arrays": {"q": ((B, Hq, d), "uint16"), "out": ((B, Hq, d), "uint16"),
                           "k_cache": ((nb, BLOCK_SIZE, Hkv, d), "uint16"),
                           "v_cache": ((nb, BLOCK_SIZE, Hkv, d), "uint16")}}

    def rules_sim(self, m: dict) -> list[RuleResult]:
        from kernellab.sim import model

        p = model.get_profile(m["profile"])
        L, Hq, Hkv, d, S = (int(m[k]) for k in ("L", "Hq", "Hkv", "d", "num_splits"))
        kv = 2 * L * Hkv * d * 2
        split = m["split"]
        reads = {k: (kv // 2, [str(m["digests"][k])]) for k in ("k_cache", "v_cache")}
        work = (unchecked_problem(split, m["unchecked"])
                or work_problem(split, reads, Hq * d, "decode attention",
                                final_digest=str(m["out_digest"])))
        rules = []
        if work is None:
            ts = modelled_seconds(split, 0.0, m["profile"], as_launched=True)
            g1 = modelled_seconds(m["gain_one"], 0.0, m["profile"], as_launched=True)
            gs = modelled_seconds(m["gain_split"], 0.0, m["profile"], as_launched=True)
            roof = kv / p.dram_bytes_per_s
            t = total_counters(split)
            dram = t["dram_read_bytes"] + t["dram_write_bytes"]
            rules.append(with_costliest(modelled(
                ROOF, 100 * roof / ts["seconds"],
                f"{m['profile']} model, B=1, {L} keys, Hq={Hq} on Hkv={Hkv}, d={d}, "
                f"{S} splits, each grid as launched (a grid of fewer blocks than the "
                f"{p.sm_count} SMs gets their share of L2; your smallest: {ts['blocks']} "
                f"block(s)): K and V are {kv} bytes, {fmt_seconds(roof)} at "
                f"{p.dram_bytes_per_s / 1e9:.0f} GB/s; yours {fmt_seconds(ts['seconds'])} "
                f"({ts['bound']}-bound; {traffic_summary(split)}; {dram} DRAM bytes, "
                f"{t['global_load_sectors'] * 32 / kv:.2f}x the K and V bytes loaded through "
                "L2: a group's K and V should be read once for its Hq / Hkv query heads)"),
                split))
            rules.append(with_costliest(modelled(
                GAIN, g1["seconds"] / gs["seconds"],
                f"B=1, {m['gain_L']} keys, Hq={Hq} on Hkv={Hkv}, d={d}: at 1 split "
                f"{fmt_seconds(g1['seconds'])} (smallest grid {g1['blocks']} block(s)), at "
                f"{m['gain_splits']} splits {fmt_seconds(gs['seconds'])} (smallest grid "
                f"{gs['blocks']}): at batch 1 only splitting the keys gives the GPU's SMs "
                "blocks to run"), m["gain_split"]))
        rules.append(kernels_gate(WORK, work, split))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        detail = (f"B={m['B']} Hq={m['Hq']} Hkv={m['Hkv']} d={m['d']}, {m['L']} keys, "
                  f"{m['num_splits']} splits: yours {median(m['gbs']):.0f} GB/s on the K and V "
                  f"bytes, a device copy {median(m['gbs_copy']):.0f} GB/s")
        return [BANDWIDTH.judge(m["copy_fraction"], detail)]
