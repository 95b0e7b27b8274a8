"""Every lab has its pytest marker (its id with underscores, declared in pyproject.toml) and a
test folder tests/test_grader/labs/<lab>/ (or a shared one, tests/lab_markers.py's SHARED),
whose tests carry the marker: ``pytest -m <lab>`` runs that lab's tests."""

from __future__ import annotations

import tomllib
from pathlib import Path

import lab_markers as markers
from grader.labs import LABS

ROOT = Path(__file__).resolve().parents[3]


def marker(lab_id: str) -> str:
    return lab_id.replace("-", "_")


def test_every_lab_has_a_registered_marker_and_a_test_folder():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    names = {m.split(":")[0].strip() for m in declared}
    shared = {lab for labs in markers.SHARED.values() for lab in labs}
    for lab_id in LABS:
        m = marker(lab_id)
        assert m in names, f"pyproject.toml declares no marker {m!r}"
        folder = markers.LABS_DIR / m
        assert folder.is_dir() or m in shared, f"no test folder {folder}"


def test_a_labs_tests_carry_its_marker_and_others_none():
    gemm = markers.LABS_DIR / "gemm_cuda" / "test_grader_gemm_cuda.py"
    assert markers.lab_markers(gemm) == ("gemm_cuda",)
    npu = markers.LABS_DIR / "npu" / "test_grader_npu.py"
    assert markers.lab_markers(npu) == ("npu_vector_add", "npu_matmul", "npu_rmsnorm",
                                         "npu_flash_attention")
    assert markers.lab_markers(markers.LABS_DIR / "test_repeat_cases.py") == ()
    assert markers.lab_markers(ROOT / "tests" / "test_docs.py") == ()
