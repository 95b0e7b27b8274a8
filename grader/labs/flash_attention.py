"""Lab 5 ``flash-attention``: FlashAttention's forward pass in numba-cuda.

The student writes one launch function (kernel style: the result goes into the caller's array):

* ``flash_attention(Q, K, V, O, causal)``: for every batch b and head h,
  ``O = softmax(Q K^T / sqrt(d)) V`` with, when ``causal`` is True, key j masked for query i
  whenever j > i. Q, K, V, O (B, H, N, d), all float32 or all float16; d in {32, 64}; any
  N >= 1 (1, 17, 100, 257: not multiples of the block size); statistics (row max and sum) and
  both products accumulated in float32; O rounded once to its dtype; Q, K, V not modified.

It is called with numpy arrays in the correctness cases (numba copies them to the device and
back) and with numba device arrays in the performance phase; ``causal`` is a Python bool.

Correctness (both tiers), against the float64 golden reference of the same rounded inputs
(:func:`reference_kernels.attention.attention_golden`): FlashAttention's own test rule
(Dao-AILab/flash-attention, ``tests/test_flash_attn.py``; the one-ulp floor as in
``hopper/test_flash_attn.py``),
``|O - O_ref| <= 2 max|O_plain - O_ref| + 1 ulp(max|O_ref|) + R``, with
``O_plain`` a plain attention in the kernel's own dtype with its operations reordered
(:func:`reference_kernels.attention.attention_plain`, its products and sums left to right in
float32 like a one-pass kernel), measured on each case's inputs, and ``R`` the derived
float32 rounding bound of a fused kernel
(:func:`reference_kernels.attention.fused_rounding_bound`; :func:`rule`,
:func:`kernellab.numerics.flash_attention_rule`). **Deviation from the issue's rule, for
float32 only**: without ``R`` a correct float32 kernel failed 1% of normal inputs and 20% of
inputs with large scores (150 seeds), because the float32 baseline computes at the kernel's
own precision and twice its max error is a coin toss, not a margin; FlashAttention's tests
apply the rule to float16/bfloat16 only. For float16 ``R`` is a few percent of the rest of
the budget (3% on normal inputs, 4% with scores of several hundred), so float16 is graded by
the issue's rule nearly as it stands; for float32 ``R`` is 50-80 times the measured part at
N = 100, d = 64, so float32 is in effect graded by the derived bound -- which a float32 kernel
keeping P, or reading V, in float16 still misses several times over. The reference solution uses up to about 15% of the
float16 budget and 3% of the float32 one (``R`` is a worst-case, c sqrt(d) bound).

When a case fails, the grader looks for the known mistakes and names the one the output matches
(each checked against the same rule): scores scaled by 1/d instead of 1/sqrt(d); the output
never divided by the row sum; keys past N in a zero-filled tail tile counted with score 0; a
causal mask off by one (the diagonal masked, or the next key let in) or not applied (or applied
to a non-causal call); the running max started at 0 instead of -inf (on a row whose scores all
lie far below zero every exp(s - 0) underflows float32: l = 0, O = 0/0); the running output not
rescaled by exp(m_old - m_new) when a row's running max grows (FlashAttention's loop simulated
for K/V blocks of 1 to 256 rows); NaN from a row whose every key in a block is masked
(exp(-inf - (-inf))); inf or NaN from exp overflowing on large scores; float16 accumulation
(errors within 20 budgets).

Cases: N in 1, 17, 33, 40, 100, 257; d 32 and 64; float32 and float16; causal on and off;
B x H up to 2 x 3; a case with scores of several hundred (Q and K scaled by 10: exp overflows
unless the running max is subtracted); three small cases (float32 and float16, causal and not)
whose every score lies far below zero (:data:`NEGATIVE_SHIFT`: about -141 at d = 32), where a
running max started at 0 gives l = 0. Hidden cases from a seed: four random ones up to N = 200
(one with scores far below zero) and one causal d = 32 case with 513 to 640 keys, past the 512 a
kernel with a fixed-size row or tile stops at; a hidden-case file may ask for up to
:data:`MAX_HIDDEN_WORK` (the simulator's cost, measured there). On the ``sim`` tier every case
also runs the simulator's checks (race detector: a missing barrier before the next K/V tile
overwrites shared memory fails there; out-of-bounds accesses, reads of unwritten shared memory, divergent barriers, the
GPU compile), and the result must come from kernels: every launch on the sim tier's executor
and reading arrays only from its arguments, as many distinct elements of global memory stored
to as O has (:func:`grader.labs._cuda.work_problem`), and **the replay**: the call's launches
and host-device copies are run again, exactly as recorded, on new Q, K and V
(:meth:`grader.labs._cuda.CudaLab.replay`, :func:`kernellab.sim.replay`), and one of the
arrays they wrote must then hold the new attention by the same rule. No host code runs in the
replay, so a result computed on the host -- copied in through an argument, scalars, a closure
or an ``@njit`` function, written over O, or prepared from a host-side copy of the inputs --
stays what it was and fails, while a kernel that reads Q, K, V (or views or device copies of
them) recomputes. The timed call is replayed the same way.

Performance, ``sim`` tier (deterministic; :mod:`kernellab.sim.model`, profile a100): one
call on ``PERF_SHAPE`` (float16, not causal) with device arrays, against chapter 5's
materialised attention (:func:`kernellab.kernels.attention_cuda.attention_v1`: scores kernel,
row softmax in place, P V):

* **DRAM traffic / compulsory** <= ``MAX_TRAFFIC``: the DRAM bytes the launches moved (each
  sector once a launch: a perfect L2) over the compulsory Q, K, V read and O written. A fused
  kernel moves 1.0x plus its statistics; an N x N intermediate in global memory (S or P, even
  inside one kernel) adds at least 2 N^2 s bytes of writes and reads: 3x at the timed shape
  for a float16 S, 5x for a float32 one (the materialised baseline: 9x). Local memory counts
  too: a ``cuda.local`` array is device memory behind L1/L2, and what the frames of an SM's
  resident threads do not fit in L1 is charged as DRAM bytes
  (:func:`kernellab.sim.model.local_traffic`; the detail gives the frame, the L1 it competes
  for and the bytes). A per-thread row of N scores (2 KiB a thread) is an N x N array there;
  chapter 5's v2 keeps its block of Bc scores (a 4 Bc-byte frame; q and o are in registers),
  which fits. This is the rule the lab's "no N x N array in global memory" is graded by.
* **modelled speedup over the materialised attention** >= ``MIN_MODELLED_SPEEDUP``: the sum of
  the launches' modelled times, each grid counted as filling the GPU, launch overhead
  excluded (grader/labs/_cuda.py). Chapter 5's v2 models at about 2.5x (shared-memory bound).
* a gate: the timed call's O came from kernels (every element stored by a launch, Q, K and V
  read in full, the final O what a launch stored), and its launches, replayed on new Q, K, V,
  compute their attention (the re-check).

Performance, ``gpu`` tier (CUDA events, :func:`kernellab.timing.interleaved`): ``GPU_SHAPE``
float16, fresh inputs every call, interleaved with the materialised attention and a
device-to-device copy; every timed call's output is checked (two heads against the golden
reference) right after it returns, outside the timer. Rule: speedup over the materialised
attention >= ``MIN_GPU_SPEEDUP`` (median of per-round ratios); a gate: the compulsory bytes
moved no faster than ``PLAUSIBLE_VS_COPY`` x the copy's bandwidth. Provisional until
``make gpu-check`` has measured the course's GPU.

The replay repeats launches with the grid each had, refuses kernels whose globals were rebound
since (a device function swapped for host code), arrays of other types than numpy's and
numba's (a subclass could run host code when read), and gives every launch argument the host
filled (a flag, not a recorded copy or launch) the content it had at its launch; its new inputs
come from fresh entropy. Output pieces the host assembled from copies (``O[b, h] =
dO.copy_to_host()``) are put back where they stood (:func:`grader.labs._cuda.assemble_pieces`).

Known limits: a design that converts or rearranges the inputs on the host before launching
(``Q.astype(np.float32)``), or re-lays out a device result on the host (a padded or
transposed O sliced into place), fails the replay -- the lab asks for the work on the device;
the
traffic rule counts DRAM bytes, so a split-K (FlashDecoding) design that
writes float32 partial outputs for a later reduction can exceed it at the timed shape; the
rules see what kernels read and stored, not what they computed; the causal block skipping is
taught and counted in chapter 5 but not graded (the timed call is not causal).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import (
    PROFILE, REPLAY_SLOTS, CudaLab, fmt_seconds, kernels_gate, launch_dict, modelled_seconds,
    planned_arrays_problem, total_counters, traffic_summary, with_atomic_reads, work_problem,
    with_costliest,
)
from grader.labs._gemm import case_seed
from grader.spec import (Case, CaseData, HiddenCases, Flag, OneOf, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)
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
#: the K/V block sizes the no-rescale diagnosis simulates
DIAGNOSIS_BLOCKS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256)
#: an alternative explanation matches when the output is within this many budgets of it
MATCH_BUDGETS = 4.0
#: the float16-accumulation hint is given for errors up to this many budgets (a float16 sum of
#: 257 terms uses about 2; an error of the outputs' own size, thousands)
FLOAT16_HINT_BUDGETS = 20.0

PERF_SHAPE = (1, 1, 128, 32)        # B, H, N, d; float16, not causal
PERF_DTYPE = "float16"
MAX_TRAFFIC = 1.5
MIN_MODELLED_SPEEDUP = 1.5

GPU_SHAPE = (4, 8, 1024, 64)
GPU_ROUNDS = 5
MIN_GPU_SPEEDUP = 1.5
PLAUSIBLE_VS_COPY = 1.5


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


def max_from_zero(Q, K, V, causal: bool) -> np.ndarray:
    """What FlashAttention's loop computes when the running max m starts at 0 instead of
    -inf: m ends at max(0, row max), and each p = exp(s - m) is taken in float32, so on a row
    whose scores all lie far below zero every p underflows to 0, l = 0 and O = 0/0. A
    diagnosis of the grader's, (B, H, N, d) float64 (NaN on such rows)."""
    Q, K, V = (np.asarray(x, np.float64) for x in (Q, K, V))
    N, d = Q.shape[2], Q.shape[3]
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.sqrt(d)
    if causal:
        S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
    m = np.maximum(S.max(axis=-1, keepdims=True), 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        p = np.exp((S - m).astype(np.float32)).astype(np.float64)
        return np.matmul(p, V) / p.sum(axis=-1, keepdims=True)


def _matches_max_from_zero(out, alt, bound) -> bool:
    """True if ``alt`` (:func:`max_from_zero`) has rows with l = 0 (told apart from the
    reference, which has none) and ``out`` is non-finite on exactly those rows and within
    MATCH_BUDGETS x ``bound`` of ``alt`` elsewhere (a zero output names nothing)."""
    out = np.asarray(out, np.float64)
    dead = ~np.isfinite(alt).all(axis=-1)
    if not dead.any():
        return False
    bad = ~np.isfinite(out).all(axis=-1)
    if (bad != dead).any():
        return False
    live = ~dead
    bound = np.broadcast_to(np.asarray(bound, np.float64), out.shape)
    return bool((np.abs(out[live] - alt[live]) <= MATCH_BUDGETS * bound[live]).all())


def unrescaled(Q, K, V, causal: bool, Bc: int) -> np.ndarray:
    """What FlashAttention's loop computes (float64) when the running *output* is not rescaled
    by exp(m_old - m_new) as the running max grows (the running sum is): K/V blocks of ``Bc``
    rows in order, ``o += exp(S_blk - m_new) V_blk``, ``O = o / l``. A diagnosis of the
    grader's, (B, H, N, d)."""
    Q, K, V = (np.asarray(x, np.float64) for x in (Q, K, V))
    B, H, N, d = Q.shape
    S = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.sqrt(d)
    if causal:
        S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
    m = np.full((B, H, N, 1), -np.inf)
    l = np.zeros((B, H, N, 1))
    o = np.zeros((B, H, N, d))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for k0 in range(0, N, Bc):
            s = S[..., k0:k0 + Bc]
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            live = np.isfinite(m_new)
            p = np.where(live, np.exp(s - np.where(live, m_new, 0.0)), 0.0)
            alpha = np.where(live, np.exp(m - np.where(live, m_new, 0.0)), 1.0)
            l = l * alpha + p.sum(axis=-1, keepdims=True)
            o = o + np.matmul(p, V[..., k0:k0 + Bc, :])
            m = np.where(live, m_new, m)
        return o / l


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


def _matches(out: np.ndarray, alt: np.ndarray, bound, ref, masked_rows=None) -> bool:
    """True if ``out`` is within MATCH_BUDGETS x ``bound`` of the alternative ``alt``, with
    non-finite values allowed only in ``masked_rows`` (bool (B, H, N): rows the alternative
    leaves without a key, whose 0/0 a kernel may write as NaN), and the alternative is told
    apart from the reference ``ref`` (off by more than 2 MATCH_BUDGETS budgets somewhere:
    an alternative that differs by less, say one extra key among 257, names nothing)."""
    bound_full = np.broadcast_to(np.asarray(bound, np.float64), np.shape(out))
    with np.errstate(invalid="ignore"):
        apart = np.abs(np.asarray(alt, np.float64) - ref) > 2 * MATCH_BUDGETS * bound_full
    if not np.any(apart | (np.isfinite(alt) != np.isfinite(ref))):
        return False
    out = np.asarray(out, np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        if masked_rows is None or (bad.any(axis=-1) & ~masked_rows).any():
            return False
    ok = np.isfinite(out)
    if not ok.any():
        return False
    bound = np.broadcast_to(np.asarray(bound, np.float64), out.shape)
    return bool((np.abs(out[ok] - alt[ok]) <= MATCH_BUDGETS * bound[ok]).all())


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

    # ------------------------------------------------------------------------- cases
    @staticmethod
    def _name(p: dict) -> str:
        return (f"{p['dtype']} {p['B']}x{p['H']}x{p['N']}x{p['d']}"
                + (" causal" if p["causal"] else "")
                + ("" if p.get("kind", "normal") == "normal" else f" {p['kind']}"))

    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for (B, H, N, d, dt, causal, kind) in CASES:
            p = {"B": B, "H": H, "N": N, "d": d, "dtype": dt, "causal": causal, "kind": kind}
            name = self._name(p)
            out.append(Case(name, p, case_seed(VISIBLE_SEED, name)))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = f"hidden{i} {self._name(p)}"
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(4):
                d = HEAD_DIMS[i % 2]
                H = int(rng.integers(1, 3))
                n_max = min(200, int((MAX_HIDDEN_WORK / (H * d)) ** 0.5))
                N = int(rng.integers(1, n_max + 1))
                p = {"B": 1, "H": H, "N": N, "d": d,
                     "dtype": DTYPES[(i // 2) % 2], "causal": bool(rng.integers(0, 2)),
                     "kind": "negative" if i == 2 else "normal"}
                name = f"hidden{i} {self._name(p)}"
                out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
            # one long case: a kernel that only works up to some N (a fixed-size row or tile)
            p = {"B": 1, "H": 1, "N": int(rng.integers(LONG_HIDDEN_N[0], LONG_HIDDEN_N[1] + 1)),
                 "d": 32, "dtype": DTYPES[int(rng.integers(0, 2))], "causal": True,
                 "kind": "normal"}
            name = f"hidden4 {self._name(p)}"
            out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the
        simulator's cost caps. Raises ValueError in plain words."""
        q = parse_hidden_case(i, p, {
            "B": Whole(default=1), "H": Whole(default=1), "N": Whole(),
            "d": Whole(choices=HEAD_DIMS), "dtype": OneOf(DTYPES, "float32"),
            "causal": Flag(False), "kind": OneOf(KINDS, "normal")})
        B, H, N, d = q["B"], q["H"], q["N"], q["d"]
        if hidden_work(q) > MAX_HIDDEN_WORK:
            raise hidden_case_error(i, f"needs B*H*N*N*d (halved when causal) <= "
                                       f"{MAX_HIDDEN_WORK} (the simulator runs every thread), "
                                       f"not {hidden_work(q)}")
        if B * H > MAX_HIDDEN_HEADS:
            raise hidden_case_error(i, f"needs B*H <= {MAX_HIDDEN_HEADS}, not {B * H}")
        return q

    def case_data(self, case: Case) -> CaseData:
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

    def check(self, case: Case, data: CaseData, outputs: dict):
        Q, K, V = (data.inputs[k] for k in ("Q", "K", "V"))
        causal = bool(data.scalars.get("causal", case.params.get("causal", False)))
        ref, _ = attention_golden(Q, K, V, causal)
        policy = rule(Q, K, V, causal, ref)
        out = outputs["O"]
        cmp = compare(out, ref, policy, tile=None)
        if not cmp.ok:
            hint = self.diagnose(Q, K, V, causal, out, policy.bounds(ref)[0], cmp.budget_used)
            if hint:
                cmp.message += "; " + hint
        elif "replay_Q" in outputs and not np.isnan(outputs["replay_Q"]).all():
            why = replay_problem({k: outputs["replay_" + k] for k in ("Q", "K", "V", "O")},
                                 causal)
            if why:
                cmp.ok = False
                cmp.message = why
        return cmp

    @staticmethod
    def diagnose(Q, K, V, causal: bool, out, bound, used: float = 0.0) -> str | None:
        """The known mistake ``out`` matches, in plain words, or None (module docstring).
        ``bound``: the rule's bound for this case (a float or an array of O's shape);
        ``used``: the share of it the output used (the float16 hint is for errors within
        :data:`FLOAT16_HINT_BUDGETS` budgets, not for gross ones)."""
        out = np.asarray(out, np.float64)
        d = Q.shape[-1]
        N = Q.shape[2]
        ref, lse = attention_golden(Q, K, V, causal)
        q, k = np.asarray(Q, np.float64), np.asarray(K, np.float64)
        S = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(d)
        if causal:
            S = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, S)
        m = S.max(axis=-1) if N else np.zeros(S.shape[:-1])
        with np.errstate(over="ignore", invalid="ignore"):
            alts = [(attention_golden(Q, K, V, causal, scale=1.0 / d), None,
                     f"the scores are scaled by 1/d; attention scales them by 1/sqrt(d) "
                     f"(1/sqrt({d}))"),
                    ((ref * np.exp(lse - m)[..., None], lse), None,
                     "the output is never divided by the row sum l: O = o / l, once, after "
                     "the last K/V block")]
        if causal:
            for off, words in ((-1, "the diagonal is masked too (key j masked for j >= i): a "
                                    "query attends to itself and every earlier key (mask "
                                    "only j > i)"),
                               (1, "each query also sees the next key (j <= i + 1): the "
                                   "causal mask is j > i, and nothing after the query")):
                alts.append((attention_golden(Q, K, V, True, causal_offset=off), off,
                             f"the causal mask is off by one: {words}"))
            alts.append((attention_golden(Q, K, V, False), None,
                         "the causal mask is not applied (causal=True: key j is masked for "
                         "query i whenever j > i)"))
        else:
            alts.append((attention_golden(Q, K, V, True), None,
                         "a causal mask was applied to a call with causal=False"))
            # keys past N in a zero-filled tail tile, not masked: each adds exp(0 - m) to l
            # and nothing to o; O = sum_j e^{s_j} v_j / (sum_j e^{s_j} + n_pad)
            for n_pad in sorted({(-N) % Bc for Bc in DIAGNOSIS_BLOCKS} - {0}):
                f = np.exp(lse - np.logaddexp(lse, np.log(n_pad)))
                alts.append(((ref * f[..., None], lse), None,
                             f"the {n_pad} key(s) past N in the last K/V tile count with score "
                             "0 (zero-filled, not masked): use only keys j < N"))
        if _matches_max_from_zero(out, max_from_zero(Q, K, V, causal), bound):
            return ("the output matches FlashAttention's loop with the running max started "
                    "at 0 instead of -inf: on a row whose scores all lie far below zero every "
                    "exp(s - 0) underflows to 0, so l = 0 and O = 0/0; start m at -inf (the "
                    "first block's max then becomes m)")
        for (O_alt, lse_alt), _, words in alts:
            if _matches(out, O_alt, bound, ref, masked_rows=~np.isfinite(lse_alt)):
                return f"the output matches attention where {words}"
        for Bc in DIAGNOSIS_BLOCKS:
            if Bc >= N:
                break
            if _matches(out, unrescaled(Q, K, V, causal, Bc), bound, ref):
                return (f"the output matches FlashAttention's loop with K/V blocks of {Bc} "
                        "rows whose running output o is not rescaled when the row's running "
                        "max grows: multiply o (and l) by exp(m_old - m_new) before adding "
                        "the block's exp(s - m_new) V")
        if not np.isfinite(out).all():
            if np.nanmax(np.abs(np.where(np.isfinite(S), S, np.nan)), initial=0.0) > 88.0:
                return ("inf or NaN with scores of several hundred: exp overflows unless "
                        "each row's running max is subtracted first (exp(s - m))")
            return ("inf or NaN in O: a row whose every key in a K/V block is masked (keys "
                    "past N in a padded tail block, or all after the query on the diagonal) "
                    "has m = -inf there, and exp(-inf - (-inf)) = NaN: skip such a block or "
                    "leave m, l and o untouched while the new max is -inf; and never write "
                    "the padded rows past N")
        if np.dtype(Q.dtype) == np.float16 and used <= FLOAT16_HINT_BUDGETS:
            return ("errors of the size of float16 rounding: are the scores, the running "
                    "sums or o accumulated in float16? Widen each element with float32(x) "
                    "(on the simulator, as in numpy, 0.0 + a float16 value stays float16)")
        return None

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
            return ("the call's launches were not replayed on new inputs: was the grading "
                    "process tampered with?")
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

    def measure(self, namespace: dict, plan: dict, workdir: Path, *, clock: str = "cuda"
                ) -> dict:
        """Worker side. ``clock`` exists for tests of the gpu-tier path on the simulator."""
        from kernellab import device

        here = device.select_tier()
        fn = namespace["flash_attention"]
        if plan["tier"] == "sim":
            if here != "sim":
                raise RuntimeError(f"the plan is for the sim tier, this process is on {here}")
            return self._measure_sim(fn, plan, workdir)
        if here != "gpu" and clock == "cuda":
            raise RuntimeError(f"the plan is for the gpu tier, this process is on {here}")
        return self._measure_gpu(fn, plan, workdir, clock=clock)

    @staticmethod
    def _shape(plan: dict) -> tuple:
        return tuple(int(plan[k]) for k in ("B", "H", "N", "d"))

    @staticmethod
    def _params(plan: dict) -> dict:
        return {"B": int(plan["B"]), "H": int(plan["H"]), "N": int(plan["N"]),
                "d": int(plan["d"]), "dtype": str(plan["dtype"]),
                "causal": bool(plan["causal"]), "kind": "normal"}

    def _recheck(self, plan: dict, workdir: Path, before, after) -> dict:
        np.savez(workdir / "recheck_before.npz", **before)
        np.savez(workdir / "recheck.npz", **after)
        return {"path": str(workdir / "recheck.npz"),
                "before": str(workdir / "recheck_before.npz"),
                "params": self._params(plan), "inputs": ["Q", "K", "V"], "outputs": ["O"],
                "scalars": {"causal": bool(plan["causal"])}}

    def _measure_sim(self, fn, plan: dict, workdir: Path) -> dict:
        from numba import cuda

        from grader.labs import _baseline as baseline
        from kernellab import sim
        from kernellab.kernels.attention_cuda import attention_v1

        shape, dt, causal = self._shape(plan), np.dtype(plan["dtype"]), bool(plan["causal"])
        Q, K, V = attention_inputs(np.random.default_rng(), *shape, dt.name)
        dQ, dK, dV = (cuda.to_device(x) for x in (Q, K, V))
        dO = cuda.to_device(np.full(shape, np.nan, dt))
        try:
            with sim.capture(record=True, sites=True) as cap:
                fn(dQ, dK, dV, dO, causal)
        except Exception as exc:
            if isinstance(exc, (sim.SimError, NotImplementedError)):
                raise
            raise RuntimeError(
                f"flash_attention(Q, K, V, O, causal) on numba device arrays (the performance "
                f"phase passes cuda.to_device arrays, so copies are not measured) raised "
                f"{type(exc).__name__}: {exc}") from exc
        after = {"Q": dQ.copy_to_host(), "K": dK.copy_to_host(), "V": dV.copy_to_host(),
                 "O": dO.copy_to_host()}
        O = after["O"]

        def materialised():
            dO2 = cuda.to_device(np.full(shape, np.nan, dt))
            with sim.capture() as cap_base:
                attention_v1(dQ, dK, dV, dO2, causal)
            return [launch_dict(s) for s in cap_base.launches]

        # the timed call's launches and copies again, on new Q, K, V (the device buffers
        # refilled in place): the kernels must recompute O
        buffers = {"Q": dQ._ary, "K": dK._ary, "V": dV._ary, "O": dO._ary}
        why = self.replay(cap.recorded, buffers, ("Q", "K", "V"), ("O",))
        recheck = self._recheck(plan, workdir, {"Q": Q, "K": K, "V": V},
                                {**after, **{k: v for k, v in buffers.items()
                                             if k.startswith("replay_")}})
        recheck["replay_error"] = why and why.replace("the call's", "the timed call's")
        return {
            "tier": "sim", "profile": plan["profile"], "shape": list(shape), "dtype": dt.name,
            "causal": causal,
            "submission": [launch_dict(s) for s in cap.launches],
            "unchecked": list(cap.unchecked),
            "digests": {k: sim.content_digest(x) for k, x in (("Q", Q), ("K", K), ("V", V))},
            "o_digest": sim.content_digest(O),
            "materialised": baseline.launches(
                "attention_v1", {"shape": list(shape), "dtype": dt.name, "causal": causal},
                materialised),
            "setup": {"description": f"sim tier, {dt.name} attention of B x H x N x d = "
                                     f"{' x '.join(map(str, shape))}"
                                     f"{', causal' if causal else ''}, modelled on the "
                                     f"{plan['profile']} profile from counted traffic "
                                     "(deterministic), device arrays"},
            "recheck": recheck,
        }

    def _measure_gpu(self, fn, plan: dict, workdir: Path, *, clock: str) -> dict:
        from numba import cuda

        from kernellab import timing
        from kernellab.kernels.attention_cuda import attention_v1

        shape, dt, causal = self._shape(plan), np.dtype(plan["dtype"]), bool(plan["causal"])
        rounds = int(plan["rounds"])
        rng, check_rng = np.random.default_rng(), np.random.default_rng()
        state = {"nan_after_return": 0, "wrong": 0, "checked": 0, "before": None, "last": None}

        def setup():
            Q, K, V = attention_inputs(rng, *shape, dt.name)
            state["before"] = (Q, K, V)
            return (*(cuda.to_device(x) for x in (Q, K, V)),
                    cuda.to_device(np.full(shape, np.nan, dt)), causal)

        def copy(dQ, dK, dV, dO, causal_):
            dO.copy_to_device(dQ)

        def after(name, args):  # outside the timer, right after each call returns
            if name != "submission":
                return
            O = args[3].copy_to_host()
            Q, K, V = state["before"]
            state["checked"] += 1
            if np.isnan(O).any():
                state["nan_after_return"] += 1
            b = int(check_rng.integers(shape[0]))
            h = check_rng.choice(shape[1], size=min(2, shape[1]), replace=False)
            q, k, v = (x[b:b + 1, h] for x in (Q, K, V))
            ref, _ = attention_golden(q, k, v, causal)
            if not compare(O[b:b + 1, h], ref, rule(q, k, v, causal, ref), tile=None).ok:
                state["wrong"] += 1
            state["last"] = ((Q, K, V), tuple(a.copy_to_host() for a in args[:3]), O)

        g = timing.interleaved({"submission": fn, "materialised": attention_v1, "copy": copy},
                               baseline="submission", setup=setup, warmup=1, rounds=rounds,
                               clock=clock, after=after)
        t = {k: v.times for k, v in g.timings.items()}
        (Q, K, V), (Q1, K1, V1), O1 = state["last"]
        recheck = self._recheck(plan, workdir, {"Q": Q, "K": K, "V": V},
                                {"Q": Q1, "K": K1, "V": V1, "O": O1})
        recheck.update(nan_after_return=state["nan_after_return"], wrong_calls=state["wrong"],
                       checked_calls=state["checked"])
        B, H, N, d = shape
        compulsory = 4.0 * B * H * N * d * dt.itemsize      # Q, K, V read, O written
        return {
            "tier": "gpu", "shape": list(shape), "dtype": dt.name, "causal": causal,
            "clock": clock,
            "gbs": [compulsory / x / 1e9 for x in t["submission"]],
            "gbs_copy": [2.0 * B * H * N * d * dt.itemsize / x / 1e9 for x in t["copy"]],
            "speedup": [b / s for s, b in zip(t["submission"], t["materialised"])],
            "ms": [x * 1e3 for x in t["submission"]],
            "ms_materialised": [x * 1e3 for x in t["materialised"]],
            "setup": {"description": f"gpu tier, {dt.name} attention of B x H x N x d = "
                                     f"{' x '.join(map(str, shape))}, {rounds} interleaved "
                                     f"rounds timed by {clock} clock, fresh device inputs per "
                                     "call; bandwidth = compulsory bytes (Q, K, V, O) / time",
                      "timings": g.to_dict()["timings"]},
            "recheck": recheck,
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        want = self._params(plan)
        shape = self._shape(plan)
        if recheck.get("params") != want or recheck.get("scalars") != {"causal": want["causal"]}:
            return (f"the timed call was not the planned {want!r} ({recheck.get('params')!r}): "
                    "was the grading process tampered with?")
        bad = planned_arrays_problem(arrays, ("Q", "K", "V", "O"), shape, want["dtype"])
        if bad or plan.get("tier") != "sim":
            return bad
        # sim tier: the timed call's launches were replayed on new Q, K, V (_measure_sim)
        if recheck.get("replay_error"):
            return str(recheck["replay_error"])
        replayed = {k: arrays.get("replay_" + k) for k in ("Q", "K", "V", "O")}
        if (planned_arrays_problem(arrays, ["replay_Q", "replay_K", "replay_V"], shape,
                                   want["dtype"])
                or planned_arrays_problem(arrays, ["replay_O"], (REPLAY_SLOTS, *shape),
                                          want["dtype"])):
            return "the timed call's replay is missing: was the grading process tampered with?"
        return replay_problem(replayed, want["causal"], "the timed call")

    def _rules_sim(self, m: dict) -> list[RuleResult]:
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
            rules.append(with_costliest(RuleResult(
                "DRAM traffic / compulsory", ratio, MAX_TRAFFIC, "<=", "x",
                ratio <= MAX_TRAFFIC,
                f"{dram} DRAM bytes moved (each 32-byte sector once a launch) over the "
                f"{compulsory} of reading Q, K, V and writing O once; the materialised "
                f"attention moves {(tb['dram_read_bytes'] + tb['dram_write_bytes']) / compulsory:.1f}x"
                f"{extra}; keep S and P on chip (registers, shared memory): no N x N array in "
                "global memory"), sub))
            ts = modelled_seconds(sub, 0.0, m["profile"])
            tm = modelled_seconds(base, 0.0, m["profile"])
            speedup = tm["seconds"] / ts["seconds"]
            rules.append(with_costliest(RuleResult(
                "modelled speedup over the materialised attention", speedup,
                MIN_MODELLED_SPEEDUP, ">=", "x", speedup >= MIN_MODELLED_SPEEDUP,
                f"{m['profile']} model, B x H x N x d = {B} x {H} x {N} x {d} {m['dtype']}, each "
                f"grid counted as filling the GPU, launch overhead excluded: materialised "
                f"{fmt_seconds(tm['seconds'])} ({len(base)} launches), yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; {traffic_summary(sub)})"),
                sub))
        rules.append(kernels_gate("the attention was computed by kernels", work, sub,
                                  "every element of O stored and every byte of Q, K and V read "
                                  "by kernels"))
        return rules

    def _rules_gpu(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        shape = " x ".join(str(x) for x in m["shape"])
        sp = med(m["speedup"])
        plausible = PLAUSIBLE_VS_COPY * max(m["gbs_copy"])
        return [
            RuleResult("speedup over the materialised attention", sp, MIN_GPU_SPEEDUP, ">=",
                       "x", sp >= MIN_GPU_SPEEDUP,
                       f"B x H x N x d = {shape} {m['dtype']}: yours {med(m['ms']):.3g} ms, "
                       f"materialised {med(m['ms_materialised']):.3g} ms (medians)",
                       rng(m["speedup"])),
            RuleResult("fastest timed call is plausible", max(m["gbs"]), round(plausible, 1),
                       "<=", " GB/s", max(m["gbs"]) <= plausible,
                       f"compulsory bytes (Q, K, V read, O written) / time; limit = "
                       f"{PLAUSIBLE_VS_COPY:g} x the fastest device copy's bandwidth: faster "
                       "than that means the timer was cheated", rng(m["gbs"]), scored=False),
        ]
