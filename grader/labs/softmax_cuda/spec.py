"""Lab 3 ``softmax-cuda``, grader side: a block sum reduction with warp shuffles and a fused
row softmax in numba-cuda.

Contract: ``row_sum(X, out)``, X (M, N) float32 or float16, out (M,) float32 (the sum in
float32); ``softmax(X, Y)``, X and Y (M, N) both float32 or both float16, statistics in
float32, ``-inf`` entries masked and a fully masked row written as zeros; numpy arrays in the
cases, device arrays when ``softmax`` is timed. Tiers ``sim`` and ``gpu``; the worker side is
:mod:`.measure`, the reasoning behind every rule and threshold README.md beside this file.

* cases: float64 golden references under :class:`kernellab.numerics.KAware` (row_sum) and
  :class:`kernellab.numerics.RowSoftmax` (softmax); on ``sim`` the hazard checks, results from
  kernels (:func:`device_work_problem`) and row_sum's shuffles (:func:`shuffle_problem`).
* sim rules: modelled speedup over the three-pass softmax, grids as launched, >=
  ``MIN_MODELLED_SPEEDUP``; coalesced per access site >= ``MIN_COALESCED``; a gate: the timed
  softmax computed by kernels.
* gpu rules: bandwidth >= ``MIN_COPY_FRACTION`` of a device copy's; a gate: no faster than
  ``PLAUSIBLE_VS_COPY`` x the copy.
"""

from __future__ import annotations

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, Gate, coalesced_rule, fmt_seconds, kernels_gate, modelled, modelled_seconds,
    slice_digests, total_counters, traffic_summary, with_atomic_reads, with_costliest,
    work_problem,
)
from grader.rules import Rule, median
from grader.spec import Case, CaseData, OneOf, RuleResult, Whole, case_seed
from kernellab.numerics import KAware, RowSoftmax, compare
from reference_kernels.reductions import row_sum_golden, softmax_golden, softmax_shift

VISIBLE_SEED = 20261129
DTYPES = ("float32", "float16")
#: (M, N) of the row_sum cases, in each dtype
SUM_SHAPES = [(1, 1), (3, 2), (2, 31), (2, 32), (2, 33), (3, 255), (2, 257), (2, 1000),
              (1, 1025), (1, 4097)]
#: (M, N, kind) of the softmax cases, in each dtype
SOFTMAX_SHAPES = [(1, 1, "normal"), (3, 2, "normal"), (2, 31, "normal"), (2, 33, "normal"),
                  (3, 257, "normal"), (2, 1000, "normal"), (1, 1025, "normal"),
                  (2, 4097, "normal"), (3, 100, "large"), (2, 257, "equal"),
                  (4, 300, "masked")]
KINDS = ("normal", "large", "equal", "masked")
MAX_HIDDEN_ELEMENTS = 1 << 16     # the simulator runs a few µs per memory access
SHUFFLE_MIN_N = 64                # row_sum must shuffle on rows at least this long
SHUFFLES_PER_WARP = 5             # a 32-lane tree: offsets 16, 8, 4, 2, 1

PERF_M, PERF_N = 128, 1024
MIN_MODELLED_SPEEDUP = 1.6
MIN_COALESCED = 0.5

GPU_M, GPU_N = 4096, 4096
GPU_ROUNDS = 5
MIN_COPY_FRACTION = 0.5
PLAUSIBLE_VS_COPY = 1.5


SPEED = Rule("modelled speedup over the three-pass softmax", ">=", MIN_MODELLED_SPEEDUP, "x",
             ("sim",), "fused: 2x when DRAM-bound; two kernels: 1.33x")
COALESCED = Rule("global memory coalesced", ">=", 100 * MIN_COALESCED, "%", ("sim",),
                 "per source line; the lines below it may move 10% of the sectors")
WORK = Gate("the softmax was computed by kernels", ("sim",),
            "every element of Y stored and every byte of X read by kernels")
BANDWIDTH = Rule("bandwidth vs a device copy", ">=", MIN_COPY_FRACTION, "", ("gpu",),
                 "provisional until make gpu-check measures the course's GPU")
PLAUSIBLE = Rule("fastest timed call is plausible", "max<=",
                 f"{PLAUSIBLE_VS_COPY:g} x the fastest copy of the same bytes", " GB/s", ("gpu",),
                 "faster than that means the timer was cheated")


