"""Chapter 8's decode-attention ladder on one small case: every version within FlashAttention's
rule of the float64 reference, with a strided (non-contiguous) q, NaN in every unused cache
slot, GQA on two kv heads and empty splits; bad operands refused in words."""

import math

import numpy as np
import pytest

import kernellab
from kernellab.bf16 import BF16
from kernellab.kernels import decode_attention as da
from kernellab.numerics import compare, flash_attention_rule
from kernellab.kernels.decode_attention import paged_operands
from reference_kernels.decode_attention import decode_golden, plain_error

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim", reason="small sim-tier case")


@pytest.mark.parametrize("name", list(da.LADDER))
def test_every_version_is_within_the_rule_on_a_strided_q(name):
    q, k, v, bt, sl = paged_operands(np.random.default_rng(5), [17, 1], 4, 2, 32)
    wide = np.zeros((2, 4, 64), BF16)
    wide[:, :, ::2] = q
    qs = wide[:, :, ::2]                               # a strided view, same values
    assert not qs.flags.c_contiguous
    scale = 1.0 / math.sqrt(32)
    ref, _ = decode_golden(q, k, v, bt, sl, scale)
    out = np.full(q.shape, np.nan, BF16)
    da.LADDER[name](qs, k, v, bt, sl, scale, 3, out)   # 3 splits: sequence 1 has 2 empty
    rule = flash_attention_rule(plain_error(q, k, v, bt, sl, scale, ref), ref, BF16)
    cmp = compare(out, ref, rule, tile=None)
    assert cmp.ok and cmp.budget_used < 0.5, cmp.message


def test_bad_operands_are_refused():
    q, k, v, bt, sl = paged_operands(np.random.default_rng(5), [3], 4, 2, 32)
    out = np.zeros(q.shape, BF16)
    with pytest.raises(ValueError, match="bfloat16"):
        da.decode_v3(q.astype(np.float32), k, v, bt, sl, 0.1, 1, out)
    with pytest.raises(ValueError, match="multiple of 32"):
        da.decode_v3(q[..., :16], k[..., :16], v[..., :16], bt, sl, 0.1, 1, out[..., :16])
    with pytest.raises(ValueError, match="num_splits"):
        da.decode_v3(q, k, v, bt, sl, 0.1, 0, out)
