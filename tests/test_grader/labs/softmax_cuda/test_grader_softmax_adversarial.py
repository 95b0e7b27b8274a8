"""Adversarial submissions against lab softmax-cuda's sim-tier grader (the known-wrong ones are in
tests/test_grader/labs/softmax_cuda/test_grader_softmax_cuda.py): host computations smuggled into
kernels through the output,
a tuple argument, a global or a closure; launches on the stock simulator (no race detector);
atomics that read for free; stores into a scratch array or the output overwritten on the host
in the timed call; token shuffles; a row max that starts at 0; odd hidden cases. Each
submission is in grader/labs/softmax_cuda/submissions/wrong/adversarial/; its header states the
expected verdict.

To stay fast most checks run in this process, as the worker does: one case under the lab's
probe, or a timed call on a small matrix; two go through the whole grader (the worker's JSON
boundary) to show the verdict end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kernellab
from grader.labs.softmax_cuda import spec as lab
from grader.labs._cuda import stores_into_final, with_atomic_reads
from grader.runner import check_case, grade, recheck
from grader.spec import HiddenCases
from grader.static_check import check_source
from known import Folder  # tests/known.py: where each known submission is

ROOT = Path(__file__).resolve().parents[4]
ADV = Folder("softmax-cuda", "wrong")  # wrong/adversarial/

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the counters and digests are the sim tier's")

GATE = "the softmax was computed by kernels"
SPEED = "modelled speedup over the three-pass softmax"
SMALL = {"tier": "sim", "M": 16, "N": 256, "profile": "a100"}   # a small timed call


def load(name: str, **replace) -> dict:
    """The submission's namespace, after the static rules (which it must pass: these attacks
    are about what it does at run time)."""
    src = (ADV / name).read_text()
    for old, new in replace.items():
        assert old in src
        src = src.replace(old, new)
    spec = lab.SoftmaxCUDA()
    assert not check_source(src, allowed_imports=spec.allowed_imports,
                            banned_names=spec.banned_names,
                            allowed_submodules=spec.allowed_submodules)
    ns = {"__name__": "submission"}
    exec(compile(src, str(ADV / name), "exec"), ns)
    return ns


def run_case(ns: dict, name: str):
    """One visible case as the worker runs it (under the lab's probe, the probe's findings
    through JSON) and judged as the grader judges it."""
    spec = lab.SoftmaxCUDA()
    case = next(c for c in spec.cases(HiddenCases()) if c.name == name)
    data = spec.case_data(case)
    arrays = {k: v.copy() for k, v in data.inputs.items()}
    arrays.update(data.allocate_outputs())
    with spec.call_probe() as info:
        ns[spec.case_function(case)](*[arrays[n] for n in data.call])
    info = json.loads(json.dumps(info))
    return check_case(spec, case, data, {"ok": True, "arrays": arrays, "info": info})


def timed(ns: dict, tmp_path: Path, plan: dict = SMALL):
    """The sim tier's timed call (``SMALL``: 16 x 256), its rules and its re-check."""
    spec = lab.SoftmaxCUDA()
    m = json.loads(json.dumps(spec.measure({"softmax": ns["softmax"]}, plan, tmp_path)))
    rules = {r.name: r for r in spec.perf_rules(m)}
    return rules, recheck(spec, plan, m["recheck"], tmp_path)


# ------------------------------------------------------------------ the correctness cases
def test_host_result_touched_by_a_kernel_that_never_reads_x_fails():
    ns = load("host_computed_touch_output.py")
    for name in ("row_sum float32 2x257", "softmax float16 2x1000"):
        res = run_case(ns, name)
        assert not res.passed and "the kernels read 0 bytes of X" in res.error, res.error
        assert res.comparison["ok"]          # the values were right: the rule is what fails


def test_kernels_on_the_stock_simulator_fail_end_to_end():
    rep = grade("softmax-cuda", ADV / "record_array_stock_launch.py", run_performance=False)
    assert not rep.passed and all(not c.passed for c in rep.cases)
    unchecked = [c for c in rep.cases if "ran on numba's stock simulator" in c.error]
    assert len(unchecked) >= 38, rep.to_text()      # the rest: exp overflows on the host's math
    assert "racy_softmax" in unchecked[-1].error or "racy_sum" in unchecked[-1].error
    assert "Traceback" not in rep.to_text()


def test_local_atomics_are_no_stores_of_the_output():
    ns = load("row_sum_local_atomics.py")
    res = run_case(ns, "row_sum float32 3x255")
    assert not res.passed and "stored to 0 element(s) of global memory" in res.error, res.error
    assert run_case(ns, "softmax float32 2x33").passed