def softmax_inputs(rng, M: int, N: int, dtype: str, kind: str = "normal") -> np.ndarray:
    """A softmax case's X (M, N) of ``dtype``: ``normal`` 3 x standard normal; ``large``
    uniform in ±1e4 (exp overflows without the max); ``equal`` one value repeated per row;
    ``masked`` normal with about 30% of entries -inf, the last row entirely -inf and, with
    three rows or more, the first row -inf but for one entry far below 0 (its softmax is 1
    there: a row max that starts at 0 instead of -inf makes exp underflow to 0/0)."""
    dt = np.dtype(dtype)
    if kind == "large":
        X = rng.uniform(-1e4, 1e4, size=(M, N))
    elif kind == "equal":
        X = np.repeat(rng.uniform(-5, 5, size=(M, 1)), N, axis=1)
    else:
        X = 3.0 * rng.standard_normal((M, N))
    if kind == "masked":
        X[rng.random((M, N)) < 0.3] = -np.inf
        if M >= 3:
            X[0, :] = -np.inf
            X[0, rng.integers(N)] = rng.uniform(-2e4, -1e3)
        X[-1, :] = -np.inf
    return X.astype(dt)


def sum_inputs(rng, M: int, N: int, dtype: str) -> np.ndarray:
    """A row_sum case's X (M, N): standard normal plus 0.5 (rows whose sum grows with N, with
    enough cancellation that the order of the additions matters)."""
    return (rng.standard_normal((M, N)) + 0.5).astype(np.dtype(dtype))


def x_digests(X: np.ndarray) -> list[str]:
    """Content digests an argument holding X has when a launch starts: all of X, or one row
    (a launch per row on numpy views copies just that row to the device)."""
    return slice_digests(X, 1)


def device_work_problem(launches: list[dict], x_bytes: int, outputs: int, what: str, *,
                        digests: list[str], unchecked=(), final_digest: str | None = None
                        ) -> str | None:
    """:func:`grader.labs._cuda.work_problem` with the one input X (``digests``: its content
    digests, :func:`x_digests`)."""
    return work_problem(launches, {"X": (x_bytes, digests)}, outputs, what,
                        unchecked=unchecked, final_digest=final_digest)


def shuffle_problem(launches: list[dict]) -> str | None:
    """None if row_sum's warps reduced with shuffles: at least one, and on average
    ``SHUFFLES_PER_WARP`` per warp that shuffled at all (a tree over 32 lanes takes 5 steps;
    one token shuffle a warp next to an atomic or shared-memory reduction is not one)."""
    t = total_counters(launches)
    warps = sum(int(launch.get("shuffle_warps", 0)) for launch in launches)
    if t["shuffles"] == 0:
        return ("row_sum executed no warp shuffle: reduce within each warp with "
                "cuda.shfl_down_sync (or shfl_xor_sync), then across warps through shared "
                "memory")
    if t["shuffles"] < SHUFFLES_PER_WARP * warps:
        return (f"row_sum executed {t['shuffles']} warp shuffle(s) in {warps} warp(s), fewer "
                f"than {SHUFFLES_PER_WARP} a warp: reducing 32 lanes takes five shuffle steps "
                "(offsets 16, 8, 4, 2, 1), then the warps' sums are combined through shared "
                "memory")
    return None


def timed_params(M: int, N: int) -> dict:
    """The case parameters of the timed call: a float32 softmax of M x N normal inputs."""
    return {"fn": "softmax", "M": M, "N": N, "dtype": "float32", "kind": "normal"}


def modelled_as_launched(launches: list[dict], profile: str = PROFILE) -> dict:
    """The launches' modelled time with each grid as launched
    (:func:`grader.labs._cuda.modelled_seconds` with ``as_launched``): no normalisation to a
    full GPU, launch overhead excluded, each launch at least its busiest block on one SM."""
    return modelled_seconds(launches, 0.0, profile, as_launched=True)


