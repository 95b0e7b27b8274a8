"""The data movement instructions of :mod:`kernellab.npu.asc` (re-exported there; students call
them as ``asc.data_copy`` ...): :func:`data_copy` (GM->UB and GM->L1 on MTE2, UB->GM on MTE3;
``nd2nz=`` a :class:`Nd2NzParams` for a 2-D block into L1's fractal layout) and
:func:`data_copy_pad` (any length, GM<->UB). Sources: Ascend C programming guide
(hiascend.com), "Data Movement" (DataCopy, DataCopyPad, Nd2NzParams); pyasc's
``docs/python-api``, https://github.com/hicann/pyasc.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernellab.npu import errors
from kernellab.npu.fractal import encode, fractal_shape
from kernellab.npu.memory import align_up
from kernellab.npu.record import MTE2, MTE3, caller_src, format_src
from kernellab.npu.runtime import ctx
from kernellab.npu.tensors import GlobalTensor, LocalTensor


@dataclass(frozen=True)
class Nd2NzParams:
    """A 2-D GM -> L1 copy: ``rows`` x ``cols`` elements of a row-major GM matrix whose rows
    are ``src_stride`` elements apart (Ascend C ``Nd2NzParams`` nValue / dValue / srcDValue).
    In L1 the block is zero-padded to fractals: rows to 16, cols to 32 B."""

    rows: int
    cols: int
    src_stride: int


def _count(count, src):
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
        raise errors.ShapeError(f"{format_src(src)}\ncount must be an int, got {count!r}")
    count = int(count)
    if count < 1:
        raise errors.ShapeError(f"{format_src(src)}\ncount must be >= 1, got {count}")
    return count


def _segments(addr, rows, row_bytes, stride_bytes):
    if rows == 1 or stride_bytes == row_bytes:
        return ((addr, rows * row_bytes),)
    return tuple((addr + r * stride_bytes, row_bytes) for r in range(rows))


def _paths_help():
    return ("legal paths on the split architecture: GM->UB and GM->L1 (data_copy, MTE2); "
            "UB->GM (data_copy, MTE3); L1->L0A/L0B (load_data, MTE1); L0C->GM (fixpipe, FIX). "
            "Not modelled here: GM->L0A/L0B (Load2D moves GM->A2/B2 on Atlas A2/A3: Ascend C "
            "API reference, Load2D, atlasascendc_api_07_0238), "
            "UB->L1 (on A2/A3 not a direct path: DataCopyPad's VECIN/VECOUT->TSCM goes "
            "UB->GM->L1, atlasascendc_api_07_0265); there is no L0C->UB path on A2/A3.")


def data_copy(dst, src, count=None, *, nd2nz=None) -> None:
    """Copy ``count`` elements GM->UB / GM->L1 (MTE2) or UB->GM (MTE3).

    ``nd2nz=Nd2NzParams(rows, cols, src_stride)`` (or a tuple) copies a 2-D block GM->L1
    instead, zero-padded to fractals. Lengths must be a multiple of 32 B (use
    :func:`data_copy_pad` for tails) and local addresses 32 B-aligned. Raises AlignmentError,
    PositionError (illegal path), DTypeError, ShapeError, OutOfBoundsError.
    """
    _copy(dst, src, count, caller_src(), pad=None, nd2nz=nd2nz)


def data_copy_pad(dst, src, count, pad_value=0) -> None:
    """Copy ``count`` elements GM<->UB with no length alignment rule (Ascend C
    ``DataCopyPad``). Into UB the tail up to the next 32 B is filled with ``pad_value``; into GM
    exactly ``count`` elements are written."""
    _copy(dst, src, count, caller_src(), pad=pad_value, nd2nz=None)


def _copy(dst, src, count, where, pad, nd2nz):
    c = ctx()
    mc = c.machine
    name = "data_copy" if pad is None else "data_copy_pad"
    if isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor):
        mem = dst.position.memory
        c.check_core(dst.position, name, where)
        if mem not in ("UB", "L1"):
            why = (f"{name} does not move GM->{mem}; the hardware has a GM->A2/B2 path, "
                   "Load2D (LoadData from a GlobalTensor), which this simulator does not model: "
                   "copy GM->L1 with nd2nz, then load_data" if mem in ("L0A", "L0B") else
                   f"{name} GM->{dst.position.name} ({mem}) is not a data path")
            raise errors.PositionError(f"{format_src(where)}\n{why}. {_paths_help()}")
        if mem == "L1" and pad is not None:
            raise errors.PositionError(f"{format_src(where)}\ndata_copy_pad moves GM<->UB only")
        if dst.dtype != src.dtype:
            raise errors.DTypeError(f"{format_src(where)}\n{name}: dst is {dst.dtype}, src "
                                    f"is {src.dtype}")
        if dst._boff % dst._mem.align:
            raise errors.AlignmentError(
                f"{format_src(where)}\n{name}: destination starts at {mem} offset "
                f"{dst._boff}, not a multiple of {dst._mem.align} B")
        isz = dst.dtype.itemsize
        if nd2nz is not None:
            if mem != "L1":
                raise errors.PositionError(f"{format_src(where)}\nnd2nz copies go GM->L1 "
                                           "(A1/B1) only")
            p = nd2nz if isinstance(nd2nz, Nd2NzParams) else Nd2NzParams(*nd2nz)
            rows, cols, stride = int(p.rows), int(p.cols), int(p.src_stride)
            if rows < 1 or cols < 1 or stride < cols:
                raise errors.ShapeError(f"{format_src(where)}\nnd2nz rows={rows}, cols={cols}, "
                                        f"src_stride={stride}: need rows, cols >= 1 and "
                                        "src_stride >= cols")
            last = (rows - 1) * stride + cols
            if last > len(src):
                raise errors.OutOfBoundsError(
                    f"{format_src(where)}\nnd2nz copy of {rows}x{cols} (row stride {stride}) "
                    f"reads {last} elements of GM {src.name} view of {len(src)}")
            c0 = 32 // isz
            rp, cp = align_up(rows, mc.cube_m), align_up(cols, c0)
            if rp * cp > dst.size:
                raise errors.ShapeError(
                    f"{format_src(where)}\nnd2nz block {rows}x{cols} pads to {rp}x{cp} = "
                    f"{rp * cp} elements, but the L1 tensor holds {dst.size}")
            c.access(dst, MTE2, True, where, rp * cp, what=name)
            flat = src._buf.flat
            block = np.lib.stride_tricks.as_strided(
                flat[src._off:], shape=(rows, cols), strides=(stride * isz, isz), writeable=False)
            padded = np.zeros((rp, cp), dtype=dst.dtype)
            padded[:rows, :cols] = block
            fr, fc = fractal_shape("NZ", isz, "L1")
            dst.np(rp * cp)[...] = encode(padded, "NZ", fr, fc)   # the bytes in NZ order
            dst.rows, dst.cols, dst.fmt = rp, cp, "NZ"
            dst._mem.nz[dst._boff:dst._boff + rp * cp * isz] = True
            segs = _segments(src.address, rows, cols * isz, stride * isz)
            c.op(MTE2, name, ("dma", False, segs, False, -(-rows // 16)), where,
                 rows * cols * isz, path="GM->L1")
            return
        count = _count(count, where)
        nb = count * isz
        if pad is None and nb % 32:
            raise errors.AlignmentError(
                f"{format_src(where)}\n{name} of {count} x {dst.dtype} = {nb} B: data_copy "
                f"lengths must be a multiple of 32 B; use asc.data_copy_pad for an unaligned "
                f"tail")
        if count > len(src):
            raise errors.OutOfBoundsError(
                f"{format_src(where)}\n{name} reads {count} elements from GM {src.name} at "
                f"element {src._off}, but the view has {len(src)} (buffer "
                f"{src._buf.flat.size})")
        padded = count if pad is None else align_up(nb, 32) // isz
        if padded > dst.size:
            raise errors.ShapeError(f"{format_src(where)}\n{name} of {padded} elements into a "
                                    f"local tensor of {dst.size}")
        c.access(dst, MTE2, True, where, padded, what=name)
        if dst._mem.nz is not None:  # a 1-D copy into L1 leaves ND rows, not NZ fractals
            dst._mem.nz[dst._boff:dst._boff + padded * isz] = False
        d = dst.np(padded)
        d[:count] = src._buf.flat[src._off:src._off + count]
        if padded > count:
            d[count:] = pad
        path = "GM->UB" if mem == "UB" else "GM->L1"
        c.op(MTE2, name, ("dma", False, ((src.address, nb),), False, 1), where, nb, path=path)
        return
    if isinstance(dst, GlobalTensor) and isinstance(src, LocalTensor):
        mem = src.position.memory
        c.check_core(src.position, name, where)
        if mem != "UB":
            hint = " (use fixpipe for L0C->GM)" if mem == "L0C" else ""
            raise errors.PositionError(
                f"{format_src(where)}\n{name} {src.position.name} ({mem})->GM is not a data "
                f"path{hint}. {_paths_help()}")
        if dst.dtype != src.dtype:
            raise errors.DTypeError(f"{format_src(where)}\n{name}: dst is {dst.dtype}, src "
                                    f"is {src.dtype}")
        if src._boff % src._mem.align:
            raise errors.AlignmentError(f"{format_src(where)}\n{name}: source starts at UB "
                                        f"offset {src._boff}, not a multiple of 32 B")
        count = _count(count, where)
        isz = src.dtype.itemsize
        nb = count * isz
        if pad is None and nb % 32:
            raise errors.AlignmentError(
                f"{format_src(where)}\n{name} of {count} x {src.dtype} = {nb} B: data_copy "
                f"lengths must be a multiple of 32 B; use asc.data_copy_pad for an unaligned "
                f"tail")
        if count > src.size:
            raise errors.ShapeError(f"{format_src(where)}\n{name} of {count} elements from a "
                                    f"local tensor of {src.size}")
        if count > len(dst):
            raise errors.OutOfBoundsError(
                f"{format_src(where)}\n{name} writes {count} elements to GM {dst.name} at "
                f"element {dst._off}, but the view has {len(dst)} (buffer "
                f"{dst._buf.flat.size})")
        c.access(src, MTE3, False, where, count, what=name)
        dst._buf.flat[dst._off:dst._off + count] = src.np(count)
        rel = dst._off * isz
        dst._buf.note_write(c.block_idx, rel, rel + nb)
        c.op(MTE3, name, ("dma", True, ((dst.address, nb),), False, 1), where, nb, path="UB->GM")
        return
    if isinstance(dst, LocalTensor) and isinstance(src, LocalTensor):
        hint = (" Use load_data for L1->L0A/L0B." if src.position.memory == "L1" else "")
        raise errors.PositionError(
            f"{format_src(where)}\n{name} {src.position.name}->{dst.position.name} is not a "
            f"path in v1.{hint} {_paths_help()}")
    raise errors.PositionError(
        f"{format_src(where)}\n{name}(dst, src, count) needs one GM tensor and one local tensor, "
        f"got {type(dst).__name__} and {type(src).__name__}. {_paths_help()}")
