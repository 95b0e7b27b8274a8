"""Accesses wider than an array's element on the sim tier (``ldmatrix``, ``cp.async``, 64- and
128-bit vector loads and stores: :mod:`kernellab.sim.sm80`): one log entry an access, in an
*alias* of the allocation whose elements have the access's width, so that the traffic counters
(:meth:`kernellab.sim.analysis._Launch._count`) form the warp's requests, sectors and bank
phases at that width (8 lanes a phase for 16-byte accesses, 16 for 8-byte ones: CUDA C++
Programming Guide, "Shared Memory", gives the 32 banks; the phases of wide accesses are NVIDIA's
answers on the NVIDIA Developer Forums, as in :mod:`kernellab.sim.banks`); the race,
uninitialised-read and DRAM bookkeeping see the allocation's own elements (:func:`expand`)."""

from __future__ import annotations

import numpy as np

from kernellab.sim.arrays import AID_SHIFT, ATOMIC_BIT, OFF_MASK, WRITE_BIT, _Root


def wide_root(launch, root, width, check_only=False):
    """The alias of allocation ``root`` (a :class:`_Root`) with ``width``-byte elements,
    created on first use in ``launch`` (its ``roots``; global aliases are kept across blocks and
    renumbered by ``begin_block``). ``check_only``: a separate alias whose entries the race and
    uninitialised-read checks see and the traffic counters skip (:func:`counted`)."""
    if root.wide is None:
        root.wide = {}
    got = root.wide.get((width, check_only))
    if got is None:
        ratio = width // root.itemsize
        got = _Root(f"{root.name} ({width}-byte)", root.space, root.arr, root.base,
                    len(launch.roots))
        got.check_only = check_only
        got.itemsize = width
        got.elems = root.elems // ratio
        got.alias = (root, ratio)
        launch.roots.append(got)
        root.wide[(width, check_only)] = got
        launch.has_wide = True
    return got


def for_count(roots, key, tid, blin, iv, site):
    """What the traffic counters see of a log: its entries but the check-only aliases', and
    those expanded (the ``xkey`` of :meth:`kernellab.sim.analysis._Launch._count`); None when
    nothing is left to count."""
    skip = [r.aid for r in roots if r.check_only]
    if skip:
        keep = np.flatnonzero(~np.isin(key >> AID_SHIFT, np.array(skip, np.int64)))
        if not len(keep):
            return None
        key, tid, blin, iv = key[keep], tid[keep], blin[keep], iv[keep]
        site = None if site is None else site[keep]
    return key, tid, blin, iv, site, expand(roots, key, [])[0]


def expand(roots, key, cols):
    """Each alias entry of log ``key`` (int64) as the allocation's elements it covers: ``(key,
    cols)`` with the other columns (arrays or None) repeated alike; unchanged when the log has
    no alias entry."""
    ratio = np.array([r.alias[1] if r.alias is not None else 0 for r in roots], np.int64)
    aid = key >> AID_SHIFT
    rep = ratio[aid]
    if not rep.any():
        return key, cols
    rep = np.maximum(rep, 1)
    base_aid = np.array([r.alias[0].aid if r.alias is not None else r.aid for r in roots],
                        np.int64)[aid]
    flags = key & (WRITE_BIT | ATOMIC_BIT)
    first = (key & OFF_MASK) * rep
    k2 = np.repeat((base_aid << AID_SHIFT) | flags | first, rep)
    starts = np.repeat(np.cumsum(rep) - rep, rep)
    k2 = k2 + (np.arange(len(k2)) - starts)
    return k2, [None if c is None else np.repeat(c, rep) for c in cols]


def global_roots(groots, roots):
    """A new block's roots: the arguments' (``groots``) and the global aliases among ``roots``,
    each alias renumbered to its new place (its id and key)."""
    out = list(groots) + [r for r in roots if r.alias is not None and r.space == "g"]
    for i, r in enumerate(out):
        if r.aid != i:
            r.aid = i
            r.key = i << AID_SHIFT
    return out
