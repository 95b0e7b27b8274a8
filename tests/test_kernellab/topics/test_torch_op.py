"""kernellab.topics.torch_op: the operator ``kernellab::swiglu`` and its backward.

* forward against the float64 golden within the derived bound (``forward_rtol``), every dtype,
  contiguous or not; the bound rejects the unfused BF16 composition (one rounding more);
* layouts (transposed, strided, broadcast, empty, 3-D) give the bits of the contiguous copy;
  BF16 is the float32 result rounded once by torch; the output is new contiguous memory;
* errors of the contract, raised alike by the real and the fake kernels; fake/meta shapes;
* ``opcheck`` passes for both ops and dtypes; ``gradcheck`` in float64;
* the backward against the analytic gradient within ``backward_bounds``; autograd gives the
  backward op's bits; the bound rejects a gradient with the derivative's second term missing;
* ``setup_context`` saves exactly gate and up; ``shares_memory`` by address ranges;
* the model helper: same seed, same weights; the two FFNs agree; training lowers the loss.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kernellab  # noqa: E402,F401  (thread settings, device tier)
from kernellab.topics import torch_op as T  # noqa: E402

DTYPES = T.DTYPES
IDS = [str(d).removeprefix("torch.") for d in DTYPES]


def halves(dtype, rows=32, F=40, seed=0, scale=2.0):
    """gate, up: the two non-contiguous halves of one (rows, 2F) tensor, as in a model."""
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(rows, 2 * F, generator=gen)).to(dtype).chunk(2, dim=-1)


def within(got, ref, bound) -> float:
    """Largest |got - ref| / bound (the budget used)."""
    return ((got.double() - ref).abs() / bound).max().item()


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_forward_matches_the_golden_within_the_derived_bound(dtype):
    gate, up = halves(dtype)
    assert not gate.is_contiguous()
    ref = T.golden(gate, up)
    atol = torch.finfo(dtype).smallest_normal
    for g, u in ((gate, up), (gate.contiguous(), up.contiguous())):
        out = T.swiglu(g, u)
        assert out.dtype == dtype and out.shape == gate.shape
        torch.testing.assert_close(out.double(), ref, rtol=T.forward_rtol(dtype), atol=atol)
    assert ref.abs().max() > 1 and torch.count_nonzero(out) == out.numel()


def test_forward_bound_rejects_the_unfused_bf16_composition():
    gate, up = halves(torch.bfloat16, rows=64, F=48)
    ref = T.golden(gate, up)
    bound = torch.finfo(torch.bfloat16).smallest_normal \
        + T.forward_rtol(torch.bfloat16) * ref.abs()
    assert within(T.swiglu(gate, up), ref, bound) <= 1
    assert within(torch.nn.functional.silu(gate) * up, ref, bound) > 1   # rounds silu first


def test_forward_rtol_is_a_few_units_of_roundoff():
    u32, u64, u16 = 2.0 ** -24, 2.0 ** -53, 2.0 ** -8
    assert T.forward_rtol(torch.float32) == pytest.approx(5 * (u32 + u64))
    assert T.forward_rtol(torch.float64) == pytest.approx(10 * u64)
    assert T.forward_rtol(torch.bfloat16) == pytest.approx(5 * (u32 + u64) + u16)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_layouts_give_the_bits_of_the_contiguous_copy(dtype):
    gate, up = halves(dtype, rows=12, F=12)
    cases = [(gate, up), (gate.T, up.T), (gate[::2, 1::3], up[1::2, ::3]),
             (gate[:1].expand(5, 12), up[:5]),                     # a stride-0 axis
             (gate.reshape(3, 4, 12), up.reshape(3, 4, 12)), (gate[:0], up[:0])]
    for g, u in cases:
        out = T.swiglu(g, u)
        assert out.is_contiguous() and out.shape == g.shape
        assert torch.equal(out, T.swiglu(g.contiguous(), u.contiguous()))
        assert not T.shares_memory(out, g, u)


def test_bf16_is_the_float32_result_rounded_once_by_torch():
    gate, up = halves(torch.bfloat16)
    want = T.swiglu(gate.float(), up.float()).to(torch.bfloat16)
    assert torch.equal(T.swiglu(gate, up).view(torch.int16), want.view(torch.int16))
    dy = torch.randn(gate.shape).to(torch.bfloat16)
    got = T.swiglu_backward(dy, gate, up)
    want = T.swiglu_backward(dy.float(), gate.float(), up.float())
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.int16), b.to(torch.bfloat16).view(torch.int16))


def test_the_float32_kernels_compute_in_float32():
    from numba import njit

    a = np.linspace(-3, 3, 8, dtype=np.float32)
    for kernel, n in ((T.swiglu_forward_kernel, 3), (T.swiglu_backward_kernel, 5)):
        fresh = njit(kernel.py_func)               # uncached: a cached kernel shows no IR
        fresh(*(a.copy() for _ in range(n)))
        ir = fresh.inspect_llvm(fresh.signatures[0])
        assert "fdiv float" in ir and "double" not in ir


BAD = [
    ((torch.ones(3, dtype=torch.float16), torch.ones(3, dtype=torch.float16)), TypeError),
    ((torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32)), TypeError),
    ((torch.ones(3), torch.ones(3, dtype=torch.float64)), TypeError),
    ((torch.ones(3), torch.ones(4)), ValueError),
    ((torch.ones(2, 3), torch.ones(3, 2)), ValueError),
    ((torch.tensor(1.0), torch.tensor(2.0)), ValueError),
]


@pytest.mark.parametrize("args,error", BAD, ids=["float16", "int32", "two dtypes", "sizes",
                                                 "shapes", "0-d"])
def test_bad_inputs_raise_the_contracts_errors_in_real_and_fake_kernels(args, error):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(error):
        T.swiglu(*args)
    with pytest.raises(error):
        T.swiglu_backward(args[0], *args)
    with pytest.raises(error):
        T.swiglu(*(a.to("meta") for a in args))
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(a) for a in args]
    with mode, pytest.raises(error):
        T.swiglu(*fakes)


def test_fake_and_meta_kernels_give_the_real_outputs_metadata():
    from torch._subclasses.fake_tensor import FakeTensorMode

    gate, up = (t.T for t in halves(torch.float32, rows=6, F=10))
    real = T.swiglu(gate, up)
    mode = FakeTensorMode()
    fake_gate, fake_up = mode.from_tensor(gate), mode.from_tensor(up)
    with mode:
        fake = T.swiglu(fake_gate, fake_up)
        fg, fu = T.swiglu_backward(fake_gate, fake_gate, fake_up)
    for t in (fake, fg, fu):
        assert (t.shape, t.stride(), t.dtype) == (real.shape, real.stride(), real.dtype)
    meta = T.swiglu(*(torch.empty(4, 1 << 20, device="meta", dtype=torch.bfloat16),) * 2)
    assert meta.device.type == "meta" and meta.shape == (4, 1 << 20)
    assert meta.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_opcheck_passes_for_both_ops(dtype):
    gate, up = halves(dtype, rows=4, F=6)
    for report in (
            torch.library.opcheck(T.swiglu, (gate.requires_grad_(), up.requires_grad_())),
            torch.library.opcheck(T.swiglu_backward,
                                  (torch.randn(4, 6).to(dtype), gate.detach(), up.detach()))):
        assert set(report.values()) == {"SUCCESS"}, report


def test_gradcheck_in_float64():
    gate, up = (t.requires_grad_() for t in halves(torch.float64, rows=5, F=7))
    assert torch.autograd.gradcheck(T.swiglu, (gate, up))


# the root of silu' (silu's minimum): 1 + g (1 - sigmoid(g)) = 0 at g = -1.2784645...
ROOT = -1.2784645


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_backward_matches_the_analytic_gradient_within_its_bound(dtype):
    gate, up = halves(dtype, rows=32, F=40)
    gate = gate.contiguous()
    gate[0] = torch.linspace(ROOT - 0.01, ROOT + 0.01, 40).to(dtype)   # where d_gate cancels
    gate[1] = torch.linspace(-30, 30, 40).to(dtype)
    gate[2, :6] = torch.tensor([-1e4, -800.0, -100.0, 100.0, 800.0, 1e4]).to(dtype)  # exp: inf
    dy = torch.randn(gate.shape).to(dtype)
    got = T.swiglu_backward(dy, gate, up)
    ref = T.golden_grad(dy, gate, up)
    bounds = T.backward_bounds(dy, gate, up, dtype)
    for g, r, b in zip(got, ref, bounds):
        assert g.dtype == dtype and torch.isfinite(g).all() and within(g, r, b) <= 1
        assert r.abs().max() > 1
    # the bound rejects d_gate without the derivative's second term, g (1 - s)
    s = torch.sigmoid(gate.double())
    wrong = dy.double() * up.double() * s
    assert within(wrong, ref[0], bounds[0]) > 1


def test_autograd_runs_the_backward_op():
    gate, up = (t.requires_grad_() for t in halves(torch.float32))
    dy = torch.randn(gate.shape)
    T.swiglu(gate, up).backward(dy)
    d_gate, d_up = T.swiglu_backward(dy, gate.detach(), up.detach())
    assert torch.equal(gate.grad, d_gate) and torch.equal(up.grad, d_up)


def test_setup_context_saves_gate_and_up_only():
    gate, up = (t.requires_grad_() for t in halves(torch.float32))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        T.swiglu(gate, up)
    assert [t.data_ptr() for t in saved] == [gate.data_ptr(), up.data_ptr()]


def test_shares_memory_compares_address_ranges():
    buf = torch.zeros(4, 8)
    assert T.shares_memory(buf[:, :4], buf) and T.shares_memory(buf[1:3], buf[2])
    assert T.shares_memory(buf[:, :4], buf[:, 4:])           # interleaved rows: conservative
    assert not T.shares_memory(buf[:2], buf[2:]) and not T.shares_memory(buf[:0], buf)
    assert not T.shares_memory(torch.zeros(3), buf)
    alias = torch.from_numpy(buf.numpy()[1:])                # a new storage over the same bytes
    assert alias.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
    assert T.shares_memory(alias, buf)


def test_model_same_seed_same_weights_and_the_two_ffns_agree():
    a = T.SwiGLUMLP(6, 10, 3, use_op=True, seed=5)
    b = T.SwiGLUMLP(6, 10, 3, use_op=False, seed=5)
    c = T.SwiGLUMLP(6, 10, 3, use_op=True, seed=5, dtype=torch.float64)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb) and pc.dtype == torch.float64
        assert torch.equal(pa.double(), pc)
    assert not torch.equal(a.gate_up.weight, T.SwiGLUMLP(6, 10, 3, seed=6).gate_up.weight)
    x = torch.randn(16, 6)
    with torch.no_grad():                                   # each calls its own FFN, exactly
        gate, up = a.gate_up(x).chunk(2, dim=-1)
        assert torch.equal(a(x), a.down(T.swiglu(gate, up)))
        assert torch.equal(b(x), b.down(torch.nn.functional.silu(gate) * up))
    y = torch.randn(16, 3)
    losses = T.train(a, x, y, steps=20, lr=0.2)
    assert len(losses) == 20 and losses[-1] < losses[0]
