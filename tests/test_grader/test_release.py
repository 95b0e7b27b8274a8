"""Single-source labs: labs/ is generated from solutions/, up to date, and leaks nothing."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import notebook
from kernellab.cli import main
from grader.release import release
from one_lab_course import write_solution

ROOT = Path(__file__).resolve().parents[2]


def test_labs_are_up_to_date():
    status, msgs = release(ROOT, check=True)
    assert status == 0, "\n".join(msgs)


def test_every_solution_has_a_lab_and_solution_cells():
    sols = sorted((ROOT / "solutions").glob("*.ipynb"))
    assert sols, "no solution notebooks"
    for s in sols:
        nb = notebook.read(s)
        assert any(notebook.is_solution_cell(c) for c in nb.cells), s
        assert (ROOT / "labs" / s.name).exists()


@pytest.mark.parametrize("sol", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_no_solution_line_leaks_into_the_lab(sol):
    lab = notebook.read(ROOT / "labs" / sol.name)
    lab_text = "\n".join(c.source for c in lab.cells)
    secret = [ln for c in notebook.read(sol).cells if c.cell_type == "code"
              for ln in notebook.solution_lines(c.source)]
    assert secret, "the solution has no BEGIN/END SOLUTION block"
    # lines that are pure syntax ("return", "else:") may legitimately appear elsewhere
    leaks = [ln for ln in secret if len(ln) > 12 and ln in lab_text]
    assert not leaks, f"solution lines found in the lab: {leaks[:5]}"
    assert "### BEGIN SOLUTION" not in lab_text
    assert "NotImplementedError" in lab_text
    for c in lab.cells:
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None


def test_committed_notebooks_have_no_outputs():
    for p in list((ROOT / "solutions").glob("*.ipynb")) + list((ROOT / "chapters").glob("*.ipynb")):
        nb = nbformat.read(str(p), as_version=4)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs, f"{p.name} is committed with outputs"


def test_stub_keeps_indentation_and_hint():
    src = ("def f(x):\n    y = 1\n    ### BEGIN SOLUTION: loop over k\n    return x + y\n"
           "    ### END SOLUTION\n")
    out = notebook.stub_source(src)
    assert out.splitlines() == ["def f(x):", "    y = 1", "    # YOUR CODE HERE",
                                '    raise NotImplementedError("loop over k")']


@pytest.mark.parametrize("src", ["### BEGIN SOLUTION\nx = 1\n",
                                 "x = 1\n### END SOLUTION\n",
                                 "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n"])
def test_unbalanced_markers_are_errors(src):
    with pytest.raises(notebook.NotebookError):
        notebook.stub_source(src)


def test_hint_is_quoted_safely():
    src = 'def f():\n    ### BEGIN SOLUTION: use "packing" \\\n    pass\n    ### END SOLUTION\n'
    out = notebook.stub_source(src)
    compile(out, "<stub>", "exec")  # a quote or trailing backslash in the hint stays valid Python


@pytest.mark.parametrize("cell_type,tags", [("markdown", []), ("code", [])])
def test_markers_outside_tagged_code_cells_are_errors(cell_type, tags):
    nb = nbformat.v4.new_notebook()
    text = "Some text\n### BEGIN SOLUTION\nsecret = 1\n### END SOLUTION\n"
    cell = (nbformat.v4.new_markdown_cell(text) if cell_type == "markdown"
            else nbformat.v4.new_code_cell(text))
    cell.metadata["tags"] = tags
    nb.cells = [cell]
    with pytest.raises(notebook.NotebookError):
        notebook.make_lab(nb)


def test_release_writes_and_check_detects_stale(tmp_path):
    (tmp_path / "solutions").mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("def g():\n    ### BEGIN SOLUTION\n    return 42\n"
                                     "    ### END SOLUTION\n")
    cell.metadata["tags"] = ["solution"]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell]
    nbformat.write(nb, str(tmp_path / "solutions" / "09_t.ipynb"))
    assert release(tmp_path, check=True)[0] == 1  # missing
    assert release(tmp_path)[0] == 0
    assert release(tmp_path, check=True)[0] == 0
    lab = notebook.read(tmp_path / "labs" / "09_t.ipynb")
    assert "return 42" not in lab.cells[1].source
    assert lab.cells[1].metadata["tags"] == ["solution"]
    lab_text = (tmp_path / "labs" / "09_t.ipynb").read_text()
    (tmp_path / "labs" / "10_extra.ipynb").write_text(lab_text)
    status, msgs = release(tmp_path, check=True)
    assert status == 1 and any("extra" in m for m in msgs)


def test_submission_source_runs_only_solution_cells(tmp_path):
    nb = nbformat.v4.new_notebook()
    c1 = nbformat.v4.new_code_cell("%matplotlib inline\nimport numpy as np")
    c1.metadata["tags"] = ["solution"]
    c2 = nbformat.v4.new_code_cell("print('not graded')")
    c3 = nbformat.v4.new_code_cell("def gemm(A, B, C):\n    pass")
    c3.metadata["tags"] = ["solution"]
    nb.cells = [c1, c2, c3]
    p = tmp_path / "x.ipynb"
    nbformat.write(nb, str(p))
    src = notebook.submission_source(p)
    assert "not graded" not in src and "def gemm" in src and "# (ipython) %matplotlib" in src
    nb.cells = [c2]
    nbformat.write(nb, str(p))
    with pytest.raises(notebook.NotebookError, match="tagged 'solution'"):
        notebook.submission_source(p)


# --- a lab edited by hand is never overwritten ---------------------------------------------------

def _course(root: Path, answer: str = "return 42", text: str = "# t") -> Path:
    """A one-lab course in ``root`` (:mod:`one_lab_course`); returns its lab's path."""
    return write_solution(root, answer, text)


