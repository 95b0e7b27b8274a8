"""Lab 7b ``npu-matmul``: fp16 x fp16 -> fp32 matrix product on the cube units of the simulated
Ascend-style NPU (:mod:`kernellab.npu`): L1/L0 tiling, ping-pong buffers, one core then all.

The student writes an AIC kernel (``@asc.kernel(core="aic")``: GM -> L1 with ``nd2nz``,
L1 -> L0A/L0B with ``load_data``, ``mmad`` into L0C, ``fixpipe`` to GM), a host tiling
function and the launch function the grader calls:

* ``matmul(A, B, C)``: ``C = A @ B``. A (M, K) and B (K, N) float16, C (M, N) float32, NumPy
  arrays, any M, N, K >= 1 (1, 15, 17, 33, 1000 ...); the caller owns C (it arrives filled
  with NaN); the function reads the core count and buffer sizes from ``npu.platform_info()``,
  computes the tiling and launches the kernel with ``npu.launch`` (it may return the
  RunResult; the grader reads the launches itself).

Correctness, against the float64 product of the same inputs
(:func:`reference_kernels.gemm.gemm_golden`) under the K-aware bound with float32
accumulation (:class:`kernellab.numerics.KAware`: ``|err| <= 6 sqrt(K) (u_fp32 + u_fp64)
(|A||B|) + u_fp32 |C|`` plus the Frobenius check). Shapes: M, N, K not multiples of 16
(fractal tails), 1-element dimensions, K beyond one L1 chunk and not a multiple of it (the K
tail), M and N beyond one output block and more output blocks than the chip's 24 AICs.
Each call must pass :func:`grader.labs._npu.device_problem` (the device wrote every byte of C,
read every byte of A and B, and did at least 2MNK cube FLOPs) and raise no simulator error.

Performance (tier ``npu``: modelled cycles, deterministic), fresh inputs each run:

* **one core: modelled speedup over the naive tiling** >= ``MIN_SPEEDUP_ONE_CORE`` at
  ``PERF_ONE_CORE`` (M, N, K), the submission's host code on a one-core copy of the card,
  against :func:`naive_kernel` (the lab's given starting point: 64 x 64 output blocks, K in
  steps of 64 through L1 and L0, one buffer everywhere, one AIC). Reference (128 x 256 output
  blocks filling L0C, K chunks of 128 in L1 and steps of 64 in L0, ping-pong in L1 and L0):
  5.51x. Without ping-pong the same blocks model at 3.28x; ping-pong in L1 only at 4.6x.
  0.8 x the reference (the rule of :mod:`grader.labs._npu`): 4.4.
* **one core: cube utilisation** >= ``MIN_CUBE_UTIL_ONE_CORE`` %: 2MNK / (cycles x the
  AIC's 8192 FLOP/cycle). Reference 64.4%; without
  ping-pong 38.4%; 128 x 128 blocks with ping-pong 55%. 0.8 x the reference: 52%.
* **all cores: cube utilisation of the chip** >= ``MIN_CUBE_UTIL_ALL_CORES`` % at
  ``PERF_ALL_CORES``: 2MNK / (cycles x 24 AICs x 8192). 96 output blocks of the reference
  over 24 cores: 60.5%; one core 2.8%; no ping-pong 37.7%. 0.8 x the reference: 48%.

Useful FLOPs (2MNK) are counted, not the cube's padded ones, so padding cannot inflate a
figure. The timed runs are re-checked in full afterwards (values, and that the device produced
them). Thresholds were measured on the frozen card ``ascend910b-like@1``
(tests/test_grader_npu.py re-measures the reference and the known-wrong submissions); a new
card version means re-measuring.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from grader.labs._gemm import case_seed
from grader.labs._npu import (CARD, ONE_CORE, SIMULATOR_INTERNALS, NPULab, capture_dict,
                              last_launch, npu_call, run_summary, total_cycles)
from grader.spec import (Case, CaseData, HiddenCases, RuleResult, Whole, hidden_case_error,
                         parse_hidden_case)
from kernellab.npu import asc
from kernellab.npu.asc import TPosition as P
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

NAIVE_BLOCK = 64


# ------------------------------------------------------------------------------ baseline
@asc.kernel(core="aic")
def naive_kernel(a, b, c, M, N, K):
    """The lab's given starting point (and the grader's baseline): 64 x 64 output blocks, K in
    steps of 64 through L1 and L0, one buffer per queue, blocks dealt round-robin."""
    T = NAIVE_BLOCK                                   # 64
    pipe = asc.TPipe()
    qa1, qb1 = asc.TQue(P.A1, 1), asc.TQue(P.B1, 1)    # L1
    qa2, qb2 = asc.TQue(P.A2, 1), asc.TQue(P.B2, 1)    # L0A, L0B
    qc = asc.TQue(P.CO1, 1)                             # L0C
    pipe.init_buffer(qa1, 1, T * T * 2)
    pipe.init_buffer(qb1, 1, T * T * 2)
    pipe.init_buffer(qa2, 1, T * T * 2)
    pipe.init_buffer(qb2, 1, T * T * 2)
    pipe.init_buffer(qc, 1, T * T * 4)
    mb, nb = -(-M // T), -(-N // T)
    for blk in range(asc.get_block_idx(), mb * nb, asc.get_block_num()):
        i0, j0 = (blk // nb) * T, (blk % nb) * T
        m, n = min(T, M - i0), min(T, N - j0)
        co = qc.alloc_tensor(asc.float32)
        for k0 in range(0, K, T):
            k = min(T, K - k0)
            a1, b1 = qa1.alloc_tensor(asc.half), qb1.alloc_tensor(asc.half)
            asc.data_copy(a1, a[i0 * K + k0:], nd2nz=(m, k, K))    # GM -> L1 (MTE2)
            asc.data_copy(b1, b[k0 * N + j0:], nd2nz=(k, n, N))
            qa1.enque(a1)
            qb1.enque(b1)
            a1, b1 = qa1.deque(), qb1.deque()
            a2, b2 = qa2.alloc_tensor(asc.half), qb2.alloc_tensor(asc.half)
            asc.load_data(a2, a1)                                  # L1 -> L0 (MTE1)
            asc.load_data(b2, b1)
            qa2.enque(a2)
            qb2.enque(b2)
            a2, b2 = qa2.deque(), qb2.deque()
            asc.mmad(co, a2, b2, m, n, k, init=(k0 == 0))          # cube (M)
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)
            qa1.free_tensor(a1)
            qb1.free_tensor(b1)
        qc.enque(co)
        co = qc.deque()
        asc.fixpipe(c[i0 * N + j0:], co, m, n, dst_stride=N)      # L0C -> GM (FIX)
        qc.free_tensor(co)


@functools.lru_cache(maxsize=8)
def baseline_cycles(M: int, N: int, K: int, card=ONE_CORE) -> int:
    """Modelled cycles of :func:`naive_kernel` on (M, N, K) on ``card``, with as many blocks as
    the card has AICs (grader side; deterministic)."""
    from kernellab.npu.launch import launch

    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, dtype=np.float32)
    res = launch(naive_kernel, card.n_aic, (A, B, C, M, N, K), machine=card)
    if not np.isfinite(C).all():
        raise AssertionError("the naive kernel left C unwritten")
    return res.cycles


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

    # ------------------------------------------------------------------------- cases
    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for (m, n, k) in SHAPES:
            name = f"{m}x{n}x{k}"
            out.append(Case(name, {"M": m, "N": n, "K": k}, case_seed(VISIBLE_SEED, name)))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = f"hidden{i} {p['M']}x{p['N']}x{p['K']}"
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(5):
                m, n = (int(v) for v in rng.integers(1, 600, size=2))
                k = int(rng.integers(1, 1500))
                name = f"hidden{i} {m}x{n}x{k}"
                out.append(Case(name, {"M": m, "N": n, "K": k}, case_seed(hidden.seed, name),
                                hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the size
        cap. Raises ValueError in plain words."""
        q = parse_hidden_case(i, p, {"M": Whole(), "N": Whole(), "K": Whole()})
        m, n, k = q["M"], q["N"], q["K"]
        if m * k + k * n + m * n > MAX_HIDDEN_ELEMENTS:
            raise hidden_case_error(i, f"needs M*K + K*N + M*N <= {MAX_HIDDEN_ELEMENTS}, not "
                                       f"{m * k + k * n + m * n}")
        return q

    def case_data(self, case: Case) -> CaseData:
        p = case.params
        rng = np.random.default_rng(case.seed)
        A = rng.standard_normal((p["M"], p["K"])).astype(np.float16)
        B = rng.standard_normal((p["K"], p["N"])).astype(np.float16)
        return CaseData(inputs={"A": A, "B": B}, outputs={"C": ((p["M"], p["N"]), "float32")},
                        call=["A", "B", "C"])

    def warmup_data(self):
        c = Case("warmup", {"M": 5, "N": 7, "K": 3}, seed=1)
        return [("matmul", self.case_data(c))]

    @staticmethod
    def _compare(A, B, C):
        policy = KAware(K=A.shape[1], acc_dtype="float32", out_dtype="float32",
                        abs_product=gemm_abs_product(A, B))
        cmp = compare(C, gemm_golden(A, B), policy)
        if not cmp.ok and not cmp.nonfinite and cmp.mismatches and A.shape[1] > 16:
            cmp.message += ("; wrong values but every element written: is every K chunk "
                            "added (the last one may be shorter), starting with init=True?")
        return cmp

    def check(self, case: Case, data: CaseData, outputs: dict):
        cmp = self._compare(data.inputs["A"], data.inputs["B"], outputs["C"])
        if "C1" in outputs:  # the re-check after timing: both timed runs
            cmp1 = self._compare(data.inputs["A1"], data.inputs["B1"], outputs["C1"])
            if not cmp1.ok or (cmp.ok and cmp1.budget_used > cmp.budget_used):
                cmp = cmp1
        self.remember_output(case, outputs, cmp.ok)
        return cmp

    def work(self, case, data) -> tuple:
        p = case.params
        return ("cube", 2 * p["M"] * p["N"] * p["K"], "FLOPs of C = A B (2MNK)")

    # --------------------------------------------------------------- performance
    def perf_plan(self) -> dict:
        return {"one_core": list(PERF_ONE_CORE), "all_cores": list(PERF_ALL_CORES)}

    def measure(self, namespace: dict, plan: dict, workdir: Path) -> dict:
        """Worker side: the submission's matmul on fresh inputs, at ``all_cores`` on the full
        card and at ``one_core`` on the one-core card, every launch captured."""
        fn = namespace["matmul"]
        rng = np.random.default_rng()
        runs, before, after = {}, {}, {}
        for tag, card, sfx in (("all_cores", CARD, ""), ("one_core", ONE_CORE, "1")):
            M, N, K = (int(v) for v in plan[tag])
            A = rng.standard_normal((M, K)).astype(np.float16)
            B = rng.standard_normal((K, N)).astype(np.float16)
            C = np.full((M, N), np.nan, dtype=np.float32)
            before.update({f"A{sfx}": A.copy(), f"B{sfx}": B.copy()})
            with npu_call(card) as cap:
                fn(A, B, C)
            runs[tag] = capture_dict(cap, card)
            after.update({f"A{sfx}": A, f"B{sfx}": B, f"C{sfx}": C})
        np.savez(workdir / "recheck_before.npz", **before)
        np.savez(workdir / "recheck.npz", **after)
        s1 = "x".join(str(v) for v in plan["one_core"])
        sn = "x".join(str(v) for v in plan["all_cores"])
        return {
            "plan": {k: list(plan[k]) for k in ("one_core", "all_cores")}, "runs": runs,
            "setup": {"description": f"modelled cycles, fresh inputs: {sn} on {CARD.key}, "
                                     f"{s1} on {ONE_CORE.key}",
                      "runs": {k: run_summary(v) for k, v in runs.items()}},
            "recheck": {"path": str(workdir / "recheck.npz"),
                        "before": str(workdir / "recheck_before.npz"),
                        "params": {k: list(plan[k]) for k in ("one_core", "all_cores")},
                        "inputs": ["A", "B", "A1", "B1"], "outputs": ["C", "C1"],
                        "runs": runs},
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        want = {k: list(plan[k]) for k in ("one_core", "all_cores")}
        if recheck.get("params") != want:
            return (f"the timed calls were not the planned shapes ({recheck.get('params')!r}): "
                    "was the grading process tampered with?")
        runs = recheck.get("runs", {})
        for tag, card, sfx in (("all_cores", CARD, ""), ("one_core", ONE_CORE, "1")):
            M, N, K = want[tag]
            for name, shape, dt in ((f"A{sfx}", (M, K), np.float16),
                                    (f"B{sfx}", (K, N), np.float16),
                                    (f"C{sfx}", (M, N), np.float32)):
                a = arrays.get(name)
                if a is None or a.shape != shape or a.dtype != dt:
                    got = "missing" if a is None else f"{a.shape} {a.dtype}"
                    return (f"the timed call's {name} is {got}, not the planned {shape} "
                            f"{np.dtype(dt).name}: was the grading process tampered with?")
            why = self.timed_problem(runs.get(tag, {}), arrays, sfx, card,
                                     ("cube", 2 * M * N * K, "FLOPs of C = A B (2MNK)"))
            if why:
                return f"the timed call on {card.key}: {why}"
        return None

    def perf_rules(self, m: dict) -> list[RuleResult]:
        M1, N1, K1 = (int(v) for v in m["plan"]["one_core"])
        M, N, K = (int(v) for v in m["plan"]["all_cores"])
        base = baseline_cycles(M1, N1, K1)
        one, chip = m["runs"]["one_core"], m["runs"]["all_cores"]
        c1, cn = total_cycles(one), total_cycles(chip)
        l1, ln = last_launch(one), last_launch(chip)
        s1 = base / c1 if c1 else 0.0
        u1 = util_pct(M1, N1, K1, c1, 1)
        un = util_pct(M, N, K, cn, CARD.n_aic)

        def busy(li):
            b = li.get("pipe_busy_pct", {})
            return ", ".join(f"{p} {b.get(p, 0):.0f}%" for p in ("MTE2", "MTE1", "M", "FIX"))

        shape1, shape = f"{M1}x{N1}x{K1}", f"{M}x{N}x{K}"
        return [
            RuleResult("one core: modelled speedup over the naive tiling", s1,
                       MIN_SPEEDUP_ONE_CORE, ">=", "x", s1 >= MIN_SPEEDUP_ONE_CORE,
                       f"{shape1} on one AIC ({ONE_CORE.key}): {c1:,} cycles vs the naive "
                       f"tiling's {base:,} ({NAIVE_BLOCK}x{NAIVE_BLOCK} blocks, K steps of "
                       f"{NAIVE_BLOCK}, one buffer)"),
            RuleResult("one core: cube utilisation", u1, MIN_CUBE_UTIL_ONE_CORE, ">=", "%",
                       u1 >= MIN_CUBE_UTIL_ONE_CORE,
                       f"2MNK / ({c1:,} cycles x {CARD.cube_flops_per_cycle_core} FLOP/cycle); "
                       f"{busy(l1)}; bottleneck {l1.get('bottleneck', '-')}"),
            RuleResult("all cores: cube utilisation of the chip", un, MIN_CUBE_UTIL_ALL_CORES,
                       ">=", "%", un >= MIN_CUBE_UTIL_ALL_CORES,
                       f"{shape}: {cn:,} cycles ({cn / CARD.freq_mhz:,.1f} us) with block_dim "
                       f"{ln.get('block_dim', '-')}; 2MNK / (cycles x {CARD.n_aic} AICs x "
                       f"{CARD.cube_flops_per_cycle_core}); {busy(ln)} on "
                       f"{ln.get('critical_core', '-')}; trace "
                       f"{str(ln.get('trace_hash', ''))[:16]}"),
        ]
