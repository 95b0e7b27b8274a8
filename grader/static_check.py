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
  (``np._core`` …), also when spelled as a ``match`` class pattern (``case object(matmul=f)``
  looks the attribute up) or as a string;
* never reach, through an allowed module, a module the lab does not allow: every attribute name
  that the allowed modules bind to such a module (``numba.sys``, ``np.ctypeslib``,
  ``numba.config``, ``numba.np`` …) is banned, computed from the installed libraries, plus a
  fixed list of the usual ones (:data:`BANNED_ESCAPE`);
* never touch files, other processes, raw memory or the interpreter's frames (numpy's file
  functions, whose ``np.load(allow_pickle=True)`` runs arbitrary code; ``gi_frame``/``f_back``
  /``f_globals`` …, which reach the grader's own variables);
* never assign to or delete an attribute (``x.y = …``): a kernel writes into arrays; through an
  alias (``r = np.random; r.default_rng = …``) an attribute assignment patches a library for the
  grader too;
* no star imports (every name used must be visible to these rules) and no source-encoding
  declaration other than UTF-8 (the grader checks the text it runs).

Each finding names the line and says what to do instead.
"""

from __future__ import annotations

import ast
import codecs
import functools
import importlib
import importlib.util
import pkgutil
import re
import types
import warnings
from dataclasses import dataclass

#: Names, attributes or strings that reach a library matrix product (numpy >= 2 included).
BANNED_GEMM = frozenset({
    "matmul", "dot", "vdot", "inner", "einsum", "einsum_path", "tensordot", "kron", "linalg",
    "blas", "lapack", "multi_dot", "matrix_power", "matvec", "vecmat", "vecdot", "cov",
    "corrcoef",
    # np.matrix's ``*`` is a BLAS GEMM (np.asmatrix(A) * B); np.r_/np.c_ build one via makemat
    "matrix", "asmatrix", "bmat", "matrixlib", "makemat",
    # one BLAS dot product per output element, like inner/vdot (np.correlate(a, b) == a . b)
    "correlate", "convolve", "polymul", "innerproduct", "sumprod",
})
#: Builtins that could reach a banned function or the grader indirectly.
BANNED_BUILTINS = frozenset({
    "eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
    "locals", "vars", "open", "input", "breakpoint", "help", "memoryview",
})
#: numba features that drop below Python (raw LLVM, C callbacks, calls to any C symbol of the
#: process such as libc's ``system`` through ``types.ExternalFunction``, raw pointers) or into
#: the interpreter.
BANNED_NUMBA = frozenset({"extending", "intrinsic", "cfunc", "carray", "farray", "core",
                          "objmode", "experimental", "llvmlite", "ExternalFunction",
                          "ExternalFunctionPointer", "CPointer", "RawPointer", "EphemeralPointer",
                          "MemInfoPointer", "voidptr", "WrapperAddressProtocol",
                          "FunctionPrototype", "FunctionType",
                          # a dispatcher's handles on numba's compiler (they lead to LLVM modules
                          # and raw machine code): fn.targetctx.create_module(...) ...
                          "targetctx", "typingctx", "targetdescr", "add_overload",
                          "get_compile_result", "overloads", "get_overload", "func_code"})
#: The course's golden side.
BANNED_COURSE = frozenset({"reference_kernels", "kernellab", "grader"})
#: Ways out of the allowed modules: attribute names that reach the operating system, files,
#: other processes, raw memory, serialisation (pickle runs code) or the interpreter itself, and
#: the tables numpy reads to interpret dtype names. :func:`escape_names` adds every name that
#: the installed numpy/numba/math bind to a module the lab does not allow (``numba.sys`` …).
_ESCAPE_MODULES = frozenset({
    "os", "sys", "subprocess", "importlib", "builtins", "pickle",
    "cloudpickle", "marshal", "io", "pathlib", "shutil", "signal", "resource", "threading",
    "multiprocessing", "socket", "inspect", "gc", "f2py", "testing", "distutils", "config",
    "misc", "llvmlite", "ll", "binding", "lib", "ma", "np", "errors", "stencils", "parfors",
    "cuda",
})
#: numpy's file functions (np.load(..., allow_pickle=True) unpickles, i.e. runs, whatever the
#: file holds; np.save can overwrite the grader's files or its numba cache)
_ESCAPE_FILES = frozenset({
    "load", "loads", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt",
    "fromfile", "tofile", "fromregex", "memmap", "open_memmap", "DataSource", "dump", "dumps",
})
#: other programs (numba.gdb starts a debugger, np.test a test run) and raw memory (ctypes
#: calls any C function: np.ctypeslib.ctypes.CDLL(None).system, A.ctypes.data …)
_ESCAPE_PROCESS = frozenset({"gdb", "gdb_init", "gdb_breakpoint", "test", "as_strided", "ctypes",
                             "ctypeslib"})
#: the tables numpy reads to turn "float32" into a dtype (np.sctypeDict.update(...))
_ESCAPE_TABLES = frozenset({"sctypeDict", "typecodes", "sctypes"})
#: the thread count the grader pins for timing (on a many-core laptop, numba.set_num_threads(16)
#: inside the kernel would race numpy held to 2 threads)
_ESCAPE_TIMING = frozenset({"set_num_threads"})
BANNED_ESCAPE = (_ESCAPE_MODULES | _ESCAPE_FILES | _ESCAPE_PROCESS | _ESCAPE_TABLES
                 | _ESCAPE_TIMING)
#: CPython's frame, code and traceback objects: ``gen.gi_frame.f_back.f_globals`` reaches the
#: grader's variables (its baseline, its timer) from inside the submission.
FRAME_ATTRS = frozenset({"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
                         "f_lasti", "f_lineno"})
FRAME_PREFIXES = ("gi_", "cr_", "ag_", "tb_", "co_")
#: Submodules of the allowed modules any lab lets a submission reach (by the module's own name:
#: ``numba.types`` is ``numba.core.types``). A lab adds its own with ``allowed_submodules``.
# numba.types: numba's public alias of numba.core.types; importing it by name (``from
# numba.types import float16``) creates a module object named "numba.types", so both names
# are allowed, or the rules would depend on what the grading process happened to import
ALLOWED_SUBMODULES = frozenset({"numpy.random", "numba.core.types", "numba.types",
                                "numba.typed"})


@dataclass(frozen=True)
class Finding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def _module_allowed(name: str, allowed_imports: frozenset, allowed_submodules: frozenset) -> bool:
    return name in allowed_imports or name in ALLOWED_SUBMODULES or name in allowed_submodules


@functools.lru_cache(maxsize=None)
def escape_names(allowed_imports: frozenset,
                 allowed_submodules: frozenset = frozenset()) -> frozenset:
    """Attribute names that the installed allowed modules (and their allowed submodules) bind to
    a module the lab does not allow, e.g. ``sys`` (``numba.sys``), ``ctypeslib``
    (``np.ctypeslib``, loaded lazily), ``np`` (``numba.np``), plus the names of the allowed
    packages' submodules not imported yet (``numba.typed.typedlist`` appears only after the
    first ``typed.List``). Imports the allowed modules; computed once per process."""
    names: set[str] = set()
    listed: set[str] = set()  # names of the allowed packages' submodules, loaded or not
    exempt: set[str] = set()  # names under which an allowed module is reached (numba.types)
    seen: set[str] = set()
    stack = []
    # the allowed submodules are walked too: a package does not list them as attributes until
    # something imports them (``numba.cuda``), and they reach modules of their own
    # (``numba.cuda.cudadrv``, ``numba.cuda.simulator`` ...)
    for top in sorted(allowed_imports) + sorted(allowed_submodules):
        try:
            stack.append(importlib.import_module(top))
        except Exception:  # not installed here: nothing of it can be reached either
            continue
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while stack:
            mod = stack.pop()
            if mod.__name__ in seen:
                continue
            seen.add(mod.__name__)
            try:
                attrs = dir(mod)  # numpy lists its lazily loaded submodules here
            except Exception:
                continue
            for attr in attrs:
                if attr.startswith("_"):
                    continue
                try:
                    value = getattr(mod, attr)
                except Exception:
                    continue
                if isinstance(value, types.ModuleType):
                    if _module_allowed(value.__name__, allowed_imports, allowed_submodules):
                        stack.append(value)
                        exempt.add(attr)
                    else:
                        names.add(attr)
            # submodules not imported yet become attributes of their package once something
            # imports them (numba.typed.typedlist after the first typed.List): ban them by name
            for info in pkgutil.iter_modules(getattr(mod, "__path__", None) or []):
                if not _module_allowed(f"{mod.__name__}.{info.name}", allowed_imports,
                                       allowed_submodules):
                    listed.add(info.name)
    return frozenset(names | (listed - exempt))


def _context_stores(tree, names: frozenset) -> tuple[set, list]:
    """PyTorch's autograd context: ``(ids of the allowed attribute stores, findings)``. In a
    function whose first parameter is one of ``names`` (``ctx``) and never rebound, storing an
    attribute of that parameter (``ctx.eps = eps``) is allowed, provided the function is only
    ever named as an argument of a ``register_autograd(...)`` call: then only PyTorch calls it,
    with a real context (called by the submission itself, ``setup_context(np.random, ...)``
    would patch a library)."""
    allowed, fns, findings = set(), set(), []
    if not names:
        return allowed, findings
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
            continue
        first = fn.args.args[0].arg
        if first not in names or any(isinstance(n, ast.Name) and n.id == first and
                                     isinstance(n.ctx, (ast.Store, ast.Del))
                                     for n in ast.walk(fn)):
            continue
        stores = [n for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                  and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                  and n.value.id == first]
        if stores:
            fns.add(fn.name)
            allowed.update(id(n) for n in stores)
    if not fns:
        return allowed, findings
    handed = set()
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                call.func.attr == "register_autograd":
            for a in list(call.args) + [k.value for k in call.keywords]:
                if isinstance(a, ast.Name):
                    handed.add(id(a))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in fns and isinstance(n.ctx, ast.Load) and \
                id(n) not in handed:
            findings.append(Finding(n.lineno, f"'{n.id}' sets attributes of its context "
                                              "argument, so it may only be handed to "
                                              "register_autograd (PyTorch calls it with a real "
                                              "autograd context)"))
    return allowed, findings


_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_DUNDER = re.compile(r"^__\w+__$")


def _coding_finding(source: str) -> Finding | None:
    """PEP 263: a ``# coding: X`` line (first two lines) makes Python decode the file as X —
    ``unicode_escape`` turns ``\\u000a`` inside a comment into a new line of code that these
    rules never saw."""
    for n, line in enumerate(source.splitlines()[:2], 1):
        m = _CODING.match(line)
        if m:
            try:
                ok = codecs.lookup(m.group(1)).name == "utf-8"
            except LookupError:
                ok = False
            if not ok:
                return Finding(n, f"the encoding declaration '{m.group(1)}' is not allowed: "
                                  "save the file as UTF-8 and remove the line")
    return None


def check_source(source: str, *, allowed_imports: frozenset[str],
                 banned_names: frozenset[str] = frozenset(),
                 allowed_submodules: frozenset[str] = frozenset(),
                 context_params: frozenset[str] = frozenset()) -> list[Finding]:
    """Return the rule violations in ``source`` (empty list: clean).

    ``allowed_imports``: top-level module names the lab permits. ``banned_names``: extra names
    for this lab (e.g. its own baseline ``gemm_naive``). ``allowed_submodules``: submodules of
    those a lab needs beyond :data:`ALLOWED_SUBMODULES` (full names, e.g. ``numba.cuda``; the
    last part of each is then no escape name). A course package in ``allowed_imports``
    (``kernellab`` for the NPU labs, whose kernels are written against ``kernellab.npu``) opens
    only the modules of it listed in ``allowed_submodules``: ``import kernellab.sim`` or ``from
    kernellab import sim`` stays a finding. A syntax error is returned as a finding, and so
    is source too deeply nested or too large for Python's parser.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Finding(exc.lineno or 0, f"syntax error: {exc.msg}")]
    except ValueError as exc:  # e.g. null bytes (older Pythons)
        return [Finding(0, f"syntax error: {exc}")]
    except (RecursionError, MemoryError):
        return [Finding(0, "the source is nested too deeply (or is too large) for Python's "
                           "parser: split long expressions into statements")]
    gemm = BANNED_GEMM | banned_names
    allowed_imports = frozenset(allowed_imports)
    allowed_submodules = frozenset(allowed_submodules)
    escape = ((BANNED_ESCAPE | escape_names(allowed_imports, allowed_submodules))
              - allowed_imports - {m.rsplit(".", 1)[-1] for m in allowed_submodules})
    out: list[Finding] = []
    # course packages a lab opens (``kernellab`` for the NPU labs) are opened only as far as
    # the lab lists their modules in ``allowed_submodules``: kernellab.npu, not kernellab.sim
    course_allowed = BANNED_COURSE & allowed_imports

    def course_module_rule(module: str, line: int) -> None:
        parts = module.split(".")
        if parts[0] not in course_allowed:
            return
        for i in range(2, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in allowed_submodules:
                out.append(Finding(line, f"module '{sub}' belongs to the course's own code and "
                                         "is not open to this lab (open: "
                                         f"{', '.join(sorted(allowed_submodules))})"))
                return

    def course_submodule_rule(module: str, name: str, line: int) -> None:
        # ``from kernellab import sim``: the imported name is itself a module of the course
        full = f"{module}.{name}"
        if full in allowed_submodules:
            return
        try:
            found = importlib.util.find_spec(full) is not None
        except Exception:  # noqa: BLE001 - a broken or missing package: not a module then
            found = False
        if found:
            out.append(Finding(line, f"module '{full}' belongs to the course's own code and is "
                                     "not open to this lab (open: "
                                     f"{', '.join(sorted(allowed_submodules))})"))

    coding = _coding_finding(source)
    if coding:
        out.append(coding)

    def name_rule(name: str, line: int, what: str) -> None:
        if what == "name" and name == "__name__":
            return  # ``if __name__ == "__main__":`` only reads the module's own name
        if name in gemm and what != "name":
            # a bare name can only come from an import (checked as an imported name) or be the
            # submission's own variable (``dot = 0.0`` is fine)
            if name in BANNED_GEMM:
                out.append(Finding(line, f"{what} '{name}' computes the product for you (or "
                                         "reaches a library/reference GEMM): write the loops "
                                         "yourself"))
            else:
                out.append(Finding(line, f"{what} '{name}' reaches what this lab asks you to "
                                         "write (a library's own operator, the course's "
                                         "reference or baseline): compute it yourself"))
        elif name in BANNED_BUILTINS:
            out.append(Finding(line, f"'{name}' is not allowed in a graded submission"))
        elif name in BANNED_NUMBA:
            out.append(Finding(line, f"numba's '{name}' is not allowed here: use @njit / prange"))
        elif name in BANNED_COURSE and name not in allowed_imports:
            out.append(Finding(line, f"'{name}' belongs to the course's own code; a submission "
                                     "may not use it"))
        elif name.startswith("__") or (what in ("attribute", "module", "imported name")
                                       and name.startswith("_")):
            out.append(Finding(line, f"dunder names and private attributes ('{name}') are not "
                                     "allowed in a graded submission"))
        elif what != "name" and (name in FRAME_ATTRS or name.startswith(FRAME_PREFIXES)):
            out.append(Finding(line, f"'{name}' inspects the interpreter's frames or code: not "
                                     "allowed in a graded submission"))
        elif what != "name" and name in escape:
            if name in _ESCAPE_FILES:
                why = "reads or writes files (np.load can even run code stored in one)"
            elif name in _ESCAPE_PROCESS:
                why = "starts other programs or reaches raw memory"
            elif name in _ESCAPE_TABLES:
                why = "changes how numpy reads dtype names, for the grader too"
            elif name in _ESCAPE_TIMING:
                why = "changes the thread count the grader sets for timing"
            else:
                why = (f"reaches a module outside this lab's "
                       f"({', '.join(sorted(allowed_imports))})")
            out.append(Finding(line, f"{what} '{name}' {why}: not allowed in a graded "
                                     "submission"))

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

    ctx_ok, ctx_findings = _context_stores(tree, frozenset(context_params))
    out.extend(ctx_findings)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if id(node) in ctx_ok:
                continue
            if root_name(node) in modules:
                out.append(Finding(line, f"assigning to '{ast.unparse(node)}' changes a "
                                         "library for everyone in the process: not allowed"))
            else:
                # through an alias (r = np.random; r.default_rng = ...) it patches a library
                # just the same, and a kernel has no business setting attributes
                out.append(Finding(line, f"assigning to (or deleting) the attribute "
                                         f"'{ast.unparse(node)}' is not allowed: a kernel writes "
                                         "into arrays (C[i, j] = ...), and through an alias an "
                                         "attribute assignment patches a library"))
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top not in allowed_imports:
                    out.append(Finding(line, f"import of '{alias.name}' is not allowed in this lab "
                                             f"(allowed: {', '.join(sorted(allowed_imports))})"))
                for i, part in enumerate(alias.name.split(".")):  # the top: allowlist above
                    name_rule(part, line, "module" if i else "name")
                course_module_rule(alias.name, line)
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__" and not node.level:
            pass  # compiler directives (``from __future__ import annotations``), not a module
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod.split(".")[0] not in allowed_imports:
                out.append(Finding(line, f"import from '{'.' * node.level}{mod}' is not allowed "
                                         f"in this lab (allowed: "
                                         f"{', '.join(sorted(allowed_imports))})"))
            for i, part in enumerate(mod.split(".")):
                if part:
                    name_rule(part, line, "module" if i else "name")
            if not node.level:
                course_module_rule(mod, line)
            for alias in node.names:
                if alias.name == "*":
                    out.append(Finding(line, f"'from {mod} import *' is not allowed: import the "
                                             "names you use, so that these rules can see them"))
                else:
                    name_rule(alias.name, line, "imported name")
                    if not node.level and mod.split(".")[0] in course_allowed:
                        course_submodule_rule(mod, alias.name, line)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(Finding(line, "the '@' operator computes the product for you: write the "
                                     "loops yourself"))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            out.append(Finding(line, "the '@=' operator computes the product for you"))
        elif isinstance(node, ast.Attribute):
            name_rule(node.attr, line, "attribute")
        elif isinstance(node, ast.MatchClass):
            # ``case object(matmul=f)`` looks up the attribute ``matmul`` of the subject
            for attr in node.kwd_attrs:
                name_rule(attr, line, "attribute")
        elif isinstance(node, ast.Name):
            name_rule(node.id, line, "name")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            v = node.value
            if v in gemm or v in BANNED_COURSE:
                out.append(Finding(line, f"the string '{v}' names a banned function"))
            elif v != "__main__" and (_DUNDER.match(v) or v in BANNED_BUILTINS
                                      or v in BANNED_NUMBA or v in FRAME_ATTRS):
                out.append(Finding(line, f"the string '{v}' names a banned escape hatch"))
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
