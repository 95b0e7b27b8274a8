"""Tensors: logical positions, opaque GM tensors and typed on-chip tensors.

* :class:`TPosition` — the logical positions of Ascend C and the physical buffer each maps to
  on the split (Atlas A2/A3, 910B-like) architecture (Ascend C "General Restrictions"):
  GM -> HBM; VECIN/VECOUT/VECCALC -> UB; A1/B1 -> L1; A2 -> L0A; B2 -> L0B; CO1 -> L0C;
  CO2 -> GM on A2 (so a kernel writes L0C results to GM with ``fixpipe``).
* :class:`GlobalTensor` — an opaque view of a GM argument: ``sub(offset, length)``, slicing
  ``g[i:]`` / ``g[i:j]``, ``len(g)``, ``g.dtype``. A kernel gets no NumPy handle to GM data:
  only ``data_copy`` / ``fixpipe`` move it, so every output byte was written by the device.
* :class:`LocalTensor` — a typed view of on-chip bytes obtained from a queue or a ``TBuf``;
  slicing ``t[i:]`` gives a sub-view sharing the allocation's state. Cube tensors (L1/L0) carry
  a logical 2-D shape (``rows``, ``cols``, zero-padded to fractals) and a format tag.
"""

from __future__ import annotations

import enum

import numpy as np

from kernellab.npu import errors

try:
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None

__all__ = ["TPosition", "GlobalTensor", "LocalTensor", "half", "float16", "float32", "int8",
           "int16", "int32", "uint8", "bfloat16", "FREE", "ALLOCATED", "ENQUEUED", "DEQUEUED"]

half = float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)


class TPosition(enum.Enum):
    """Logical positions (Ascend C ``TPosition``); ``.memory`` is the physical buffer."""

    GM = "GM"
    VECIN = "VECIN"
    VECOUT = "VECOUT"
    VECCALC = "VECCALC"
    A1 = "A1"
    B1 = "B1"
    A2 = "A2"
    B2 = "B2"
    CO1 = "CO1"
    CO2 = "CO2"

    @property
    def memory(self) -> str:
        return _POS_MEMORY[self]

    @property
    def core(self) -> str | None:
        """``"aiv"`` for UB positions, ``"aic"`` for L1/L0 positions, ``None`` for GM."""
        return _POS_CORE[self]


_POS_MEMORY = {
    TPosition.GM: "GM", TPosition.CO2: "GM",
    TPosition.VECIN: "UB", TPosition.VECOUT: "UB", TPosition.VECCALC: "UB",
    TPosition.A1: "L1", TPosition.B1: "L1",
    TPosition.A2: "L0A", TPosition.B2: "L0B", TPosition.CO1: "L0C",
}
_POS_CORE = {
    TPosition.GM: None, TPosition.CO2: None,
    TPosition.VECIN: "aiv", TPosition.VECOUT: "aiv", TPosition.VECCALC: "aiv",
    TPosition.A1: "aic", TPosition.B1: "aic", TPosition.A2: "aic", TPosition.B2: "aic",
    TPosition.CO1: "aic",
}

# queue-state machine (runtime.BlockContext.access enforces it)
FREE, ALLOCATED, ENQUEUED, DEQUEUED = "FREE", "ALLOCATED", "ENQUEUED", "DEQUEUED"


def as_dtype(dtype) -> np.dtype:
    """``np.dtype`` of a user dtype (``asc.half``, ``np.float16``, ``"float16"`` ...).
    Raises :class:`~kernellab.npu.errors.DTypeError` for anything else."""
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise errors.DTypeError(f"not a dtype: {dtype!r}") from exc


