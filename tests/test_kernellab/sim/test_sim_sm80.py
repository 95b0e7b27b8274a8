"""The sm_80 instructions on the sim tier (kernellab.cuda_ext, kernellab.sim.sm80,
kernellab.sim.mma): fragment layouts against the PTX ISA's tables, mma.m16n8k16 against a
float64 product, ldmatrix against its definition, the checks (divergence, alignment, cp.async
races and groups), the traffic counters of wide accesses, the model's tensor component and the
GPU compile of the inline PTX.

The layouts are written out here independently of kernellab.sim.mma, row by row from the PTX
ISA (8.x), "Warp-level Matrix Multiply-Accumulate Instructions" -> "Matrix Fragments for
mma.m16n8k16 with floating point type" and "ldmatrix". Kernels are one or two warps, so the file
runs in a few seconds; the GPU compile is off except where it is the subject.
"""

import kernellab  # noqa: F401  - first: selects the sim tier on a GPU-less machine

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

from kernellab import device, sim
from kernellab.sim import mma
from kernellab.sim.counters import COUNTER_KEYS
from kernellab.sim.errors import DivergenceError, OutOfBoundsError, RaceError
from kernellab.sim.model import PROFILES, modelled_time

needs_sim = pytest.mark.skipif(not device.simulator_active(),
                               reason=f"needs the sim tier, not {kernellab.TIER}")

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"f16": np.dtype(np.float16), "bf16": BF16}
ZERO4 = (np.float32(0), np.float32(0), np.float32(0), np.float32(0))


def run(kern, grid, block, *args, **opts):
    """Launch on the engine (GPU compile off unless asked); returns its LaunchStats."""
    opts.setdefault("gpu_compile", False)
    with sim.capture(**opts) as cap:
        kern[grid, block](*args)
    assert len(cap.launches) == 1
    return cap.launches[0]


def bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


# ---------------------------------------------------------------------------------------------
# fragment layouts: the ISA's tables, row by row

# lane -> [(row, col) of a0 .. a7]   (groupID = lane >> 2, threadID_in_group = lane % 4)
A_TABLE = {
    0: [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)],
    # lane 5: groupID 1, threadID_in_group 1 -> rows 1 / 9, cols 2, 3 / 10, 11
    5: [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)],
    # lane 31: groupID 7, threadID_in_group 3 -> rows 7 / 15, cols 6, 7 / 14, 15
    31: [(7, 6), (7, 7), (15, 6), (15, 7), (7, 14), (7, 15), (15, 14), (15, 15)],
    # lane 14: groupID 3, threadID_in_group 2
    14: [(3, 4), (3, 5), (11, 4), (11, 5), (3, 12), (3, 13), (11, 12), (11, 13)],
}
# lane -> [(k, n) of b0 .. b3]
B_TABLE = {
    0: [(0, 0), (1, 0), (8, 0), (9, 0)],
    5: [(2, 1), (3, 1), (10, 1), (11, 1)],
    31: [(6, 7), (7, 7), (14, 7), (15, 7)],
    14: [(4, 3), (5, 3), (12, 3), (13, 3)],
}
# lane -> [(row, col) of c0 .. c3]
C_TABLE = {
    0: [(0, 0), (0, 1), (8, 0), (8, 1)],
    5: [(1, 2), (1, 3), (9, 2), (9, 3)],
    31: [(7, 6), (7, 7), (15, 6), (15, 7)],
    14: [(3, 4), (3, 5), (11, 4), (11, 5)],
}


@pytest.mark.parametrize("lane", sorted(A_TABLE))
def test_fragment_layouts_match_the_isa_table_rows(lane):
    assert mma.a_coords(lane) == A_TABLE[lane]
    assert mma.b_coords(lane) == B_TABLE[lane]
    assert mma.c_coords(lane) == C_TABLE[lane]


def test_fragment_layouts_follow_the_isa_formulas_for_every_lane():
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        row_a = [g, g, g + 8, g + 8, g, g, g + 8, g + 8]
        col_a = [2 * t, 2 * t + 1] * 2 + [2 * t + 8, 2 * t + 9] * 2
        assert mma.a_coords(lane) == list(zip(row_a, col_a))
        assert mma.b_coords(lane) == [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g),
                                      (2 * t + 9, g)]
        assert mma.c_coords(lane) == [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t),
                                      (g + 8, 2 * t + 1)]
        # ldmatrix: lane l receives row l >> 2, columns 2 (l % 4), 2 (l % 4) + 1 of each matrix;
        # .trans: the transpose
        assert mma.ldmatrix_coords(lane) == [(lane >> 2, 2 * (lane % 4)),
                                             (lane >> 2, 2 * (lane % 4) + 1)]
        assert mma.ldmatrix_coords(lane, trans=True) == [(2 * (lane % 4), lane >> 2),
                                                         (2 * (lane % 4) + 1, lane >> 2)]


