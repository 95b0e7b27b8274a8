"""A student's copy in work/: made once, never overwritten, untouched by release and git pull."""

import os
import stat
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from grader import workspace
from grader.release import release
from one_lab_course import write_solution

ROOT = Path(__file__).resolve().parents[2]


def _course(root: Path, answer: str = "return 42", title: str = "# Lab 9") -> None:
    """A one-lab course: solutions/09_t.ipynb, its released labs/, a chapter, .gitignore."""
    write_solution(root, answer, title)
    (root / "chapters").mkdir(exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), str(root / "chapters" / "09_topic.ipynb"))
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    assert release(root)[0] == 0


def _edit(path: Path, text: str = "def g():\n    return 7  # mine\n") -> bytes:
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[1].source = text
    nbformat.write(nb, str(path))
    return path.read_bytes()


def test_start_copies_once_and_never_overwrites(tmp_path):
    _course(tmp_path)
    dst = workspace.start(tmp_path, "09_t.ipynb", "t")
    assert dst == tmp_path / "work" / "09_t.ipynb"
    assert dst.read_bytes() == (tmp_path / "labs" / "09_t.ipynb").read_bytes()
    mine = _edit(dst)
    with pytest.raises(workspace.AlreadyStarted, match="rename or delete it first"):
        workspace.start(tmp_path, "09_t.ipynb", "t")
    assert dst.read_bytes() == mine


def test_start_without_the_lab_says_so(tmp_path):
    with pytest.raises(workspace.WorkspaceError, match="labs/09_t.ipynb is missing"):
        workspace.start(tmp_path, "09_t.ipynb")
    assert not (tmp_path / "work" / "09_t.ipynb").exists()


def test_chapter_and_copy_status(tmp_path, monkeypatch):
    _course(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert workspace.chapter_for(tmp_path, "09_t.ipynb") == tmp_path / "chapters/09_topic.ipynb"
    assert workspace.chapter_for(tmp_path, "09b_t.ipynb") == tmp_path / "chapters/09_topic.ipynb"
    assert workspace.chapter_for(tmp_path, "08_t.ipynb") is None
    assert workspace.copy_status(tmp_path, "09_t.ipynb", "t") == "not started: kernellab start t"
    workspace.start(tmp_path, "09_t.ipynb")
    assert workspace.copy_status(tmp_path, "09_t.ipynb", "t") == "work/09_t.ipynb"


def test_the_repository_ignores_work():
    out = subprocess.run(["git", "check-ignore", "-q", "work/01_gemm_cpu.ipynb"], cwd=ROOT)
    assert out.returncode == 0, ".gitignore must ignore work/"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_work_survives_git_pull_and_release(tmp_path):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
               GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")

    def git(cwd, *args):
        r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"git {' '.join(args)}: {r.stdout}{r.stderr}"
        return r.stdout

    up, clone = tmp_path / "upstream", tmp_path / "clone"
    _course(up)
    git(up, "init", "-q", "-b", "main")
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "course")
    git(tmp_path, "clone", "-q", str(up), str(clone))
    mine = _edit(workspace.start(clone, "09_t.ipynb"))
    assert git(clone, "status", "--porcelain") == ""  # work/ is ignored

    old_lab = (clone / "labs" / "09_t.ipynb").read_bytes()
    _course(up, answer="return 43", title="# Lab 9, v2")  # a new solution, lab re-released
    git(up, "commit", "-q", "-am", "new solution")
    git(clone, "pull", "-q", "--ff-only")
    assert (clone / "labs" / "09_t.ipynb").read_bytes() != old_lab
    assert release(clone)[0] == 0
    assert (clone / "labs" / "09_t.ipynb").read_bytes() == (up / "labs" / "09_t.ipynb").read_bytes()
    assert (clone / "work" / "09_t.ipynb").read_bytes() == mine


def test_start_where_work_is_a_file_says_so(tmp_path, monkeypatch):
    _course(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").write_text("my notes")
    with pytest.raises(workspace.WorkspaceError, match="cannot create work/09_t.ipynb"):
        workspace.start(tmp_path, "09_t.ipynb")
    assert (tmp_path / "work").read_text() == "my notes"


def test_the_copy_is_the_students_file_mode(tmp_path):
    """work/ copies get 0o666 & ~umask (what any editor's new file gets), not labs/'s mode."""
    _course(tmp_path)
    (tmp_path / "labs" / "09_t.ipynb").chmod(0o444)
    old = os.umask(0o027)
    try:
        dst = workspace.start(tmp_path, "09_t.ipynb")
    finally:
        os.umask(old)
    assert stat.S_IMODE(dst.stat().st_mode) == 0o640
