"""Queries on a sim-tier trace (``kernellab.sim.capture(trace=True)``: the first block's
accesses, one row per element access with its thread, warp, lane, address and warp-level
request; :data:`kernellab.sim.engine.TRACE_DTYPE`). Arrays in, arrays out; drawing them is
:mod:`kernellab.plots`.

* :func:`access_grid` — which thread (warp, lane, request; or how many accesses) touched each
  element of an array;
* :func:`trace_requests` — the warp-level requests on an array, in issue order;
* :func:`sector_mask` — the elements in the 32-byte sectors some accesses moved (CUDA C++
  Programming Guide, "Device Memory Accesses");
* :func:`bank_counts` — distinct 4-byte words per shared-memory bank in each warp request
  (each phase of one, for 8- and 16-byte elements): the bank conflicts (CUDA C++
  Programming Guide, "Compute Capabilities", "Shared Memory", compute capability 5.x and
  later: 32 banks of 4 bytes).
"""

from __future__ import annotations

import numpy as np

SECTORBYTES = 32
BANKS = 32
BANKBYTES = 4
BY = ("tid", "warp", "lane", "request", "count")


def select(trace, array=None, *, kind=None, space=None, warp=None, request=None, line=None,
            tid=None):
    """Boolean mask of the trace rows that match every filter given (None: any; ``tid`` may
    also be a sequence of thread ids)."""
    if trace is None:
        raise ValueError("no trace: capture the launch with kernellab.sim.capture(trace=True)")
    m = np.ones(len(trace), bool)
    for field, want in (("array", array), ("kind", kind), ("space", space), ("warp", warp),
                        ("request", request), ("line", line)):
        if want is not None:
            m &= trace[field] == want
    if tid is not None:
        m &= np.isin(trace["tid"], np.atleast_1d(tid))
    return m


def trace_requests(trace, array=None, *, kind="r", space=None, warp=None, line=None):
    """Ids of the warp-level requests on ``array`` (filters as in :func:`access_grid`), in the
    order their first access appears in the trace (for one thread: program order)."""
    rows = trace[select(trace, array, kind=kind, space=space, warp=warp, line=line)]
    ids, first = np.unique(rows["request"], return_index=True)
    return [int(r) for r in ids[np.argsort(first, kind="stable")]]


def access_grid(trace, array, shape, *, by="tid", kind="r", space=None, warp=None,
                request=None, line=None, tid=None):
    """The accesses to ``array`` (a trace's ``array`` name) as a 2-D float grid of ``shape``.

    The array is taken as row-major with that shape; element ``offset`` is cell
    ``divmod(offset, shape[1])``. Each cell holds the ``by`` field (``"tid"``, ``"warp"``,
    ``"lane"`` or ``"request"``) of the thread(s) that accessed it — ``-1`` where threads with
    different values did — or, for ``by="count"``, the number of accesses. Untouched cells are
    NaN. ``kind`` ("r", "w" or None for both), ``space`` ("g"/"s"), ``warp``, ``request``,
    ``line`` and ``tid`` (one id or several) keep only the matching accesses.
    """
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")
    rows, cols = int(shape[0]), int(shape[1])
    rec = trace[select(trace, array, kind=kind, space=space, warp=warp, request=request,
                        line=line, tid=tid)]
    grid = np.full(rows * cols, np.nan)
    off = rec["offset"].astype(np.int64)
    if len(off) and (off.min() < 0 or off.max() >= rows * cols):
        raise ValueError(f"{array}: offsets up to {int(off.max())} do not fit shape {shape}")
    if by == "count":
        counts = np.bincount(off, minlength=rows * cols).astype(float)
        grid[counts > 0] = counts[counts > 0]
    elif len(off):
        val = rec[by].astype(np.int64)
        lo = np.full(rows * cols, np.iinfo(np.int64).max)
        hi = np.full(rows * cols, np.iinfo(np.int64).min)
        np.minimum.at(lo, off, val)
        np.maximum.at(hi, off, val)
        hit = hi >= lo
        grid[hit] = np.where(lo[hit] == hi[hit], lo[hit], -1)
    return grid.reshape(rows, cols)



def sector_mask(trace, array, shape, selected, itemsize):
    """Cells of ``array`` that lie in a 32-byte sector one of the ``selected`` rows touched."""
    rows_all = trace[select(trace, array)]
    base = int(rows_all["addr"][0] - rows_all["offset"][0] * itemsize)
    touched = np.unique(selected["addr"] // SECTORBYTES)
    cells = base + np.arange(int(shape[0]) * int(shape[1]), dtype=np.int64) * itemsize
    return np.isin(cells // SECTORBYTES, touched).reshape(shape), len(touched)


def bank_counts(trace, *, array=None, kind=None, line=None, warp=None, itemsize=4):
    """Per-bank load of each shared-memory warp request in a sim trace, phase by phase.

    Returns ``(requests, warps, counts)``: one row per request *phase*, in issue order -- the
    request id and warp of each row, and an int array ``(n_rows, 32)`` of the *distinct* 4-byte
    words that phase touches in each bank. A request of elements of ``itemsize`` 4 bytes or
    less is one phase (one row); of 8-byte elements two (lanes 0-15, 16-31), of 16-byte
    elements four (quarter-warps): each phase goes to the banks on its own
    (:func:`kernellab.sim.banks._phase_of`), so rows of one request share its id. A row
    needs ``counts.max(axis=1)`` wavefronts (one pass through the banks per word that shares a
    bank with another; a word read by many lanes is a broadcast, counted once), and the sum of
    those is the launch's shared wavefronts counter for the same requests.
    """
    sel = trace[select(trace, array, kind=kind, space="s", line=line, warp=warp)]
    ids, first, inv = np.unique(sel["request"], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")          # issue order
    rank = np.empty(len(ids), np.int64)
    rank[order] = np.arange(len(ids))
    phase = (sel["lane"].astype(np.int64) % 32) * int(itemsize) // (BANKS * BANKBYTES)
    rows, rinv = np.unique(rank[inv] * 4 + phase, return_inverse=True)   # issue, then phase
    nwords = max(1, int(itemsize) // BANKBYTES)
    row = np.repeat(rinv.ravel(), nwords)
    word = (sel["addr"][:, None] // BANKBYTES + np.arange(nwords)[None, :]).ravel()
    pairs = np.unique(np.stack([row, word]), axis=1)  # distinct (row, word)
    counts = np.zeros((len(rows), BANKS), np.int64)
    np.add.at(counts, (pairs[0], pairs[1] % BANKS), 1)
    req_order = ids[order].astype(np.int64)
    warps = sel["warp"][first[order]].astype(np.int64)
    return req_order[rows // 4], warps[rows // 4], counts
