"""The known-wrong and known-good submissions of every lab, where they are, how they are graded
and the verdict each gets, in one place.

* :func:`submission` / :func:`submissions` locate them: ``grader/labs/<lab_module>/submissions/
  wrong/`` and ``.../ok/`` (softmax-cuda's adversarial ones in ``wrong/adversarial/``). A file
  is either whole (``<name>.py``) or, when it is one change from the lab's solution, that change
  (``<name>.diff``, a unified diff against the solution's code as ``grader.notebook`` extracts
  it), made into ``<name>.py`` by :func:`materialise` with a strict applier: every hunk's context
  must match the solution exactly, else a plain error says the solution changed.
* :func:`grading` gives the settings a submission is graded with (those of its lab's self-test:
  correctness only, the self-test's time limits and case pick; the performance phase only where
  the self-test runs it), :func:`signature` the verdict of a report with nothing that varies
  between runs or machines (no timings, no measured figures, no text after a digit).
* ``python tests/known.py --root DIR --out FILE`` records every submission's signature in
  ``FILE`` (the manifest ``tests/known_verdicts.json``), graded from the checkout at ``DIR``
  with that checkout's grader (run it with ``PYTHONPATH=DIR``).
* ``python tests/known.py --labs LAB ...`` records again, from this tree, the entries of the
  named labs (after a change to their cases that a line of the change's note explains), each
  entry's ``expect`` (and ``errors_vary``) kept.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "known_verdicts.json"

#: lab id -> (lab module, solution notebook)
LABS = {
    "gemm-cpu": ("gemm_cpu", "01_gemm_cpu.ipynb"),
    "gemm-cuda": ("gemm_cuda", "02_gemm_cuda.ipynb"),
    "gemm-tensor-core": ("gemm_tensor_core", "02b_gemm_tensor_core.ipynb"),
    "softmax-cuda": ("softmax_cuda", "03_softmax_cuda.ipynb"),
    "winograd": ("winograd", "04_winograd.ipynb"),
    "flash-attention": ("flash_attention", "05_flash_attention.ipynb"),
    "int8-linear": ("int8_linear", "06_int8_linear.ipynb"),
    "npu-vector-add": ("npu_vector_add", "07a_npu_vector_add.ipynb"),
    "npu-matmul": ("npu_matmul", "07b_npu_matmul.ipynb"),
    "npu-rmsnorm": ("npu_rmsnorm", "07c_npu_rmsnorm.ipynb"),
    "npu-flash-attention": ("npu_flash_attention", "07d_npu_flash_attention.ipynb"),
    "moe": ("moe", "08a_moe.ipynb"),
    "decode-attention": ("decode_attention", "08b_decode_attention.ipynb"),
    "torch-op": ("torch_op", "09_torch_op.ipynb"),
}
KINDS = ("wrong", "ok")

#: the layout before the lab folders (commit bbdba92): lab id -> kind -> folders under
#: tests/submissions/ (the recorder's)
OLD_LAYOUT = {
    "gemm-cpu": {"wrong": ["gemm_cpu"], "ok": ["gemm_cpu_ok"]},
    "gemm-cuda": {"wrong": ["gemm_cuda"], "ok": ["gemm_cuda_ok"]},
    "gemm-tensor-core": {"wrong": [], "ok": []},
    "softmax-cuda": {"wrong": ["softmax_cuda", "softmax_cuda_adversarial"], "ok": []},
    "winograd": {"wrong": ["winograd"], "ok": []},
    "flash-attention": {"wrong": ["flash_attention"], "ok": ["flash_attention_ok"]},
    "int8-linear": {"wrong": ["int8_linear"], "ok": []},
    "npu-vector-add": {"wrong": ["npu_vector_add"], "ok": []},
    "npu-matmul": {"wrong": ["npu_matmul"], "ok": []},
    "npu-rmsnorm": {"wrong": [], "ok": []},
    "npu-flash-attention": {"wrong": [], "ok": []},
    "moe": {"wrong": [], "ok": []},
    "decode-attention": {"wrong": [], "ok": []},
    "torch-op": {"wrong": [], "ok": []},
}

# ------------------------------------------------------------------------- how each is graded
#: flash-attention's self-test grades on these cases only (small; causal and not; one tile and
#: several; float32 and float16; large scores), the known-good designs on one more
FLASH_PICK = ("float32 1x1x1x32", "float16 1x1x17x32 causal", "float32 1x1x17x64 causal",
              "float32 1x1x17x32", "float32 1x1x40x32 large", "float32 1x1x100x32 causal",
              "float16 1x1x100x32")
FLASH_OK_PICK = FLASH_PICK + ("float32 2x3x17x32 causal",)
#: moe's known submissions are graded on its small cases: each function, K 511, a block of 4,
#: top-k 1 to 4 (the cases take a few seconds on the simulator; the grading's start, 10 more)
MOE_PICK = ("moe_align M=17 E=5 top3 block 4", "moe_align M=33 E=8 top2 block 16",
            "moe_align M=4 E=64 top1 block 16", "grouped_gemm M=2 K=511 N=8 E=4 top2 block 16",
            "grouped_gemm M=5 K=33 N=70 E=6 top2 block 16", "combine M=5 N=70 top2",
            "combine M=3 N=33 top1", "combine M=7 N=129 top4")

#: decode-attention's known submissions are graded on its small cases: one key, empty splits,
#: GQA 4 and 8 on two kv heads, large scores, a last key that carries the output (a few
#: seconds on the simulator after compiling)
DECODE_PICK = ("B1 Hq1/Hkv1 d64 L1 splits1", "B1 Hq4/Hkv1 d64 L32 splits4",
               "B3 Hq8/Hkv2 d64 L37 splits1", "B2 Hq16/Hkv2 d64 L20 splits3",
               "B2 Hq8/Hkv2 d64 L40 splits3 large", "B1 Hq4/Hkv1 d64 L1025 splits16 tail",
               "B3 Hq8/Hkv2 d128 L37 splits1 tail")

#: gemm-cpu's known-wrong submissions that never return (their first calls time out)
HANGS = {"infinite_loop", "infinite_loop_python"}

#: torch-op's known-wrong submissions whose torch.compile case fails at once (the compile
#: stops at their fault, and the manifest keeps its words) are graded on every case; the
#: others on every case but that one (a cold Inductor compile, about 13 s of a grading): the
#: faults they plant show in eager calls, opcheck or gradcheck
TORCH_COMPILE_FAILS = {"fake_wrong_shape", "no_autograd"}

#: (lab id, name) whose self-test runs the performance phase: their verdict is the speed
#: rules'. The CPU labs' timed ones (gemm-cpu's ikj_plain, winograd's direct, filter_per_tile,
#: writes_inputs_when_timed) are timed for real and stay with their lab's slow tests.
PERFORMANCE = {
    ("gemm-cuda", "uncoalesced_a_tile"), ("gemm-cuda", "naive"),
    ("gemm-cuda", "coalesced_no_shared"), ("gemm-cuda", "no_reuse"),
    ("gemm-cuda", "explicit_copies_tile8"), ("gemm-cuda", "padded_transposed"),
    ("gemm-cuda", "register_column"), ("gemm-cuda", "register_tile_no_shared"),
    ("gemm-cuda", "tile32"),
    ("softmax-cuda", "two_kernels"), ("softmax-cuda", "chunked_uncoalesced"),
    ("npu-vector-add", "single_buffer"), ("npu-vector-add", "single_buffer_small_tile"),
    ("npu-vector-add", "one_core"), ("npu-matmul", "no_pingpong"), ("npu-matmul", "one_core"),
    ("npu-rmsnorm", "two_passes_always"), ("npu-rmsnorm", "one_core_only"),
    ("npu-flash-attention", "one_vector_core"), ("npu-flash-attention", "one_block_in_flight"),
    ("npu-flash-attention", "small_key_blocks"), ("npu-flash-attention", "one_slot"),
    ("moe", "per_expert_launches"),
    ("decode-attention", "no_split"), ("decode-attention", "per_q_head_reads"),
    ("torch-op", "recompute_in_backward"),
    ("flash-attention", "host_in_timed_call"), ("flash-attention", "scores_in_global"),
    ("gemm-tensor-core", "unswizzled"), ("gemm-tensor-core", "synchronous_tiles"),
    ("gemm-tensor-core", "simt_kernel"), ("gemm-tensor-core", "padded_rows"),
}


def grading(lab_id: str, kind: str, name: str, performance: bool = False) -> dict:
    """The keyword arguments of ``grader.runner.grade`` for submission ``name`` (no suffix):
    correctness only unless ``performance`` (then the self-test's performance grading, for a
    member of :data:`PERFORMANCE`)."""
    kw: dict = {"run_performance": performance}
    if lab_id == "gemm-cpu" and kind == "wrong":
        # the self-test's limits (20 s a call, 60 s a first call in the lab): same code path
        kw.update(case_timeout_s=5, first_call_timeout_s=10)
        if name in HANGS:
            # each hang waits out its limit (three of them): 3 s is several times a small
            # kernel's compile on a busy 2-core machine
            kw.update(case_timeout_s=2, first_call_timeout_s=3)
    if lab_id == "moe":
        kw["only"] = _Pick(MOE_PICK)
    if lab_id == "decode-attention":
        kw["only"] = _Pick(DECODE_PICK)
    if lab_id == "torch-op" and kind == "wrong" and name not in TORCH_COMPILE_FAILS:
        kw["only"] = _Skip("compile")
    if lab_id == "flash-attention":
        pick = FLASH_OK_PICK if kind == "ok" else FLASH_PICK
        if name == "host_in_timed_call":
            pick = ("float32 1x1x17x32",)
        kw["only"] = _Pick(pick)
    return kw


#: the submissions whose labs' generic known-wrong / known-good tests
#: tests/test_grader/test_known_verdicts.py
#: took over: graded there in every run (the gradings those tests ran); the others with
#: ``KERNELLAB_KNOWN_FULL=1`` (their labs' own tests grade them in detail)
FULL = {
    "gemm-cpu": {"zeros", "tail_bug", "fp16_accum", "writes_input", "calls_matmul",
                 "calls_matmul_hidden", "exits", "returns_array", "wrong_signature",
                 "unbounded_alloc", "crashes", "infinite_loop", "infinite_loop_python",
                 "explicit_signatures", "honest_styles", "calls_asmatrix", "matmul_via_match",
                 "patches_numpy_via_alias", "runs_code_via_np_load", "walks_frames",
                 "calls_libc_via_numba"},
    "gemm-cuda": {"race_no_second_sync", "no_bounds_check", "no_zero_fill", "stub", "host_loop",
                  "host_then_copy", "str_in_kernel"},
    # its perf-rule known-wrongs are bracketed by the ladder in its lab test
    "gemm-tensor-core": {"read_before_wait", "missing_store_tail"},
    "softmax-cuda": set(),  # its generic test shares its gradings with the detail tests
    "winograd": {"sign_error_g", "fp16_transforms", "partial_tiles_dropped",
                 "filter_cache_by_shape"},
    "int8-linear": {"accumulate_int16", "per_tensor_scale", "round_half_away",
                    "wrong_scale_product", "per_tensor_activations", "reciprocal_division",
                    "float64_division", "no_clamp", "int8_gemm_float32_accum",
                    "int8_gemm_float32_chunks", "linear_activation_reciprocal",
                    "linear_activation_float64", "weight_cache_by_shape"},
    "flash-attention": {"explicit_copies", "per_block_views", "per_head_copies", "warp_per_row"},
    "npu-vector-add": {"ub_overflow", "missing_free", "tail_not_handled", "unaligned_tail",
                       "some_cores", "tbuf_copy_in_unordered", "tbuf_copy_out_unordered",
                       "tbuf_copy_in_war", "saturating_add", "signed_zero_lost"},
    # the TBuf pair and the speed ones are graded in detail by the lab's tests
    "npu-rmsnorm": {"fp16_statistics", "whole_row_in_ub", "missing_tail", "no_eps",
                    "mean_over_padded"},
    # the speed ones are graded in detail by the lab's tests
    "npu-flash-attention": {"no_s_flag", "p_flag_on_vector_pipe", "no_rescale",
                            "causal_diagonal_excluded", "key_tail_unmasked"},
    # the rest with KERNELLAB_KNOWN_FULL=1 (each entry's expect): a grading compiles kernels for
    # several seconds on the simulator
    "moe": {"lost_token", "reads_padded_rows"},
    # one grading of its correctness pick takes about 50 s on two cores: all of them with
    # KERNELLAB_KNOWN_FULL=1
    "decode-attention": set(),
    # each grading imports torch and runs its checks (about 20 s; its compile case, 10 more)
    "torch-op": {"fake_wrong_shape", "undeclared_mutation", "alias_numpy_view", "no_autograd",
                 "wrong_backward"},
    "npu-matmul": {"l0c_overflow", "missing_free", "k_tail_missing", "mn_tail_missing",
                   "tbuf_l1_unordered", "tbuf_l0_unordered"},
}


class _Pick:
    """``only=``: the cases named (a named class, so that a grading's settings print)."""

    def __init__(self, names):
        self.names = frozenset(names)

    def __call__(self, case) -> bool:
        return case.name in self.names


class _Skip:
    """``only=``: every case but those whose ``check`` parameter is ``check``."""

    def __init__(self, check: str):
        self.check = check

    def __call__(self, case) -> bool:
        return case.params.get("check") != self.check


# ----------------------------------------------------------------------------- the signature
def _stem(text: str | None, limit: int = 100) -> str | None:
    """``text`` up to its first digit (numbers vary: sizes, timings, errors), trimmed."""
    if text is None:
        return None
    return re.split(r"\d", text, maxsplit=1)[0].strip()[:limit]


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _shape(text: str | None, limit: int = 200) -> str | None:
    """``text``'s first line with every number as ``#`` and quoted source (in backticks)
    dropped, at most ``limit`` characters: what it says, not the figures."""
    if text is None:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _NUMBER.sub("#", re.sub(r"`[^`]*`", "``", first))[:limit]


def signature(report) -> dict:
    """A report's verdict: passed, score, the fatal kind and the start of its reason, the static
    findings, each case's verdict and what its error says, the failing and passing rules, the
    re-check's verdict."""
    return {
        "passed": bool(report.passed),
        "score": round(float(report.score), 1),
        "fatal_kind": report.fatal_kind if report.fatal else None,
        "fatal": _stem(report.fatal),
        "static": sorted({_stem(s) for s in report.static}),
        "broken": {k: report.broken_kind.get(k) for k in sorted(report.broken)},
        "cases": [[c.case, bool(c.passed), bool(c.not_run), _shape(c.error)]
                  for c in sorted(report.cases, key=lambda c: c.case)],
        "rules_failed": sorted(r.name for r in report.rules if not r.passed),
        "rules_passed": sorted(r.name for r in report.rules if r.passed),
        "recheck": None if report.recheck is None else [bool(report.recheck.passed),
                                                        _shape(report.recheck.error)],
    }


def without_errors(sig: dict) -> dict:
    """``sig`` without what its failing cases' errors say (their verdicts stay): for a
    submission whose manifest entry says ``"errors_vary"`` (numba's stock simulator runs its
    threads for real, so which of two faults a case reports first varies)."""
    return {**sig, "cases": [c[:3] for c in sig["cases"]]}


# ----------------------------------------------------------------------------- where they are
def folder(lab_id: str, kind: str) -> Path:
    """``grader/labs/<lab_module>/submissions/<kind>/``."""
    assert kind in KINDS, kind
    return ROOT / "grader" / "labs" / LABS[lab_id][0] / "submissions" / kind


def stored(lab_id: str, kind: str) -> dict[str, Path]:
    """name -> its stored file (``.py`` whole, ``.diff`` a change to the solution), every
    subfolder included; a name stored twice is an error."""
    out: dict[str, Path] = {}
    base = folder(lab_id, kind)
    for p in sorted(base.rglob("*")):
        if p.suffix not in (".py", ".diff") or "__pycache__" in p.parts:
            continue
        assert p.stem not in out, f"{lab_id} {kind}: {p.stem} stored twice ({out[p.stem]}, {p})"
        out[p.stem] = p
    return out


def submissions(lab_id: str, kind: str) -> list[str]:
    """The names (no suffix) of lab ``lab_id``'s ``kind`` ("wrong" or "ok") submissions."""
    return sorted(stored(lab_id, kind))


def submission(lab_id: str, name: str, kind: str | None = None, tmp: Path | None = None) -> Path:
    """The ``.py`` file of submission ``name`` (with or without ``.py``) of lab ``lab_id``: the
    stored file itself, or, stored as a diff, the solution with the diff applied, written once
    into ``tmp`` (default: once per process, into a temporary folder removed at exit)."""
    name = name.removesuffix(".py")
    for k in ((kind,) if kind else KINDS):
        p = stored(lab_id, k).get(name)
        if p is not None:
            if p.suffix == ".py":
                return p
            return materialise(lab_id, p, tmp) if tmp is not None else _made(lab_id, p)
    raise FileNotFoundError(f"no submission {name!r} of lab {lab_id}")


_MADE: dict[tuple[str, str], Path] = {}


def _made(lab_id: str, diff_path: Path) -> Path:
    """The ``.py`` made from a stored diff, once per process, in a folder removed at exit."""
    key = (lab_id, str(diff_path))
    if key not in _MADE:
        import atexit
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="kernellab-known-"))
        atexit.register(shutil.rmtree, tmp, True)
        _MADE[key] = materialise(lab_id, diff_path, tmp)
    return _MADE[key]


