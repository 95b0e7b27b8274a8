"""GPU check (``make gpu-check``): everything the course runs on the ``gpu`` tier, in one command,
on a machine with an NVIDIA GPU. It installs nothing and needs no network: numpy, numba,
numba-cuda, ml_dtypes (the BF16 labs' cases) and (for the cuBLAS baselines) cupy, with the
project on ``PYTHONPATH``. nbformat,
greenlet, threadpoolctl and the notebook stack are not needed (notebooks are read as JSON).

What it does, in well under five minutes on a current GPU:

1. the tier is ``gpu`` (the driver probe and numba-cuda agree); the device, its nominal FP32
   peak (:func:`kernellab.machine.gpu_info`) and the versions;
2. every GPU lab's solution (``gemm-cuda``, ``gemm-tensor-core``, ``softmax-cuda``,
   ``flash-attention``, ``moe``, ``decode-attention``: ``solutions/NN_*.ipynb``) in this
   process: all visible cases against the float64 reference, then the lab's own gpu-tier
   performance measurement and rules (CUDA events, interleaved with its baselines: the naive
   kernel and cupy.matmul; cupy.matmul in float16; the three-pass softmax and a device copy;
   chapter 5's materialised attention and a device copy; one GEMM launch per expert; a device
   copy); then the real grader
   (``grader.runner.grade``: sandboxed worker, gpu tier), whose verdict must be PASS;
3. chapter 2's ladder v1..v4 and the lab solution against cupy.matmul (cuBLAS) at
   M = N = K = ``LADDER_N``, by the ladder's own main (:func:`kernellab.kernels._ladder.run`,
   what ``python -m kernellab.kernels.gemm_cuda`` runs): every version checked against the
   float64 reference at ``LADDER_N`` and at ragged sizes (``gemm_cuda.RAGGED``), then CUDA-event
   timings (one warm-up call each, ``ROUNDS`` interleaved rounds, the output refilled with NaN
   before every call and the last round's output checked again, medians): GFLOP/s, spread,
   speedup over v1, % of cuBLAS, % of the FP32 peak;
4. chapter 3's reduction ladder v1..v7 on ``REDUCE_N`` float32
   (:func:`kernellab.kernels.reduce_cuda.measure_gpu`): GB/s of each version against a
   device-to-device copy of the same bytes, every result checked against its error bound;
5. the sm_80 instructions of :mod:`kernellab.cuda_ext` (:func:`check_sm80`, a few seconds):
   one-warp kernels write each lane's ``ldmatrix`` registers (every width, with and without
   ``.trans``), ``mma.m16n8k16`` results (f16 and bf16, from registers packed by the ISA's
   fragment tables) and ``cp.async`` copies (4/8/16 bytes, zero fill, groups) to global memory,
   compared with :mod:`kernellab.sim.mma`'s evaluation -- the fragment layouts the hardware uses
   against the ones the simulator takes from the PTX ISA -- plus a ``cp.async`` -> ``ldmatrix``
   -> ``mma`` tile against the float64 product. Skipped below compute capability 8.0.

It prints a table and the same figures as JSON (also written to ``--json``, default
``benchmarks/results/gpu_check.json``). Exit status 0 when every check passes, 1 when one fails;
without a usable GPU it says so and exits 0 (nothing to check).

``--simulate`` runs the same code on the ``sim`` tier with tiny sizes and each lab's smallest
visible cases (the labs' measurements with a wall clock and a numpy stand-in for cuBLAS, the
ladder modelled, without a cuBLAS row): the test suite's check of this script on machines
without a GPU (its figures mean nothing; the sm_80 step's kernels run on the simulator's own
evaluation of the instructions, so there it checks only that they compile for sm_80 and this
script's code path).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/gpu_check.py` without PYTHONPATH
    sys.path.insert(0, str(ROOT))

import kernellab  # noqa: E402  first: tier and thread settings before numba.cuda loads

LADDER_N = 4096
ROUNDS = 5
BUDGET_S = 300.0
REDUCE_N = 1 << 26          # 256 MB of float32: far beyond any L2
#: --simulate: the gpu-tier measurement of each lab on tiny sizes
SIM_PLANS = {"gemm-cuda": {"tier": "gpu", "n": 32, "rounds": 2},
             "gemm-tensor-core": {"tier": "gpu", "n": 32, "rounds": 2},
             "softmax-cuda": {"tier": "gpu", "M": 3, "N": 40, "rounds": 2},
             "flash-attention": {"tier": "gpu", "B": 1, "H": 2, "N": 9, "d": 32,
                                 "dtype": "float16", "causal": False, "rounds": 2},
             "moe": {"tier": "gpu", "M": 4, "K": 16, "N": 32, "E": 8, "k": 2, "block": 16,
                     "rounds": 2},
             "decode-attention": {"tier": "gpu", "B": 1, "Hq": 4, "Hkv": 1, "d": 64, "L": 33,
                                  "num_splits": 4, "rounds": 2}}
#: --simulate: only the visible cases whose inputs hold at most this many elements (the run
#: checks this script's code path; every case is graded on the sim tier by the test suite)
SIM_CASE_ELEMENTS = 1 << 13
#: sm_80 step: |D - reference| <= MMA_RTOL x (sum |a b| + |c|) for each element of D. The PTX
#: ISA leaves the order and internal precision of the tensor cores' float32 sum open (the
#: simulator rounds once); float32 summation of the 17 terms in any order, even truncating,
#: stays within 16 x 2^-23 = 2^-19 of that sum, and a misplaced element is off by O(1)
MMA_RTOL = 2.0 ** -17


def _versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _no_gpu_reason() -> str | None:
    """None on the gpu tier, else why not, in plain words."""
    from kernellab import device

    try:
        d = device.describe()
    except device.DeviceError as exc:
        return str(exc)
    return None if d["tier"] == "gpu" else d["reason"]


def load_solution(path: Path) -> types.ModuleType:
    """The solution cells of a lab notebook (or a .py) as a module, as the grader runs them."""
    from grader import notebook

    source = notebook.submission_source(path)
    mod = types.ModuleType(f"solution_{path.stem}")
    mod.__file__ = str(path)
    exec(compile(source, str(path), "exec"), mod.__dict__)  # the course's own solution
    return mod


def _numpy_matmul(dA, dB, dC):
    """--simulate: a numpy stand-in for cuBLAS in the labs' gpu-tier measurement."""
    import numpy as np

    dC.copy_to_device(np.matmul(dA.copy_to_host(), dB.copy_to_host()).astype(dC.dtype))


