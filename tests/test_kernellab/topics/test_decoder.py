"""Chapter 8's capstone (kernellab.topics.decoder): the layer from the course's kernels passes
its end-to-end check against the float64 forward pass, and the check catches a real bug (the
kernels' RoPE in the other pair layout) and corrupted outputs; the plain BF16 pass sits between
the two (its error is the measured part of the rule). A tiny configuration: the simulator
interprets every thread; the chapter runs the default one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kernellab
from kernellab.topics import decoder as dec

TINY = dec.Config(D=32, Hq=2, Hkv=1, d=32, F=32, V=32, T=5, block_size=4)


@pytest.fixture(scope="module")
def layer():
    W = dec.make_weights(TINY, seed=3)
    x, res = dec.make_inputs(TINY, seed=4)
    return W, x, res


@pytest.fixture(scope="module")
def run(layer):
    W, x, res = layer
    if kernellab.TIER == "sim":
        return dec.run_with_table(TINY, W, x, res)
    return dec.kernel_forward(TINY, W, x, res), None


def test_the_layer_passes_its_end_to_end_check(layer, run):
    got, _ = run
    assert got["h"].dtype == dec.BF16 and got["logits"].dtype == np.float32
    c = dec.check(TINY, *layer, got)
    assert c.ok, c.describe()
    assert c.top1_checked >= 1
    assert c.plain_h > 0 and c.plain_logits > 0      # BF16 storage does cost accuracy


def test_the_check_catches_corrupted_outputs(layer, run):
    got, _ = run
    swapped = dict(got, h=got["h"][[1, 0, *range(2, TINY.T + 1)]])
    assert not dec.check(TINY, *layer, swapped).ok
    flipped = dict(got, logits=-got["logits"])
    c = dec.check(TINY, *layer, flipped)
    assert not c.ok and c.top1_agree < c.top1_checked


def test_the_check_catches_the_other_rope_layout(layer):
    W, x, res = layer
    wrong = dec.kernel_forward(dataclasses.replace(TINY, layout="gptj"), W, x, res)
    c = dec.check(TINY, W, x, res, wrong)
    assert not c.ok and c.err_h > c.bound_h, c.describe()


@pytest.mark.skipif(kernellab.TIER != "sim", reason="the modelled table needs the sim tier")
def test_the_decode_step_table_covers_every_operator(run):
    _, rows = run
    assert [r[0] for r in rows] == [*dec.OPERATORS, "total"]
    assert all(r[1] >= 1 and r[2] > r[3] > 0 for r in rows)
    assert rows[-1][2] == pytest.approx(sum(r[2] for r in rows[:-1]))
    assert sum(r[4] for r in rows[:-1]) == pytest.approx(1.0)