class Folder:
    """A lab's ``wrong`` or ``ok`` submissions as if every one were a ``.py`` in one folder:
    ``Folder("gemm-cpu", "wrong") / "zeros.py"`` is that submission's file (made from its diff
    where it is stored as one); ``Folder()`` takes ``"<lab_module>/<name>.py"``."""

    def __init__(self, lab_id: str | None = None, kind: str | None = None):
        self.lab_id, self.kind = lab_id, kind

    def __truediv__(self, name: str) -> Path:
        if self.lab_id is None:
            module, _, name = str(name).partition("/")
            lab_id = next(k for k, (m, _) in LABS.items() if m == module)
            return Folder(lab_id, self.kind) / name
        return submission(self.lab_id, name, self.kind)

    def glob(self, pattern: str = "*.py") -> list[Path]:
        import fnmatch

        assert self.lab_id is not None
        kinds = (self.kind,) if self.kind else KINDS
        return [self / n for k in kinds for n in submissions(self.lab_id, k)
                if fnmatch.fnmatch(n + ".py", pattern)]


# ------------------------------------------------------------------ one change from the solution
def solution_source(lab_id: str, root: Path = ROOT) -> str:
    """The code the grader extracts from the lab's solution notebook (its graded cells)."""
    from grader import notebook

    return notebook.submission_source(root / "solutions" / LABS[lab_id][1])


