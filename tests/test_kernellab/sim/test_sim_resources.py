"""Registers, local frame, spills and occupancy (kernellab.sim.resources, kernellab.sim.ptx.ptxas):
ptxas's report through nvJitLink for the kernels the sim tier compiles, and the occupancy
formula of the CUDA Occupancy Calculator against hand-worked cases."""

import kernellab  # noqa: F401  - first: chooses the tier (the simulator on a machine without GPU)


import numpy as np
import pytest
from numba import cuda, float32

from kernellab import device
from kernellab.sim import ptx
from kernellab.sim.ptx import ptxas
from kernellab.sim.resources import (
    REGISTER_ALLOCATION_UNIT, RESERVED_SHARED_PER_BLOCK, SHARED_ALLOCATION_UNIT, SM_LIMITS,
    KernelResources, occupancy, resource_table,
)

_ok, _why = ptx.ptx_available()
needs_ptx = pytest.mark.skipif(not _ok, reason=f"no GPU compiler: {_why}")
needs_sim = pytest.mark.skipif(not device.simulator_active(),
                               reason=f"needs the sim tier, not {kernellab.TIER}")


pytestmark = pytest.mark.usefixtures("ptx_cache_dir")  # conftest: a temporary cache


def _res(regs, shared=0):
    return KernelResources(registers=regs, stack_frame_bytes=0, spill_store_bytes=0,
                           spill_load_bytes=0, shared_static_bytes=shared, cc=(8, 0),
                           source="hand")


# ------------------------------------------------------------------------------------------
# occupancy(): hand-worked examples (CUDA C++ Programming Guide, "Technical Specifications per
# Compute Capability"; Best Practices Guide, "Occupancy"; cuda_occupancy.h)
# ------------------------------------------------------------------------------------------

def test_register_limited_256_threads_64_registers():
    # 64 regs x 32 lanes = 2048 per warp; a quarter of the 64 K register file holds 8 such
    # warps, the SM 32; blocks of 8 warps: 4 blocks, 32 of 64 warps
    occ = occupancy(_res(64), 256)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.max_warps_per_sm) == (4, 32, 64)
    assert occ.fraction == 0.5 and occ.limiter == "registers"


def test_register_allocation_rounds_each_warp_up_to_256():
    # 69 regs: 2208 per warp -> 2304; 16384 // 2304 = 7 warps a quarter, 28 an SM: 3 blocks
    occ = occupancy(_res(69), 256)
    assert (occ.blocks_per_sm, occ.limiter) == (3, "registers")
    # 255 regs (the most a thread gets): 8160 -> 8192 per warp; 2 a quarter, 8 an SM: 12.5 %
    occ = occupancy(_res(255), 128)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.fraction) == (2, 8, 0.125)


def test_shared_memory_limited():
    # 48 KiB static + the 1 KB a block reserves = 50176 B (a multiple of 128): 164 KiB / 50176
    # = 3 blocks on cc 8.0; 228 KiB / 50176 = 4 on cc 9.0; 32 registers alone would allow 16
    res = _res(32, 48 * 1024)
    occ = occupancy(res, 128)
    assert (occ.blocks_per_sm, occ.limiter) == (3, "shared memory")
    assert occ.limits["registers"] == 16 and occ.limits["threads"] == 16
    occ9 = occupancy(res, 128, cc=(9, 0))
    assert (occ9.blocks_per_sm, occ9.limiter, occ9.cc) == (4, "shared memory", (9, 0))
    # dynamic shared memory counts with the static: 16 KiB + 16 KiB + 1 KB -> 4 blocks
    occ = occupancy(_res(32, 16 * 1024), 128, dynamic_shared_bytes=16 * 1024)
    assert occ.blocks_per_sm == 167936 // (32 * 1024 + 1024) == 4
    # the 128-byte allocation unit: 1 byte of shared memory takes 1024 + 128 per block
    occ = occupancy(_res(16, 1), 32)
    assert occ.limits["shared memory"] == 167936 // 1152