def _fill_in(lab: Path, source: str = "def g():\n    return 7  # my answer\n") -> bytes:
    """What a student does in JupyterLab: edit the solution cell, run it, save."""
    nb = nbformat.read(str(lab), as_version=4)
    nb.cells[1].source = source
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nbformat.write(nb, str(lab))
    return lab.read_bytes()


def test_release_refuses_a_hand_edited_lab_and_force_overwrites(tmp_path, capsys):
    lab = _course(tmp_path)
    assert release(tmp_path)[0] == 0
    before = _fill_in(lab)
    assert main(["release", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert lab.read_bytes() == before  # byte for byte
    assert "refused: labs/09_t.ipynb" in out and "solution cell 1" in out
    assert "--force" in out and "work/" in out
    status, msgs = release(tmp_path, check=True)
    assert status == 1 and "edited by hand" in msgs[0]
    assert release(tmp_path, force=True)[0] == 0
    assert "my answer" not in lab.read_text() and release(tmp_path, check=True)[0] == 0


def test_a_cell_added_by_hand_is_an_edit(tmp_path):
    lab = _course(tmp_path)
    release(tmp_path)
    nb = nbformat.read(str(lab), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("scratch = 1"))
    nbformat.write(nb, str(lab))
    before = lab.read_bytes()
    status, msgs = release(tmp_path)
    assert status == 1 and lab.read_bytes() == before
    assert "notebook cell 3" in msgs[0] and "added" in msgs[0]


def test_outputs_alone_are_not_an_edit(tmp_path):
    lab = _course(tmp_path)
    release(tmp_path)
    nb = nbformat.read(str(lab), as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="NotImplementedError\n")]
    nb.cells[1].execution_count = 3
    nbformat.write(nb, str(lab))
    assert release(tmp_path)[0] == 0 and release(tmp_path, check=True)[0] == 0


def test_a_solution_change_still_releases(tmp_path):
    lab = _course(tmp_path)
    release(tmp_path)
    _course(tmp_path, answer="return 43", text="# t, reworded")  # the instructor's change
    status, msgs = release(tmp_path)
    assert status == 0, msgs
    nb = notebook.read(lab)
    assert nb.cells[0].source == "# t, reworded" and "return 43" not in nb.cells[1].source
    assert release(tmp_path, check=True)[0] == 0


def test_a_lab_released_before_the_hashes(tmp_path):
    """A lab without recorded hashes is overwritten only when its cells equal today's lab."""
    lab = _course(tmp_path)
    lab.parent.mkdir()
    old = notebook.make_lab(notebook.read(tmp_path / "solutions" / "09_t.ipynb"))
    nbformat.write(old, str(lab))
    assert release(tmp_path)[0] == 0  # same sources: it gains the hashes
    assert release(tmp_path, check=True)[0] == 0
    nbformat.write(old, str(lab))
    before = _fill_in(lab)
    status, msgs = release(tmp_path)
    assert status == 1 and lab.read_bytes() == before and "solution cell 1" in msgs[0]


def test_committed_labs_record_their_cells_hashes():
    from grader.release import CELLS_KEY, HASH_KEY, META_KEY, cell_hash

    for p in sorted((ROOT / "labs").glob("*.ipynb")):
        nb = notebook.read(p)
        for c in nb.cells:
            assert c.metadata[META_KEY][HASH_KEY] == cell_hash(c), p.name
        assert nb.metadata[META_KEY][CELLS_KEY] == [cell_hash(c) for c in nb.cells], p.name


def _retype(nb):
    nb.cells[0] = nbformat.v4.new_raw_cell(nb.cells[0].source, metadata=nb.cells[0].metadata)


def _retag(nb):
    nb.cells[1].metadata["tags"] = ["mine"]


def _delete(nb):
    del nb.cells[1]


def _swap(nb):
    nb.cells[0], nb.cells[1] = nb.cells[1], nb.cells[0]


def _copy(nb):
    twin = nbformat.from_dict(dict(nb.cells[1]))
    twin.id = "twin"  # as JupyterLab's copy and paste gives it its own id
    nb.cells.append(twin)


def _delete_one_of_twins(nb):
    del nb.cells[-1]


def test_deleting_one_of_two_identical_cells_is_a_deletion(tmp_path):
    lab = _course(tmp_path)
    sol = tmp_path / "solutions" / "09_t.ipynb"
    nb = nbformat.read(str(sol), as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(""), nbformat.v4.new_code_cell("")]  # two empty cells
    nbformat.write(nb, str(sol))
    release(tmp_path)
    nb = nbformat.read(str(lab), as_version=4)
    _delete_one_of_twins(nb)
    nbformat.write(nb, str(lab))
    status, msgs = release(tmp_path)
    assert status == 1 and "1 released cell edited or deleted" in msgs[0], msgs


def test_a_lab_that_lost_its_notebook_list_is_judged_by_its_cells(tmp_path):
    """Notebook metadata stripped (a merge, another tool): each cell's own hash still tells an
    untouched lab from an edited one."""
    from grader.release import CELLS_KEY, META_KEY

    lab = _course(tmp_path)
    release(tmp_path)
    nb = nbformat.read(str(lab), as_version=4)
    del nb.metadata[META_KEY][CELLS_KEY]
    nbformat.write(nb, str(lab))
    assert release(tmp_path)[0] == 0  # untouched: overwritten with the list again
    nb = nbformat.read(str(lab), as_version=4)
    del nb.metadata[META_KEY][CELLS_KEY]
    nbformat.write(nb, str(lab))
    _fill_in(lab)
    status, msgs = release(tmp_path)
    assert status == 1 and "solution cell 1" in msgs[0] and "was edited" in msgs[0], msgs


@pytest.mark.parametrize("edit", [_retype, _retag, _delete, _swap, _copy],
                         ids=lambda f: f.__name__.strip("_"))
def test_any_change_to_the_cells_is_an_edit(tmp_path, edit):
    """A cell retyped, retagged, deleted, moved or copied changes the notebook as much as an
    edited source: release leaves it alone."""
    lab = _course(tmp_path)
    release(tmp_path)
    nb = nbformat.read(str(lab), as_version=4)
    edit(nb)
    nbformat.write(nb, str(lab))
    before = lab.read_bytes()
    status, msgs = release(tmp_path)
    assert status == 1 and lab.read_bytes() == before, msgs
    assert msgs[0].startswith("refused: labs/09_t.ipynb was edited by hand"), msgs


def test_release_keeps_the_labs_mode_and_a_new_lab_follows_the_umask(tmp_path):
    """On a shared course machine the students read labs/: release must not leave it 0600."""
    lab = _course(tmp_path)
    old = os.umask(0o027)
    try:
        assert release(tmp_path)[0] == 0
        assert stat.S_IMODE(lab.stat().st_mode) == 0o640  # new: 0o666 & ~umask, as open() gives
        lab.chmod(0o664)
        _course(tmp_path, answer="return 43", text="# t, v2")
        assert release(tmp_path)[0] == 0 and "v2" in lab.read_text()
        assert stat.S_IMODE(lab.stat().st_mode) == 0o664  # replaced: the old file's mode
    finally:
        os.umask(old)
    assert not list(lab.parent.glob(".*.tmp"))


def _advised_command(msg: str) -> str:
    """The shell command in a message's first backquoted span that copies the lab."""
    return next(c for c in re.findall(r"`([^`]*)`", msg) if " cp " in f" {c}")


def test_the_advice_copies_to_work_when_the_student_has_no_copy(tmp_path, monkeypatch):
    lab = _course(tmp_path)
    release(tmp_path)
    mine = _fill_in(lab)
    monkeypatch.chdir(tmp_path)
    status, msgs = release(tmp_path)
    cmd = _advised_command(msgs[0])
    assert status == 1 and cmd == "mkdir -p work && cp labs/09_t.ipynb work/09_t.ipynb", msgs
    subprocess.run(cmd, shell=True, check=True, cwd=tmp_path)
    assert (tmp_path / "work" / "09_t.ipynb").read_bytes() == mine


def test_the_advice_never_copies_over_the_students_copy(tmp_path):
    """With work/09_t.ipynb there, `cp -n labs/... work/` would copy nothing and a later
    --force would lose the in-place work: the advice names a file that does not exist yet."""
    lab = _course(tmp_path)
    release(tmp_path)
    in_place = _fill_in(lab)
    work = tmp_path / "work"
    work.mkdir()
    (work / "09_t.ipynb").write_text("my copy")
    (work / "09_t-from-labs.ipynb").write_text("an earlier rescue")
    status, msgs = release(tmp_path)  # run from elsewhere: the command goes there first
    assert status == 1 and "work/09_t.ipynb exists already" in msgs[0], msgs
    cmd = _advised_command(msgs[0])
    assert cmd.endswith("cp labs/09_t.ipynb work/09_t-from-labs-2.ipynb") and " -n " not in cmd
    subprocess.run(cmd, shell=True, check=True, cwd=ROOT)
    assert (work / "09_t-from-labs-2.ipynb").read_bytes() == in_place
    assert (work / "09_t.ipynb").read_text() == "my copy"
    assert (work / "09_t-from-labs.ipynb").read_text() == "an earlier rescue"
    assert f"{work}/09_t-from-labs-2.ipynb`" in msgs[0]  # how to grade it, from here


def test_check_on_a_hand_edited_lab_says_what_to_do(tmp_path, monkeypatch):
    lab = _course(tmp_path)
    release(tmp_path)
    _fill_in(lab)
    monkeypatch.chdir(tmp_path)
    status, msgs = release(tmp_path, check=True)
    assert status == 1
    assert msgs[0].startswith("edited by hand: labs/09_t.ipynb (solution cell 1 "), msgs
    assert "(run `kernellab release`)" not in msgs[0]
    assert "cp labs/09_t.ipynb work/09_t.ipynb" in msgs[0]
    assert msgs[0].endswith("then run `kernellab release --force`.")
    _course(tmp_path, answer="return 43")  # a stale lab that nobody edited: release fixes it
    (tmp_path / "labs" / "09_t.ipynb").unlink()
    assert release(tmp_path, check=True)[1] == ["missing: labs/09_t.ipynb (run `kernellab "
                                                "release`)"]


def test_a_hint_continues_on_hash_lines_below_its_begin_line():
    """A long hint after ``BEGIN SOLUTION:`` continues on ``### `` lines right below it, at its
    indentation; the stub joins them with one space and drops the block (code and comments)."""
    src = ("def f(x):\n    ### BEGIN SOLUTION: loop over k,\n    ### then add y\n"
           "    return x  # secret\n    ### END SOLUTION\n")
    stub = notebook.stub_source(src)
    assert stub.splitlines()[-1] == '    raise NotImplementedError("loop over k, then add y")'
    assert "secret" not in stub and "then add y\n" not in stub
    # a ### line at another indentation, or after a code line, is not part of the hint
    src2 = ("def f(x):\n    ### BEGIN SOLUTION: loop over k\n    x = 1\n    ### not a hint\n"
            "    return x\n    ### END SOLUTION\n")
    assert notebook.stub_source(src2).splitlines()[-1] == (
        '    raise NotImplementedError("loop over k")')


def test_reading_a_notebook_skips_jsonschemas_iri_grammars_and_still_validates():
    """grader/__init__.py keeps jsonschema from importing rfc3987_syntax (seconds of grammar
    compiling per grading process); nbformat still reads and validates every notebook."""
    code = ("import sys, grader, nbformat\n"
            "assert sys.modules.get('rfc3987_syntax') is None\n"
            "for p in sys.argv[1:]:\n"
            "    nbformat.validate(nbformat.read(p, as_version=4))\n"
            "bad = nbformat.v4.new_notebook(); bad.cells.append({'cell_type': 'nope'})\n"
            "try:\n"
            "    nbformat.validate(bad)\n"
            "except nbformat.ValidationError:\n"
            "    print('ok')\n")
    nbs = sorted(str(p) for p in (ROOT / "solutions").glob("*.ipynb"))
    r = subprocess.run([sys.executable, "-c", code, *nbs], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


REPEAT_WORDS = {1: "once", 2: "twice", 3: "three times", 4: "four times"}


def test_the_case_counts_a_handout_states_are_the_specs():
    """"N cases" in a lab's opening cell counts its visible cases, repeats left out (per function,
    in order, where it gives one number per function); the repeats are stated in words."""
    from collections import Counter

    from grader.labs import all_specs
    from grader.labs._repeat import repeated_from
    from grader.spec import HiddenCases

    stated = 0
    for spec in all_specs():
        text = notebook.read(ROOT / "solutions" / spec.notebook).cells[0].source
        nums = [int(n) for n in re.findall(r"(\d+) cases", text)]
        cases = [c for c in spec.cases(HiddenCases()) if not c.hidden]
        base = Counter(spec.case_function(c) for c in cases if repeated_from(c) is None)
        repeats = Counter(repeated_from(c) for c in cases if repeated_from(c) is not None)
        if nums:
            stated += 1
            want = [sum(base.values())] if len(nums) == 1 else list(base.values())
            assert nums == want, (spec.lab_id, nums, want)
        for n in set(repeats.values()):
            assert f"again {REPEAT_WORDS[n]}" in " ".join(text.split()), (spec.lab_id, n)
    assert stated >= 5
