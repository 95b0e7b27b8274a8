"""The profiler-shaped tables (kernellab.npu.profile): each figure is the trace's or the
records' own, summed another way; the files are deterministic."""

import csv

import pytest

from kernellab.npu import examples, profile


@pytest.fixture(scope="module")
def add():
    return examples.run_add(4 * 8192 + 1000, 4, tile_len=4096)


@pytest.fixture(scope="module")
def mm():
    return examples.run_matmul(128, 128, 256, block_dim=2, base_m=64, base_n=128)


def test_op_basic_info_is_the_launch(add):
    (row,) = profile.op_basic_info(add)
    assert row["Op Type"] == "AI_VECTOR_CORE" and row["Block Dim"] == 4
    assert row["Task Duration(us)"] == round(add.time_us, 3)


def test_pipe_times_add_up_to_the_cores_busy_cycles(add):
    rows = profile.pipe_utilization(add)
    assert [r["block_id"] for r in rows] == [0, 1, 2, 3]
    for kind, pipe in (("vec", "V"), ("mte2", "MTE2"), ("mte3", "MTE3"), ("scalar", "S")):
        cycles = sum(r[f"aiv_{kind}_ratio"] * r["aiv_total_cycles"] for r in rows)
        assert cycles == pytest.approx(sum(c["busy"][pipe] for c in add.per_core), rel=1e-3)
    assert all(0 < r["aiv_mte2_ratio"] <= 1 and r["aiv_total_cycles"] <= add.cycles
               for r in rows)
    assert max(r["aiv_total_cycles"] for r in rows) == add.cycles


def test_memory_bytes_are_the_records_bytes(add):
    rows = profile.memory(add)
    kb = sum(r["GM_to_UB_datas(KB)"] for r in rows)
    assert kb * 1024 == pytest.approx(add.bytes["GM->UB"], abs=4 * 1.024)
    assert sum(r["UB_to_GM_datas(KB)"] for r in rows) * 1024 == \
        pytest.approx(add.bytes["UB->GM"], abs=4 * 1.024)
    assert all(r["GM_to_UB_bw(GB/s)"] > 0 for r in rows)


def test_a_cube_launch_has_the_cube_columns(mm):
    (row, _) = profile.pipe_utilization(mm)
    assert {"aic_cube_ratio", "aic_mte1_ratio", "aic_fixpipe_ratio"} <= set(row)
    assert row["aic_cube_ratio"] > 0
    assert "L0C_to_GM_datas(KB)" in profile.memory(mm)[0]


def test_the_files_are_written_and_deterministic(add, tmp_path):
    paths = add.profile_csv(tmp_path / "a")
    assert [p.name for p in paths] == ["OpBasicInfo.csv", "PipeUtilization.csv", "Memory.csv"]
    with open(paths[1], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and float(rows[0]["aiv_vec_ratio"]) > 0
    again = examples.run_add(4 * 8192 + 1000, 4, tile_len=4096).profile_csv(tmp_path / "b")
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in again]
