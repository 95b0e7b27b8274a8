"""The sim tier's cached baselines (grader/labs/_baseline.py): a baseline's counters depend on
its code and shape, not on its data, so a cached entry stands for a fresh simulation; the cache
returns exactly what it stored, and a damaged file is simulated again."""

from __future__ import annotations

import numpy as np
import pytest

import kernellab

pytestmark = pytest.mark.skipif(kernellab.TIER != "sim", reason="the sim tier's counters")


def _softmax_launches(seed: int, M: int = 8, N: int = 300):
    from numba import cuda

    from grader.labs._cuda import launch_dict
    from grader.labs.softmax_cuda.spec import softmax_inputs
    from kernellab import sim
    from kernellab.kernels.softmax_cuda import softmax_v2

    X = softmax_inputs(np.random.default_rng(seed), M, N, "float32")
    dY = cuda.to_device(np.full((M, N), np.nan, np.float32))
    with sim.capture() as cap:
        softmax_v2(cuda.to_device(X), dY)
    return [launch_dict(s) for s in cap.launches]


def _attention_launches(seed: int, causal: bool):
    from numba import cuda

    from grader.labs._cuda import launch_dict
    from grader.labs.flash_attention.spec import attention_inputs
    from kernellab import sim
    from kernellab.kernels.attention_cuda import attention_v1

    shape = (1, 1, 40, 32)
    Q, K, V = attention_inputs(np.random.default_rng(seed), *shape, "float16")
    dO = cuda.to_device(np.full(shape, np.nan, np.float16))
    with sim.capture() as cap:
        attention_v1(*(cuda.to_device(x) for x in (Q, K, V)), dO, causal)
    return [launch_dict(s) for s in cap.launches]


def _counters(launches):
    return [(x["name"], x["grid"], x["block"], x["counters"]) for x in launches]


@pytest.mark.parametrize("run", [lambda s: _softmax_launches(s),
                                 lambda s: _attention_launches(s, False),
                                 lambda s: _attention_launches(s, True)],
                         ids=["three-pass softmax", "materialised attention",
                              "materialised attention, causal"])
def test_baseline_counters_do_not_depend_on_the_data(run):
    assert _counters(run(1)) == _counters(run(2))


def test_the_cache_returns_what_a_fresh_run_gives(tmp_path, monkeypatch):
    from grader.labs import _baseline

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    calls = []

    def run():
        calls.append(1)
        return _softmax_launches(3)

    first = _baseline.launches("softmax_v2", {"M": 8, "N": 300}, run)
    again = _baseline.launches("softmax_v2", {"M": 8, "N": 300}, run)
    assert len(calls) == 1 and again == first
    assert _counters(first) == _counters(_softmax_launches(4))
    assert all("arrays" not in x for x in first)  # data-dependent digests are not kept
    # another shape is another entry; a damaged file is simulated again
    _baseline.launches("softmax_v2", {"M": 8, "N": 301}, run)
    assert len(calls) == 2
    for f in (tmp_path / "sim-baselines").glob("*.json"):
        f.write_text("[{]")
    assert _baseline.launches("softmax_v2", {"M": 8, "N": 300}, run) == first
    assert len(calls) == 3
