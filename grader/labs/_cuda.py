"""What the CUDA labs share (``gemm-cuda``, ``softmax-cuda``, ``flash-attention``), grader
side: the tier they run on, the sim-tier probe of a correctness call (the launches it made and
their counters), the launches' counters as JSON, the checks that kernels did the work, the
modelled time of a sequence of launches (:mod:`kernellab.sim.model`) with the two
normalisations every sim-tier speed rule uses (see :func:`modelled_seconds`), and the rule
builders. The worker side (timed calls, the replay) is :mod:`grader.labs._cuda_worker`."""

from __future__ import annotations

from pathlib import Path

from grader.rules import Rule
from grader.spec import LabSpec, RuleResult

#: The device profile sim-tier rules model on (kernellab.sim.model).
PROFILE = "a100"

#: Counters a launch reports back from the worker (kernellab.sim's COUNTER_KEYS that the rules
#: and their details read).
LAUNCH_COUNTERS = (
    "blocks", "threads", "global_load_requests", "global_store_requests", "global_load_sectors",
    "global_store_sectors", "global_load_bytes", "global_store_bytes", "global_load_elements",
    "global_store_elements", "dram_read_bytes", "dram_write_bytes", "shared_load_requests",
    "shared_store_requests", "shared_load_elements", "shared_store_elements",
    "shared_load_wavefronts", "shared_store_wavefronts", "shared_bytes_per_block", "barriers",
    "warp_syncs", "shuffles", "atomics", "local_frame_bytes", "local_touched_bytes",
    "mma_ops", "cp_async_bytes", "cp_async_overlapped_bytes",
)


#: Per-argument figures a launch reports back (``LaunchStats.arrays``), besides its digests.
ARRAY_FIGURES = ("nbytes", "load_elements", "store_elements", "atomics", "elements_stored",
                 "dram_read_bytes", "dram_write_bytes", "dram_atomic_bytes")


def launch_dict(stats) -> dict:
    """A :class:`kernellab.sim.engine.LaunchStats` as JSON: name, grid, block, counters, the
    warps that shuffled, per-argument figures and content digests (``arrays``) and the arrays
    it read outside its arguments (``outside``)."""
    return {"name": str(stats.name), "grid": [int(x) for x in stats.grid],
            "block": [int(x) for x in stats.block],
            "counters": {k: int(stats.counters.get(k, 0)) for k in LAUNCH_COUNTERS},
            "shuffle_warps": int(getattr(stats, "shuffle_warps", 0)),
            "arrays": [{"name": str(a["name"]),
                        "digest_start": a["digest_start"], "digest_end": a["digest_end"],
                        **{k: int(a[k]) for k in ARRAY_FIGURES}}
                       for a in getattr(stats, "arrays", [])],
            "outside": [{"name": str(o["name"]), "nbytes": int(o["nbytes"])}
                        for o in getattr(stats, "outside", [])],
            **({"block_max": {k: int(v) for k, v in stats.block_max.items()}}
               if getattr(stats, "block_max", None) is not None else {}),
            **({"sites": [{k: (str(v) if isinstance(v, str) else int(v)) for k, v in st.items()}
                          for st in stats.sites]}
               if getattr(stats, "sites", None) is not None else {}),
            **({"shared_sites": [{k: (str(v) if isinstance(v, str) else int(v))
                                  for k, v in st.items()} for st in stats.shared_sites]}
               if getattr(stats, "shared_sites", None) is not None else {})}


def unchecked_problem(launches: list[dict], unchecked=()) -> str | None:
    """Sim tier: None if every launch of a call ran on the sim tier's executor and read only
    its arguments; else what is wrong, in plain words. A launch with a record (structured)
    array or ``cuda.jit(extensions=...)`` runs on numba's stock simulator, which neither
    checks (races...) nor counts it; an array a kernel reads from a global, its closure or a
    default value is frozen into the kernel when a GPU compiles it, and the simulator neither
    counts nor checks it (a way to smuggle a host result into a kernel)."""
    if unchecked:
        names = ", ".join(sorted({str(n) for n in unchecked}))
        return (f"kernel(s) {names} ran on numba's stock simulator, outside the sim tier's "
                "checks and counters (a record/structured array argument, or "
                "cuda.jit(extensions=...)): pass plain numeric arrays")
    for launch in launches:
        for o in launch.get("outside", []):
            return (f"kernel {launch['name']} reads the array {o['name']} ({o['nbytes']} bytes) "
                    "from a global, a closure or a default value, not from its arguments: on a "
                    "GPU numba freezes such an array into the kernel as a constant when it "
                    "compiles, and the sim tier neither counts nor checks it; pass every array "
                    "as a kernel argument")
    return None


