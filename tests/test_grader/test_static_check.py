"""The static rules catch the kind of fault, not one example."""

import pytest

from grader.static_check import check_source

ALLOWED = frozenset({"numpy", "numba", "math"})


def findings(src):
    return [str(f) for f in check_source(src, allowed_imports=ALLOWED,
                                         banned_names=frozenset({"gemm_naive"}))]


CLEAN = """
import numpy as np
import numba
from numba import njit, prange
import math

@njit(cache=True)
def _pack(A, out):
    for i in range(A.shape[0]):
        out[i] = A[i]

def gemm(A, B, C):
    for _ in range(1):
        C[:] = np.zeros_like(C) + math.sqrt(4.0)
"""


def test_clean_source_passes():
    assert findings(CLEAN) == []


@pytest.mark.parametrize("src,needle", [
    ("import numpy as np\nx = np.matmul(a, b)", "matmul"),
    ("c = a @ b", "'@'"),
    ("c @= b", "'@='"),
    ("import numpy as np\nx = a.dot(b)", "dot"),
    ("from numpy import einsum", "einsum"),
    ("import numpy as np\nnp.linalg.multi_dot([a, b])", "linalg"),
    ("import scipy.linalg.blas", "not allowed"),
    ("import os", "not allowed"),
    ("import ctypes", "not allowed"),
    ("from reference_kernels.gemm import gemm_golden", "not allowed"),
    ("import numpy as np\nf = getattr(np, 'mat' + 'mul')", "getattr"),
    ("eval('1')", "eval"),
    ("__import__('os')", "__import__"),
    ("import numpy as np\nnp.__dict__['dot']", "__dict__"),
    ("import numpy as np\nnp._core.multiarray", "_core"),
    ("from numba.extending import intrinsic", "extending"),
    ("import numba\nnumba.objmode()", "objmode"),
    ("from numba import gemm_naive", "gemm_naive"),
    ("import numpy as np\nnp.gemm_naive(a, b, c)", "gemm_naive"),
    ("x = 'matmul'", "string"),
    ("from . import foo", "not allowed"),
    ("def f(:\n", "syntax error"),
    ("import numpy as np\nnp.random.default_rng = None", "assigning to 'np.random.default_rng'"),
    ("import numpy\nnumpy.matmul = print", "assigning to 'numpy.matmul'"),
    ("from numba import config\nconfig.NUMBA_NUM_THREADS = 1", "assigning to 'config"),
    ("import numba\ndel numba.njit", "assigning to 'numba.njit'"),
])
def test_violations_are_found(src, needle):
    out = findings(src)
    assert out, src
    assert any(needle in f for f in out), out


def test_honest_forms_are_accepted():
    src = ("from __future__ import annotations\nimport math\n\ndef gemm(A, B, C):\n"
           "    dot = 0.0\n    inner = math.ceil(1.5)\n    return None\n\n"
           "if __name__ == '__main__':\n    pass\n")
    assert findings(src) == []


def test_findings_name_the_line():
    out = findings("import numpy as np\n\n\nx = np.dot(a, b)\n")
    assert out[0].startswith("line 4:")


def test_rules_do_not_depend_on_what_the_process_imported():
    """``from numba.types import float16`` anywhere in the grading process (a course module did)
    creates a module object named "numba.types": ``from numba import types`` must stay allowed
    (escape_names is computed once per process, so this runs in a fresh one)."""
    import subprocess
    import sys

    code = ("import numba.types\n"
            "from grader import static_check as sc\n"
            "print(sorted(sc.escape_names(frozenset({'numpy', 'numba', 'math'})) & {'types'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout


# PyTorch's autograd context (Lab 9): ctx.eps = eps, and only there

_CTX = dict(allowed_imports=frozenset({"numpy", "torch"}),
            allowed_submodules=frozenset({"torch.library"}), context_params=frozenset({"ctx"}))
_SETUP = ("def setup_context(ctx, inputs, output):\n"
          "    ctx.eps = inputs[3]\n"
          "    ctx.save_for_backward(output[1])\n")


def test_a_setup_context_handed_to_register_autograd_may_set_ctx_attributes():
    src = _SETUP + "op.register_autograd(backward, setup_context=setup_context)\n"
    assert check_source(src, **_CTX) == []


def test_a_setup_context_called_by_the_submission_is_a_finding():
    """Called with a module as its context it would patch the library: only PyTorch may call
    it, so any other use of its name is a finding; so is a rebound ``ctx``, and without the
    lab's ``context_params`` the store is the usual attribute-assignment finding."""
    called = _SETUP + "import numpy as np\nsetup_context(np.random, 1, 2)\n"
    assert any("may only be handed to register_autograd" in f.message
               for f in check_source(called, **_CTX))
    aliased = _SETUP + "f = setup_context\n"
    assert check_source(aliased, **_CTX)
    rebound = "def s(ctx, i, o):\n    ctx = o\n    ctx.x = 1\n"
    assert check_source(rebound, **_CTX)
    assert check_source(_SETUP, allowed_imports=frozenset({"numpy"}))
