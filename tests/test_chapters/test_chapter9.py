"""Chapter 9 (chapters/09_torch_custom_ops.ipynb): what the notebook's prose claims that neither
the notebook's own asserts nor tests/test_kernellab/topics/test_torch_op.py check.

* Section 2: with ``fullgraph=True`` a missing fake kernel is an error, not a silent fallback;
  ``opcheck`` catches a fake kernel whose strides disagree with the real kernel's.
* Section 3: the op hands the kernel zero-copy views of contiguous inputs (a copy only of
  non-contiguous ones) and the kernel writes straight into the output tensor; ``1 - s`` as
  ``sigmoid(-g)`` matters: the subtraction would break the backward's bound for large g.
* Section 4: the built-in composition's extra saved tensor is silu(gate) itself; in the model,
  the op saves views of the GEMM output the model keeps anyway.
* Section 5: near silu's minimum no relative bound of the forward's kind holds for d_gate,
  while the element-wise bound does.
* Section 6: at the chapter's sizes and learning rate, a wrong backward (gradients swapped, or a
  term missing) leaves the rounding allowance after the first step.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import notebook_rules as rules
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kernellab  # noqa: E402,F401
from kernellab import numerics  # noqa: E402
from kernellab.topics import torch_op as T  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[2] / "chapters" / "09_torch_custom_ops.ipynb"
#: silu's minimum, where d_gate = 0: 1 + g (1 - sigmoid(g)) = 0
ROOT = -1.2784645


def training_constants() -> dict:
    """The chapter's ``N_TRAIN, D_IN, HIDDEN, D_OUT, STEPS, LR = ...`` assignment."""
    for src in rules.cells(NOTEBOOK, "code"):
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
                names = [getattr(t, "id", None) for t in node.targets[0].elts]
                if "N_TRAIN" in names:
                    return dict(zip(names, ast.literal_eval(node.value)))
    raise AssertionError("the chapter no longer assigns N_TRAIN, ...: update this test")


