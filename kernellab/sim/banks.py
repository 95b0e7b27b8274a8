"""Shared-memory bank arithmetic of the sim tier's counters: the phase of each lane's access,
the 4-byte words an element occupies and the wavefronts (passes through the 32 banks) of each
warp request (CUDA C++ Programming Guide, "Shared Memory", compute capability 5.x and later)."""

from __future__ import annotations

import numpy as np

from kernellab.sim.settings import BANK_BYTES, BANKS, WARP


def _uniq(x):
    """Sorted distinct values of int array ``x`` (np.unique without its hash path, which is
    slower here for int64 keys)."""
    if len(x) == 0:
        return x
    y = np.sort(x)
    return y[run_starts(y)]


def run_starts(y):
    """Boolean array: True where sorted ``y`` starts a run of equal values (index 0 included);
    ``np.r_[True, y[1:] != y[:-1]]`` without np.r_'s per-call cost (this is on the hot path)."""
    out = np.empty(len(y), np.bool_)
    if len(y):
        out[0] = True
        np.not_equal(y[1:], y[:-1], out=out[1:])
    return out


#: Bytes one shared-memory wavefront serves a warp's lanes (32 banks x 4 B): a request of
#: 8-byte elements is served in two phases of 16 lanes, of 16-byte elements in four of 8.
PHASE_BYTES = BANKS * BANK_BYTES
#: The most phases a request has (16-byte elements): the phase index's room in a key.
MAX_PHASES = 4


def _phase_of(lane, isz):
    """The phase (0..3) of each access of a warp request: lane // (128 // itemsize) -- lanes
    0-15 and 16-31 for 8-byte elements, quarter-warps for 16-byte ones, one phase for 4 bytes
    or less. Each phase is a request of its own to the banks: its wavefronts are counted apart
    and added (NVIDIA's answers on the NVIDIA Developer Forums on 64- and 128-bit shared
    accesses; the CUDA C++ Programming Guide, "Shared Memory" of compute capability 5.x and
    later, gives the 32 banks of 32 bits but no rule for wider accesses)."""
    return (lane & (WARP - 1)) * isz // PHASE_BYTES


def _bank_words(req, addr, isz):
    """``(req, word)``: the 4-byte shared-memory words (``addr // BANK_BYTES``; word w is in
    bank w mod 32) of each access, tagged with the access's request ``req``; an 8- or 16-byte
    element occupies 2 or 4 consecutive words, each listed (CUDA C++ Programming Guide,
    "Shared Memory", compute capability 5.x and later)."""
    word = addr // BANK_BYTES
    if (isz > BANK_BYTES).any():
        wide = isz > BANK_BYTES
        more = [wide & (isz > BANK_BYTES * k) for k in range(1, 4)]
        req = np.concatenate([req] + [req[m] for m in more])
        word = np.concatenate([word] + [word[m] + k for k, m in enumerate(more, 1)])
    return req, word


def _phase_wavefronts(preq, word, n):
    """``(wavefronts, ideal)`` of each of ``n`` requests, from its accesses' words tagged
    ``preq = request * MAX_PHASES + phase``: per phase, the most distinct words in one bank
    (a word many lanes read is one broadcast) and, without conflicts, ceil(distinct words /
    32); each summed over the request's phases."""
    uw = _uniq((preq << 34) | word)
    owner = uw >> 34
    bank = (uw & ((1 << 34) - 1)) % BANKS
    per_bank = np.bincount(owner * BANKS + bank, minlength=n * MAX_PHASES * BANKS)
    waves = per_bank.reshape(n, MAX_PHASES, BANKS).max(axis=2).sum(axis=1)
    ideal = (-(-np.bincount(owner, minlength=n * MAX_PHASES) // BANKS)).reshape(
        n, MAX_PHASES).sum(axis=1)
    return waves, ideal