def with_atomic_reads(launches: list[dict]) -> list[dict]:
    """The launches with the sectors their atomics touched (and no plain load read) counted as
    DRAM reads too: an atomic reads the value it modifies, which the sim tier's counters count
    as a store only. What a speed rule should model, or ``v = atomic.add(Y, i, 0)`` would read
    a host-written Y for free."""
    out = []
    for launch in launches:
        extra = sum(int(a.get("dram_atomic_bytes", 0)) for a in launch.get("arrays", []))
        if extra:
            c = dict(launch["counters"])
            c["dram_read_bytes"] = int(c["dram_read_bytes"]) + extra
            launch = dict(launch, counters=c)
        out.append(launch)
    return out


def elements_stored(launches: list[dict]) -> int:
    """Distinct elements of global memory each launch stored to (atomics included), summed
    over the launches: storing one element a million times counts once."""
    return sum(a["elements_stored"] for launch in launches for a in launch.get("arrays", []))


def bytes_read_from(launches: list[dict], digests) -> int:
    """DRAM bytes the launches read from arguments whose content, when the launch started,
    had one of ``digests`` (:func:`kernellab.sim.content_digest`)."""
    digests = set(digests)
    return sum(a["dram_read_bytes"] for launch in launches for a in launch.get("arrays", [])
               if a["digest_start"] is not None and a["digest_start"] in digests)


def stores_into_final(launches: list[dict], digest: str) -> int:
    """Distinct elements stored to the array the caller finally got (content ``digest``): by
    the latest argument that ended a launch with that content, plus, for as long as each
    one's starting content is what an earlier launch left in an argument, by that one too (an
    output written over several launches). 0 if no launch left that content: the output was
    then written on the host."""
    total, want = 0, digest
    for i in range(len(launches) - 1, -1, -1):
        hit = next((a for a in launches[i].get("arrays", []) if a["digest_end"] == want), None)
        if hit is None:
            continue
        total += hit["elements_stored"]
        if hit["digest_start"] == want:     # unchanged by this launch: keep looking back
            continue
        want = hit["digest_start"]
    return total


def slice_digests(X, axes: int) -> list[str]:
    """Content digests (:func:`kernellab.sim.content_digest`) an argument holding X, or a part
    of it a launch was given, has when the launch starts: all of X, and every ``X[i]``,
    ``X[i, j]`` ... down to ``axes`` leading indices (a launch per row, or per (batch, head),
    on numpy views copies just that part to the device)."""
    import itertools

    from kernellab.sim import content_digest

    out = [content_digest(X)]
    for k in range(1, axes + 1):
        out += [content_digest(X[idx]) for idx in itertools.product(*map(range, X.shape[:k]))]
    return out


