"""The machine card: a frozen, versioned description of the simulated Ascend-style chip.

Every constant the simulator uses lives here, with its unit, a provenance tag and a source note
(:data:`PROVENANCE`, one row per field):

====== ==================================================================================
tag    meaning
====== ==================================================================================
[S]    stated by the vendor: the Ascend C guide and API reference, Huawei's own repositories
       (Catlass ``arch.hpp``, pyasc, CANN ``platform_config/Ascend910B1.ini`` as Huawei's
       cann/pypto ships it)
[T]    third-party: an issue or note outside Huawei quoting a value (tilelang-ascend issues,
       SimNPU, blog posts quoting an ini file), not confirmed in a vendor document
[D]    derived arithmetically from [S]/[T] numbers
[A]    assumed: a design choice or placeholder, to calibrate if hardware ever becomes
       available (including a vendor number read in a way the vendor does not state)
====== ==================================================================================

One chip variant throughout: the 910B1 (24 AIC, 48 AIV, 1850 MHz: 363.7 TFLOP/s fp16). The
910B2's file gives the same core counts at 1800 MHz (353.9 TFLOP/s); mixing the two files'
numbers would describe neither chip.

Presets (:data:`PRESETS`): ``"ascend910b-like@1"`` (24 AIC + 48 AIV at 1.85 GHz, UB 192 KiB,
L1 512 KiB, L0A/L0B 64 KiB, L0C 128 KiB, L2 192 MiB, HBM 1.6 TB/s) and ``"tiny@1"`` (2 AIC +
4 AIV, UB 16 KiB, L1 64 KiB: overflow and multi-core effects with small arrays). Lab thresholds
are frozen against one version; changing any constant of a preset means a new version.

All rates are integers (bytes per cycle, cycles per instruction) and the clock is an integer in
MHz, so every derived figure the timing engine needs is exact integer arithmetic
(:mod:`kernellab.npu.timing`). ``dataclasses.replace(card, hbm_gbps=3200)`` gives a what-if
card; :meth:`MachineConfig.table` marks changed rows ``[user]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, fields

__all__ = ["MachineConfig", "PlatformInfo", "PRESETS", "DEFAULT_MACHINE", "get_machine",
           "platform_info", "PROVENANCE", "describe", "use_machine"]

# field -> (unit, tag, source). Every field of MachineConfig except name/version/arch/description.
PROVENANCE: dict[str, tuple[str, str, str]] = {
    "freq_mhz": ("MHz", "S", "Ascend910B1.ini [AICoreSpec] cube_freq=1850 (CANN platform_config, "
                 "as in Huawei's gitcode cann/pypto test stubs); the 910B2 file says 1800"),
    "n_aic": ("cores", "S", "Ascend910B1.ini cube_core_cnt=24 (same file)"),
    "n_aiv": ("cores", "S", "Ascend910B1.ini vector_core_cnt=48 (1 AIC : 2 AIV)"),
    "aiv_per_aic": ("", "S", "a mix kernel starts 1 AIC + 2 AIV per group (Ascend C guide, "
                    "kernel function, atlas_ascendc_10_0014)"),
    "ub_bytes": ("B", "S", "Ascend910B1.ini ub_size=196608; Catlass AtlasA2 UB_SIZE"),
    "ub_reserved": ("B", "T", "tilelang-ascend issue #298: its codegen uses 196352"),
    "l1_bytes": ("B", "S", "Ascend910B1.ini l1_size=524288; Catlass AtlasA2"),
    "l1_reserved": ("B", "T", "GetCoreMemSize reports 524032 (tilelang-ascend issue #489)"),
    "l0a_bytes": ("B", "S", "ini l0_a_size=65536; Catlass AtlasA2 L0A_SIZE"),
    "l0b_bytes": ("B", "S", "ini l0_b_size=65536; Catlass AtlasA2 L0B_SIZE"),
    "l0c_bytes": ("B", "S", "ini l0_c_size=131072; Catlass AtlasA2 L0C_SIZE"),
    "align_ub": ("B", "S", "Ascend C General Restrictions (atlasascendc_api_07_0004)"),
    "align_l1": ("B", "S", "Ascend C General Restrictions"),
    "align_l0ab": ("B", "S", "Ascend C General Restrictions"),
    "align_l0c": ("B", "S", "Ascend C General Restrictions"),
    "l2_bytes": ("B", "S", "Ascend910B1.ini l2_size=201326592"),
    "l2_line": ("B", "S", "'cache line (512 bytes)' (atlas_ascendc_10_0010)"),
    "hbm_gbps": ("GB/s", "T", "~1.6 TB/s per die; SimNPU npu_910B1.json 1600 GB/s"),
    "hbm_efficiency_pct": ("%", "A", "sustained / peak HBM bandwidth (refresh, read-write "
                           "turnaround); HBM STREAM-type runs reach roughly 85-93%"),
    "gm_read_miss_bpc": ("B/cycle/core", "A", "ini [AICoreMemoryRates] ddr_rate=32 as quoted "
                         "in third-party notes [T]; reading it as each core's own cap, and "
                         "applying it to AIVs, is assumed"),
    "gm_read_hit_bpc": ("B/cycle/core", "T", "ini l2_rate / l2_read_rate=110, as quoted"),
    "gm_write_bpc": ("B/cycle/core", "T", "ini ub_to_l2_rate=64, as quoted from a 910B1 ini"),
    "fix_write_bpc": ("B/cycle/core", "A", "same as the UB->GM rate"),
    "l1_to_l0a_bpc": ("B/cycle", "T", "l1_to_l0_a_rate=512, quoted from a 910B1 ini in a "
                      "third-party note"),
    "l1_to_l0b_bpc": ("B/cycle", "A", "l1_to_l0b rate=256 from CANN test fixtures; not "
                      "confirmed for the 910B1"),
    "gm_align_bytes": ("B", "S", "best practice: 512 B-aligned GM addresses"),
    "gm_misaligned_eff_pct": ("%", "S", "'32 B alignment reaches only 70% of 512 B' "
                              "(atlas_ascendc_best_practices_10_0014): the guide's worst "
                              "case, applied to every transfer not 512 B-aligned (a bound)"),
    "dma_fixed_cycles": ("cycles", "A", "per data_copy/fixpipe instruction"),
    "dma_burst_cycles": ("cycles", "A", "per extra burst (16-row band of a 2-D copy)"),
    "dma_latency_miss": ("cycles", "A", "data visible after the transfer (L2 miss, writes)"),
    "dma_latency_hit": ("cycles", "A", "data visible after the transfer (L2 hit)"),
    "vec_fixed_cycles": ("cycles", "A", "PTO-ISA A2/A3 fits show 16-45 cycles bias"),
    "vec_repeat_bytes": ("B", "S", "one repeat = 8 datablocks x 32 B (atlas_ascendc_10_0022)"),
    "vec_cpr_unary": ("cycles/repeat", "A", "PTO fit: fp16 TADDS 1/128 cycle/elem"),
    "vec_cpr_binary": ("cycles/repeat", "A", "PTO fit: fp16 TMUL/TSUB 1/64 cycle/elem"),
    "vec_cpr_transcendental": ("cycles/repeat", "A", "PTO fit: fp16 TEXP ~1/32 cycle/elem"),
    "vec_cpr_div": ("cycles/repeat", "A", "PTO fit: fp16 TDIVS ~9/128 cycle/elem"),
    "vec_cpr_reduce": ("cycles/repeat", "A", "PTO fit: fp16 TROWSUM 0.02-0.055 cycle/elem"),
    "cube_m": ("", "S", "ini cube_m_size=16"),
    "cube_n": ("", "S", "ini cube_n_size=16"),
    "cube_k": ("", "S", "ini cube_k_size=16 (fp16/bf16)"),
    "cube_k_int8": ("", "S", "ini DtypeMKN DT_INT8=16,32,16"),
    "mmad_fixed_cycles": ("cycles", "A", "per mmad instruction"),
    "mte1_fixed_cycles": ("cycles", "A", "per load_data instruction"),
    "scalar_issue_cycles": ("cycles", "A", "scalar unit issue cost per API call"),
    "flag_latency": ("cycles", "A", "set_flag -> wait_flag, same core"),
    "cross_flag_latency": ("cycles", "A", "cross_core_set_flag -> cross_core_wait_flag between "
                           "the cores of a group (no public figure; added in version 1 with no "
                           "effect on kernels of one kind of core)"),
    "launch_overhead": ("cycles", "A", "reported separately, not in RunResult.cycles"),
    "max_alloc_per_position": ("tensors", "S", "pyasc TQue.alloc_tensor: at most 8 per position"),
}


@dataclass(frozen=True)
class MachineConfig:
    """One simulated chip. Frozen: derive a what-if card with ``dataclasses.replace``.

    Sizes are bytes, rates bytes per cycle (``*_bpc``), costs cycles, the clock MHz, HBM
    bandwidth GB/s (10^9 B/s). Units, tags and sources of every field: :data:`PROVENANCE`.
    Raises ``ValueError`` on a non-positive size, rate or clock.
    """

    name: str
    version: int
    description: str
    arch: str  # "split": AIC (cube) and AIV (vector) are separate cores (Atlas A2/A3)
    freq_mhz: int
    n_aic: int
    n_aiv: int
    aiv_per_aic: int
    ub_bytes: int
    ub_reserved: int
    l1_bytes: int
    l1_reserved: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    align_ub: int
    align_l1: int
    align_l0ab: int
    align_l0c: int
    l2_bytes: int
    l2_line: int
    hbm_gbps: int
    hbm_efficiency_pct: int
    gm_read_miss_bpc: int
    gm_read_hit_bpc: int
    gm_write_bpc: int
    fix_write_bpc: int
    l1_to_l0a_bpc: int
    l1_to_l0b_bpc: int
    gm_align_bytes: int
    gm_misaligned_eff_pct: int
    dma_fixed_cycles: int
    dma_burst_cycles: int
    dma_latency_miss: int
    dma_latency_hit: int
    vec_fixed_cycles: int
    vec_repeat_bytes: int
    vec_cpr_unary: int
    vec_cpr_binary: int
    vec_cpr_transcendental: int
    vec_cpr_div: int
    vec_cpr_reduce: int
    cube_m: int
    cube_n: int
    cube_k: int
    cube_k_int8: int
    mmad_fixed_cycles: int
    mte1_fixed_cycles: int
    scalar_issue_cycles: int
    flag_latency: int
    cross_flag_latency: int
    launch_overhead: int
    max_alloc_per_position: int

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in PROVENANCE:
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ValueError(f"MachineConfig {self.name!r}: {f.name} must be an "
                                     f"integer >= 0, got {v!r}")
        for f in ("freq_mhz", "n_aic", "n_aiv", "ub_bytes", "hbm_gbps", "gm_read_miss_bpc",
                  "gm_read_hit_bpc", "gm_write_bpc", "fix_write_bpc", "l1_to_l0a_bpc",
                  "l1_to_l0b_bpc", "l2_line", "vec_repeat_bytes", "gm_misaligned_eff_pct",
                  "hbm_efficiency_pct"):
            if getattr(self, f) <= 0:
                raise ValueError(f"MachineConfig {self.name!r}: {f} must be > 0")
        for f in ("gm_misaligned_eff_pct", "hbm_efficiency_pct"):
            if getattr(self, f) > 100:
                raise ValueError(f"MachineConfig {self.name!r}: {f} must be <= 100")

    # ---- identity -------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """``name@version``, e.g. ``"ascend910b-like@1"``."""
        return f"{self.name}@{self.version}"

    @property
    def freq_hz(self) -> int:
        """Core clock, Hz."""
        return self.freq_mhz * 1_000_000

    # ---- usable capacities ----------------------------------------------------------------
    @property
    def ub_usable(self) -> int:
        """UB bytes a kernel may allocate (capacity minus the reserved tail)."""
        return self.ub_bytes - self.ub_reserved

    @property
    def l1_usable(self) -> int:
        """L1 bytes a kernel may allocate."""
        return self.l1_bytes - self.l1_reserved

    # ---- derived peaks [D] ----------------------------------------------------------------
    @property
    def cube_macs_per_cycle(self) -> int:
        """fp16 MACs per cycle per AIC: m x n x k of one fractal (4096 on the 910B-like card)."""
        return self.cube_m * self.cube_n * self.cube_k

    @property
    def cube_flops_per_cycle_core(self) -> int:
        """fp16 FLOP per cycle per AIC (a MAC is 2 FLOP)."""
        return 2 * self.cube_macs_per_cycle

    @property
    def cube_tflops_fp16(self) -> float:
        """Chip fp16 cube peak, TFLOP/s: cores x 16x16x16 x 2 x freq [D] (363.7 on 910b-like)."""
        return self.n_aic * self.cube_flops_per_cycle_core * self.freq_hz / 1e12

    @property
    def cube_tops_int8(self) -> float:
        """Chip int8 cube peak, TOP/s: k0 = 32, so 2x fp16 [D]."""
        return (self.n_aic * 2 * self.cube_m * self.cube_n * self.cube_k_int8
                * self.freq_hz / 1e12)

    @property
    def vec_lanes_fp16(self) -> int:
        """fp16 elements per repeat (128 on the 910b-like card)."""
        return self.vec_repeat_bytes // 2

    @property
    def vector_tops_fp16(self) -> float:
        """Chip vector peak, T fp16 element-ops/s at one repeat per cycle [D] (11.4)."""
        return self.n_aiv * self.vec_lanes_fp16 * self.freq_hz / 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth, bytes/s."""
        return self.hbm_gbps * 1e9

    @property
    def hbm_bytes_per_cycle(self) -> float:
        """HBM bandwidth, bytes per core cycle [D] (864.9 on 910b-like)."""
        return self.hbm_gbps * 1000 / self.freq_mhz

    @property
    def hbm_sustained_bytes_per_cycle(self) -> float:
        """The most HBM bytes per cycle the timing model lets all cores together move [D]:
        peak x ``hbm_efficiency_pct`` (795.7 on 910b-like)."""
        return self.hbm_bytes_per_cycle * self.hbm_efficiency_pct / 100

    @property
    def ridge_flop_per_byte(self) -> float:
        """Cube roofline ridge point, FLOP per HBM byte [D] (~227)."""
        return self.cube_tflops_fp16 * 1e12 / self.hbm_bytes_per_s

    def derived(self) -> dict[str, float]:
        """The [D] figures as a dict (for tests and the card table)."""
        return {
            "cube_tflops_fp16": self.cube_tflops_fp16,
            "cube_tops_int8": self.cube_tops_int8,
            "vector_tops_fp16": self.vector_tops_fp16,
            "hbm_bytes_per_cycle": self.hbm_bytes_per_cycle,
            "hbm_sustained_bytes_per_cycle": self.hbm_sustained_bytes_per_cycle,
            "ridge_flop_per_byte": self.ridge_flop_per_byte,
        }

    # ---- printing -------------------------------------------------------------------------
    def rows(self) -> list[tuple[str, object, str, str, str]]:
        """``(field, value, unit, tag, source)`` for every constant, then the derived rows.
        A value that differs from the preset this card was derived from is tagged ``user``."""
        base = PRESETS.get(self.key)
        out = []
        for f in fields(self):
            if f.name not in PROVENANCE:
                continue
            unit, tag, src = PROVENANCE[f.name]
            v = getattr(self, f.name)
            if self.name == "tiny" and f.name in _TINY_TAGS:
                tag, src = _TINY_TAGS[f.name]
            if base is not None and getattr(base, f.name) != v:
                tag, src = "user", f"changed from {getattr(base, f.name)} ({src})"
            out.append((f.name, v, unit, tag, src))
        d = self.derived()
        out += [
            ("cube_tflops_fp16", round(d["cube_tflops_fp16"], 1), "TFLOP/s", "D",
             "n_aic x cube_m*cube_n*cube_k x 2 x freq"),
            ("cube_tops_int8", round(d["cube_tops_int8"], 1), "TOP/s", "D",
             "n_aic x cube_m*cube_n*cube_k_int8 x 2 x freq"),
            ("vector_tops_fp16", round(d["vector_tops_fp16"], 2), "Telem-op/s", "D",
             "n_aiv x vec_repeat_bytes/2 x freq"),
            ("hbm_bytes_per_cycle", round(d["hbm_bytes_per_cycle"], 1), "B/cycle", "D",
             "hbm_gbps / freq"),
            ("hbm_sustained_bytes_per_cycle", round(d["hbm_sustained_bytes_per_cycle"], 1),
             "B/cycle", "D", "hbm_bytes_per_cycle x hbm_efficiency_pct"),
            ("ridge_flop_per_byte", round(d["ridge_flop_per_byte"], 1), "FLOP/B", "D",
             "cube peak / HBM bandwidth"),
        ]
        return out

    def table(self) -> str:
        """The card as a fixed-width text table with a tag column ([S]/[T]/[D]/[A]/[user])."""
        rows = self.rows()
        head = f"machine {self.key}: {self.description}"
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(str(r[1])) for r in rows)
        w2 = max(len(r[2]) for r in rows)
        lines = [head, f"{'constant':<{w0}}  {'value':>{w1}}  {'unit':<{w2}}  tag    source"]
        for name, v, unit, tag, src in rows:
            lines.append(f"{name:<{w0}}  {str(v):>{w1}}  {unit:<{w2}}  {'[' + tag + ']':<5}  "
                         f"{src}")
        return "\n".join(lines)

    def describe(self) -> str:
        """Alias of :meth:`table` (the house style's ``describe``)."""
        return self.table()

    def __str__(self) -> str:
        return self.key


