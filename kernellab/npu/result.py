"""``RunResult``: what one launch reports.

Definitions (all deterministic, from the timing replay):

* ``cycles`` — device makespan: from the first instruction to the last core's data being
  visible; the launch overhead (``machine.launch_overhead``) is reported separately and not
  included. ``time_us = cycles / freq_MHz``.
* ``pipe_busy_pct`` — busy cycles / ``cycles`` per pipe, on the *critical core* (the core that
  finishes last; lowest index on ties). ``bottleneck`` is its busiest pipe;
  ``bottleneck_cause`` says, for a DMA pipe, whether HBM (the HBM transfers in flight wanted
  more than the sustained bandwidth for at least half the run, ``hbm_saturated_pct``) or the
  core's own DMA rate cap set the pace; ``bottleneck_detail`` is both in words.
* ``bytes`` — bytes per data path from the records (``GM->UB``, ``UB->GM``, ``GM->L1``,
  ``L1->L0A``, ``L1->L0B``, ``L0C->GM``) and from the L2 model (``HBM read``, ``HBM write``,
  ``L2 hit``).
* ``flops`` — ``cube``: 2mnk per mmad; ``vector``: element operations of vector ops.
* Roofline: ``hbm_bytes = HBM read + HBM write``; arithmetic intensity ``ai = flops /
  hbm_bytes``; the compute peak is the cube fp16 peak (AIC kernels) or the vector peak at one
  repeat per cycle (AIV kernels), scaled to the cores the launch used; ``bound_tflops =
  min(peak, ai x HBM bandwidth)``; ``hbm_roof_pct = hbm_bytes / (cycles x HBM bytes/cycle)``.
* ``cube_util`` — cube FLOPs / (cycles x cores used x 2 x 16 x 16 x 16): the fraction of the
  used AICs' cube peak the kernel achieved.
* ``cube_busy_pct`` / ``vector_busy_pct`` — the M pipe's (V pipe's) busy cycles / ``cycles``,
  averaged over the AICs (AIVs) used: in a mix kernel, how much each kind of core worked.
* Mix kernels (``core_type == "mix"``): ``cores_used`` counts groups (one AIC and
  ``aiv_per_aic`` AIVs each); the peak is both units' of those groups.
* ``trace_hash`` — sha256 of the canonical trace text: same kernel, inputs and card, same hash.
"""

from __future__ import annotations

from kernellab.npu.record import PIPES

__all__ = ["RunResult"]


