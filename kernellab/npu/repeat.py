"""The repeat/mask form of the vector instructions ("tensor high-dimensional slicing"): which
elements one instruction touches, and the reductions that exist only in this form.

One instruction runs ``repeat_times`` repeats (0 to 255). A repeat reads 8 data blocks of 32 B
(256 B: 128 half or 64 float lanes); block ``b`` of repeat ``r`` of an operand starts
``(r x rep_stride + b x blk_stride)`` blocks after the operand's start. The mask chooses the lanes
of every repeat that take part: an int ``m`` (continuous mode: the first ``m`` lanes, 1 to 128
for 16-bit types, 1 to 64 for 32-bit) or two 64-bit words ``[mask0, mask1]`` (bitwise mode: bit
``i`` of ``mask0`` is lane ``i``, bit ``i`` of ``mask1`` lane ``64 + i``; 32-bit types use
``mask0`` only). Lanes outside the mask are neither read nor written. Ascend C API reference,
"general description of the basic APIs" (``atlasascendc_api_07_0011``); the stride structs
``BinaryRepeatParams`` / ``UnaryRepeatParams`` (``atlasascendc_api_07_0013``, ``_0014``):
block strides default to 1, repeat strides to 8.

Cost: every repeat costs a full repeat whatever its mask (the unit works on 256 B at a time),
so the timing record is ``repeat_times x 256`` bytes of the op's class
(:mod:`kernellab.npu.timing`).

Reductions of this form: :func:`whole_reduce_sum` / :func:`whole_reduce_max` (one result per
repeat: WholeReduceSum ``atlasascendc_api_07_0081``, WholeReduceMax) and
:func:`block_reduce_sum` / :func:`block_reduce_max` (one result per 32 B block: BlockReduceSum,
BlockReduceMax). Sums add as the ReduceSum page describes a repeat: a binary tree over the
repeat's lanes, masked-off lanes adding 0, each add rounded to the operand type (fp16 partial
sums saturate at 65504); maxima are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernellab.npu import errors
from kernellab.npu.record import V, caller_src, format_src
from kernellab.npu.runtime import ctx
from kernellab.npu.tensors import LocalTensor

__all__ = ["BinaryRepeatParams", "UnaryRepeatParams", "BrcbRepeatParams", "MAX_REPEAT",
           "whole_reduce_sum", "whole_reduce_max", "block_reduce_sum", "block_reduce_max", "brcb"]

MAX_REPEAT = 255
"""Largest ``repeat_times`` (``atlasascendc_api_07_0011``)."""
BLOCK = 32
"""Bytes of a data block."""
BLOCKS = 8
"""Data blocks per repeat."""


@dataclass(frozen=True)
class BinaryRepeatParams:
    """Strides of a two-source instruction, in 32 B blocks (Ascend C ``BinaryRepeatParams``,
    positional order as there)."""

    dst_blk_stride: int = 1
    src0_blk_stride: int = 1
    src1_blk_stride: int = 1
    dst_rep_stride: int = 8
    src0_rep_stride: int = 8
    src1_rep_stride: int = 8


@dataclass(frozen=True)
class UnaryRepeatParams:
    """Strides of a one-source instruction (and of the scalar forms), in 32 B blocks (Ascend C
    ``UnaryRepeatParams``, positional order as there)."""

    dst_blk_stride: int = 1
    src_blk_stride: int = 1
    dst_rep_stride: int = 8
    src_rep_stride: int = 8


@dataclass(frozen=True)
class BrcbRepeatParams:
    """Strides of :func:`brcb`'s destination, in 32 B blocks (Ascend C ``BrcbRepeatParams``: a
    block stride of 0 counts as 1)."""

    dst_blk_stride: int = 1
    dst_rep_stride: int = 8


def lanes(mask, dtype: np.dtype, name: str, where) -> np.ndarray:
    """The lanes (0 .. lanes per repeat - 1) ``mask`` selects, as an int array. Raises
    ShapeError for a mask outside its mode's range."""
    per = 256 // dtype.itemsize
    w = format_src(where)
    if isinstance(mask, (int, np.integer)) and not isinstance(mask, bool):
        m = int(mask)
        if not 1 <= m <= per:
            raise errors.ShapeError(f"{w}\n{name}: a continuous mask of {dtype} lanes is 1 to "
                                    f"{per}, got {m}")
        return np.arange(m)
    if isinstance(mask, (list, tuple)) and len(mask) == 2 and \
            all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in mask):
        m0, m1 = (int(x) for x in mask)
        if not (0 <= m0 < 1 << 64 and 0 <= m1 < 1 << 64) or (m0 == 0 and m1 == 0):
            raise errors.ShapeError(f"{w}\n{name}: a bitwise mask is two 64-bit words, not both "
                                    f"0; got {list(mask)}")
        if per == 64 and m1:
            raise errors.ShapeError(f"{w}\n{name}: {dtype} has 64 lanes a repeat, so the second "
                                    f"word of a bitwise mask must be 0; got {m1:#x}")
        bits = [i for i in range(64) if m0 >> i & 1] + [64 + i for i in range(64) if m1 >> i & 1]
        return np.asarray(bits, dtype=np.int64)
    raise errors.ShapeError(f"{w}\n{name}: mask is an int (continuous mode) or two ints "
                            f"[mask0, mask1] (bitwise mode); got {mask!r}")