_TINY_TAGS = {
    "n_aic": ("A", "teaching preset: 2 AIC"),
    "n_aiv": ("A", "teaching preset: 4 AIV"),
    "ub_bytes": ("A", "teaching preset: 16 KiB so overflow shows with small tiles"),
    "l1_bytes": ("A", "teaching preset: 64 KiB"),
    "l0a_bytes": ("A", "teaching preset: 16 KiB"),
    "l0b_bytes": ("A", "teaching preset: 16 KiB"),
    "l0c_bytes": ("A", "teaching preset: 32 KiB"),
    "l2_bytes": ("A", "teaching preset: 4 MiB"),
    "hbm_gbps": ("A", "teaching preset: 1600 x 2/24 (scaled with the cube cores)"),
}

_910B = MachineConfig(
    name="ascend910b-like", version=1,
    description="Ascend-910B1-like split AI core chip (24 AIC + 48 AIV, 1.85 GHz)",
    arch="split", freq_mhz=1850, n_aic=24, n_aiv=48, aiv_per_aic=2,
    ub_bytes=196_608, ub_reserved=256, l1_bytes=524_288, l1_reserved=256,
    l0a_bytes=65_536, l0b_bytes=65_536, l0c_bytes=131_072,
    align_ub=32, align_l1=32, align_l0ab=512, align_l0c=64,
    l2_bytes=201_326_592, l2_line=512, hbm_gbps=1600, hbm_efficiency_pct=92,
    gm_read_miss_bpc=32, gm_read_hit_bpc=110, gm_write_bpc=64, fix_write_bpc=64,
    l1_to_l0a_bpc=512, l1_to_l0b_bpc=256, gm_align_bytes=512, gm_misaligned_eff_pct=70,
    dma_fixed_cycles=40, dma_burst_cycles=8, dma_latency_miss=300, dma_latency_hit=120,
    vec_fixed_cycles=30, vec_repeat_bytes=256, vec_cpr_unary=1, vec_cpr_binary=2,
    vec_cpr_transcendental=4, vec_cpr_div=9, vec_cpr_reduce=4,
    cube_m=16, cube_n=16, cube_k=16, cube_k_int8=32, mmad_fixed_cycles=20,
    mte1_fixed_cycles=20, scalar_issue_cycles=4, flag_latency=2, cross_flag_latency=150,
    launch_overhead=2000,
    max_alloc_per_position=8,
)