def work_problem(launches: list[dict], reads: dict, outputs: int, what: str, *,
                 unchecked=(), final_digest: str | None = None) -> str | None:
    """None if the captured launches can have produced the result, else what is missing, in
    plain words: at least one launch, every launch on the sim tier's executor reading only its
    arguments (:func:`unchecked_problem`), at least ``outputs`` distinct elements of global
    memory stored to (shared and local memory do not count), every byte of each input read
    from arguments that held that input itself when their launch started (compulsory DRAM
    reads; reading a host-computed copy of the result does not count), and, given the final
    output's ``final_digest``, that output stored by the launches (not written over on the host
    afterwards). ``reads``: input name -> (its bytes, its content digests,
    :func:`slice_digests`)."""
    if not launches:
        return (f"no kernel was launched: {what} must be computed in a CUDA kernel (this lab "
                "grades the kernel, not host code)")
    why = unchecked_problem(launches, unchecked)
    if why:
        return why
    stored = elements_stored(launches)
    if stored < outputs:
        return (f"the kernels stored to {stored} element(s) of global memory, fewer than the "
                f"{outputs} of the output: the rest was not written by a kernel (computed on "
                "the host, or not at all), which this lab does not accept")
    for name, (nbytes, digests) in reads.items():
        got = bytes_read_from(launches, digests)
        if got < nbytes:
            return (f"the kernels read {got} bytes of {name}, fewer than its {nbytes}: the "
                    f"result must be computed on the device from {name} itself (pass {name} "
                    "to the kernel and widen each element there; a copy of "
                    f"{name} transformed on the host, or an array holding a host-computed "
                    "result, does not count)")
    if final_digest is not None:
        wrote = stores_into_final(launches, final_digest)
        if wrote < outputs:
            return (f"the kernels stored {wrote} element(s) of the final {what} output, fewer "
                    f"than its {outputs}: it was written (or overwritten) on the host, not by "
                    "a kernel")
    return None


def total_counters(launches: list[dict]) -> dict:
    out = dict.fromkeys(LAUNCH_COUNTERS, 0)
    for launch in launches:
        for k in LAUNCH_COUNTERS:
            v = int(launch["counters"].get(k, 0))
            out[k] = (max(out[k], v) if k in ("shared_bytes_per_block", "local_frame_bytes")
                      else out[k] + v)
    return out


def modelled_seconds(launches: list[dict], flops: float, profile: str = PROFILE, *,
                     as_launched: bool = False) -> dict:
    """The lab's modelled time of a sequence of launches (module docstring): the sum of each
    launch's kernel time (launch overhead excluded) with its grid counted as filling the GPU,
    never below ``flops`` at the profile's FP32 peak. ``as_launched``: each grid as launched
    instead (a grid of fewer blocks than SMs gets their share of the chip), each launch at
    least its busiest block's work on one SM (``block_max``, when the launch has it). Also the
    same launches as launched with their launch overhead, for the report. Returns {"seconds",
    "as_launched_s", "bound" (of the longest launch), "launches" (per-launch dicts of the
    model), "compute_s", "blocks" (the smallest grid), "busiest" (the largest share of a
    launch's global sectors one block moved; 0 without ``block_max``)}."""
    from kernellab.sim import model

    p = model.get_profile(profile)
    total, raw, per = 0.0, 0.0, []
    for launch in launches:
        c = dict(launch["counters"])
        as_is = model.modelled_time(c, p, busiest_block=launch.get("block_max")
                                    if as_launched else None)
        raw += as_is.seconds
        if as_launched:
            mt = as_is
        else:
            blocks = max(int(c["blocks"]), 1)
            c["blocks"] = max(blocks, p.sm_count)
            c["threads"] = int(c.get("threads", 0)) // blocks * c["blocks"]  # same block size
            mt = model.modelled_time(c, p)
        total += mt.kernel_seconds
        per.append({"name": launch["name"], "seconds": mt.kernel_seconds,
                    "bound": mt.kernel_bound, "breakdown": mt.breakdown})
    compute = flops / p.fp32_flops
    bound = max(per, key=lambda d: d["seconds"])["bound"] if per else None
    if compute > total:
        total, bound = compute, "compute"

    def busiest(launch):
        c = launch["counters"]
        moved = int(c["global_load_sectors"]) + int(c["global_store_sectors"])
        top = int(launch.get("block_max", {}).get("global_sectors", 0))
        return top / moved if moved else 0.0

    return {"seconds": total, "as_launched_s": raw, "bound": bound, "launches": per,
            "compute_s": compute,
            "blocks": min((int(x["counters"]["blocks"]) for x in launches), default=0),
            "busiest": max((busiest(x) for x in launches), default=0.0)}


#: The share of a call's global sectors that sites coalesced below the rule's threshold may
#: move together (:func:`coalesced_fraction`).
UNCOALESCED_SHARE = 0.1


