"""The per-pipe trace of a run: spans, overlap queries, a matplotlib Gantt chart and
Chrome/Perfetto trace-event JSON (``pid`` = core, ``tid`` = pipe).

A trace is a list of :class:`Event` rows, one per instruction, one per scalar issue run
(``op == "issue"`` on pipe S) and one per wait that blocked its pipe (``op == "wait_flag"``).
Times are device cycles from the launch (the launch overhead is not in them).
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

from kernellab.npu.record import PIPES

__all__ = ["Event", "Trace"]


class Event(NamedTuple):
    """One trace row: ``core`` (physical core index), ``block``, ``pipe`` (name), ``op``,
    ``start``/``end`` (cycles; the pipe is busy in between), ``visible`` (cycle the data is
    visible: DMA end + latency), ``bytes``, ``hit_bytes`` (served by L2), ``flops``, ``src``
    (``file.py:42``)."""

    core: int
    block: int
    pipe: str
    op: str
    start: int
    end: int
    visible: int
    bytes: int
    hit_bytes: int
    flops: int
    src: str


class Trace:
    """The events of one run plus the names of its cores (``"aiv0"`` ...; a mix kernel's
    ``"aic0"``, ``"aiv0"``, ``"aiv1"``, ``"aic1"`` ..., both kinds in one timeline)."""

    def __init__(self, raw_events, core_type: str, freq_mhz: int, names=None):
        ev = [Event(c, b, PIPES[p], op, s, e, v, nb, h, f, src)
              for (c, b, p, op, s, e, v, nb, h, f, src) in raw_events]
        ev.sort(key=lambda e: (e.core, PIPES.index(e.pipe), e.start, e.end, e.block))
        self.events: list[Event] = ev
        self.core_type = core_type
        self.freq_mhz = freq_mhz
        self._names = list(names) if names is not None else None

    def __len__(self):
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def core_name(self, core: int) -> str:
        """The name of physical core ``core`` (an index into the trace's cores)."""
        if self._names is not None and 0 <= core < len(self._names):
            return self._names[core]
        return f"{self.core_type}{core}"

    def core_names(self) -> list[str]:
        """The names of the cores that have events, in core order."""
        return [self.core_name(c) for c in sorted({e.core for e in self.events})]

    def _core(self, core) -> int:
        if isinstance(core, str):
            if self._names is not None:
                if core not in self._names:
                    raise ValueError(f"no core {core!r} in this trace: {self._names}")
                return self._names.index(core)
            return int(core.lstrip("aicv"))
        return int(core)

    def spans(self, core=0, pipe: str = "V", waits: bool = False) -> list[tuple[int, int]]:
        """``(start, end)`` of the busy spans of one pipe of one core (``"aiv0"`` or 0);
        ``waits=True`` gives the blocked spans instead."""
        ci = self._core(core)
        return [(e.start, e.end) for e in self.events
                if e.core == ci and e.pipe == pipe and (e.op == "wait_flag") == waits]

    def busy(self, core=0, pipe: str = "V") -> int:
        """Busy cycles of one pipe of one core."""
        return sum(e - s for s, e in self.spans(core, pipe))

    def overlap(self, core=0, pipe_a: str = "MTE2", pipe_b: str = "V") -> int:
        """Cycles during which both pipes of one core are busy."""
        a = _union(self.spans(core, pipe_a))
        b = _union(self.spans(core, pipe_b))
        i = j = tot = 0
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if hi > lo:
                tot += hi - lo
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return tot

    def canonical(self) -> str:
        """A canonical text form: one ``|``-separated line per event, in trace order."""
        return "\n".join("|".join(str(x) for x in e) for e in self.events)

    def hash(self) -> str:
        """sha256 of :meth:`canonical` (hex): equal traces, equal hashes, on every platform."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def to_chrome(self, path=None) -> dict:
        """Chrome / Perfetto trace-event JSON: one complete event (``ph: "X"``) per span,
        ``pid`` = core, ``tid`` = pipe, ``ts``/``dur`` in microseconds at the card's clock (the
        cycles are in ``args``), plus process/thread name metadata (``ph: "M"``, ``ts: 0``, so
        every event carries name/ph/ts/pid/tid). Writes ``path`` if given; returns the dict.
        Open the file in https://ui.perfetto.dev ("Open trace file") or chrome://tracing
        ("Load")."""
        us = 1.0 / self.freq_mhz
        out = []
        cores = sorted({e.core for e in self.events})
        for c in cores:
            out.append({"name": "process_name", "ph": "M", "pid": c, "tid": 0, "ts": 0,
                        "args": {"name": self.core_name(c)}})
            for i, p in enumerate(PIPES):
                out.append({"name": "thread_name", "ph": "M", "pid": c, "tid": i, "ts": 0,
                            "args": {"name": p}})
                out.append({"name": "thread_sort_index", "ph": "M", "pid": c, "tid": i,
                            "ts": 0, "args": {"sort_index": i}})
        for e in self.events:
            out.append({
                "name": e.op, "cat": "wait" if e.op == "wait_flag" else e.pipe, "ph": "X",
                "pid": e.core, "tid": PIPES.index(e.pipe), "ts": round(e.start * us, 6),
                "dur": round((e.end - e.start) * us, 6),
                "args": {"block": e.block, "start_cycle": e.start, "end_cycle": e.end,
                         "visible_cycle": e.visible, "bytes": e.bytes,
                         "hit_bytes": e.hit_bytes, "flops": e.flops, "src": e.src},
            })
        doc = {"traceEvents": out, "displayTimeUnit": "ns",
               "otherData": {"clock_mhz": self.freq_mhz}}
        if path is not None:
            with open(path, "w") as f:
                json.dump(doc, f)
        return doc

    def gantt(self, core=0, pipes=PIPES, ax=None, t0=None, t1=None, waits=True):
        """Draw one core's pipes as a Gantt chart (matplotlib, imported here); blocked waits
        are drawn hatched. Returns the Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            ax = plt.subplots(figsize=(12, 0.5 * len(pipes) + 1))[1]
        colors = {"S": "0.6", "MTE2": "tab:blue", "MTE1": "tab:cyan", "M": "tab:red",
                  "V": "tab:green", "MTE3": "tab:orange", "FIX": "tab:purple"}
        for row, p in enumerate(pipes):
            spans = [(s, e - s) for s, e in self.spans(core, p) if e > s]
            ax.broken_barh(spans, (row - 0.35, 0.7), facecolor=colors.get(p, "tab:blue"),
                           edgecolor="white", linewidth=0.3)  # back-to-back bars stay apart
            if waits:
                ws = [(s, e - s) for s, e in self.spans(core, p, waits=True) if e > s]
                if ws:
                    ax.broken_barh(ws, (row - 0.2, 0.4), facecolor="none", edgecolor="0.5",
                                   hatch="///", linewidth=0.5)
        ax.set_yticks(range(len(pipes)), list(pipes))
        ax.invert_yaxis()
        ax.set_xlabel("cycles")
        name = core if isinstance(core, str) else self.core_name(core)
        ax.set_title(f"{name}: busy spans per pipe (hatched: waiting on a flag)")
        if t0 is not None or t1 is not None:
            ax.set_xlim(t0, t1)
        return ax


def _union(spans):
    out = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out
