"""GPU-compile check of the sim tier (kernellab.sim.ptx): kernels the simulator runs are compiled
to PTX in a helper process; a kernel the GPU compiler rejects raises GPUCompileError."""

import kernellab  # noqa: F401  - first: chooses the tier (the simulator on a machine without GPU)

import importlib.util
import math
import os
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from numba import cuda, float32

from kernellab import device
from kernellab.sim import ptx
from kernellab.sim.errors import GPUCompileError

_ok, _why = ptx.ptx_available()
pytestmark = [pytest.mark.skipif(not _ok, reason=f"no GPU compiler: {_why}"),
              pytest.mark.usefixtures("ptx_cache_dir")]  # conftest: a temporary cache
needs_sim = pytest.mark.skipif(not device.simulator_active(),
                               reason=f"needs the sim tier, not {kernellab.TIER}")

TILE = 16
SCALE = 0.5




@cuda.jit
def tiled_gemm(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sA[ty, tx] = A[row, k + tx] if row < A.shape[0] and k + tx < A.shape[1] else 0.0
        sB[ty, tx] = B[k + ty, col] if col < B.shape[1] and k + ty < B.shape[0] else 0.0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if row < C.shape[0] and col < C.shape[1]:
        C[row, col] = acc


@cuda.jit
def stringly(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = len(str(i))  # runs on the simulator; no GPU compiler accepts it


@cuda.jit(device=True)
def scaled(x):
    return x * SCALE


@cuda.jit(device=True)
def norm2(x, y):
    return math.sqrt(scaled(x) * scaled(x) + y * y)  # a device function calling another one


@cuda.jit
def uses_device_fn(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = norm2(x[i], y[i]) + np.float32(TILE)


@cuda.jit
def warp_sum(x, out):
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.threadIdx.x % 32 == 0:
        cuda.atomic.add(out, 0, v)


def test_tiled_gemm_compiles_with_shared_loads_and_barriers():
    A = np.zeros((33, 17), np.float32)
    r = ptx.compile_kernel(tiled_gemm, (A, A.T.copy(), np.zeros((33, 33), np.float32)))
    assert r.kernel == "tiled_gemm" and r.cc == (8, 0) and "array(float32, 2d, C)" in r.signature
    assert ".target sm_80" in r.ptx and ".entry" in r.ptx
    assert r.counts["bar.sync"] >= 1
    assert r.counts["ld.shared"] >= 1 and r.counts["st.shared"] >= 1
    assert r.counts["fma.f32"] >= 1
    assert r.seconds > 0


def test_python_only_construct_is_a_gpu_compile_error():
    with pytest.raises(GPUCompileError) as info:
        ptx.compile_kernel(stringly, (np.zeros(8, np.float32),))
    msg = str(info.value)
    assert "stringly" in msg and "str(int64)" in msg  # the compiler's complaint, with its types
    assert "No implementation of function" in msg
    assert "out[i] = len(str(i))" in msg  # the kernel's own source line
    assert "candidate implementations" not in msg and len(msg) < 1500  # trimmed
    assert info.value.kind == "gpu-compile" and info.value.kernel == "stringly"
    assert "candidate implementations" in info.value.compiler_message  # the full text is kept
    # the verdict is cached too
    with pytest.raises(GPUCompileError):
        ptx.compile_kernel(stringly, (np.zeros(8, np.float32),))


def test_device_functions_module_constants_math_and_numpy_globals():
    x = np.ones(64, np.float32)
    r = ptx.compile_kernel(uses_device_fn, (x, x, x))
    assert r.kernel == "uses_device_fn"
    assert "sqrt" in r.ptx  # math.sqrt reached the GPU code through the device function
    assert "0d3FE0000000000000" in r.ptx  # SCALE = 0.5 (a Python float: double) was sent along


def test_warp_shuffle_and_atomics_are_counted():
    r = ptx.compile_kernel(warp_sum, (np.ones(64, np.float32), np.zeros(1, np.float32)))
    assert r.counts["shfl.sync"] >= 1
    assert r.counts["atom"] + r.counts["red"] >= 1


@needs_sim
def test_kernel_from_an_importable_module_is_sent_by_value(tmp_path, monkeypatch):
    # The module refuses to be imported outside the simulator: the helper must not import it.
    (tmp_path / "kl_student_kernels.py").write_text(textwrap.dedent("""
        import os
        if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            raise RuntimeError("imported by the compile helper")
        from numba import cuda
        WIDTH = 8

        @cuda.jit(device=True)
        def twice(v):
            return 2 * v

        @cuda.jit
        def axpy(a, x, y):
            i = cuda.grid(1)
            if i < y.size:
                y[i] = twice(a) * x[i] + y[i] + WIDTH
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import kl_student_kernels as mod
    x = np.ones(10, np.float32)
    r = ptx.compile_kernel(mod.axpy, (np.float32(2), x, x))
    assert r.kernel == "axpy" and r.signature.startswith("(float32,")
    # as the grader loads a submission: from a file, under a name that is not importable
    spec = importlib.util.spec_from_file_location("submission_1234",
                                                  tmp_path / "kl_student_kernels.py")
    sub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sub)
    r2 = ptx.compile_kernel(sub.axpy, (2.0, x, x))
    assert r2.signature.startswith("(float64,") and r2.counts["fma.f64"] >= 1
    assert "submission_1234" not in sys.modules


def test_cache_memory_then_disk_without_restarting_the_helper():
    x = np.ones(16, np.float32)
    out = np.zeros(1, np.float32)
    first = ptx.compile_kernel(warp_sum, (x, out))
    t0 = time.perf_counter()
    again = ptx.compile_kernel(warp_sum, (x, out))
    assert time.perf_counter() - t0 < 0.2  # a compile takes 0.05-0.4 s, a helper start ~1 s
    assert again.cache == "memory" and again.ptx == first.ptx
    # a different signature is a different entry
    other = ptx.compile_kernel(warp_sum, (x.astype(np.float64), out.astype(np.float64)))
    assert other.cache is None and "f64" in other.signature.replace("float64", "f64")
    # a new process: memory empty, helper stopped; the disk cache answers without starting it
    ptx.clear_cache()
    ptx.close()
    t0 = time.perf_counter()
    from_disk = ptx.compile_kernel(warp_sum, (x, out))
    assert time.perf_counter() - t0 < 0.3
    assert from_disk.cache == "disk" and from_disk.ptx == first.ptx
    assert from_disk.counts == first.counts
    assert ptx._helper.pid is None


def test_changed_global_constant_is_a_cache_miss(monkeypatch):
    x = np.ones(8, np.float32)
    a = ptx.compile_kernel(uses_device_fn, (x, x, x))
    monkeypatch.setitem(globals(), "SCALE", 0.25)  # referenced by the device function
    b = ptx.compile_kernel(uses_device_fn, (x, x, x))
    assert b.cache is None and a.ptx != b.ptx and "0d3FD0000000000000" in b.ptx


@needs_sim
def test_layouts_and_scalars_in_the_signature():
    a = np.zeros((4, 6), np.float32)
    sig = ptx.signature_of([a, np.asfortranarray(a), a[:, ::2], 3, 2.5, np.int32(1), True])
    assert [str(t) for t in sig] == [
        "array(float32, 2d, C)", "array(float32, 2d, F)", "array(float32, 2d, A)",
        "int64", "float64", "int32", "bool"]
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    assert str(ptx.signature_of([FakeCUDAArray(a)])[0]) == "array(float32, 2d, C)"
    with pytest.raises(TypeError, match="argument 0"):
        ptx.signature_of([object()])


@needs_sim
def test_fake_cuda_module_in_globals_during_a_launch_pickles_as_numba_cuda():
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, swapped_cuda_module

    fake = FakeCUDAModule((1, 1, 1), (32, 1, 1), 0)
    with swapped_cuda_module(warp_sum.fn, fake):
        assert warp_sum.fn.__globals__["cuda"] is fake
        r = ptx.compile_kernel(warp_sum, (np.ones(4, np.float32), np.zeros(1, np.float32)),
                               use_cache=False)
    assert r.counts["shfl.sync"] >= 1


def test_helper_crash_restarts_once_then_reports(monkeypatch):
    ptx.ptx_available()
    ptx._helper.ensure_started()
    # a helper that dies mid-request: restarted once with a warning, then an error
    with pytest.warns(RuntimeWarning, match="restarting"):
        with pytest.raises(ptx.PTXToolError, match="died twice"):
            ptx._helper.request({"op": "crash", "name": "crash"})
    # and the next compile works on a fresh helper
    x = np.ones(8, np.float32)
    r = ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False)
    assert r.counts["instructions"] > 0
    # a helper killed between requests is restarted transparently
    os.kill(ptx._helper.pid, 9)
    ptx._helper._proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False)
    ptx.close()
    ptx.close()  # idempotent
    assert ptx._helper.pid is None


def test_static_counts_classes():
    text = textwrap.dedent("""
        //
        // Generated by NVIDIA NVVM Compiler
        .version 8.5
        .target sm_80
        .visible .entry k(
            .param .u64 k_param_0
        )
        {
            .reg .pred %p<3>;
            .reg .f32 %f<9>;
            .shared .align 4 .b8 _smem[1024];
            // ld.global.f32 in a comment does not count
            /* st.shared.f32 [x], %f1; */
            ld.param.u64 %rd1, [k_param_0];
            cvta.to.global.u64 %rd2, %rd1;
        $L__BB0_1:
            ld.global.nc.f32 %f1, [%rd2];
            ldu.global.f32 %f7, [%rd2];
            ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];
            ld.f32 %f5, [%rd1];
            st.f32 [%rd1], %f5;
            ld.shared.f32 %f2, [_smem];
            st.shared::cta.f32 [_smem], %f2;
            ld.local.f32 %f8, [%rd3];
            bar.sync 0;
            barrier.sync 0;
            bar.red.popc.u32 %r1, 0, %p1;
            bar.warp.sync -1;
            shfl.sync.down.b32 %r1|%p1, %r2, 16, 31, -1;
            vote.sync.ballot.b32 %r3, %p1, -1;
            activemask.b32 %r4;
            atom.global.add.f32 %f3, [%rd2], %f1;
            red.shared.add.u32 [_smem], 1;
            fma.rn.f32 %f4, %f1, %f2, %f3;
            fma.rn.f64 %fd1, %fd2, %fd3, %fd4;
            mul.f32 %f5, %f1, %f2;
            mul.lo.s32 %r5, %r1, %r2;
            add.rn.f32 %f6, %f1, %f2;
            add.s32 %r6, %r1, 1;
            sub.f64 %fd5, %fd1, %fd2;
            @%p1 bra $L__BB0_1;
            @!%p2 st.global.f32 [%rd2], %f6;
            ret;
        }
    """)
    c = ptx.static_counts(text)
    assert c["ld.param"] == 1
    assert c["ld.global"] == 3 and c["ld.global.nc"] == 1
    assert c["ld.generic"] == 1 and c["st.generic"] == 1
    assert c["ld.shared"] == 1 and c["st.shared"] == 1 and c["ld.local"] == 1
    assert c["st.global"] == 1
    assert c["bar.sync"] == 3 and c["bar.warp.sync"] == 1
    assert c["shfl.sync"] == 1 and c["vote.sync"] == 1 and c["activemask"] == 1
    assert c["atom"] == 1 and c["red"] == 1
    assert c["fma.f32"] == 1 and c["fma.f64"] == 1
    assert c["mul.f32"] == 1 and c["add.f32"] == 1 and c["sub.f64"] == 1
    assert c["instructions"] == 29
    assert set(c) == set(ptx.COUNT_KEYS)


def test_trim_compiler_message_keeps_summary_and_location():
    msg = textwrap.dedent("""\
        No implementation of function Function(<class 'str'>) found for signature:

         >>> str(int64)

        There are 2 candidate implementations:
         - Of which 1 did not match due to:
         Overload in function 'ol_str_generic': File: numba/cuda/cpython/builtins.py: Line 1144.
           With argument(s): '(int64)':
          Rejected as the implementation raised a specific error:
            TypingError: lots of detail
          raised from /x/numba/core/types/functions.py:231

        During: typing of call at /tmp/k.py (12)

        File "/tmp/k.py", line 12:
        def k(a):
            a[0] = len(str(3))
            ^
        """)
    out = ptx.trim_compiler_message(msg)
    assert out.startswith("No implementation of function Function(<class 'str'>)")
    assert ">>> str(int64)" in out and "During: typing of call" in out
    assert "a[0] = len(str(3))" in out
    assert "Rejected" not in out and "raised from" not in out and "candidate" not in out
    assert len(ptx.trim_compiler_message("x" * 10000, limit=100)) < 200


def test_the_stand_in_becomes_the_helper_or_exits_unused():
    """:meth:`_Helper.prepare` (for the grader's worker, which then forbids new processes): the
    stand-in shell becomes the helper on the first compile (the same pid), and one never used
    exits when the helper is closed."""
    ptx.close()
    ptx.prepare()
    shell = ptx._helper._standin[0]
    ptx.prepare()  # idempotent: still the one stand-in
    assert ptx._helper._standin[0] is shell and ptx._helper.pid is None
    x = np.ones(8, np.float32)
    r = ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False)
    assert r.counts["instructions"] > 0 and ptx._helper.pid == shell.pid
    ptx.close()
    assert shell.poll() is not None
    ptx.prepare()
    unused = ptx._helper._standin[0]
    ptx.close()
    assert unused.poll() is not None and ptx._helper._standin is None


def test_helper_that_cannot_start_is_reported_once(monkeypatch):
    ptx.close()
    monkeypatch.setattr(ptx, "_CHILD_SOURCE", "import sys; print('no NVVM here', file=sys.stderr)")
    x = np.ones(8, np.float32)
    with pytest.raises(ptx.PTXToolError, match="did not start.*no NVVM here"):
        ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False)
    starts = ptx._helper.starts
    with pytest.raises(ptx.PTXToolError, match="no NVVM here"):  # sticky: no second start
        ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False)
    assert ptx._helper.starts == starts
    monkeypatch.undo()
    ptx.close()  # forgets the failure
    assert ptx.compile_kernel(uses_device_fn, (x, x, x), use_cache=False).counts["instructions"]
