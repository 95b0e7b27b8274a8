"""Chapter 8's capstone: one decoder layer of a Llama-style model in BF16, built from the course's
kernels, checked end to end against a float64 forward pass of the same weights.

The layer (pre-norm; Touvron et al., "LLaMA", arXiv:2302.13971, §2.2: RMSNorm, SwiGLU, RoPE;
grouped-query attention: Ainslie et al., "GQA", EMNLP 2023), for the residual stream ``res``
and the previous layer's output ``x``, T prompt tokens then one decode token::

    h1  = x + res                 n1 = RMSNorm(h1) * w_attn      fused add + RMSNorm (8.1)
    qkv = n1 @ W_qkv                                           tensor-core GEMM (ch. 2, tc4)
    q, k = RoPE(q, k)             in place in qkv               (8.2)
    k, v -> the paged KV cache    (block table, block_size)     reshape-and-cache (here)
    o   = attention(q, k, v)      prefill: causal FlashAttention-2 on tensor cores (ch. 5)
                                  decode: paged split-KV decode attention (8.5)
    a   = o @ W_o
    h2  = a + h1                  n2 = RMSNorm(h2) * w_ffn      fused add + RMSNorm
    y   = SwiGLU(n2 @ W_gu) @ W_down                            GEMM, SwiGLU (8.3), GEMM
    h3  = y + h2                  n3 = RMSNorm(h3) * w_final    fused add + RMSNorm
    logits = n3 @ W_vocab         (float32)

Every tensor between two operators is stored in BF16 (each kernel computes in float32 and
rounds once per stored value); the GEMMs write float32 and the host rounds C to BF16 (the
epilogue a production GEMM fuses). Weights are generated from a seed (:func:`make_weights`),
nothing is downloaded.

The check (:func:`check`), FlashAttention's rule applied to the whole layer: the error of the
kernels' hidden state ``h3`` (and logits) against the float64 forward pass (:func:`forward`
with ``dtype=None``) is at most twice the error of a *plain* BF16 forward pass that rounds at
the same points (``dtype=BF16``; its attention is
:func:`reference_kernels.attention.attention_plain` and
:func:`reference_kernels.decode_attention.decode_plain`, which also round the scores and
probabilities) plus one BF16 ulp at the largest magnitude; the top-1 token of the logits must
agree with the float64 one wherever the float64 margin between the best two tokens exceeds
twice the logits' allowed error (below that, rounding may legitimately swap them).

:func:`run_with_table`: the modelled time (sim tier, :mod:`kernellab.sim.model`) of each
operator of one decode step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import kernellab
from numba import cuda

from kernellab.bf16 import BF16
from kernellab.numerics import ulp

__all__ = ["Config", "make_weights", "make_inputs", "forward", "kernel_forward", "check",
           "run_with_table", "OPERATORS"]


@dataclass(frozen=True)
class Config:
    """Sizes of the layer: hidden D, query heads Hq, kv heads Hkv (Hq a multiple), head
    dimension d (a multiple of 32: the decode kernel's lanes; a tensor-core head dimension),
    FFN width F, vocabulary V, prompt length T, KV-cache block size, RMSNorm eps, RoPE base and
    layout. The defaults keep a forward pass on the sim tier within seconds."""

    D: int = 64
    Hq: int = 2
    Hkv: int = 1
    d: int = 32
    F: int = 128
    V: int = 128
    T: int = 19
    block_size: int = 16
    eps: float = 1e-6
    rope_base: float = 10000.0
    layout: str = "neox"

    def __post_init__(self):
        from kernellab.kernels.attention_tc import HEAD_DIMS
        from kernellab.kernels.decode_attention import MAX_GROUP

        if min(self.D, self.Hq, self.Hkv, self.F, self.V, self.T, self.block_size) < 1:
            raise ValueError(f"every size must be >= 1: {self}")
        if self.Hq % self.Hkv or self.Hq // self.Hkv > MAX_GROUP:
            raise ValueError(f"Hq = {self.Hq} must be a multiple of Hkv = {self.Hkv}, at most "
                             f"{MAX_GROUP} times (the decode kernel's groups)")
        if self.d % 32 or self.d not in HEAD_DIMS:
            raise ValueError(f"d = {self.d}: the decode kernel takes multiples of 32 and the "
                             f"tensor-core prefill {HEAD_DIMS}")


def make_weights(cfg: Config, seed: int = 0) -> dict:
    """Seeded BF16 weights, (in, out) layouts: projections N(0, 1/in) (activations stay of
    order 1), norm gains 1 + N(0, 0.1^2)."""
    rng = np.random.default_rng(seed)
    D, F = cfg.D, cfg.F
    width = (cfg.Hq + 2 * cfg.Hkv) * cfg.d

    def proj(i, o):
        return (rng.standard_normal((i, o)) / math.sqrt(i)).astype(BF16)

    def gain():
        return (1.0 + 0.1 * rng.standard_normal(D)).astype(BF16)

    return {"w_attn": gain(), "W_qkv": proj(D, width), "W_o": proj(cfg.Hq * cfg.d, D),
            "w_ffn": gain(), "W_gu": proj(D, 2 * F), "W_down": proj(F, D),
            "w_final": gain(), "W_vocab": proj(D, cfg.V)}


def make_inputs(cfg: Config, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(x, res): (T + 1, D) BF16 each, standard normal; row T is the decode token."""
    rng = np.random.default_rng(seed)
    shape = (cfg.T + 1, cfg.D)
    return rng.standard_normal(shape).astype(BF16), rng.standard_normal(shape).astype(BF16)


# ----------------------------------------------------------------------------------------------
# the reference forward pass: float64, or plain BF16 (rounded at the kernels' storage points)
# ----------------------------------------------------------------------------------------------

def forward(cfg: Config, W: dict, x, res, dtype=None) -> dict:
    """The layer on the host. ``dtype=None``: float64 throughout (the golden pass);
    ``dtype=BF16``: every stored tensor rounded to BF16 as the kernels store it, attention by
    the plain same-dtype implementations. Returns {"h": (T+1, D) float64 hidden state,
    "logits": (T+1, V) float64}."""
    from reference_kernels.attention import attention_golden, attention_plain
    from reference_kernels.decode_attention import decode_golden, decode_plain
    from reference_kernels.llm_ops import rope_qkv_golden, silu_golden
    from reference_kernels.norms import rmsnorm_golden

    def r(a):
        a = np.asarray(a, np.float64)
        return a if dtype is None else a.astype(dtype).astype(np.float64)

    W64 = {k: v.astype(np.float64) for k, v in W.items()}
    T, Hq, Hkv, d = cfg.T, cfg.Hq, cfg.Hkv, cfg.d
    pos = np.arange(T + 1)

    h1 = r(x.astype(np.float64) + res.astype(np.float64))
    n1 = r(rmsnorm_golden(h1, W64["w_attn"], cfg.eps))
    qkv = r(rope_qkv_golden(r(n1 @ W64["W_qkv"]), pos, Hq, Hkv, d, None, cfg.layout,
                            cfg.rope_base))
    q = qkv[:, :Hq * d].reshape(T + 1, Hq, d)
    k = qkv[:, Hq * d:(Hq + Hkv) * d].reshape(T + 1, Hkv, d)
    v = qkv[:, (Hq + Hkv) * d:].reshape(T + 1, Hkv, d)
    if dtype is not None:
        q, k, v = (a.astype(dtype) for a in (q, k, v))
    g = Hq // Hkv
    # prefill: the T prompt tokens, causal, K/V heads shared by their query group
    Qp = np.swapaxes(q[:T], 0, 1)[None]
    Kp = np.repeat(np.swapaxes(k[:T], 0, 1)[None], g, axis=1)
    Vp = np.repeat(np.swapaxes(v[:T], 0, 1)[None], g, axis=1)
    if dtype is None:
        Op = attention_golden(Qp, Kp, Vp, True)[0]
    else:
        Op = attention_plain(Qp, Kp, Vp, True, dtype)
    o = np.empty((T + 1, Hq, d))
    o[:T] = r(np.swapaxes(np.asarray(Op, np.float64)[0], 0, 1))
    # decode: token T against the T + 1 cached keys (one block table, in order)
    kc, vc = k.reshape(1, T + 1, Hkv, d), v.reshape(1, T + 1, Hkv, d)   # one block
    bt = np.zeros((1, 1), np.int32)
    sl = np.array([T + 1], np.int32)
    scale = 1.0 / math.sqrt(d)
    if dtype is None:
        od = decode_golden(q[T][None], kc, vc, bt, sl, scale)[0]
    else:
        od = decode_plain(q[T][None], kc, vc, bt, sl, scale, dtype)
    o[T] = r(np.asarray(od, np.float64)[0])
    a = r(o.reshape(T + 1, Hq * d) @ W64["W_o"])
    h2 = r(a + h1)
    n2 = r(rmsnorm_golden(h2, W64["w_ffn"], cfg.eps))
    gu = r(n2 @ W64["W_gu"])
    act = r(r(silu_golden(gu[:, :cfg.F])) * gu[:, cfg.F:])
    y = r(act @ W64["W_down"])
    h3 = r(y + h2)
    n3 = r(rmsnorm_golden(h3, W64["w_final"], cfg.eps))
    logits = n3 @ W64["W_vocab"]
    if dtype is not None:
        logits = logits.astype(np.float32).astype(np.float64)
    return {"h": h3, "logits": logits}


# ----------------------------------------------------------------------------------------------
# the layer from the course's kernels
# ----------------------------------------------------------------------------------------------

@cuda.jit
def kv_append(qkv, ld, k_cache, v_cache, block_table, positions, k_off, v_off, Hkv, d):
    """Reshape-and-cache (vLLM's ``reshape_and_cache``, Kwon et al. 2023 §4.2): token t's K and
    V heads (uint16 bits at columns ``k_off`` and ``v_off`` of row t of ``qkv``, row stride
    ``ld``) into slot ``p % block_size`` of physical block ``block_table[p // block_size]``,
    p = positions[t]. Grid (T,), block: any; thread i copies elements i, i + blockDim, ..."""
    t = cuda.blockIdx.x
    p = positions[t]
    bs = k_cache.shape[1]
    blk = block_table[p // bs]
    slot = p % bs
    for e in range(cuda.threadIdx.x, Hkv * d, cuda.blockDim.x):
        h = e // d
        k_cache[blk, slot, h, e % d] = qkv[t * ld + k_off + e]
        v_cache[blk, slot, h, e % d] = qkv[t * ld + v_off + e]


#: the operators of a decode step, in order (the rows of :func:`run_with_table`)
OPERATORS = ("add + RMSNorm (attn)", "QKV GEMM", "RoPE", "KV cache append", "decode attention",
             "O GEMM", "add + RMSNorm (FFN)", "gate/up GEMM", "SwiGLU", "down GEMM",
             "add + RMSNorm (final)", "vocab GEMM")


@dataclass
class _Timer:
    """Collects the sim tier's launches per operator (nothing on other tiers)."""

    on: bool
    launches: dict = field(default_factory=dict)

    def __call__(self, name, fn, *args, **kw):
        if not self.on:
            return fn(*args, **kw)
        from kernellab import sim
        with sim.capture() as cap:
            out = fn(*args, **kw)
        self.launches.setdefault(name, []).extend(cap.launches)
        return out


def _gemm(A, B):
    """A @ B on tensor cores (chapter 2's tc4), float32 C rounded to BF16 by the host."""
    from kernellab.kernels.gemm_tc import gemm_tc4
    C = np.empty((A.shape[0], B.shape[1]), np.float32)
    gemm_tc4(A, B, C)
    return C


def kernel_forward(cfg: Config, W: dict, x, res, *, num_splits: int = 2,
                   timer: _Timer | None = None) -> dict:
    """The layer from the course's kernels (module docstring): prefill of the T prompt tokens,
    then the decode token through the paged cache. Returns {"h": (T+1, D) BF16, "logits":
    (T+1, V) float32}. ``timer`` (internal) collects the decode step's launches."""
    from kernellab.kernels import decode_attention as da
    from kernellab.kernels.attention_tc import attention_tc
    from kernellab.kernels.llm_ops import fused_add_rmsnorm, swiglu
    from kernellab.kernels.llm_rope import rope_cos_sin_cache, rope_qkv

    T, Hq, Hkv, d, D = cfg.T, cfg.Hq, cfg.Hkv, cfg.d, cfg.D
    width = (Hq + 2 * Hkv) * d
    bs = cfg.block_size
    nblk = -(-(T + 1) // bs)
    # the cache: a scrambled block table over more blocks than needed, every slot NaN (a read
    # of a slot nobody wrote poisons the output)
    rng = np.random.default_rng(7)
    table = rng.permutation(nblk + 2)[:nblk].astype(np.int32)
    k_cache = np.full((nblk + 2, bs, Hkv, d), np.nan, np.float32).astype(BF16)
    v_cache = k_cache.copy()
    cos_sin = rope_cos_sin_cache(T + 1, d, cfg.rope_base)
    h = np.empty((T + 1, D), BF16)
    logits = np.empty((T + 1, cfg.V), np.float32)
    dk, dv = cuda.to_device(k_cache.view(np.uint16)), cuda.to_device(v_cache.view(np.uint16))
    dtable = cuda.to_device(table)
    dtable_b = cuda.to_device(table[None])          # (B = 1, max_blocks) for the decode kernel
    dlen = cuda.to_device(np.array([T + 1], np.int32))
    off = _Timer(False)                             # the prefill is not tabled
    for rows in (slice(0, T), slice(T, T + 1)):
        run = timer if (timer is not None and rows.start == T) else off
        n = rows.stop - rows.start
        pos = np.arange(rows.start, rows.stop, dtype=np.int32)
        xr, rr = x[rows].copy(), res[rows].copy()
        n1 = np.empty_like(xr)
        run("add + RMSNorm (attn)", fused_add_rmsnorm, xr, rr, W["w_attn"], n1, cfg.eps)
        qkv = run("QKV GEMM", _gemm, n1, W["W_qkv"]).astype(BF16)
        run("RoPE", rope_qkv, qkv, pos, cos_sin, Hq, Hkv, d, cfg.layout)
        run("KV cache append", kv_append[n, 64], cuda.to_device(qkv.view(np.uint16).ravel()),
            width, dk, dv, dtable, cuda.to_device(pos), Hq * d, (Hq + Hkv) * d, Hkv, d)
        q = qkv[:, :Hq * d].reshape(n, Hq, d)
        o = np.empty((n, Hq, d), BF16)
        if rows.start == 0:          # prefill: causal FlashAttention-2 on tensor cores
            g = Hq // Hkv
            kv = qkv[:, Hq * d:].reshape(n, 2, Hkv, d)
            Qp = np.ascontiguousarray(np.swapaxes(q, 0, 1)[None])
            Kp, Vp = (np.ascontiguousarray(np.repeat(np.swapaxes(kv[:, i], 0, 1)[None], g, 1))
                      for i in (0, 1))
            Op = np.empty_like(Qp)
            attention_tc(Qp, Kp, Vp, Op, True)
            o[:] = np.swapaxes(Op[0], 0, 1)
        else:                        # decode: paged, split-KV, through the cache
            run("decode attention", da.decode_v3, q, dk, dv, dtable_b, dlen,
                1.0 / math.sqrt(d), num_splits, o)
        a = run("O GEMM", _gemm, o.reshape(n, Hq * d), W["W_o"]).astype(BF16)
        n2 = np.empty_like(a)
        run("add + RMSNorm (FFN)", fused_add_rmsnorm, a, rr, W["w_ffn"], n2, cfg.eps)
        gu = run("gate/up GEMM", _gemm, n2, W["W_gu"]).astype(BF16)
        act = np.empty((n, cfg.F), BF16)
        run("SwiGLU", swiglu, gu, None, act)
        y = run("down GEMM", _gemm, act, W["W_down"]).astype(BF16)
        n3 = np.empty_like(y)
        run("add + RMSNorm (final)", fused_add_rmsnorm, y, rr, W["w_final"], n3, cfg.eps)
        logits[rows] = run("vocab GEMM", _gemm, n3, W["W_vocab"])
        h[rows] = rr
    return {"h": h, "logits": logits}


# ----------------------------------------------------------------------------------------------
# the check and the table
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """The end-to-end verdict (:func:`check`): errors against the float64 pass of the kernels'
    and the plain BF16 pass's hidden state and logits, the allowed errors, and the top-1
    agreement (``top1_checked``: tokens whose float64 margin exceeds twice the logits' allowed
    error; ``top1_agree``: how many of those agree; ``top1_all``: agreement over every token,
    for information)."""

    err_h: float
    plain_h: float
    bound_h: float
    err_logits: float
    plain_logits: float
    bound_logits: float
    top1_checked: int
    top1_agree: int
    top1_all: float

    @property
    def ok(self) -> bool:
        return (self.err_h <= self.bound_h and self.err_logits <= self.bound_logits
                and self.top1_agree == self.top1_checked)

    def describe(self) -> str:
        return (f"hidden state: max error {self.err_h:.3g} (plain BF16 pass {self.plain_h:.3g}, "
                f"allowed {self.bound_h:.3g}); logits: {self.err_logits:.3g} (plain "
                f"{self.plain_logits:.3g}, allowed {self.bound_logits:.3g}); top-1 agrees on "
                f"{self.top1_agree} of {self.top1_checked} tokens with a clear margin "
                f"({self.top1_all:.0%} of all tokens) -> {'ok' if self.ok else 'FAIL'}")


def _bound(plain_err: float, ref: np.ndarray, dtype) -> float:
    """FlashAttention's rule: 2 x the plain pass's error + 1 ulp of ``dtype`` at max|ref|."""
    return 2.0 * plain_err + float(ulp(np.array(np.abs(ref).max()), dtype))


def check(cfg: Config, W: dict, x, res, got: dict) -> Check:
    """Compare ``got`` (:func:`kernel_forward`'s output) with the float64 forward pass under
    the rule of the module docstring."""
    gold = forward(cfg, W, x, res)
    plain = forward(cfg, W, x, res, BF16)

    def err(a, ref):
        return float(np.abs(np.asarray(a, np.float64) - ref).max())

    b_h = _bound(err(plain["h"], gold["h"]), gold["h"], BF16)
    b_l = _bound(err(plain["logits"], gold["logits"]), gold["logits"], np.float32)
    ref_sorted = np.sort(gold["logits"], axis=1)
    margin = ref_sorted[:, -1] - ref_sorted[:, -2]
    clear = margin > 2 * b_l
    agree = np.argmax(got["logits"], axis=1) == np.argmax(gold["logits"], axis=1)
    return Check(err(got["h"], gold["h"]), err(plain["h"], gold["h"]), b_h,
                 err(got["logits"], gold["logits"]), err(plain["logits"], gold["logits"]), b_l,
                 int(clear.sum()), int((agree & clear).sum()), float(agree.mean()))


def run_with_table(cfg: Config, W: dict, x, res, profile: str = "a100") -> tuple[dict, list]:
    """:func:`kernel_forward` on the sim tier with the decode step's launches captured per
    operator. Returns (its output, rows): one row (operator, launches, modelled seconds, kernel
    seconds without the launch overhead, share of the step) per operator in :data:`OPERATORS`
    order, and a last row ("total", ...). Raises RuntimeError on another tier (the model
    needs the sim tier's counters)."""
    if kernellab.TIER != "sim":
        raise RuntimeError("the modelled time table needs the sim tier (KERNELLAB_DEVICE=sim)")
    from kernellab.sim import model

    timer = _Timer(True)
    out = kernel_forward(cfg, W, x, res, timer=timer)
    rows = []
    for op in OPERATORS:
        ls = timer.launches[op]
        rows.append((op, len(ls), model.total_seconds(ls, profile),
                     model.total_seconds(ls, profile, include_launch=False)))
    total = sum(r[2] for r in rows)
    rows = [r + (r[2] / total,) for r in rows]
    rows.append(("total", sum(r[1] for r in rows), total, sum(r[3] for r in rows), 1.0))
    return out, rows