def check_lab(spec, solution: Path, *, simulate: bool, tmp: Path, say) -> dict:
    """One GPU lab's solution: visible cases, the lab's performance rules (in this process),
    and (not simulating) the sandboxed grader's verdict."""
    from grader.runner import check_case, grade, recheck
    from grader.spec import HiddenCases

    import inspect

    out = {"lab": spec.lab_id, "solution": str(solution.relative_to(ROOT))}
    mod = load_solution(solution)
    namespace = {name: getattr(mod, name) for name in spec.functions}
    cases = [(c, spec.case_data(c)) for c in spec.cases(HiddenCases())]
    if simulate:
        cases = [(c, d) for c, d in cases
                 if sum(a.size for a in d.inputs.values()) <= SIM_CASE_ELEMENTS]
    results = []
    for case, data in cases:
        arrays = {k: v.copy() for k, v in data.inputs.items()}
        arrays.update(data.allocate_outputs())
        try:
            with spec.call_probe(arrays) as info:
                namespace[spec.case_function(case)](*data.args(arrays))
            r = {"ok": True, "arrays": arrays, "info": info}
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            r = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        res = check_case(spec, case, data, r)
        results.append({"case": case.name, "passed": res.passed, "error": res.error})
    out["cases_passed"] = sum(r["passed"] for r in results)
    out["cases_total"] = len(results)
    out["case_errors"] = [r for r in results if not r["passed"]]
    say(f"  {spec.lab_id}: {out['cases_passed']}/{out['cases_total']} cases pass")
    if simulate:  # the gpu-tier measurement, on the simulator with a wall clock
        plan = SIM_PLANS[spec.lab_id]
        kw = {"clock": "wall"}
        if "cublas" in inspect.signature(spec.measure).parameters:
            kw["cublas"] = _numpy_matmul
        measured = spec.measure(namespace, plan, tmp, **kw)
    else:
        plan = spec.perf_plan()
        measured = spec.measure(namespace, plan, tmp)
    rules = spec.perf_rules(measured)
    after = recheck(spec, plan, measured["recheck"], tmp)
    out["performance"] = {"setup": measured["setup"]["description"],
                          "rules": [r.to_dict() for r in rules],
                          "recheck_passed": after.passed, "recheck_error": after.error}
    for r in rules:
        meas = "-" if r.measured is None else f"{r.measured:.3g}{r.unit}"
        say(f"  {'pass' if r.passed else 'FAIL'}  {r.name}: {meas} ({r.op} {r.threshold:g}"
            f"{r.unit})" + ("" if r.scored else " [gate]"))
        if r.detail:
            say(f"        {r.detail}")
    say(f"  re-check of the timed calls: {'ok' if after.passed else 'FAIL — ' + str(after.error)}")
    # simulated: the timings are the simulator's and mean nothing; only correctness counts
    ok = (out["cases_passed"] == out["cases_total"] and after.passed
          and (simulate or all(r.passed for r in rules)))
    if not simulate:
        t0 = time.perf_counter()
        report = grade(spec.lab_id, solution)
        out["grader"] = {"passed": report.passed, "score": report.score, "tier": report.tier,
                         "seconds": round(time.perf_counter() - t0, 1),
                         "fatal": report.fatal, "performance_note": report.performance_note}
        say(f"  kernellab grade {spec.lab_id} {out['solution']}: "
            f"{'PASS' if report.passed else 'FAIL'} ({report.score:g}/{report.max_score}, tier "
            f"{report.tier}, {out['grader']['seconds']} s)")
        if not report.passed:
            say("\n".join("    " + ln for ln in report.to_text().splitlines()))
        ok = ok and report.passed
    out["ok"] = bool(ok)
    return out