class RunResult:
    """The outcome of :func:`kernellab.npu.launch` (see the module docstring for every
    definition). Attributes: ``kernel``, ``block_dim``, ``machine``, ``core_type``,
    ``cores_used``, ``cycles``, ``time_us``, ``launch_overhead_cycles``, ``per_core``,
    ``pipe_busy_pct``, ``bottleneck``, ``bottleneck_cause``, ``bottleneck_detail``,
    ``hbm_saturated_pct``, ``critical_core``, ``bytes``, ``flops``,
    ``hbm_bytes``, ``achieved_GBps``, ``achieved_TFLOPS``, ``hbm_roof_pct``, ``cube_util``,
    ``roofline``, ``trace``, ``trace_hash``, ``warnings``, ``n_records``, ``functional_s``,
    ``timing_s``; :meth:`records` gives one block's recorded instructions, :meth:`profile_csv`
    writes the profiler-shaped tables."""

    def __init__(self, *, kernel, block_dim, machine, core_type, timing, trace, blocks,
                 warnings, functional_s, timing_s):
        mc = machine
        self.kernel = kernel
        self.block_dim = block_dim
        self.machine = mc
        self.core_type = core_type
        n_type = mc.n_aiv if core_type == "aiv" else mc.n_aic
        #: cores of the kernel's kind it ran on (a mix kernel: its groups, one AIC each)
        self.cores_used = min(block_dim, n_type)
        self.cycles = int(timing.cycles)
        self.time_us = self.cycles / mc.freq_mhz
        self.launch_overhead_cycles = mc.launch_overhead
        self.per_core = []
        for ci, busy in enumerate(timing.busy):
            self.per_core.append({"core": trace.core_name(ci), "cycles": timing.core_end[ci],
                                  "busy": {PIPES[p]: busy[p] for p in range(7)}})
        crit = max(range(len(timing.core_end)), key=lambda i: (timing.core_end[i], -i)) \
            if timing.core_end else 0
        self.critical_core = trace.core_name(crit)
        cyc = max(self.cycles, 1)
        aics = [pc for pc in self.per_core if pc["core"].startswith("aic")]
        aivs = [pc for pc in self.per_core if pc["core"].startswith("aiv")]
        #: mean M busy / cycles over the AICs used, and V busy / cycles over the AIVs used (%)
        self.cube_busy_pct = (100.0 * sum(pc["busy"]["M"] for pc in aics) / (cyc * len(aics))
                              if aics else 0.0)
        self.vector_busy_pct = (100.0 * sum(pc["busy"]["V"] for pc in aivs) / (cyc * len(aivs))
                                if aivs else 0.0)
        busy = timing.busy[crit] if timing.busy else [0] * 7
        self.pipe_busy_pct = {PIPES[p]: 100.0 * busy[p] / cyc for p in range(7)}
        self.bottleneck = max(PIPES, key=lambda p: (self.pipe_busy_pct[p], -PIPES.index(p)))
        self.hbm_saturated_pct = 100.0 * timing.hbm_saturated / cyc
        if self.bottleneck in ("MTE2", "MTE3", "FIX"):
            self.bottleneck_cause = ("HBM bandwidth" if 2 * timing.hbm_saturated >= cyc
                                     else "the core's own DMA rate cap")
            self.bottleneck_detail = (f"{self.bottleneck} ({self.bottleneck_cause}: HBM "
                                      f"saturated {self.hbm_saturated_pct:.0f}% of the run)")
        else:
            self.bottleneck_cause = {"M": "cube", "V": "vector", "S": "scalar issue",
                                     "MTE1": "L1->L0 moves"}[self.bottleneck]
            self.bottleneck_detail = f"{self.bottleneck} ({self.bottleneck_cause})"
        by_path: dict[str, int] = {}
        cube = vec = 0
        n_records = 0
        for b in blocks:
            n_records += len(b.records)
            for r in b.records:
                if r.path is not None:
                    by_path[r.path] = by_path.get(r.path, 0) + r.nbytes
                if r.flops:
                    if r.op == "mmad":
                        cube += r.flops
                    else:
                        vec += r.flops
        by_path["HBM read"] = timing.hbm_read
        by_path["HBM write"] = timing.hbm_write
        by_path["L2 hit"] = timing.l2_hit
        self.bytes = by_path
        self.flops = {"cube": cube, "vector": vec}
        self.n_records = n_records
        secs = self.cycles / mc.freq_hz if self.cycles else float("inf")
        self.hbm_bytes = timing.hbm_read + timing.hbm_write
        self.achieved_GBps = self.hbm_bytes / secs / 1e9 if self.cycles else 0.0
        total_flops = cube + vec
        self.achieved_TFLOPS = total_flops / secs / 1e12 if self.cycles else 0.0
        self.hbm_roof_pct = 100.0 * self.hbm_bytes / (cyc * mc.hbm_bytes_per_cycle)
        self.cube_util = cube / (cyc * max(self.cores_used, 1) * mc.cube_flops_per_cycle_core)
        if core_type == "aic":
            peak = mc.cube_tflops_fp16 * self.cores_used / mc.n_aic
        elif core_type == "mix":  # both units of the groups used
            peak = (mc.cube_tflops_fp16 * self.cores_used / mc.n_aic
                    + mc.vector_tops_fp16 * self.cores_used * mc.aiv_per_aic / mc.n_aiv)
        else:
            peak = mc.vector_tops_fp16 * self.cores_used / mc.n_aiv
        ai = total_flops / self.hbm_bytes if self.hbm_bytes else float("inf")
        bound = min(peak, ai * mc.hbm_bytes_per_s / 1e12)
        self.roofline = {"ai_flop_per_byte": ai, "peak_tflops": peak,
                         "hbm_GBps": mc.hbm_bytes_per_s / 1e9, "bound_tflops": bound,
                         "efficiency": self.achieved_TFLOPS / bound if bound else 0.0}
        self.trace = trace
        self.trace_hash = trace.hash()
        self.warnings = list(warnings)
        self.functional_s = functional_s
        self.timing_s = timing_s
        self._blocks = blocks

    def records(self, block: int = 0, core: str | None = None) -> list:
        """The instruction records block ``block`` recorded in Phase A, in program order
        (:class:`~kernellab.npu.record.Record`: ``pipe``, ``kind`` OP/SET/WAIT, ``op``,
        ``key`` of a flag, ``src`` ...): what the timing replay ran, including the
        ``set_flag``/``wait_flag`` pairs the queue calls were lowered to. In a mix kernel,
        ``core`` picks the group's ``"aic"``, ``"aiv0"`` or ``"aiv1"`` (default: all three,
        one after the other). Raises IndexError for a block outside ``[0, block_dim)``,
        ValueError for another ``core``."""
        if not 0 <= block < self.block_dim:
            raise IndexError(f"block {block} outside [0, {self.block_dim})")
        if self.core_type != "mix":
            return list(self._blocks[block].records)
        from kernellab.npu.mix import MEMBERS

        size = len(MEMBERS)
        if core is None:
            return [r for m in range(size) for r in self._blocks[block * size + m].records]
        if core not in MEMBERS:
            raise ValueError(f"core is one of {MEMBERS}, got {core!r}")
        return list(self._blocks[block * size + MEMBERS.index(core)].records)

    def profile_csv(self, folder) -> list:
        """Write the profiler-shaped tables of this launch (``OpBasicInfo.csv``,
        ``PipeUtilization.csv``, ``Memory.csv``: :mod:`kernellab.npu.profile`, where each
        column is defined) into ``folder``; returns their paths."""
        from kernellab.npu import profile

        return profile.write_csv(self, folder)

    def summary(self) -> str:
        """A few lines of text: cycles and time, HBM figures, the critical core's pipes, bytes."""
        mc = self.machine
        b = self.bytes
        lines = [
            f"kernel {self.kernel}  block_dim={self.block_dim}  machine={mc.key}",
            f"device cycles {self.cycles:,} ({self.time_us:,.1f} us; launch overhead "
            f"{self.launch_overhead_cycles:,} cycles not included)",
            f"HBM {self.hbm_bytes / max(self.cycles, 1):,.1f} B/cycle = {self.hbm_roof_pct:.1f}% "
            f"of roof ({self.achieved_GBps:,.0f} GB/s)   "
            f"{self.achieved_TFLOPS:.3f} TFLOP/s vs bound {self.roofline['bound_tflops']:.3f} "
            f"(AI {self.roofline['ai_flop_per_byte']:.3g} FLOP/B)",
        ]
        if self.flops["cube"]:
            lines.append(f"cube utilisation {100 * self.cube_util:.1f}% of {self.cores_used} "
                         f"AIC(s)")
        if self.core_type == "mix":
            lines.append(f"mix: {self.cores_used} group(s) of 1 AIC + "
                         f"{self.machine.aiv_per_aic} AIV; cube busy {self.cube_busy_pct:.0f}%, "
                         f"vector busy {self.vector_busy_pct:.0f}% (mean over the cores used)")
        pipes = "  ".join(f"{p} {v:.0f}%" for p, v in self.pipe_busy_pct.items() if v > 0)
        lines.append(f"core {self.critical_core}: {pipes}   bottleneck: {self.bottleneck_detail}")
        paths = "  ".join(f"{k} {v / 1e6:.3f} MB" for k, v in b.items() if v)
        lines.append(f"bytes: {paths}")
        lines.append(f"records {self.n_records:,}  trace {self.trace_hash[:16]}")
        if self.warnings:
            lines.append(f"warnings: {len(self.warnings)} (see .warnings)")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready figures (no trace)."""
        return {"kernel": self.kernel, "block_dim": self.block_dim, "machine": self.machine.key,
                "cycles": self.cycles, "time_us": self.time_us,
                "pipe_busy_pct": dict(self.pipe_busy_pct), "bottleneck": self.bottleneck,
                "bytes": dict(self.bytes), "flops": dict(self.flops),
                "achieved_GBps": self.achieved_GBps, "achieved_TFLOPS": self.achieved_TFLOPS,
                "hbm_roof_pct": self.hbm_roof_pct, "cube_util": self.cube_util,
                "cube_busy_pct": self.cube_busy_pct, "vector_busy_pct": self.vector_busy_pct,
                "roofline": dict(self.roofline), "trace_hash": self.trace_hash,
                "n_records": self.n_records, "warnings": list(self.warnings)}

    def __repr__(self):
        return (f"RunResult({self.kernel}, cycles={self.cycles}, bottleneck={self.bottleneck}, "
                f"hash={self.trace_hash[:12]})")