class SoftmaxCUDA(CudaLab):
    lab_id = "softmax-cuda"
    title = "Block reduction with warp shuffles and a fused row softmax in CUDA (numba-cuda)"
    notebook = "03_softmax_cuda.ipynb"
    functions = {"row_sum": ("X", "out"), "softmax": ("X", "Y")}
    perf_functions = ("softmax",)  # the speed rules time softmax alone
    banned_names = frozenset({"softmax_golden", "row_sum_golden", "sum_golden", "softmax_v1",
                              "softmax_v2", "softmax_v3", "softmax_shift", "cupy"})
    case_timeout_s = 60.0
    first_call_timeout_s = 120.0    # the first launch compiles the kernel for a GPU (PTX)
    perf_timeout_s = 300.0
    params = {"M": Whole(), "N": Whole(), "dtype": OneOf(DTYPES, "float32")}
    select_by = "fn"
    variants = {"row_sum": {}, "softmax": {"kind": OneOf(KINDS, "normal")}}
    visible_seed = VISIBLE_SEED
    rules = (SPEED, COALESCED, WORK, BANDWIDTH, PLAUSIBLE)

    # ------------------------------------------------------------------------- cases
    def visible_params(self) -> list[dict]:
        return ([{"fn": "row_sum", "M": m, "N": n, "dtype": dt}
                 for dt in DTYPES for (m, n) in SUM_SHAPES]
                + [{"fn": "softmax", "M": m, "N": n, "dtype": dt, "kind": kind}
                   for dt in DTYPES for (m, n, kind) in SOFTMAX_SHAPES])

    def case_name(self, p: dict) -> str:
        kind = p.get("kind", "normal")
        return (f"{p['fn']} {p['dtype']} {p['M']}x{p['N']}"
                + ("" if kind == "normal" else f" {kind}"))

    def _hidden(self, i: int, p: dict, seed: int) -> Case:
        # a hidden case's name leaves out the kind (its seed hashes from the name, as it did
        # before the lab framework)
        name = f"hidden{i} {p['fn']} {p['dtype']} {p['M']}x{p['N']}"
        return Case(name, p, case_seed(seed, name), hidden=True)

    def case_limits(self, p: dict) -> str | None:
        if p["M"] * p["N"] > MAX_HIDDEN_ELEMENTS:
            return (f"needs M*N <= {MAX_HIDDEN_ELEMENTS} (the simulator runs a few µs a memory "
                    f"access), not {p['M'] * p['N']}")
        return None

    def random_params(self, rng, i: int) -> dict:
        p = {"fn": ("row_sum", "softmax")[i % 2], "M": int(rng.integers(1, 5)),
             "N": int(rng.integers(1, 5000)), "dtype": DTYPES[(i // 2) % 2]}
        if p["fn"] == "softmax":
            p["kind"] = KINDS[int(rng.integers(0, len(KINDS)))]
        return p

    def case_arrays(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        M, N, dt = p["M"], p["N"], p["dtype"]
        if p["fn"] == "row_sum":
            return CaseData(inputs={"X": sum_inputs(rng, M, N, dt)},
                            outputs={"out": ((M,), "float32")}, call=["X", "out"])
        X = softmax_inputs(rng, M, N, dt, p.get("kind", "normal"))
        return CaseData(inputs={"X": X}, outputs={"Y": ((M, N), dt)}, call=["X", "Y"])

    def warmup_data(self):
        # the first launch of each function compiles its kernels (GPU: the JIT; sim: PTX)
        out = []
        for fn in ("row_sum", "softmax"):
            for dt in DTYPES:
                p = {"fn": fn, "M": 2, "N": 5, "dtype": dt, "kind": "normal"}
                out.append((fn, self.case_data(Case(f"warmup {fn} {dt}", p, seed=1))))
        return out

    def compare(self, case: Case, data: CaseData, outputs: dict):
        X = data.inputs["X"]
        N = X.shape[1]
        if case.params.get("fn") == "row_sum":
            policy = KAware(K=N, acc_dtype="float32", out_dtype="float32",
                            abs_product=np.abs(X.astype(np.float64)).sum(axis=1))
            return compare(outputs["out"], row_sum_golden(X), policy, tile=None)
        policy = RowSoftmax(N=N, acc_dtype="float32", out_dtype=X.dtype.name,
                            shift=softmax_shift(X))
        cmp = compare(outputs["Y"], softmax_golden(X), policy, tile=None)
        if not cmp.ok and cmp.nonfinite and np.isfinite(X).all() and np.abs(X).max() > 88.0:
            cmp.message += ("; inf/NaN on a row with entries above 88: exp overflows in float32 "
                            "(expf(88.8) = inf) unless the row max is subtracted first")
        elif not cmp.ok and cmp.nonfinite and np.isneginf(X).all(axis=1).any():
            cmp.message += ("; a fully masked (all -inf) row must be written as zeros: "
                            "exp(-inf - (-inf)) is NaN")
        elif (not cmp.ok and cmp.worst_index is not None
              and np.isfinite(X[cmp.worst_index[0]]).sum() == 1):
            cmp.message += (f"; row {cmp.worst_index[0]} has a single finite entry (the rest "
                            "-inf), so its softmax is 1 there whatever the value: does the row "
                            "max start at 0 instead of -inf, so that exp underflows to 0/0?")
        elif not cmp.ok and X.dtype == np.float16 and not cmp.nonfinite:
            cmp.message += ("; errors of the size of float16 rounding: are the statistics "
                            "accumulated in float16? Widen each element with float32(x) (on the "
                            "simulator, as in numpy, 0.0 + a float16 value stays float16)")
        return cmp

    def check_call(self, case: Case, data: CaseData, info: dict | None) -> str | None:
        if not info or info.get("tier") != "sim" or "launches" not in info:
            return None
        p = case.params
        X = data.inputs["X"]
        unchecked = info.get("unchecked", [])
        if p.get("fn") == "row_sum":
            why = device_work_problem(info["launches"], X.nbytes, p["M"], "row_sum",
                                      digests=x_digests(X), unchecked=unchecked)
            if why is None and p["N"] >= SHUFFLE_MIN_N:
                why = shuffle_problem(info["launches"])
            return why
        return device_work_problem(info["launches"], X.nbytes, p["M"] * p["N"], "softmax",
                                   digests=x_digests(X), unchecked=unchecked)

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        if self.tier == "gpu":
            return {"tier": "gpu", "M": GPU_M, "N": GPU_N, "rounds": GPU_ROUNDS}
        return {"tier": "sim", "M": PERF_M, "N": PERF_N, "profile": PROFILE}

    def planned(self, plan: dict) -> dict:
        M, N = int(plan["M"]), int(plan["N"])
        return {"params": timed_params(M, N), "what": f"{M} x {N} float32 softmax",
                "arrays": dict.fromkeys(("X", "Y"), ((M, N), "float32"))}

    def rules_sim(self, m: dict) -> list[RuleResult]:
        from kernellab.sim import model

        M, N = int(m["M"]), int(m["N"])
        # atomics read what they modify: modelled as reads (grader/labs/_cuda.py)
        sub, base = with_atomic_reads(m["submission"]), m["three_pass"]
        work = device_work_problem(sub, 4 * M * N, M * N, "softmax",
                                   digests=[str(m["x_digest"])], unchecked=m["unchecked"],
                                   final_digest=str(m["y_digest"]))
        rules = []
        if work is None:
            ts = modelled_as_launched(sub, m["profile"])
            tb = modelled_as_launched(base, m["profile"])
            dram = model.get_profile(m["profile"]).dram_bytes_per_s
            useful = 2.0 * 4 * M * N
            gbs, gbs_base = useful / ts["seconds"] / 1e9, useful / tb["seconds"] / 1e9
            t = total_counters(sub)
            rules.append(with_costliest(modelled(
                SPEED, tb["seconds"] / ts["seconds"],
                f"{m['profile']} model, {M} x {N} float32, each grid as launched (a grid of "
                f"fewer blocks than the {model.get_profile(m['profile']).sm_count} SMs gets "
                f"their share of the chip; your smallest: {ts['blocks']} block(s) in "
                f"{len(sub)} launch(es); a launch lasts at least its busiest block on one SM: "
                f"yours moved {ts['busiest']:.0%} of its launch's global sectors), launch "
                f"overhead excluded: three-pass "
                f"{fmt_seconds(tb['seconds'])} "
                f"({len(base)} launches, {gbs_base:.0f} GB/s effective), yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; {traffic_summary(sub)}; "
                f"{gbs:.0f} GB/s effective = {gbs * 1e9 / dram:.0%} of the "
                f"{dram / 1e9:.0f} GB/s DRAM roof); DRAM bytes per element of X: "
                f"{(t['dram_read_bytes'] + t['dram_write_bytes']) / (M * N):.1f} (a fused "
                "kernel: 8)"), sub))
            rules.append(coalesced_rule(
                sub, MIN_COALESCED, "consecutive lanes should read consecutive elements of the "
                "row (j = threadIdx.x + k * blockDim.x), not each thread its own chunk"))
        rules.append(kernels_gate(WORK, work, sub))
        return rules

    def rules_gpu(self, m: dict) -> list[RuleResult]:
        M, N = int(m["M"]), int(m["N"])
        detail = (f"{M} x {N} float32: yours {median(m['gbs']):.0f} GB/s, device-to-device copy "
                  f"{median(m['gbs_copy']):.0f} GB/s, three-pass softmax "
                  f"{median(m['gbs_three_pass']):.0f} GB/s (yours is "
                  f"{median(m['speedup_three_pass']):.2f}x faster)")
        return [
            BANDWIDTH.judge(m["copy_fraction"], detail),
            PLAUSIBLE.judge(m["gbs"], f"limit = {PLAUSIBLE_VS_COPY:g} x the fastest copy of the "
                            "same bytes; faster than that means the timer was cheated",
                            threshold=round(PLAUSIBLE_VS_COPY * max(m["gbs_copy"]), 1)),
        ]