def test_token_shuffles_fail_the_shuffle_rule():
    ns = load("row_sum_token_shuffles.py")
    res = run_case(ns, "row_sum float32 3x255")
    assert not res.passed and "fewer than 5 a warp" in res.error, res.error
    assert run_case(ns, "row_sum float32 2x33").passed     # below 64: no shuffle rule


def test_a_row_max_that_starts_at_zero_fails_the_masked_case():
    ns = load("max_starts_at_zero.py")
    for dt in lab.DTYPES:
        res = run_case(ns, f"softmax {dt} 4x300 masked")
        assert not res.passed and "single finite entry" in res.error, res.error
    assert run_case(ns, "softmax float32 3x100 large").passed


def test_the_masked_case_has_a_row_with_one_finite_entry_far_below_zero():
    X = lab.softmax_inputs(np.random.default_rng(1), 4, 300, "float16", "masked")
    finite = np.isfinite(X)
    assert finite[0].sum() == 1 and X[0][finite[0]][0] < -500
    assert not finite[-1].any() and finite[1:3].any(axis=1).all()


#: global_array.py with the array reached through a device function's default argument
VIA_DEFAULT = {"@cuda.jit\ndef inject(": "@cuda.jit(device=True)\ndef from_buf(i, S=BUF):\n"
                                          "    return S[i]\n\n\n@cuda.jit\ndef inject(",
               "v = BUF[r * n + j]": "v = from_buf(r * n + j)"}


@pytest.mark.parametrize("name,array,replace", [("closure_array.py", "S", {}),
                                                ("global_array.py", "BUF", {}),
                                                ("global_array.py", "S", VIA_DEFAULT)])
def test_arrays_read_from_globals_or_closures_fail(name, array, replace):
    ns = load(name, **replace)
    res = run_case(ns, "softmax float32 2x33")
    assert not res.passed and "not from its arguments" in res.error, res.error
    assert f"reads the array {array} (" in res.error, res.error


def test_arrays_in_a_tuple_argument_are_counted():
    ns = load("tuple_argument.py")
    spec = lab.SoftmaxCUDA()
    case = next(c for c in spec.cases(HiddenCases()) if c.name == "softmax float32 2x1000")
    data = spec.case_data(case)
    Y = np.full((2, 1000), np.nan, np.float32)
    with spec.call_probe() as info:
        ns["softmax"](data.inputs["X"], Y)
    arrays = {a["name"]: a for a in info["launches"][0]["arrays"]}
    assert arrays["pack[0]"]["dram_read_bytes"] >= 4 * 2000      # copied, counted
    assert run_case(ns, "softmax float32 2x1000").passed          # the known limit


# ---------------------------------------------------------------------- honest designs
@pytest.mark.parametrize("name", ["warp_per_row.py", "shuffle_then_atomic_row_sum.py"])
def test_honest_designs_pass(name, tmp_path):
    ns = load(name)
    for case in ("row_sum float32 3x255", "row_sum float16 1x4097", "softmax float16 4x300 masked",
                 "softmax float32 2x33"):
        res = run_case(ns, case)
        assert res.passed, (case, res.error)
    rules, after = timed(ns, tmp_path)
    assert rules[GATE].passed, rules[GATE].detail
    assert after.passed, after.error


# --------------------------------------------- grids that leave the GPU idle (the timed call)
def _launch(blocks: int, rows: int, reads: int, writes: int) -> dict:
    """Counters of a launch over ``rows`` rows of PERF_N floats on ``blocks`` blocks: X read
    ``reads`` times (once from DRAM, the rest from L2), ``writes`` floats stored a row, all
    coalesced, 6 barriers a row (the solution's)."""
    from grader.labs._cuda import LAUNCH_COUNTERS

    x, w = 4 * rows * lab.PERF_N, 4 * rows * writes
    c = dict.fromkeys(LAUNCH_COUNTERS, 0)
    c.update(blocks=blocks, threads=256 * blocks, dram_read_bytes=x, dram_write_bytes=w,
             global_load_sectors=reads * x // 32, global_store_sectors=w // 32,
             global_load_bytes=reads * x, global_store_bytes=w, barriers=6 * rows)
    return {"name": "k", "grid": [blocks, 1, 1], "block": [256, 1, 1], "counters": c}