class StaleDiff(AssertionError):
    """A stored diff no longer applies to the solution."""


def make_diff(lab_id: str, name: str, solution: str, text: str, header: str) -> str:
    """``text`` as a unified diff against ``solution`` (3 lines of context), after ``header``
    (the submission's header comment, each line starting with '#')."""
    lines = difflib.unified_diff(solution.splitlines(keepends=True),
                                 text.splitlines(keepends=True),
                                 f"a/{lab_id} solution", f"b/{name}.py", n=3)
    body = "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n"
                   for ln in lines)
    return header + body


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_diff(solution: str, diff: str, what: str) -> str:
    """``solution`` with the unified ``diff`` applied, strictly: each hunk's context and removed
    lines must be exactly the solution's lines at the hunk's stated position (no fuzz, no
    offset), else :class:`StaleDiff` naming ``what`` and the hunk."""
    src = solution.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # next line of src not yet copied
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        i += 1
    if i == len(lines):
        raise StaleDiff(f"{what}: the diff has no hunk")
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            raise StaleDiff(f"{what}: not a hunk header: {lines[i]!r}")
        header = lines[i].strip()
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if start < pos:
            raise StaleDiff(f"{what}: hunk {header} overlaps the one before")
        out.extend(src[pos:start])
        pos = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            ln, tag = lines[i], lines[i][:1]
            no_newline = i + 1 < len(lines) and lines[i + 1].startswith("\\")
            body = ln[1:]
            if no_newline:
                body = body.rstrip("\n")
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos] != body:
                    got = src[pos] if pos < len(src) else "<end of file>"
                    raise StaleDiff(
                        f"{what}: hunk {header} does not apply at line {pos + 1} (the solution "
                        f"has {got!r}, the diff expects {body!r}): the solution changed; "
                        f"re-make this diff")
                pos += 1
                if tag == " ":
                    out.append(body)
            elif tag == "+":
                out.append(body)
            elif tag != "\\":
                raise StaleDiff(f"{what}: hunk {header}: a line that is not context, '-' or "
                                f"'+': {ln!r}")
            i += 2 if no_newline else 1
    out.extend(src[pos:])
    return "".join(out)


