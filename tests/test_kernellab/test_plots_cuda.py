"""The CUDA chapter's pictures (kernellab.plots: access maps, bank heat maps, the hierarchical
roofline) draw what the sim tier measured: each test checks the numbers behind a picture —
the thread that read each element, the sectors one warp request moves, the words per bank,
the roofs — against what the kernel does by construction and against the engine's counters.
Headless (matplotlib's Agg backend); the kernels are single blocks of at most 1024 threads.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kernellab  # noqa: E402  (selects the gpu/sim tier before numba.cuda is imported)
from kernellab import plots  # noqa: E402
from kernellab.sim import trace  # noqa: E402

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim",
                                reason="traces exist only on the sim tier")

from numba import cuda, float32  # noqa: E402


# Module-level kernels: the simulator swaps the in-kernel `cuda` module through the kernel's
# globals, so `cuda` must be a global name, not a closure variable.
@cuda.jit
def transposed_read(src, dst):
    # thread (tx, ty) reads src[tx, ty]: element (r, c) is read by thread tx=r, ty=c
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    dst[ty, tx] = src[tx, ty]


@cuda.jit
def column_read(src, dst):
    # lane t of warp w reads src[t, w]: one column per warp (32 rows of 64 floats apart)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    dst[ty, tx] = src[tx, ty]


@cuda.jit
def broadcast_read(src, dst):
    # every thread reads src[0, 0]
    tx = cuda.threadIdx.x
    dst[0, tx] = src[0, 0]


@cuda.jit
def tile_32(src, dst):
    tile = cuda.shared.array((32, 32), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tile[ty, tx] = src[ty, tx]
    cuda.syncthreads()
    dst[ty, tx] = tile[tx, ty]


@cuda.jit
def tile_33(src, dst):
    tile = cuda.shared.array((32, 33), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tile[ty, tx] = src[ty, tx]
    cuda.syncthreads()
    dst[ty, tx] = tile[tx, ty]


@pytest.fixture(scope="module")
def kernels():
    return {
        "transposed_read": transposed_read, "column_read": column_read,
        "broadcast_read": broadcast_read, "tile_32": tile_32, "tile_33": tile_33}


def run(kernel, block, *arrays):
    from kernellab import sim

    with sim.capture(trace=True) as cap:
        kernel[1, block](*arrays)
    (stats,) = cap.launches
    return stats


def test_access_grid_is_the_thread_that_read_each_element(kernels):
    bx, by = 8, 4                           # 32 threads: one warp
    src = np.arange(bx * by, dtype=np.float32).reshape(bx, by)
    dst = np.zeros((by, bx), np.float32)
    st = run(kernels["transposed_read"], (bx, by), src, dst)
    assert np.array_equal(dst, src.T)
    grid = trace.access_grid(st.trace, "src", src.shape, by="tid")
    r, c = np.indices(src.shape)
    assert np.array_equal(grid, c * bx + r)          # tid = tx + ty * bx with tx = r, ty = c
    assert np.array_equal(trace.access_grid(st.trace, "src", src.shape, by="lane"), c * bx + r)
    assert np.array_equal(trace.access_grid(st.trace, "src", src.shape, by="count"),
                          np.ones(src.shape))
    # writes: dst[ty, tx] by thread tx + ty * bx, i.e. the linear id in row-major order
    wgrid = trace.access_grid(st.trace, "dst", dst.shape, by="tid", kind="w")
    assert np.array_equal(wgrid, np.arange(dst.size).reshape(dst.shape))
    # no reads of dst, no writes of src: all NaN
    assert np.isnan(trace.access_grid(st.trace, "dst", dst.shape, kind="r")).all()
    # the picture shows exactly that grid
    fig = plots.access_map(st.trace, "src", src.shape, by="tid")
    shown = fig.axes[0].images[0].get_array()
    assert np.array_equal(np.ma.filled(shown.astype(float), np.nan), grid)


def test_access_grid_marks_several_readers_and_untouched_cells(kernels):
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst = np.zeros((1, 32), np.float32)
    st = run(kernels["broadcast_read"], (32, 1), src, dst)
    lanes = trace.access_grid(st.trace, "src", src.shape, by="lane")
    assert lanes[0, 0] == -1                        # 32 different lanes read it
    assert np.isnan(lanes.ravel()[1:]).all()        # nobody read the rest
    assert trace.access_grid(st.trace, "src", src.shape, by="warp")[0, 0] == 0
    assert trace.access_grid(st.trace, "src", src.shape, by="count")[0, 0] == 32
    # filters: one thread
    one = trace.access_grid(st.trace, "src", src.shape, by="tid", tid=5)
    assert one[0, 0] == 5
    with pytest.raises(ValueError, match="by must be"):
        trace.access_grid(st.trace, "src", src.shape, by="colour")
    with pytest.raises(ValueError, match="do not fit"):
        trace.access_grid(st.trace, "dst", (1, 8), kind="w")


def test_one_request_and_its_sectors(kernels):
    rows, cols = 32, 64                    # row pitch 256 bytes: each lane its own sector
    src = np.zeros((rows, cols), np.float32)
    dst = np.zeros((2, 32), np.float32)
    st = run(kernels["column_read"], (32, 2), src, dst)
    reqs = trace.trace_requests(st.trace, "src")
    assert len(reqs) == 2                  # one load request per warp
    first = trace.trace_requests(st.trace, "src", warp=0)
    assert first == reqs[:1]
    grid = trace.access_grid(st.trace, "src", src.shape, by="lane", request=first[0])
    expected = np.full(src.shape, np.nan)
    expected[:, 0] = np.arange(32)         # warp 0 reads column 0, lane t row t
    assert np.array_equal(grid, expected, equal_nan=True)
    assert st.counters["global_load_sectors"] == 2 * 32
    fig = plots.access_map(st.trace, "src", src.shape, by="lane", request=first[0])
    ax = fig.axes[0]
    assert "32 sectors" in ax.get_title()
    # the shading underneath: the 7 other floats of each lane's 32-byte sector
    moved = np.ma.filled(ax.images[1].get_array().astype(float), np.nan)
    assert np.isfinite(moved).sum() == 32 * 7
    assert np.isfinite(moved[:, 1:8]).all() and np.isnan(moved[:, 8:]).all()
    # a window draws that part only, with the array's own coordinates
    fig = plots.access_map(st.trace, "src", src.shape, by="lane", request=first[0],
                           window=((0, 8), (0, 4)))
    shown = fig.axes[0].images[0]
    assert shown.get_array().shape == (8, 4)
    assert tuple(shown.get_extent()) == (-0.5, 3.5, 7.5, -0.5)


def test_access_map_categorical_and_annotations(kernels):
    bx, by = 8, 4
    src = np.zeros((bx, by), np.float32)
    dst = np.zeros((by, bx), np.float32)
    st = run(kernels["transposed_read"], (bx, by), src, dst)
    fig = plots.access_map(st.trace, "src", src.shape, by="tid", tid=[0, 1, 9],
                           categorical=True, annotate="tid")
    ax = fig.axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["0", "1", "9"]
    cbar = fig.axes[1]
    assert [int(round(t)) for t in cbar.get_yticks()] == [0, 1, 9]


def test_bank_counts_conflict_and_padding(kernels):
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    for name, per_request in (("tile_32", 32), ("tile_33", 1)):
        y = np.zeros_like(x)
        st = run(kernels[name], (32, 32), x, y)
        assert np.array_equal(y, x.T)
        reqs, warps, counts = trace.bank_counts(st.trace, kind="r")
        assert len(reqs) == st.counters["shared_load_requests"] == 32
        assert np.array_equal(warps, np.arange(32))
        assert (counts.sum(axis=1) == 32).all()      # 32 distinct words per request
        assert (counts.max(axis=1) == per_request).all()
        assert counts.max(axis=1).sum() == st.counters["shared_load_wavefronts"]
        if name == "tile_32":
            # warp w reads column w: every word in bank w
            assert np.array_equal(np.argmax(counts, axis=1), np.arange(32))
        # stores are rows: one word per bank
        _, _, wcounts = trace.bank_counts(st.trace, kind="w")
        assert (wcounts == 1).all()
        assert wcounts.max(axis=1).sum() == st.counters["shared_store_wavefronts"]
        fig = plots.bank_heatmap(st.trace, kind="r")
        ax = fig.axes[0]
        assert f"{st.counters['shared_load_wavefronts']} wavefronts" in ax.get_title()
        shown = np.ma.filled(ax.images[0].get_array().astype(float), 0)
        assert np.array_equal(shown, counts)


def test_bank_counts_eight_byte_words():
    # a synthetic trace: 32 lanes read consecutive float64 values of a shared array
    from kernellab.sim.engine import TRACE_DTYPE

    tr = np.zeros(32, TRACE_DTYPE)
    tr["space"], tr["kind"], tr["array"] = "s", "r", "t"
    tr["tid"] = tr["lane"] = np.arange(32)
    tr["offset"] = np.arange(32)
    tr["addr"] = 8 * np.arange(32)
    tr["request"] = 7
    reqs, warps, counts = trace.bank_counts(tr, itemsize=8)
    # two half-warp phases, one row each: 16 lanes x 2 words = one word a bank in each
    assert reqs.tolist() == [7, 7] and warps.tolist() == [0, 0]
    assert (counts == 1).all() and counts.max(axis=1).sum() == 2
    _, _, as_float = trace.bank_counts(tr, itemsize=4)
    assert counts.sum() == 64 and as_float.sum() == 32


def test_no_trace_is_a_clear_error():
    with pytest.raises(ValueError, match="trace=True"):
        trace.access_grid(None, "A", (2, 2))


def test_roofline_levels_roofs_and_points():
    peak = 19.5e12
    bws = {"DRAM": 1.5e12, "L2": 7.0e12}
    points = {"k1": (1.0e12, {"DRAM": 50.0, "L2": 0.5}),
              "k2": (8.0e12, {"DRAM": 50.0, "L2": 4.0})}
    fig = plots.roofline_levels(peak, bws, points, title="t")
    ax = fig.axes[0]
    roofs = {ln.get_label().split(" roof")[0]: ln for ln in ax.lines
             if " roof:" in ln.get_label()}
    assert set(roofs) == {"DRAM", "L2"}
    for lv, ln in roofs.items():
        x, y = ln.get_data()
        assert np.allclose(y, np.minimum(peak, x * bws[lv]) / 1e9)
    # each kernel: one marker per level at its intensity, all at its GFLOP/s
    markers = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.lines
               if ln.get_marker() not in ("None", "", None) and len(ln.get_xdata()) == 1]
    want = {(x, perf / 1e9) for perf, lv in points.values() for x in lv.values()}
    assert want <= {(float(x), float(y)) for x, y in markers}
    x0, x1 = ax.get_xlim()
    assert x0 <= 0.5 and x1 >= 50.0                  # every point inside the axes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("k2" in s and "8,000 GFLOP/s" in s for s in labels)
