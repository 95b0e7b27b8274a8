"""Registers, local frame and spills of a compiled kernel: ptxas's own report, via nvJitLink.

PTX is virtual: register allocation and spilling happen when ``ptxas`` turns it into machine
code. nvJitLink (CUDA Toolkit, "nvJitLink" documentation: ``nvJitLinkCreate`` with options
``-arch=sm_XY`` and ``-verbose``, ``nvJitLinkAddData`` of ``NVJITLINK_INPUT_PTX``,
``nvJitLinkComplete``, ``nvJitLinkGetInfoLog``) runs ptxas without a GPU and hands back its
``-verbose`` log (the ``ptxas --verbose`` output of the CUDA Compiler Driver NVCC documentation,
"Printing Code Generation Statistics"), of this form (R, F, S, L, B stand for the figures)::

    ptxas info    : Compiling entry function '_Z...' for 'sm_80'
    ptxas info    : Function properties for _Z...
    ptxas         .     F bytes stack frame, S bytes spill stores, L bytes spill loads
    ptxas info    : Used R registers, used 1 barriers, ... bytes cmem[0]
    info    : Function properties for '_Z...':
    info    : used R registers, used 1 barriers, F stack, B bytes smem, ...

The link runs in the compile helper (op ``resources`` of :mod:`kernellab.sim.ptx.child`), so a
ptxas that crashes or hangs costs a helper, not the kernel's process. :func:`parse_ptxas_log`
reads the log; :func:`entry_names` names a PTX module's kernels.
"""

from __future__ import annotations

import re

#: Seconds ptxas may take on one kernel before the helper is killed and the kernel's resources
#: are reported as unknown: a bound for a hung ptxas, far above any kernel of the course.
PTXAS_TIMEOUT_S = 60.0

_ENTRY = re.compile(r"\.entry\s+([$\w.]+)\s*\(")
_SECTION = re.compile(r"(?:Compiling entry function|Function properties for)\s+'?([$\w.]+)'?")
_FRAME = re.compile(r"(\d+)\s+bytes stack frame,\s*(\d+)\s+bytes spill stores,\s*"
                    r"(\d+)\s+bytes spill loads")
_USED = re.compile(r"\bused\s+(\d+)\s+registers", re.I)
_SMEM = re.compile(r"(\d+)\s+bytes smem")
_STACK = re.compile(r"(\d+)\s+stack\b")
_SHARED_DECL = re.compile(r"^\s*(?:\.visible\s+|\.extern\s+)?\.shared\s+(?:\.align\s+\d+\s+)?"
                          r"\.(?:b|u|s|f)(\d+)\s+[$\w.]+\[(\d+)\]", re.M)


def entry_names(ptx: str) -> list[str]:
    """The kernels (``.entry`` functions) of a PTX module, in order."""
    return _ENTRY.findall(ptx or "")


def declared_shared_bytes(ptx: str) -> int:
    """Bytes of the sized ``.shared`` arrays a PTX module declares (numba declares each
    ``cuda.shared.array`` of a kernel as one; the dynamic one, ``extern``, has no size)."""
    return sum(int(bits) // 8 * int(n) for bits, n in _SHARED_DECL.findall(ptx or ""))


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """Per function named in a ptxas/nvJitLink ``-verbose`` log: ``{"registers",
    "stack_frame_bytes", "spill_store_bytes", "spill_load_bytes", "shared_bytes"}`` (ints;
    a figure the log does not give for that function is absent). ptxas's lines
    ("Function properties for", ". N bytes stack frame, S bytes spill stores, L bytes spill
    loads", "Used R registers") and nvJitLink's summary ("used R registers, ..., F stack,
    B bytes smem") are both read; where both give a figure they agree."""
    out: dict[str, dict] = {}
    cur = None
    for line in (log or "").splitlines():
        m = _SECTION.search(line)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        if cur is None:
            continue
        if (m := _FRAME.search(line)):
            cur["stack_frame_bytes"], cur["spill_store_bytes"], cur["spill_load_bytes"] = (
                int(g) for g in m.groups())
        if (m := _USED.search(line)):
            cur["registers"] = int(m.group(1))
            if (s := _SMEM.search(line)):
                cur["shared_bytes"] = int(s.group(1))
            if (s := _STACK.search(line)) and "stack_frame_bytes" not in cur:
                cur["stack_frame_bytes"] = int(s.group(1))
    return out


def pick_kernel(functions: dict[str, dict], entries: list[str], name: str) -> tuple:
    """``(mangled name, figures)`` of the kernel ``name`` (its Python ``__name__``) among the
    parsed functions, or ``(None, reason)``. One ``.entry`` in the PTX: that one; several: the
    one whose mangled name holds ``name`` as a component (``<len><name>``, as numba mangles
    it)."""
    cands = [e for e in entries if e in functions]
    if len(cands) > 1:
        tag = f"{len(name)}{name}"
        cands = [e for e in cands if tag in e] or cands
    if len(cands) != 1:
        found = ", ".join(entries) or "none"
        return None, (f"ptxas's report names {len(cands)} candidate kernels for {name!r} "
                      f"(PTX entries: {found})")
    figures = functions[cands[0]]
    if "registers" not in figures:
        return None, f"ptxas's report gives no register count for {name!r}"
    return cands[0], figures