def access_sites(launches: list[dict]) -> list[dict]:
    """The call's global access sites, least coalesced first: one dict per (kernel, source
    instruction, array, load/store) -- the launches' ``sites`` (the sim engine's per-site
    counters, ``kernellab.sim.capture(sites=True)``), summed over launches of one kernel --
    with ``kernel``, ``where``, ``array``, ``kind``, ``bytes_moved`` (32 a sector),
    ``bytes_used`` (bytes asked, capped per request at the bytes its sectors moved),
    ``fraction`` (used / moved) and ``share`` (of all the sites' bytes moved). A launch
    without per-site counters is one site (``where`` "the whole launch") whose bytes used are
    min(asked, moved) over all its requests together."""
    acc: dict = {}
    for launch in launches:
        sites = launch.get("sites")
        if sites is None:
            c = launch["counters"]
            moved = 32 * (int(c["global_load_sectors"]) + int(c["global_store_sectors"]))
            asked = int(c["global_load_bytes"]) + int(c["global_store_bytes"])
            sites = [{"where": "the whole launch", "array": "all arrays", "kind": "access",
                      "bytes_moved": moved, "bytes_used": min(asked, moved)}] if moved else []
        for st in sites:
            key = (launch["name"], st["where"], st["array"], st["kind"])
            got = acc.setdefault(key, [0, 0])
            got[0] += int(st["bytes_moved"])
            got[1] += int(st["bytes_used"])
    total = sum(m for m, _ in acc.values())
    out = [{"kernel": k[0], "where": k[1], "array": k[2], "kind": k[3], "bytes_moved": m,
            "bytes_used": u, "fraction": u / m, "share": m / total}
           for k, (m, u) in acc.items() if m]
    return sorted(out, key=lambda d: (d["fraction"], -d["share"]))


def coalesced_fraction(launches: list[dict], share: float = UNCOALESCED_SHARE) -> float:
    """How coalesced the call's global loads and stores are, judged per access site
    (:func:`access_sites`): the largest fraction f such that the sites whose bytes used /
    bytes moved is below f together move at most ``share`` of the call's global sectors
    (sites sorted by fraction; the fraction of the site at which their running share of the
    sectors first exceeds ``share``). So ``coalesced_fraction(...) >= t`` exactly when the
    sites coalesced below t move at most ``share`` of the sectors. 0 with no global access.

    Why per site, capped per request: a broadcast asks for 128 bytes of one 32-byte sector,
    and over all requests together its surplus offsets a column load's waste; capped per
    request it counts as used (32 of 32 bytes), but a site-blind average is still diluted by
    any cheap coalesced traffic. Judged per site, traffic added elsewhere hides an
    uncoalesced site only once that site is at most ``share`` of all sectors: 0.1 needs 9
    times its sectors added, more than coalescing it would save (at most its own sectors),
    and splitting it over many instructions does not help, since the sites below the line
    are summed. Nsight Compute reports the same per-instruction quantity (Source view, "L2
    Theoretical Sectors Global Excessive")."""
    sites = access_sites(launches)
    run = 0.0
    for st in sites:
        run += st["share"]
        if run > share + 1e-12:
            return st["fraction"]
    return sites[-1]["fraction"] if sites else 0.0


def fmt_seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def conflict_degree(wavefronts: int, ideal: int) -> str:
    """A bank-conflict degree in words: ``"16-way bank conflict"`` (wavefronts / the
    conflict-free wavefronts of the same requests, 3 significant figures), or ``"no bank
    conflict"``."""
    if not ideal or wavefronts <= ideal:
        return "no bank conflict"
    return f"{wavefronts / ideal:.3g}-way bank conflict"


def shared_ideal(launches: list[dict]) -> int | None:
    """The conflict-free shared wavefronts of the launches' requests, from their per-site
    counters (``shared_sites``); None when a launch has none."""
    if any("shared_sites" not in launch for launch in launches):
        return None
    return sum(int(st["ideal_wavefronts"]) for launch in launches
               for st in launch["shared_sites"])


