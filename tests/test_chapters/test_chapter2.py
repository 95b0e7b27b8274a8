"""Chapter 2 (chapters/02_cuda_tiled_gemm.ipynb): the claims its prose makes that no other test
checks (the kernels' correctness and counters: tests/test_kernellab/kernels/
test_gemm_cuda_ladder.py; the occupancy arithmetic itself: the sim tier's resource tests).

* Section 9: ``resource_table`` prints one row per ladder kernel, each with ptxas's registers
  per thread in 1..255; v1-v3 run at full occupancy on cc 8.0 and v4 is register-limited (the
  register-file arithmetic the chapter prints: 256-register units per warp, 65,536 per SM), and
  no kernel spills — what the text reads off the table.
* Section 4: the L1 reuse the model does not see — per block, v1 and v2 touch the same number of
  distinct sectors (5 K) while the model counts 33 and 5 per pair of warp requests.
* Section 6: the sim tier's wavefronts for float64 shared accesses equal the half-warp phase
  rule the text teaches, at every stride the chapter shows and more, and for the two
  asymmetric patterns where the rule and a count over the whole warp differ.
* Section 9: the PTX integer-instruction count classifies by the type suffix (a synthetic PTX).
* Section 10: the quoted anchors (``kernellab.topics.gemm_anchors``) agree with their own table
  (each share of cuBLAS is its GFLOP/s over cuBLAS's, to the published 0.1%), map every ladder
  version to one of Boehm's kernels, and the notebook takes them from the module.
* Section 14 (part two): the fragment drawing, which lanes hold which elements of A, B and C of
  ``mma.m16n8k16`` as the sim tier's ``ldmatrix`` and ``mma`` deliver them (the notebook's own
  kernel, run here), equals the PTX ISA's tables in ``kernellab.sim.mma``; section 15's swizzle
  picture places each logical chunk by the kernel's own swizzle functions, which put the 8 rows
  of every ``ldmatrix`` phase in 8 different bank groups (and the unswizzled tiles in 2 and 1).
* Part two's structure: sections 13-19 follow section 12, in order, and it ends pointing to Lab
  2b; its modelled figures come from Lab 2b's own ``sm_seconds`` and thresholds.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernellab
import notebook_rules as rules
from kernellab.kernels import gemm_cuda
from kernellab.topics import gemm_anchors as GA

NOTEBOOK = Path(__file__).resolve().parents[2] / "chapters" / "02_cuda_tiled_gemm.ipynb"
sim_only = pytest.mark.skipif(kernellab.TIER != "sim", reason="counters exist on the sim tier only")
#: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", cc 8.0.
REGS_PER_SM, MAX_REGS_PER_THREAD, REG_UNIT, MAX_WARPS = 65536, 255, 256, 64


def code() -> str:
    return "\n".join(rules.cells(NOTEBOOK, "code"))


@pytest.fixture(scope="module")
def ladder_launches():
    """One sim-tier launch of every ladder version at a small size (full tiles)."""
    from kernellab import sim

    M = N = 64
    K = 16
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    out = {}
    for name, launch in gemm_cuda.LADDER.items():
        with sim.capture() as cap:
            launch(A, B, np.zeros((M, N), np.float32))
        out[name] = cap
    return out


@sim_only
def test_resource_table_has_a_row_per_ladder_kernel(ladder_launches):
    from kernellab.sim.resources import resource_table

    assert "resource_table(list(runs.values()), cc=(8, 0))" in code()
    for name, cap in ladder_launches.items():
        (st,) = cap.launches
        res = st.resources
        assert res is not None, (name, st.resources_note)
        assert 1 <= res.registers <= MAX_REGS_PER_THREAD, (name, res.registers)
        table = resource_table(cap, cc=(8, 0))
        rows = [ln for ln in table.splitlines() if st.name in ln]
        assert len(rows) == 1, (name, table)
        assert str(res.registers) in rows[0].split(), (name, rows[0])


@sim_only
def test_occupancy_is_what_the_chapter_reads_off_the_table(ladder_launches):
    from kernellab.sim.resources import occupancy

    for name, cap in ladder_launches.items():
        (st,) = cap.launches
        res = st.resources
        threads = st.block[0] * st.block[1] * st.block[2]
        warps = threads // 32
        o = occupancy(res, threads, cc=(8, 0))
        per_warp = -(-res.registers * 32 // REG_UNIT) * REG_UNIT
        assert o.blocks_per_sm * warps * per_warp <= REGS_PER_SM, name
        assert o.warps_per_sm == o.blocks_per_sm * warps <= MAX_WARPS, name
        assert res.spill_store_bytes == res.spill_load_bytes == 0, name
        if name == "v4_register_tiles":
            assert o.limiter == "registers", o
            assert (o.blocks_per_sm + 1) * warps * per_warp > REGS_PER_SM, o
            assert o.warps_per_sm < MAX_WARPS
        else:
            assert o.warps_per_sm == MAX_WARPS, (name, o)


@sim_only
@pytest.mark.parametrize("K", [8, 16])
def test_v1_and_v2_touch_the_same_distinct_sectors_per_block(K):
    """Block 0 of v1 and of v2 (8 warps each): the model counts 33 and 5 sectors per pair of
    warp requests (one of A, one of B, per k), but both touch 5 K distinct sectors."""
    from kernellab import sim

    M = N = 32
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    for name, per_pair in (("v1_naive", 33), ("v2_coalesced", 5)):
        with sim.capture(trace=True) as cap:
            gemm_cuda.LADDER[name](A, B, np.zeros((M, N), np.float32))
        tr = cap.launches[0].trace
        loads = tr[((tr["array"] == "A") | (tr["array"] == "B")) & (tr["kind"] == "r")]
        sectors = loads["addr"] // 32
        arr = (loads["array"] == "A").astype(np.int64)
        counted = np.unique(np.stack([loads["request"], sectors, arr]), axis=1).shape[1]
        distinct = len(np.unique(np.stack([sectors, arr]), axis=1).T)
        assert counted == 8 * K * per_pair, (name, counted)
        assert distinct == 5 * K, (name, distinct)


def _phase_wavefronts(word_of_lane, words_per_lane, lanes_per_phase=None):
    per_phase = lanes_per_phase or 32 // words_per_lane
    total = 0
    for p0 in range(0, 32, per_phase):
        words = {w for lane in range(p0, p0 + per_phase)
                 for w in range(word_of_lane[lane], word_of_lane[lane] + words_per_lane)}
        total += max(sum(1 for w in words if w % 32 == b) for b in range(32))
    return total


LANE = np.arange(32)
#: float64 element each lane reads: pure strides (both half-warps conflict alike), and the two
#: asymmetric patterns of section 6, where the phase rule and a whole-warp count differ.
FLOAT64_PATTERNS = {
    **{f"stride {s}": s * LANE for s in (1, 2, 3, 4, 8, 16, 17, 32)},
    "halves 8 apart": np.where(LANE < 16, 16 * LANE, 16 * (LANE - 16) + 8),
    "t % 16": LANE % 16,
}


def test_the_asymmetric_patterns_tell_the_phase_rule_from_a_whole_warp_count():
    words = {k: [2 * int(i) for i in v] for k, v in FLOAT64_PATTERNS.items()}
    # by the rule: a 16-way conflict in each half-warp; one conflict-free pass per half-warp
    assert _phase_wavefronts(words["halves 8 apart"], 2) == 32
    assert _phase_wavefronts(words["halves 8 apart"], 2, lanes_per_phase=32) == 16
    assert _phase_wavefronts(words["t % 16"], 2) == 2
    assert _phase_wavefronts(words["t % 16"], 2, lanes_per_phase=32) == 1
    src = code()
    assert "np.where(lane < 16, 16 * lane, 16 * (lane - 16) + 8)" in src
    assert "lane % 16" in src
    # the 16-byte case the text states: 8 lanes fill the 32 banks, 4 phases, 4 wavefronts
    assert _phase_wavefronts([4 * t for t in range(32)], 4) == 4


@sim_only
@pytest.mark.parametrize("pattern", list(FLOAT64_PATTERNS))
def test_float64_shared_wavefronts_follow_the_half_warp_phase_rule(pattern):
    from numba import cuda, float64

    from kernellab import sim

    @cuda.jit
    def gather(idx, out):
        s = cuda.shared.array(1024, float64)
        t = cuda.threadIdx.x
        for i in range(32):
            s[32 * i + t] = 32 * i + t
        cuda.syncthreads()
        out[t] = s[idx[t]]

    assert "phase_wavefronts(" in code()
    idx = FLOAT64_PATTERNS[pattern]
    with sim.capture() as cap:
        gather[1, 32](idx, np.zeros(32))
    got = cap.launches[0].counters["shared_load_wavefronts"]
    assert got == _phase_wavefronts([2 * int(i) for i in idx], 2), (pattern, got)


def test_anchors_agree_with_their_own_table():
    rows = GA.anchor_rows()
    assert [r["kernel"] for r in rows] == [1, 2, 3, 4, 5]
    for r in rows:
        # the published share is GFLOP/s over cuBLAS's, rounded to 0.1%
        assert abs(r["gflops"] / GA.BOEHM_CUBLAS_GFLOPS - r["of_cublas"]) <= 0.0005 + 1e-12, r
        assert 0 < r["of_peak"] < 1, r
    assert [r["gflops"] for r in rows] == sorted(r["gflops"] for r in rows)
    # the datasheet's single-precision figure, 38.7 TFLOP/s, from cores x 2 x boost clock
    assert round(GA.a6000_fp32_peak() / 1e12, 1) == 38.7
    assert round(rows[4]["of_peak"], 2) == 0.41            # 2-D blocktiling: ~41% of peak
    assert set(GA.LADDER_STEP) == set(gemm_cuda.LADDER)
    assert {r["version"] for r in rows} - {None} == set(gemm_cuda.LADDER)


def test_integer_ops_classify_by_the_ptx_type_suffix():
    """Section 9's count of integer ALU instructions by width: data movement (ld.param, cvta,
    mov) is not counted, mul.wide.s32 and cvt.s64.s32 are widening, .b64 counts as 64-bit."""
    (cell,) = [c for c in rules.cells(NOTEBOOK, "code") if "def integer_ops(" in c]
    ns = {}
    exec("import re\n" + cell.split("\n\n\nfor name")[0], ns)
    ptx = "\n".join([
        "\tld.param.u64 \t%rd1, [k_param_0];", "\tcvta.to.global.u64 \t%rd2, %rd1;",
        "\tmov.u32 \t%r1, %tid.x;", "\tmul.wide.s32 \t%rd3, %r1, 4;",
        "\tcvt.s64.s32 \t%rd4, %r1;", "\tadd.s64 \t%rd5, %rd4, %rd3;",
        "\tshl.b64 \t%rd6, %rd5, 2;", "\tsetp.lt.s64 \t%p1, %rd6, %rd1;",
        "\tand.pred \t%p2, %p1, %p1;", "\tadd.s32 \t%r2, %r1, 1;",
        "\tcvt.u32.u64 \t%r3, %rd6;", "\tld.global.f32 \t%f1, [%rd6];",
        "\tcvt.rn.f32.s32 \t%f2, %r2;", "@%p1 bra \tLBB0_2;", ""])
    assert ns["integer_ops"](ptx) == {"64-bit": 3, "32-bit": 1, "widening": 2, "narrowing": 1}


def test_notebook_takes_the_anchors_from_the_module():
    src = code()
    assert "gemm_anchors.anchor_rows()" in src
    assert "gemm_anchors.A6000_DRAM_BYTES_PER_S" in src       # section 10's bytes per FLOP
    for r in GA.anchor_rows():
        assert f"{r['gflops']:g}" not in src, r        # typed figures would go stale


PART2_SECTIONS = ["13. Why tensor cores", "14. Fragments", "15. Feeding the warps",
                  "16. cp.async", "17. Registers and occupancy", "18. The ladder in numbers",
                  "19. What Hopper adds"]


def test_part_two_follows_part_one_and_ends_at_lab_2b():
    md = rules.cells(NOTEBOOK, "markdown")
    headings = [ln[3:] for cell in md for ln in cell.splitlines() if ln.startswith("## ")]
    numbered = [h for h in headings if h[:1].isdigit()]
    assert [int(h.split(".")[0]) for h in numbered] == list(range(1, 20)), numbered
    for want, got in zip(PART2_SECTIONS, numbered[12:]):
        assert got.startswith(want), (want, got)
    assert headings[-1] == "Next: Lab 2b"
    assert "kernellab grade gemm-tensor-core" in md[-1]
    src = code()
    assert "lab2b.sm_seconds(" in src and "lab2b.MIN_SPEEDUP" in src   # the lab's own rules


def _part_two_cell(marker):
    (cell,) = [c for c in rules.cells(NOTEBOOK, "code") if marker in c]
    return cell


@sim_only
def test_the_fragment_drawing_agrees_with_the_ptx_tables():
    from numba import cuda

    from kernellab.sim import mma

    cell = _part_two_cell("def lane_coords(")
    ns = {"np": np, "cuda": cuda}
    exec(cell.split("\n\n\ncoords = lane_coords()")[0], ns)
    coords = ns["lane_coords"]()
    for key, table in (("A", mma.a_coords), ("B", mma.b_coords), ("C", mma.c_coords)):
        want = np.array([table(lane) for lane in range(32)])
        assert np.array_equal(coords[key], want), key
    # every element of each operand is held by exactly one lane
    for key, shape in (("A", (16, 16)), ("B", (16, 8)), ("C", (16, 8))):
        flat = coords[key].reshape(-1, 2)
        assert len({tuple(rc) for rc in flat.tolist()}) == flat.shape[0] == shape[0] * shape[1]


@pytest.mark.parametrize("tile", ["A", "B"])
def test_the_swizzle_picture_spreads_every_phase_over_eight_bank_groups(tile):
    """Section 15's chunk map, for all rows of the tile: the 8 consecutive rows (from a multiple
    of 8) that one phase of ldmatrix reads at one logical chunk fall into 8 bank groups
    swizzled, and into 2 (A, 64-byte rows) or 1 (B, 128-byte rows) unswizzled."""
    from kernellab.kernels import gemm_tc

    cell = _part_two_cell("def chunk_map(")
    ns = {"np": np}
    exec(cell.split("\n\n\nTILES = ")[0], ns)
    chunks, swz, rows = {"A": (gemm_tc.BK // 8, gemm_tc._swz_a, gemm_tc.BM),
                         "B": (gemm_tc.BN // 8, gemm_tc._swz_b, gemm_tc.BK)}[tile]
    for swizzled, groups in ((0, {"A": 2, "B": 1}[tile]), (1, 8)):
        grid = ns["chunk_map"](chunks, swz, swizzled, rows=rows)
        for r0 in range(0, rows, 8):
            for c in range(chunks):
                where = {int(np.flatnonzero(grid[r] == c)[0]) for r in range(r0, r0 + 8)}
                assert len(where) == groups, (tile, swizzled, r0, c, where)
