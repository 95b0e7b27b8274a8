"""The vector unit's instructions of :mod:`kernellab.npu.asc` (re-exported there; students call
them as ``asc.add`` ...), count form (and the repeat/mask form of :mod:`kernellab.npu.repeat`
for the element-wise ones), on the V pipe, operands in UB and 32 B-aligned: binary
(add, sub, mul, div, max, min), with a scalar (adds, muls, maxs, mins), unary (exp, ln, sqrt,
rsqrt, reciprocal, abs, relu), cast, duplicate, reduce_sum, reduce_max (dst, src, tmp, count).
Element-wise arithmetic in float32, rounded to the destination dtype; reduce_sum adds in the
operand type, in the vendor's order. Sources: Ascend C programming guide (hiascend.com), "Vector
Programming" and the vector-compute API pages; pyasc's ``docs/python-api``,
https://github.com/hicann/pyasc.
"""

from __future__ import annotations

import builtins

import numpy as np

from kernellab.npu import errors, repeat
from kernellab.npu.record import V, caller_src, format_src
from kernellab.npu.runtime import ctx
from kernellab.npu.tensors import LocalTensor
from kernellab.npu.dma import _count


def _vec_operands(c, name, dst, srcs, count, where, same_dtype=True, dst_n=None):
    count = _count(count, where)
    for t in (dst, *srcs):
        if not isinstance(t, LocalTensor):
            raise errors.PositionError(
                f"{format_src(where)}\n{name}: vector ops take local UB tensors, got "
                f"{type(t).__name__} (GM tensors are reached with data_copy)")
        if t.position.memory != "UB":
            raise errors.PositionError(
                f"{format_src(where)}\n{name}: vector ops work on UB tensors "
                f"(VECIN/VECOUT/VECCALC); got a {t.position.name} ({t.position.memory}) tensor")
        if t._boff % 32:
            raise errors.AlignmentError(
                f"{format_src(where)}\n{name}: operand starts at UB offset {t._boff}, not a "
                f"multiple of 32 B (vector operands are 32 B-aligned)")
        need = dst_n if (t is dst and dst_n is not None) else count
        if need > t.size:
            raise errors.ShapeError(f"{format_src(where)}\n{name}: count {need} exceeds an "
                                    f"operand of {t.size} elements")
    c.check_core(dst.position, name, where)
    if same_dtype:
        for t in srcs:
            if t.dtype != dst.dtype:
                raise errors.DTypeError(
                    f"{format_src(where)}\n{name}: operand dtypes differ ({dst.dtype} dst, "
                    f"{t.dtype} src); use asc.cast first")
    return count


def _f32(a):
    return a.astype(np.float32) if a.dtype.kind == "f" and a.dtype.itemsize < 4 else a


def _binary(name, fn, cls="binary"):
    def op(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, count, repeat_times=None,
           repeat_params=None) -> None:
        c = ctx()
        where = caller_src()
        if repeat_times is not None:        # the repeat form: count is the mask
            return repeat.elementwise(name, dst, (src0, src1), count, repeat_times,
                                      repeat_params, where, fn, cls)
        count = _vec_operands(c, name, dst, (src0, src1), count, where)
        for t in (src0, src1):
            c.access(t, V, False, where, count, what=name)
        a, b = src0.np(count), src1.np(count)
        with np.errstate(all="ignore"):
            r = fn(_f32(a), _f32(b))
        dst.np(count)[...] = r.astype(dst.dtype) if r.dtype != dst.dtype else r
        nb = count * dst.dtype.itemsize
        c.access(dst, V, True, where, count, what=name)
        c.op(V, name, ("vec", cls, nb), where, flops=count)

    op.__name__ = name
    op.__doc__ = (f"``dst[i] = {name}(src0[i], src1[i])`` for ``i < count`` (V pipe, "
                  f"{cls} cost class); or, as ``{name}(dst, src0, src1, mask, repeat_times, "
                  f"repeat_params)``, the repeat form (:mod:`kernellab.npu.repeat`, an "
                  f"``asc.BinaryRepeatParams``). Raises PositionError, AlignmentError, "
                  f"ShapeError, DTypeError.")
    return op


def _int_div(a, b):
    return a // b if a.dtype.kind in "iu" else a / b