def ladder(extra: dict, *, n: int, rounds: int, simulate: bool, say) -> dict:
    """Chapter 2's ladder (and ``extra``: name -> gemm(A, B, C)) at M = N = K = n, by the
    ladder's own main (:func:`kernellab.kernels._ladder.run`): every version validated at n and
    at ragged sizes, then timed (gpu: CUDA events against cuBLAS; --simulate: modelled)."""
    from collections import OrderedDict

    from kernellab import machine
    from kernellab.kernels import _ladder, gemm_cuda

    versions = OrderedDict(gemm_cuda.LADDER)
    versions.update(extra)
    case = gemm_cuda.ladder_case(n, n, n)
    ragged = gemm_cuda.RAGGED_SIM if simulate else gemm_cuda.RAGGED
    baselines = [] if simulate else gemm_cuda.gpu_baselines(case)
    res = _ladder.run(versions, case, ladder="gemm_cuda", baselines=baselines,
                      also_check=[gemm_cuda.ladder_case(*s, seed=1) for s in ragged],
                      rounds=rounds)
    for r in res.results.values():
        if not r.ok:
            say(f"  FAIL {r.name}: {r.message}")
    try:
        info = machine.gpu_info()
        peak, formula = info.peak_flops(), info.formula()
    except Exception as exc:  # noqa: BLE001 - the simulator
        peak, formula = None, f"unknown ({exc})"
    cub = next((r for r in res.results.values() if r.baseline and r.seconds), None)
    note = (cub.name if cub else "none on the sim tier (cuBLAS needs a GPU)" if simulate
            else "cupy not importable: no cuBLAS baseline")
    rows = []
    for name, r in res.results.items():
        rows.append({"kernel": name, "ok": r.ok, "message": r.message, "median_s": r.seconds,
                     "spread": r.spread, "gflops": r.rate, "speedup_v1": r.speedup,
                     "pct_cublas": (100.0 * cub.seconds / r.seconds)
                     if cub and r.seconds else None,
                     "pct_peak": (100.0 * r.rate * 1e9 / peak) if peak and r.rate else None})
    return {"n": n, "rounds": res.rounds, "clock": res.clock, "tier": res.tier,
            "baseline": note, "peak_formula": formula, "checked": res.checked,
            "passed": res.ok, "rows": rows}


