"""Modelled time of one kernel launch on the ``sim`` tier, from its deterministic counters.

The simulator has no clock. It counts what a launch asks of the memory system (SIM_API,
"Counters"), and this module turns those counts into seconds on a documented device. The
result is the same on every run and every machine, so the grader can grade a *modelled
speedup*, for example a shared-memory tiled GEMM against the naive kernel.

The model
---------
It is a roofline (Williams, Waterman & Patterson, CACM 52(4), 2009) with one roof per resource
that the counters measure. Each component is ``work / throughput``:

=========== ========================================== =====================================
component   work (counters)                            throughput
=========== ========================================== =====================================
``dram``    ``dram_read_bytes + dram_write_bytes``     ``dram_bytes_per_s``
            + local bytes that miss L1 (below)
``global``  ``global_{load,store}_sectors`` x 32 B     ``l2_bytes_per_s x f``
            + local bytes that miss L1 (below)
``shared``  ``shared_{load,store}_wavefronts`` x 128 B ``shared_bytes_per_s_per_sm x SMs x f``
``compute`` ``flops``                                  ``fp32_flops x f``
``sync``    ``barriers x barrier_cycles`` (cycles)     ``clock x SMs x f`` (cycles/s)
``tensor``  ``mma_ops x 4096`` FLOP, plus the share    ``fp16_tensor_flops x f``
            of ``global`` not overlapped (below)
``launch``  one launch                                 ``launch_overhead_s``
=========== ========================================== =====================================

``f = min(blocks, sm_count) / sm_count`` is the share of the SMs that have a block to run. A
launch of 16 blocks on a 108-SM A100 gets 16/108 of the L2, shared-memory, FP32 and barrier
throughput. DRAM bandwidth is not scaled, because the HBM is shared by the whole chip.

**The busiest block** (optional: ``modelled_time(..., busiest_block=...)``, the engine's
``LaunchStats.block_max``). A block runs on one SM from start to end ("the threads of a thread
block execute concurrently on one multiprocessor", CUDA C++ Programming Guide, "Hardware
Implementation"), so a launch lasts at least as long as its busiest block at one SM's
throughput: its global sectors x 32 B at ``l2_bytes_per_s / sm_count`` (an SM's share of L2,
as ``f`` gives it), its shared wavefronts at ``shared_bytes_per_s_per_sm``, its barriers at
``barrier_cycles / clock``. Each of the ``global``, ``shared`` and ``sync`` components is the
larger of its launch-wide term and its busiest-block term. A balanced grid is unchanged (its
busiest block is the average; with more blocks than SMs, less than one SM's share); a grid
whose blocks return at once but one is charged as the one SM that works.

The components overlap, so the kernel's time is their maximum. The launch overhead does not
overlap and is added::

    seconds = max(dram, global, shared, compute, sync, tensor) + launch

``bound`` names the largest component, ``launch`` included.

**Tensor cores** (``mma_ops``: warp-level ``mma.m16n8k16``, 16 x 8 x 16 multiply-adds = 4096
FLOP each, FP16 or BF16 inputs, float32 accumulation). Their peak is the profile's dense
``fp16_tensor_flops``; the *issue rate* it implies is ``fp16_tensor_flops / (SMs x clock)``
FLOP per clock per SM: 2048 on the A100 (312e12 / (108 x 1.41e9)), one m16n8k16 every 2 clocks
an SM, i.e. one every 8 clocks on each of its 4 tensor cores [derived]. **Overlap**
[assumption]: loads that a warp has in flight while it issues MMAs cost no tensor-core time;
loads it waits for first serialise with its MMAs (the model hides no latency behind other warps
or blocks: occupancy is not modelled). The engine counts ``cp_async_overlapped_bytes``: each
completed ``cp.async`` group's bytes times the share of one pipeline stage's MMAs (its warp's
MMAs / the thread's groups) that its warp issued while the group was in flight
(:func:`kernellab.sim.sm80.block_overlap`). Double buffering over n tiles credits n - 1 of them
in full; one MMA between a copy and its wait, a small copy in flight across every MMA, or a zero
fill (no bytes read) credits little or nothing. With ``o`` = overlapped bytes /
``global_load_bytes`` (:func:`overlap`), ``tensor = mma_ops x 4096 / (fp16_tensor_flops x f) +
(1 - o) x global`` when ``mma_ops > 0``, else 0. A kernel that loads each tile synchronously
before its MMAs therefore pays load + MMA time; a double-buffered one the larger of the two.

What each counter costs:

* **Global memory.** The model charges sectors, not bytes the threads asked for. An
  uncoalesced warp load of 32 floats from 32 different lines touches 32 sectors, while a
  coalesced one touches 4. The uncoalesced load therefore costs 8x as much. Every requested
  sector is assumed to be served by L2, with no L1 reuse.
* **DRAM.** ``dram_*_bytes`` is the compulsory traffic: each distinct sector is counted once per
  launch, as if L2 were perfect.
* **Shared memory.** The model charges wavefronts. A 2-way bank conflict doubles the wavefronts,
  so it doubles the shared component. A broadcast is free.
* **Local memory** (:func:`local_traffic`). A ``cuda.local`` array the compiler cannot keep
  in registers lives in *local memory*, which "resides in device memory" and is cached in L1
  and L2 (CUDA C++ Programming Guide, "Device Memory Accesses", "Local Memory") [verified,
  via NVIDIA's Nsight documentation of the same text]. The engine reports one thread's frame,
  ``local_frame_bytes`` (F: the PTX ``__local_depot``, so arrays NVVM promoted to registers
  cost nothing; ptxas's stack frame adds its register spill slots, which F leaves out: see
  "What the model ignores"), and ``local_touched_bytes`` (T: the bytes the threads stored to
  it). The
  frames of the threads resident on one SM, ``W = F x resident threads``, compete for the L1
  left beside the shared-memory carveout, ``C = l1_shared_bytes_per_sm - carveout``. The
  share of the frames that does not fit, ``miss = max(0, 1 - C / W)`` (an ideal cache; LRU on
  a cyclic sweep would miss more) [assumption], goes to device memory and is charged like a
  global scratch array the kernel writes and reads back: ``2 x miss x T`` bytes, both as L2
  sectors and as DRAM bytes (each sector once each way, as for global arrays). A frame that
  fits costs nothing: L1 hits are not modelled for global memory either. Resident threads:
  the launch's blocks spread over the SMs, ``ceil(blocks / SMs)`` a SM, but never fewer than
  an SM holds when the grid fills the GPU at the lowest occupancy any kernel has,
  :data:`MIN_RESIDENT_THREADS` (its registers over the most a thread may use), capped by the
  occupancy limits of threads, blocks and shared memory per SM. The floor makes the charge a
  property of the kernel, not of the block size or of the small grids the labs time (a speed
  rule that counts every grid as filling the GPU must charge local memory as on a full GPU):
  without it a 2 KiB frame a thread was free in blocks of 64 threads and charged in blocks of
  128.
* **Compute.** The engine counts no arithmetic. ``flops`` is 0 unless the caller writes it into
  the counters (e.g. ``2*M*N*K`` for a GEMM). When ``flops`` is 0, the compute component is
  0: the model estimates nothing, so arithmetic is not modelled.

Input rules:

* Missing keys raise ``KeyError`` naming every missing key. ``flops`` and the local-memory
  counters (``local_frame_bytes``, ``local_touched_bytes``; ``threads`` is read with them) are
  optional and default to 0. Extra keys are ignored.
* Negative or non-finite values raise ``ValueError``.
* ``blocks`` = 0 is treated as 1 in ``f``, so a dict of zeros models to the launch overhead
  alone.
* Pass **one launch's** counters. A sum over several launches (``Capture.total()``) would
  overlap work that really runs one launch after another, and would charge one launch
  overhead for all of them. For several launches, use :func:`total_seconds` or give
  :func:`speedup` a list; both add up the launches' modelled times.

Check against a published ladder (``tests/test_kernellab/sim/test_sim_model.py``): analytic counters
for Boehm's
first three CUDA SGEMM kernels (S. Boehm, "How to Optimize a CUDA Matmul Kernel for
cuBLAS-like Performance: a Worklog", 2022; the table in the siboehm/SGEMM_CUDA README) at
n=4096 give modelled speedups of
6.6x for coalescing (measured on an A6000: 6.43x) and 1.64x for 32x32 shared-memory tiles
(measured: 1.50x). The model was not fitted to these figures.

What the model ignores
----------------------
=================================  ==========================================================
ignored                            consequence
=================================  ==========================================================
latency and latency hiding         no occupancy effect: 1 warp/SM and 64 warps/SM get the same
(occupancy, ILP, Little's law)     throughput; few blocks are charged only through ``f``.
                                   Occupancy is reported, not charged
                                   (:func:`kernellab.sim.resources.resource_table`)
L1 hits; L2/L1 capacity; hit       every requested sector costs L2 bandwidth, even when a real
rates beyond compulsory traffic    L1 would hit; DRAM sees each sector once, even if L2 would
                                   have evicted it
DRAM share per SM                  DRAM is not scaled by ``f``, which is optimistic for small
                                   grids (one SM cannot saturate HBM)
instruction issue, integer and     index arithmetic, loop overhead, predication and divergence
address arithmetic, SFU ops        cost nothing; only ``flops`` (if given) is compute
shuffles, votes, warp syncs,       counted by the engine, but not modelled (cost 0)
atomics
register pressure and spills       F is the PTX depot, not ptxas's stack frame: spill slots
                                   are not in the working set and spill traffic is not
                                   charged (ptxas gives a spill's static bytes, not how often
                                   it runs), so a spilling kernel is modelled faster than it
                                   runs; ``LaunchStats.resources`` shows registers, stack
                                   frame and spills. Where nothing spills the two frames are
                                   equal: the course's FlashAttention kernel at the lab's
                                   d <= 64 has F = ptxas's 4 Bc bytes (its scores; tests:
                                   test_sim_resources). Taking ptxas's frame would run
                                   ptxas at every launch.
                                   Local accesses are charged by footprint (stored bytes x
                                   2), not counted one by one
FP16/FP64 SIMT rates; TF32, INT8   one FP32 (non-tensor) peak for all ``flops``; tensor
tensor-core rates                  cores at their dense FP16/BF16 rate (``mma_ops``) only
clocks and throttling              boost clock always; no power or thermal limits
tail effects and waves             ``blocks`` > SMs is treated as perfectly balanced, unless
                                   the busiest block is given (then: at least that block)
shared and global contention       L1 and shared memory share one data path on real SMs; here
                                   their components overlap (max) instead of adding
=================================  ==========================================================

Profiles and sources
--------------------
Markers: [verified] means read in the primary source; [secondary]
means quoted by a third party; [memory] means well known but not checked here; [derived]
means computed from the other figures; [assumption] means the model's choice.

**a100: NVIDIA A100-SXM4-40GB (the default).** Source: NVIDIA A100 Tensor Core GPU
Architecture whitepaper (2020).

* 108 SMs; 1410 MHz boost clock; FP32 19.5 TFLOP/s non-tensor (= 108 x 64 lanes x 2 x
  1.41 GHz); HBM2 1555 GB/s. The same figures are in NVIDIA's A100 datasheet, as quoted by
  glennklockwood.com [secondary].
* L2: 5120 B/clk x 1.41 GHz = 7.22 TB/s. The whitepaper's comparison table gives 5120 B/clk
  against V100's 2048 B/clk [memory]. That agrees with its "2.3x V100 L2 read bandwidth"
  (2.5 x 1410/1530 = 2.3) [memory], and with the 7219 GB/s (= 5120 x 1.41) in Table 3 of
  Ultrason. Sonochem. 99:106546 (2023) [secondary].
* Measured L2 bandwidth is about 5.x TB/s (te42kyfo/gpu-benches, README "gpu-l2-cache")
  [secondary]. The model uses the peak, like every other roof here.
* ``l2_bytes``: 40 MB of L2 (the whitepaper's "40 MB L2 cache" [memory]; the CUDA ``deviceQuery``
  sample prints "L2 Cache Size: 41943040 bytes" = 40 MiB on an A100-SXM4-40GB [secondary]).
* The 80 GB part has 2039 GB/s DRAM and is otherwise the same. Make it with
  ``dataclasses.replace(PROFILES["a100"], name="a100-80gb", dram_bytes_per_s=2039e9)``.

* Tensor cores: 312 TFLOP/s dense FP16 and BF16 with FP32 accumulation (624 with 2:4
  sparsity, not modelled), 156 TF32 (whitepaper, Table 1) [verified via NVIDIA's A100
  datasheet, "Peak FP16 Tensor Core 312 TF"].

**h100: NVIDIA H100 SXM5 80 GB.**

* 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022) [secondary].
* FP32 67 TFLOP/s non-tensor and HBM3 3.35 TB/s (NVIDIA H100 datasheet, via secondary
  copies of NVIDIA's spec page) [secondary].
* Tensor cores: 989 TFLOP/s dense FP16/BF16 (the datasheet's 1,979 "with sparsity" halved;
  TF32 494 dense) [secondary]. At the profile's 1.98 GHz that is 3784 FLOP per clock an SM; the
  whitepaper's dense rate is 4096 at its lower tensor-core boost clock [memory].
* Clock 1.98 GHz [derived]: 67e12 / (132 x 128 lanes x 2). That matches the 1980 MHz max clock
  that ``nvidia-smi`` reports for H100 SXM5 [memory].
* L2: 5120 B/clk x 1.98 GHz = 10.1 TB/s [assumption]. NVIDIA publishes no H100 L2 bytes/clock,
  so the A100 figure is reused per clock, as the Ultrason. Sonochem. table above does.
* ``l2_bytes``: 50 MB of L2 on H100 SXM5 (NVIDIA H100 Tensor Core GPU Architecture
  whitepaper, 2022: "50 MB L2 cache"), taken as 50 MiB as ``deviceQuery`` counts it [memory].

**h200: NVIDIA H200 SXM 141 GB.** It is H100 SXM5 compute (same GH100 die, 132 SMs, 67 TFLOP/s
FP32, 989 TFLOP/s dense FP16/BF16 tensor) with HBM3e at 4.8 TB/s (NVIDIA's H200 product page,
via secondary copies) [secondary].
Its ``l2_bytes`` is the H100's 50 MB [derived: the same GH100 die; NVIDIA's H200 pages
give no L2 size].

Per-SM figures, all profiles:

* Shared memory has 32 banks x 4 B per clock per SM, i.e. one 128-B wavefront per clock (CUDA
  C++ Programming Guide, "Shared Memory", compute capability 5.x and later) [memory]. An SM's
  L1 also returns about 128 B/clk, measured by te42kyfo/gpu-benches, README "gpu-cache"
  [secondary].
* ``registers_per_sm`` is 65536 (64 K 32-bit registers, also the most one block may use)
  and ``max_registers_per_thread`` 255 (CUDA C++ Programming Guide, "Technical
  Specifications per Compute Capability", cc 8.0 and 9.0) [memory];
  :mod:`kernellab.sim.resources` turns them into occupancy.
* ``max_threads_per_sm`` is 2048 and ``max_blocks_per_sm`` 32. ``max_shared_per_sm`` is
  164 KiB (cc 8.0) or 228 KiB (cc 9.0) (CUDA C++ Programming Guide, "Compute Capabilities"
  table [memory]; A100 ``deviceQuery`` prints 167936 bytes [secondary]). The local-memory
  model uses them for the resident threads of an SM.
* ``l1_shared_bytes_per_sm``, the unified L1 data cache and shared memory of one SM: 192 KiB
  on A100 (NVIDIA Ampere GPU Architecture Tuning Guide, "Unified Shared Memory/L1/Texture
  Cache": "combined L1 cache and shared memory ... 192 KB per SM") and 256 KiB on H100/H200
  (NVIDIA Hopper Tuning Guide, same section) [memory]. ``shared_carveouts``: the shared-memory
  sizes an SM can be configured to, the smallest that holds the resident blocks' shared
  memory is taken: 0, 8, 16, 32, 64, 100, 132, 164 KiB on A100 (Ampere Tuning Guide
  [secondary: quoted in numba/numba#7897]), the same plus 196 and 228 KiB on H100/H200
  (Hopper Tuning Guide [memory]).
* ``launch_overhead_s`` is 3 µs. The launch overhead of null kernels "appears to have been
  reduced to about 3 microseconds with recent hardware and software" (NVIDIA developer forums,
  "Too much time for kernel launch latency", 2022) [secondary]. The same value is used for
  every profile.
* ``barrier_cycles`` is 20 per ``syncthreads`` per block [assumption]. This is an
  order-of-magnitude figure; no vendor number exists. Microbenchmarks of old parts measured a
  few tens of cycles (Wong et al., ISPASS 2010) [memory].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DeviceProfile",
    "ModelledTime",
    "PROFILES",
    "DEFAULT_PROFILE",
    "SECTOR_BYTES",
    "WAVEFRONT_BYTES",
    "REQUIRED_COUNTERS",
    "get_profile",
    "modelled_time",
    "total_seconds",
    "speedup",
    "describe",
    "LocalTraffic",
    "local_traffic",
    "tensor_seconds",
    "overlap",
    "MMA_FLOPS",
]

SECTOR_BYTES = 32
"""Bytes per global-memory sector, the unit the L1/L2 move (CUDA C++ Best Practices Guide,
"Coalesced Access to Global Memory")."""

WAVEFRONT_BYTES = 32 * 4
"""Bytes one shared-memory wavefront moves: 32 banks x 4 bytes."""

REQUIRED_COUNTERS = (
    "blocks",
    "global_load_sectors",
    "global_store_sectors",
    "dram_read_bytes",
    "dram_write_bytes",
    "shared_load_wavefronts",
    "shared_store_wavefronts",
    "barriers",
)
"""Counter keys :func:`modelled_time` reads and requires. ``flops`` is read too, but it is
optional (default 0)."""

COMPONENTS = ("dram", "global", "shared", "compute", "sync", "tensor", "launch")
"""Breakdown keys, in tie-breaking order: when two components are equal, the first one is
named as ``bound``."""

LABELS = {
    "dram": "DRAM",
    "global": "global sectors",
    "shared": "shared wavefronts",
    "compute": "FP32",
    "sync": "barriers",
    "tensor": "tensor cores",
    "launch": "launch",
}


@dataclass(frozen=True)
class DeviceProfile:
    """Published throughputs of one GPU, in SI units. The sources are in the module docstring.

    Attributes:
        name: short key, as in :data:`PROFILES` (``"a100"``).
        description: the product (``"NVIDIA A100-SXM4-40GB"``).
        sm_count: streaming multiprocessors.
        clock_ghz: boost clock, GHz.
        fp32_flops: FP32 non-tensor peak, FLOP/s.
        dram_bytes_per_s: DRAM (HBM) peak bandwidth, bytes/s.
        l2_bytes_per_s: L2 peak bandwidth for the whole chip, bytes/s. This is the throughput
            that global-memory sector traffic is charged at.
        shared_bytes_per_s_per_sm: shared-memory bandwidth of one SM, bytes/s (32 banks x 4 B
            x clock).
        launch_overhead_s: fixed cost of one launch, seconds. It does not overlap with the
            kernel.
        barrier_cycles: cost of one ``syncthreads`` in one block, clock cycles.
        max_threads_per_sm: resident-thread limit per SM.
        max_shared_per_sm: shared memory per SM, bytes.
        l1_shared_bytes_per_sm: unified L1 data cache + shared memory of one SM, bytes.
        shared_carveouts: the shared-memory sizes (bytes) an SM's L1 can be split at,
            ascending.
        max_blocks_per_sm: resident-block limit per SM.
        registers_per_sm: 32-bit registers of one SM (also the most one block may use).
        max_registers_per_thread: the most registers ptxas gives one thread.
        l2_bytes: the L2 cache of the whole chip, bytes.
        fp16_tensor_flops: dense FP16/BF16 tensor-core peak (float32 accumulation), FLOP/s.
    """

    name: str
    description: str
    sm_count: int
    clock_ghz: float
    fp32_flops: float
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    shared_bytes_per_s_per_sm: float
    launch_overhead_s: float
    barrier_cycles: float
    max_threads_per_sm: int
    max_shared_per_sm: int
    l1_shared_bytes_per_sm: int = 192 * 1024
    shared_carveouts: tuple = tuple(k * 1024 for k in (0, 8, 16, 32, 64, 100, 132, 164))
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    l2_bytes: int = 40 * 1024 * 1024
    fp16_tensor_flops: float = 312e12

    def __post_init__(self):
        for f in ("sm_count", "clock_ghz", "fp32_flops", "dram_bytes_per_s", "l2_bytes_per_s",
                  "shared_bytes_per_s_per_sm", "l2_bytes", "fp16_tensor_flops"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"DeviceProfile {self.name!r}: {f} must be > 0, got {v!r}")
        for f in ("launch_overhead_s", "barrier_cycles"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"DeviceProfile {self.name!r}: {f} must be >= 0, got {v!r}")

    @property
    def clock_hz(self) -> float:
        """Boost clock, Hz."""
        return self.clock_ghz * 1e9

    @property
    def shared_bytes_per_s(self) -> float:
        """Shared-memory bandwidth of the whole chip, bytes/s."""
        return self.shared_bytes_per_s_per_sm * self.sm_count


_A100_CLOCK_GHZ = 1.41
_H100_CLOCK_GHZ = 1.98
_L2_BYTES_PER_CLK = 5120  # A100 whitepaper; reused per clock for H100/H200 (an assumption)
_LAUNCH_S = 3e-6
_BARRIER_CYCLES = 20

_AMPERE_CARVEOUTS_KIB = (0, 8, 16, 32, 64, 100, 132, 164)   # Ampere Tuning Guide
_HOPPER_CARVEOUTS_KIB = _AMPERE_CARVEOUTS_KIB + (196, 228)  # Hopper Tuning Guide


def _profile(name, description, sms, ghz, fp32_flops, dram_bytes_per_s, max_shared_kib,
             l1_kib, carveouts_kib, l2_mib, tensor_flops):
    return DeviceProfile(
        name=name, description=description, sm_count=sms, clock_ghz=ghz,
        fp32_flops=fp32_flops, dram_bytes_per_s=dram_bytes_per_s,
        l2_bytes_per_s=_L2_BYTES_PER_CLK * ghz * 1e9,
        shared_bytes_per_s_per_sm=WAVEFRONT_BYTES * ghz * 1e9,
        launch_overhead_s=_LAUNCH_S, barrier_cycles=_BARRIER_CYCLES,
        max_threads_per_sm=2048, max_shared_per_sm=max_shared_kib * 1024,
        l1_shared_bytes_per_sm=l1_kib * 1024,
        shared_carveouts=tuple(k * 1024 for k in carveouts_kib), l2_bytes=l2_mib * 1024 * 1024,
        fp16_tensor_flops=tensor_flops)


PROFILES: dict[str, DeviceProfile] = {
    "a100": _profile("a100", "NVIDIA A100-SXM4-40GB", 108, _A100_CLOCK_GHZ, 19.5e12, 1555e9, 164,
                     192, _AMPERE_CARVEOUTS_KIB, 40, 312e12),
    "h100": _profile("h100", "NVIDIA H100 SXM5 80GB", 132, _H100_CLOCK_GHZ, 67e12, 3.35e12, 228,
                     256, _HOPPER_CARVEOUTS_KIB, 50, 989e12),
    "h200": _profile("h200", "NVIDIA H200 SXM 141GB", 132, _H100_CLOCK_GHZ, 67e12, 4.8e12, 228,
                     256, _HOPPER_CARVEOUTS_KIB, 50, 989e12),
}

DEFAULT_PROFILE = "a100"
"""The A100 is the default. It is the part whose whitepaper gives every throughput the model
needs, including L2 bytes per clock, so none of its roofs is an assumption. It is also the
GPU most of the course's sources report on (e.g. FlashAttention-2's benchmarks)."""


def get_profile(profile: str | DeviceProfile = DEFAULT_PROFILE) -> DeviceProfile:
    """Return the :class:`DeviceProfile` for a name in :data:`PROFILES` (any case), or the
    profile itself. An unknown name raises ``ValueError`` listing the valid ones."""
    if isinstance(profile, DeviceProfile):
        return profile
    if isinstance(profile, str) and profile.lower() in PROFILES:
        return PROFILES[profile.lower()]
    raise ValueError(f"unknown device profile {profile!r}; valid profiles: "
                     f"{', '.join(sorted(PROFILES))} (or a DeviceProfile)")


@dataclass(frozen=True)
class LocalTraffic:
    """What the model charges for one launch's local memory (module docstring, "Local memory").

    Attributes:
        frame_bytes: F, one thread's local frame (counter ``local_frame_bytes``), bytes.
        touched_bytes: T, the bytes all threads stored to local memory, bytes.
        resident_threads: threads resident on one SM (the launch's blocks spread over the SMs,
            capped by the occupancy limits).
        working_set_bytes: ``F x resident_threads``, bytes.
        l1_bytes: C, the L1 left beside the shared-memory carveout of the resident blocks.
        miss: ``max(0, 1 - C / W)``, the share of local accesses that go to device memory.
        device_bytes: ``2 x miss x T``, bytes charged to both L2 and DRAM.
    """

    frame_bytes: int
    touched_bytes: int
    resident_threads: int
    working_set_bytes: int
    l1_bytes: int
    miss: float
    device_bytes: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _local_number(c: Mapping, key: str) -> float:
    return _counter(c, key) if key in c else 0.0


#: The fewest threads an SM holds when a grid fills the GPU: the 64 K 32-bit registers of an SM
#: over the 255 a thread may use, in whole warps (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability": compute capabilities 7.0-9.0): 256.
MIN_RESIDENT_THREADS = (PROFILES[DEFAULT_PROFILE].registers_per_sm
                        // PROFILES[DEFAULT_PROFILE].max_registers_per_thread) // 32 * 32


def local_traffic(counters, profile: str | DeviceProfile = DEFAULT_PROFILE) -> LocalTraffic:
    """The local-memory charge of one launch (module docstring, "Local memory") from its
    counters (a dict or ``LaunchStats``): ``local_frame_bytes``, ``local_touched_bytes``,
    ``blocks``, ``threads`` and ``shared_bytes_per_block`` (missing keys count as 0). A launch
    without a local frame gets all zeros."""
    p = get_profile(profile)
    c = _as_mapping(counters)
    frame = int(_local_number(c, "local_frame_bytes"))
    touched = int(_local_number(c, "local_touched_bytes"))
    blocks = max(int(_local_number(c, "blocks")), 1)
    tpb = max(int(_local_number(c, "threads")) // blocks, 1)
    smem = int(_local_number(c, "shared_bytes_per_block"))
    warps_tpb = -(-tpb // 32) * 32
    per_sm = min(max(-(-blocks // p.sm_count), -(-MIN_RESIDENT_THREADS // warps_tpb)),
                 p.max_blocks_per_sm, max(p.max_threads_per_sm // warps_tpb, 1))
    if smem:
        per_sm = min(per_sm, max(p.max_shared_per_sm // smem, 1))
    per_sm = max(per_sm, 1)
    shared = per_sm * smem
    carveout = next((k for k in p.shared_carveouts if k >= shared), shared)
    l1 = max(p.l1_shared_bytes_per_sm - carveout, 0)
    resident = per_sm * tpb
    working = frame * resident
    miss = max(0.0, 1.0 - l1 / working) if working else 0.0
    return LocalTraffic(frame_bytes=frame, touched_bytes=touched, resident_threads=resident,
                        working_set_bytes=working, l1_bytes=l1, miss=miss,
                        device_bytes=2.0 * miss * touched)


@dataclass(frozen=True)
class ModelledTime:
    """Modelled time of one launch.

    Attributes:
        seconds: ``max`` of the overlapping components plus ``launch``, seconds.
        breakdown: component -> seconds, for every name in :data:`COMPONENTS`.
        bound: the name of the largest component (``"launch"`` for tiny kernels).
        profile: the :class:`DeviceProfile` the time was modelled for.
        active_sms: ``min(blocks, sm_count)``: the SMs that have a block to run. The launch
            gets the throughput of ``max(active_sms, 1)`` SMs.
        local: the local-memory charge (:class:`LocalTraffic`) included in ``dram`` and
            ``global``.
    """

    seconds: float
    breakdown: dict
    bound: str
    profile: DeviceProfile
    active_sms: int
    local: LocalTraffic | None = None

    @property
    def kernel_seconds(self) -> float:
        """The time without the launch overhead: the largest overlapping component, seconds."""
        return max(v for k, v in self.breakdown.items() if k != "launch")

    @property
    def kernel_bound(self) -> str | None:
        """The largest component other than ``launch``, or ``None`` when all are 0."""
        best = _argmax({k: v for k, v in self.breakdown.items() if k != "launch"})
        return best if self.breakdown[best] > 0 else None

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {"seconds": self.seconds, "kernel_seconds": self.kernel_seconds,
                "bound": self.bound, "kernel_bound": self.kernel_bound,
                "breakdown": dict(self.breakdown), "profile": self.profile.name,
                "active_sms": self.active_sms,
                "local": self.local.as_dict() if self.local else None}

    def __str__(self) -> str:
        return describe(self)


def _argmax(d: Mapping[str, float]) -> str:
    # First maximum in COMPONENTS order, so ties are named deterministically.
    return max((k for k in COMPONENTS if k in d), key=lambda k: (d[k], -COMPONENTS.index(k)))


def _counter(counters: Mapping, key: str) -> float:
    v = counters[key]
    if isinstance(v, (bool, str, bytes)):
        raise ValueError(f"counter {key!r} must be a number, got {v!r}")
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"counter {key!r} must be a number, got {v!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"counter {key!r} must be a finite number >= 0, got {v!r}")
    return v


def _as_mapping(launch) -> Mapping:
    """A counters mapping from a dict or from an object with ``.counters`` (``LaunchStats``)."""
    if isinstance(launch, Mapping):
        return launch
    counters = getattr(launch, "counters", None)
    if isinstance(counters, Mapping):
        return counters
    raise TypeError("expected a counters dict or a LaunchStats (an object with .counters), "
                    f"got {type(launch).__name__}")


def modelled_time(counters, profile: str | DeviceProfile = DEFAULT_PROFILE, *,
                  busiest_block: Mapping | None = None) -> ModelledTime:
    """Model the time of one launch from its counters (a dict, or a ``LaunchStats``).

    See the module docstring for the formula, the units and what the model ignores. Missing
    keys in :data:`REQUIRED_COUNTERS` raise ``KeyError`` naming every missing key. ``flops`` is
    optional and defaults to 0, which means compute is not modelled; the local-memory
    counters (``local_frame_bytes``, ``local_touched_bytes``, with ``threads``) are optional
    and default to 0 (no local memory). ``busiest_block``: the most work one block did
    (``LaunchStats.block_max``: ``global_sectors``, ``shared_wavefronts``, ``barriers``;
    missing keys count as 0), so that the launch takes at least that block's time on one SM
    (module docstring, "The busiest block"); None: not modelled.
    """
    p = get_profile(profile)
    c = _as_mapping(counters)
    missing = [k for k in REQUIRED_COUNTERS if k not in c]
    if missing:
        raise KeyError(f"counters lack {', '.join(repr(k) for k in missing)} "
                       f"(modelled_time needs {', '.join(REQUIRED_COUNTERS)}; 'flops' optional)")
    n = {k: _counter(c, k) for k in REQUIRED_COUNTERS}
    flops = _counter(c, "flops") if "flops" in c else 0.0

    active = int(min(n["blocks"], p.sm_count))
    busy = max(active, 1)  # blocks=0 (a dict of zeros) is treated as 1 block
    share = busy / p.sm_count  # the fraction of the chip that has work

    local = local_traffic(c, p)
    sectors = n["global_load_sectors"] + n["global_store_sectors"]
    wavefronts = n["shared_load_wavefronts"] + n["shared_store_wavefronts"]
    breakdown = {
        "dram": (n["dram_read_bytes"] + n["dram_write_bytes"] + local.device_bytes)
        / p.dram_bytes_per_s,
        "global": (sectors * SECTOR_BYTES + local.device_bytes) / (p.l2_bytes_per_s * share),
        "shared": wavefronts * WAVEFRONT_BYTES / (p.shared_bytes_per_s_per_sm * busy),
        "compute": flops / (p.fp32_flops * share),
        "sync": n["barriers"] * p.barrier_cycles / (p.clock_hz * busy),
        "tensor": 0.0,
        "launch": p.launch_overhead_s,
    }
    if busiest_block is not None:
        b = {k: _local_number(busiest_block, k)
             for k in ("global_sectors", "shared_wavefronts", "barriers")}
        for comp, t in (("global", b["global_sectors"] * SECTOR_BYTES
                         / (p.l2_bytes_per_s / p.sm_count)),
                        ("shared", b["shared_wavefronts"] * WAVEFRONT_BYTES
                         / p.shared_bytes_per_s_per_sm),
                        ("sync", b["barriers"] * p.barrier_cycles / p.clock_hz)):
            breakdown[comp] = max(breakdown[comp], t)
    breakdown["tensor"] = tensor_seconds(c, p, share, breakdown["global"])
    kernel = max(v for k, v in breakdown.items() if k != "launch")
    return ModelledTime(seconds=kernel + p.launch_overhead_s, breakdown=breakdown,
                        bound=_argmax(breakdown), profile=p, active_sms=active,
                        local=local if local.frame_bytes else None)


MMA_FLOPS = 2 * 16 * 8 * 16
"""FLOP of one ``mma.m16n8k16`` (16 x 8 x 16 multiply-adds)."""


def tensor_seconds(c: Mapping, p: DeviceProfile, share: float, global_s: float) -> float:
    """The ``tensor`` component (module docstring, "Tensor cores"): the MMAs at the dense
    FP16/BF16 peak of the busy SMs plus the share of the global component not in flight
    across them; 0 without MMAs."""
    mmas = _local_number(c, "mma_ops")
    if not mmas:
        return 0.0
    return mmas * MMA_FLOPS / (p.fp16_tensor_flops * share) + (1.0 - overlap(c)) * global_s


def overlap(c: Mapping) -> float:
    """The share of a launch's global loads in flight across its MMAs (module docstring,
    "Tensor cores"): ``cp_async_overlapped_bytes / global_load_bytes``, 0..1; 1 with no loads,
    0 with no MMAs."""
    if not _local_number(c, "mma_ops"):
        return 0.0
    loads = _local_number(c, "global_load_bytes")
    return min(1.0, _local_number(c, "cp_async_overlapped_bytes") / loads) if loads else 1.0


def _launch_list(launches) -> list:
    if isinstance(launches, Mapping) or hasattr(launches, "counters"):
        return [launches]
    if hasattr(launches, "launches"):  # a kernellab.sim Capture
        launches = launches.launches
    if isinstance(launches, (str, bytes)):
        raise TypeError("expected counters, a LaunchStats, or a list of them")
    out = list(launches)
    if not out:
        raise ValueError("no launches given")
    return out


def total_seconds(launches, profile: str | DeviceProfile = DEFAULT_PROFILE, *,
                  include_launch: bool = True) -> float:
    """The modelled seconds of one launch, or the sum over a list of launches. Launches run
    one after another.

    ``launches``: a counters dict, a ``LaunchStats``, a list of either, or a ``Capture``
    (its ``.launches``). ``include_launch=False`` drops the launch overheads. That leaves the
    kernels' own time, which is what differs between two versions of a kernel when the
    problem is tiny.
    """
    total = 0.0
    for launch in _launch_list(launches):
        mt = modelled_time(launch, profile)
        total += mt.seconds if include_launch else mt.kernel_seconds
    return total


def speedup(counters_baseline, counters_candidate,
            profile: str | DeviceProfile = DEFAULT_PROFILE, *,
            include_launch: bool = True) -> float:
    """Modelled speedup, ``time(baseline) / time(candidate)``. Above 1 means the candidate is
    faster.

    Each argument is one launch's counters, a ``LaunchStats``, a list of them, or a
    ``Capture``; a list is the sum of its launches' times. Keep ``include_launch=True`` to
    compare what a GPU user would see. At the sizes the simulator can run, the 3 µs launch
    overhead is as large as the kernels and pulls speedups towards 1 (a 64x64 GEMM: 1.33x
    with it, 1.65x without, for shared-memory tiling). ``include_launch=False`` compares
    the kernels alone.
    """
    base = total_seconds(counters_baseline, profile, include_launch=include_launch)
    cand = total_seconds(counters_candidate, profile, include_launch=include_launch)
    if cand <= 0:
        raise ValueError("the candidate's modelled time is 0 (no counted work and no launch "
                         "overhead); a speedup is undefined")
    return base / cand


def _fmt_s(s: float) -> str:
    if s == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def describe(mt: ModelledTime) -> str:
    """One line, e.g. ``"12.3 µs on a100-model (bound: global sectors 9.8 µs; shared
    wavefronts 1.2 µs; launch 3 µs)"``. The components are listed largest first, and
    components that are 0 are left out; local memory charged past L1 is named last."""
    parts = sorted(((k, v) for k, v in mt.breakdown.items() if v > 0),
                   key=lambda kv: (-kv[1], COMPONENTS.index(kv[0])))
    # The bound first (it is the largest; on ties, the named one).
    parts.sort(key=lambda kv: kv[0] != mt.bound)
    body = "; ".join(f"{LABELS[k]} {_fmt_s(v)}" for k, v in parts)
    busy = f", {mt.active_sms}/{mt.profile.sm_count} SMs busy" \
        if 0 < mt.active_sms < mt.profile.sm_count else ""
    local = (f"; local memory past L1: {mt.local.device_bytes:.0f} B of a "
             f"{mt.local.frame_bytes}-byte frame a thread" if mt.local and mt.local.device_bytes
             else "")
    return f"{_fmt_s(mt.seconds)} on {mt.profile.name}-model{busy} (bound: {body}{local})"
