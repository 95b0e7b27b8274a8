"""Chapter 9's library: fused SwiGLU shipped as the PyTorch operator ``kernellab::swiglu``.

``out = silu(gate) * up``, ``silu(g) = g / (1 + exp(-g))`` (Shazeer, "GLU Variants Improve
Transformer", arXiv:2002.05202, 2020, eq. 6), built as PyTorch's "Custom Python operators"
tutorial and the ``torch.library`` docs prescribe: :func:`swiglu` is a
``torch.library.custom_op`` with ``mutates_args=()`` (functional: its output is new memory)
whose CPU kernel runs Numba on zero-copy ``t.detach().numpy()`` views of contiguous tensors; a
fake (meta) kernel (``register_fake``: metadata only, what FakeTensor tracing and
``torch.compile`` run instead); ``register_autograd`` whose backward is the op
``kernellab::swiglu_backward`` (with its own fake kernel, so a compiled backward traces).

Contract of both ops: CPU tensors of one shape (..., F), at least one axis, one dtype of
:data:`DTYPES`, contiguous or not; the outputs are new contiguous tensors of that shape and
dtype. Raises TypeError (a dtype not in :data:`DTYPES`, or two dtypes), ValueError (shapes that
differ, a 0-d tensor), NotImplementedError (no kernel for another device). float32 and float64
compute in their own precision; bfloat16 (no numpy dtype) in float32, rounded once per output by
torch's ``.to(torch.bfloat16)``.

Also: the float64 golden (:func:`golden`, :func:`golden_grad`), error bounds derived from the
kernels' rounding steps (:func:`forward_rtol`, :func:`backward_bounds`), the aliasing check
``opcheck`` does not make (:func:`shares_memory`), and the training demo (:class:`SwiGLUMLP`,
:func:`train`). torch is imported through ``kernellab.topics.torch_support.require`` only.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numba import njit

from kernellab import numerics
from kernellab.topics.torch_support import require, shares_memory  # noqa: F401
from reference_kernels.llm_ops import silu_golden, swiglu_golden

torch = require()

__all__ = ["DTYPES", "swiglu", "swiglu_backward", "swiglu_forward_kernel", "swiglu_backward_kernel",
           "check_inputs", "golden", "golden_grad", "forward_rtol", "backward_bounds",
           "shares_memory", "SwiGLUMLP", "train"]

#: the dtypes the op accepts
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


@njit(cache=True)
def swiglu_forward_kernel(g, u, out):
    """``out[i] = g[i] / (1 + exp(-g[i])) * u[i]``; 1-D float32 or float64 arrays of one size,
    computed in their dtype (``one`` has the output's type, so nothing widens to float64)."""
    one = out.dtype.type(1)
    for i in range(g.size):
        x = g[i]
        out[i] = x / (one + math.exp(-x)) * u[i]


@njit(cache=True)
def swiglu_backward_kernel(dout, g, u, dg, du):
    """``du = dout * silu(g)``, ``dg = dout * u * s * (1 + g * (1 - s))`` with ``s = sigmoid(g)``;
    ``1 - s`` is computed as ``sigmoid(-g)``, not by a subtraction that cancels for large g
    (and neither overflows: ``exp`` of a large argument gives inf, and 1 / inf = 0). silu is
    recomputed from ``g``, not read from memory. 1-D arrays of one size and float dtype."""
    one = dg.dtype.type(1)
    for i in range(g.size):
        x = g[i]
        s = one / (one + math.exp(-x))
        sm = one / (one + math.exp(x))
        du[i] = dout[i] * (x * s)
        dg[i] = dout[i] * u[i] * s * (one + x * sm)


def check_inputs(*tensors) -> None:
    """Raise the module contract's TypeError / ValueError for tensors the ops do not take."""
    first = tensors[0]
    for t in tensors:
        if t.dtype not in DTYPES:
            raise TypeError(f"kernellab::swiglu takes {DTYPES}, got {t.dtype}")
        if t.dtype != first.dtype:
            raise TypeError(f"all tensors must have one dtype, got {first.dtype} and {t.dtype}")
        if t.shape != first.shape:
            raise ValueError(f"all tensors must have one shape, got {tuple(first.shape)} and "
                             f"{tuple(t.shape)}")
    if first.dim() == 0:
        raise ValueError("kernellab::swiglu needs at least one axis (..., F), got a 0-d tensor")


def _flat(t):
    """A 1-D numpy view (no copy) of ``t`` made contiguous, widened to float32 if bfloat16."""
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)
    return t.detach().contiguous().numpy().reshape(-1)


