"""The dependency rule of the packages (kernellab's package docstring), checked from every
import statement in the tree, at module level or inside functions, and every
``importlib.import_module("...")`` / ``__import__("...")`` of a constant name:

* the runtime (``kernellab``'s top-level modules, ``kernellab.machine``, ``kernellab.sim``,
  ``kernellab.npu``) imports neither the chapter libraries (``kernellab.topics``), nor the
  kernel ladders (``kernellab.kernels``), nor ``grader`` — except ``kernellab.cli``, the command
  line, whose commands run the grader and the course tooling (inside the commands: none at its
  module level);
* ``kernellab.topics`` and ``kernellab.kernels`` never import ``grader``;
* ``reference_kernels`` imports numpy only (golden references any reader can check).
"""

from __future__ import annotations

import ast
from pathlib import Path

import kernellab

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = ("kernellab.machine", "kernellab.sim", "kernellab.npu")
LIBRARIES = ("kernellab.topics", "kernellab.kernels")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, imported module) of every import in ``path``; ``from X import y`` gives X.y as
    well as X (y may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = module_name(path, root)
    if path.name != "__init__.py":
        pkg = pkg.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and _callee(node.func) in ("import_module", "__import__")):
            out.append((node.lineno, node.args[0].value))  # importlib.import_module("x.y")
    return out


def _callee(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def is_runtime(mod: str) -> bool:
    top = mod.count(".") == 1 and mod.startswith("kernellab.")
    return mod == "kernellab" or top or within(mod, RUNTIME_PACKAGES)


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def test_the_package_docstring_states_the_rule():
    doc = " ".join((kernellab.__doc__ or "").split())
    assert "never imports" in doc and "kernellab.topics" in doc and "grader" in doc


def test_the_runtime_imports_no_library_and_no_grader():
    bad = []
    for path in sources("kernellab"):
        mod = module_name(path)
        if not is_runtime(mod) or mod == "kernellab.cli":
            continue
        for line, name in imports(path):
            if within(name, LIBRARIES + ("grader", "reference_kernels")):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_command_line_reaches_the_grader_only_inside_its_commands():
    tree = ast.parse((ROOT / "kernellab" / "cli.py").read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top
                                                      if isinstance(n, ast.ImportFrom)]
    bad = [n for n in names if within(n, LIBRARIES + ("grader", "reference_kernels"))]
    assert not bad, bad


def test_libraries_never_import_the_grader():
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}"
           for p in sources("kernellab/topics", "kernellab/kernels")
           for line, name in imports(p) if within(name, ("grader",))]
    assert not bad, "\n".join(bad)


def test_reference_kernels_import_numpy_only():
    allowed = ("numpy", "__future__", "math", "reference_kernels")
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}"
           for p in sources("reference_kernels")
           for line, name in imports(p) if not within(name, allowed)]
    assert not bad, "\n".join(bad)


def test_the_checker_finds_imports_inside_functions_and_relative_ones(tmp_path):
    probe = tmp_path / "kernellab" / "sim" / "x.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("import importlib\n"
                     "def f():\n    from kernellab.topics import quant\n"
                     "    from ..kernels import gemm_cpu\n"
                     "    importlib.import_module('grader.runner')\n"
                     "    __import__('kernellab.topics.winograd')\n")
    names = [n for _, n in imports(probe, tmp_path)]
    for want in ("kernellab.topics.quant", "kernellab.kernels.gemm_cpu", "grader.runner",
                 "kernellab.topics.winograd"):
        assert want in names, (want, names)


def test_the_top_level_holds_at_most_twelve_modules():
    mods = sorted(p.name for p in (ROOT / "kernellab").glob("*.py"))
    assert len(mods) <= 12, mods