@pytest.mark.parametrize("coords, shape", [
    (mma.a_coords, (16, 16)), (mma.b_coords, (16, 8)), (mma.c_coords, (16, 8)),
    (mma.ldmatrix_coords, (8, 8)), (lambda ln: mma.ldmatrix_coords(ln, True), (8, 8))])
def test_each_fragment_covers_its_matrix_exactly_once(coords, shape):
    seen = np.zeros(shape, np.int64)
    for lane in range(32):
        for r, c in coords(lane):
            seen[r, c] += 1
    assert (seen == 1).all()


def test_mma_reference_on_known_registers():
    """kernellab.sim.mma's own evaluation, registers built from the tables above."""
    rng = np.random.default_rng(7)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    a = np.zeros((32, 4), np.uint32)
    b = np.zeros((32, 2), np.uint32)
    c = np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        ea = [A[g, 2 * t], A[g, 2 * t + 1], A[g + 8, 2 * t], A[g + 8, 2 * t + 1],
              A[g, 2 * t + 8], A[g, 2 * t + 9], A[g + 8, 2 * t + 8], A[g + 8, 2 * t + 9]]
        eb = [B[2 * t, g], B[2 * t + 1, g], B[2 * t + 8, g], B[2 * t + 9, g]]
        a[lane] = [mma.pack(ea[2 * i], ea[2 * i + 1]) for i in range(4)]
        b[lane] = [mma.pack(eb[2 * i], eb[2 * i + 1]) for i in range(2)]
        c[lane] = [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]
    d = mma.mma_m16n8k16(a, b, c, "f16")
    ref = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        assert d[lane].tolist() == [ref[g, 2 * t], ref[g, 2 * t + 1], ref[g + 8, 2 * t],
                                    ref[g + 8, 2 * t + 1]]
    assert mma.unpack(a[5, 0], np.float16).tolist() == [A[1, 2], A[1, 3]]
    with pytest.raises(ValueError, match="tf32"):
        mma.mma_m16n8k16(a, b, c, "tf32")
    # the graders' probe (sim option mma_scale): the product term scaled, C added as it is
    d2 = mma.mma_m16n8k16(a, b, c, "f16", scale=2.0)
    ref2 = (2 * (A.astype(np.float64) @ B.astype(np.float64)) + C).astype(np.float32)
    g, t = 5 >> 2, 5 % 4
    assert d2[5].tolist() == [ref2[g, 2 * t], ref2[g, 2 * t + 1], ref2[g + 8, 2 * t],
                              ref2[g + 8, 2 * t + 1]]


# ---------------------------------------------------------------------------------------------
# mma.m16n8k16 on the sim tier