def test_block_and_thread_limited():
    # 32 threads, 16 registers: registers and shared memory allow more than 32 blocks; the SM
    # holds 32 blocks of 1 warp: 50 %
    occ = occupancy(_res(16), 32)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.fraction, occ.limiter) == \
        (32, 32, 0.5, "blocks")
    # 1024 threads, 32 registers: 2 blocks by threads and by registers; a tie names threads
    occ = occupancy(_res(32), 1024)
    assert (occ.blocks_per_sm, occ.fraction, occ.limiter) == (2, 1.0, "threads")
    assert occ.limits["registers"] == 2
    # 100 threads are 4 warps (the last one partly idle)
    assert occupancy(_res(32), 100).warps_per_sm == 16 * 4


def test_a_block_that_cannot_launch_gets_zero():
    # 1024 threads x 65 registers: 2304 per warp x 32 warps = 73728 > the 65536 a block may use
    occ = occupancy(_res(65), 1024)
    assert (occ.blocks_per_sm, occ.fraction, occ.limiter) == (0, 0.0, "registers")
    assert occupancy(_res(32, 200 * 1024), 32).blocks_per_sm == 0
    # 48 KiB is the most a block may have without an opt-in; 1 byte more cannot launch
    assert occupancy(_res(32, 48 * 1024), 32).blocks_per_sm == 3
    assert occupancy(_res(32, 48 * 1024), 32, dynamic_shared_bytes=1).limiter == "shared memory"
    assert occupancy(_res(32, 48 * 1024), 32, dynamic_shared_bytes=1).blocks_per_sm == 0


def test_occupancy_rejects_bad_input():
    with pytest.raises(ValueError, match="compute capability"):
        occupancy(_res(32), 128, cc=(7, 5))
    with pytest.raises(ValueError, match="1..1024"):
        occupancy(_res(32), 0)
    with pytest.raises(ValueError, match="1..1024"):
        occupancy(_res(32), 2048)


def test_sm_limits_come_from_the_model_profiles():
    from kernellab.sim.model import PROFILES

    for cc, name in (((8, 0), "a100"), ((9, 0), "h100")):
        lim, p = SM_LIMITS[cc], PROFILES[name]
        assert lim.max_shared_per_sm == p.max_shared_per_sm
        assert lim.max_threads_per_sm == p.max_threads_per_sm == 2048
        assert lim.registers_per_sm == p.registers_per_sm == 65536
        assert lim.max_registers_per_thread == 255 and lim.max_warps_per_sm == 64
    assert SM_LIMITS[(8, 0)].max_shared_per_sm == 164 * 1024
    assert SM_LIMITS[(9, 0)].max_shared_per_sm == 228 * 1024


# ------------------------------------------------------------------------------------------
# the ptxas log parser, on ptxas's own output
# ------------------------------------------------------------------------------------------