def test_the_speed_rule_charges_a_grid_that_leaves_sms_idle():
    """At the timed shape (128 rows, more than the 108 SMs): one block a row models at 2x the
    three-pass softmax; the same traffic in one block (one_block_all_rows.py), in a launch of
    one block per row (launch_per_row.py) or in 16 blocks (warp_per_row.py: 8 rows a block)
    gets only that share of the chip and fails."""
    M, N = lab.PERF_M, lab.PERF_N
    three = [_launch(M, M, 1, 1), _launch(M, M, 1, 1), _launch(M, M, 1, N)]
    t3 = lab.modelled_as_launched(three)["seconds"]
    speed = {k: t3 / lab.modelled_as_launched(v)["seconds"] for k, v in {
        "block per row": [_launch(M, M, 3, N)], "one block": [_launch(1, M, 3, N)],
        "launch per row": [_launch(1, 1, 3, N)] * M, "16 blocks": [_launch(16, M, 3, N)],
    }.items()}
    assert speed["block per row"] == pytest.approx(2.0, rel=0.02)
    for k in ("one block", "launch per row", "16 blocks"):
        assert speed[k] < lab.MIN_MODELLED_SPEEDUP / 1.5, (k, speed)
    assert speed["launch per row"] == pytest.approx(speed["one block"], rel=0.01)


def test_one_block_for_every_row_is_charged_as_one_sm(tmp_path):
    """End to end in this process (a small timed call): the grid-stride kernel with one block
    models 16x slower than the same kernel with one block per row on 16 rows, the share of the
    chip a 1-block grid gets against a 16-block one; the detail says why."""
    ns = load("one_block_all_rows.py")
    assert run_case(ns, "softmax float32 4x300 masked").passed
    one, after = timed(ns, tmp_path)
    assert one[GATE].passed and after.passed, one[GATE].detail
    wide, _ = timed(load("one_block_all_rows.py", **{
        "softmax_kernel[GRID, TPB](X, Y)": "softmax_kernel[X.shape[0], TPB](X, Y)"}), tmp_path)
    ratio = wide[SPEED].measured / one[SPEED].measured
    assert ratio == pytest.approx(SMALL["M"], rel=0.05), (one[SPEED].detail, wide[SPEED].detail)
    assert "your smallest: 1 block(s) in 1 launch(es)" in one[SPEED].detail


def test_a_full_grid_where_one_block_does_every_row_is_charged_as_one_sm(tmp_path):
    """one_block_does_all.py: a block per row launched, block 0 doing every row and the rest
    returning at once. The launch's totals are the solution's; its busiest block moves all of
    them, so it models as the one-block grid does (one SM working: without the busiest-block
    bound it would model 16 times faster on the 16 rows of the small timed call), and the
    detail says why. At the timed shape (128 blocks: the grid fills the GPU) it fails the speed
    rule: shown on its counters built analytically (simulating 128 rows on one block takes
    half a minute)."""
    ns = load("one_block_does_all.py")
    assert run_case(ns, "softmax float32 4x300 masked").passed
    idle, after = timed(ns, tmp_path)
    assert idle[GATE].passed and after.passed, idle[GATE].detail
    one, _ = timed(load("one_block_all_rows.py"), tmp_path)
    assert idle[SPEED].measured == pytest.approx(one[SPEED].measured, rel=0.02), (
        idle[SPEED].detail, one[SPEED].detail)
    assert "yours moved 100% of its launch's global sectors" in idle[SPEED].detail
    assert f"your smallest: {SMALL['M']} block(s)" in idle[SPEED].detail
    M, N = lab.PERF_M, lab.PERF_N
    three = [_launch(M, M, 1, 1), _launch(M, M, 1, 1), _launch(M, M, 1, N)]
    busy = _launch(M, M, 3, N)
    c = busy["counters"]
    busy["block_max"] = {"global_sectors": c["global_load_sectors"] + c["global_store_sectors"],
                         "shared_wavefronts": 0, "barriers": c["barriers"]}
    t3 = lab.modelled_as_launched(three)["seconds"]
    assert t3 / lab.modelled_as_launched([busy])["seconds"] == pytest.approx(
        t3 / lab.modelled_as_launched([_launch(1, M, 3, N)])["seconds"], rel=0.01)
    assert t3 / lab.modelled_as_launched([busy])["seconds"] < lab.MIN_MODELLED_SPEEDUP / 10


# ------------------------------------------------------------------ the timed call (sim)
@pytest.mark.parametrize("mode,why", [
    ("touch", "the kernels read 0 bytes of X"),
    ("scratch", "stored 0 element(s) of the final softmax output"),
    ("overwrite", "stored 0 element(s) of the final softmax output"),
    ("global", "reads the array BUF"),
])
def test_timed_call_with_a_host_result_fails_the_gate(mode, why, tmp_path):
    ns = load("timed_call_cheats.py", **{'MODE = "touch"': f'MODE = "{mode}"'})
    assert run_case(ns, "softmax float32 2x1000").passed            # honest on the cases
    rules, after = timed(ns, tmp_path)
    assert not rules[GATE].passed and why in rules[GATE].detail, rules[GATE].detail
    assert SPEED not in rules                                        # nothing to score
    assert after.passed                                              # the values were right