class GlobalTensor:
    """An opaque view ``[offset, offset + length)`` (elements) of one GM argument."""

    __slots__ = ("_buf", "_off", "_len")

    def __init__(self, buf, offset: int = 0, length: int | None = None):
        self._buf = buf
        self._off = offset
        self._len = buf.flat.size - offset if length is None else length

    @property
    def dtype(self) -> np.dtype:
        return self._buf.dtype

    @property
    def size(self) -> int:
        return self._len

    def __len__(self) -> int:
        return self._len

    @property
    def address(self) -> int:
        """Simulated byte address of element 0 of this view."""
        return self._buf.base + self._off * self._buf.itemsize

    @property
    def name(self) -> str:
        return self._buf.name

    def sub(self, offset: int, length: int | None = None) -> GlobalTensor:
        """Elements ``[offset, offset + length)`` of this view (Ascend C
        ``SetGlobalBuffer(ptr + offset, length)``). Raises OutOfBoundsError beyond the view."""
        offset = int(offset)
        if length is None:
            length = self._len - offset
        length = int(length)
        if offset < 0 or length < 0 or offset + length > self._len:
            raise errors.OutOfBoundsError(
                f"GM {self.name}: sub({offset}, {length}) is outside a view of {self._len} "
                f"elements")
        return GlobalTensor(self._buf, self._off + offset, length)

    def __getitem__(self, key) -> GlobalTensor:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise errors.OutOfBoundsError(
                f"GM {self.name}: only contiguous slices g[i:] / g[i:j] are allowed, got {key!r} "
                "(GM tensors are opaque: move data with data_copy)")
        start = 0 if key.start is None else int(key.start)
        stop = self._len if key.stop is None else int(key.stop)
        if start < 0 or stop < start or start > self._len or stop > self._len:
            raise errors.OutOfBoundsError(
                f"GM {self.name}: slice [{start}:{stop}] is outside a view of {self._len} "
                "elements")
        return GlobalTensor(self._buf, self._off + start, stop - start)

    def __repr__(self):
        return f"GlobalTensor({self.name}, offset={self._off}, len={self._len}, {self.dtype})"

    def __array__(self, *a, **k):
        raise errors.PositionError(
            "GM tensors are opaque inside a kernel: move data with asc.data_copy")


class Alloc:
    """One allocation (a queue block between alloc_tensor and free_tensor, or a TBuf buffer).
    Holds the state machine shared by every view of it."""

    __slots__ = ("queue", "slot", "state", "label", "srcs", "tid", "hist", "raw")

    def __init__(self, queue, slot, label, tid, src):
        self.queue = queue
        self.slot = slot
        self.state = ALLOCATED
        self.label = label
        self.tid = tid
        self.srcs = {"alloc": src}
        # a TBuf's recent accesses, for the cross-pipe ordering check (runtime.BlockContext);
        # None for queue tensors (their state machine orders the pipes)
        self.hist = None
        # True once LoadData2DParams fractal moves wrote this allocation: mmad then reads it,
        # as the hardware does, by m, n, k alone (cube.load_data)
        self.raw = False


class LocalTensor:
    """A typed view of on-chip memory.

    Attributes:
        dtype: NumPy dtype; position: :class:`TPosition`; size: elements.
        rows, cols, fmt: logical 2-D shape and format tag of cube tensors (``None`` until a
            2-D copy/load/mmad gives them one); rows x cols elements stored row-major.
    """

    __slots__ = ("_mem", "_boff", "_n", "dtype", "position", "_alloc", "rows", "cols", "fmt")

    def __init__(self, mem, boff, n, dtype, position, alloc):
        self._mem = mem
        self._boff = boff
        self._n = n
        self.dtype = dtype
        self.position = position
        self._alloc = alloc
        self.rows = self.cols = self.fmt = None

    @property
    def size(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return self._n * self.dtype.itemsize

    @property
    def address(self) -> int:
        """Byte offset of element 0 inside its physical buffer."""
        return self._boff

    def __getitem__(self, key) -> LocalTensor:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise errors.ShapeError(f"local tensors take contiguous slices t[i:] / t[i:j], "
                                    f"got {key!r}")
        start = 0 if key.start is None else int(key.start)
        stop = self._n if key.stop is None else int(key.stop)
        if start < 0 or stop < start or stop > self._n:
            raise errors.ShapeError(f"slice [{start}:{stop}] is outside a local tensor of "
                                    f"{self._n} elements")
        t = LocalTensor(self._mem, self._boff + start * self.dtype.itemsize, stop - start,
                        self.dtype, self.position, self._alloc)
        return t

    def reinterpret_cast(self, dtype) -> LocalTensor:
        """The same bytes as another dtype (Ascend C ``ReinterpretCast``)."""
        dtype = as_dtype(dtype)
        return LocalTensor(self._mem, self._boff, self.nbytes // dtype.itemsize, dtype,
                           self.position, self._alloc)

    def np(self, n: int | None = None) -> np.ndarray:
        """The NumPy view of the first ``n`` elements (simulator internal)."""
        n = self._n if n is None else n
        return self._mem.data[self._boff:self._boff + n * self.dtype.itemsize].view(self.dtype)

    def __repr__(self):
        shape = f", {self.rows}x{self.cols} {self.fmt}" if self.rows is not None else ""
        return (f"LocalTensor({self._alloc.label}, {self.position.name}, {self._n} x "
                f"{self.dtype}{shape})")

    def __array__(self, *a, **k):
        raise errors.PositionError(
            "local tensors live in on-chip memory: use vector ops / data_copy, not NumPy")
