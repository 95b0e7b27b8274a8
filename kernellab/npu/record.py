"""Instruction records: what Phase A (functional execution) hands to Phase B (timing replay).

Every API call that does work appends one :class:`Record` to its block's stream, in program
order. A record says which pipe runs it, what it costs *in machine-independent terms* (bytes,
repeats, fractal counts: the machine card turns them into cycles in :mod:`kernellab.npu.timing`,
so a run can be re-timed on a what-if card without re-running the NumPy work), which flag it sets
or waits for, and the user's source line.

Pipes (CCE intrinsic guide, "pipe types" (流水类型介绍), hiascend cceapi_0104): ``S`` scalar,
``MTE2`` GM->{UB, L1}, ``MTE1`` L1->L0A/L0B, ``M`` cube, ``V`` vector, ``MTE3`` UB->GM,
``FIX`` L0C->GM. Their order in :data:`PIPES` is the timing engine's tie-break order.
"""

from __future__ import annotations

import linecache
import os
import sys

__all__ = ["PIPES", "PIPE_BY_NAME", "S", "MTE2", "MTE1", "M", "V", "MTE3", "FIX", "OP", "SET",
           "WAIT",
           "Record", "caller_src", "format_src"]

PIPES = ("S", "MTE2", "MTE1", "M", "V", "MTE3", "FIX")
S, MTE2, MTE1, M, V, MTE3, FIX = range(7)

PIPE_BY_NAME = {"PIPE_" + name: i for i, name in enumerate(PIPES)}
"""Ascend C's pipe names (``asc.PIPE_V`` ...) -> index into :data:`PIPES`."""

OP, SET, WAIT = 0, 1, 2
"""Record kinds: an instruction that occupies its pipe, a ``set_flag``, a ``wait_flag``."""

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_INTERNAL = frozenset(os.path.join(_PKG_DIR, m + ".py") for m in (
    "asc", "dma", "cube", "vector", "repeat", "runtime", "sync", "mix", "tensors", "memory",
    "launch",
    "record", "timing", "result", "trace",
    "machine", "errors", "__init__"))
"""Simulator modules skipped when looking for the user's line (kernels in ``examples.py``
count as user code)."""


class Record:
    """One recorded instruction.

    Attributes:
        pipe: index into :data:`PIPES`.
        kind: :data:`OP`, :data:`SET` or :data:`WAIT`.
        op: API name (``"data_copy"``, ``"add"``, ``"set_flag"`` ...).
        issue: scalar-issue index: the record cannot start before ``issue x
            scalar_issue_cycles`` cycles after its block started.
        cost: machine-independent cost inputs, by family:
            ``("vec", cls, repeats)`` with cls in unary/binary/transcendental/div/reduce;
            ``("dma", is_write, segments, is_fix, bursts)`` with segments a tuple of (GM byte
            address, bytes) and bursts the DMA bursts (1 for a 1-D copy; one per 16-row
            fractal band for nd2nz copies and fixpipe); ``("load", "L0A"|"L0B", bytes)``;
            ``("mmad", m, n, k, "f16"|"i8")``; ``None`` for flags.
        key: flag key ``(event, queue_id, slot)`` for SET/WAIT, e.g. ``("MTE2_V", 0, 1)``;
            ``("BARRIER", n, setter, waiter)`` for the pairs ``pipe_barrier`` lowers to.
        nbytes: bytes moved (DMA / load_data), 0 otherwise.
        flops: arithmetic operations (2mnk for mmad, count for vector ops).
        path: data path for the byte statistics (``"GM->UB"`` ...), or ``None``.
        src: the user's source line, ``"file.py:42"``.
    """

    __slots__ = ("pipe", "kind", "op", "issue", "cost", "key", "nbytes", "flops", "path", "src")

    def __init__(self, pipe, kind, op, issue, cost=None, key=None, nbytes=0, flops=0,
                 path=None, src=""):
        self.pipe = pipe
        self.kind = kind
        self.op = op
        self.issue = issue
        self.cost = cost
        self.key = key
        self.nbytes = nbytes
        self.flops = flops
        self.path = path
        self.src = src

    def __repr__(self):
        kind = ("op", "set", "wait")[self.kind]
        return (f"Record({PIPES[self.pipe]} {kind} {self.op} issue={self.issue} "
                f"cost={self.cost} key={self.key} src={self.src})")


def caller_src():
    """``(filename, lineno)`` of the innermost frame outside this package: the user's line."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename in _INTERNAL:
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def format_src(src, code: bool = True) -> str:
    """``"file.py:42"`` (``code=False``) or ``"file.py:42: <the source line>"``."""
    if not src or src[0] == "<unknown>":
        return "<unknown line>"
    fn, ln = src
    text = f"{os.path.basename(fn)}:{ln}"
    if code:
        line = linecache.getline(fn, ln).strip()
        if line:
            text += f": {line}"
    return text
