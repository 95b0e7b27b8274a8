"""What the GPU-compile check reports: its errors and the compiler's message, trimmed.

:class:`PTXToolError`: the check itself could not run. :func:`_compile_error`: the
:class:`~kernellab.sim.errors.GPUCompileError` of a kernel the compiler rejects, carrying
:func:`trim_compiler_message` of numba-cuda's message (its summary line, the offending call's
signature and the kernel source line) and the full one.
"""

from __future__ import annotations

import linecache
import os
import re

from kernellab.sim.errors import GPUCompileError

#: Longest compiler message kept in a :class:`GPUCompileError` (the full one is an attribute).
MAX_MESSAGE_CHARS = 2500


class PTXToolError(RuntimeError):
    """The GPU-compile check itself could not run (helper failed to start or died twice, the
    compiler libraries are missing, the kernel's globals cannot be pickled). Not a verdict on the
    kernel: callers may skip the check with this message."""


_RAISED_FROM = re.compile(r"^\s*raised from ")
_DURING_PASS = re.compile(r"^During: Pass \w+\s*$")
_CANDIDATES = re.compile(r"^\s*There are \d+ candidate implementations")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


#: a candidate's own error inside numba's candidate list ("TypingError: <message>")
_SPECIFIC = re.compile(r"^\s+TypingError: (.+)$")


def trim_compiler_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The useful part of a numba-cuda compiler message.

    numba's "No implementation of function ... found for signature" errors list every candidate
    overload and why each failed, nested several levels deep (its ``str()`` runs to many lines).
    Kept: the summary up to the candidate list (the function and the argument types it was called
    with), the first two distinct errors the candidates raised themselves (``because: ...``:
    e.g. :mod:`kernellab.cuda_ext`'s intrinsics say what they take), then whatever follows the
    list at the top level (``During:`` lines, the source snippet). ``raised from <numba file>``
    lines, ``During: Pass <compiler pass>`` lines and
    colour codes are dropped; the result is cut at ``limit`` characters.
    """
    lines = _ANSI.sub("", message).splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if _CANDIDATES.match(line):
            i += 1
            why = []        # the specific errors the candidates raised (an intrinsic's words)
            while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
                m = _SPECIFIC.match(lines[i])
                if m and m.group(1) not in why and len(why) < 2:
                    why.append(m.group(1))
                i += 1
            out.extend(f"because: {w}" for w in why)
            continue
        if not (_RAISED_FROM.match(line) or _DURING_PASS.match(line)):
            out.append(line.rstrip())
        i += 1
    text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", "\n".join(out)).strip()
    if len(text) > limit:
        text = text[:limit].rstrip() + "\n... (cut; the full message is the error's " \
            "compiler_message)"
    return text


def _source_location(loc) -> str:
    if not loc:
        return ""
    filename, line = loc
    src = linecache.getline(filename, line).rstrip()
    where = f'File "{filename}", line {line}'
    return f"{where}:\n    {src.strip()}" if src else where


def _compile_error(name, cc, sig_text, etype, message, loc) -> GPUCompileError:
    trimmed = trim_compiler_message(message)
    if loc and not (f", line {loc[1]}" in trimmed and os.path.basename(loc[0]) in trimmed):
        trimmed = f"{trimmed}\n\n{_source_location(loc)}"
    err = GPUCompileError(
        f"kernel {name!r} runs on the simulator but a GPU compiler rejects it "
        f"(numba-cuda compile_ptx, sm_{cc[0]}{cc[1]}, arguments {sig_text}):\n"
        f"{etype}: {trimmed}")
    err.kernel = name
    err.compiler_message = message
    err.error_type = etype
    err.location = loc
    return err
