"""The cube unit's instructions of :mod:`kernellab.npu.asc` (re-exported there; students call
them as ``asc.mmad`` ...): :func:`load_data` (L1 -> L0A/L0B on MTE1), :func:`mmad` (on the
cube, pipe M: C = A·B or C += A·B into L0C, fp16/bf16 -> fp32, int8 -> int32) and
:func:`fixpipe` (L0C -> GM on FIX). Sources: Ascend C programming guide (hiascend.com), "Matrix
Programming" (LoadData, Mmad, Fixpipe); pyasc's ``docs/python-api``,
https://github.com/hicann/pyasc.
"""

from __future__ import annotations

import builtins
import contextlib
from dataclasses import dataclass

import numpy as np

from kernellab.npu import errors
from kernellab.npu.fractal import decode, encode, fractal_shape
from kernellab.npu.memory import align_up
from kernellab.npu.record import FIX, M, MTE1, caller_src, format_src
from kernellab.npu.runtime import ctx
from kernellab.npu.tensors import GlobalTensor, LocalTensor, TPosition
from kernellab.npu.dma import _paths_help, _segments


@dataclass(frozen=True)
class LoadData2DParams:
    """Ascend C ``LoadData2DParams`` (Load2D page, ``atlasascendc_api_07_0238``), in fractals of
    512 B: ``repeat_times`` source fractals, the first at ``start_index``, ``src_stride`` apart,
    written one after another into the destination with ``dst_gap`` fractals between them; each
    transposed in place when ``if_transpose`` (2-byte types only: an int8 B needs
    LoadDataWithTranspose, ``atlasascendc_api_07_0239``, whose parameter form is not modelled;
    the block form ``load_data(..., transpose=True)`` gives its result). ``sid`` and
    ``addrMode`` are not modelled."""

    start_index: int = 0
    repeat_times: int = 1
    src_stride: int = 1
    dst_gap: int = 0
    if_transpose: bool = False


def _load_2d(c, dst, src, p: LoadData2DParams, where) -> None:
    """The fractal walk of LoadData2DParams: bytes only, no shape (the cube reads the result by
    mmad's m, n, k, as the hardware does)."""
    isz = src.dtype.itemsize
    fe = 512 // isz                                      # elements per fractal
    fr, fc = 16, 32 // isz
    if p.if_transpose and isz != 2:
        raise errors.DTypeError(f"{format_src(where)}\nLoadData2DParams.if_transpose on "
                                f"{src.dtype}: Load2D transposes 16 x 16 fractals of 2-byte "
                                "types; int8 needs LoadDataWithTranspose (not modelled)")
    if p.repeat_times < 1 or p.start_index < 0 or p.src_stride < 0 or p.dst_gap < 0:
        raise errors.ShapeError(f"{format_src(where)}\n{p}: repeat_times >= 1 and the other "
                                "fields >= 0")
    last_src = (p.start_index + (p.repeat_times - 1) * p.src_stride + 1) * fe
    span = ((p.repeat_times - 1) * (1 + p.dst_gap) + 1) * fe
    if last_src > src.size or span > dst.size:
        raise errors.ShapeError(
            f"{format_src(where)}\nload_data {p}: reads fractals up to element {last_src} of "
            f"an L1 tensor of {src.size} and writes {span} elements into one of {dst.size}")
    nzb = src._mem.nz[src._boff:src._boff + last_src * isz]
    if not nzb.all():
        raise errors.ShapeError(f"{format_src(where)}\nload_data reads L1 bytes that a 1-D "
                                "data_copy filled last (ND rows, not NZ fractals); fill the L1 "
                                "tensor with data_copy(..., nd2nz=...)")
    c.access(src, MTE1, False, where, last_src, what="load_data")
    c.access(dst, MTE1, True, where, span, what="load_data")
    s_all, d_all = src.np(last_src), dst.np(span)
    for r in range(p.repeat_times):
        si = (p.start_index + r * p.src_stride) * fe
        f = s_all[si:si + fe].reshape(fr, fc)
        di = r * (1 + p.dst_gap) * fe
        d_all[di:di + fe] = (f.T if p.if_transpose else f).reshape(-1)
    dst._alloc.raw = True
    nb = p.repeat_times * 512
    c.op(MTE1, "load_data", ("load", dst.position.memory, nb), where, nb,
         path=f"L1->{dst.position.memory}")