def _mma_kernels(bf16):
    @cuda.jit
    def via_ldmatrix(A, B, C, D):
        # one warp: D (16 x 8) = A (16 x 16) @ B (16 x 8) + C; A, B 16-bit bits as uint16
        sA = cuda.shared.array((16, 16), np.uint16)
        sB = cuda.shared.array((16, 8), np.uint16)
        ln = cuda.laneid
        cuda.cp_async(sA, (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8), 16)
        if ln < 16:
            cuda.cp_async(sB, (ln, 0), B, (ln, 0), 16)
        cuda.cp_async_commit_group()
        cuda.cp_async_wait_group(0)
        cuda.syncthreads()
        a = cuda.ldmatrix_x4(sA, (ln % 16, (ln // 16) * 8))
        b = cuda.ldmatrix_x2_trans(sB, (ln % 16, 0))
        g = ln >> 2
        t = ln % 4
        c = (C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1])
        if bf16:
            d = cuda.mma_m16n8k16_bf16(a, b, c)
        else:
            d = cuda.mma_m16n8k16_f16(a, b, c)
        D[g, 2 * t] = d[0]
        D[g, 2 * t + 1] = d[1]
        D[g + 8, 2 * t] = d[2]
        D[g + 8, 2 * t + 1] = d[3]

    @cuda.jit
    def direct(A, B, C, D):
        # the same from registers each lane packs from global memory by the ISA's table
        ln = cuda.laneid
        g = ln >> 2
        t = ln % 4
        s = np.uint32(16)
        a = (np.uint32(A[g, 2 * t]) | (np.uint32(A[g, 2 * t + 1]) << s),
             np.uint32(A[g + 8, 2 * t]) | (np.uint32(A[g + 8, 2 * t + 1]) << s),
             np.uint32(A[g, 2 * t + 8]) | (np.uint32(A[g, 2 * t + 9]) << s),
             np.uint32(A[g + 8, 2 * t + 8]) | (np.uint32(A[g + 8, 2 * t + 9]) << s))
        b = (np.uint32(B[2 * t, g]) | (np.uint32(B[2 * t + 1, g]) << s),
             np.uint32(B[2 * t + 8, g]) | (np.uint32(B[2 * t + 9, g]) << s))
        c = (C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1])
        if bf16:
            d = cuda.mma_m16n8k16_bf16(a, b, c)
        else:
            d = cuda.mma_m16n8k16_f16(a, b, c)
        D[g, 2 * t] = d[0]
        D[g, 2 * t + 1] = d[1]
        D[g + 8, 2 * t] = d[2]
        D[g + 8, 2 * t + 1] = d[3]

    return via_ldmatrix, direct


_MMA = {kind: _mma_kernels(kind == "bf16") for kind in DTYPES}


@needs_sim
@pytest.mark.parametrize("kind", sorted(DTYPES))
def test_mma_from_ldmatrix_fragments_is_the_product_of_the_rounded_inputs(kind):
    dt = DTYPES[kind]
    rng = np.random.default_rng(1 if kind == "f16" else 2)
    A = (rng.standard_normal((16, 16)) * 3).astype(dt)
    B = (rng.standard_normal((16, 8)) * 3).astype(dt)
    C = rng.standard_normal((16, 8)).astype(np.float32) * 10
    ref = A.astype(np.float64) @ B.astype(np.float64) + C.astype(np.float64)
    via_ldmatrix, direct = _MMA[kind]
    D = np.full((16, 8), np.nan, np.float32)
    st = run(via_ldmatrix, 1, 32, bits(A), bits(B), C, D)
    # within float32 rounding of the exact result (products are exact; one rounding)
    assert (np.abs(D - ref) <= np.spacing(np.abs(ref).astype(np.float32))).all()
    # and not the product of unrounded or wrongly laid-out inputs: C matters, A and B both
    assert np.abs(D - (ref - C)).max() > 1
    assert st.counters["mma_ops"] == 1 and st.counters["cp_async_bytes"] == 32 * 16 + 16 * 16
    D2 = np.full((16, 8), np.nan, np.float32)
    run(direct, 1, 32, bits(A), bits(B), C, D2)
    assert np.array_equal(D, D2)


# ---------------------------------------------------------------------------------------------
# ldmatrix against kernellab.sim.mma.ldmatrix


@cuda.jit
def k_ldmatrix_all(T, perm, o1, o1t, o2, o2t, o4, o4t):
    # lane l gives the address of row perm[l] of a (32, 8) shared tile
    s = cuda.shared.array((32, 8), np.uint16)
    ln = cuda.laneid
    for j in range(8):
        s[ln, j] = T[ln, j]
    cuda.syncthreads()
    r = perm[ln]
    # .x1 reads the addresses of lanes 0-7 only, .x2 of lanes 0-15: the others may point
    # anywhere (here past the end of the tile)
    r1 = r if ln < 8 else 1000
    r2 = r if ln < 16 else 1000
    o1[ln] = cuda.ldmatrix_x1(s, (r1, 0))
    o1t[ln] = cuda.ldmatrix_x1_trans(s, (r1, 0))
    v = cuda.ldmatrix_x2(s, (r2, 0))
    o2[ln, 0] = v[0]
    o2[ln, 1] = v[1]
    v = cuda.ldmatrix_x2_trans(s, (r2, 0))
    o2t[ln, 0] = v[0]
    o2t[ln, 1] = v[1]
    w = cuda.ldmatrix_x4(s, (r, 0))
    wt = cuda.ldmatrix_x4_trans(s, (r, 0))
    for j in range(4):
        o4[ln, j] = w[j]
        o4t[ln, j] = wt[j]


@needs_sim
def test_ldmatrix_every_width_with_and_without_trans_matches_the_definition():
    rng = np.random.default_rng(3)
    T = rng.integers(0, 1 << 16, (32, 8), dtype=np.uint16)
    perm = rng.permutation(32).astype(np.int32)
    outs = [np.zeros(32, np.uint32), np.zeros(32, np.uint32),
            np.zeros((32, 2), np.uint32), np.zeros((32, 2), np.uint32),
            np.zeros((32, 4), np.uint32), np.zeros((32, 4), np.uint32)]
    run(k_ldmatrix_all, 1, 32, T, perm, *outs)
    rows = T[perm]              # row of matrix j, r: the one lane 8 j + r pointed at
    assert np.array_equal(outs[0], mma.ldmatrix(rows[:8])[:, 0])
    assert np.array_equal(outs[1], mma.ldmatrix(rows[:8], trans=True)[:, 0])
    assert np.array_equal(outs[2], mma.ldmatrix(rows[:16]))
    assert np.array_equal(outs[3], mma.ldmatrix(rows[:16], trans=True))
    assert np.array_equal(outs[4], mma.ldmatrix(rows))
    assert np.array_equal(outs[5], mma.ldmatrix(rows, trans=True))
    # and the definition itself, spelled out for one lane: lane 9 (row 2, cols 2, 3)
    m1 = rows[8:16]
    assert outs[4][9, 1] == int(m1[2, 2]) | (int(m1[2, 3]) << 16)
    assert outs[5][9, 1] == int(m1[2, 2]) | (int(m1[3, 2]) << 16)


# ---------------------------------------------------------------------------------------------
# errors


@cuda.jit
def k_mma_some_lanes(D):
    ln = cuda.laneid
    if ln < 16:
        d = cuda.mma_m16n8k16_f16((np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0)),
                                  (np.uint32(0), np.uint32(0)), ZERO4)
        D[ln] = d[0]


