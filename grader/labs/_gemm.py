"""What the GEMM labs share: case seeds, a case's arrays, and the comparison with the golden
reference (C = A @ B with A (M, K), B (K, N), C (M, N), one float dtype)."""

from __future__ import annotations

import numpy as np

from grader.spec import Case, CaseData
from kernellab.numerics import KAware, compare, unit_roundoff
from reference_kernels.gemm import gemm_abs_product, gemm_golden

# Bound when the grader's worker imports this module, before the submission loads: the check
# cannot be swapped out from under the grader.
_NUMPY_MATMUL = np.matmul


def gemm_case_data(case: Case) -> CaseData:
    """Standard-normal A (M, K) and B (K, N) of ``case.params["dtype"]`` from the case's seed;
    C (M, N) as the output, called as ``gemm(A, B, C)``."""
    p = case.params
    rng = np.random.default_rng(case.seed)
    dt = np.dtype(p["dtype"])
    A = rng.standard_normal((p["M"], p["K"]), dtype=dt)
    B = rng.standard_normal((p["K"], p["N"]), dtype=dt)
    return CaseData(inputs={"A": A, "B": B}, outputs={"C": ((p["M"], p["N"]), dt.name)},
                    call=["A", "B", "C"])


def gemm_check(data: CaseData, outputs: dict, acc_dtype: str | None = None):
    """C against the float64 golden product of the same inputs, under the K-aware bound with
    accumulation and output in ``acc_dtype`` (default: the inputs' dtype)
    (:class:`kernellab.numerics.KAware`). Returns a kernellab.numerics.Comparison."""
    A, B = data.inputs["A"], data.inputs["B"]
    acc = acc_dtype or A.dtype.name
    policy = KAware(K=A.shape[1], acc_dtype=acc, out_dtype=acc,
                    abs_product=gemm_abs_product(A, B))
    return compare(outputs["C"], gemm_golden(A, B), policy)


def device_work_problem(launches: list[dict], M: int, N: int, K: int,
                        in_itemsize: int = 4) -> str | None:
    """CUDA labs, sim tier: None if the captured launches can have produced C = A @ B (C
    float32): at least one launch, at least M*N elements stored to global memory (plain stores
    and atomics: a split-K kernel adds into C; or C's bytes, for wide vector stores), and every
    byte of A and B read (compulsory DRAM reads >= ``in_itemsize`` (MK + KN) bytes; sector
    rounding only adds). Else what is missing, in plain words."""
    from grader.labs._cuda import total_counters

    if not launches:
        return ("no kernel was launched: gemm must compute C in a CUDA kernel (this lab grades "
                "the kernel, not host code)")
    t = total_counters(launches)
    stored = t["global_store_elements"] + t["atomics"]
    if stored < M * N and t["global_store_bytes"] < 4 * M * N:
        return (f"the kernels stored {stored} element(s) to global memory, fewer than the "
                f"{M * N} of C: the rest of C was computed on the host, which this lab does not "
                "accept")
    need = in_itemsize * (M * K + K * N)
    if t["dram_read_bytes"] < need:
        return (f"the kernels read {t['dram_read_bytes']} bytes of global memory, fewer than "
                f"the {need} of A and B: C must be computed on the device from A and B, not "
                "copied there from the host")
    return None


def probably_correct(A: np.ndarray, B: np.ndarray, C: np.ndarray, rng) -> bool:
    """Worker side, after every timed call (outside the timer): is C = A @ B within the lab's
    tolerance? Freivalds' check with two random +-1 vectors x, row by row:
    |C x - A (B x)| <= 2 (c sqrt(K) (u_acc + u_ref) + u_out) |A| (|B| 1), which every output the
    element-wise K-aware rule accepts meets (so it never fails a correct call), while a row left
    out or zeroed misses it by orders of magnitude. O(n^2): a few ms at n = 1024."""
    K = A.shape[1]
    A64, B64, C64 = (a.astype(np.float64) for a in (A, B, C))
    if C64.shape != (A.shape[0], B.shape[1]) or not np.isfinite(C64).all():
        return False
    dt = A.dtype.name
    coef = KAware(K=K, acc_dtype=dt, out_dtype=dt).coefficient() + unit_roundoff(dt)
    scale = _NUMPY_MATMUL(np.abs(A64), _NUMPY_MATMUL(np.abs(B64), np.ones(B.shape[1])))
    bound = 2.0 * coef * scale + np.finfo(np.float64).tiny
    for _ in range(2):
        x = rng.choice(np.array([-1.0, 1.0]), size=B.shape[1])
        r = _NUMPY_MATMUL(C64, x) - _NUMPY_MATMUL(A64, _NUMPY_MATMUL(B64, x))
        if not (np.abs(r) <= bound).all():
            return False
    return True
