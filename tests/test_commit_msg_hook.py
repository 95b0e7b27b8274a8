"""The commit-message hook (.githooks/commit-msg) enforces the repository's rule: a subject of at
most 72 characters, a blank line, a body."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parent.parent / ".githooks" / "commit-msg"


@pytest.mark.parametrize("message, ok", [
    ("Split the engine by job\n\nThe module held seven jobs.\n", True),
    ("x" * 72 + "\n\nwhy\n", True),
    ("x" * 73 + "\n\nwhy\n", False),
    ("A subject and no body\n", False),
    ("A subject\nglued to its body\n", False),
    ("\n\nbody only\n", False),
    ("Subject\n\nwhy\n# Please enter the commit message (a comment git strips)\n", True),
])
def test_the_hook_enforces_subject_length_and_a_body(tmp_path, message, ok):
    f = tmp_path / "COMMIT_EDITMSG"
    f.write_text(message, encoding="utf-8")
    r = subprocess.run([sys.executable, str(HOOK), str(f)], capture_output=True, text=True)
    assert (r.returncode == 0) == ok, r.stderr
    if not ok:
        assert r.stderr.startswith("commit-msg: ")
