"""Cases that catch a result depending on something other than the call's own inputs: a cache
of packed weights, transformed filters or packed panels keyed on the shapes, a few entries or
a sum.

A *repeat* case calls the function again, right after an earlier case, with the same shapes and
the same inputs except ``CHANGED_ENTRIES`` entries of each named array, at positions drawn from
fresh entropy every time the cases are built (a submission cannot know which entries to sample
for its key), of distinct values where the array has that many. Each repeated case is followed
by ``REPEATS`` repeats, each changing its own positions of the earlier case's inputs: a key on
k fixed entries of an array of n escapes one repeat when a changed position falls on a key
entry (probability about k * CHANGED_ENTRIES / n, a few per cent for the labs' smaller
arrays), and escapes the grading only when it escapes every repeat (that probability to the
power ``REPEATS``), so a known-wrong cache fails every time, not 98 times in 100.

The changed entries' values are permuted among themselves (sorted by value and shifted by one
place, so each changes): the array keeps its multiset of values, so a key computed from any
symmetric function of it (its sum, its norm, its largest entry, a histogram), from the shapes
or from a few fixed entries goes stale, while a correct function sees different inputs. An
array whose chosen entries are all equal has them negated instead (the most negative integer
becomes the most positive one). A stale cache returns the output computed from the earlier
inputs, which :func:`stale_note` recognises (the outputs pass the case's check on the earlier
value of some of the inputs) and names.

The timed calls need no repeats: every timed call gets fresh random inputs
(:class:`grader.labs._timed.TimedCalls`), so a cache keyed on the shapes alone returns a wrong
output there and fails the after-call check, while one keyed on a few entries misses its key
and recomputes.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

import numpy as np

from grader.spec import Case, CaseData

CHANGED_ENTRIES = 8
REPEATS = 3
_KEY = "changed"


def repeat_cases(base: Case, arrays: tuple[str, ...], count: int = CHANGED_ENTRIES,
                 repeats: int = REPEATS) -> list[Case]:
    """``repeats`` cases that repeat ``base`` (same parameters and seed, so the same inputs),
    each with ``count`` entries of each input named in ``arrays`` changed at its own fresh
    random positions. Place them right after ``base`` in the case list."""
    out = []
    for i in range(1, repeats + 1):
        params = {**base.params, _KEY: {"base": base.name, "arrays": list(arrays),
                                        "count": count, "seed": secrets.randbits(63)}}
        name = (f"{base.name} again {i}/{repeats}, {count} entries of {' and '.join(arrays)}"
                " changed")
        out.append(Case(name, params, base.seed, hidden=base.hidden))
    return out


def repeated_from(case: Case) -> str | None:
    """The name of the case ``case`` repeats, or None when it is not a repeat case."""
    ch = case.params.get(_KEY)
    return ch["base"] if ch else None


def change_inputs(case: Case, data: CaseData) -> CaseData:
    """``data`` (built from ``case``'s seed) with the entries a repeat case changes changed, in
    place; unchanged for any other case."""
    ch = case.params.get(_KEY)
    if not ch:
        return data
    rng = np.random.default_rng(ch["seed"])
    for name in ch["arrays"]:
        shape = data.inputs[name].shape
        flat = np.array(data.inputs[name]).reshape(-1)  # a copy, changed and put back
        data.inputs[name] = flat.reshape(shape)
        nonzero = np.flatnonzero(flat)
        if len(nonzero) == 0:
            flat[rng.choice(len(flat), size=min(ch["count"], len(flat)), replace=False)] = 1
            continue
        # positions of distinct values where the array has enough (every one then changes)
        order = rng.permutation(nonzero)
        _, first = np.unique(flat[order], return_index=True)
        distinct = order[np.sort(first)]
        pos = (distinct[:ch["count"]] if len(distinct) >= min(ch["count"], len(nonzero))
               else order[:ch["count"]])
        v = flat[pos]
        if len(np.unique(v)) > 1:  # a permutation: the values sorted, shifted by one place
            order = np.argsort(v, kind="stable")
            flat[pos[order]] = v[np.roll(order, -1)]
        elif flat.dtype.kind in "iu":
            info = np.iinfo(flat.dtype)
            flat[pos] = np.where(v == info.min, info.max, -v.astype(np.int64)).astype(flat.dtype)
        else:
            flat[pos] = -v
    return data


def stale_note(spec, case: Case, data: CaseData, outputs: dict, cmp):
    """``cmp`` (the repeat case's comparison) with a note in front when it failed and
    ``outputs`` pass the check on the earlier case's value of some of the changed inputs (and
    this call's value of the others), naming those inputs; ``cmp`` unchanged otherwise (or
    for any other case)."""
    ch = case.params.get(_KEY)
    if not ch or cmp.ok:
        return cmp
    base = Case(ch["base"], {k: v for k, v in case.params.items() if k != _KEY}, case.seed,
                hidden=case.hidden)
    earlier = spec.case_data(base).inputs
    names = list(ch["arrays"])
    subsets = sorted((tuple(n for j, n in enumerate(names) if mask >> j & 1)
                      for mask in range(1, 1 << len(names))), key=len)
    for stale in subsets:
        mixed = replace(data, inputs={k: earlier[k] if k in stale else v
                                      for k, v in data.inputs.items()})
        try:
            ok = spec.check(base, mixed, outputs).ok
        except Exception:  # noqa: BLE001 - only a note; the case has failed already
            return cmp
        if ok:
            # first: the other hints guess at an arithmetic error
            cmp.message = (f"these outputs were computed from the earlier call's "
                           f"{' and '.join(stale)} (case {ch['base']}), which differ from "
                           f"this call's in {ch['count']} entries at random positions: the "
                           "result must depend on this call's inputs only (a cache keyed on "
                           f"shapes, a few entries or a sum goes stale); {cmp.message}")
            break
    return cmp