def test_fullgraph_compile_fails_without_a_fake_kernel():
    @torch.library.custom_op("kernellab_test9::no_fake", mutates_args=())
    def no_fake(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    with pytest.raises(Exception, match="no fake impl"):
        torch.compile(lambda x: no_fake(x) * 2, fullgraph=True)(torch.randn(3))


def test_opcheck_catches_a_fake_kernel_with_other_strides():
    @torch.library.custom_op("kernellab_test9::bad_fake", mutates_args=())
    def bad_fake(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @bad_fake.register_fake
    def _(x):
        return x.new_empty(x.shape[::-1]).T             # the right shape, transposed strides

    with pytest.raises(Exception, match="test_faketensor"):
        torch.library.opcheck(bad_fake, (torch.randn(3, 4),))


def test_kernel_gets_zero_copy_views_and_writes_into_the_output(monkeypatch):
    seen = []
    kernel = T.swiglu_forward_kernel

    def spy(g, u, out):
        seen.append([a.__array_interface__["data"][0] for a in (g, u, out)])
        kernel(g, u, out)

    monkeypatch.setattr(T, "swiglu_forward_kernel", spy)
    gu = torch.randn(8, 2 * 16)
    gate, up = gu[:, :16].contiguous(), gu[:, 16:].contiguous()
    out = T.swiglu(gate, up)
    assert seen[-1] == [gate.data_ptr(), up.data_ptr(), out.data_ptr()]
    view_gate, view_up = gu.chunk(2, dim=-1)                 # not contiguous: copied
    out = T.swiglu(view_gate, view_up)
    g_ptr, u_ptr, o_ptr = seen[-1]
    assert o_ptr == out.data_ptr()
    assert g_ptr != view_gate.data_ptr() and u_ptr != view_up.data_ptr()
    assert torch.equal(out, T.swiglu(gate, up))


def test_one_minus_s_by_subtraction_would_break_the_backward_bound():
    g = torch.linspace(2, 20, 4001)                          # s near 1: 1 - s cancels
    ones = torch.ones_like(g)
    ref, _ = T.golden_grad(ones, g, ones)
    bound, _ = T.backward_bounds(ones, g, ones, torch.float32)
    kernel, _ = T.swiglu_backward(ones, g, ones)
    x, one = g.numpy(), np.float32(1)
    s = one / (one + np.exp(-x))
    subtracted = torch.from_numpy(s * (one + x * (one - s)))   # float32 throughout
    assert ((kernel.double() - ref).abs() / bound).max() <= 1
    assert ((subtracted.double() - ref).abs() / bound).max() > 1


def test_builtin_saves_silu_of_gate_and_the_model_saves_only_views_of_its_gemm_output():
    g = torch.randn(16, 32, requires_grad=True)
    u = torch.randn(16, 32, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        torch.nn.functional.silu(g) * u
    extra = [t for t in saved if t.data_ptr() not in (g.data_ptr(), u.data_ptr())]
    assert len(extra) == 1 and torch.equal(extra[0], torch.nn.functional.silu(g.detach()))

    model = T.SwiGLUMLP(8, 32, 4, seed=0)
    gemm_out = []
    model.gate_up.register_forward_hook(lambda mod, args, out: gemm_out.append(out))
    calls = []

    def pack(t):
        calls.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(5, 8))
    base = gemm_out[0].untyped_storage().data_ptr()
    # the op's saved gate and up: (5, 32) views of the (5, 64) GEMM output, no new memory
    ffn = [t for t in calls if t.shape == (5, 32) and t.untyped_storage().data_ptr() == base]
    assert len(ffn) == 2 and all(not t.is_contiguous() for t in ffn)


def test_near_silus_minimum_only_an_elementwise_bound_holds():
    g = torch.linspace(ROOT - 1e-3, ROOT + 1e-3, 2001)
    ones = torch.ones_like(g)
    got, _ = T.swiglu_backward(ones, g, ones)
    ref, _ = T.golden_grad(ones, g, ones)
    bound, _ = T.backward_bounds(ones, g, ones, torch.float32)
    err = (got.double() - ref).abs()
    assert (err / bound).max() <= 1
    relative = 8 * numerics.unit_roundoff(np.float32)       # a bound of the forward's kind
    assert (err / ref.abs()).max() > relative


class _Wrong(torch.autograd.Function):
    """silu(gate) * up with a wrong backward (``mode``: "swap" or "missing_term")."""

    @staticmethod
    def forward(ctx, gate, up, mode):
        ctx.save_for_backward(gate, up)
        ctx.mode = mode
        return T.swiglu(gate, up)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        d_gate, d_up = T.swiglu_backward(grad, gate, up)
        if ctx.mode == "swap":
            return d_up, d_gate, None
        return grad * up * torch.sigmoid(gate), d_up, None    # silu' without g s (1 - s)


class _WrongMLP(T.SwiGLUMLP):
    def __init__(self, *args, mode: str, **kw):
        super().__init__(*args, **kw)
        self.mode = mode

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(_Wrong.apply(gate, up, self.mode))


@pytest.mark.parametrize("mode", ["swap", "missing_term"])
def test_a_wrong_backward_leaves_the_rounding_allowance_at_the_first_step(mode):
    c = training_constants()
    sizes = (c["D_IN"], c["HIDDEN"], c["D_OUT"])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(c["N_TRAIN"], c["D_IN"], generator=gen)
    y = torch.tanh(x @ torch.randn(c["D_IN"], c["D_OUT"], generator=gen) / 2)
    steps = 3

    def run(model, dtype):
        return np.array(T.train(model, x.to(dtype), y.to(dtype), steps, c["LR"]))

    L64 = run(T.SwiGLUMLP(*sizes, use_op=False, seed=11, dtype=torch.float64), torch.float64)
    L_builtin = run(T.SwiGLUMLP(*sizes, use_op=False, seed=11), torch.float32)
    L_op = run(T.SwiGLUMLP(*sizes, use_op=True, seed=11), torch.float32)
    L_wrong = run(_WrongMLP(*sizes, mode=mode, seed=11), torch.float32)
    allowed = 2 * np.abs(L_builtin - L64).max() \
        + numerics.unit_roundoff(np.float32) * np.abs(L64)      # the chapter's rule
    assert np.all(np.abs(L_op - L64) <= allowed)
    assert np.abs(L_wrong - L64)[0] <= allowed[0]            # same forward, same first loss
    assert np.abs(L_wrong - L64)[1] > 100 * allowed[1]