add = _binary("add", np.add)
sub = _binary("sub", np.subtract)
mul = _binary("mul", np.multiply)
div = _binary("div", _int_div, "div")
max = _binary("max", np.maximum)  # noqa: A001 - Ascend C name
min = _binary("min", np.minimum)  # noqa: A001 - Ascend C name


def _scalar(name, fn):
    def op(dst: LocalTensor, src: LocalTensor, scalar, count, repeat_times=None,
           repeat_params=None) -> None:
        c = ctx()
        where = caller_src()
        scalar = scalar_value(scalar, name, where)
        if repeat_times is not None:        # the repeat form: count is the mask
            s = _f32(np.asarray(scalar, dtype=dst.dtype))
            return repeat.elementwise(name, dst, (src,), count, repeat_times, repeat_params,
                                      where, lambda a: fn(a, s), "unary")
        count = _vec_operands(c, name, dst, (src,), count, where)
        c.access(src, V, False, where, count, what=name)
        a = src.np(count)
        s = np.asarray(scalar, dtype=dst.dtype)  # the scalar is converted to the tensor dtype
        with np.errstate(all="ignore"):
            r = fn(_f32(a), _f32(s))
        dst.np(count)[...] = r.astype(dst.dtype)
        c.access(dst, V, True, where, count, what=name)
        c.op(V, name, ("vec", "unary", count * dst.dtype.itemsize), where, flops=count)

    op.__name__ = name
    op.__doc__ = (f"``dst[i] = {name[:-1]}(src[i], scalar)`` for ``i < count`` (V pipe, "
                  "unary cost class; the scalar is converted to the tensor dtype first); or "
                  f"``{name}(dst, src, scalar, mask, repeat_times, repeat_params)``, the repeat "
                  "form with an ``asc.UnaryRepeatParams``.")
    return op


adds = _scalar("adds", np.add)
muls = _scalar("muls", np.multiply)
maxs = _scalar("maxs", np.maximum)
mins = _scalar("mins", np.minimum)


def _unary(name, fn, cls="unary"):
    def op(dst: LocalTensor, src: LocalTensor, count, repeat_times=None,
           repeat_params=None) -> None:
        c = ctx()
        where = caller_src()
        if repeat_times is not None:        # the repeat form: count is the mask
            return repeat.elementwise(name, dst, (src,), count, repeat_times, repeat_params,
                                      where, fn, cls)
        count = _vec_operands(c, name, dst, (src,), count, where)
        c.access(src, V, False, where, count, what=name)
        a = src.np(count)
        with np.errstate(all="ignore"):
            r = fn(_f32(a))
        dst.np(count)[...] = r.astype(dst.dtype)
        c.access(dst, V, True, where, count, what=name)
        c.op(V, name, ("vec", cls, count * dst.dtype.itemsize), where, flops=count)

    op.__name__ = name
    op.__doc__ = (f"``dst[i] = {name}(src[i])`` for ``i < count`` (V pipe, {cls} cost "
                  f"class); or ``{name}(dst, src, mask, repeat_times, repeat_params)``, the "
                  f"repeat form with an ``asc.UnaryRepeatParams``.")
    return op


exp = _unary("exp", np.exp, "transcendental")
ln = _unary("ln", np.log, "transcendental")
sqrt = _unary("sqrt", np.sqrt, "transcendental")
rsqrt = _unary("rsqrt", lambda a: 1 / np.sqrt(a), "transcendental")
reciprocal = _unary("reciprocal", lambda a: 1 / a, "transcendental")
abs = _unary("abs", np.abs)  # noqa: A001 - Ascend C name
relu = _unary("relu", lambda a: np.maximum(a, 0))

_ROUND = {
    "none": np.rint, "rint": np.rint, "round": lambda a: np.sign(a) * np.floor(np.abs(a) + 0.5),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
}


