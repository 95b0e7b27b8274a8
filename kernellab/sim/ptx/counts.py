"""Static PTX instruction counts by class (:func:`static_counts`).

Each instruction written in the code counts once (loops not unrolled, branches not taken into
account): they say what kind of memory operations the compiler emitted (shared vs global,
vectorised or not, barriers, shuffles), not how many execute; the dynamic counts come from the
simulator (:mod:`kernellab.sim`). Instruction names follow the PTX ISA (NVIDIA, *Parallel
Thread Execution ISA*, §9.7 "Instructions": ``ld``, ``st`` with their state spaces
``.global``/``.shared``/``.local``/``.param``/``.const`` and the generic space when none is
named, ``bar``/``barrier``, ``shfl.sync``, ``vote.sync``, ``atom``, ``red``, ``fma``...).
numba's code addresses array data through *generic* pointers; NVVM rewrites an access as
``ld.global``/``st.global`` where it can prove the pointer is global (NVVM of CUDA 13.5, sm_80:
the accesses to a kernel's own array arguments mostly are) and leaves a generic
``ld.f32``/``st.f32`` elsewhere (counted as ``ld.generic``/``st.generic``), so count both when
asking "how many global-memory instructions".
"""

from __future__ import annotations

import re

#: Keys of :func:`static_counts` (always all present, zero when absent).
COUNT_KEYS = (
    "instructions",
    "ld.global", "st.global", "ld.global.nc",
    "ld.shared", "st.shared",
    "ld.local", "st.local",
    "ld.param", "st.param", "ld.const",
    "ld.generic", "st.generic",
    "cp.async",
    "bar.sync", "bar.warp.sync",
    "shfl.sync", "vote.sync", "match.sync", "activemask",
    "atom", "red",
    "fma.f16", "fma.f32", "fma.f64",
    "mul.f32", "mul.f64", "add.f32", "add.f64", "sub.f32", "sub.f64",
)

_SPACES = ("global", "shared", "local", "param", "const")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_LABEL = re.compile(r"^[$%\w.]+:(?!:)\s*")
_PREDICATE = re.compile(r"^@!?%\w+\s+")


def _instructions(ptx: str):
    """Yield the opcode (``ld.global.nc.f32``...) of each instruction statement in ``ptx``."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub(" ", ptx))
    for chunk in text.split(";"):
        lines = []
        for line in chunk.splitlines():
            line = line.strip()
            while line[:1] in ("{", "}"):
                line = line[1:].lstrip()
            while True:  # labels ("$L__BB0_2:") before a statement
                m = _LABEL.match(line)
                if not m or line.startswith("."):
                    break
                line = line[m.end():]
            if line:
                lines.append(line)
        if not lines:
            continue
        stmt = " ".join(lines)
        if stmt.startswith("."):  # directive: .reg, .param, .entry header, .version...
            continue
        stmt = _PREDICATE.sub("", stmt)
        opcode = stmt.split(None, 1)[0]
        if opcode and (opcode[0].isalpha() or opcode[0] == "_"):
            yield opcode


def static_counts(ptx: str) -> dict:
    """Static counts of the instructions in PTX text, by class: ``dict[str, int]``, keys
    :data:`COUNT_KEYS`.

    *Static*: each instruction written in the code counts once, however often it runs (a load in
    a loop counts 1). Comments, directives (``.reg``, ``.param``, ``.entry``...) and labels are
    not instructions. Classes (PTX ISA, §9.7):

    * ``ld.<space>`` / ``st.<space>`` for the state spaces ``global``, ``shared``, ``local``,
      ``param`` (``ld`` only: ``const``); ``ld.generic`` / ``st.generic`` when the instruction
      names no space (numba's usual array access); ``ldu`` counts as ``ld``; ``ld.global.nc``
      (read-only data cache) is also counted on its own; vector forms (``.v2``/``.v4``) count 1;
    * ``cp.async`` (asynchronous global-to-shared copy);
    * ``bar.sync``: block barriers ``bar.sync``, ``bar.red`` (``syncthreads_count/and/or``),
      ``barrier.sync``, ``barrier.red``; ``bar.warp.sync`` (``syncwarp``) separately;
    * ``shfl.sync``, ``vote.sync`` (``ballot/all/any_sync``), ``match.sync``, ``activemask``;
    * ``atom``, ``red`` (all spaces and operations);
    * floating point: ``fma.f16|f32|f64`` (``fma.rn.f32``...), ``mul``, ``add``, ``sub`` for
      ``f32``/``f64`` (integer arithmetic is not counted);
    * ``instructions``: all instructions.
    """
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for opcode in _instructions(ptx):
        counts["instructions"] += 1
        parts = opcode.split(".")
        base, mods = parts[0], parts[1:]
        if base in ("ld", "ldu", "st"):
            space = "generic"
            for m in mods:
                m = m.split("::", 1)[0]
                if m in _SPACES:
                    space = m
                    break
            key = f"{'st' if base == 'st' else 'ld'}.{space}"
            if key in counts:
                counts[key] += 1
            if key == "ld.global" and "nc" in mods:
                counts["ld.global.nc"] += 1
        elif base in ("bar", "barrier"):
            if mods[:1] == ["warp"]:
                counts["bar.warp.sync"] += 1
            elif not mods or mods[0] in ("sync", "red") or mods[0].isdigit():
                counts["bar.sync"] += 1
        elif base == "cp" and mods[:1] == ["async"]:
            counts["cp.async"] += 1
        elif base in ("shfl", "vote", "match"):
            counts[f"{base}.sync"] += 1
        elif base == "activemask":
            counts["activemask"] += 1
        elif base in ("atom", "red"):
            counts[base] += 1
        elif base in ("fma", "mul", "add", "sub") and mods:
            ftype = mods[-1]
            key = f"{base}.{ftype}"
            if ftype in ("f16", "f32", "f64") and key in counts:
                counts[key] += 1
    return counts