def diff_header(diff: str) -> str:
    """The leading comment of a stored diff (the submission's header: why it is wrong)."""
    head = []
    for ln in diff.splitlines(keepends=True):
        if ln.startswith("--- "):
            break
        head.append(ln)
    return "".join(head)


def materialise(lab_id: str, diff_path: Path, tmp: Path | None = None) -> Path:
    """``<name>.py`` in ``tmp``: the lab's solution with ``diff_path`` applied (the header
    comment first, as in the whole files)."""
    import tempfile

    diff = diff_path.read_text()
    text = apply_diff(solution_source(lab_id), diff, f"{lab_id} {diff_path.name}")
    tmp = Path(tmp) if tmp is not None else Path(tempfile.mkdtemp(prefix="known-"))
    out = tmp / f"{diff_path.stem}.py"
    out.write_text(text)
    return out


# --------------------------------------------------------------------------------- recording
def _old_files(root: Path, lab_id: str, kind: str) -> dict[str, Path]:
    out = {}
    for d in OLD_LAYOUT[lab_id][kind]:
        for p in sorted((root / "tests" / "submissions" / d).glob("*.py")):
            assert p.stem not in out, p
            out[p.stem] = p
    return out


def _record_one(job):
    lab_id, kind, name, path, performance = job
    import time

    from grader.runner import grade

    t = time.perf_counter()
    rep = grade(lab_id, path, **grading(lab_id, kind, name, performance))
    return lab_id, kind, name, performance, signature(rep), time.perf_counter() - t


