"""The NPU machine card: presets, provenance tags, derived peaks."""

import dataclasses

import pytest

from kernellab import npu
from kernellab.npu.machine import PROVENANCE, MachineConfig


def test_presets_and_lookup():
    m = npu.get_machine()
    assert m.key == "ascend910b-like@1" == npu.DEFAULT_MACHINE
    assert npu.get_machine("ascend910b-like") is m
    assert npu.get_machine("tiny").key == "tiny@1"
    assert npu.get_machine(m) is m
    with pytest.raises(ValueError, match="presets"):
        npu.get_machine("h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.hbm_gbps = 1


def test_sourced_constants_of_the_910b_like_card():
    m = npu.get_machine()
    assert (m.n_aic, m.n_aiv, m.freq_mhz) == (24, 48, 1850)
    assert (m.ub_bytes, m.l1_bytes, m.l0a_bytes, m.l0b_bytes, m.l0c_bytes) == \
        (196608, 524288, 65536, 65536, 131072)
    assert (m.align_ub, m.align_l1, m.align_l0ab, m.align_l0c) == (32, 32, 512, 64)
    assert m.l2_bytes == 192 * 1024 * 1024 and m.l2_line == 512
    tiny = npu.get_machine("tiny")
    assert (tiny.n_aic, tiny.n_aiv, tiny.ub_bytes, tiny.l1_bytes) == (2, 4, 16384, 65536)


def test_every_constant_has_a_provenance_tag_and_the_table_prints_them():
    m = npu.get_machine()
    consts = [f.name for f in dataclasses.fields(MachineConfig)
              if f.name not in ("name", "version", "description", "arch")]
    assert set(consts) == set(PROVENANCE)
    rows = m.rows()
    assert {r[3] for r in rows} <= {"S", "T", "D", "A"}
    assert all(r[4] for r in rows)  # every row has a source note
    text = m.table()
    for tag in ("[S]", "[T]", "[D]", "[A]"):
        assert tag in text
    assert "ascend910b-like@1" in text and "hbm_gbps" in text
    assert npu.describe("tiny").startswith("machine tiny@1")
    assert m.describe() == text


def test_a_changed_constant_is_tagged_user():
    fast = dataclasses.replace(npu.get_machine(), hbm_gbps=3200)
    row = next(r for r in fast.rows() if r[0] == "hbm_gbps")
    assert row[3] == "user" and "1600" in row[4]
    with pytest.raises(ValueError):
        dataclasses.replace(npu.get_machine(), hbm_gbps=0)


def test_derived_peaks_reproduce_the_datasheet_arithmetic():
    m = npu.get_machine()
    # cube fp16: cores x 16x16x16 x 2 x freq = 363.7 TFLOPS [D] (from the card's [S] rows)
    assert m.cube_tflops_fp16 == pytest.approx(24 * 16 * 16 * 16 * 2 * 1.85e9 / 1e12)
    assert round(m.cube_tflops_fp16, 1) == 363.7
    assert m.cube_tops_int8 == pytest.approx(2 * m.cube_tflops_fp16)
    assert round(m.vector_tops_fp16, 1) == 11.4          # 48 x 128 x 1.85e9
    assert round(m.hbm_bytes_per_cycle, 1) == 864.9      # 1.6e12 / 1.85e9
    assert round(m.ridge_flop_per_byte) == 227
    assert m.derived()["cube_tflops_fp16"] == m.cube_tflops_fp16


def test_platform_info():
    p = npu.platform_info()
    assert (p.cube_core_num, p.vector_core_num) == (24, 48)
    assert p.ub_size == 196608 - 256 and p.l1_size == 524288 - 256
    assert npu.platform_info("tiny").vector_core_num == 4
    assert npu.asc.platform_info() == p  # on the host: the default card


def test_clock_and_core_counts_come_from_one_chip_variant():
    """The clock and the core counts are read from the same platform file (the 910B1's), so
    the derived peak describes one chip; third-party and assumed rows are not tagged [S]."""
    from kernellab.npu.machine import PROVENANCE

    for f in ("freq_mhz", "n_aic", "n_aiv"):
        assert PROVENANCE[f][1] == "S" and "Ascend910B1.ini" in PROVENANCE[f][2], f
    for f in ("ub_reserved", "l1_reserved", "hbm_gbps", "l1_to_l0a_bpc"):
        assert PROVENANCE[f][1] == "T", f
    for f in ("gm_read_miss_bpc", "l1_to_l0b_bpc"):
        assert PROVENANCE[f][1] == "A", f
    mc = npu.get_machine("ascend910b-like@1")
    assert mc.cube_tflops_fp16 == mc.n_aic * 2 * 16 ** 3 * mc.freq_mhz * 1e6 / 1e12