def render_ladder(lad: dict) -> str:
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)
    head = (f"{'kernel':<32} {'GFLOP/s':>10} {'spread':>7} {'vs v1':>8} "
            f"{'% cuBLAS':>9} {'% peak':>7}  correct")
    lines = [f"M=N=K={lad['n']}, clock: {lad['clock']}, {lad['rounds']} round(s), medians; "
             f"baseline: {lad['baseline']}; FP32 peak: {lad['peak_formula']}",
             "validated at " + "; ".join(lad["checked"]), head, "-" * len(head)]
    for r in lad["rows"]:
        lines.append(f"{r['kernel']:<32} {f(r['gflops'], '>10.4g'):>10} "
                     f"{f(r['spread'] and 100 * r['spread'], '>6.0f'):>6}% "
                     f"{f(r['speedup_v1'], '>7.2f'):>7}x {f(r['pct_cublas'], '>8.1f'):>8}% "
                     f"{f(r['pct_peak'], '>6.1f'):>6}%  {'yes' if r['ok'] else 'NO'}")
    return "\n".join(lines)


def _sm80_kernels():
    """The one-warp kernels of the sm_80 step (compiled on first launch)."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def k_ldmatrix(T, perm, out):
        # lane l gives the address of row perm[l] of a (32, 8) tile of 16-bit elements
        s = cuda.shared.array((32, 8), np.uint16)
        ln = cuda.laneid
        for j in range(8):
            s[ln, j] = T[ln, j]
        cuda.syncthreads()
        r = perm[ln]
        out[ln, 0] = cuda.ldmatrix_x1(s, (r, 0))
        out[ln, 1] = cuda.ldmatrix_x1_trans(s, (r, 0))
        v = cuda.ldmatrix_x2(s, (r, 0))
        out[ln, 2] = v[0]
        out[ln, 3] = v[1]
        v = cuda.ldmatrix_x2_trans(s, (r, 0))
        out[ln, 4] = v[0]
        out[ln, 5] = v[1]
        w = cuda.ldmatrix_x4(s, (r, 0))
        wt = cuda.ldmatrix_x4_trans(s, (r, 0))
        for j in range(4):
            out[ln, 6 + j] = w[j]
            out[ln, 10 + j] = wt[j]

    @cuda.jit
    def k_mma(a16, b16, abf, bbf, c, d16, dbf):
        # each lane's registers as given (packed on the host by the ISA's fragment tables)
        ln = cuda.laneid
        cc = (c[ln, 0], c[ln, 1], c[ln, 2], c[ln, 3])
        d = cuda.mma_m16n8k16_f16((a16[ln, 0], a16[ln, 1], a16[ln, 2], a16[ln, 3]),
                                  (b16[ln, 0], b16[ln, 1]), cc)
        e = cuda.mma_m16n8k16_bf16((abf[ln, 0], abf[ln, 1], abf[ln, 2], abf[ln, 3]),
                                   (bbf[ln, 0], bbf[ln, 1]), cc)
        for j in range(4):
            d16[ln, j] = d[j]
            dbf[ln, j] = e[j]

    @cuda.jit
    def k_tile(A, B, C, D):
        # A (2, 16, 16), B (2, 16, 8): the f16 and the bf16 operands' bits; C (16, 8);
        # D (2, 16, 8) = A @ B + C through cp.async, ldmatrix and mma, as a GEMM tile does
        sA = cuda.shared.array((2, 16, 16), np.uint16)
        sB = cuda.shared.array((2, 16, 8), np.uint16)
        ln = cuda.laneid
        for m in range(2):
            cuda.cp_async(sA, (m, ln // 2, (ln % 2) * 8), A, (m, ln // 2, (ln % 2) * 8), 16)
            if ln < 16:
                cuda.cp_async(sB, (m, ln, 0), B, (m, ln, 0), 16)
        cuda.cp_async_commit_group()
        cuda.cp_async_wait_group(0)
        cuda.syncthreads()
        g = ln >> 2
        t = ln % 4
        c = (C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1])
        for m in range(2):
            a = cuda.ldmatrix_x4(sA[m], (ln % 16, (ln // 16) * 8))
            b = cuda.ldmatrix_x2_trans(sB[m], (ln % 16, 0))
            if m == 0:
                d = cuda.mma_m16n8k16_f16(a, b, c)
            else:
                d = cuda.mma_m16n8k16_bf16(a, b, c)
            D[m, g, 2 * t] = d[0]
            D[m, g, 2 * t + 1] = d[1]
            D[m, g + 8, 2 * t] = d[2]
            D[m, g + 8, 2 * t + 1] = d[3]

    @cuda.jit
    def k_cp_async(src, flat, nb, out):
        # three groups: 16-byte copies; zero-filled 16-byte and 8-byte copies; 4-byte copies.
        # Each lane reads another lane's data once its own wait and a barrier have passed.
        s1 = cuda.shared.array((32, 4), np.uint32)
        s2 = cuda.shared.array((32, 4), np.uint32)
        s3 = cuda.shared.array(64, np.uint32)
        s4 = cuda.shared.array(32, np.uint32)
        ln = cuda.laneid
        cuda.cp_async(s1, (ln, 0), src, (ln, 0), 16)
        cuda.cp_async_commit_group()
        cuda.cp_async_zfill(s2, (ln, 0), src, (32 + ln, 0), 16, nb[ln])
        cuda.cp_async(s3, 2 * ln, flat, 2 * ln, 8)
        cuda.cp_async_commit_group()
        cuda.cp_async(s4, ln, flat, 64 + ln, 4)
        cuda.cp_async_commit_group()
        cuda.cp_async_wait_group(2)         # the first group has landed
        cuda.syncthreads()
        o = 31 - ln
        cuda.st_v4(out, (ln, 0), cuda.ld_v4(s1, (o, 0)))
        cuda.cp_async_wait_group(0)
        cuda.syncthreads()
        cuda.st_v4(out, (ln, 4), cuda.ld_v4(s2, (o, 0)))
        cuda.st_v2(out, (ln, 8), cuda.ld_v2(s3, 2 * o))
        out[ln, 10] = s4[o]

    return k_ldmatrix, k_mma, k_tile, k_cp_async


def _bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even; numpy only)."""
    import numpy as np

    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _decode(bits, kind):
    """16-bit element bits of ``kind`` ("f16", "bf16") as float64."""
    import numpy as np

    bits = np.asarray(bits, np.uint16)
    if kind == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _mma_reference(a, b, c, kind):
    """D of one warp's ``mma.m16n8k16`` by :func:`kernellab.sim.mma.mma_m16n8k16`; without
    ml_dtypes (bf16 not in ``mma.KINDS``) the same evaluation over the same layouts, decoded
    here."""
    import numpy as np
    from kernellab.sim import mma

    if kind in mma.KINDS:
        return mma.mma_m16n8k16(a, b, c, kind)
    A = np.empty((16, 16))
    B = np.empty((16, 8))
    C = np.empty((16, 8))
    for ln in range(32):
        av = _decode(mma.unpack(a[ln], np.uint16).reshape(-1), kind)
        bv = _decode(mma.unpack(b[ln], np.uint16).reshape(-1), kind)
        for i, rc in enumerate(mma.a_coords(ln)):
            A[rc] = av[i]
        for i, kn in enumerate(mma.b_coords(ln)):
            B[kn] = bv[i]
        for i, rc in enumerate(mma.c_coords(ln)):
            C[rc] = c[ln, i]
    D = (A @ B + C).astype(np.float32)
    return np.array([[D[rc] for rc in mma.c_coords(ln)] for ln in range(32)], np.float32)