_TINY = dataclasses.replace(
    _910B, name="tiny", version=1,
    description="tiny teaching chip (2 AIC + 4 AIV, UB 16 KiB, L1 64 KiB)",
    n_aic=2, n_aiv=4, ub_bytes=16_384, l1_bytes=65_536, l0a_bytes=16_384, l0b_bytes=16_384,
    l0c_bytes=32_768, l2_bytes=4 * 1024 * 1024, hbm_gbps=133,
)

PRESETS: dict[str, MachineConfig] = {m.key: m for m in (_910B, _TINY)}
"""Frozen presets by ``name@version``."""

DEFAULT_MACHINE = "ascend910b-like@1"

_DEFAULT_STACK: list[MachineConfig] = []


@contextlib.contextmanager
def use_machine(machine: str | MachineConfig):
    """Within the ``with`` block, "no machine given" means ``machine``: ``launch(...)``
    without ``machine=``, ``platform_info()`` on the host and ``get_machine()`` use it. Blocks
    nest. The grader runs a lab's host code on a one-core copy of the chip this way, so host
    tiling that reads the core count from ``platform_info()`` adapts. Yields the card."""
    card = get_machine(machine)
    _DEFAULT_STACK.append(card)
    try:
        yield card
    finally:
        _DEFAULT_STACK.pop()


