"""Chapter 8: paged decode attention in BF16, every version side by side (llm.c ``dev/cuda``
style, like :mod:`kernellab.kernels.softmax_cuda`).

Contract of every ``decode_vN(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits,
out)`` (the operands of :mod:`reference_kernels.decode_attention`): q (B, Hq, d), k_cache and
v_cache (num_blocks, block_size, Hkv, d), out (B, Hq, d), all bfloat16: ``ml_dtypes.bfloat16``
numpy arrays (any strides: numba copies only contiguous buffers, so a strided one is copied
first, and a strided out written back) or numba device arrays of their uint16 bits; block_table (B,
max_blocks) and seq_lens (B,) int32; d in {32, 64, 96, 128} (a multiple of 32, at most 128);
Hq a multiple of Hkv with Hq / Hkv <= :data:`MAX_GROUP`; ``scale`` a float, ``num_splits`` >= 1
(v1 and v2 ignore it). Slots past ``seq_lens[b]`` and block-table entries past its last block
are never read. Statistics and both products in float32: each element widened exactly
(:func:`kernellab.bf16.widen`), the output rounded once to nearest even
(:func:`kernellab.bf16.narrow`). A sequence of length 0 gives zeros. Raises ValueError for bad
shapes or dtypes.

One warp (32 lanes) per block; lane ``l`` owns dimensions ``l, l + 32, ...`` of a head, so a
key row's 2 d bytes are read by one coalesced request per 32 dimensions. A score is the lanes'
partial dot products summed by five ``shfl_xor_sync`` steps; each key updates an online
softmax (Milakov & Gimelshein, arXiv:1805.02867, 2018): m' = max(m, s), l = l e^(m - m') +
e^(s - m'), acc = acc e^(m - m') + e^(s - m') v.

Versions::

    v1 per q-head    grid (B, Hq): one warp per query head walks its sequence's keys through
                     the block table. The Hq / Hkv heads of a group each read the group's K
                     and V: Hq / Hkv times the compulsory traffic from L2.
    v2 GQA           grid (B, Hkv): one warp per kv head keeps the G = Hq / Hkv query heads of
                     its group in registers; each key and value is read once and used G times
                     (Ainslie et al., "GQA", EMNLP 2023). At batch 1 the grid is Hkv blocks:
                     one or a few SMs of the GPU's 108, each limited to its share of L2.
    v3 split-KV      Flash-Decoding (Dao, Haziza, Massa, Sizov, "Flash-Decoding for
                     long-context inference", 2023): grid (B, Hkv, num_splits), split s takes
                     logical blocks [s c, (s + 1) c), c = ceil(blocks / num_splits), and writes
                     its normalised partial output and log-sum-exp (float32; a split with no
                     keys writes o = 0 and lse = -inf); a second kernel, grid (B, Hq), merges
                     them: M = max_s lse_s, o = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M).
                     Subtracting M keeps every exponent <= 0; an empty split's weight is
                     e^(-inf) = 0 and its o = 0, so it adds nothing (never 0 * NaN).

Modelled on the sim tier (:mod:`kernellab.sim.model`): a launch's global traffic is served at
the L2 bandwidth share of the SMs that have a block, its DRAM traffic at the whole chip's
bandwidth, so at batch 1 v2's few blocks are L2-bound and v3's many DRAM-bound
(:func:`split_gain`).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda, float32, int64

from kernellab.bf16 import BF16, narrow, widen
from kernellab.kernels._cuda_args import is_device_array

__all__ = ["decode_v1", "decode_v2", "decode_v3", "LADDER", "KERNELS", "MAX_GROUP",
           "MAX_DIMS_PER_LANE", "paged_operands", "split_gain", "main"]

#: the most query heads a kv head may serve (v2, v3 keep them all in registers)
MAX_GROUP = 8
#: dimensions a lane owns: d <= 32 * MAX_DIMS_PER_LANE
MAX_DIMS_PER_LANE = 4
_GROUP_DIMS = MAX_GROUP * MAX_DIMS_PER_LANE
_FULL = 0xFFFFFFFF
_NEG_INF = -math.inf


# ----------------------------------------------------------------------------------------------
# v1: one warp per (batch, query head)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _v1_kernel(q, kc, vc, bt, sl, scale, out):
    b, h, lane = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    npl = q.shape[2] // 32
    bs = kc.shape[1]
    kvh = h // (q.shape[1] // kc.shape[2])
    L = sl[b]
    qr = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    acc = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    for i in range(npl):
        qr[i] = widen(q[b, h, lane + 32 * i]) * scale
        acc[i] = float32(0.0)
    m = float32(_NEG_INF)
    den = float32(0.0)
    for t in range(L):
        blk = int64(bt[b, t // bs])
        slot = t % bs
        s = float32(0.0)
        for i in range(npl):
            s += qr[i] * widen(kc[blk, slot, kvh, lane + 32 * i])
        off = 16
        while off > 0:                # the warp's sum: five butterfly steps
            s += cuda.shfl_xor_sync(_FULL, s, off)
            off //= 2
        m_new = max(m, s)
        c = math.exp(m - m_new)
        p = math.exp(s - m_new)
        den = den * c + p
        for i in range(npl):
            acc[i] = acc[i] * c + p * widen(vc[blk, slot, kvh, lane + 32 * i])
        m = m_new
    inv = float32(1.0) / den if L > 0 else float32(0.0)
    for i in range(npl):
        out[b, h, lane + 32 * i] = narrow(acc[i] * inv)


# ----------------------------------------------------------------------------------------------
# v2 / v3: one warp per (batch, kv head[, split]), the group's query heads in registers
# ----------------------------------------------------------------------------------------------

@cuda.jit
def _v2_kernel(q, kc, vc, bt, sl, scale, out):
    b, kvh, lane = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    npl = q.shape[2] // 32
    G = q.shape[1] // kc.shape[2]
    bs = kc.shape[1]
    L = sl[b]
    m = cuda.local.array(MAX_GROUP, float32)
    den = cuda.local.array(MAX_GROUP, float32)
    qr = cuda.local.array(_GROUP_DIMS, float32)
    acc = cuda.local.array(_GROUP_DIMS, float32)
    kr = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    vr = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    for g in range(G):
        m[g] = float32(_NEG_INF)
        den[g] = float32(0.0)
        for i in range(npl):
            qr[g * npl + i] = widen(q[b, kvh * G + g, lane + 32 * i]) * scale
            acc[g * npl + i] = float32(0.0)
    for t in range(L):
        blk = int64(bt[b, t // bs])
        slot = t % bs
        for i in range(npl):          # the key and value rows, read once for the G heads
            kr[i] = widen(kc[blk, slot, kvh, lane + 32 * i])
            vr[i] = widen(vc[blk, slot, kvh, lane + 32 * i])
        for g in range(G):
            s = float32(0.0)
            for i in range(npl):
                s += qr[g * npl + i] * kr[i]
            off = 16
            while off > 0:            # the warp's sum: five butterfly steps
                s += cuda.shfl_xor_sync(_FULL, s, off)
                off //= 2
            m_new = max(m[g], s)
            c = math.exp(m[g] - m_new)
            p = math.exp(s - m_new)
            den[g] = den[g] * c + p
            m[g] = m_new
            for i in range(npl):
                acc[g * npl + i] = acc[g * npl + i] * c + p * vr[i]
    for g in range(G):
        inv = float32(1.0) / den[g] if L > 0 else float32(0.0)
        for i in range(npl):
            out[b, kvh * G + g, lane + 32 * i] = narrow(acc[g * npl + i] * inv)


@cuda.jit
def _v3_split_kernel(q, kc, vc, bt, sl, scale, part_o, part_lse):
    b, kvh, sp, lane = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, cuda.threadIdx.x
    npl = q.shape[2] // 32
    G = q.shape[1] // kc.shape[2]
    bs = kc.shape[1]
    S = part_o.shape[2]
    L = sl[b]
    per = ((L + bs - 1) // bs + S - 1) // S          # blocks a split
    t0 = min(L, sp * per * bs)
    t1 = min(L, (sp + 1) * per * bs)
    m = cuda.local.array(MAX_GROUP, float32)
    den = cuda.local.array(MAX_GROUP, float32)
    qr = cuda.local.array(_GROUP_DIMS, float32)
    acc = cuda.local.array(_GROUP_DIMS, float32)
    kr = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    vr = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    for g in range(G):
        m[g] = float32(_NEG_INF)
        den[g] = float32(0.0)
        for i in range(npl):
            qr[g * npl + i] = widen(q[b, kvh * G + g, lane + 32 * i]) * scale
            acc[g * npl + i] = float32(0.0)
    for t in range(t0, t1):           # v2's loop over this split's keys
        blk = int64(bt[b, t // bs])
        slot = t % bs
        for i in range(npl):
            kr[i] = widen(kc[blk, slot, kvh, lane + 32 * i])
            vr[i] = widen(vc[blk, slot, kvh, lane + 32 * i])
        for g in range(G):
            s = float32(0.0)
            for i in range(npl):
                s += qr[g * npl + i] * kr[i]
            off = 16
            while off > 0:
                s += cuda.shfl_xor_sync(_FULL, s, off)
                off //= 2
            m_new = max(m[g], s)
            c = math.exp(m[g] - m_new)
            p = math.exp(s - m_new)
            den[g] = den[g] * c + p
            m[g] = m_new
            for i in range(npl):
                acc[g * npl + i] = acc[g * npl + i] * c + p * vr[i]
    for g in range(G):                # the partial result: o normalised, and its lse
        h = kvh * G + g
        empty = den[g] == float32(0.0)
        inv = float32(0.0) if empty else float32(1.0) / den[g]
        for i in range(npl):
            part_o[b, h, sp, lane + 32 * i] = acc[g * npl + i] * inv
        if lane == 0:
            part_lse[b, h, sp] = float32(_NEG_INF) if empty else m[g] + math.log(den[g])


@cuda.jit
def _v3_merge_kernel(part_o, part_lse, out):
    b, h, lane = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    S = part_o.shape[2]
    npl = out.shape[2] // 32
    M = float32(_NEG_INF)
    for sp in range(S):
        M = max(M, part_lse[b, h, sp])
    acc = cuda.local.array(MAX_DIMS_PER_LANE, float32)
    for i in range(npl):
        acc[i] = float32(0.0)
    den = float32(0.0)
    if M != float32(_NEG_INF):
        for sp in range(S):
            w = math.exp(part_lse[b, h, sp] - M)
            den += w
            for i in range(npl):
                acc[i] += w * part_o[b, h, sp, lane + 32 * i]
    inv = float32(0.0) if den == float32(0.0) else float32(1.0) / den
    for i in range(npl):
        out[b, h, lane + 32 * i] = narrow(acc[i] * inv)


# ----------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------

def _bits(x, name: str):
    """A bfloat16 numpy array as its uint16 bits, contiguous (numba copies only contiguous
    buffers to the device: a strided view is copied here first), or a uint16 device array as it
    is. Raises ValueError for another dtype."""
    if is_device_array(x):
        if x.dtype != np.uint16:
            raise ValueError(f"{name}: a device array must hold the uint16 bits of bfloat16, "
                             f"got {x.dtype}")
        return x
    x = np.asarray(x)
    if x.dtype != BF16:
        raise ValueError(f"{name} must be bfloat16 (ml_dtypes), got {x.dtype}")
    return np.ascontiguousarray(x.view(np.uint16))


def _operands(q, k_cache, v_cache, block_table, seq_lens, out):
    q, kc, vc, o = (_bits(x, n) for x, n in ((q, "q"), (k_cache, "k_cache"),
                                             (v_cache, "v_cache"), (out, "out")))
    if q.ndim != 3 or o.shape != q.shape:
        raise ValueError(f"q and out must share one (B, Hq, d) shape, got {q.shape}, {o.shape}")
    B, Hq, d = q.shape
    if kc.ndim != 4 or kc.shape != vc.shape or kc.shape[3] != d:
        raise ValueError(f"k_cache, v_cache must be (num_blocks, block_size, Hkv, {d}), got "
                         f"{kc.shape} and {vc.shape}")
    Hkv = kc.shape[2]
    if d % 32 or not 32 <= d <= 32 * MAX_DIMS_PER_LANE:
        raise ValueError(f"d must be a multiple of 32 up to {32 * MAX_DIMS_PER_LANE}, got {d}")
    if Hq % Hkv or Hq // Hkv > MAX_GROUP:
        raise ValueError(f"Hq = {Hq} must be a multiple of Hkv = {Hkv}, at most {MAX_GROUP} x")
    for x, name, shape in ((block_table, "block_table", None), (seq_lens, "seq_lens", (B,))):
        if x.dtype != np.int32 or (shape and x.shape != shape) or x.shape[0] != B:
            raise ValueError(f"{name} must be int32 with B = {B} rows, got {x.dtype} "
                             f"{x.shape}")
    for x, name in ((block_table, "block_table"), (seq_lens, "seq_lens")):
        if not is_device_array(x) and not x.flags.c_contiguous:
            raise ValueError(f"{name} must be contiguous")
    return q, kc, vc, o, B, Hq, Hkv, d


def _written(out, o) -> None:
    """Copy the kernels' result ``o`` back into ``out`` when ``o`` was a contiguous copy of a
    strided numpy ``out`` (numba already copied it back into ``o``)."""
    if not is_device_array(out) and not np.shares_memory(np.asarray(out), o):
        np.asarray(out).view(np.uint16)[...] = o


def decode_v1(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits, out):
    """v1 per q-head (module docstring); ``num_splits`` ignored."""
    q, kc, vc, o, B, Hq, _, _ = _operands(q, k_cache, v_cache, block_table, seq_lens, out)
    _v1_kernel[(B, Hq), 32](q, kc, vc, block_table, seq_lens, np.float32(scale), o)
    _written(out, o)


def decode_v2(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits, out):
    """v2 GQA (module docstring); ``num_splits`` ignored."""
    q, kc, vc, o, B, _, Hkv, _ = _operands(q, k_cache, v_cache, block_table, seq_lens, out)
    _v2_kernel[(B, Hkv), 32](q, kc, vc, block_table, seq_lens, np.float32(scale), o)
    _written(out, o)


def decode_v3(q, k_cache, v_cache, block_table, seq_lens, scale, num_splits, out):
    """v3 split-KV and the log-sum-exp merge (module docstring): partials in float32 device
    arrays (B, Hq, num_splits, d) and (B, Hq, num_splits). Raises ValueError for
    num_splits < 1."""
    q, kc, vc, o, B, Hq, Hkv, d = _operands(q, k_cache, v_cache, block_table, seq_lens, out)
    S = int(num_splits)
    if S < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    bt = block_table if is_device_array(block_table) else cuda.to_device(block_table)
    sl = seq_lens if is_device_array(seq_lens) else cuda.to_device(seq_lens)
    part_o = cuda.device_array((B, Hq, S, d), np.float32)
    part_lse = cuda.device_array((B, Hq, S), np.float32)
    _v3_split_kernel[(B, Hkv, S), 32](q, kc, vc, bt, sl, np.float32(scale), part_o, part_lse)
    _v3_merge_kernel[(B, Hq), 32](part_o, part_lse, o)
    _written(out, o)


#: version name -> launch function, in ladder order.
LADDER = OrderedDict([("v1_per_q_head", decode_v1), ("v2_gqa", decode_v2),
                      ("v3_split_kv", decode_v3)])

#: version name -> its kernels.
KERNELS = {"v1_per_q_head": (_v1_kernel,), "v2_gqa": (_v2_kernel,),
           "v3_split_kv": (_v3_split_kernel, _v3_merge_kernel)}


# ----------------------------------------------------------------------------------------------
# the operands of a case, and the split's gain in modelled time
# ----------------------------------------------------------------------------------------------

def paged_operands(rng, seq_lens, Hq: int, Hkv: int, d: int, block_size: int = 16, *,
               spare_blocks: int = 2, shift: float = 0.0, tail_shift: float = 0.0):
    """Seeded operands of a paged decode (module docstring), bfloat16 (``ml_dtypes``): q and k
    standard normal plus ``shift`` (scores about shift^2 sqrt(d) at the scale 1/sqrt(d): 4 puts
    them past 100, where exp overflows float32 without the max), v standard normal;
    ``tail_shift`` adds to q and to the k of each sequence's last key only, which then scores
    about tail_shift^2 sqrt(d) above the others and carries most of the weight (a kernel that
    drops the last key is far off, however long the sequence); each
    sequence's blocks a random permutation of the physical blocks, ``spare_blocks`` more than
    needed; every slot no sequence uses NaN, and block-table entries past a sequence's last
    block -1 (out of range: reading one is a bug). Returns (q, k_cache, v_cache, block_table
    int32, seq_lens int32)."""
    seq_lens = np.asarray(seq_lens, np.int32)
    B = len(seq_lens)
    need = [-(-int(n) // block_size) for n in seq_lens]
    max_blocks = max(max(need), 1) + 1
    nb = sum(need) + spare_blocks
    perm = rng.permutation(nb)
    bt = np.full((B, max_blocks), -1, np.int32)
    k = rng.standard_normal((nb, block_size, Hkv, d)) + shift
    v = rng.standard_normal((nb, block_size, Hkv, d))
    used = np.zeros((nb, block_size), bool)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[at:at + n]
        at += n
        for t in range(int(seq_lens[b])):
            used[bt[b, t // block_size], t % block_size] = True
    for b, n in enumerate(seq_lens):
        if n > 0:
            k[bt[b, (n - 1) // block_size], (n - 1) % block_size] += tail_shift
    k[~used] = np.nan
    v[~used] = np.nan
    q = rng.standard_normal((B, Hq, d)) + shift + tail_shift
    return (q.astype(BF16), k.astype(BF16), v.astype(BF16), bt, seq_lens)


def split_gain(seq_len: int = 256, splits=(16, 1), Hq: int = 8, Hkv: int = 1, d: int = 128,
               profile: str = "a100", *, version=None) -> dict:
    """Batch 1's modelled time at each number of ``splits`` (sim tier only): ``version``
    (default :func:`decode_v3`) on one seeded case of ``seq_len`` keys, each launch's grid as
    launched and at least its busiest block on one SM (:func:`kernellab.sim.model.modelled_time`
    with ``busiest_block``; launch overheads left out), as Lab 8b's rules model it. Returns
    {"seconds": {S: s}, "roof_share": {S: the K and V bytes at the DRAM peak / that time},
    "blocks": {S: the first launch's grid size}, "gain": seconds at splits[-1] / at
    splits[0], "kv_bytes"}.
    One block walking thousands of keys overflows the compiled simulator's per-block log and
    runs on the slower greenlet path (:mod:`kernellab.sim.compiled`): keep ``seq_len`` / the
    fewest splits to a few hundred keys."""
    from kernellab import sim
    from kernellab.sim import model

    fn = version or decode_v3
    ops = paged_operands(np.random.default_rng(0), [seq_len], Hq, Hkv, d, spare_blocks=0)
    dev = [cuda.to_device(x.view(np.uint16)) for x in ops[:3]]
    bt, sl = cuda.to_device(ops[3]), cuda.to_device(ops[4])
    kv = 2 * seq_len * Hkv * d * 2
    roof = kv / model.get_profile(profile).dram_bytes_per_s
    out = {"seconds": {}, "roof_share": {}, "blocks": {}, "kv_bytes": kv}
    for S in splits:
        o = cuda.device_array((1, Hq, d), np.uint16)
        with sim.capture() as cap:
            fn(dev[0], dev[1], dev[2], bt, sl, 1.0 / math.sqrt(d), S, o)
        t = sum(model.modelled_time(x, profile, busiest_block=x.block_max).kernel_seconds
                for x in cap.launches)
        out["seconds"][S] = t
        out["roof_share"][S] = roof / t
        out["blocks"][S] = int(np.prod(cap.launches[0].grid))
    out["gain"] = out["seconds"][splits[-1]] / out["seconds"][splits[0]]
    return out


def main(argv=None) -> int:
    """``python -m kernellab.kernels.decode_attention``: every version checked against the
    golden reference on one GQA case, then batch 1's modelled time with and without the split
    (sim tier)."""
    import argparse

    from kernellab.numerics import compare, flash_attention_rule
    from reference_kernels.decode_attention import decode_golden, plain_error

    ap = argparse.ArgumentParser(prog="python -m kernellab.kernels.decode_attention",
                                 description=main.__doc__)
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[1, 37, 100])
    ap.add_argument("--heads", type=int, nargs=2, default=(8, 2), metavar=("HQ", "HKV"))
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--splits", type=int, default=4)
    a = ap.parse_args(argv)
    ops = paged_operands(np.random.default_rng(0), a.seq_lens, a.heads[0], a.heads[1], a.d)
    scale = 1.0 / math.sqrt(a.d)
    ref, _ = decode_golden(*ops, scale)
    rule = flash_attention_rule(plain_error(*ops, scale, ref), ref, BF16)
    ok = True
    for name, fn in LADDER.items():
        out = np.full(ops[0].shape, np.nan, BF16)
        fn(*ops, scale, a.splits, out)
        cmp = compare(out, ref, rule, tile=None)
        ok &= cmp.ok
        print(f"{name:15s} {'ok ' if cmp.ok else 'BAD'} {cmp.message}")
    from kernellab import device
    if device.select_tier() == "sim":
        for name in ("v2_gqa", "v3_split_kv"):
            g = split_gain(version=LADDER[name])
            print(f"{name}: batch 1, 256 keys, 8 q-heads on 1 kv head, d 128: "
                  f"{g['seconds'][16] * 1e6:.2f} µs at 16 splits, {g['seconds'][1] * 1e6:.2f} "
                  f"µs at 1: {g['gain']:.1f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    sys.exit(main())
