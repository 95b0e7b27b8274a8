"""Lab 3 ``softmax-cuda``: a block-level sum reduction with warp shuffles, and a fused row
softmax, in numba-cuda.

The student writes two launch functions (kernel style: results go into the caller's array):

* ``row_sum(X, out)``: ``out[r] = sum_j X[r, j]``. X (M, N) float32 or float16, out (M,)
  float32; one block per row, reduced within each warp with shuffles (``cuda.shfl_down_sync``
  or ``shfl_xor_sync``) and across warps through shared memory; the sum in float32.
* ``softmax(X, Y)``: ``Y[r, :] = softmax(X[r, :])``. X, Y (M, N), both float32 or both float16;
  statistics (row max and sum) in float32; one block per row; rows of any length N >= 1;
  ``-inf`` entries are masked positions (their output is 0) and a row that is entirely
  ``-inf`` is written as **zeros** (the course's definition, see
  :func:`reference_kernels.reductions.softmax_golden`).

Both are called with numpy arrays in the correctness cases (numba copies them to the device and
back) and ``softmax`` with numba device arrays in the performance phase.

Correctness (both tiers), against float64 golden references of the same rounded inputs:

* ``row_sum``: :class:`kernellab.numerics.KAware` with K = N, accumulation float32 (the sum of
  a row is a dot product with ones): ``|err| <= 6 sqrt(N) (u_fp32 + u_fp64) sum_j |x_j| +
  u_fp32 |sum|`` plus the Frobenius check. A float16 accumulator misses it by orders of
  magnitude (u is 8192x larger).
* ``softmax``: :class:`kernellab.numerics.RowSoftmax` (the derivation is in its docstring):
  relative error ``u_fp32 (8 + 3.35 (m - x_i + ln N) + 6 sqrt(N))`` plus one ulp of the output
  dtype, plus an absolute floor below the smallest normal float32.

Cases: N in 1, 2, 31, 32, 33, 255, 257, 1000, 1025, 4097 (below, at and above a warp, a block
of 256 and of 1024 threads), float32 and float16; softmax rows of ±1e4 (exp overflows without
the max: expf(88.8) is inf), all-equal rows, rows with masked (-inf) entries, a row whose only
finite entry lies far below 0 (a row max started at 0 instead of -inf underflows to 0/0 there)
and a fully masked row. On the ``sim`` tier each case also runs the simulator's checks (race
detector, bounds, uninitialised shared memory, divergent barriers, the GPU compile), and the
result must come from kernels (:func:`device_work_problem`): every launch on the sim tier's
executor (not numba's stock simulator, which a record array or ``cuda.jit(extensions=...)``
falls back to) and reading arrays only from its arguments (not from globals, closures or
default values, which a GPU freezes into the kernel as constants); every byte of X read from arguments that
held X itself when their launch started; as many distinct elements of global memory stored
to as the output has. ``row_sum`` must have executed warp shuffles on rows of 64 elements or
more, on average five per warp that shuffled (a tree over 32 lanes; "with shuffles" is what
the lab teaches; atomics into ``out`` after such a tree are fine).

Performance, ``sim`` tier (deterministic, :mod:`kernellab.sim.model`, profile a100): softmax of
a ``PERF_M`` x ``PERF_N`` float32 matrix (128 rows: more than the A100's 108 SMs, so one block
per row fills the GPU), the student's launches against chapter 3's three-pass softmax
(:func:`kernellab.kernels.softmax_cuda.softmax_v2`: max, sum and normalise kernels), each launch
timed by the model without its launch overhead and with its grid as launched
(:func:`modelled_as_launched`): a launch of fewer blocks than the GPU has SMs gets their share
of the chip (``min(blocks, SMs) / SMs`` of the L2, shared-memory and barrier throughput,
:mod:`kernellab.sim.model`), so one block looping over every row, or a launch per row, is
charged as what it is on a GPU: one SM working while the others idle. (gemm-cuda counts every
grid as filling the GPU because at the sizes the simulator runs its honest grids cannot; here
one block per row can.)

* **modelled speedup over the three-pass softmax** >= ``MIN_MODELLED_SPEEDUP``. The model's L2
  is perfect within a launch and DRAM traffic is compulsory, so the three-pass softmax moves
  X three times and Y once (4 accesses per element), a fused one-kernel softmax X once and Y
  once (2), whatever it re-reads from L2: 2.0x when DRAM-bound. Two kernels (statistics, then
  normalise: 3 accesses) model at 1.33x. 1.6 sits between them with 20% margin each way.
* **global memory coalesced** >= ``MIN_COALESCED``, judged per access site as in
  ``gemm-cuda`` (:func:`grader.labs._cuda.coalesced_fraction`: the sites below the threshold
  move at most 10% of the sectors): a thread walking its own contiguous chunk of the row makes
  a warp touch 32 sectors per load instead of 4.
* a gate: the timed call's softmax came from kernels: the checks of the cases, and the final Y
  is what a launch left in an argument whose elements the launches stored (all of them), not
  bytes written over Y on the host.

Known limits of the sim rules: the checks see what kernels read and stored, not what they
computed, so a softmax computed on the host and brought in through an argument (say, written
into Y before a kernel that reads X and Y and stores Y) passes the correctness cases; in the
timed call it costs the extra pass over memory (a modelled 1.33x: the speed rule fails), as
does reading it with atomics. Five shuffles a warp that compute nothing pass the shuffle rule.
A kernel that assigns a warp (not a block) to each row is accepted when its grid fills the GPU
at the timed shape (one row a block: 128 blocks); with 8 rows a block (16 blocks for 128 rows)
the model charges the idle SMs and the speed rule fails, as a GPU would run it. The model
charges nothing for launch overhead, so many launches that each fill the GPU model as one. The
model charges each launch at least its busiest block's work on one SM (the engine's
``block_max``), so a grid of 128 blocks of which one does every row and the rest return at once
models as the one SM that works (``one_block_does_all.py``).

Performance, ``gpu`` tier (CUDA events, :func:`kernellab.timing.interleaved`): softmax of a
``GPU_M`` x ``GPU_N`` float32 matrix, fresh inputs every call, interleaved with the three-pass
softmax and a device-to-device copy of the same bytes (the bandwidth a softmax can hope for: it
reads X and writes Y once, like the copy). Rules: achieved bandwidth >= ``MIN_COPY_FRACTION``
of the copy's (median of per-round ratios); a gate: no faster than ``PLAUSIBLE_VS_COPY`` x the
copy. The thresholds are provisional until ``make gpu-check`` has measured the course's GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.labs._cuda import (
    PROFILE, CudaLab, coalesced_rule, fmt_seconds, kernels_gate, launch_dict, modelled_seconds,
    planned_arrays_problem, slice_digests, total_counters, traffic_summary, with_atomic_reads,
    with_costliest,
    work_problem,
)
from grader.labs._gemm import case_seed
from grader.spec import (Case, CaseData, HiddenCases, OneOf, RuleResult, Whole,
                         hidden_case_error, parse_hidden_case)
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

    # ------------------------------------------------------------------------- cases
    def cases(self, hidden: HiddenCases) -> list[Case]:
        out = []
        for dt in DTYPES:
            for (m, n) in SUM_SHAPES:
                name = f"row_sum {dt} {m}x{n}"
                out.append(Case(name, {"fn": "row_sum", "M": m, "N": n, "dtype": dt},
                                case_seed(VISIBLE_SEED, name)))
        for dt in DTYPES:
            for (m, n, kind) in SOFTMAX_SHAPES:
                name = f"softmax {dt} {m}x{n}" + ("" if kind == "normal" else f" {kind}")
                out.append(Case(name, {"fn": "softmax", "M": m, "N": n, "dtype": dt,
                                       "kind": kind}, case_seed(VISIBLE_SEED, name)))
        for i, p in enumerate(hidden.cases):
            p = self._validate(p, i)
            name = f"hidden{i} {p['fn']} {p['dtype']} {p['M']}x{p['N']}"
            out.append(Case(name, p, case_seed(hidden.seed or 0, name), hidden=True))
        if hidden.seed is not None and not hidden.cases:
            rng = np.random.default_rng(hidden.seed)
            for i in range(6):
                p = {"fn": ("row_sum", "softmax")[i % 2], "M": int(rng.integers(1, 5)),
                     "N": int(rng.integers(1, 5000)), "dtype": DTYPES[(i // 2) % 2]}
                if p["fn"] == "softmax":
                    p["kind"] = KINDS[int(rng.integers(0, len(KINDS)))]
                name = f"hidden{i} {p['fn']} {p['dtype']} {p['M']}x{p['N']}"
                out.append(Case(name, p, case_seed(hidden.seed, name), hidden=True))
        return out

    @staticmethod
    def _validate(p: dict, i: int = 0) -> dict:
        """Hidden case ``i``'s parameters (grader.spec.parse_hidden_case), within the
        simulator's cost cap. Raises ValueError in plain words."""
        common = {"M": Whole(), "N": Whole(), "dtype": OneOf(DTYPES, "float32")}
        q = parse_hidden_case(i, p, common, by="fn", variants={
            "row_sum": {}, "softmax": {"kind": OneOf(KINDS, "normal")}})
        if q["M"] * q["N"] > MAX_HIDDEN_ELEMENTS:
            raise hidden_case_error(i, f"needs M*N <= {MAX_HIDDEN_ELEMENTS} (the simulator "
                                       f"runs a few µs a memory access), not {q['M'] * q['N']}")
        return q

    def case_data(self, case: Case) -> CaseData:
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

    def check(self, case: Case, data: CaseData, outputs: dict):
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

    def measure(self, namespace: dict, plan: dict, workdir: Path, *, clock: str = "cuda"
                ) -> dict:
        """Worker side. ``clock`` exists for tests of the gpu-tier path on the simulator."""
        from kernellab import device

        here = device.select_tier()
        if plan["tier"] == "sim":
            if here != "sim":
                raise RuntimeError(f"the plan is for the sim tier, this process is on {here}")
            return self._measure_sim(namespace["softmax"], plan, workdir)
        if here != "gpu" and clock == "cuda":
            raise RuntimeError(f"the plan is for the gpu tier, this process is on {here}")
        return self._measure_gpu(namespace["softmax"], plan, workdir, clock=clock)

    @staticmethod
    def _recheck(workdir: Path, X0, X1, Y, M, N) -> dict:
        np.savez(workdir / "recheck_before.npz", X=X0)
        np.savez(workdir / "recheck.npz", X=X1, Y=Y)
        return {"path": str(workdir / "recheck.npz"), "before": str(workdir / "recheck_before.npz"),
                "params": {"fn": "softmax", "M": M, "N": N, "dtype": "float32",
                           "kind": "normal"},
                "inputs": ["X"], "outputs": ["Y"]}

    def _measure_sim(self, fn, plan: dict, workdir: Path) -> dict:
        from numba import cuda

        from grader.labs import _baseline as baseline
        from kernellab import sim
        from kernellab.kernels.softmax_cuda import softmax_v2

        M, N = int(plan["M"]), int(plan["N"])
        X = softmax_inputs(np.random.default_rng(), M, N, "float32")
        dX = cuda.to_device(X)
        dY = cuda.to_device(np.full((M, N), np.nan, np.float32))
        try:
            with sim.capture(sites=True) as cap:
                fn(dX, dY)
        except Exception as exc:
            if isinstance(exc, (sim.SimError, NotImplementedError)):
                raise
            raise RuntimeError(
                f"softmax(X, Y) on numba device arrays (the performance phase passes "
                f"cuda.to_device arrays, so copies are not measured) raised "
                f"{type(exc).__name__}: {exc}") from exc
        Y = dY.copy_to_host()
        recheck = self._recheck(workdir, X, dX.copy_to_host(), Y, M, N)

        def three_pass():
            dY2 = cuda.to_device(np.full((M, N), np.nan, np.float32))
            with sim.capture() as cap_base:
                softmax_v2(dX, dY2)
            return [launch_dict(s) for s in cap_base.launches]

        return {
            "tier": "sim", "profile": plan["profile"], "M": M, "N": N,
            "submission": [launch_dict(s) for s in cap.launches],
            "unchecked": list(cap.unchecked),
            # what the work gate needs: X's content and the output's (grader/labs/_cuda.py)
            "x_digest": sim.content_digest(X), "y_digest": sim.content_digest(Y),
            "three_pass": baseline.launches("softmax_v2", {"M": M, "N": N}, three_pass),
            "setup": {"description": f"sim tier, float32 softmax of {M} x {N}, modelled on the "
                                     f"{plan['profile']} profile from counted traffic "
                                     "(deterministic), device arrays"},
            "recheck": recheck,
        }

    def _measure_gpu(self, fn, plan: dict, workdir: Path, *, clock: str) -> dict:
        from numba import cuda

        from kernellab import timing
        from kernellab.kernels.softmax_cuda import softmax_v2

        M, N, rounds = int(plan["M"]), int(plan["N"]), int(plan["rounds"])
        rng = np.random.default_rng()
        check_rng = np.random.default_rng()
        state = {"nan_after_return": 0, "wrong": 0, "checked": 0, "before": None, "last": None}

        def setup():
            X = softmax_inputs(rng, M, N, "float32")
            state["before"] = X
            return (cuda.to_device(X), cuda.to_device(np.full((M, N), np.nan, np.float32)))

        def copy(dX, dY):
            dY.copy_to_device(dX)

        def after(name, args):  # outside the timer, right after each call returns
            if name != "submission":
                return
            Y = args[1].copy_to_host()
            X0 = state["before"]
            state["checked"] += 1
            if np.isnan(Y).any():
                state["nan_after_return"] += 1
            rows = check_rng.choice(M, size=min(M, 32), replace=False)
            Xs = X0[rows]
            c = compare(Y[rows], softmax_golden(Xs),
                        RowSoftmax(N=N, acc_dtype="float32", out_dtype="float32",
                                   shift=softmax_shift(Xs)), tile=None)
            if not c.ok:
                state["wrong"] += 1
            state["last"] = (X0, args[0].copy_to_host(), Y)

        g = timing.interleaved({"submission": fn, "three_pass": softmax_v2, "copy": copy},
                               baseline="submission", setup=setup, warmup=1, rounds=rounds,
                               clock=clock, after=after)
        t = {k: v.times for k, v in g.timings.items()}
        X0, X1, Y1 = state["last"]
        recheck = self._recheck(workdir, X0, X1, Y1, M, N)
        recheck.update(nan_after_return=state["nan_after_return"], wrong_calls=state["wrong"],
                       checked_calls=state["checked"])
        nbytes = 2.0 * M * N * 4          # X read once, Y written once
        gbs = lambda xs: [nbytes / x / 1e9 for x in xs]  # noqa: E731
        return {
            "tier": "gpu", "M": M, "N": N, "clock": clock,
            "gbs": gbs(t["submission"]), "gbs_three_pass": gbs(t["three_pass"]),
            "gbs_copy": gbs(t["copy"]),
            "copy_fraction": [c / s for s, c in zip(t["submission"], t["copy"])],
            "speedup_three_pass": [b / s for s, b in zip(t["submission"], t["three_pass"])],
            "setup": {"description": f"gpu tier, float32 softmax of {M} x {N}, {rounds} "
                                     f"interleaved rounds timed by {clock} clock, fresh device "
                                     "inputs per call; bandwidth = (bytes of X + bytes of Y) / "
                                     "time, the copy moving the same bytes",
                      "timings": g.to_dict()["timings"]},
            "recheck": recheck,
        }

    def perf_data_check(self, plan: dict, recheck: dict, arrays: dict) -> str | None:
        M, N = int(plan["M"]), int(plan["N"])
        want = {"fn": "softmax", "M": M, "N": N, "dtype": "float32", "kind": "normal"}
        if recheck.get("params") != want:
            return (f"the timed call was not the planned {M} x {N} float32 softmax "
                    f"({recheck.get('params')!r}): was the grading process tampered with?")
        return planned_arrays_problem(arrays, ("X", "Y"), (M, N), "float32")

    def _rules_sim(self, m: dict) -> list[RuleResult]:
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
            speedup = tb["seconds"] / ts["seconds"]
            dram = model.get_profile(m["profile"]).dram_bytes_per_s
            useful = 2.0 * 4 * M * N
            gbs, gbs_base = useful / ts["seconds"] / 1e9, useful / tb["seconds"] / 1e9
            t = total_counters(sub)
            rules.append(with_costliest(RuleResult(
                "modelled speedup over the three-pass softmax", speedup, MIN_MODELLED_SPEEDUP,
                ">=", "x", speedup >= MIN_MODELLED_SPEEDUP,
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
        rules.append(kernels_gate("the softmax was computed by kernels", work, sub,
                                  "every element of Y stored and every byte of X read by "
                                  "kernels"))
        return rules

    def _rules_gpu(self, m: dict) -> list[RuleResult]:
        med = lambda xs: float(np.median(xs))  # noqa: E731
        rng = lambda xs: (float(min(xs)), float(max(xs)))  # noqa: E731
        M, N = int(m["M"]), int(m["N"])
        frac = med(m["copy_fraction"])
        detail = (f"{M} x {N} float32: yours {med(m['gbs']):.0f} GB/s, device-to-device copy "
                  f"{med(m['gbs_copy']):.0f} GB/s, three-pass softmax "
                  f"{med(m['gbs_three_pass']):.0f} GB/s (yours is "
                  f"{med(m['speedup_three_pass']):.2f}x faster)")
        plausible = PLAUSIBLE_VS_COPY * max(m["gbs_copy"])
        return [
            RuleResult("bandwidth vs a device copy", frac, MIN_COPY_FRACTION, ">=", "",
                       frac >= MIN_COPY_FRACTION, detail, rng(m["copy_fraction"])),
            RuleResult("fastest timed call is plausible", max(m["gbs"]), round(plausible, 1),
                       "<=", " GB/s", max(m["gbs"]) <= plausible,
                       f"limit = {PLAUSIBLE_VS_COPY:g} x the fastest copy of the same bytes; "
                       "faster than that means the timer was cheated", rng(m["gbs"]),
                       scored=False),
        ]
