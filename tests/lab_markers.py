"""Which lab markers a test file carries (tests/conftest.py applies them): a lab's tests live in
tests/test_grader/labs/<lab>/ and carry that lab's marker; a shared folder carries each of its
labs'."""

from __future__ import annotations

from pathlib import Path

LABS_DIR = Path(__file__).resolve().parent / "test_grader" / "labs"
#: test folders that hold more than one lab's tests
SHARED = {"npu": ("npu_vector_add", "npu_matmul", "npu_rmsnorm", "npu_flash_attention")}


def lab_markers(path: Path) -> tuple[str, ...]:
    """The lab markers of the test file at ``path``: none outside tests/test_grader/labs/<lab>/."""
    try:
        rel = Path(path).resolve().relative_to(LABS_DIR)
    except ValueError:
        return ()
    if len(rel.parts) < 2:
        return ()
    return SHARED.get(rel.parts[0], (rel.parts[0],))