@cuda.jit
def k_ldmatrix_some_lanes(D):
    s = cuda.shared.array((16, 8), np.uint16)
    ln = cuda.laneid
    if ln < 16:
        s[ln, 0] = 0
    cuda.syncthreads()
    if ln >= 8:
        D[ln] = cuda.ldmatrix_x1(s, (ln % 8, 0))


@needs_sim
@pytest.mark.parametrize("kern", [k_mma_some_lanes, k_ldmatrix_some_lanes])
def test_only_some_lanes_at_a_warp_collective_is_a_divergence(kern):
    with pytest.raises(DivergenceError):
        run(kern, 1, 32, np.zeros(32, np.float32))


@cuda.jit
def k_ldmatrix_global(G, out):
    ln = cuda.laneid
    out[ln] = cuda.ldmatrix_x1(G, (ln % 8, 0))


@cuda.jit
def k_ldmatrix_wide_elements(out):
    s = cuda.shared.array((8, 4), np.float32)
    ln = cuda.laneid
    for j in range(4):
        s[ln % 8, j] = 0
    cuda.syncthreads()
    out[ln] = cuda.ldmatrix_x1(s, (ln % 8, 0))


@cuda.jit
def k_ldmatrix_misaligned(out):
    s = cuda.shared.array((8, 12), np.uint16)     # 24-byte rows: row 1 starts 8 bytes off
    ln = cuda.laneid
    for j in range(12):
        s[ln % 8, j] = 0
    cuda.syncthreads()
    out[ln] = cuda.ldmatrix_x1(s, (ln % 8, 0))


@needs_sim
def test_ldmatrix_needs_shared_16_bit_rows_on_16_byte_boundaries():
    out = np.zeros(32, np.uint32)
    with pytest.raises(OutOfBoundsError, match="shared"):
        run(k_ldmatrix_global, 1, 32, np.zeros((8, 8), np.uint16), out)
    with pytest.raises(OutOfBoundsError, match="16-bit"):
        # a uint16 reinterpretation is what a kernel needs; float32 elements are refused
        run(k_ldmatrix_wide_elements, 1, 32, out)
    with pytest.raises(OutOfBoundsError, match="misaligned"):
        run(k_ldmatrix_misaligned, 1, 32, out)


@cuda.jit
def k_cp_async_misaligned(A, out):
    s = cuda.shared.array((16, 16), np.uint16)
    ln = cuda.laneid
    cuda.cp_async(s, (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8 + 1), 4)
    cuda.cp_async_wait_all()