def cast(dst: LocalTensor, src: LocalTensor, round_mode: str, count: int) -> None:
    """``dst[i] = src[i]`` converted to ``dst``'s dtype (V pipe). ``round_mode`` ("none",
    "rint", "round", "floor", "ceil", "trunc") applies to float -> int casts; float -> float
    casts round to nearest even (as "none"/"rint" do)."""
    c = ctx()
    where = caller_src()
    if round_mode not in _ROUND:
        raise errors.ShapeError(f"{format_src(where)}\ncast round_mode must be one of "
                                f"{sorted(_ROUND)}, got {round_mode!r}")
    count = _vec_operands(c, "cast", dst, (src,), count, where, same_dtype=False)
    c.access(src, V, False, where, count, what="cast")
    a = src.np(count)
    if dst.dtype.kind in "iu" and src.dtype.kind == "f":
        info = np.iinfo(dst.dtype)
        with np.errstate(all="ignore"):
            r = np.clip(_ROUND[round_mode](a.astype(np.float64)), info.min, info.max)
        dst.np(count)[...] = r.astype(dst.dtype)
    else:
        dst.np(count)[...] = a.astype(dst.dtype)
    nb = count * builtins.max(dst.dtype.itemsize, src.dtype.itemsize)
    c.access(dst, V, True, where, count, what="cast")
    c.op(V, "cast", ("vec", "unary", nb), where, flops=count)


def scalar_value(scalar, name: str, where) -> float | int:
    """``scalar`` as one Python number (an int, a float or a NumPy scalar: what a scalar
    register holds). Raises ShapeError for anything else: an array in a scalar's place would
    move data the vector unit never read."""
    if isinstance(scalar, (bool, np.bool_)) or np.ndim(scalar) != 0 or not isinstance(
            scalar, (int, float, np.integer, np.floating)):
        raise errors.ShapeError(
            f"{format_src(where)}\n{name}: the scalar operand is one number (a scalar "
            f"register), got {type(scalar).__name__}{getattr(scalar, 'shape', '')}")
    return scalar.item() if isinstance(scalar, np.generic) else scalar


def duplicate(dst: LocalTensor, scalar, count, repeat_times=None, dst_blk_stride=1,
              dst_rep_stride=8) -> None:
    """``dst[i] = scalar`` for ``i < count`` (V pipe); or ``duplicate(dst, scalar, mask,
    repeat_times, dst_blk_stride, dst_rep_stride)``, the repeat form (Ascend C Duplicate takes
    the two strides itself; :mod:`kernellab.npu.repeat`). ``scalar`` is one number
    (:func:`scalar_value`)."""
    c = ctx()
    where = caller_src()
    scalar = scalar_value(scalar, "duplicate", where)
    if repeat_times is not None:        # the repeat form: count is the mask
        params = repeat.UnaryRepeatParams(dst_blk_stride, 1, dst_rep_stride, 8)
        return repeat.elementwise("duplicate", dst, (), count, repeat_times, params, where,
                                  lambda: np.asarray(scalar, dtype=dst.dtype), "unary",
                                  flops=False)
    count = _vec_operands(c, "duplicate", dst, (), count, where)
    dst.np(count)[...] = np.asarray(scalar, dtype=dst.dtype)
    c.access(dst, V, True, where, count, what="duplicate")
    c.op(V, "duplicate", ("vec", "unary", count * dst.dtype.itemsize), where, flops=0)


_HALF_MAX = 65504.0


def _tree_sum(v: np.ndarray, dtype) -> np.float64:
    """Pairwise sum of ``v`` in ``dtype``: (v0+v1), (v2+v3) ... then the pairs' sums, each
    add rounded to ``dtype`` (fp16 partial sums above 65504 are kept at 65504: ReduceSum page;
    below -65504 kept at -65504: [A] assumed, see :func:`_round`)."""
    v = v.astype(np.float64)
    while v.size > 1:
        if v.size % 2:
            v = np.append(v, 0.0)
        v = _round(v[0::2] + v[1::2], dtype)
    return v[0] if v.size else np.float64(0)


def _round(x, dtype):
    """``x`` (float64) rounded to ``dtype``; fp16 saturates instead of overflowing. The
    ReduceSum page (``atlasascendc_api_07_0078``) documents only the positive case (a sum above
    65504 is kept at 65504); the symmetric clamp at -65504 is [A] assumed (not on the page)."""
    if dtype == np.float16:
        x = np.clip(x, -_HALF_MAX, _HALF_MAX)
    return np.asarray(x).astype(dtype).astype(np.float64)


def _half_or_float(name, dtype, where) -> None:
    """Raise DTypeError unless ``dtype`` is half or float (the reductions' dtypes on A2/A3)."""
    if dtype not in (np.float16, np.float32):
        raise errors.DTypeError(f"{format_src(where)}\n{name} takes half or float tensors "
                                f"(Ascend C {name}), got {dtype}")