def write_manifest(out: Path, manifest: dict) -> None:
    """JSON, one line per case and per list of names (diffs stay short)."""
    text = json.dumps(manifest, indent=1)
    # a list of scalars on one line
    text = re.sub(r"\[\s*((?:(?:\"(?:[^\"\\]|\\.)*\"|true|false|null|-?[\d.]+)\s*,?\s*)*)\]",
                  lambda m: "[" + ", ".join(x.strip() for x in
                                            re.findall(r'(?:"(?:[^"\\]|\\.)*"|true|false|'
                                                       r'null|-?[\d.]+)', m.group(1))) + "]",
                  text)
    assert json.loads(text) == manifest
    out.write_text(text + "\n")


def record(root: Path, out: Path, processes: int = 2) -> None:
    """Grade every submission of the checkout at ``root`` (old layout) and write the manifest."""
    import multiprocessing
    import time

    import grader
    import kernellab

    for mod in (grader, kernellab):
        assert Path(mod.__file__).resolve().is_relative_to(root.resolve()), mod.__file__
    jobs = []
    for lab_id in LABS:
        for kind in KINDS:
            for name, p in _old_files(root, lab_id, kind).items():
                jobs.append((lab_id, kind, name, str(p), False))
                if (lab_id, name) in PERFORMANCE:
                    jobs.append((lab_id, kind, name, str(p), True))
    t0 = time.perf_counter()
    manifest: dict = {}
    seconds: dict = {}
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for lab_id, kind, name, perf, sig, s in pool.imap_unordered(_record_one, jobs):
            entry = manifest.setdefault(lab_id, {}).setdefault(name, {"kind": kind})
            entry["performance" if perf else "correctness"] = sig
            seconds[f"{lab_id} {name} {'perf' if perf else 'cases'}"] = round(s, 1)
            print(f"{s:7.1f} s  {lab_id} {name} {'perf' if perf else ''}", flush=True)
    manifest = {lab: dict(sorted(v.items())) for lab, v in sorted(manifest.items())}
    write_manifest(out, manifest)
    print(f"{len(jobs)} gradings of {sum(len(v) for v in manifest.values())} submissions in "
          f"{time.perf_counter() - t0:.0f} s on {processes} processes", flush=True)
    (out.parent / (out.stem + ".seconds.json")).write_text(json.dumps(seconds, indent=1))