def _new(like):
    """An uninitialised contiguous tensor of ``like``'s shape in the working precision."""
    return torch.empty(like.shape, dtype=torch.float32 if like.dtype == torch.bfloat16
                       else like.dtype)


@torch.library.custom_op("kernellab::swiglu", mutates_args=(), device_types="cpu")
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``: the module docstring's contract."""
    check_inputs(gate, up)
    out = _new(gate)
    swiglu_forward_kernel(_flat(gate), _flat(up), out.numpy().reshape(-1))
    return out.to(gate.dtype)                # bfloat16: one rounding; otherwise no copy


@swiglu.register_fake
def _swiglu_fake(gate, up):
    check_inputs(gate, up)
    return gate.new_empty(gate.shape)       # contiguous, as the CPU kernel's output


@torch.library.custom_op("kernellab::swiglu_backward", mutates_args=(), device_types="cpu")
def swiglu_backward(grad: torch.Tensor, gate: torch.Tensor,
                    up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d_gate, d_up)`` of :func:`swiglu` for the upstream gradient ``grad`` (same contract)."""
    check_inputs(grad, gate, up)
    dg, du = _new(gate), _new(gate)
    swiglu_backward_kernel(_flat(grad), _flat(gate), _flat(up), dg.numpy().reshape(-1),
                           du.numpy().reshape(-1))
    return dg.to(gate.dtype), du.to(gate.dtype)


@swiglu_backward.register_fake
def _swiglu_backward_fake(grad, gate, up):
    check_inputs(grad, gate, up)
    return gate.new_empty(gate.shape), gate.new_empty(gate.shape)


def _setup_context(ctx, inputs, output):
    """Save ``gate`` and ``up``, nothing else: the backward needs sigmoid(gate) (recomputed from
    gate, one exp per element) and up; saving silu(gate) too would keep a third (..., F) tensor
    alive until the backward runs, memory traded for an exp that is nearly free. FlashAttention's
    backward makes the same trade (Dao, "FlashAttention-2", 2023, §3.1: the forward saves one
    logsumexp per row, the backward recomputes the attention matrix from it)."""
    gate, up = inputs
    ctx.save_for_backward(gate, up)


def _backward(ctx, grad):
    gate, up = ctx.saved_tensors
    return tuple(torch.ops.kernellab.swiglu_backward(grad, gate, up))


swiglu.register_autograd(_backward, setup_context=_setup_context)


# ---- float64 golden, derived error bounds ---------------------------------------------------
def _f64(t) -> np.ndarray:
    return t.detach().cpu().to(torch.float64).numpy() if torch.is_tensor(t) else np.asarray(t)


def golden(gate, up):
    """``silu(gate) * up`` in float64 (``reference_kernels.llm_ops.swiglu_golden``) as a float64
    CPU tensor; tensors (any float dtype, widened exactly) or arrays of one shape."""
    return torch.from_numpy(swiglu_golden(_f64(gate), _f64(up)))


def golden_grad(grad, gate, up):
    """``(d_gate, d_up)`` in float64, analytically: ``silu'(g) = s (1 + g (1 - s))``,
    ``s = sigmoid(g)``; ``d_gate = grad * up * silu'(g)``, ``d_up = grad * silu(g)``."""
    dy, g, u = _f64(grad), _f64(gate), _f64(up)
    s, sm = _sigmoids(g)
    return (torch.from_numpy(dy * u * s * (1.0 + g * sm)), torch.from_numpy(dy * silu_golden(g)))


