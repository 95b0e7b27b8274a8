"""Static checks of a submission's source before anything of it runs.

The grader runs code it does not trust, and the kernel under test must compute its own result.
Guarding the *kind* of fault rather than one example, a submission may only:

* import the modules its lab allows (an allowlist: e.g. numpy, numba, math);
* avoid every name, attribute or operator that reaches a library GEMM or the golden side —
  ``@``, ``matmul``, ``dot``, ``einsum``, ``tensordot``, ``linalg``, ``blas`` … and the course's
  own ``reference_kernels`` / baseline names;
* avoid the escape hatches that could reach those indirectly or tamper with the grader in its
  own process: ``eval``/``exec``/``compile``/``__import__``/``getattr``/``globals``/``vars``/
  ``open`` …, dunder names (``__dict__``, ``__class__`` …) and private attributes
  (``np._core`` …).

Each finding names the line and says what to do instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

#: Names, attributes or strings that reach a library matrix product (numpy >= 2 included).
BANNED_GEMM = frozenset({
    "matmul", "dot", "vdot", "inner", "einsum", "einsum_path", "tensordot", "kron", "linalg",
    "blas", "lapack", "multi_dot", "matrix_power", "matvec", "vecmat", "vecdot", "cov",
    "corrcoef",
})
#: Builtins that could reach a banned function or the grader indirectly.
BANNED_BUILTINS = frozenset({
    "eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
    "locals", "vars", "open", "input", "breakpoint", "help", "memoryview",
})
#: numba features that drop below Python (raw LLVM, C callbacks) or into the interpreter.
BANNED_NUMBA = frozenset({"extending", "intrinsic", "cfunc", "carray", "farray", "core",
                          "objmode", "experimental", "llvmlite"})
#: The course's golden side.
BANNED_COURSE = frozenset({"reference_kernels", "kernellab", "grader"})


@dataclass(frozen=True)
class Finding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def check_source(source: str, *, allowed_imports: frozenset[str],
                 banned_names: frozenset[str] = frozenset()) -> list[Finding]:
    """Return the rule violations in ``source`` (empty list: clean).

    ``allowed_imports``: top-level module names the lab permits. ``banned_names``: extra names
    for this lab (e.g. its own baseline ``gemm_naive``). A syntax error is returned as a finding.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Finding(exc.lineno or 0, f"syntax error: {exc.msg}")]
    gemm = BANNED_GEMM | banned_names
    out: list[Finding] = []

    def name_rule(name: str, line: int, what: str) -> None:
        if name in gemm:
            out.append(Finding(line, f"{what} '{name}' computes the product for you (or reaches a "
                                     "library/reference GEMM): write the loops yourself"))
        elif name in BANNED_BUILTINS:
            out.append(Finding(line, f"'{name}' is not allowed in a graded submission"))
        elif name in BANNED_NUMBA:
            out.append(Finding(line, f"numba's '{name}' is not allowed here: use @njit / prange"))
        elif name in BANNED_COURSE:
            out.append(Finding(line, f"'{name}' belongs to the course's own code; a submission "
                                     "may not use it"))
        elif name.startswith("__") or (what in ("attribute", "module") and name.startswith("_")):
            out.append(Finding(line, f"dunder names and private attributes ('{name}') are not "
                                     "allowed in a graded submission"))

    # names bound to imported modules (``import numpy as np`` -> "np"): a submission may read
    # from them but never assign into them (monkeypatching np.matmul or np.random would change
    # the baseline or the inputs the grader times against)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    modules.add(alias.asname or alias.name)

    def root_name(expr):
        while isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) and \
                root_name(node) in modules:
            out.append(Finding(line, f"assigning to '{ast.unparse(node)}' changes a "
                                     "library for everyone in the process: not allowed"))
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top not in allowed_imports:
                    out.append(Finding(line, f"import of '{alias.name}' is not allowed in this lab "
                                             f"(allowed: {', '.join(sorted(allowed_imports))})"))
                for part in alias.name.split("."):
                    name_rule(part, line, "module")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod.split(".")[0] not in allowed_imports:
                out.append(Finding(line, f"import from '{'.' * node.level}{mod}' is not allowed in "
                                         f"this lab (allowed: {', '.join(sorted(allowed_imports))})"))
            for part in mod.split("."):
                if part:
                    name_rule(part, line, "module")
            for alias in node.names:
                if alias.name != "*":
                    name_rule(alias.name, line, "name")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(Finding(line, "the '@' operator computes the product for you: write the "
                                     "loops yourself"))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            out.append(Finding(line, "the '@=' operator computes the product for you"))
        elif isinstance(node, ast.Attribute):
            name_rule(node.attr, line, "attribute")
        elif isinstance(node, ast.Name):
            name_rule(node.id, line, "name")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in gemm or node.value in BANNED_COURSE:
                out.append(Finding(line, f"the string '{node.value}' names a banned function"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("__"):
                out.append(Finding(line, f"'{node.name}' is not allowed in a graded submission"))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            pass
    # one finding per (line, message)
    seen, uniq = set(), []
    for f in sorted(out, key=lambda f: f.line):
        if (f.line, f.message) not in seen:
            seen.add((f.line, f.message))
            uniq.append(f)
    return uniq