@needs_sim
def test_cp_async_from_a_misaligned_source():
    with pytest.raises(OutOfBoundsError, match="misaligned") as info:
        run(k_cp_async_misaligned, 1, 32, np.zeros((16, 16), np.uint16), np.zeros(32))
    assert "source" in str(info.value)


def _cp_async_read(wait_first):
    @cuda.jit
    def k(A, out):
        s = cuda.shared.array((16, 16), np.uint16)
        ln = cuda.laneid
        cuda.cp_async(s, (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8), 16)
        cuda.cp_async_commit_group()
        if wait_first:
            cuda.cp_async_wait_group(0)
        cuda.syncthreads()
        out[ln] = s[(ln + 5) % 16, 3]          # another lane's copy
        cuda.cp_async_wait_all()
    return k


_CP_EARLY = _cp_async_read(False)
_CP_OK = _cp_async_read(True)


@needs_sim
def test_cp_async_destination_read_before_the_wait_is_a_race_and_the_twin_passes():
    A = np.arange(256, dtype=np.uint16).reshape(16, 16)
    out = np.zeros(32, np.uint16)
    with pytest.raises(RaceError, match="cp.async") as info:
        run(_CP_EARLY, 1, 32, A, out)
    assert "cp_async_wait" in str(info.value)
    run(_CP_OK, 1, 32, A, out)
    assert out.tolist() == [A[(ln + 5) % 16, 3] for ln in range(32)]


@cuda.jit
def k_ldmatrix_in_flight(A, out):
    s = cuda.shared.array((16, 16), np.uint16)
    ln = cuda.laneid
    cuda.cp_async(s, (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8), 16)
    cuda.cp_async_commit_group()
    cuda.syncthreads()
    v = cuda.ldmatrix_x4(s, (ln % 16, (ln // 16) * 8))      # the copies may not have landed
    out[ln] = v[0]
    cuda.cp_async_wait_all()


@cuda.jit
def k_store_in_flight(A, out):
    s = cuda.shared.array(32, np.uint32)
    ln = cuda.laneid
    cuda.cp_async(s, ln, A, ln, 4)
    s[ln] = 0                                # overwritten by the copy whenever it lands
    cuda.cp_async_wait_all()


@needs_sim
def test_ldmatrix_or_store_while_the_copy_is_in_flight_is_a_race():
    with pytest.raises(RaceError, match="cp.async"):
        run(k_ldmatrix_in_flight, 1, 32, np.zeros((16, 16), np.uint16), np.zeros(32, np.uint32))
    with pytest.raises(RaceError, match="write to shared s"):
        run(k_store_in_flight, 1, 32, np.zeros(32, np.uint32), np.zeros(32, np.uint32))


@cuda.jit
def k_view_read_in_flight(A, out):
    s = cuda.shared.array((2, 16, 16), np.uint16)
    ln = cuda.laneid
    t = s[1]                                 # a view sliced before the copies start
    cuda.cp_async(s[1], (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8), 16)
    cuda.cp_async_commit_group()
    cuda.syncthreads()
    out[ln] = t[ln // 2, 0]                  # through the view: still in flight
    cuda.cp_async_wait_all()


@needs_sim
def test_a_read_through_a_view_while_the_copy_is_in_flight_is_a_race():
    with pytest.raises(RaceError, match="cp.async"):
        run(k_view_read_in_flight, 1, 32, np.zeros((16, 16), np.uint16),
            np.zeros(32, np.uint16))


@cuda.jit
def k_mma_two_sites(D):
    ln = cuda.laneid
    z = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))
    c = (np.float32(0), np.float32(0), np.float32(0), np.float32(0))
    if ln < 16:
        d = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), c)
    else:
        d = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), c)      # the same op, another instruction
    D[ln] = d[0]


@needs_sim
def test_mma_from_two_branches_is_not_one_aligned_instruction():
    with pytest.raises(DivergenceError, match="same instruction"):
        run(k_mma_two_sites, 1, 32, np.zeros(32, np.float32))


@cuda.jit
def k_barrier_before_wait(A, out):
    s = cuda.shared.array(64, np.uint32)
    t = cuda.threadIdx.x
    cuda.cp_async(s, t, A, t, 4)
    cuda.cp_async_commit_group()
    cuda.syncthreads()                       # too early: the copies land at the waits below
    cuda.cp_async_wait_all()
    out[t] = s[(t + 1) % 64]                 # another thread's copy, no barrier after its wait