def rerecord(labs: list[str], out: Path = MANIFEST, processes: int = 2) -> None:
    """Grade this tree's submissions of ``labs`` and replace their entries in ``out`` (each
    entry's other fields, ``expect`` and ``errors_vary``, kept)."""
    import multiprocessing

    jobs = [(lab_id, kind, name, str(submission(lab_id, name, kind)), perf)
            for lab_id in labs for kind in KINDS for name in submissions(lab_id, kind)
            for perf in ((False, True) if (lab_id, name) in PERFORMANCE else (False,))]
    manifest = json.loads(out.read_text())
    fresh: dict = {}
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for lab_id, kind, name, perf, sig, s in pool.imap_unordered(_record_one, jobs):
            entry = fresh.setdefault(lab_id, {}).setdefault(name, {"kind": kind})
            entry["performance" if perf else "correctness"] = sig
            print(f"{s:7.1f} s  {lab_id} {name} {'perf' if perf else ''}", flush=True)
    for lab_id, entries in fresh.items():
        for name, entry in entries.items():
            old = manifest.get(lab_id, {}).get(name, {})
            entry.update({k: v for k, v in old.items() if k not in entry})
        manifest[lab_id] = dict(sorted(entries.items()))
    write_manifest(out, manifest)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path)
    ap.add_argument("--labs", nargs="+", choices=sorted(LABS))
    ap.add_argument("--out", type=Path, default=MANIFEST)
    ap.add_argument("--processes", type=int, default=2)
    a = ap.parse_args()
    if a.labs:
        sys.path.insert(0, str(ROOT))
        rerecord(a.labs, a.out, a.processes)
    else:
        if a.root is None:
            ap.error("--root DIR (record every lab from that checkout) or --labs LAB ...")
        sys.path.insert(0, str(a.root))
        record(a.root, a.out, a.processes)
