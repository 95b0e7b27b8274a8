"""Grader self-tests for lab decode-attention (sim tier): the solution passes in budget with its
figures in the JSON and under half of every error budget, the untouched lab fails "not
implemented", the cases poison what must not be read, and the rules judge their figures.
Elsewhere: the known submissions' verdicts (tests/known_verdicts.json, graded with
KERNELLAB_KNOWN_FULL=1: each compiles for 20-30 s on the simulator)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
from lab_cli import assert_untouched_fails, cli  # tests/lab_cli.py

import kernellab
from grader.labs.decode_attention import spec as lab
from grader.spec import Case

ROOT = Path(__file__).resolve().parents[4]
SOLUTION = ROOT / "solutions" / "08b_decode_attention.ipynb"
LAB = ROOT / "labs" / "08b_decode_attention.ipynb"

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="the modelled verdicts are the sim tier's")


@pytest.fixture(scope="module")
def graded():
    t0 = time.perf_counter()
    r = cli("grade", "decode-attention", str(SOLUTION), "--json")
    return r, time.perf_counter() - t0


def test_solution_passes_in_budget_with_margin(graded):
    r, seconds = graded
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 60, seconds        # the budget, 2 cores
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["score"] == 100
    assert d["cases_passed"] == d["cases_total"] == len(lab.CASES)
    # the course's margin rule: the solution uses under half of every error budget
    used = [c["comparison"]["budget_used"] for c in d["cases"]]
    assert all(u < 0.5 for u in used), used
    rules = {x["name"]: x for x in d["rules"]}
    assert [lab.ROOF.name, lab.GAIN.name, lab.WORK.name] == list(rules)[:3]
    assert all(x["passed"] for x in rules.values())
    assert "dram-bound" in rules[lab.ROOF.name]["detail"]
    assert d["recheck"]["passed"] is True


def test_untouched_lab_fails_with_not_implemented():
    assert_untouched_fails("decode-attention", LAB)


def test_cases_poison_what_must_not_be_read_and_zeros_fail():
    spec = lab.DecodeAttention()
    for p in spec.visible_params():
        case = Case(spec.case_name(p), p, seed=7)
        data = spec.case_data(case)
        k = lab.bf16(data.inputs["k_cache"]).astype(np.float32)
        bt, sl = data.inputs["block_table"], data.inputs["seq_lens"]
        used = -(-sl // lab.BLOCK_SIZE)
        assert all((bt[b, used[b]:] == -1).all() for b in range(len(sl)))
        if (sl % lab.BLOCK_SIZE).any():
            assert np.isnan(k).any()
        assert data.scalars["scale"] == pytest.approx(1 / math.sqrt(p["d"]))
        zeros = {"out": np.zeros(data.inputs["q"].shape, np.uint16)}
        assert not spec.compare(case, data, zeros).ok, case.name


def test_empty_splits_and_large_scores_are_in_the_cases():
    lens_blocks = [(c[4] + lab.BLOCK_SIZE - 1) // lab.BLOCK_SIZE for c in lab.CASES]
    assert any(c[5] > nb for c, nb in zip(lab.CASES, lens_blocks))
    assert {1025, 1027, 1} <= {c[4] for c in lab.CASES}
    assert {c[1] // c[2] for c in lab.CASES} == set(lab.GROUPS)
    assert any(c[6] == "large" and c[2] > 1 for c in lab.CASES)
    assert any(c[6] == "tail" and c[4] % lab.BLOCK_SIZE == 1 for c in lab.CASES)


def test_gpu_rule_is_provisional_and_judges_the_copy_fraction():
    spec = lab.DecodeAttention()
    m = {"B": 1, "Hq": 32, "Hkv": 8, "d": 128, "L": 16384, "num_splits": 64,
         "gbs": [500.0] * 3, "gbs_copy": [1000.0] * 3, "copy_fraction": [0.5, 0.5, 0.5]}
    (rule,) = spec.rules_gpu(m)
    assert rule.passed and "provisional" in lab.BANDWIDTH.why
    (rule,) = spec.rules_gpu({**m, "copy_fraction": [0.1] * 3})
    assert not rule.passed


def test_tail_cases_fail_an_output_without_each_sequences_last_key():
    """The golden output of the same operands with every sequence one key shorter (the last key
    left out) fails each tail case: that key carries the output."""
    from reference_kernels.decode_attention import decode_golden

    spec = lab.DecodeAttention()
    tails = [p for p in spec.visible_params() if p["kind"] == "tail"]
    assert len(tails) == 2
    for p in tails:
        case = Case(spec.case_name(p), p, seed=11)
        data = spec.case_data(case)
        ops = [lab.bf16(data.inputs[k]) if k in ("q", "k_cache", "v_cache") else data.inputs[k]
               for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]
        ops[4] = np.maximum(ops[4] - 1, 1).astype(np.int32)
        short, _ = decode_golden(*ops, data.scalars["scale"])
        out = {"out": short.astype(lab.bf16(data.inputs["q"]).dtype).view(np.uint16)}
        got = spec.compare(case, data, out)
        assert not got.ok and "last key" in got.message, case.name