@needs_sim
def test_a_barrier_before_the_wait_does_not_publish_the_copy():
    with pytest.raises(RaceError):
        run(k_barrier_before_wait, 1, 64, np.arange(64, dtype=np.uint32),
            np.zeros(64, np.uint32))


def _dummy_overlap():
    @cuda.jit
    def k(A, D):
        # synchronous tiles dressed up: one MMA between each copy and its wait, then the
        # tile's 4 real MMAs with nothing in flight
        s = cuda.shared.array((2, 32, 8), np.uint16)
        ln = cuda.laneid
        w = cuda.threadIdx.x // 32
        z = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))
        acc = (np.float32(0), np.float32(0), np.float32(0), np.float32(0))
        for _tile in range(2):
            cuda.cp_async(s, (w, ln, 0), A, (w, ln, 0), 16)
            cuda.cp_async_commit_group()
            acc = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), acc)
            cuda.cp_async_wait_all()
            cuda.syncthreads()
            for _ in range(4):
                acc = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), acc)
            cuda.syncthreads()
        D[cuda.threadIdx.x] = acc[0]
    return k


@needs_sim
def test_one_mma_between_a_copy_and_its_wait_is_not_overlap():
    st = run(_dummy_overlap(), 1, 64, np.zeros((2, 32, 8), np.uint16), np.zeros(64, np.float32))
    c = st.counters
    # each group was in flight across 1 of the 5 MMAs a stage has: a fifth of its bytes
    assert c["cp_async_bytes"] == 2 * 64 * 16
    assert c["cp_async_overlapped_bytes"] == round(c["cp_async_bytes"] / 5)


@cuda.jit
def k_zfill(A, src_bytes, out):
    s = cuda.shared.array((32, 4), np.uint32)
    ln = cuda.laneid
    cuda.cp_async_zfill(s, (ln, 0), A, (ln, 0), 16, src_bytes[ln])
    cuda.cp_async_wait_all()
    cuda.syncthreads()
    for j in range(4):
        out[ln, j] = s[ln, j]