def load_data(dst: LocalTensor, src: LocalTensor, params: LoadData2DParams | None = None, *,
              row: int = 0, col: int = 0, rows: int | None = None, cols: int | None = None,
              transpose: bool = False) -> None:
    """With ``params`` (a :class:`LoadData2DParams`): the real Load2D fractal walk, for kernels
    ported from Ascend C; the L0 tensor then has no shape, and ``mmad`` reads it by m, n, k
    (ZZ for A, ZN for B) — so a walk that leaves B's fractals row-major gives a wrong C, as on
    the hardware. Without ``params``, the block form below.

    Copy the fractal-aligned block ``src[row:row+rows, col:col+cols]`` of a 2-D L1 tensor
    (NZ) into an L0A (A2) or L0B (B2) tensor on MTE1, fractal by fractal. ``row`` and ``rows``
    must be multiples of 16, ``col`` and ``cols`` of 32 B.

    The block's fractals are written in row-major order (big Z: what LoadData2DParams'
    ``startIndex``/``srcStride``/``repeatTimes`` walk does on the hardware), each one as L1
    holds it (row-major, small z) or, with ``transpose=True``, transposed (column-major,
    small n). The flag reorders bytes; the matrix the tensor holds stays the block. So A goes
    to L0A without the flag (ZZ) and B to L0B with it (ZN), as the Ascend C matmul samples do
    ("transform nz to zn"); the cube rejects the other two
    (:class:`~kernellab.npu.errors.LayoutError`). For 2-byte types the flag is Load2D's
    ``LoadData2DParams.ifTranspose``: each 16 x 16 fractal transposed in place. For int8 it
    models ``LoadDataWithTranspose`` (``atlasascendc_api_07_0239``): the ZN fractal is 32 x 16
    (Mmad page), so each one is drawn from two 16 x 32 L1 fractals (one 32 x 32 square
    transposed and split again), not a fractal transposed in place; an int8 block loaded with
    the flag needs rows in multiples of 32. Only the result is modelled, not
    LoadDataWithTranspose's own parameters. Raises PositionError, ShapeError, AlignmentError,
    DTypeError."""
    c = ctx()
    where = caller_src()
    for t in (dst, src):
        if not isinstance(t, LocalTensor):
            raise errors.PositionError(f"{format_src(where)}\nload_data moves L1->L0A/L0B "
                                       f"between local tensors, got {type(t).__name__}")
    if src.position.memory != "L1" or dst.position.memory not in ("L0A", "L0B"):
        raise errors.PositionError(
            f"{format_src(where)}\nload_data {src.position.name}->{dst.position.name}: "
            f"load_data moves L1 (A1/B1) -> L0A (A2) / L0B (B2) here. {_paths_help()}")
    c.check_core(dst.position, "load_data", where)
    if dst.dtype != src.dtype:
        raise errors.DTypeError(f"{format_src(where)}\nload_data: dst {dst.dtype}, src "
                                f"{src.dtype}")
    if src.rows is None:
        raise errors.ShapeError(f"{format_src(where)}\nload_data: the L1 tensor has no 2-D "
                                "shape yet; fill it with data_copy(..., nd2nz=...) first")
    if dst._boff % dst._mem.align:
        raise errors.AlignmentError(f"{format_src(where)}\nload_data: destination starts at "
                                    f"{dst._mem.name} offset {dst._boff}, not a multiple of "
                                    f"{dst._mem.align} B")
    if params is not None:
        if not isinstance(params, LoadData2DParams):
            raise errors.ShapeError(f"{format_src(where)}\nload_data's third argument is a "
                                    f"LoadData2DParams, got {type(params).__name__}")
        _load_2d(c, dst, src, params, where)
        return
    isz = src.dtype.itemsize
    c0 = 32 // isz
    rows = src.rows - row if rows is None else int(rows)
    cols = src.cols - col if cols is None else int(cols)
    if row % 16 or rows % 16 or col % c0 or cols % c0:
        raise errors.AlignmentError(
            f"{format_src(where)}\nload_data block at ({row}, {col}) of {rows}x{cols}: rows "
            f"and row offsets must be multiples of 16, cols and col offsets of {c0} "
            f"(one 32 B fractal row)")
    if row < 0 or col < 0 or rows < 1 or cols < 1 or row + rows > src.rows or \
            col + cols > src.cols:
        raise errors.ShapeError(f"{format_src(where)}\nload_data block ({row}:{row + rows}, "
                                f"{col}:{col + cols}) is outside the {src.rows}x{src.cols} L1 "
                                "tensor")
    layout = "ZN" if transpose else "ZZ"
    fr, fc = fractal_shape(layout, isz, dst.position.memory)
    if rows % fr or cols % fc:
        raise errors.AlignmentError(
            f"{format_src(where)}\nload_data(..., transpose=True) of a {rows}x{cols} {src.dtype} "
            f"block: a transposed ({layout}) fractal of {src.dtype} is {fr}x{fc}, so rows must "
            f"be a multiple of {fr} and cols of {fc}")
    if rows * cols > dst.size:
        raise errors.ShapeError(f"{format_src(where)}\nload_data of {rows}x{cols} elements into "
                                f"an {dst.position.name} tensor of {dst.size}")
    nzb = src._mem.nz[src._boff:src._boff + src.rows * src.cols * isz]
    if not nzb.all():
        raise errors.ShapeError(
            f"{format_src(where)}\nload_data reads L1 bytes that a 1-D data_copy filled last "
            f"(byte {src._boff + int((~nzb).argmax())} of {src.position.name}): that is ND "
            "layout, row after row, and the cube's L0 loads read NZ fractals; fill the L1 "
            "tensor with data_copy(..., nd2nz=(rows, cols, src_stride)).")
    c.access(src, MTE1, False, where, src.rows * src.cols, what="load_data")
    c.access(dst, MTE1, True, where, rows * cols, what="load_data")
    sfr, sfc = fractal_shape("NZ", isz, "L1")
    whole = decode(src.np(src.rows * src.cols), "NZ", src.rows, src.cols, sfr, sfc)
    block = whole[row:row + rows, col:col + cols]
    dst.np(rows * cols)[...] = encode(block, layout, fr, fc)
    dst.rows, dst.cols, dst.fmt = rows, cols, layout
    dst._alloc.srcs["load_data"] = where          # for mmad's LayoutError: where to add the flag
    nb = rows * cols * dst.dtype.itemsize
    c.op(MTE1, "load_data", ("load", dst.position.memory, nb), where, nb,
         path=f"L1->{dst.position.memory}")


