"""One meaning for a hidden-case file in every lab (grader.spec.parse_hidden_case): the same
malformed file gets the same verdict and a plain-words error naming the case and the
parameter, in every lab, from the spec and from ``kernellab grade --hidden``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.labs import LABS, get_spec_class
from grader.spec import HiddenCases

ROOT = Path(__file__).resolve().parents[2]
KERNELLAB = Path(sys.executable).parent / "kernellab"

#: a valid hidden case of each lab, and the name of one of its integer parameters
GOOD = {
    "gemm-cpu": ({"M": 3, "N": 4, "K": 5}, "N"),
    "gemm-cuda": ({"M": 3, "N": 4, "K": 5}, "N"),
    "gemm-tensor-core": ({"M": 3, "N": 4, "K": 5}, "N"),
    "softmax-cuda": ({"fn": "softmax", "M": 3, "N": 4}, "N"),
    "winograd": ({"N": 1, "C": 2, "K": 3, "H": 4, "W": 5}, "N"),
    "flash-attention": ({"N": 17, "d": 32}, "N"),
    "int8-linear": ({"fn": "int8_gemm", "M": 3, "N": 4, "K": 5}, "N"),
    "npu-vector-add": ({"n": 100}, "n"),
    "npu-matmul": ({"M": 3, "N": 4, "K": 5}, "N"),
    "npu-rmsnorm": ({"M": 3, "N": 4, "dtype": "bfloat16"}, "N"),
    "npu-flash-attention": ({"N": 17, "d": 64, "causal": True}, "N"),
    "moe": ({"fn": "combine", "M": 3, "k": 2, "N": 4}, "N"),
    "decode-attention": ({"B": 1, "Hq": 4, "Hkv": 1, "d": 64, "L": 5, "num_splits": 2}, "L"),
    "torch-op": ({"R": 3, "N": 5}, "N"),
}

#: (what is wrong, how to make it from a good case and its integer key, words the error has)
MALFORMED = [
    ("fraction", lambda p, k: {**p, k: 1.9}, "{k} must be an integer"),
    ("integral float", lambda p, k: {**p, k: 17.0}, "{k} must be an integer"),
    ("exponent", lambda p, k: {**p, k: 1e3}, "{k} must be an integer"),
    ("boolean", lambda p, k: {**p, k: True}, "{k} must be an integer"),
    ("digit string", lambda p, k: {**p, k: "17"}, "{k} must be an integer"),
    ("null", lambda p, k: {**p, k: None}, "{k} must be an integer"),
    ("negative", lambda p, k: {**p, k: -3}, "{k} must be >= 1, not -3"),
    ("zero", lambda p, k: {**p, k: 0}, "{k} must be >= 1, not 0"),
    ("missing", lambda p, k: {x: v for x, v in p.items() if x != k}, "missing parameter {k}"),
    ("unknown key", lambda p, k: {**p, "stride": 2}, 'unknown parameter "stride"'),
    ("dtype string", lambda p, k: {**p, "dtype": "float8"}, "dtype"),
    ("not an object", lambda p, k: [p], "expected an object of parameters"),
    ("a string", lambda p, k: "M=3", "expected an object of parameters"),
]


def test_every_lab_has_a_good_case():
    assert set(GOOD) == set(LABS)
    for lab, (good, _) in GOOD.items():
        spec = get_spec_class(lab)()
        (case,) = [c for c in spec.cases(HiddenCases(cases=[good])) if c.hidden]
        assert {k: case.params[k] for k in good} == good


@pytest.mark.parametrize("what, make, words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_the_same_malformed_case_is_refused_by_every_lab_in_plain_words(what, make, words):
    for lab, (good, key) in GOOD.items():
        spec = get_spec_class(lab)()
        bad = make(dict(good), key)
        with pytest.raises(ValueError) as exc:
            spec.cases(HiddenCases(cases=[good, bad]))
        msg = str(exc.value)
        assert msg.startswith("hidden case 1: "), (lab, msg)  # the case, by its place
        assert words.format(k=key) in msg, (lab, what, msg)
        assert "Traceback" not in msg and "<class" not in msg and "Error" not in msg


def test_strings_are_choices_spelt_exactly_and_booleans_are_json_booleans():
    cases = {"gemm-cpu": {"M": 1, "N": 1, "K": 1, "dtype": "Float32"},
             "softmax-cuda": {"fn": "softmax", "M": 1, "N": 1, "kind": "MASKED"},
             "int8-linear": {"fn": "int8_gemm", "M": 1, "N": 1, "K": 1, "kind": "rand"},
             "npu-vector-add": {"n": 5, "kind": 1}}
    for lab, bad in cases.items():
        with pytest.raises(ValueError, match=r"hidden case 0: \w+ must be one of"):
            get_spec_class(lab)().cases(HiddenCases(cases=[bad]))
    for fn_bad in ({"fn": "gemm", "M": 1, "N": 1}, {"M": 1, "N": 1}, {"fn": ["softmax"]}):
        with pytest.raises(ValueError, match=r"hidden case 0: (missing parameter )?fn"):
            get_spec_class("softmax-cuda")().cases(HiddenCases(cases=[fn_bad]))
    fa = get_spec_class("flash-attention")()
    for v in (1, 0, "true", "yes", None):
        with pytest.raises(ValueError, match="causal must be true or false"):
            fa.cases(HiddenCases(cases=[{"N": 3, "d": 32, "causal": v}]))
    (c,) = [c for c in fa.cases(HiddenCases(cases=[{"N": 3, "d": 32, "causal": True}]))
            if c.hidden]
    assert c.params["causal"] is True
    with pytest.raises(ValueError, match="d must be one of 32, 64, not 48"):
        fa.cases(HiddenCases(cases=[{"N": 3, "d": 48}]))
    # a parameter of another function of the lab is unknown to this one
    with pytest.raises(ValueError, match='unknown parameter "kind"'):
        get_spec_class("softmax-cuda")().cases(HiddenCases(cases=[
            {"fn": "row_sum", "M": 1, "N": 1, "kind": "masked"}]))


def test_a_malformed_file_is_a_usage_error_of_kernellab_grade(tmp_path):
    """From the file through the command line: exit 2, one line naming the case and the
    parameter, no traceback, nothing graded."""
    f = tmp_path / "hidden.json"
    f.write_text(json.dumps({"seed": 3, "cases": [{"M": 2, "N": 2, "K": 2},
                                                  {"M": 1.9, "N": 2, "K": 2}]}))
    with pytest.raises(ValueError, match="hidden case 1: M must be an integer"):
        get_spec_class("gemm-cpu")().cases(HiddenCases.load(f))
    r = subprocess.run([str(KERNELLAB), "grade", "gemm-cpu",
                        str(ROOT / "solutions" / "01_gemm_cpu.ipynb"), "--hidden", str(f)],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ),
                       timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("kernellab grade: hidden case 1: M must be an integer (a JSON "
                                "number with no fraction, exponent or quotes, e.g. 17), not 1.9")
    assert r.stdout == ""


def test_a_file_with_an_unknown_top_level_key_is_refused(tmp_path):
    """A misspelt "cases" must not grade silently with no hidden case."""
    f = tmp_path / "hidden.json"
    f.write_text(json.dumps({"seed": 3, "case": [{"M": 2, "N": 2, "K": 2}]}))
    with pytest.raises(ValueError, match="unknown key\\(s\\) 'case'"):
        HiddenCases.load(f)


def test_a_file_nested_too_deeply_is_a_plain_error(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        HiddenCases.load(f)