def repeats(repeat_times, name: str, where) -> int:
    if isinstance(repeat_times, bool) or not isinstance(repeat_times, (int, np.integer)) or \
            not 0 <= int(repeat_times) <= MAX_REPEAT:
        raise errors.ShapeError(f"{format_src(where)}\n{name}: repeat_times is an int from 0 to "
                                f"{MAX_REPEAT}, got {repeat_times!r}")
    return int(repeat_times)


def _stride(v, what, name, where) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) <= 255:
        raise errors.ShapeError(f"{format_src(where)}\n{name}: {what} is an int from 0 to 255 "
                                f"(uint8_t, in 32 B blocks), got {v!r}")
    return int(v)


def elements(t: LocalTensor, lane: np.ndarray, n_rep: int, blk_stride: int, rep_stride: int,
             name: str, role: str, where) -> np.ndarray:
    """Element offsets (from ``t``'s start), repeat-major and lane order within a repeat, of
    ``lane`` in each of ``n_rep`` repeats. Raises ShapeError past the end of ``t``."""
    blk_stride = _stride(blk_stride, f"{role} block stride", name, where)
    rep_stride = _stride(rep_stride, f"{role} repeat stride", name, where)
    epb = BLOCK // t.dtype.itemsize
    per_rep = (lane // epb) * blk_stride * epb + lane % epb
    idx = (np.arange(n_rep, dtype=np.int64)[:, None] * (rep_stride * epb) + per_rep[None, :])
    if idx.size and idx.max() >= t.size:
        raise errors.ShapeError(
            f"{format_src(where)}\n{name}: the {role} reaches element {int(idx.max())} "
            f"({n_rep} repeats, block stride {blk_stride}, repeat stride {rep_stride}), past "
            f"its {t.size} elements")
    return idx


def _tree(v: np.ndarray, dtype) -> np.ndarray:
    """Row-wise pairwise sums of ``v`` (float64, rows x lanes, a power of two wide), each add
    rounded to ``dtype`` (fp16 saturating at +-65504)."""
    from kernellab.npu.vector import _round

    while v.shape[1] > 1:
        v = _round(v[:, 0::2] + v[:, 1::2], dtype)
    return v[:, 0]


def _reduce(name, dst, src, mask, n_rep, dst_rep_stride, src_blk_stride, src_rep_stride,
            per_block: bool, op: str) -> None:
    from kernellab.npu.vector import _half_or_float, _vec_operands

    c = ctx()
    where = caller_src()
    _vec_operands(c, name, src, (), 1, where)        # UB, 32 B-aligned
    if not isinstance(dst, LocalTensor) or dst.position.memory != "UB":
        raise errors.PositionError(f"{format_src(where)}\n{name}: the destination is a UB "
                                   f"tensor, got {dst!r}")
    if dst.dtype != src.dtype:
        raise errors.DTypeError(f"{format_src(where)}\n{name}: dst is {dst.dtype}, src "
                                f"{src.dtype} (they must match)")
    _half_or_float(name, src.dtype, where)
    n_rep = repeats(n_rep, name, where)
    lane = lanes(mask, src.dtype, name, where)
    per = 256 // src.dtype.itemsize
    epb = BLOCK // src.dtype.itemsize
    s_idx = elements(src, lane, n_rep, src_blk_stride, src_rep_stride, name, "source", where)
    out_per_rep = BLOCKS if per_block else 1
    dst_rep_stride = _stride(dst_rep_stride, "destination repeat stride", name, where)
    d_idx = (np.arange(n_rep, dtype=np.int64)[:, None] * dst_rep_stride * out_per_rep
             + np.arange(out_per_rep)[None, :])
    blocks_used = np.unique(lane // epb) if per_block else None
    if per_block:  # a block with no lane in the mask writes nothing
        d_idx = d_idx[:, blocks_used]
    if d_idx.size and d_idx.max() >= dst.size:
        raise errors.ShapeError(f"{format_src(where)}\n{name}: the results reach element "
                                f"{int(d_idx.max())} of a {dst.size}-element destination")
    if n_rep:
        c.access(src, V, False, where, elems=s_idx.ravel(), what=name)
        full = np.full((n_rep, per), -np.inf if op == "max" else 0.0)
        full[:, lane] = src.np()[s_idx].astype(np.float64)
        if per_block:
            full = full.reshape(n_rep * BLOCKS, epb)
        if op == "max":
            r = full.max(axis=1)
        else:
            r = _tree(full, src.dtype)
        if per_block:
            r = r.reshape(n_rep, BLOCKS)[:, blocks_used]
        dst.np()[d_idx.ravel()] = r.ravel().astype(dst.dtype)
        c.access(dst, V, True, where, elems=d_idx.ravel(), what=name)
    c.op(V, name, ("vec", "reduce", n_rep * 256), where, flops=n_rep * len(lane))


def whole_reduce_sum(dst: LocalTensor, src: LocalTensor, mask, repeat_times: int,
                     dst_rep_stride: int, src_blk_stride: int, src_rep_stride: int) -> None:
    """One sum per repeat: ``dst[r x dst_rep_stride]`` = the sum of repeat ``r``'s masked lanes
    of ``src`` (Ascend C WholeReduceSum, ``atlasascendc_api_07_0081``; module docstring for the
    order of the adds). half or float; ``src`` 32 B-aligned, ``dst`` any element of UB. V pipe,
    reduce cost class per repeat. Raises PositionError, AlignmentError, ShapeError,
    DTypeError."""
    _reduce("whole_reduce_sum", dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride,
            src_rep_stride, False, "sum")


def whole_reduce_max(dst: LocalTensor, src: LocalTensor, mask, repeat_times: int,
                     dst_rep_stride: int, src_blk_stride: int, src_rep_stride: int) -> None:
    """One maximum per repeat, the value only (Ascend C WholeReduceMax with
    ``ReduceOrder::ORDER_ONLY_VALUE``; the value-and-index orders are not modelled)."""
    _reduce("whole_reduce_max", dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride,
            src_rep_stride, False, "max")


def block_reduce_sum(dst: LocalTensor, src: LocalTensor, repeat_times: int, mask,
                     dst_rep_stride: int, src_blk_stride: int, src_rep_stride: int) -> None:
    """One sum per 32 B block: repeat ``r``'s 8 sums go to ``dst[r x dst_rep_stride x 8 ...]``
    (``dst_rep_stride`` in units of one repeat's 8 results; a block with no lane in the mask
    writes nothing). Ascend C BlockReduceSum (its parameter order: repeat before mask)."""
    _reduce("block_reduce_sum", dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride,
            src_rep_stride, True, "sum")


def block_reduce_max(dst: LocalTensor, src: LocalTensor, repeat_times: int, mask,
                     dst_rep_stride: int, src_blk_stride: int, src_rep_stride: int) -> None:
    """One maximum per 32 B block, as :func:`block_reduce_sum` (Ascend C BlockReduceMax)."""
    _reduce("block_reduce_max", dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride,
            src_rep_stride, True, "max")


def brcb(dst: LocalTensor, src: LocalTensor, repeat_times: int,
         repeat_params: BrcbRepeatParams | None = None) -> None:
    """Broadcast each element to a 32 B block: repeat ``r`` reads ``src[8r .. 8r + 7]`` and
    fills block ``b`` of its 8 destination blocks with ``src[8r + b]`` (Ascend C Brcb,
    ``atlasascendc_api_07_0089``): how a per-row scalar in UB (a row's rstd) becomes an operand
    a vector instruction can read with block and repeat strides of 0. 16- and 32-bit types;
    ``src`` and ``dst`` must not overlap. V pipe, unary cost class per repeat. Raises
    PositionError, AlignmentError, ShapeError, DTypeError."""
    from kernellab.npu.vector import _vec_operands

    c = ctx()
    where = caller_src()
    _vec_operands(c, "brcb", dst, (src,), 1, where)
    if dst.dtype.itemsize not in (2, 4):
        raise errors.DTypeError(f"{format_src(where)}\nbrcb takes 16- or 32-bit elements, got "
                                f"{dst.dtype}")
    p = repeat_params if repeat_params is not None else BrcbRepeatParams()
    if not isinstance(p, BrcbRepeatParams):
        raise errors.ShapeError(f"{format_src(where)}\nbrcb takes an asc.BrcbRepeatParams, "
                                f"got {type(p).__name__}")
    n_rep = repeats(repeat_times, "brcb", where)
    if 8 * n_rep > src.size:
        raise errors.ShapeError(f"{format_src(where)}\nbrcb: {n_rep} repeats read "
                                f"{8 * n_rep} source elements, past its {src.size}")
    epb = BLOCK // dst.dtype.itemsize
    lane = np.arange(BLOCKS * epb)
    d_idx = elements(dst, lane, n_rep, p.dst_blk_stride or 1, p.dst_rep_stride, "brcb",
                     "destination", where)
    isz = dst.dtype.itemsize
    if n_rep and dst._mem is src._mem:     # the bytes the call reads and writes, not the views
        s_lo, s_hi = src._boff, src._boff + 8 * n_rep * isz
        d_lo, d_hi = dst._boff + int(d_idx.min()) * isz, dst._boff + (int(d_idx.max()) + 1) * isz
        if s_lo < d_hi and d_lo < s_hi:
            raise errors.ShapeError(f"{format_src(where)}\nbrcb: the elements it reads and "
                                    f"those it writes overlap (Brcb does not support it)")
    if n_rep:
        s_idx = np.arange(8 * n_rep)
        c.access(src, V, False, where, elems=s_idx, what="brcb")
        vals = src.np()[s_idx].reshape(n_rep, BLOCKS)
        dst.np()[d_idx.ravel()] = np.repeat(vals, epb, axis=1).ravel()
        c.access(dst, V, True, where, elems=d_idx.ravel(), what="brcb")
    c.op(V, "brcb", ("vec", "unary", n_rep * 256), where, flops=0)


def elementwise(name, dst, srcs, mask, repeat_times, params, where, compute,
                cls: str, flops: bool = True) -> None:
    """The repeat form of an element-wise instruction: ``compute(*sources)`` (float32 or
    integer arrays of the selected elements, repeat-major) written to ``dst``'s selected
    elements, rounded to its dtype. ``params``: a :class:`BinaryRepeatParams` for two sources,
    a :class:`UnaryRepeatParams` for one or none (None: the defaults). ``flops``: count the
    selected elements as vector operations (not for a fill). Raises the operand checks'
    errors (:func:`kernellab.npu.vector._vec_operands`) and ShapeError."""
    from kernellab.npu.vector import _f32, _vec_operands

    c = ctx()
    _vec_operands(c, name, dst, srcs, 1, where)
    want = BinaryRepeatParams if len(srcs) == 2 else UnaryRepeatParams
    if params is None:
        params = want()
    if not isinstance(params, want):
        raise errors.ShapeError(f"{format_src(where)}\n{name}: the repeat form takes an "
                                f"asc.{want.__name__}, got {type(params).__name__}")
    n_rep = repeats(repeat_times, name, where)
    lane = lanes(mask, dst.dtype, name, where)
    if len(srcs) == 2:
        strides = [(params.dst_blk_stride, params.dst_rep_stride),
                   (params.src0_blk_stride, params.src0_rep_stride),
                   (params.src1_blk_stride, params.src1_rep_stride)]
    else:
        strides = [(params.dst_blk_stride, params.dst_rep_stride),
                   (params.src_blk_stride, params.src_rep_stride)]
    roles = ("destination", "first source", "second source") if len(srcs) == 2 else \
        ("destination", "source")
    idx = [elements(t, lane, n_rep, b, r, name, role, where).ravel()
           for t, (b, r), role in zip((dst, *srcs), strides, roles)]
    if n_rep:
        for t, i in zip(srcs, idx[1:]):
            c.access(t, V, False, where, elems=i, what=name)
        with np.errstate(all="ignore"):
            r = compute(*[_f32(t.np()[i]) for t, i in zip(srcs, idx[1:])])
        dst.np()[idx[0]] = np.asarray(r).astype(dst.dtype)
        c.access(dst, V, True, where, elems=idx[0], what=name)
    c.op(V, name, ("vec", cls, n_rep * 256), where, flops=n_rep * len(lane) if flops else 0)