@needs_sim
def test_cp_async_zfill_fills_the_rest_with_zeros():
    A = np.arange(1, 129, dtype=np.uint32).reshape(32, 4)
    sb = np.array([4 * (ln % 5) for ln in range(32)], np.int32)      # 0, 4, 8, 12, 16 bytes
    out = np.full((32, 4), 0xDEAD, np.uint32)
    st = run(k_zfill, 1, 32, A, sb, out)
    want = A.copy()
    for ln in range(32):
        want[ln, sb[ln] // 4:] = 0
    assert np.array_equal(out, want)
    # the bytes read from global memory: a zero fill reads (and counts) nothing
    assert st.counters["cp_async_bytes"] == int(sb.sum())


def _two_groups(read_newest):
    @cuda.jit
    def k(A, B, out):
        sa = cuda.shared.array(32, np.uint32)
        sb = cuda.shared.array(32, np.uint32)
        ln = cuda.laneid
        cuda.cp_async(sa, ln, A, ln, 4)
        cuda.cp_async_commit_group()
        cuda.cp_async_commit_group()      # an empty group between: allowed
        cuda.cp_async(sb, ln, B, ln, 4)
        cuda.cp_async_commit_group()
        cuda.cp_async_wait_group(1)       # all but the newest group are complete
        cuda.syncthreads()
        out[ln] = sa[31 - ln]
        if read_newest:
            out[ln] = sb[31 - ln]
        cuda.cp_async_wait_group(0)
        cuda.syncthreads()
        out[32 + ln] = sb[31 - ln]
    return k


_GROUPS_OK = _two_groups(False)
_GROUPS_EARLY = _two_groups(True)


@needs_sim
def test_wait_group_1_leaves_the_newest_group_pending():
    A = np.arange(32, dtype=np.uint32)
    B = A + 100
    out = np.zeros(64, np.uint32)
    run(_GROUPS_OK, 1, 32, A, B, out)
    assert out.tolist() == A[::-1].tolist() + B[::-1].tolist()
    with pytest.raises(RaceError, match="cp.async"):
        run(_GROUPS_EARLY, 1, 32, A, B, out)


# ---------------------------------------------------------------------------------------------
# counters


def _ldmatrix_tile(layout):
    """A warp's ldmatrix_x4 of a 16 x 16 fp16 tile: layout 0 row pitch 32 bytes, 1 padded to
    48 bytes, 2 the 32-byte pitch with the two 16-byte chunks of rows 4-7 and 12-15 swapped
    (chunk ^= (row >> 2) & 1)."""
    pitch = 24 if layout == 1 else 16

    @cuda.jit
    def k(out):
        s = cuda.shared.array((16, pitch), np.uint16)
        ln = cuda.laneid
        if ln < 16:
            for j in range(pitch):
                s[ln, j] = ln * 16 + j
        cuda.syncthreads()
        r = ln % 16
        chunk = ln // 16
        if layout == 2:
            chunk = chunk ^ ((r >> 2) & 1)
        v = cuda.ldmatrix_x4(s, (r, chunk * 8))
        for j in range(4):
            out[ln, j] = v[j]
    return k


_TILES = {layout: _ldmatrix_tile(layout) for layout in (0, 1, 2)}


@needs_sim
@pytest.mark.parametrize("layout, waves", [(0, 8), (1, 4), (2, 4)])
def test_ldmatrix_wavefronts_follow_the_row_banks(layout, waves):
    out = np.zeros((32, 4), np.uint32)
    st = run(_TILES[layout], 1, 32, out)
    c = st.counters
    assert c["shared_load_requests"] == 1
    assert c["shared_load_wavefronts"] == waves


@cuda.jit
def k_vec_shared(out):
    s4 = cuda.shared.array(128, np.float32)
    s2 = cuda.shared.array(64, np.float32)
    ln = cuda.laneid
    f = np.float32(ln)
    cuda.st_v4(s4, 4 * ln, (f, f + 1, f + 2, f + 3))     # 32 x 16 consecutive bytes
    s2[ln] = f
    s2[32 + ln] = -f
    cuda.syncthreads()
    v = cuda.ld_v2(s2, 2 * ln)                          # 32 x 8 consecutive bytes
    out[ln] = v[0] + v[1]


@cuda.jit
def k_vec_global(G, out):
    ln = cuda.laneid
    v = cuda.ld_v4(G, 4 * ln)                          # 32 x 16 consecutive bytes
    out[ln] = v[0] + v[1] + v[2] + v[3]


@needs_sim
def test_vector_accesses_count_at_their_width():
    out = np.zeros(32, np.float32)
    st = run(k_vec_shared, 1, 32, out)
    c = st.counters
    # st_v4: 512 bytes in four quarter-warp phases; two plain 4-byte stores: 1 each
    assert c["shared_store_requests"] == 3 and c["shared_store_wavefronts"] == 4 + 2
    # ld_v2: 256 bytes in two half-warp phases
    assert c["shared_load_requests"] == 1 and c["shared_load_wavefronts"] == 2
    s2 = np.concatenate([np.arange(32), -np.arange(32)]).astype(np.float32)
    assert out.tolist() == (s2[0::2] + s2[1::2]).tolist()
    G = np.arange(128, dtype=np.float32)
    st = run(k_vec_global, 1, 32, G, out)
    c = st.counters
    assert c["global_load_requests"] == 1 and c["global_load_sectors"] == 16
    assert c["global_load_bytes"] == 512
    assert out.tolist() == G.reshape(32, 4).sum(axis=1).tolist()


def _pipeline(mma_before_wait):
    @cuda.jit
    def k(A, D):
        # each warp: two tiles through cp.async; 3 MMAs per warp in all
        s = cuda.shared.array((2, 32, 8), np.uint16)
        ln = cuda.laneid
        w = cuda.threadIdx.x // 32
        z = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))
        acc = (np.float32(0), np.float32(0), np.float32(0), np.float32(0))
        cuda.cp_async(s, (w, ln, 0), A, (w, ln, 0), 16)
        cuda.cp_async_commit_group()
        if mma_before_wait:
            for _ in range(3):
                acc = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), acc)
        cuda.cp_async_wait_all()
        if not mma_before_wait:
            for _ in range(3):
                acc = cuda.mma_m16n8k16_f16(z, (z[0], z[1]), acc)
        cuda.syncthreads()
        D[cuda.threadIdx.x] = acc[0] + np.float32(s[w, ln, 0])
    return k


_PIPE = {flag: _pipeline(flag) for flag in (False, True)}


@needs_sim
@pytest.mark.parametrize("overlapped", [False, True])
def test_mma_and_cp_async_counters(overlapped):
    A = np.arange(2 * 32 * 8, dtype=np.uint16).reshape(2, 32, 8)
    D = np.zeros(64, np.float32)
    st = run(_PIPE[overlapped], 1, 64, A, D)
    c = st.counters
    assert c["mma_ops"] == 2 * 3                   # warp-level: 3 in each of 2 warps
    assert c["cp_async_bytes"] == 64 * 16
    assert c["cp_async_overlapped_bytes"] == (64 * 16 if overlapped else 0)
    assert D.tolist() == A[:, :, 0].ravel().astype(np.float32).tolist()