def traffic_summary(launches: list[dict]) -> str:
    t = total_counters(launches)
    waves = t["shared_load_wavefronts"] + t["shared_store_wavefronts"]
    reqs = t["shared_load_requests"] + t["shared_store_requests"]
    ideal = shared_ideal(launches)
    conflict = f", {waves / reqs:.2f} wavefronts/request" if reqs else ""
    if reqs and ideal is not None and waves > ideal:
        conflict += f" (a {conflict_degree(waves, ideal)} on average)"
    return (f"{len(launches)} launch{'es' if len(launches) != 1 else ''}, "
            f"{t['global_load_sectors']}+{t['global_store_sectors']} global sectors "
            f"(load+store), {t['shared_load_wavefronts']}+{t['shared_store_wavefronts']} shared "
            f"wavefronts{conflict}, {t['barriers']} barriers"
            + (f", a {t['local_frame_bytes']}-byte local frame a thread "
               f"({t['local_touched_bytes']} bytes stored to local memory)"
               if t["local_frame_bytes"] else ""))


def costliest(launches: list[dict]) -> str:
    """What cost a call the most, in words, for a failing speed rule's detail: the global
    access site (kernel, array, line) that moved the most 32-byte sectors and its share; each
    shared access site with a bank conflict, worst first (excess wavefronts), by array, line
    and degree; and each kernel's local memory (its frame a thread and the bytes its threads
    stored to it). Sites come from the launches' per-site counters
    (``kernellab.sim.capture(sites=True)``); without them only local memory is named."""
    parts = []
    sites = access_sites(launches)
    if sites and sites[0]["where"] != "the whole launch":
        top = max(sites, key=lambda st: st["bytes_moved"])
        parts.append(f"most global traffic: the {top['kind']} of {top['array']} at "
                     f"{site_in(top['where'], top['kernel'])}, "
                     f"{top['bytes_moved'] // 32} sectors "
                     f"({top['share']:.0%} of the call's)")
    acc: dict = {}
    for launch in launches:
        for st in launch.get("shared_sites", []):
            key = (launch["name"], st["where"], st["array"], st["kind"])
            got = acc.setdefault(key, [0, 0, 0, 0])
            got[0] += int(st["requests"])
            got[1] += int(st["wavefronts"])
            got[2] += int(st["ideal_wavefronts"])
            got[3] = max(got[3], int(st["worst_wavefronts"]))
    total = sum(v[1] for v in acc.values())
    bad = sorted(((k, v) for k, v in acc.items() if v[1] > v[2]),
                 key=lambda kv: kv[1][2] - kv[1][1])
    for (kernel, where, array, kind), (r, w, i, worst) in bad[:3]:
        parts.append(f"the {kind} of {array} at {site_in(where, kernel)}: "
                     f"{conflict_degree(w, i)}, {w / r:.3g} wavefronts per request (worst "
                     f"{worst}), {w / total:.0%} of the shared wavefronts")
    if acc and not bad:
        parts.append("no shared-memory bank conflict")
    frames = {}
    for launch in launches:
        c = launch["counters"]
        if int(c.get("local_frame_bytes", 0)):
            f = frames.setdefault(launch["name"], [0, 0])
            f[0] = max(f[0], int(c["local_frame_bytes"]))
            f[1] += int(c.get("local_touched_bytes", 0))
    for kernel, (frame, stored) in frames.items():
        parts.append(f"local memory of {kernel}: a {frame}-byte frame a thread, {stored} bytes "
                     "stored to it")
    return "; ".join(parts)


def site_in(where: str, kernel: str) -> str:
    """An access site with its kernel: ``line 28 of gemm_kernel``, or, for a site in a device
    function (``line 3 of dev``), ``line 3 of dev, in gemm_kernel``."""
    return f"{where}, in {kernel}" if " of " in where else f"{where} of {kernel}"


def with_costliest(rule: RuleResult, launches: list[dict]) -> RuleResult:
    """``rule`` with, when it fails, what cost the most (:func:`costliest`) after its
    detail."""
    if rule.passed:
        return rule
    what = costliest(launches)
    if not what:
        return rule
    import dataclasses

    return dataclasses.replace(rule, detail=f"{rule.detail}. Where the cost is: {what}")