def check_sm80(*, cc=None, say) -> dict:
    """Step 5: the sm_80 instructions on this device against :mod:`kernellab.sim.mma` (module
    docstring). ``cc``: the device's compute capability (None: not known, run anyway)."""
    import numpy as np
    from numba import cuda

    from kernellab.sim import mma

    if cc is not None and tuple(cc) < (8, 0):
        why = (f"compute capability {cc[0]}.{cc[1]}: mma.m16n8k16 and cp.async need 8.0 or "
               "later")
        say(f"  skipped: {why}")
        return {"skipped": why, "passed": True}
    t0 = time.perf_counter()
    k_ldmatrix, k_mma, k_tile, k_cp_async = _sm80_kernels()
    rng = np.random.default_rng(80)
    checks = []

    def record(name, ok, detail):
        checks.append({"name": name, "ok": bool(ok), "detail": detail})
        say(f"  {'pass' if ok else 'FAIL'}  {name}: {detail}")

    def run(name, fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a failed check, reported in one line
            record(name, False, f"{type(exc).__name__}: {str(exc)[:300]}")

    def host(*arrays):
        return [cuda.to_device(np.ascontiguousarray(x)) for x in arrays]

    def bits(x, kind):
        return np.asarray(x, np.float16).view(np.uint16) if kind == "f16" else _bf16_bits(x)

    def within(D, A, B, C, ref):
        """D (16 x 8) against ref: the worst error in units of the tolerance."""
        bound = MMA_RTOL * (np.abs(A) @ np.abs(B) + np.abs(C)) + 1e-30
        return float(np.max(np.abs(np.asarray(D, np.float64) - ref) / bound))

    def ldmatrix_step():
        T = rng.integers(0, 1 << 16, (32, 8), dtype=np.uint16)
        perm = rng.permutation(32).astype(np.int32)
        dT, dp, dout = host(T, perm, np.zeros((32, 14), np.uint32))
        k_ldmatrix[1, 32](dT, dp, dout)
        out = dout.copy_to_host()
        rows = T[perm]          # matrix j, row r: the row lane 8 j + r pointed at
        bad = []
        for name, col, n, trans in (("x1", 0, 1, False), ("x1.trans", 1, 1, True),
                                    ("x2", 2, 2, False), ("x2.trans", 4, 2, True),
                                    ("x4", 6, 4, False), ("x4.trans", 10, 4, True)):
            want = mma.ldmatrix(rows[:8 * n], trans)
            wrong = int((out[:, col:col + n] != want).sum())
            if wrong:
                bad.append(f"{name}: {wrong} of {32 * n} registers differ")
        record("ldmatrix x1/x2/x4, .trans", not bad,
               "; ".join(bad) or "every lane's registers as the ISA's ldmatrix table gives")

    def mma_step():
        regs = {}
        mats = {}
        C = rng.standard_normal((16, 8)).astype(np.float32)
        c = np.array([[C[rc] for rc in mma.c_coords(ln)] for ln in range(32)], np.float32)
        for kind in ("f16", "bf16"):
            Ab = bits(rng.standard_normal((16, 16)), kind)
            Bb = bits(rng.standard_normal((16, 8)), kind)
            a = np.array([[mma.pack(Ab[mma.a_coords(ln)[2 * i]], Ab[mma.a_coords(ln)[2 * i + 1]])
                           for i in range(4)] for ln in range(32)], np.uint32)
            b = np.array([[mma.pack(Bb[mma.b_coords(ln)[2 * i]], Bb[mma.b_coords(ln)[2 * i + 1]])
                           for i in range(2)] for ln in range(32)], np.uint32)
            regs[kind] = (a, b)
            mats[kind] = (_decode(Ab, kind), _decode(Bb, kind))
        dev = host(*regs["f16"], *regs["bf16"], c, np.zeros((32, 4), np.float32),
                   np.zeros((32, 4), np.float32))
        k_mma[1, 32](*dev)
        for kind, dout in (("f16", dev[5]), ("bf16", dev[6])):
            got = dout.copy_to_host()
            want = _mma_reference(*regs[kind], c, kind)
            A, B = mats[kind]
            # the error bound, in D's lane layout
            bound = MMA_RTOL * (np.abs(A) @ np.abs(B) + np.abs(C))
            lb = np.array([[bound[rc] for rc in mma.c_coords(ln)] for ln in range(32)])
            worst = float(np.max(np.abs(got.astype(np.float64) - want) / (lb + 1e-30)))
            record(f"mma.m16n8k16 {kind} fragments", worst <= 1.0,
                   f"|D - kernellab.sim.mma| at most {worst:.3g} x the tolerance "
                   f"({MMA_RTOL:.3g} x sum |a b| + |c|)")

    def tile_step():
        C = rng.standard_normal((16, 8)).astype(np.float32)
        A = np.empty((2, 16, 16), np.uint16)
        B = np.empty((2, 16, 8), np.uint16)
        for m, kind in enumerate(("f16", "bf16")):
            A[m] = bits(rng.standard_normal((16, 16)), kind)
            B[m] = bits(rng.standard_normal((16, 8)), kind)
        dA, dB, dC, dD = host(A, B, C, np.full((2, 16, 8), np.nan, np.float32))
        k_tile[1, 32](dA, dB, dC, dD)
        D = dD.copy_to_host()
        for m, kind in enumerate(("f16", "bf16")):
            Af, Bf = _decode(A[m], kind), _decode(B[m], kind)
            worst = within(D[m], Af, Bf, C, Af @ Bf + C)
            record(f"cp.async + ldmatrix + mma {kind} tile", worst <= 1.0,
                   f"|D - (A @ B + C)| at most {worst:.3g} x the tolerance (float64 product)")

    def cp_async_step():
        src = rng.integers(0, 1 << 32, (64, 4), dtype=np.uint32)
        flat = rng.integers(0, 1 << 32, 96, dtype=np.uint32)
        nb = np.array([4 * (ln % 5) for ln in range(32)], np.int32)   # 0 .. 16 bytes
        dsrc, dflat, dnb, dout = host(src, flat, nb, np.zeros((32, 12), np.uint32))
        k_cp_async[1, 32](dsrc, dflat, dnb, dout)
        out = dout.copy_to_host()
        want = np.zeros((32, 12), np.uint32)
        for ln in range(32):
            o = 31 - ln
            want[ln, 0:4] = src[o]
            want[ln, 4:4 + nb[o] // 4] = src[32 + o, :nb[o] // 4]
            want[ln, 8:10] = flat[2 * o:2 * o + 2]
            want[ln, 10] = flat[64 + o]
        wrong = int((out != want).sum())
        record("cp.async 4/8/16 B, zfill, groups; ld/st.v2/v4", wrong == 0,
               f"{wrong} of {want.size} words differ" if wrong else
               "every copied and zero-filled word where it belongs")

    run("ldmatrix x1/x2/x4, .trans", ldmatrix_step)
    run("mma.m16n8k16 fragments", mma_step)
    run("cp.async + ldmatrix + mma tile", tile_step)
    run("cp.async 4/8/16 B, zfill, groups; ld/st.v2/v4", cp_async_step)
    seconds = round(time.perf_counter() - t0, 2)
    passed = bool(checks) and all(c["ok"] for c in checks)
    say(f"  {sum(c['ok'] for c in checks)}/{len(checks)} checks pass ({seconds} s)")
    return {"passed": passed, "checks": checks, "seconds": seconds,
            "reference": "kernellab.sim.mma (the PTX ISA's fragment tables)",
            "mma_rtol": MMA_RTOL}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "gpu_check.json"),
                    help="where to write the figures as JSON")
    ap.add_argument("--simulate", action="store_true",
                    help="run on the sim tier with tiny sizes (a test of this script)")
    ap.add_argument("--n", type=int, default=None, help=f"ladder size (default {LADDER_N})")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    say = lambda m: print(m, flush=True)  # noqa: E731

    reason = _no_gpu_reason()
    if reason is not None and not args.simulate:
        say(f"gpu-check: no usable NVIDIA GPU here ({reason}); nothing to check. Run "
            "`make gpu-check` on a machine with a GPU.")
        return 0
    if args.simulate and kernellab.TIER != "sim":
        say("gpu-check --simulate needs the sim tier (KERNELLAB_DEVICE=sim)")
        return 2

    from grader.labs import all_specs
    from kernellab import machine

    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "simulated": args.simulate,
              "versions": _versions(), "tier": kernellab.TIER}
    try:
        g = machine.gpu_info()
        report["gpu"] = {"name": g.name, "cc": list(g.cc), "sms": g.sms, "ghz": g.ghz,
                         "fp32_peak_tflops": g.peak_flops() / 1e12, "formula": g.formula()}
        say(f"GPU: {g.name}, cc {g.cc[0]}.{g.cc[1]}, {g.formula()}")
    except Exception as exc:  # noqa: BLE001 - the simulated run
        report["gpu"] = None
        say(f"GPU: none ({exc})")
    say("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))

    ok = True
    labs = []
    from grader.labs._cuda import CudaLab

    gpu_specs = [s for s in all_specs() if isinstance(s, CudaLab)]   # the gpu/sim-tier labs
    with tempfile.TemporaryDirectory(prefix="kernellab-gpu-check-") as d:
        for spec in gpu_specs:
            say(f"\nlab {spec.lab_id} ({spec.title}), solution solutions/{spec.notebook}:")
            path = ROOT / "solutions" / spec.notebook
            sub = Path(d) / spec.lab_id
            sub.mkdir()
            try:
                res = check_lab(spec, path, simulate=args.simulate, tmp=sub, say=say)
            except Exception as exc:  # noqa: BLE001 - a failed check, reported in one line
                res = {"lab": spec.lab_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                say(f"  FAIL: {res['error']}")
            labs.append(res)
            ok &= bool(res.get("ok"))
    report["labs"] = labs

    extra = {}
    try:
        extra["lab 2 solution"] = load_solution(ROOT / "solutions" / "02_gemm_cuda.ipynb").gemm
    except Exception as exc:  # noqa: BLE001 - the ladder runs without it
        say(f"  (lab 2 solution not in the ladder: {type(exc).__name__}: {exc})")
    n = args.n or (32 if args.simulate else LADDER_N)
    say("\nchapter 2 ladder vs cuBLAS:")
    try:
        lad = ladder(extra, n=n, rounds=2 if args.simulate else ROUNDS, simulate=args.simulate,
                     say=say)
        say(render_ladder(lad))
        ok &= lad["passed"]
    except Exception as exc:  # noqa: BLE001
        lad = {"error": f"{type(exc).__name__}: {exc}"}
        say(f"  FAIL: {lad['error']}")
        ok = False
    report["ladder"] = lad

    say("\nchapter 3 reduction ladder vs a device copy:")
    if args.simulate:
        red = {"skipped": "the sim tier has no clock (kernellab.kernels.reduce_cuda.measure_gpu "
                          "needs a GPU)"}
        say(f"  skipped: {red['skipped']}")
    else:
        try:
            from kernellab.kernels.reduce_cuda import measure_gpu

            red = measure_gpu(REDUCE_N, rounds=ROUNDS)
            say(f"  n = {red['n']} float32, copy {red['copy_gbps']:.0f} GB/s (8n bytes / median)")
            for name, gbps in red["gbps"].items():
                say(f"  {name:<24} {gbps:>8.1f} GB/s  {red['fraction_of_copy'][name]:>6.1%} of "
                    "the copy")
        except Exception as exc:  # noqa: BLE001 - a failed check, reported in one line
            red = {"error": f"{type(exc).__name__}: {exc}"}
            say(f"  FAIL: {red['error']}")
            ok = False
    report["reduction_ladder"] = red

    say("\nsm_80 instructions (mma, ldmatrix, cp.async) vs kernellab.sim.mma:")
    try:
        gpu = report.get("gpu")
        sm80 = check_sm80(cc=gpu["cc"] if gpu else None, say=say)
    except Exception as exc:  # noqa: BLE001 - a failed check, reported in one line
        sm80 = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
        say(f"  FAIL: {sm80['error']}")
    ok &= sm80["passed"]
    report["sm80"] = sm80
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    report["passed"] = bool(ok)
    if report["seconds"] > BUDGET_S:
        say(f"note: took {report['seconds']} s, over the {BUDGET_S:.0f} s budget")
    text = json.dumps(report, indent=2, default=str)
    say("\nJSON:\n" + text)
    try:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
        say(f"written to {args.json}")
    except OSError as exc:
        say(f"could not write {args.json}: {exc}")
    say(f"gpu-check: {'PASS' if ok else 'FAIL'} in {report['seconds']} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