# ---------------------------------------------------------------------------------------------
# the model's tensor component


def test_model_tensor_component_with_and_without_overlap():
    base = dict.fromkeys(COUNTER_KEYS, 0)
    base.update(blocks=10, global_load_sectors=1_000_000, global_load_bytes=32_000_000,
                mma_ops=5_000_000)
    a100 = PROFILES["a100"]
    share = 10 / a100.sm_count
    mma_s = 5_000_000 * 4096 / (312e12 * share)
    hidden = modelled_time(dict(base, cp_async_overlapped_bytes=32_000_000), "a100")
    assert hidden.breakdown["tensor"] == pytest.approx(mma_s, rel=1e-12)
    few = modelled_time(dict(base, cp_async_overlapped_bytes=3_200_000), "a100")
    exposed = modelled_time(dict(base, cp_async_overlapped_bytes=0), "a100")
    glob = exposed.breakdown["global"]
    assert glob == pytest.approx(32_000_000 / (a100.l2_bytes_per_s * share), rel=1e-12)
    assert exposed.breakdown["tensor"] == pytest.approx(mma_s + glob, rel=1e-12)
    assert exposed.bound == "tensor" and exposed.seconds > hidden.seconds
    assert few.breakdown["tensor"] == pytest.approx(mma_s + 0.9 * glob, rel=1e-12)
    half = modelled_time(dict(base, cp_async_overlapped_bytes=16_000_000), "a100")
    assert half.breakdown["tensor"] == pytest.approx(mma_s + glob / 2, rel=1e-12)
    assert modelled_time(dict(base, mma_ops=0), "a100").breakdown["tensor"] == 0.0


# ---------------------------------------------------------------------------------------------
# the GPU compile of the inline PTX


@cuda.jit
def k_all_sm80(A, B, D, G):
    sA = cuda.shared.array((16, 16), np.uint16)
    sB = cuda.shared.array((16, 8), np.uint16)
    sz = cuda.shared.array(128, np.float32)
    ln = cuda.laneid
    cuda.cp_async(sA, (ln // 2, (ln % 2) * 8), A, (ln // 2, (ln % 2) * 8), 16)
    if ln < 16:
        cuda.cp_async(sB, (ln, 0), B, (ln, 0), 16)
    cuda.cp_async_commit_group()
    cuda.cp_async_zfill(sz, 4 * ln, G, 4 * ln, 16, 8)
    cuda.cp_async_commit_group()
    cuda.cp_async_wait_group(1)
    cuda.cp_async_wait_all()
    cuda.syncthreads()
    a = cuda.ldmatrix_x4(sA, (ln % 16, (ln // 16) * 8))
    b = cuda.ldmatrix_x2_trans(sB, (ln % 16, 0))
    d = cuda.mma_m16n8k16_f16(a, b, ZERO4)
    e = cuda.mma_m16n8k16_bf16(a, b, d)
    v = cuda.ld_v4(G, 4 * ln)
    cuda.st_v4(D, 4 * ln, (e[0] + v[0], e[1] + sz[4 * ln], e[2], e[3]))


@needs_sim
@pytest.mark.usefixtures("ptx_cache_dir")
def test_sim_launch_compiles_the_inline_ptx():
    from kernellab.sim import ptx

    ok, why = ptx.ptx_available()
    if not ok:
        pytest.skip(f"no GPU compiler: {why}")
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 8), np.uint16)
    G = np.ones(128, np.float32)
    D = np.zeros(128, np.float32)
    st = run(k_all_sm80, 1, 32, A, B, D, G, gpu_compile=True)
    assert st.compiled is not None
    text = st.compiled.ptx
    for needle in ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                   "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                   "cp.async.cg.shared.global", "cp.async.commit_group",
                   "cp.async.wait_group 1", "cp.async.wait_all", "ld.v4.f32", "st.v4.f32"):
        assert needle in text, needle
    assert st.counters["mma_ops"] == 2
    assert D.reshape(32, 4)[:, 0].tolist() == [1.0] * 32
    assert D.reshape(32, 4)[:, 1].tolist() == [1.0] * 32