def _reduce_operands(name, dst, src, tmp, count, where):
    c = ctx()
    count = _vec_operands(c, name, dst, (src,), count, where, dst_n=1)
    _vec_operands(c, name, tmp, (), 1, where, same_dtype=False)   # UB, 32 B-aligned
    if tmp.dtype != src.dtype:
        raise errors.DTypeError(f"{format_src(where)}\n{name}: tmp is {tmp.dtype}, src "
                                f"{src.dtype} (they must match)")
    _half_or_float(name, src.dtype, where)
    per_block, per_repeat = 32 // src.dtype.itemsize, 256 // src.dtype.itemsize
    need = -(-builtins.max(1, count // per_repeat) // per_block) * per_block
    if tmp.size < need:
        raise errors.ShapeError(
            f"{format_src(where)}\n{name}: the tmp tensor holds {tmp.size} elements, but "
            f"{count} x {src.dtype} needs at least {need} (one per 256 B repeat, rounded up to "
            f"32 B: the workLocal size rule of the {name} page)")
    return c, count, per_repeat


def reduce_sum(dst: LocalTensor, src: LocalTensor, tmp: LocalTensor, count: int) -> None:
    """``dst[0] = sum(src[:count])`` as Atlas A2/A3 add (Ascend C ReduceSum, count form,
    ``atlasascendc_api_07_0078``, "method 2"): within each 256 B repeat a binary tree of
    pairwise adds, then the repeats' sums one after another, every add rounded to the operand
    type; a half partial sum above 65504 is kept at 65504. ``tmp`` (``sharedTmpBuffer`` /
    ``workLocal``) receives the per-repeat sums and must hold ``ceil(max(1, count / repeat) /
    block) x block`` elements (the page's minimum: ``floor``, so a tail repeat may have no
    slot). At most ``tmp.size`` partials are written: a tail repeat's sum that finds no slot
    is folded into the running total only, never written past ``tmp``. half or float only.
    V pipe, reduce cost class. Raises PositionError, AlignmentError, ShapeError, DTypeError."""
    where = caller_src()
    c, count, per_repeat = _reduce_operands("reduce_sum", dst, src, tmp, count, where)
    c.access(src, V, False, where, count, what="reduce_sum")
    a = src.np(count)
    sums = [_tree_sum(a[i:i + per_repeat], src.dtype) for i in range(0, count, per_repeat)]
    total = np.float64(0)
    for i, part in enumerate(sums):
        total = part if i == 0 else _round(total + part, src.dtype)
    kept = builtins.min(len(sums), tmp.size)          # never past the end of tmp
    c.access(tmp, V, True, where, kept, what="reduce_sum")
    tmp.np(kept)[...] = np.asarray(sums[:kept]).astype(tmp.dtype)
    dst.np(1)[0] = np.asarray(total).astype(dst.dtype)
    c.access(dst, V, True, where, 1, what="reduce_sum")
    c.op(V, "reduce_sum", ("vec", "reduce", count * src.dtype.itemsize), where, flops=count)


def reduce_max(dst: LocalTensor, src: LocalTensor, tmp: LocalTensor, count: int) -> None:
    """``dst[0] = max(src[:count])`` (Ascend C ReduceMax, count form, without the index; exact
    in any order). ``tmp`` as for :func:`reduce_sum` (it receives at most ``tmp.size`` of the
    per-repeat maxima; the rest only enter the result).
    half or float only. V pipe, reduce cost class."""
    where = caller_src()
    c, count, per_repeat = _reduce_operands("reduce_max", dst, src, tmp, count, where)
    c.access(src, V, False, where, count, what="reduce_max")
    a = src.np(count)
    parts = [a[i:i + per_repeat].max() for i in range(0, count, per_repeat)]
    kept = builtins.min(len(parts), tmp.size)         # never past the end of tmp
    c.access(tmp, V, True, where, kept, what="reduce_max")
    tmp.np(kept)[...] = np.asarray(parts[:kept]).astype(tmp.dtype)
    dst.np(1)[0] = np.asarray(parts).max().astype(dst.dtype)
    c.access(dst, V, True, where, 1, what="reduce_max")
    c.op(V, "reduce_max", ("vec", "reduce", count * src.dtype.itemsize), where, flops=count)
