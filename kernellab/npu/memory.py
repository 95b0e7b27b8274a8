"""Memories: the on-chip buffers of one core (UB, L1, L0A, L0B, L0C) and the GM heap.

On-chip buffers are NumPy byte arrays filled with the sentinel byte ``0xFF`` when a block
starts: every float16/float32 view of it reads NaN and every signed integer view -1 (NKI's
simulator fills uninitialised memory with NaN too: aws-neuron-sdk
``nki/guides/nki_simulator.rst``). A parallel boolean array records which bytes were written, so
a read of never-written bytes is reported exactly (:class:`~kernellab.npu.errors.
UninitializedReadWarning`, or the error with ``strict=True``) instead of by looking for NaNs.

Allocation is a bump allocator per buffer (``TPipe.init_buffer`` carves fixed blocks once per
kernel, as Ascend C does): each block starts at the buffer's alignment (UB/L1 32 B, L0A/L0B
512 B, L0C 64 B; Ascend C "General Restrictions"). Exceeding the usable capacity raises the
buffer's overflow error with the full allocation table.

GM arguments get simulated byte addresses, each buffer 2 MiB-aligned so a kernel's own offsets
decide whether an access is 512 B-aligned (the bandwidth rule of §1.9).
"""

from __future__ import annotations

import numpy as np

from kernellab.npu import errors

__all__ = ["Memory", "GMBuffer", "SENTINEL_BYTE", "OVERFLOW_ERRORS", "align_up"]

SENTINEL_BYTE = 0xFF
"""Fill byte of fresh on-chip memory: NaN for float16/float32/bfloat16, -1 for signed ints."""

OVERFLOW_ERRORS = {
    "UB": errors.UBOverflowError,
    "L1": errors.L1OverflowError,
    "L0A": errors.L0AOverflowError,
    "L0B": errors.L0BOverflowError,
    "L0C": errors.L0COverflowError,
}

GM_BASE = 1 << 32
GM_ALIGN = 2 * 1024 * 1024


def align_up(x: int, a: int) -> int:
    """Smallest multiple of ``a`` that is >= ``x``."""
    return -(-x // a) * a


class Memory:
    """One physical on-chip buffer of one core.

    Attributes:
        name: ``"UB"``, ``"L1"``, ``"L0A"``, ``"L0B"`` or ``"L0C"``.
        capacity: usable bytes.
        align: start-address alignment of every allocation, bytes.
        data: ``uint8`` array of ``capacity`` bytes (sentinel-filled).
        written: ``bool`` array, True where a byte was written.
        nz: L1 only, ``bool`` array, True where the last write was an ``nd2nz`` copy (the
            fractal layout ``load_data`` reads); a 1-D ``data_copy`` into L1 clears it.
        allocs: ``[(label, offset, nbytes, src)]`` in allocation order.
    """

    __slots__ = ("name", "capacity", "align", "data", "written", "nz", "allocs", "top")

    def __init__(self, name: str, capacity: int, align: int):
        self.name = name
        self.capacity = capacity
        self.align = align
        self.data = np.full(capacity, SENTINEL_BYTE, dtype=np.uint8)
        self.written = np.zeros(capacity, dtype=bool)
        self.nz = np.zeros(capacity, dtype=bool) if name == "L1" else None
        self.allocs: list[tuple[str, int, int, str]] = []
        self.top = 0

    def alloc(self, nbytes: int, label: str, src: str, where: str | None = None) -> int:
        """Carve ``nbytes`` at the next aligned offset; return the offset. ``src`` is the short
        line for the table, ``where`` the line with its code for the message. Raises the
        buffer's overflow error (with the allocation table) when it does not fit."""
        off = align_up(self.top, self.align)
        if off + nbytes > self.capacity:
            raise OVERFLOW_ERRORS[self.name](
                f"{where or src}\n{self.name} overflow: {label} needs {nbytes} B at offset {off}, "
                f"but {self.name} has {self.capacity} usable bytes "
                f"(over by {off + nbytes - self.capacity} B).\n" + self.table(
                    extra=(label, off, nbytes, src)))
        self.allocs.append((label, off, nbytes, src))
        self.top = off + nbytes
        return off

    def table(self, extra=None) -> str:
        """The allocation table as text (``extra`` is a failed request shown last)."""
        rows = list(self.allocs) + ([extra] if extra else [])
        lines = [f"  {'allocation':<28} {'offset':>8} {'bytes':>8}  line"]
        for label, off, n, src in rows:
            mark = "  <- does not fit" if extra is not None and (label, off, n, src) == extra \
                else ""
            lines.append(f"  {label:<28} {off:>8} {n:>8}  {src}{mark}")
        used = self.top
        lines.append(f"  used {used} of {self.capacity} B (alignment {self.align} B)")
        return "\n".join(lines)


class GMBuffer:
    """One GM (HBM) argument of a launch: a flat contiguous copy of the caller's array.

    Attributes:
        index: argument position; name: ``"arg<i>"`` or the kernel's parameter name.
        array: the caller's array (written back after the run).
        flat: 1-D contiguous working copy; dtype, itemsize.
        base: simulated byte address of element 0.
        writes: block id -> list of ``(start_byte, end_byte)`` written (relative to ``base``).
    """

    __slots__ = ("index", "name", "array", "flat", "dtype", "itemsize", "base", "writes")

    def __init__(self, index: int, name: str, array: np.ndarray, base: int):
        self.index = index
        self.name = name
        self.array = array
        self.flat = np.ascontiguousarray(array).reshape(-1).copy()
        self.dtype = self.flat.dtype
        self.itemsize = self.flat.dtype.itemsize
        self.base = base
        self.writes: dict[int, list[tuple[int, int]]] = {}

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    def note_write(self, block: int, start: int, end: int) -> None:
        """Remember that ``block`` wrote bytes ``[start, end)`` (relative to ``base``)."""
        lst = self.writes.setdefault(block, [])
        if lst and lst[-1][1] == start:
            lst[-1] = (lst[-1][0], end)
        else:
            lst.append((start, end))

    def write_back(self) -> None:
        """Copy the working copy into the caller's array."""
        if self.array.flags.writeable:
            self.array[...] = self.flat.reshape(self.array.shape)

    def conflicts(self):
        """First overlap between two blocks' writes: ``(block_a, block_b, start, end)`` or
        ``None``. Each block's intervals are merged first; then one sweep in address order."""
        merged = []
        for blk, ivs in self.writes.items():
            ivs = sorted(ivs)
            cur = None
            for s, e in ivs:
                if cur and s <= cur[1]:
                    cur[1] = max(cur[1], e)
                else:
                    if cur:
                        merged.append((cur[0], cur[1], blk))
                    cur = [s, e]
            if cur:
                merged.append((cur[0], cur[1], blk))
        merged.sort()
        max_end, owner = -1, None
        for s, e, blk in merged:
            if s < max_end and owner != blk:
                return (owner, blk, s, min(e, max_end))
            if e > max_end:
                max_end, owner = e, blk
        return None


def gm_layout(arrays) -> list[int]:
    """Simulated base addresses for a list of arrays (2 MiB-aligned, in argument order)."""
    bases, addr = [], GM_BASE
    for a in arrays:
        bases.append(addr)
        addr = align_up(addr + max(a.nbytes, 1), GM_ALIGN)
    return bases
