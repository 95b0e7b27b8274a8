"""Chapter 6 (chapters/06_int8_quantization.ipynb): the claims the notebook's figures and prose
make that no other test checks.

* Section 4's study, at the anchors' sizes (the chapter calls
  ``quant_study.study(M_, K_, N_)`` with ``quant_study.REFERENCE_SIZES``): the orderings its
  chart and prose state — per-tensor below per-token on Gaussian data; with the outlier,
  per-tensor < per-token < SmoothQuant a=0.5, a=0.75 below a=0.5, LLM.int8() above all outlier
  settings — Gaussian cosines as the SQNR predicts them (1 / sqrt(1 + 10^(-SQNR/10))), and
  every setting with an anchor within ANCHOR_DB = 1.5 dB of it: the anchors are one random draw
  of the same experiment; the chapter's draw differs (another seed), and the per-tensor settings
  depend on the largest of ~10^6 samples, whose spread moves the SQNR by tenths of a dB.
* Section 5's assembly claims, on a CPU with AVX-512 VNNI (the course machine): no vpdpbusd
  anywhere; v2's hot loop uses vpmulld, v3's vpmaddwd, v4's vpdpwssd.
* Section 6's sizes: K a multiple of 64, so the dp4a kernel's loads are exactly a quarter
  (tests/test_kernellab/kernels/test_int8_ladders.py checks the counters).

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import notebook_rules as rules  # noqa: E402
import pytest

import kernellab  # noqa: F401

from kernellab.topics import quant_study as QS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "chapters" / "06_int8_quantization.ipynb"
STUDY_CALL = "quant_study.study(M_, K_, N_)"


def cells(kind: str) -> list[str]:
    return rules.cells(NOTEBOOK, kind)


@pytest.fixture(scope="module")
def study():
    src = "\n".join(cells("code"))
    assert STUDY_CALL in src and "quant_study.REFERENCE_SIZES" in src, \
        f"the chapter no longer calls {STUDY_CALL} at REFERENCE_SIZES: update this test"
    return {r["setting"]: r for r in QS.study(*QS.REFERENCE_SIZES)}


def test_sqnr_orderings_the_chapter_states(study):
    db = {k: r["sqnr_db"] for k, r in study.items()}
    assert db["per-tensor"] < db["per-token"]
    assert db["outlier, per-tensor"] < db["outlier, per-token"] < \
        db["outlier, SmoothQuant a=0.5"]
    assert db["outlier, SmoothQuant a=0.75"] < db["outlier, SmoothQuant a=0.5"]
    assert db["outlier, LLM.int8()"] == max(v for k, v in db.items() if k.startswith("outlier"))
    # cosine similarity follows from the SQNR for a small error e uncorrelated with y:
    # cos = 1 / sqrt(1 + ||e||^2 / ||y||^2) = 1 / sqrt(1 + 10^(-SQNR / 10))
    for name in ("per-tensor", "per-token"):
        r = study[name]
        predicted = 1.0 / (1.0 + 10 ** (-r["sqnr_db"] / 10)) ** 0.5
        assert abs(r["cosine"] - predicted) <= 10 ** (-r["sqnr_db"] / 10), (name, r)


ANCHOR_DB = 1.5


def test_each_setting_is_near_its_anchor(study):
    checked = 0
    for name, r in study.items():
        anchor = QS.REFERENCE_SQNR_DB.get(name)
        if anchor is not None:
            # the same experiment (sizes, distribution, scheme) with other random draws and
            # summation details: tenths of a dB; 1.5 dB = the noise power within a factor 1.4
            assert abs(r["sqnr_db"] - anchor) <= ANCHOR_DB, (name, r["sqnr_db"], anchor)
            checked += 1
    assert checked == len(QS.REFERENCE_SQNR_DB)


def _host_has_vnni() -> bool:
    from llvmlite import binding
    feats = binding.get_host_cpu_features()
    return bool(feats.get("avx512vnni")) and bool(feats.get("avx512bw"))


@pytest.mark.skipif(not _host_has_vnni(), reason="the chapter's assembly claims are for an "
                    "AVX-512 VNNI CPU")
def test_assembly_claims():
    from kernellab.kernels import int8_cpu

    reps = {name: int8_cpu.asm_report(k) for name, k in int8_cpu.LADDER.items()}
    assert not any(sum(r["ops_total"]["vpdpbusd"].values()) for r in reps.values())
    hot = lambda name, op: sum(reps[name]["ops_hot"][op].values())     # noqa: E731
    assert hot("v2_ikj", "vpmulld") > 0
    assert hot("v3_dot", "vpmaddwd") > 0
    assert hot("v4_u8s8", "vpdpwssd") > 0 and reps["v4_u8s8"]["vnni"]


def test_sim_section_sizes():
    src = "\n".join(cells("code"))
    m = re.search(r"MS, NS, KS = (\d+), (\d+), (\d+)", src)
    assert m, "the chapter's sim-tier sizes changed: update this test"
    assert int(m.group(3)) % 64 == 0
    assert np.prod([int(g) for g in m.groups()]) <= 64 * 64 * 256   # keeps the chapter fast