def get_machine(machine: str | MachineConfig | None = None) -> MachineConfig:
    """The card for ``"name@version"``, a bare name (its latest version), or the card itself.
    ``None`` gives :data:`DEFAULT_MACHINE`, or the card of the innermost :func:`use_machine`
    block. An unknown name raises ``ValueError``."""
    if machine is None:
        if _DEFAULT_STACK:
            return _DEFAULT_STACK[-1]
        machine = DEFAULT_MACHINE
    if isinstance(machine, MachineConfig):
        return machine
    if isinstance(machine, str):
        if machine in PRESETS:
            return PRESETS[machine]
        versions = [m for m in PRESETS.values() if m.name == machine]
        if versions:
            return max(versions, key=lambda m: m.version)
    raise ValueError(f"unknown machine {machine!r}; presets: {', '.join(sorted(PRESETS))} "
                     "(or a MachineConfig)")


def describe(machine: str | MachineConfig | None = None) -> str:
    """The card's table (:meth:`MachineConfig.table`)."""
    return get_machine(machine).table()


@dataclass(frozen=True)
class PlatformInfo:
    """What a kernel or host tiling may ask of the platform (the analogue of Ascend C's
    ``GetCoreMemSize`` / platform info). Sizes in bytes are the *usable* capacities."""

    machine: str
    cube_core_num: int
    vector_core_num: int
    aiv_per_aic: int
    ub_size: int
    l1_size: int
    l0a_size: int
    l0b_size: int
    l0c_size: int
    l2_size: int
    freq_hz: int
    hbm_bytes_per_s: float


def platform_info(machine: str | MachineConfig | None = None) -> PlatformInfo:
    """:class:`PlatformInfo` of a card (default: :func:`get_machine`'s default)."""
    m = get_machine(machine)
    return PlatformInfo(machine=m.key, cube_core_num=m.n_aic, vector_core_num=m.n_aiv,
                        aiv_per_aic=m.aiv_per_aic, ub_size=m.ub_usable, l1_size=m.l1_usable,
                        l0a_size=m.l0a_bytes, l0b_size=m.l0b_bytes, l0c_size=m.l0c_bytes,
                        l2_size=m.l2_bytes, freq_hz=m.freq_hz, hbm_bytes_per_s=m.hbm_bytes_per_s)