#: ptxas/nvJitLink 13.5 -verbose output for sm_80 of two kernels linked together (names
#: shortened), the form kernel_resources reads
_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN6module10flash2_fwdB3v32E5ArrayIfLi4E' for 'sm_80'
ptxas info    : Function properties for _ZN6module10flash2_fwdB3v32E5ArrayIfLi4E
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 206 registers, used 1 barriers, 865 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN6module14gemm_v4_kernelB3v23E5ArrayIfLi2E' for 'sm_80'
ptxas info    : Function properties for _ZN6module14gemm_v4_kernelB3v23E5ArrayIfLi2E
ptxas         .     304 bytes stack frame, 356 bytes spill stores, 268 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 568 bytes cmem[0]
ptxas info    : Compile time = 264.486 ms
info    : 8 bytes gmem
info    : Function properties for '_ZN6module10flash2_fwdB3v32E5ArrayIfLi4E':
info    : used 206 registers, used 1 barriers, 128 stack, 24704 bytes smem, 865 bytes cmem[0], \
0 bytes lmem
"""


def test_parser_reads_each_function():
    funcs = ptxas.parse_ptxas_log(_LOG)
    flash = funcs["_ZN6module10flash2_fwdB3v32E5ArrayIfLi4E"]
    assert flash == {"stack_frame_bytes": 128, "spill_store_bytes": 0, "spill_load_bytes": 0,
                     "registers": 206, "shared_bytes": 24704}
    gemm = funcs["_ZN6module14gemm_v4_kernelB3v23E5ArrayIfLi2E"]
    assert (gemm["registers"], gemm["stack_frame_bytes"], gemm["spill_store_bytes"],
            gemm["spill_load_bytes"]) == (255, 304, 356, 268)
    assert "shared_bytes" not in gemm


def test_parser_picks_the_kernel_among_several_entries():
    funcs = ptxas.parse_ptxas_log(_LOG)
    entries = list(funcs)
    name, fig = ptxas.pick_kernel(funcs, entries, "gemm_v4_kernel")
    assert name.endswith("gemm_v4_kernelB3v23E5ArrayIfLi2E") and fig["registers"] == 255
    name, fig = ptxas.pick_kernel(funcs, entries, "flash2_fwd")
    assert fig["registers"] == 206
    name, why = ptxas.pick_kernel(funcs, entries, "other")
    assert name is None and "2 candidate kernels" in why
    assert ptxas.pick_kernel({}, [], "k") == (None, "ptxas's report names 0 candidate kernels "
                                                    "for 'k' (PTX entries: none)")


def test_ptx_entries_and_shared_declarations():
    text = (".visible .shared .align 4 .b8 _cudapy_smem_8[8320];\n"
            ".shared .align 8 .b64 s2[4];\n.extern .shared .align 16 .b8 dyn[];\n"
            ".visible .entry _Z1kPf(\n\t.param .u64 p\n)\n{\n}\n")
    assert ptxas.entry_names(text) == ["_Z1kPf"]
    assert ptxas.declared_shared_bytes(text) == 8320 + 32


# ------------------------------------------------------------------------------------------
# the course's kernels, through the sim tier and ptxas
# ------------------------------------------------------------------------------------------

def _flash(d, dtype, N=None):
    from kernellab import sim
    from kernellab.kernels import attention_cuda as A

    Br, Bc = A.flash_block_sizes(d, dtype)
    N = 8 if N is None else N       # a partial block: the same kernel, fewer live rows
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((1, 1, N, d)).astype(dtype)
    O = np.zeros_like(Q)
    with sim.capture() as cap:
        A.attention_v2(Q, Q, Q, O)
    (stats,) = cap.launches
    return stats, Br, Bc, cap


def _lab_configs():
    from grader.labs.flash_attention.spec import DTYPES, HEAD_DIMS

    return [(d, dt) for d in HEAD_DIMS for dt in DTYPES]


@needs_ptx
@needs_sim
@pytest.mark.parametrize("d, dtype", _lab_configs())
def test_flash_attention_scores_are_a_local_frame_of_4_bc_bytes(d, dtype):
    # the per-thread score array sc[Bc] (float32) is indexed with a runtime bound: it lives in
    # local memory, a stack frame of exactly 4 Bc bytes, with no spill, at every head
    # dimension and dtype of the lab
    stats, Br, Bc, cap = _flash(d, np.dtype(dtype))
    res = stats.resources
    assert res is not None, stats.resources_note
    assert res.stack_frame_bytes == 4 * Bc
    assert (res.spill_store_bytes, res.spill_load_bytes) == (0, 0)
    assert 1 <= res.registers <= 255 and res.source == "ptxas via nvJitLink -verbose"
    from kernellab.kernels.attention_cuda import flash_shared_bytes
    assert res.shared_static_bytes == flash_shared_bytes(Br, Bc, d, dtype)
    # the model's local frame (the PTX depot) is the same frame: the model charges the
    # course's kernel for the local memory ptxas gives it, no more, no less
    assert stats.counters["local_frame_bytes"] == res.stack_frame_bytes
    assert "ptxas" in stats.resources_note
    table = resource_table(cap)
    assert "flash2_fwd" in table and f" {4 * Bc} " in table


@needs_ptx
@needs_sim
def test_spills_are_reported_but_not_in_the_models_local_frame():
    # float16 at d = 128: ptxas runs out of registers and spills; its stack frame is the score
    # array plus the spill slots. The model keeps the PTX depot (the arrays whose stores the
    # engine counts): spills have only a static size, not a count (model.py, "what the model
    # ignores")
    stats, Br, Bc, _ = _flash(128, np.float16)
    res = stats.resources
    assert res is not None, stats.resources_note
    assert res.registers == SM_LIMITS[(8, 0)].max_registers_per_thread
    assert res.spill_store_bytes > 0 and res.spill_load_bytes > 0
    assert res.stack_frame_bytes > 4 * Bc
    assert stats.counters["local_frame_bytes"] == 4 * Bc


@needs_ptx
@needs_sim
def test_gemm_v4_registers_and_occupancy_by_hand():
    from kernellab import sim
    from kernellab.kernels import gemm_cuda as G

    M = N = K = G.BM
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    with sim.capture() as cap:
        G.gemm_v4(A, B, C)
    (stats,) = cap.launches
    res = stats.resources
    assert res is not None, stats.resources_note
    assert 1 <= res.registers <= 255
    threads = stats.block[0] * stats.block[1] * stats.block[2]
    warps = -(-threads // 32)
    # by hand: registers per warp rounded up to 256, a quarter of 65536 per sub-partition
    per_warp = -(-res.registers * 32 // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    by_regs = (16384 // per_warp) * 4 // warps
    smem = -(-(res.shared_static_bytes + RESERVED_SHARED_PER_BLOCK) // SHARED_ALLOCATION_UNIT) \
        * SHARED_ALLOCATION_UNIT
    blocks = min(by_regs, 164 * 1024 // smem, 64 // warps, 32)
    occ = occupancy(res, threads)
    assert occ.blocks_per_sm == blocks and occ.fraction == blocks * warps / 64
    row = next(line for line in resource_table(cap).splitlines() if "gemm_v4" in line)
    assert row.split()[1:3] == [str(threads), str(res.registers)]
    assert f"{100 * occ.fraction:.1f}" in row


@needs_ptx
@needs_sim
def test_resources_come_from_the_disk_cache_without_the_helper():
    stats, *_ = _flash(64, np.float32)
    first = stats.resources
    ptx.clear_cache()           # memory only
    ptx.close()
    again = ptx.kernel_resources(stats.compiled)
    assert again[0] == first and ptx._helper.pid is None


@cuda.jit
def _scale(x, s):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * s


@needs_ptx
@needs_sim
def test_no_nvjitlink_gives_none_and_a_note(monkeypatch):
    from kernellab import sim
    from kernellab.sim.ptx import compile as ptx_compile

    monkeypatch.setattr(ptx_compile, "NVJITLINK_MODULE", "cuda.bindings.no_such_nvjitlink")
    x = np.ones(64, np.float32)
    with sim.capture() as cap:
        _scale[1, 64](x, np.float32(2.0))         # the launch itself runs and checks
    assert (x == 2).all()
    (stats,) = cap.launches
    assert stats.resources is None
    assert "nvJitLink" in stats.resources_note and "cannot be imported" in \
        stats.resources_note
    table = resource_table(cap)
    assert "unknown" in table and "cannot be imported" in table


@needs_sim
def test_gpu_compile_off_gives_none_and_a_note():
    from kernellab import sim

    x = np.ones(32, np.float32)
    with sim.capture(gpu_compile=False) as cap:
        _scale[1, 32](x, np.float32(3.0))
    (stats,) = cap.launches
    assert stats.resources is None and "GPU compile was off" in stats.resources_note


@needs_ptx
def test_device_function_has_no_resources_of_its_own():
    @cuda.jit(device=True)
    def twice(v):
        return v * float32(2.0)

    res, note = ptx.kernel_resources(ptx.compile_kernel(twice, (np.float32(1.0),)))
    assert res is None and "device function" in note


@needs_ptx
def test_ptxas_past_its_time_limit_gives_none_and_the_next_compile_works(monkeypatch):
    monkeypatch.setattr(ptxas, "PTXAS_TIMEOUT_S", 1e-4)
    x = np.ones(16, np.float32)
    compiled = ptx.compile_kernel(_scale, (x, np.float32(1.0)), use_cache=False)
    res, note = ptx.kernel_resources(compiled, use_cache=False)
    assert res is None and "could not run" in note
    monkeypatch.undo()
    res, note = ptx.kernel_resources(compiled, use_cache=False)
    assert res is not None and res.registers >= 1, note


def _bounded(launch_bounds):
    @cuda.jit(launch_bounds=launch_bounds)
    def bounded(x, out, n):
        acc = cuda.local.array(64, float32)
        i = cuda.grid(1)
        for t in range(64):
            acc[t] = x[(i + t) % x.size]
        s = float32(0.0)
        for r in range(n):
            for t in range(64):
                s += acc[t] * acc[(t + r) % 64]
        out[i] = s
    return bounded


@needs_ptx
@needs_sim
def test_launch_bounds_reach_ptxas_and_the_launch_check():
    from kernellab import sim
    from kernellab.sim.errors import LaunchConfigError

    x = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    kernel = _bounded((256, 4))                  # 256 threads, at least 4 blocks an SM
    assert kernel.launch_bounds == (256, 4)
    with sim.capture() as cap:
        kernel[1, 256](x, out, 2)
    assert (out == 128).all()
    (stats,) = cap.launches
    res = stats.resources
    assert res is not None, stats.resources_note
    # minctasm 4 at 256 threads: 4 blocks' registers must fit the 64 K register file
    assert res.registers <= 65536 // (256 * 4)
    assert occupancy(res, 256).blocks_per_sm >= 4
    with pytest.raises(LaunchConfigError, match="launch_bounds of at most 256"):
        kernel[1, 512](x, np.zeros(512, np.float32), 1)
    with pytest.raises(ValueError, match="launch_bounds must be"):
        _bounded((256, 0))
    with pytest.raises(ValueError, match="at most 1024"):
        _bounded(2048)


class _Dispatcher:
    """Stands in for numba-cuda's GPU Dispatcher (its ``overloads`` keyed by argument types and
    its ``get_*(signature)`` methods reading ``signature.args``): the GPU path's glue, which
    this machine cannot run for real."""

    def __init__(self, figures):
        self.overloads = {args: None for args in figures}
        self._figures = figures

        def gpu_kernel():
            pass
        self.py_func = gpu_kernel

    def _get(self, signature, i):
        return self._figures[signature.args][i]

    def get_regs_per_thread(self, signature=None):
        return self._get(signature, 0)

    def get_local_mem_per_thread(self, signature=None):
        return self._get(signature, 1)

    def get_shared_mem_per_block(self, signature=None):
        return self._get(signature, 2)


def test_gpu_rows_read_numba_dispatcher():
    from kernellab.sim.resources import gpu_resources

    one = _Dispatcher({("float32[::1]",): (64, 16, 2048)})
    res = gpu_resources(one)
    assert (res.registers, res.stack_frame_bytes, res.shared_static_bytes, res.source) == \
        (64, 16, 2048, "numba dispatcher (GPU)")
    row = next(line for line in resource_table([(one, 256)]).splitlines()
               if line.startswith("gpu_kernel"))
    expect = occupancy(res, 256)
    assert row.split()[1:4] == ["256", "64", "16"]
    assert row.split()[6] == str(expect.blocks_per_sm)
    two = _Dispatcher({("a",): (32, 0, 0), ("b",): (40, 0, 0)})
    with pytest.raises(ValueError, match="2 compiled overloads"):
        gpu_resources(two)
    table = resource_table([(two, 128)])
    assert "unknown" in table and "2 compiled overloads" in table
    with pytest.raises(TypeError, match="resource_table takes"):
        resource_table(3)


# ------------------------------------------------------------------------------------------
# fixes of the first pass: dynamic shared memory, a missing libnvJitLink, max_registers,
# the opt-in, NumPy integers, the printed summary
# ------------------------------------------------------------------------------------------

@cuda.jit
def _dyn_only(x):
    buf = cuda.shared.array(0, float32)          # dynamic shared memory only
    t = cuda.threadIdx.x
    buf[t] = x[t]
    cuda.syncthreads()
    x[t] = buf[(t + 1) % cuda.blockDim.x]


@needs_ptx
@needs_sim
def test_dynamic_only_kernel_has_no_static_shared_on_sm90():
    # for sm_90 ptxas reports 1 KiB of shared memory for this kernel (the block's reserve);
    # the figure kept is the PTX's own sized .shared arrays: none. 48 KiB dynamic at 128
    # threads: (49152 + 1024) B a block, 233472 // 50176 = 4 blocks on cc 9.0
    from kernellab import sim

    x = np.arange(128, dtype=np.float32)
    with sim.capture() as cap:
        _dyn_only[1, 128, 0, 48 * 1024](x)
    (stats,) = cap.launches
    for cc in ((8, 0), (9, 0)):
        res, note = stats.resources_for(cc)
        assert res is not None, note
        assert res.shared_static_bytes == 0
    res9, _ = stats.resources_for((9, 0))
    occ = occupancy(res9, 128, 48 * 1024, cc=(9, 0))
    assert (occ.blocks_per_sm, occ.limiter) == (4, "shared memory")
    row = next(line for line in resource_table(cap, cc=(9, 0)).splitlines()
               if line.startswith("_dyn_only"))
    assert row.split()[5:7] == [str(48 * 1024), "4"]


_STUB = '''
try:
    from cuda.pathfinder import DynamicLibNotFoundError
except ImportError:
    class DynamicLibNotFoundError(RuntimeError):
        pass


class InputType:
    PTX = 1


def version():
    return (13, 5)


def create(*args):
    # as cuda-bindings does when libnvJitLink is absent: the module imports, the first call
    # that needs the library fails to load it
    raise DynamicLibNotFoundError("Failure finding libnvJitLink.so: stub")
'''


@needs_ptx
def test_a_library_that_cannot_load_is_missing_not_a_ptxas_error(monkeypatch, tmp_path):
    from kernellab.sim.ptx import compile as ptx_compile

    (tmp_path / "kl_stub_nvjitlink.py").write_text(_STUB)
    ptx.close()                                   # the next request starts a helper that
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))    # can import the stub
    monkeypatch.setattr(ptx_compile, "NVJITLINK_MODULE", "kl_stub_nvjitlink")
    x = np.ones(16, np.float32)
    compiled = ptx.compile_kernel(_scale, (x, np.float32(1.0)), use_cache=False)
    try:
        res, note = ptx.kernel_resources(compiled, use_cache=False)
    finally:
        ptx.close()
    assert res is None
    assert "cannot be imported or loaded" in note and "libnvJitLink" in note
    assert "rejected" not in note


@needs_ptx
def test_a_missing_nvjitlink_is_not_cached_on_disk(monkeypatch):
    from kernellab.sim.ptx import compile as ptx_compile

    x = np.ones(16, np.float32)
    compiled = ptx.compile_kernel(_scale, (x, np.float32(4.0)))
    stored = []
    monkeypatch.setattr(ptx_compile, "_disk_store", lambda *a: stored.append(a))
    monkeypatch.setattr(ptx_compile._helper, "request", lambda *a, **k: {
        "ok": False, "kind": "missing", "message": "DynamicLibNotFoundError: stub"})
    ptx.clear_cache()
    try:
        res, note = ptx.kernel_resources(compiled)
    finally:
        ptx.clear_cache()               # the memory cache holds the stub's answer
    assert res is None and "cannot be imported or loaded" in note
    assert stored == []                 # installing nvJitLink later is seen next session


def _many_registers():
    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        a = cuda.local.array(24, float32)
        for t in range(24):
            a[t] = x[(i + t) % x.size]
        s = float32(0.0)
        for r in range(24):
            for t in range(24):
                s += a[t] * a[r]
        out[i] = s
    return k


@needs_ptx
@needs_sim
def test_max_registers_reaches_ptxas():
    from kernellab import sim

    fn = _many_registers().fn
    free, capped = cuda.jit(fn), cuda.jit(max_registers=32)(fn)
    assert capped.max_registers == 32 and getattr(free, "max_registers", None) is None
    x = np.ones(64, np.float32)
    got = {}
    for name, kernel in (("free", free), ("capped", capped)):
        out = np.zeros(64, np.float32)
        with sim.capture() as cap:
            kernel[1, 64](x, out)
        assert (out == 576).all()
        (stats,) = cap.launches
        got[name] = stats.resources
        assert got[name] is not None, stats.resources_note
    assert got["free"].registers > 32          # the cap bites: not the same report cached
    assert got["capped"].registers <= 32
    assert cuda.jit(max_registers=np.int64(40))(fn).max_registers == 40
    for bad in (0, 256, 3.5, True):
        with pytest.raises(ValueError, match="max_registers must be"):
            cuda.jit(max_registers=bad)(fn)


def test_opt_in_shared_memory_per_block():
    # Programming Guide, "Technical Specifications per Compute Capability": 163 KB a block
    # after an opt-in on 8.0, 227 KB on 9.0
    assert SM_LIMITS[(8, 0)].max_shared_per_block_optin == 163 * 1024
    assert SM_LIMITS[(9, 0)].max_shared_per_block_optin == 227 * 1024
    res = _res(32, 100 * 1024)
    assert occupancy(res, 128).blocks_per_sm == 0                     # above 48 KiB
    # (102400 + 1024) B a block: 167936 // 103424 = 1 on 8.0, 233472 // 103424 = 2 on 9.0
    assert occupancy(res, 128, opt_in=True).blocks_per_sm == 1
    assert occupancy(res, 128, cc=(9, 0), opt_in=True).blocks_per_sm == 2
    most = _res(32, 163 * 1024)
    assert occupancy(most, 128, opt_in=True).blocks_per_sm == 1       # 167936 = all of 164 K
    occ = occupancy(most, 128, dynamic_shared_bytes=1, opt_in=True)
    assert (occ.blocks_per_sm, occ.limiter) == (0, "shared memory")
    assert occupancy(most, 128, dynamic_shared_bytes=64 * 1024, cc=(9, 0),
                     opt_in=True).blocks_per_sm == 1


def test_numpy_integers_are_accepted():
    from kernellab.sim.launch import normalize_launch_bounds

    assert normalize_launch_bounds(np.int64(128)) == (128,)
    lb = normalize_launch_bounds((np.int32(256), np.int64(2)))
    assert lb == (256, 2) and all(type(v) is int for v in lb)
    with pytest.raises(ValueError, match="launch_bounds must be"):
        normalize_launch_bounds(np.bool_(True))
    one = _Dispatcher({("float32[::1]",): (64, 16, 2048)})
    for arg in ((one, np.int64(256)), [(one, np.int32(256), np.int64(0))]):
        row = next(line for line in resource_table(arg).splitlines()
                   if line.startswith("gpu_kernel"))
        assert row.split()[1:3] == ["256", "64"]
    assert occupancy(_res(np.int64(64)), np.int64(256)).blocks_per_sm == 4


@needs_ptx
@needs_sim
def test_printed_launch_stats_show_registers_and_occupancy():
    from kernellab import sim

    x = np.ones(64, np.float32)
    with sim.capture() as cap:
        _scale[1, 64](x, np.float32(2.0))
    (stats,) = cap.launches
    assert stats._resources == {}              # nothing asked yet: no ptxas run
    assert "registers" not in repr(stats) and stats._resources == {}
    text = str(stats)
    res = stats.resources
    occ = occupancy(res, 64)
    assert text.startswith(repr(stats))
    assert (f"registers/thread {res.registers}, local frame {res.stack_frame_bytes} B, "
            f"spill st/ld 0/0 B, occupancy {100 * occ.fraction:.1f} % "
            f"({occ.blocks_per_sm} blocks/SM, limited by {occ.limiter}; cc 8.0)") in text
    with sim.capture(gpu_compile=False) as cap:
        _scale[1, 64](x, np.float32(2.0))
    assert "GPU compile was off" in str(cap.launches[0])
