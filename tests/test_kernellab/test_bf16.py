"""kernellab.bf16: the device widen/narrow pair is bit for bit what ml_dtypes does on the host,
on every class of float32 (random bit patterns, ties to even at both parities, subnormals,
overflow to infinity, infinities, NaNs of both signs with payloads), run as a kernel on this
tier; the host helpers keep their contracts."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab  # noqa: F401  (the tier before numba.cuda)
from numba import cuda

from kernellab import bf16

SPECIAL = np.array([
    0x00000000, 0x80000000,              # zeros
    0x3F808000, 0x3F818000,              # ties: kept bit 0 (down), kept bit 1 (up)
    0x3F808001, 0x3F807FFF,              # just above / below a tie
    0x00000001, 0x00008000, 0x00018000,  # subnormals, ties among them
    0x7F7FFFFF, 0x7F7F8000, 0xFF7FFFFF,  # largest finite: rounds to +-inf
    0x7F800000, 0xFF800000,              # infinities
    0x7FC00000, 0x7F800001, 0xFF812345,  # NaNs, payloads, negative
], dtype=np.uint32)


@cuda.jit
def _roundtrip(x, out, back):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = bf16.narrow(x[i])
        back[i] = bf16.widen(out[i])


def test_device_pair_is_bit_exact_with_ml_dtypes():
    rng = np.random.default_rng(21)
    words = np.concatenate([rng.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32),
                            SPECIAL])
    x = words.view(np.float32)
    out = np.zeros(x.size, np.uint16)
    back = np.zeros(x.size, np.float32)
    _roundtrip[(x.size + 127) // 128, 128](x, out, back)
    with np.errstate(invalid="ignore"):
        want = x.astype(bf16.BF16).view(np.uint16)
    bad = np.flatnonzero(out != want)
    assert bad.size == 0, [(hex(words[i]), hex(out[i]), hex(want[i])) for i in bad[:5]]
    # widen is exact: the bits land in the top half of a binary32
    assert np.array_equal(back.view(np.uint32), want.astype(np.uint32) << 16)


def test_host_helpers():
    x = np.array([1.0, 1.00390625, 3.0e38, -2.5], np.float32)
    u = bf16.bits(x)
    assert u.dtype == np.uint16
    assert np.array_equal(bf16.from_bits(u).astype(np.float32), bf16.round_bf16(x))
    b = x.astype(bf16.BF16)
    assert np.shares_memory(bf16.bits(b), b)          # a view, not a copy
    with pytest.raises(TypeError, match="float array"):
        bf16.bits(np.arange(3))
    with pytest.raises(TypeError, match="uint16"):
        bf16.from_bits(np.zeros(3, np.int16))
