"""The house rules every chapter notebook is tested against (tests/test_chapterN.py): committed
without outputs, and every number it shows computed when it runs — its code cells hard-code no
measured figure (no float literal with more than two significant digits, no number with a unit
of speed, time or share in a string) and its prose quotes none either."""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

#: a number followed by a unit of a measurement: speed, time, share, ulps, cycles, speedup
MEASURED = re.compile(r"(?<![\w.^/])\d+(?:\.\d+)?(?:e[-+]?\d+)?\s*"
                      r"(?:GB/s|TB/s|GFLOP/s|TFLOP/s|µs|us\b|ms\b|ns\b|%|ulps?\b|cycles\b|"
                      r"x (?:faster|speedup))")
#: a decibel figure with a decimal point (a measured SQNR), e.g. "37.1 dB"
DECIBELS = re.compile(r"(?<![\w.])\d+\.\d+\s*dB")


def cells(notebook: Path, kind: str) -> list[str]:
    """The sources of the notebook's cells of ``kind`` ("code" or "markdown"), in order."""
    nb = json.loads(Path(notebook).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def cells_with_outputs(notebook: Path) -> list[int]:
    """Indices of code cells committed with outputs or an execution count."""
    nb = json.loads(Path(notebook).read_text())
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and (c.get("outputs") != [] or c.get("execution_count") is not None)]


def literals(src: str):
    """(kind, text) of the number and string tokens of a code cell."""
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NUMBER:
            yield "number", tok.string
        elif tok.type == tokenize.STRING:
            yield "string", tok.string
        elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):   # Python 3.12+
            yield "string", tok.string


def significant_digits(text: str) -> int:
    mantissa = text.lower().replace("_", "").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if mantissa else 0


def hardcoded_figures(notebook: Path, patterns=(MEASURED,)) -> list[tuple[int, str]]:
    """(code cell index, literal) of every figure a code cell types in rather than computes."""
    bad = []
    for i, src in enumerate(cells(notebook, "code")):
        for kind, text in literals(src):
            if kind == "number":
                is_float = any(ch in text.lower() for ch in ".e") and \
                    not text.lower().startswith("0x")
                if is_float and significant_digits(text) > 2:
                    bad.append((i, text))
            else:
                plain = re.sub(r"\{[^{}]*\}", "", text)   # f-string fields are computed
                bad += [(i, m.group(0)) for rx in patterns for m in rx.finditer(plain)]
    return bad


def quoted_figures(notebook: Path, patterns=(MEASURED,)) -> list[tuple[int, str]]:
    """(markdown cell index, text) of every measured figure the prose quotes."""
    return [(i, m.group(0)) for i, src in enumerate(cells(notebook, "markdown"))
            for rx in patterns for m in rx.finditer(src)]


def control_characters(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, repr of the character) of every control character but the newline in a
    cell's source (tabs included: the notebooks indent with spaces): what a LaTeX ``\\b...``
    or ``\\t...`` written through a non-raw Python string leaves behind (a backspace, a
    tab), which no renderer shows."""
    nb = json.loads(Path(notebook).read_text())
    return [(i, repr(ch)) for i, c in enumerate(nb["cells"]) for ch in "".join(c["source"])
            if ord(ch) < 32 and ch != "\n"]
