"""Chapter 7 (chapters/07_npu_ascend_style.ipynb): what the notebook claims that no other test
checks, in a few seconds.

* Its Chrome trace export is valid trace-event JSON. The test redoes the chapter's own export —
  the same call with the same constants, read from the notebook — and checks the format: a list
  or ``{"traceEvents": [...]}``, every event with name/ph/ts/pid/tid, ``"X"`` events with
  ``dur >= 0``, and ``json.loads`` of the file.
* Two runs of the same kernel give the same cycles, trace hash and exported trace.
* The overlap the chapter computes from the trace: MTE2 is never busy during vector work with
  one buffer, and is with two.

The house rules (no outputs, no typed or quoted measured figures):
tests/test_chapters/test_notebook_rules.py.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import notebook_rules as rules  # noqa: E402
import pytest

from kernellab import npu
from kernellab.npu import examples
from kernellab.npu.record import PIPES, SET, WAIT

NOTEBOOK = Path(__file__).resolve().parents[2] / "chapters" / "07_npu_ascend_style.ipynb"
#: the chapter's export: these lines must appear in its code (a change there is a change here)
RUN_CALL = "double = examples.run_add(N_ONE, 1, tile_len=TILE, buffer_num=2)"
EXPORT_CALL = "double.trace.to_chrome(trace_path)"
def cells(kind: str) -> list[str]:
    return rules.cells(NOTEBOOK, kind)


def notebook_constants(*names: str) -> dict[str, int]:
    """The values the notebook's code assigns to ``names`` (simple literal expressions)."""
    found = {}
    for src in cells("code"):
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
                expr = compile(ast.Expression(node.value), "<notebook>", "eval")
                found[node.targets[0].id] = eval(expr, {"__builtins__": {}})  # noqa: S307
    missing = set(names) - set(found)
    assert not missing, f"the chapter no longer assigns {missing}: update this test"
    return found


@pytest.fixture(scope="module")
def chapter_run():
    """The double-buffered single-core run whose trace the chapter exports."""
    code = "\n".join(cells("code"))
    for call in (RUN_CALL, EXPORT_CALL):
        assert call in code, f"the chapter no longer makes the call {call!r}: update this test"
    c = notebook_constants("N_ONE", "TILE")
    return examples.run_add(c["N_ONE"], 1, tile_len=c["TILE"], buffer_num=2), c


def _check_trace_event_json(text: str) -> list[dict]:
    doc = json.loads(text)
    events = doc if isinstance(doc, list) else doc.get("traceEvents")
    assert isinstance(events, list) and events, "neither a list nor {'traceEvents': [...]}"
    for e in events:
        assert isinstance(e, dict), e
        missing = {"name", "ph", "ts", "pid", "tid"} - e.keys()
        assert not missing, f"event without {missing}: {e}"
        assert isinstance(e["name"], str) and isinstance(e["ph"], str) and len(e["ph"]) == 1
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, e
    return events


def test_the_chapters_chrome_trace_is_valid_trace_event_json(chapter_run, tmp_path):
    res, _ = chapter_run
    path = tmp_path / "add_double_buffer.json"
    doc = res.trace.to_chrome(path)
    events = _check_trace_event_json(path.read_text())
    assert events == json.loads(json.dumps(doc))["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(res.trace)
    assert {e["tid"] for e in xs} <= set(range(len(PIPES)))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all(names[(e["pid"], e["tid"])] == PIPES[e["tid"]] for e in xs)
    # the cycles in args and the microseconds agree
    mhz = res.machine.freq_mhz
    for e in xs:
        a = e["args"]
        assert e["ts"] == pytest.approx(a["start_cycle"] / mhz, abs=1e-6)
        assert e["dur"] == pytest.approx((a["end_cycle"] - a["start_cycle"]) / mhz, abs=1e-6)


def test_two_runs_of_the_same_kernel_give_the_same_cycles_hash_and_trace(chapter_run):
    first, c = chapter_run
    again = examples.run_add(c["N_ONE"], 1, tile_len=c["TILE"], buffer_num=2)
    assert (again.cycles, again.trace_hash) == (first.cycles, first.trace_hash)
    assert again.trace.to_chrome() == first.trace.to_chrome()
    mm = [examples.run_matmul(64, 96, 160, base_m=64, base_n=64, base_k=32, l1_k=64)
          for _ in range(2)]
    assert (mm[0].cycles, mm[0].trace_hash) == (mm[1].cycles, mm[1].trace_hash)


def test_one_buffer_leaves_mte2_idle_during_vector_work_and_two_overlap(chapter_run):
    double, c = chapter_run
    single = examples.run_add(c["N_ONE"], 1, tile_len=c["TILE"], buffer_num=1)
    assert single.trace.overlap(0, "MTE2", "V") == 0 < single.trace.busy(0, "V")
    assert double.trace.overlap(0, "MTE2", "V") > 0
    assert double.cycles < single.cycles


def test_records_show_the_events_the_queues_lower_to(chapter_run):
    res, _ = chapter_run
    recs = res.records(0)
    assert recs and recs is not res.records(0)       # a copy: the run cannot be edited
    flags = {(PIPES[r.pipe], r.kind, r.key[0]) for r in recs if r.kind in (SET, WAIT)}
    assert flags == {("MTE2", SET, "MTE2_V"), ("V", WAIT, "MTE2_V"), ("V", SET, "V_MTE3"),
                     ("MTE3", WAIT, "V_MTE3"), ("V", SET, "V_MTE2"), ("MTE2", WAIT, "V_MTE2"),
                     ("MTE3", SET, "MTE3_V"), ("V", WAIT, "MTE3_V")}
    with pytest.raises(IndexError):
        res.records(1)


def test_cube_products_run_on_one_blas_thread(monkeypatch):
    """The cube section (and Lab 7b's grading) must not be at the mercy of BLAS threading: on
    a busy 2-core machine a multi-threaded BLAS made the functional phase of a 1024^3 matmul
    ten times slower. ``mmad`` limits the BLAS to one thread around its product."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from kernellab.npu import cube

    seen = []
    inner = cube._one_blas_thread

    def spy():
        ctx = inner()

        class Spy:
            def __enter__(self):
                ctx.__enter__()
                seen.extend(lib["num_threads"] for lib in threadpoolctl.threadpool_info()
                            if lib["user_api"] == "blas")
                return self

            def __exit__(self, *exc):
                return ctx.__exit__(*exc)
        return Spy()

    monkeypatch.setattr(cube, "_one_blas_thread", spy)
    before = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
              if lib["user_api"] == "blas"]
    res = examples.run_matmul(64, 64, 64, base_m=64, base_n=64, base_k=32, l1_k=64)
    assert res.flops["cube"] == 2 * 64 ** 3
    assert seen and set(seen) == {1}, seen        # one thread inside every product
    after = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
             if lib["user_api"] == "blas"]
    assert after == before                         # and restored afterwards


def test_the_chapters_what_if_cards_differ_from_the_preset_only_where_changed():
    import dataclasses

    card = npu.get_machine()
    fast = dataclasses.replace(card, hbm_gbps=2 * card.hbm_gbps)
    assert [r[0] for r in fast.rows() if r[3] == "user"] == ["hbm_gbps"]