@pytest.mark.parametrize("mode", ["atomic", "tuple"])
def test_timed_call_reading_a_host_result_pays_for_it(mode, tmp_path):
    """A host result read by the kernel (through atomics, or a tuple argument) passes the gate
    but costs a third pass over memory: 12 DRAM bytes per element, not a fused kernel's 8."""
    ns = load("timed_call_cheats.py", **{'MODE = "touch"': f'MODE = "{mode}"'})
    rules, _ = timed(ns, tmp_path)
    assert rules[GATE].passed, rules[GATE].detail
    assert "DRAM bytes per element of X: 12.0" in rules[SPEED].detail, rules[SPEED].detail


def test_timed_call_through_atomics_fails_the_speed_rule_end_to_end(tmp_path):
    """The whole grader, at the lab's timed shape: 1.33x (three accesses an element)."""
    src = (ADV / "timed_call_cheats.py").read_text().replace('MODE = "touch"', 'MODE = "atomic"')
    sub = tmp_path / "atomic.py"
    sub.write_text(src)
    rep = grade("softmax-cuda", sub)
    assert all(c.passed for c in rep.cases), rep.to_text()
    speed = next(r for r in rep.rules if r.name == SPEED)
    assert not speed.passed and speed.measured == pytest.approx(4 / 3, rel=0.02), rep.to_text()
    assert not rep.passed


def test_atomics_are_modelled_as_reads():
    launch = {"name": "k", "counters": {"dram_read_bytes": 64},
              "arrays": [{"dram_atomic_bytes": 32}, {"dram_atomic_bytes": 0}]}
    assert with_atomic_reads([launch])[0]["counters"]["dram_read_bytes"] == 96
    assert launch["counters"]["dram_read_bytes"] == 64             # a copy, not the original


def test_the_final_output_is_traced_back_through_launches():
    def a(start, end, stored):
        return {"digest_start": start, "digest_end": end, "elements_stored": stored}

    two = [{"arrays": [a("x", "x", 0), a("nan", "half", 5)]},
           {"arrays": [a("x", "x", 0), a("half", "full", 5)]}]
    assert stores_into_final(two, "full") == 10                      # written over two launches
    assert stores_into_final(two, "other") == 0                      # written on the host
    host_between = [two[0], {"arrays": [a("host", "full", 5)]}]
    assert stores_into_final(host_between, "full") == 5             # the chain breaks


# ------------------------------------------------------------------------ hidden cases
def test_hidden_case_sizes_must_be_whole_numbers():
    """JSON integers only, as in every lab (grader.spec.parse_hidden_case and
    tests/test_grader/test_hidden_cases.py): never 2.0, "70", true, 2.5, null or "1e3"."""
    spec = lab.SoftmaxCUDA()
    ok = spec.cases(HiddenCases(cases=[{"fn": "softmax", "M": 1, "N": 1, "kind": "masked"},
                                       {"fn": "row_sum", "M": 2, "N": 70}]))
    assert [c.name for c in ok if c.hidden] == ["hidden0 softmax float32 1x1",
                                                "hidden1 row_sum float32 2x70"]
    for bad in ({"fn": "softmax", "M": True, "N": 3}, {"fn": "softmax", "M": 1, "N": 2.5},
                {"fn": "softmax", "M": 1, "N": None}, {"fn": "softmax", "M": 1, "N": "1e3"},
                {"fn": "row_sum", "M": 2.0, "N": 70}, {"fn": "row_sum", "M": 2, "N": "70"}):
        with pytest.raises(ValueError, match="hidden case 0: [MN] must be an integer"):
            spec.cases(HiddenCases(cases=[bad]))


def test_a_one_by_one_fully_masked_hidden_case_passes_the_solution():
    from grader import notebook

    ns = {"__name__": "submission"}
    sol = ROOT / "solutions" / "03_softmax_cuda.ipynb"
    exec(compile(notebook.submission_source(sol), str(sol), "exec"), ns)
    spec = lab.SoftmaxCUDA()
    case = spec.cases(HiddenCases(seed=3, cases=[{"fn": "softmax", "M": 1, "N": 1,
                                                  "kind": "masked", "dtype": "float16"}]))[-1]
    data = spec.case_data(case)
    assert np.isneginf(data.inputs["X"]).all()
    Y = np.full((1, 1), np.nan, np.float16)
    with spec.call_probe() as info:
        ns["softmax"](data.inputs["X"], Y)
    res = check_case(spec, case, data, {"ok": True, "arrays": {"X": data.inputs["X"], "Y": Y},
                                        "info": json.loads(json.dumps(info))})
    assert res.passed and Y[0, 0] == 0, res.error