def _operand(t: LocalTensor, name: str, want: str, where, shape=None) -> np.ndarray:
    """The matrix an L0A/L0B tensor holds, read as the cube reads it (``want``: ZZ for A, ZN
    for B). Raises LayoutError when the tensor's fractals are the other way round. A tensor
    filled by LoadData2DParams walks has no shape or tag: it is read as ``want`` with
    ``shape`` (from m, n, k, padded to fractals), right or wrong, as the hardware reads it."""
    fr, fc = fractal_shape(want, t.dtype.itemsize, t.position.memory)
    if t.rows is None and t._alloc.raw and shape is not None:
        r, cc = align_up(shape[0], fr), align_up(shape[1], fc)
        if r * cc > t.size:
            raise errors.ShapeError(f"{format_src(where)}\nmmad: {name} of {r}x{cc} (padded) "
                                    f"does not fit the {t.position.name} tensor of {t.size}")
        return decode(t.np(r * cc), want, r, cc, fr, fc)
    if t.fmt != want:
        loaded = t._alloc.srcs.get("load_data")
        at = format_src(loaded, code=False) if loaded else "its load_data call"
        fix = ("without transpose=True; add transpose=True to that call" if want == "ZN" else
               "with transpose=True; remove transpose=True from that call")
        got = ("row-major (ZZ: L1's NZ fractals copied as they are)" if t.fmt == "ZZ" else
               "column-major (ZN: transposed by load_data(..., transpose=True))")
        raise errors.LayoutError(
            f"{format_src(where)}\n{name} was loaded at {at} {fix}.\n"
            f"Why: mmad reads {name} from {t.position.memory} as {want} "
            f"(fractals in row-major order, each one "
            f"{'column' if want == 'ZN' else 'row'}-major: Ascend C Mmad page), but this "
            f"{t.position.name} tensor's fractals are {got}. On the hardware the cube would "
            f"read every fractal of {name} transposed and compute a wrong result.")
    return decode(t.np(t.rows * t.cols), want, t.rows, t.cols, fr, fc)


