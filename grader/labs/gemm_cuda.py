"""Lab 2 ``gemm-cuda``: a shared-memory tiled GEMM kernel in numba-cuda.

The student writes a ``@cuda.jit`` kernel and its launch ``gemm(A, B, C)``: C = A @ B into the
caller's C (kernel style), A (M, K), B (K, N), C (M, N), all float32, any M, N, K >= 1,
accumulation in float32. ``gemm`` is called with numpy arrays in the correctness cases and with
numba device arrays (``cuda.to_device``) in the performance phase, so that host-device copies
are not what is measured: launching the kernel on the arrays it was given does both (numba
copies numpy arguments to the device and back).

Tiers (:mod:`kernellab.device`, chosen by the grader and handed to its worker): ``sim`` without
a GPU, ``gpu`` with one.

Correctness (both tiers): every case against the float64 golden reference under the K-aware
tolerance (:class:`kernellab.numerics.KAware`, accumulation float32). Sizes 1, 2, 3, 17, 31, 33,
65, 130 and non-square mixes: none a multiple of the common tiles (8, 16, 32), so every tail
tile is exercised, and K spans several tiles so a missing barrier between them shows. Kept
small: the simulator runs about 2.5 µs per memory access (a 64 x 64 x 64 tiled GEMM takes
about 0.6 s with every check). On the ``sim`` tier each case also runs the simulator's checks
(race detector, bounds, uninitialised shared memory, divergent barriers, launch limits, the
GPU compile): a hazard fails the case with its kind and the simulator's message ("race: ...",
"out-of-bounds: ...", "uninitialised-read: ..."). And the product must come from kernels: the
case's launches must store at least M*N elements of global memory and read every byte of A and
B (compulsory DRAM traffic >= 4 (MK + KN) bytes); a ``gemm`` that computes C on the host fails
with that reason.

Performance, ``sim`` tier (deterministic: counted traffic, no clock). At M = N = K =
``PERF_N`` (a multiple of every usual tile: 8, 16, 32, 64, so no tile is ragged), fresh random
inputs as device arrays, the student's launches and the naive kernel's (chapter 2's v1,
:func:`kernellab.kernels.gemm_cuda.gemm_v1`) are captured with :func:`kernellab.sim.capture`
and their times modelled by :mod:`kernellab.sim.model` (profile ``a100``):

* **global traffic per FMA** <= ``MAX_BYTES_PER_FMA``: the bytes the kernels' 32-byte sectors
  moved, loads and stores, every launch (a pre-pass that transposes or packs an operand
  included), over the M N K fused multiply-adds. This is the rule that measures reuse, what the
  lab teaches: a value loaded once from global memory and used for many FMAs (from a
  shared-memory tile or registers) moves few bytes per FMA; one loaded for every FMA cannot.
* **modelled speedup over the naive kernel** >= ``MIN_MODELLED_SPEEDUP``. Each launch's time is
  the model's kernel time (``ModelledTime.kernel_seconds``: launch overhead excluded) with its
  grid counted as filling the GPU (``blocks`` = max(blocks, SMs)); the student's time is the sum
  over their launches, and never less than the FLOPs at the FP32 peak (2 MNK / 19.5 TFLOP/s).
  Why these two choices: at the sizes the simulator can run, both kernels are tiny. The 3 µs
  launch overhead is as large as either kernel and pulls every ratio towards 1 (v3 over v1 at
  64^3: 2.97x with it, 10.6x without), and a 64 x 64 C has 16 tiles of 16 x 16 but one of 64 x 64,
  so the model's SM share (``min(blocks, 108) / 108``) would charge a register-tiled kernel
  (chapter 2's v4: 38x at full occupancy) 16 times more than a 16 x 16 one for its grid alone,
  and rank it below the plain tiled kernel (2.7x). Neither effect is the kernel's: at a size
  that fills the GPU both vanish. What remains is the traffic per unit of work (sectors,
  wavefronts, barriers): this rule also charges what the traffic rule does not, shared-memory
  wavefronts and bank conflicts, so both are kept.
* **global memory coalesced**, judged per access site (source instruction,
  :func:`grader.labs._cuda.coalesced_fraction`): a site's bytes the threads asked for, each
  request capped at the bytes its sectors moved (a broadcast asks for the same bytes 32 times
  and uses its one sector), as a fraction of the bytes its 32-byte sectors moved (loads and
  stores); the sites below ``MIN_COALESCED`` may move at most 10% of the call's global sectors
  together, and the report names the least coalesced site's line. Nsight Compute reports the
  same per-instruction quantity ("bytes per sector utilised"). A coalesced warp access uses
  100%; a warp reading down a column of a row-major matrix uses 4 bytes of each 32-byte
  sector. Per site, because over all requests together cheap traffic elsewhere (broadcasts)
  offsets a column's waste: ``tests/submissions/gemm_cuda/uncoalesced_padded_broadcasts.py``.
* a gate (no points): the timed call's product came from kernels (stores >= M*N, every byte of
  A and B read), as in the correctness cases.

Thresholds, from the model (analytic; the measured values at 64^3 agree, see
``tests/test_grader_gemm_cuda.py``):

* traffic without reuse. Every FMA then takes both operands from global loads, and a warp's load
  moves whole sectors (CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory"). With
  4-byte loads one request of A and one of B feed the warp's 32 FMAs and move >= 1 sector each:
  >= 64 B per 32 FMAs, 2 B/FMA, in any layout (2 only with A stored column-major by a pre-pass
  and a warp on an 8 x 4 patch of C). With A and B row-major, as the lab gives them, a warp on a
  p x q patch (pq = 32, any block shape) loads p sectors of A and ceil(q/8) of B per k: >= 4
  (p = 2, q = 16: the 16 x 16 block), 4 B/FMA. 8-byte loads (a complex64 view of operands packed
  in pairs along k) feed 64 FMAs with 8p + 8q bytes: >= 3 sectors (p = 4, q = 8), 1.5 B/FMA. C's
  stores add 4/K B/FMA to any kernel (1/16 at ``PERF_N``), so no reuse-free kernel gets below
  1.5 + 4/K. A BM x BN tile of C per block, its operands loaded in full sectors (shared memory or
  registers), moves 4 (1/BM + 1/BN) + 4/K B/FMA: 8 x 8: 1.06; 16 x 16 (the solution): 0.56;
  64 x 64 (chapter 2's v4): 0.19. ``MAX_BYTES_PER_FMA`` = 1.5: every reuse-free layout is above
  it, an 8 x 8 tile 29% below.
* speedup: the naive kernel moves 33 sectors per 32 FMAs (A down a column: 32, B broadcast: 1);
  coalescing alone (v2, 32 x 8 blocks: B in rows, A broadcast) moves 5, 6.6x. A 16 x 16 shared
  tile, one output per thread, conflict-free: 1/2 sector and 2 + 1/8 shared wavefronts per 32
  FMAs, shared-memory bound, 10.6x. ``MIN_MODELLED_SPEEDUP`` = 8 sits between the two. It does
  not separate reuse: a reuse-free kernel with 16 x 16 blocks moves 4 sectors per 32 FMAs
  (8.25x), one with A transposed on the device 2 (about 13x); the traffic rule above does.
* the course solution (16 x 16 tiles) and every honest tiled variant measured use 100% of their
  sectors at every site; a tile loaded with threadIdx.x walking down A's column, 25% at that
  site (16 rows x 2 floats a warp: 8 of each sector's 32 bytes), 76% of the sectors; the naive
  kernel 12.5% (A down a column: 4 of 32 bytes, 32 of its 33 sectors per 32 FMAs); a transpose
  or packing pre-pass that stores or loads down a column, 12.5% at 13-20% of the sectors.
  ``MIN_COALESCED`` = 0.5 halves the perfect figure.

Known limits of the sim rules: a kernel whose grid does not grow with the problem (one block
doing everything) models as well as one that fills the GPU (the normalisation above); warp
shuffles cost nothing in the model, so operands spread across a warp by shuffles count as
on-chip reuse at no charge; an uncoalesced site hides under the coalescing rule's 10% only
with 9 times its sectors added elsewhere (more than coalescing it would save); a submission
that computes C on the host and then launches kernels that read A and B and store C passes
the "computed by kernels" checks (the static rules ban library products; the code is there to
read).

Performance, ``gpu`` tier (CUDA events, :func:`kernellab.timing.interleaved` with
``clock="cuda"``): M = N = K = ``GPU_N``, fresh device inputs for every call, one warm-up call
each, ``GPU_ROUNDS`` interleaved rounds of the submission, the naive kernel and cupy.matmul
(cuBLAS) when cupy is installed; each timed call's output checked right after it returns
(outside the timer), the last one in full. Rules: measured speedup over the naive kernel (median
of per-round ratios) >= ``MIN_SPEEDUP_GPU``; a gate: the fastest call no faster than
``PLAUSIBLE_VS_CUBLAS`` x cuBLAS's fastest or the nominal FP32 peak, whichever is larger. The
fraction of cuBLAS and of the peak are reported. ``MIN_SPEEDUP_GPU`` is provisional: S. Boehm's
measurements on an A6000 ("How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance",
2022; kernel 1 is our v1) give 9.6x for shared-memory tiles over this naive kernel and 6.4x for
coalescing alone; 4x leaves room for GPUs whose caches soften the naive kernel's uncoalesced
loads, until ``make gpu-check`` has measured the course's GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, coalesced_fraction, coalesced_rule, fmt_seconds, kernels_gate, launch_dict,
    modelled_seconds, planned_arrays_problem, total_counters, traffic_summary, unchecked_problem,
    with_costliest,
)
from grader.labs._gemm import case_seed, gemm_case_data, gemm_check, probably_correct
from grader.spec import (Case, CaseData, HiddenCases, OneOf, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)

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


def device_work_problem(launches: list[dict], M: int, N: int, K: int) -> str | None:
    """None if the captured launches can have produced C = A @ B: at least one launch, at least
    M*N elements stored to global memory (plain stores and atomics: a split-K kernel adds into
    C), and every byte of A and B read (compulsory DRAM reads >= 4 (MK + KN) bytes; sector
    rounding only adds). Else what is missing, in plain words."""
    if not launches:
        return ("no kernel was launched: gemm must compute C in a CUDA kernel (this lab grades "
                "the kernel, not host code)")
    t = total_counters(launches)
    stored = t["global_store_elements"] + t["atomics"]
    if stored < M * N:
        return (f"the kernels stored {stored} element(s) to global memory, fewer than the "
                f"{M * N} of C: the rest of C was computed on the host, which this lab does not "
                "accept")
    need = 4 * (M * K + K * N)
    if t["dram_read_bytes"] < need:
        return (f"the kernels read {t['dram_read_bytes']} bytes of global memory, fewer than "
                f"the {need} of A and B: C must be computed on the device from A and B, not "
                "copied there from the host")
    return None


def bytes_per_fma(launches: list[dict], M: int, N: int, K: int) -> float:
    """Global traffic per fused multiply-add: 32 B x the sectors the launches moved (loads and
    stores, every launch) / (M N K). Numerically also the sectors moved per 32 FMAs."""
    t = total_counters(launches)
    return 32.0 * (t["global_load_sectors"] + t["global_store_sectors"]) / (M * N * K)


def reuse_rule(launches: list[dict], M: int, N: int, K: int) -> RuleResult:
    """The "global traffic per FMA" rule (module docstring: the bound without reuse)."""
    t = total_counters(launches)
    b = bytes_per_fma(launches, M, N, K)
    return RuleResult(
        "global traffic per FMA", b, MAX_BYTES_PER_FMA, "<=", " B", b <= MAX_BYTES_PER_FMA,
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

    # ------------------------------------------------------------------------- cases
    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for (m, n, k) in VISIBLE_SHAPES:
            name = f"{m}x{n}x{k}"
            out.append(Case(name, {"M": m, "N": n, "K": k, "dtype": DTYPE},
                            case_seed(VISIBLE_SEED, name)))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = f"hidden{i} {p['M']}x{p['N']}x{p['K']}"
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(4):
                m, n, k = (int(x) for x in rng.integers(1, 80, size=3))
                p = {"M": m, "N": n, "K": k, "dtype": DTYPE}
                name = f"hidden{i} {m}x{n}x{k}"
                out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the
        simulator's cost cap. Raises ValueError in plain words."""
        q = parse_hidden_case(i, p, {"M": Whole(), "N": Whole(), "K": Whole(),
                                     "dtype": OneOf((DTYPE,), DTYPE)})
        if q["M"] * q["N"] * q["K"] > MAX_HIDDEN_MNK:
            raise hidden_case_error(i, f"needs M*N*K <= {MAX_HIDDEN_MNK} (the simulator runs "
                                       f"about 2.5 µs a memory access), not "
                                       f"{q['M'] * q['N'] * q['K']}")
        return q

    def case_data(self, case: Case) -> CaseData:
        return gemm_case_data(case)

    def warmup_data(self):
        # one small call: the first launch compiles the kernel (GPU: the JIT; sim: the PTX check)
        return [("gemm", self.case_data(Case("warmup", {"M": 5, "N": 7, "K": 3,
                                                        "dtype": DTYPE}, seed=1)))]

    def check(self, case: Case, data: CaseData, outputs: dict):
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

    def measure(self, namespace: dict, plan: dict, workdir: Path, *, clock: str = "cuda",
                cublas=None) -> dict:
        """Worker side. ``plan["tier"]`` must be this process's tier. ``clock`` and ``cublas``
        (a ``f(dA, dB, dC)`` standing in for cupy.matmul) exist for tests of the gpu-tier code
        path on the simulator (``clock="wall"``)."""
        from kernellab import device

        here = device.select_tier()
        if plan["tier"] == "sim":
            if here != "sim":
                raise RuntimeError(f"the plan is for the sim tier, this process is on {here}")
            return self._measure_sim(namespace["gemm"], plan, workdir)
        if here != "gpu" and clock == "cuda":
            raise RuntimeError(f"the plan is for the gpu tier, this process is on {here}")
        return self._measure_gpu(namespace["gemm"], plan, workdir, clock=clock, cublas=cublas)

    @staticmethod
    def _fresh(rng, n):
        A = rng.standard_normal((n, n), dtype=np.float32)
        B = rng.standard_normal((n, n), dtype=np.float32)
        return A, B

    def _measure_sim(self, fn, plan: dict, workdir: Path) -> dict:
        from numba import cuda

        from grader.labs import _baseline as baseline
        from kernellab import sim
        from kernellab.kernels.gemm_cuda import gemm_v1

        n = int(plan["n"])
        A, B = self._fresh(np.random.default_rng(), n)
        np.savez(workdir / "recheck_before.npz", A=A, B=B)
        dA, dB = cuda.to_device(A), cuda.to_device(B)
        dC = cuda.to_device(np.full((n, n), np.nan, np.float32))
        try:
            with sim.capture(sites=True) as cap:
                fn(dA, dB, dC)
        except Exception as exc:
            if isinstance(exc, (sim.SimError, NotImplementedError)):
                raise
            raise RuntimeError(
                f"gemm(A, B, C) on numba device arrays (the performance phase passes "
                f"cuda.to_device arrays, so copies are not measured) raised "
                f"{type(exc).__name__}: {exc}") from exc
        C = dC.copy_to_host()
        np.savez(workdir / "recheck.npz", A=dA.copy_to_host(), B=dB.copy_to_host(), C=C)

        def naive():
            dC1 = cuda.to_device(np.full((n, n), np.nan, np.float32))
            with sim.capture(sites=True) as cap_naive:
                gemm_v1(dA, dB, dC1)
            return [launch_dict(s) for s in cap_naive.launches]

        return {
            "tier": "sim", "profile": plan["profile"], "n": n,
            "submission": [launch_dict(s) for s in cap.launches],
            "naive": baseline.launches("gemm_v1", {"n": n}, naive),
            "setup": {"description": f"sim tier, float32, M=N=K={n}, modelled on the "
                                     f"{plan['profile']} profile from counted traffic "
                                     "(deterministic), device arrays"},
            "recheck": {"path": str(workdir / "recheck.npz"),
                        "before": str(workdir / "recheck_before.npz"),
                        "params": {"M": n, "N": n, "K": n, "dtype": DTYPE},
                        "inputs": ["A", "B"], "outputs": ["C"]},
        }

    def _measure_gpu(self, fn, plan: dict, workdir: Path, *, clock: str, cublas) -> dict:
        from numba import cuda

        from kernellab import timing
        from kernellab.kernels.gemm_cuda import gemm_v1

        n, rounds = int(plan["n"]), int(plan["rounds"])
        cublas_note = "cupy.matmul (cuBLAS)"
        if cublas is None:
            try:
                import cupy as cp
            except ImportError:
                cublas_note = "cupy not installed: no cuBLAS baseline"
            else:
                def cublas(dA, dB, dC):
                    cp.matmul(cp.asarray(dA), cp.asarray(dB), out=cp.asarray(dC))
        rng = np.random.default_rng()
        check_rng = np.random.default_rng()
        state = {"nan_after_return": 0, "wrong": 0, "checked": 0, "before": None, "last": None}

        def setup():
            A, B = self._fresh(rng, n)
            state["before"] = (A, B)
            return (cuda.to_device(A), cuda.to_device(B),
                    cuda.to_device(np.full((n, n), np.nan, np.float32)))

        def after(name, args):  # outside the timer, right after each call returns
            if name != "submission":
                return
            C = args[2].copy_to_host()
            if np.isnan(C).any():
                state["nan_after_return"] += 1
            state["checked"] += 1
            A0, B0 = state["before"]
            if not probably_correct(A0, B0, C, check_rng):
                state["wrong"] += 1
            state["last"] = (A0, B0, args[0].copy_to_host(), args[1].copy_to_host(), C)

        fns = {"submission": fn, "naive": gemm_v1}
        if cublas is not None:
            fns["cublas"] = cublas
        g = timing.interleaved(fns, baseline="submission", setup=setup, warmup=1,
                               rounds=rounds, clock=clock, after=after)
        t = {k: v.times for k, v in g.timings.items()}
        A0, B0, A1, B1, C1 = state["last"]
        np.savez(workdir / "recheck_before.npz", A=A0, B=B0)
        np.savez(workdir / "recheck.npz", A=A1, B=B1, C=C1)
        flops = 2.0 * n ** 3
        try:
            from kernellab import machine
            info = machine.gpu_info()
            peak, formula, gpu = info.peak_flops(), info.formula(), f"{info.name} (cc {info.cc[0]}.{info.cc[1]})"
        except Exception as exc:  # noqa: BLE001 - the simulator in tests; an unknown device
            peak, formula, gpu = None, f"unknown ({exc})", "unknown"
        return {
            "tier": "gpu", "n": n, "clock": clock, "gpu": gpu,
            "speedup_naive": [a / b for a, b in zip(t["naive"], t["submission"])],
            "gflops": [flops / x / 1e9 for x in t["submission"]],
            "gflops_naive": [flops / x / 1e9 for x in t["naive"]],
            "gflops_cublas": [flops / x / 1e9 for x in t["cublas"]] if "cublas" in t else None,
            "peak_gflops": None if peak is None else peak / 1e9, "peak_formula": formula,
            "setup": {"description": f"gpu tier ({gpu}), float32, M=N=K={n}, {rounds} "
                                     f"interleaved rounds timed by {clock} clock, fresh device "
                                     f"inputs per call; baseline {cublas_note}",
                      "timings": g.to_dict()["timings"]},
            "recheck": {"path": str(workdir / "recheck.npz"),
                        "before": str(workdir / "recheck_before.npz"),
                        "params": {"M": n, "N": n, "K": n, "dtype": DTYPE},
                        "inputs": ["A", "B"], "outputs": ["C"],
                        "nan_after_return": state["nan_after_return"],
                        "wrong_calls": state["wrong"], "checked_calls": state["checked"]},
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        n = int(plan["n"])
        if recheck.get("params") != {"M": n, "N": n, "K": n, "dtype": DTYPE}:
            return (f"the timed call was not the planned M=N=K={n} {DTYPE} "
                    f"({recheck.get('params')!r}): was the grading process tampered with?")
        return planned_arrays_problem(arrays, ("A", "B", "C"), (n, n), DTYPE)

    def _rules_sim(self, m: dict) -> list[RuleResult]:
        n = int(m["n"])
        flops = 2.0 * n ** 3
        sub, naive = m["submission"], m["naive"]
        work = unchecked_problem(sub) or device_work_problem(sub, n, n, n)
        rules = []
        if work is None:
            ts = modelled_seconds(sub, flops, m["profile"])
            tn = modelled_seconds(naive, flops, m["profile"])
            speedup = tn["seconds"] / ts["seconds"]
            eff_naive = coalesced_fraction(naive)
            rules.append(with_costliest(reuse_rule(sub, n, n, n), sub))
            rules.append(with_costliest(RuleResult(
                "modelled speedup over the naive kernel", speedup, MIN_MODELLED_SPEEDUP, ">=",
                "x", speedup >= MIN_MODELLED_SPEEDUP,
                f"{m['profile']} model, M=N=K={n}, each grid counted as filling the GPU, launch "
                f"overhead excluded: naive {fmt_seconds(tn['seconds'])} ({tn['bound']}-bound), yours "
                f"{fmt_seconds(ts['seconds'])} ({ts['bound']}-bound; {traffic_summary(sub)}); as launched at "
                f"this size (launch overhead included): naive {fmt_seconds(tn['as_launched_s'])}, "
                f"yours {fmt_seconds(ts['as_launched_s'])}"), sub))
            rules.append(coalesced_rule(
                sub, MIN_COALESCED, f"the naive kernel: {eff_naive:.0%}; a warp should read 32 "
                "consecutive floats, not a column"))
        rules.append(kernels_gate("the product was computed by kernels", work, sub,
                                  "every element of C stored and every byte of A and B read by "
                                  "kernels"))
        return rules

    def _rules_gpu(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        n = int(m["n"])
        cub = m.get("gflops_cublas")
        peak = m.get("peak_gflops")
        parts = [f"M=N=K={n}: naive {med(m['gflops_naive']):.0f} GFLOP/s, yours "
                 f"{med(m['gflops']):.0f} GFLOP/s"]
        if cub:
            parts.append(f"{med(m['gflops']) / med(cub):.1%} of cupy.matmul (cuBLAS, "
                         f"{med(cub):.0f} GFLOP/s)")
        if peak:
            parts.append(f"{med(m['gflops']) / peak:.1%} of the FP32 peak ({m['peak_formula']})")
        sp = med(m["speedup_naive"])
        rules = [RuleResult("measured speedup over the naive kernel", sp, MIN_SPEEDUP_GPU, ">=",
                            "x", sp >= MIN_SPEEDUP_GPU, "; ".join(parts),
                            rng(m["speedup_naive"]))]
        limits = [x for x in (PLAUSIBLE_VS_CUBLAS * max(cub) if cub else None, peak) if x]
        if limits:
            plausible = round(max(limits), 1)
            rules.append(RuleResult(
                "fastest timed call is plausible", max(m["gflops"]), plausible, "<=",
                " GFLOP/s", max(m["gflops"]) <= plausible,
                f"limit = the larger of {PLAUSIBLE_VS_CUBLAS:g} x cuBLAS's fastest call and the "
                "nominal FP32 peak; faster than that means the timer was cheated",
                rng(m["gflops"]), scored=False))
        return rules