def coalesced_rule(launches: list[dict], threshold: float, hint: str) -> RuleResult:
    """The "global memory coalesced" rule, judged per access site (:func:`coalesced_fraction`):
    the sites whose bytes used / bytes moved in 32-byte sectors is below ``threshold`` move at
    most :data:`UNCOALESCED_SHARE` of the call's global sectors. The detail names the least
    coalesced site by its line; ``hint`` ends it."""
    eff = coalesced_fraction(launches)
    sites = access_sites(launches)
    below = sum(st["share"] for st in sites if st["fraction"] < threshold)
    worst = "; every site uses all the bytes it moves"
    if sites and sites[0]["fraction"] < 1.0:
        w = sites[0]
        worst = (f"; least coalesced: the {w['kind']} of {w['array']} at "
                 f"{site_in(w['where'], w['kernel'])}, {w['fraction']:.0%} of its bytes "
                 f"used, {w['share']:.0%} of "
                 "the sectors")
    return RuleResult(
        "global memory coalesced", 100.0 * eff, 100.0 * threshold, ">=", "%", eff >= threshold,
        f"per access site (source line), bytes the threads asked for (per request at most "
        f"what its sectors moved: a broadcast uses its one sector) / bytes moved in 32-byte "
        f"sectors, loads and stores; sites below {threshold:.0%} move {below:.0%} of the "
        f"{sum(st['bytes_moved'] for st in sites) // 32} sectors (at most "
        f"{UNCOALESCED_SHARE:.0%} may){worst}; {hint}")


#: candidates a replay sends back for an output (:func:`replay_candidates`)
REPLAY_SLOTS = 6


def tampered(what: str) -> str:
    """``what`` went wrong in a way only a tampered grading run explains, in the words of
    :meth:`grader.spec.LabSpec.perf_data_check` (which words the planned-array mismatches)."""
    return f"{what}: was the grading process tampered with?"


class Gate(Rule):
    """A gate as data (:attr:`grader.spec.LabSpec.rules`): passes or fails, earns no points,
    and failed voids the performance points (:func:`kernels_gate`)."""

    def __init__(self, name: str, tiers: tuple, why: str):
        super().__init__(name, ">=", "yes", "", tuple(tiers), why)

    @property
    def scored(self) -> bool:
        return False


def modelled(rule: Rule, value: float, detail: str) -> RuleResult:
    """``rule`` judged on one deterministic modelled figure (sim tier: no rounds, no spread)."""
    ok = value >= rule.threshold if rule.op == ">=" else value <= rule.threshold
    return RuleResult(rule.name, value, rule.threshold, rule.op, rule.unit, ok, detail)


def kernels_gate(gate: Gate, problem: str | None, launches: list[dict]) -> RuleResult:
    """The gate (no points) that the timed call's result came from kernels: ``problem`` is None
    when it did, else why not; the detail then says what the kernels did (``gate.why``)."""
    return RuleResult(gate.name, 0.0 if problem else 1.0, 1.0, ">=", "", problem is None,
                      problem or f"{traffic_summary(launches)}; {gate.why}", scored=False)