_MMAD_TYPES = {("float16", "float32"): "f16", ("bfloat16", "float32"): "f16",
               ("int8", "int32"): "i8"}

_BLAS = None


def _one_blas_thread():
    """A context in which NumPy's BLAS runs on one thread (``threadpoolctl``; a no-op without it).
    ``mmad``'s products are small (at most an L0 tile), and a multi-threaded BLAS pays a thread
    hand-off per call, which on a machine whose other cores are busy costs far more than the
    product (``make bench-npu`` times the cube matmul that calls it). The thread count does not
    change the results (OpenBLAS splits the output, not K)."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS = ThreadpoolController()
        except Exception:  # noqa: BLE001 - optional: timing only, never results
            _BLAS = False
    if _BLAS is False:
        return contextlib.nullcontext()
    return _BLAS.limit(limits=1, user_api="blas")


def mmad(co1: LocalTensor, a2: LocalTensor, b2: LocalTensor, m: int, n: int, k: int,
         init: bool = True) -> None:
    """Cube multiply on the M pipe: ``C[:m,:n] = A[:m,:k] @ B[:k,:n]`` (``init=True``) or
    ``C += A @ B``. A in A2 (L0A), B in B2 (L0B), C in CO1 (L0C); fp16/bf16 -> fp32, int8 ->
    int32 (exact). C is laid out 16-padded: ``align16(m) x align16(n)``, in NZ. A must be ZZ and
    B ZN (Mmad page, ``atlasascendc_api_07_0249``: load B with ``load_data(...,
    transpose=True)``). Raises PositionError, DTypeError, ShapeError, LayoutError."""
    c = ctx()
    where = caller_src()
    for t, pos in ((co1, "CO1"), (a2, "A2"), (b2, "B2")):
        if not isinstance(t, LocalTensor) or t.position.name != pos:
            got = t.position.name if isinstance(t, LocalTensor) else type(t).__name__
            raise errors.PositionError(
                f"{format_src(where)}\nmmad(co1, a2, b2, ...) needs operands in CO1, A2, B2; "
                f"got {got} where {pos} is required")
    c.check_core(co1.position, "mmad", where)
    kind = _MMAD_TYPES.get((str(a2.dtype), str(co1.dtype)))
    if kind is None or a2.dtype != b2.dtype:
        raise errors.DTypeError(f"{format_src(where)}\nmmad supports fp16/bf16 x fp16/bf16 -> "
                                f"fp32 and int8 x int8 -> int32; got {a2.dtype} x {b2.dtype} -> "
                                f"{co1.dtype}")
    m, n, k = int(m), int(n), int(k)
    if builtins.min(m, n, k) < 1:
        raise errors.ShapeError(f"{format_src(where)}\nmmad m, n, k must be >= 1")
    for t, nm in ((a2, "A2"), (b2, "B2")):
        if t.rows is None and not t._alloc.raw:
            raise errors.ShapeError(f"{format_src(where)}\nmmad: the {nm} tensor has no 2-D "
                                    "shape; fill it with load_data first")
    if (a2.rows is not None and (a2.rows < m or a2.cols < k)) or \
            (b2.rows is not None and (b2.rows < k or b2.cols < n)):
        raise errors.ShapeError(
            f"{format_src(where)}\nmmad m={m}, n={n}, k={k}: A2 holds {a2.rows}x{a2.cols} "
            f"(needs >= {m}x{k}), B2 holds {b2.rows}x{b2.cols} (needs >= {k}x{n})")
    mp, np_ = align_up(m, 16), align_up(n, 16)
    if mp * np_ > co1.size:
        raise errors.ShapeError(f"{format_src(where)}\nmmad output {mp}x{np_} (16-padded) does "
                                f"not fit the CO1 tensor of {co1.size} elements")
    if not init and (co1.rows, co1.cols) != (mp, np_):
        raise errors.ShapeError(
            f"{format_src(where)}\nmmad(init=False) accumulates into a CO1 tensor of shape "
            f"{co1.rows}x{co1.cols}, but m, n give {mp}x{np_} (start with init=True)")
    kin = 32 // a2.dtype.itemsize
    na = a2.rows * a2.cols if a2.rows is not None else align_up(m, 16) * align_up(k, kin)
    nb_ = b2.rows * b2.cols if b2.rows is not None else align_up(k, kin) * align_up(n, 16)
    c.access(a2, M, False, where, na, what="mmad")
    c.access(b2, M, False, where, nb_, what="mmad")
    if not init:
        c.access(co1, M, False, where, mp * np_, what="mmad")
    c.access(co1, M, True, where, mp * np_, what="mmad")
    A = _operand(a2, "A", "ZZ", where, (m, k))[:m, :k]
    B = _operand(b2, "B", "ZN", where, (k, n))[:k, :n]
    C = decode(co1.np(mp * np_), "NZ", mp, np_, 16, 16) if not init else \
        np.zeros((mp, np_), dtype=co1.dtype)
    if kind == "i8":
        prod = A.astype(np.int64) @ B.astype(np.int64)  # integer matmul: no BLAS
        if init:
            C[...] = 0
            C[:m, :n] = prod.astype(np.int32)
        else:
            C[:m, :n] = (C[:m, :n].astype(np.int64) + prod).astype(np.int32)
    else:
        with _one_blas_thread():
            prod = A.astype(np.float64) @ B.astype(np.float64)
        if init:
            C[...] = 0
            C[:m, :n] = prod.astype(np.float32)
        else:
            C[:m, :n] = (C[:m, :n].astype(np.float64) + prod).astype(np.float32)
    co1.np(mp * np_)[...] = encode(C, "NZ", 16, 16)          # L0C holds C in NZ
    co1.rows, co1.cols, co1.fmt = mp, np_, "NZ"
    c.op(M, "mmad", ("mmad", m, n, k, kind), where, flops=2 * m * n * k)


def fixpipe(dst: GlobalTensor, co1: LocalTensor, m: int, n: int, *, dst_stride: int | None = None,
            relu: bool = False, quant_scale=None) -> None:
    """Write ``C[:m,:n]`` from L0C (NZ) to GM (FIX pipe) as a row-major block whose rows are
    ``dst_stride`` elements apart (default ``n``), converting to the GM dtype on the fly
    (fp32 -> fp16/bf16/fp32; int32 -> int32, or with ``quant_scale`` -> fp16), with optional
    ReLU. ``quant_scale`` is one float (Ascend C: ``SetFixpipePreQuantFlag``, scalar
    dequantisation, ``atlasascendc_api_07_0254``) or ``n`` floats, one per output column
    (per-channel: Fixpipe's ``quantPre = VDEQF16`` with the scales in a ``cbufWorkspace``
    tensor in L1, Fixpipe page ``atlasascendc_api_07_0251``; here they are passed from the
    host, and their L1 copy is not modelled). Raises PositionError, DTypeError, ShapeError,
    OutOfBoundsError."""
    c = ctx()
    where = caller_src()
    if not isinstance(dst, GlobalTensor):
        raise errors.PositionError(f"{format_src(where)}\nfixpipe writes L0C->GM: dst must be a "
                                   f"GM tensor, got {type(dst).__name__}. {_paths_help()}")
    if not isinstance(co1, LocalTensor) or co1.position is not TPosition.CO1:
        got = co1.position.name if isinstance(co1, LocalTensor) else type(co1).__name__
        raise errors.PositionError(f"{format_src(where)}\nfixpipe reads a CO1 (L0C) tensor, got "
                                   f"{got}")
    c.check_core(co1.position, "fixpipe", where)
    m, n = int(m), int(n)
    stride = n if dst_stride is None else int(dst_stride)
    ok = {"float32": ("float32", "float16", "bfloat16"), "int32": ("int32",)}
    if quant_scale is not None:
        ok = {"int32": ("float16",), "float32": ("float16",)}
    if str(dst.dtype) not in ok.get(str(co1.dtype), ()):
        raise errors.DTypeError(f"{format_src(where)}\nfixpipe {co1.dtype} -> {dst.dtype} is not "
                                f"supported (allowed: {ok.get(str(co1.dtype))})")
    if co1.rows is None:
        raise errors.ShapeError(f"{format_src(where)}\nfixpipe reads a CO1 tensor that no mmad "
                                "has written yet (start each output block with "
                                "mmad(..., init=True))")
    if m < 1 or n < 1 or m > co1.rows or n > co1.cols:
        raise errors.ShapeError(f"{format_src(where)}\nfixpipe m={m}, n={n} from a CO1 tensor "
                                f"of {co1.rows}x{co1.cols}")
    if stride < n:
        raise errors.ShapeError(f"{format_src(where)}\nfixpipe dst_stride {stride} < n {n}")
    last = (m - 1) * stride + n
    if last > len(dst):
        raise errors.OutOfBoundsError(f"{format_src(where)}\nfixpipe writes {m}x{n} (row stride "
                                      f"{stride}) = {last} elements into GM {dst.name} view "
                                      f"of {len(dst)}")
    c.access(co1, FIX, False, where, co1.rows * co1.cols, what="fixpipe")
    vals = decode(co1.np(co1.rows * co1.cols), "NZ", co1.rows, co1.cols, 16, 16)[:m, :n]
    if quant_scale is not None:
        qs = np.asarray(quant_scale, dtype=np.float64)
        if qs.ndim == 1 and qs.size >= n:
            vals = vals.astype(np.float64) * qs[None, :n]
        elif qs.ndim == 0:
            vals = vals.astype(np.float64) * float(qs)
        else:
            raise errors.ShapeError(f"{format_src(where)}\nfixpipe quant_scale: one float or "
                                    f"at least n = {n} (one per column), got shape {qs.shape}")
    if relu:
        vals = np.maximum(vals, 0)
    isz = dst.dtype.itemsize
    out = np.lib.stride_tricks.as_strided(dst._buf.flat[dst._off:], shape=(m, n),
                                          strides=(stride * isz, isz))
    out[...] = vals.astype(dst.dtype)
    segs = _segments(dst.address, m, n * isz, stride * isz)
    base = dst._buf.base
    for a, nb in segs:
        dst._buf.note_write(c.block_idx, a - base, a - base + nb)
    c.op(FIX, "fixpipe", ("dma", True, segs, True, -(-m // 16)), where, m * n * isz, path="L0C->GM")
