"""The ``kernellab`` command's student path: help, list, start, grade's default path, pipes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grader.runner
from grader.labs import get_spec_class
from grader.report import Report
from kernellab.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
NB = "01_gemm_cpu.ipynb"


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A course checkout in tmp (solutions/, labs/01_gemm_cpu.ipynb, chapter 1), as the cwd."""
    for d in ("solutions", "labs", "chapters"):
        (tmp_path / d).mkdir()
    shutil.copy(ROOT / "labs" / NB, tmp_path / "labs" / NB)
    (tmp_path / "chapters" / "01_cache_blocked_gemm.ipynb").write_text("{}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_no_command_prints_the_commands_students_first(capsys):
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert "required" not in out + err
    pos = [out.index(f"\n    {c} ") for c in ("doctor", "list", "start", "grade", "release",
                                                "coverage")]
    assert pos == sorted(pos)
    for c in ("release", "coverage"):
        assert f"    {c:<9} instructors:" in out


def test_grade_options_are_explained():
    grade = build_parser()._subparsers._group_actions[0].choices["grade"]
    helps = {a.dest: a.help for a in grade._actions}
    assert "correctness only" in helps["no_perf"] and "performance" in helps["no_perf"]
    assert "progress" in helps["quiet"]


def test_start_copies_then_leaves_the_copy_alone(course, capsys):
    assert main(["start", "gemm-cpu"]) == 0
    mine = course / "work" / NB
    assert mine.read_bytes() == (course / "labs" / NB).read_bytes()
    assert f"work/{NB}" in capsys.readouterr().out
    mine.write_text(mine.read_text().replace("YOUR CODE HERE", "my loop"))
    edited = mine.read_bytes()
    assert main(["start", "gemm-cpu"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert mine.read_bytes() == edited
    assert main(["start", "no-such-lab"]) == 2


def test_list_shows_tier_chapter_and_the_copy(course, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[:2]
    assert first[0].startswith("gemm-cpu ") and "tier cpu" in first[1]
    assert "after chapters/01_cache_blocked_gemm.ipynb" in first[1]
    assert "not started: kernellab start gemm-cpu" in first[1]
    assert "solutions/" not in out
    main(["start", "gemm-cpu"])
    capsys.readouterr()
    main(["list"])
    assert f"your copy: work/{NB}" in capsys.readouterr().out.splitlines()[1]


def test_grade_without_a_path_needs_the_copy(course, capsys):
    assert main(["grade", "gemm-cpu"]) == 2
    err = capsys.readouterr().err
    assert f"no work/{NB} yet: run `kernellab start gemm-cpu` first" in err


def test_grade_without_a_path_grades_the_copy(course, capsys, monkeypatch):
    graded = []

    def fake_grade(lab, sub, **kw):  # the grading itself is tested in test_grader_*.py
        graded.append(sub)
        return Report.start(get_spec_class(lab)(), str(sub)).finish()

    monkeypatch.setattr(grader.runner, "grade", fake_grade)
    main(["start", "gemm-cpu"])
    capsys.readouterr()
    main(["grade", "gemm-cpu"])
    assert graded == [f"work/{NB}"]
    assert f"grading work/{NB}" in capsys.readouterr().err
    main(["grade", "gemm-cpu", f"labs/{NB}", f"work/{NB}"])  # explicit paths, several
    assert graded[1:] == [f"labs/{NB}", f"work/{NB}"]
    assert "the course's copy" in capsys.readouterr().err  # labs/ is not the student's


def test_csv_never_replaces_a_notebook(course, capsys):
    main(["start", "gemm-cpu"])
    before = (course / "work" / NB).read_bytes()
    assert main(["grade", "gemm-cpu", "--csv", f"work/{NB}"]) == 2
    assert "would write over" in capsys.readouterr().err
    assert (course / "work" / NB).read_bytes() == before


def test_coverage_without_the_doc_says_so(tmp_path, capsys):
    assert main(["coverage", "--check", "--root", str(tmp_path)]) == 2
    assert "docs/grading.md not found" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly():
    """`kernellab list | head -1`: the reader is gone before the output is written."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "kernellab", "list"], stdout=w,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 141, p.stderr
    assert p.stderr == ""


def test_make_check_names_the_step_that_failed(monkeypatch, capsys):
    from grader import smoke

    monkeypatch.setattr(smoke, "check_chapter_cell", lambda: "chapter cell ran")  # needs a kernel
    monkeypatch.setattr(grader.runner, "grade", lambda lab, sub, **kw: Report.start(
        get_spec_class(lab)(), str(sub)).finish())  # a grading in which no case passed
    assert smoke.main() == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"make check: FAIL at grading: the {smoke.LAB} solution did not pass")
    assert len(out.splitlines()) == 1


def test_a_grader_bug_is_its_own_block_not_the_students_fault(course, capsys, monkeypatch):
    def broken_grade(lab, sub, **kw):
        raise KeyError("a bug of the grader")

    monkeypatch.setattr(grader.runner, "grade", broken_grade)
    monkeypatch.delenv("KERNELLAB_DEBUG", raising=False)
    main(["start", "gemm-cpu"])
    capsys.readouterr()
    assert main(["grade", "gemm-cpu", "--quiet"]) == 3
    out = capsys.readouterr().out
    assert "GRADER ERROR (not the submission's fault)" in out
    assert "KeyError" in out and "Traceback" not in out


def test_grade_or_start_without_a_lab_says_what_to_give(course, capsys):
    assert main(["grade"]) == 2
    err = capsys.readouterr().err
    assert "required" not in err and "submission" not in err
    assert err.startswith("kernellab grade: give the lab: kernellab grade LAB [NOTEBOOK ...]; "
                          "labs: gemm-cpu, gemm-cuda, gemm-tensor-core, softmax-cuda,"), err
    assert main(["start"]) == 2
    assert "give the lab: kernellab start LAB; labs: gemm-cpu," in capsys.readouterr().err


@pytest.mark.parametrize("given,lab", [("work/02_gemm_cuda.ipynb", "gemm-cuda"),
                                       ("work/04_winograd-from-labs.ipynb", "winograd"),
                                       ("07b_mine.py", "npu-matmul")])
def test_a_path_where_the_lab_goes_names_the_lab(course, capsys, given, lab):
    assert main(["grade", given]) == 2
    err = capsys.readouterr().err
    assert f"{given} is a file's name (no such file here), not a lab id; it looks like lab " \
        f"{lab}" in err, err
    (course / given).parent.mkdir(parents=True, exist_ok=True)
    (course / given).write_text("")
    assert main(["grade", given]) == 2
    err = capsys.readouterr().err
    assert f"{given} is a file, not a lab id; it looks like lab {lab}" in err, err
    assert f"did you mean `kernellab grade {lab} {given}`?" in err
    assert "unknown lab" not in err
    assert main(["start", given]) == 2
    assert f"did you mean `kernellab start {lab}`?" in capsys.readouterr().err


def test_an_existing_file_that_matches_no_lab_is_still_called_a_file(course, capsys):
    (course / "answer").write_text("def gemm(): pass\n")
    assert main(["grade", "answer", f"labs/{NB}"]) == 2
    err = capsys.readouterr().err
    assert "answer is a file, not a lab id: kernellab grade LAB [NOTEBOOK ...]; labs:" in err


def test_paths_are_shown_from_where_the_student_is(course, capsys, monkeypatch):
    """Run from outside the course root (found from the package): paths that name the right
    file from the current directory, relative under it, else absolute."""
    graded = []
    monkeypatch.setattr(grader.runner, "grade", lambda lab, sub, **kw: graded.append(sub) or
                        Report.start(get_spec_class(lab)(), str(sub)).finish())
    monkeypatch.setattr("kernellab.cli._project_root", lambda: course)
    monkeypatch.chdir(course / "chapters")  # not above work/: absolute paths
    assert main(["grade", "gemm-cpu"]) == 2
    assert f"no {course}/work/{NB} yet" in capsys.readouterr().err
    assert main(["start", "gemm-cpu"]) == 0
    assert f"copied {course}/labs/{NB} to {course}/work/{NB}:" in capsys.readouterr().out
    main(["grade", "gemm-cpu"])
    assert f"grading {course}/work/{NB} (your copy" in capsys.readouterr().err
    assert graded == [f"{course}/work/{NB}"] and Path(graded[0]).is_file()
    monkeypatch.chdir(course.parent)  # above it: relative paths
    assert main(["start", "gemm-cpu"]) == 1
    assert f"{course.name}/work/{NB} already exists" in capsys.readouterr().err
    main(["grade", "gemm-cpu"])
    assert f"grading {course.name}/work/{NB} (your copy" in capsys.readouterr().err
    main(["list"])
    assert f"your copy: {course.name}/work/{NB}" in capsys.readouterr().out