def _sigmoids(g):
    """(sigmoid(g), 1 - sigmoid(g) = sigmoid(-g)), each without cancellation."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-g)), 1.0 / (1.0 + np.exp(g))


def _u(dtype) -> tuple[float, float, float]:
    """(unit roundoff of the working precision, of the output dtype; the output dtype's
    smallest normal)."""
    out = {torch.float32: np.float32, torch.float64: np.float64,
           torch.bfloat16: ml_dtypes.bfloat16}[dtype]
    work = np.float64 if dtype == torch.float64 else np.float32
    return (numerics.unit_roundoff(work), numerics.unit_roundoff(out),
            float(numerics.finfo(out).smallest_normal))


def forward_rtol(dtype) -> float:
    """Relative error bound of :func:`swiglu` against :func:`golden` on the same inputs.

    In the working precision (unit roundoff u_w): ``exp`` (at most 1 ulp, 2 u_w), ``1 + e``,
    the division and the product round once each: 5 u_w to first order (no cancellation: every
    step multiplies, or adds positive numbers). The golden is computed the same way in float64
    (5 u_64); bfloat16 rounds once more (u_out). ``atol`` beside it: the output dtype's
    smallest normal, where relative bounds end (silu(g) underflows for g < about -87)."""
    u_w, u_out, _ = _u(dtype)
    return 5 * (u_w + numerics.unit_roundoff(np.float64)) + (u_out if u_out > u_w else 0.0)


def backward_bounds(grad, gate, up, dtype):
    """Element-wise bounds ``(b_gate, b_up)`` (float64 tensors) on the error of
    :func:`swiglu_backward` in ``dtype`` against :func:`golden_grad` on the same inputs.

    Counting roundings as :func:`forward_rtol` does, in the kernel's order: ``s`` and
    ``1 - s`` 4 u_w each (``exp``, ``1 + e``, the reciprocal), ``t = g (1 - s)`` 5 u_w,
    ``P = (grad up) s`` 6 u_w; ``1 + t`` cancels near g = -1.28 (where silu' = 0), so the error
    is bounded absolutely, not relatively: ``|P| (5 u_w |t| + 8 u_w |1 + t|)``, at most
    ``b_gate = 8 u |grad up| s (1 + 2 |t|)``; ``d_up = grad (g s)``: ``b_up = 6 u |d_up|``.
    ``u`` is u_w + u_64 (the golden's own rounding); bfloat16 adds one rounding of the result
    (u_out relative); both add the output dtype's smallest normal (underflow)."""
    u_w, u_out, tiny = _u(dtype)
    u = u_w + numerics.unit_roundoff(np.float64)
    dy, g, upv = _f64(grad), _f64(gate), _f64(up)
    s, sm = _sigmoids(g)
    t = np.abs(g) * sm
    d_gate, d_up = (x.numpy() for x in golden_grad(dy, g, upv))
    extra = u_out if u_out > u_w else 0.0
    b_gate = 8 * u * np.abs(dy * upv) * s * (1 + 2 * t) + extra * np.abs(d_gate) + tiny
    b_up = 6 * u * np.abs(d_up) + extra * np.abs(d_up) + tiny
    return torch.from_numpy(b_gate), torch.from_numpy(b_up)


# ---- the chapter's training demo ------------------------------------------------------------
class SwiGLUMLP(torch.nn.Module):
    """``down(swiglu(gate, up))`` with ``[gate | up] = x W_gu^T + b``: (N, d_in) -> (N, d_out).

    ``use_op``: the custom op (on the two non-contiguous halves of one GEMM's output) or the
    built-in composition ``F.silu(gate) * up``. ``seed`` fixes the initial weights (same seed,
    same weights, whatever ``use_op``); ``dtype`` is applied after a float32 initialisation, so
    a float64 model starts from the same (exactly widened) weights."""

    def __init__(self, d_in: int, hidden: int, d_out: int, *, use_op: bool = True,
                 seed: int = 0, dtype=torch.float32):
        super().__init__()
        with torch.random.fork_rng():           # the caller's random stream is left alone
            torch.manual_seed(seed)
            self.gate_up = torch.nn.Linear(d_in, 2 * hidden)
            self.down = torch.nn.Linear(hidden, d_out)
        self.use_op = use_op
        self.to(dtype)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        h = swiglu(gate, up) if self.use_op else torch.nn.functional.silu(gate) * up
        return self.down(h)


def train(model, x, y, steps: int, lr: float) -> list[float]:
    """Full-batch SGD on the mean squared error for ``steps`` steps; the loss before each step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
