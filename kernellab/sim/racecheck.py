"""The race test within one barrier interval, vectorised: O(n log n) in the accesses.

Input: the accesses of the candidate (address, barrier interval) *groups*, in the order the
caller iterates pairs -- ``grp`` (dense group id, ascending, each group contiguous), ``tid``
(thread id in the block), ``wep`` (the thread's last ``__syncwarp`` event id; 0: none) and
``cls`` (``is_write | is_atomic << 1``: plain read 0, plain write 1, atomic 2 or 3) -- and
``wevents`` (event id -> lane mask). Two accesses of one group *race* when their threads
differ, at least one writes, not both are atomics, and they are not ordered; only a
``__syncwarp`` orders, and only within a warp: accesses with events ``e1 != e2`` are ordered
when event ``max(e1, e2)`` names both lanes (the later event is the barrier between them).
Shuffles and votes make no event: they exchange registers, and the CUDA C++ Programming
Guide ("Warp Shuffle Functions", "__syncwarp") gives memory ordering to ``__syncwarp`` only.

Per access ``b`` the test asks three questions, each answered for all accesses at once:
another warp's conflicting access in the group (the least and greatest warp of each class);
another lane's conflicting access at ``b``'s own event; another lane's conflicting access at
an earlier event whose lane, or ``b``'s, the mask of ``b``'s event lacks (a segmented prefix
OR of lane bitmasks over the events of one (group, warp), Hillis and Steele, "Data Parallel
Algorithms", CACM 29(12), 1986). Every racing pair is found at its member with the later
event. :func:`first_pair` adds the later-event question, so that each access knows whether
it races at all, and returns the caller's first racing pair.
"""

from __future__ import annotations

import numpy as np

from kernellab.sim.settings import WARP

LANES = (1 << WARP) - 1

#: per access class c (is_write | is_atomic << 1): bit c2 set when class c2 conflicts with c
#: (one of them writes and not both are atomics)
CONFLICTS = tuple(sum(1 << c2 for c2 in range(4) if (c1 | c2) & 1 and not c1 & c2 & 2)
                  for c1 in range(4))
_CONF = np.array([[(m >> c2) & 1 for c2 in range(4)] for m in CONFLICTS], np.bool_)


def _masks(wevents, eps):
    """Lane mask of each ``__syncwarp`` event id in ``eps`` (0 where there is none)."""
    u, inv = np.unique(eps, return_inverse=True)
    got = np.fromiter((wevents.get(e, 0) for e in u.tolist()), np.int64, len(u))
    return got[inv.ravel()]


def _scan_or(x, seg):
    """Exclusive prefix OR of the rows of ``x`` (R, 4) within runs of equal ``seg`` (sorted):
    a doubling scan, ceil(log2(longest run)) passes of O(R)."""
    inc = x.copy()
    d = 1
    while d < len(inc):
        same = seg[d:] == seg[:-d]
        if not same.any():
            break
        inc[d:] |= np.where(same[:, None], inc[:-d], 0)
        d *= 2
    out = np.zeros_like(inc)
    out[1:] = np.where((seg[1:] == seg[:-1])[:, None], inc[:-1], 0)
    return out


def _conflicting(x):
    """``x`` (R, 4) per class -> (R, 4): column c the OR of the columns that conflict with c."""
    out = np.zeros_like(x)
    for c, m in enumerate(CONFLICTS):
        for c2 in range(4):
            if (m >> c2) & 1:
                out[:, c] |= x[:, c2]
    return out


def racy_accesses(grp, tid, wep, cls, wevents, later=False):
    """Per access: True when it races with an access of its group at the same or an earlier
    event (or another warp's); with ``later``, with any access of its group."""
    n = len(grp)
    warp = tid // WARP
    bit = np.left_shift(1, tid % WARP).astype(np.int64)
    ngrp = int(grp[-1]) + 1 if n else 0
    # another warp's access of a conflicting class (blocks are barrier-ordered only)
    lo = np.full((ngrp, 4), np.iinfo(np.int64).max, np.int64)
    hi = np.full((ngrp, 4), -1, np.int64)
    np.minimum.at(lo, (grp, cls), warp)
    np.maximum.at(hi, (grp, cls), warp)
    w = warp[:, None]
    other = (hi[grp] >= 0) & ((lo[grp] != w) | (hi[grp] != w))
    flag = (other & _CONF[cls]).any(axis=1)
    # within a warp: rows (group, warp, event), in event order within (group, warp)
    order = np.lexsort((wep, warp, grp))
    g, wp, e = grp[order], warp[order], wep[order]
    newseg = np.r_[True, (g[1:] != g[:-1]) | (wp[1:] != wp[:-1])]
    newrow = newseg | np.r_[False, e[1:] != e[:-1]]
    row = np.cumsum(newrow) - 1
    seg = (np.cumsum(newseg) - 1)[newrow]
    c, b = cls[order], bit[order]
    lanes = np.zeros((len(seg), 4), np.int64)      # lane bitmask of each row and class
    np.bitwise_or.at(lanes, (row, c), b)
    mask = _masks(wevents, e[newrow])              # the lane mask of each row's event
    m = mask[row]
    keep = b | np.where(m & b != 0, m, 0)          # lanes an earlier access may be in
    hit = (_conflicting(lanes)[row, c] & ~b) | (_conflicting(_scan_or(lanes, seg))[row, c]
                                                & ~keep)
    if later:
        # a later row r2 orders an earlier access only when its mask names both lanes
        unsynced = lanes & ~mask[:, None]
        one = (lanes & (lanes - 1)) == 0
        others = np.where(lanes == 0, 0, np.where(one, ~lanes & LANES, LANES))
        rev = slice(None, None, -1)
        su = _scan_or(unsynced[rev], seg[rev])[rev]
        sv = _scan_or((others & ~mask[:, None])[rev], seg[rev])[rev]
        hit |= (_conflicting(su)[row, c] & ~b) | (_conflicting(sv)[row, c] & b)
    flag[order] |= hit != 0
    return flag


def first_pair(grp, tid, wep, cls, wevents):
    """``(p, q)``, ``p < q``: the first racing pair in position order (the least ``p`` that
    races with anything, then its least partner), or None when no pair races."""
    flags = racy_accesses(grp, tid, wep, cls, wevents, later=True)
    if not flags.any():
        return None
    p = int(np.flatnonzero(flags)[0])
    end = int(np.searchsorted(grp, grp[p], side="right"))
    q = np.arange(p + 1, end)
    t, e = tid[q], wep[q]
    same_warp = t // WARP == tid[p] // WARP
    mq = _masks(wevents, np.maximum(e, wep[p]))
    named = ((mq >> (t % WARP)) & 1 != 0) & ((mq >> (tid[p] % WARP)) & 1 != 0)
    ordered = same_warp & (e != wep[p]) & named
    race = (t != tid[p]) & _CONF[cls[p]][cls[q]] & ~ordered
    if not race.any():
        raise RuntimeError(f"race check: access {p} was flagged but has no racing partner")
    return p, int(q[np.flatnonzero(race)[0]])
