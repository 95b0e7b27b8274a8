"""Profiler-shaped tables of one launch: the CSV files an engineer reads first in the vendor's
operator profiler (``msprof op``), computed from the simulator's trace and records.

Three tables, each a list of dicts (:func:`op_basic_info`, :func:`pipe_utilization`,
:func:`memory`) and written by :func:`write_csv` as ``OpBasicInfo.csv``,
``PipeUtilization.csv`` and ``Memory.csv``. The column names follow msprof op's
(MindStudio operator tools: PipeUtilization ``atlasopdev_16_0099``, ArithmeticUtilization
``atlasopdev_16_0093``); a column means here:

OpBasicInfo (one row)
    ``Op Name`` the kernel; ``Op Type`` ``AI_VECTOR_CORE`` or ``AI_CORE`` (cube);
    ``MIX_AIC`` (a mix kernel); ``Task Duration(us)`` the modelled makespan
    (``RunResult.time_us``, launch overhead excluded); ``Block Dim`` the launch's blocks;
    ``Mix Block Dim`` the vector cores a mix kernel's blocks also ran on (blocks x
    ``aiv_per_aic``; 0 otherwise); ``Current Freq`` / ``Rated Freq`` the card's clock, MHz.

PipeUtilization (one row per block and core: a mix kernel's block has three)
    ``block_id``; ``sub_block_id`` the core it ran on (``aiv3``); ``ai?_time(us)`` /
    ``ai?_total_cycles`` the block's span on its core, first issue to last data visible;
    for each pipe of the core, ``..._time(us)`` the cycles its instructions occupied the pipe
    (waits at a flag not included) and ``..._ratio`` that over the block's total cycles:
    ``vec`` (V), ``scalar`` (S, the issue of every call), ``mte2``, ``mte3`` on a vector core;
    ``cube`` (M), ``scalar``, ``mte1``, ``mte2``, ``fixpipe`` (FIX) on a cube core.

Memory (one row per block and core)
    ``block_id``, ``sub_block_id``; for each data path the block used (``GM_to_UB``,
    ``UB_to_GM``, ``GM_to_L1``, ``L1_to_L0A``, ``L1_to_L0B``, ``L0C_to_GM``):
    ``<path>_datas(KB)`` its bytes / 1024 and ``<path>_bw(GB/s)`` those bytes over the block's
    time. HBM and L2 totals of the launch are ``RunResult.bytes``.

Not modelled, so not in the tables: UB bank conflicts (msprof's ResourceConflictRatio), the
instruction cache, per-dtype vector ratios.
"""

from __future__ import annotations

import csv
from pathlib import Path
__all__ = ["op_basic_info", "pipe_utilization", "memory", "write_csv"]

_COLUMNS = {
    "aiv": (("vec", "V"), ("scalar", "S"), ("mte2", "MTE2"), ("mte3", "MTE3")),
    "aic": (("cube", "M"), ("scalar", "S"), ("mte1", "MTE1"), ("mte2", "MTE2"),
            ("fixpipe", "FIX")),
}
_PATHS = ("GM->UB", "UB->GM", "GM->L1", "L1->L0A", "L1->L0B", "L0C->GM")


def op_basic_info(res) -> list[dict]:
    """One row: the launch (module docstring)."""
    mc = res.machine
    kind = {"aiv": "AI_VECTOR_CORE", "aic": "AI_CORE", "mix": "MIX_AIC"}[res.core_type]
    mix = res.block_dim * mc.aiv_per_aic if res.core_type == "mix" else 0
    return [{"Op Name": res.kernel, "Op Type": kind,
             "Task Duration(us)": round(res.time_us, 3), "Block Dim": res.block_dim,
             "Mix Block Dim": mix, "Current Freq": mc.freq_mhz, "Rated Freq": mc.freq_mhz}]


def _spans(res) -> dict[tuple[int, int], tuple[int, int]]:
    """(block, core) -> (first start, last visible)."""
    out: dict[tuple[int, int], list] = {}
    for e in res.trace.events:
        s = out.setdefault((e.block, e.core), [e.start, e.visible])
        s[0] = min(s[0], e.start)
        s[1] = max(s[1], e.visible, e.end)
    return {k: tuple(v) for k, v in out.items()}


def pipe_utilization(res) -> list[dict]:
    """One row per block and core: its time and each pipe's busy time and ratio (module
    docstring)."""
    us = 1.0 / res.machine.freq_mhz
    busy: dict[tuple[int, int, str], int] = {}
    for e in res.trace.events:
        if e.op != "wait_flag":
            k = (e.block, e.core, e.pipe)
            busy[k] = busy.get(k, 0) + e.end - e.start
    rows = []
    for (b, core), (lo, hi) in sorted(_spans(res).items()):
        total = hi - lo
        name_ = res.trace.core_name(core)
        kind = name_[:3]
        row = {"block_id": b, "sub_block_id": name_,
               f"{kind}_time(us)": round(total * us, 3), f"{kind}_total_cycles": total}
        for name, pipe in _COLUMNS[kind]:
            cyc = busy.get((b, core, pipe), 0)
            row[f"{kind}_{name}_time(us)"] = round(cyc * us, 3)
            row[f"{kind}_{name}_ratio"] = round(cyc / total, 4) if total else 0.0
        rows.append(row)
    return rows


def memory(res) -> list[dict]:
    """One row per block and core: bytes and bandwidth per data path (module docstring)."""
    from kernellab.npu.mix import MEMBERS

    spans = _spans(res)
    members = MEMBERS if res.core_type == "mix" else (None,)
    n = len(members)
    groups = max(1, len(res.per_core) // n)  # block b ran on group b % groups (core m of it)
    rows = []
    for b in range(res.block_dim):
        for m, member in enumerate(members):
            core = (b % groups) * n + m
            lo, hi = spans.get((b, core), (0, 0))
            secs = (hi - lo) / res.machine.freq_mhz / 1e6
            by_path: dict[str, int] = {}
            for r in res.records(b, member):
                if r.path is not None:
                    by_path[r.path] = by_path.get(r.path, 0) + r.nbytes
            row = {"block_id": b, "sub_block_id": res.trace.core_name(core)}
            for p in _PATHS:
                if p in by_path:
                    name = p.replace("->", "_to_")
                    row[f"{name}_datas(KB)"] = round(by_path[p] / 1024, 3)
                    row[f"{name}_bw(GB/s)"] = (round(by_path[p] / secs / 1e9, 3) if secs
                                               else 0.0)
            rows.append(row)
    return rows


def write_csv(res, folder) -> list[Path]:
    """Write ``OpBasicInfo.csv``, ``PipeUtilization.csv`` and ``Memory.csv`` of launch ``res``
    into ``folder`` (created); returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, rows in (("OpBasicInfo", op_basic_info(res)),
                       ("PipeUtilization", pipe_utilization(res)), ("Memory", memory(res))):
        cols = list(dict.fromkeys(k for r in rows for k in r))
        p = folder / f"{name}.csv"
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, restval="")
            w.writeheader()
            w.writerows(rows)
        out.append(p)
    return out