class CudaLab(LabSpec):
    """A lab graded on the ``gpu`` tier with a GPU and on the ``sim`` tier without one."""

    allowed_imports = frozenset({"numpy", "numba", "math"})
    # numba.cuda and its types module (``numba.types`` is numba.core.types; numba.cuda has a
    # ``types`` module of its own, and banning the name would ban ``numba.types`` too)
    allowed_submodules = frozenset({"numba.cuda", "numba.cuda.types"})
    codegen = "default"
    python_entry = True     # launchers: a @cuda.jit or @njit entry point is refused in words

    @property
    def tier(self) -> str:
        """``"gpu"`` or ``"sim"`` (:func:`kernellab.device.select_tier`); ``"unavailable"`` when
        the tier asked for cannot be used (see :meth:`tier_problem`)."""
        from kernellab import device

        try:
            return device.select_tier()
        except device.DeviceError:
            return "unavailable"

    def tier_problem(self) -> str | None:
        from kernellab import device

        try:
            device.select_tier()
        except device.DeviceError as exc:
            return f"this lab runs on the gpu or sim tier: {exc}"
        return None

    #: the planned-arrays messages (grader.spec.LabSpec.perf_data_check): one timed call
    timed_calls_words = ("the timed call was", "the timed call's")

    def forbids_new_processes(self) -> bool:
        """On the sim tier only. On the gpu tier the CUDA driver and numba-cuda may start
        programs of their own when they first load a library (``ctypes.util.find_library``
        runs ``ldconfig``; the driver may run ``nvidia-modprobe``), which has not been tried
        under the filter on a GPU yet: that worker keeps its other limits."""
        return self.tier == "sim" and super().forbids_new_processes()

    def before_submission(self) -> None:
        """The PTX compile helper's stand-in (:func:`kernellab.sim.ptx.prepare`); called on
        the sim tier only (:meth:`forbids_new_processes`)."""
        from kernellab.sim.ptx import prepare

        prepare()

    def not_forbidden_after_all(self) -> None:
        """Close the stand-in: the first compile starts the helper the usual way."""
        from kernellab.sim.ptx import close

        close()

    def measure(self, namespace: dict, plan: dict, workdir: Path, *, clock: str = "cuda",
                **hooks) -> dict:
        """Worker side: the lab's worker module's ``measure_sim(spec, namespace, plan,
        workdir)`` or ``measure_gpu(..., clock=clock)`` (:meth:`worker_module`).
        ``plan["tier"]`` must be this process's tier; ``clock="wall"`` runs the gpu-tier path
        on the simulator (tests), ``hooks`` are the lab's own test stand-ins. Raises
        RuntimeError for a plan of another tier."""
        from kernellab import device

        here = device.select_tier()
        if plan["tier"] == "sim":
            if here != "sim":
                raise RuntimeError(f"the plan is for the sim tier, this process is on {here}")
            return self.worker_module().measure_sim(self, namespace, plan, workdir, **hooks)
        if here != "gpu" and clock == "cuda":
            raise RuntimeError(f"the plan is for the gpu tier, this process is on {here}")
        return self.worker_module().measure_gpu(self, namespace, plan, workdir, clock=clock,
                                                **hooks)

    #: inputs the sim-tier probe refills with new values to replay a correctness call's launches
    #: (:meth:`replay`), and the outputs it then collects; empty: no replay
    replay_inputs: tuple = ()
    replay_outputs: tuple = ()

    # ------------------------------------------------- how the result was produced (sim)
    def call_probe(self, arrays=None):
        """Sim tier: capture the call's launches; fills ``{"tier": "sim", "launches": [...]}``,
        and with :attr:`replay_inputs` and the call's ``arrays`` replays them on new inputs
        (:meth:`replay`). GPU tier: ``{"tier": "gpu"}`` (no counters on a GPU)."""
        import contextlib

        from kernellab import device

        @contextlib.contextmanager
        def probe():
            info: dict = {"tier": device.select_tier()}
            if info["tier"] != "sim":
                yield info
                return
            from kernellab import sim

            opts = sim.options()
            record = bool(self.replay_inputs) and arrays is not None
            with sim.capture(record=record) as cap:
                yield info
            # the grader's worker always counts; a notebook with the stock executor or
            # KERNELLAB_SIM_CHECKS=fast does not, and then nothing is checked
            if opts.get("executor") == "kernellab" and opts.get("checks") == "full":
                info["launches"] = [launch_dict(s) for s in cap.launches]
                info["unchecked"] = list(cap.unchecked)
                if record and cap.recorded:
                    why = self.replay(cap.recorded, arrays, self.replay_inputs,
                                      self.replay_outputs)
                    if why:
                        info["replay_error"] = why
                    else:
                        info["replayed"] = True
        return probe()

    @staticmethod
    def replay(recorded, arrays: dict, inputs, outputs) -> str | None:
        """Worker side: :func:`grader.labs._cuda_worker.replay`."""
        from grader.labs import _cuda_worker

        return _cuda_worker.replay(recorded, arrays, inputs, outputs)
