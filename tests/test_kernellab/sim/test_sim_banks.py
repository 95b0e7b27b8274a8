"""Shared-memory wavefronts of 8- and 16-byte accesses: a warp request of 8-byte elements goes
to the banks in two half-warp phases (lanes 0-15, 16-31), of 16-byte elements in four
quarter-warp phases; each phase's bank conflicts are counted apart and the phases' wavefronts
added (kernellab.sim.banks._phase_of). The counter, the per-site detail and the trace's
bank_counts agree on each case."""

import kernellab  # noqa: F401  - first: selects the sim tier on a GPU-less machine

import numpy as np
import pytest
from numba import complex128, cuda, float32, float64

from kernellab import device, sim
from kernellab.sim.trace import bank_counts

pytestmark = pytest.mark.skipif(not device.simulator_active(),
                                reason=f"needs the sim tier, not {kernellab.TIER}")


def _kernel(dtype, pattern):
    @cuda.jit
    def k(out):
        s = cuda.shared.array(256, dtype)
        t = cuda.threadIdx.x
        for j in range(8):
            s[j * 32 + t] = j
        cuda.syncthreads()
        if pattern == 0:        # lanes 0-15: s[16 t]; lanes 16-31: s[16 (t - 16) + 8]
            i = 16 * t if t < 16 else 16 * (t - 16) + 8
        elif pattern == 1:      # both half-warps read the same 16 elements
            i = t % 16
        elif pattern == 3:      # every other element
            i = 2 * t
        else:                   # consecutive elements
            i = t
        out[t] = s[i].real
    return k


# (dtype, pattern, wavefronts, conflict-free wavefronts)
CASES = [
    # 8 B: each half-warp reads 16 words of bank 0 (16 apart ... words 32 t) -- phase 0: 16 --
    # and the other half-warp 16 words of bank 16: 16 + 16 (one pass over the request: 16)
    (float64, 0, 32, 2),
    # 8 B, both halves read the same 16 elements: no conflict in a phase, but two phases
    (float64, 1, 2, 2),
    (float64, 2, 2, 2),         # 32 consecutive doubles: 16 lanes x 2 words a phase
    (complex128, 2, 4, 4),      # 16 B: four quarter-warps of 8 lanes x 4 words
    (complex128, 1, 4, 4),      # 16 B, t % 16: quarters alike, each its own 32 words (one
    #                             pass over the request: 64 words, 2)
    (complex128, 3, 8, 4),      # 16 B, every other element: 2 words a bank in each quarter
    (float32, 2, 1, 1),         # 4 B: one phase
    (float32, 1, 1, 1),         # 4 B: 16 words read twice (broadcast): one wavefront
]


@pytest.mark.parametrize("dtype, pattern, waves, ideal", CASES)
def test_wide_accesses_are_served_in_phases(dtype, pattern, waves, ideal):
    out = np.zeros(32, np.float64)
    with sim.capture(trace=True, gpu_compile=False) as cap:
        _kernel(dtype, pattern)[1, 32](out)
    (st,) = cap.launches
    c = st.counters
    assert c["shared_load_requests"] == 1 and c["shared_load_wavefronts"] == waves
    (load,) = [r for r in st.shared_sites if r["kind"] == "load"]
    assert (load["wavefronts"], load["ideal_wavefronts"], load["worst_wavefronts"]) == \
        (waves, ideal, waves)
    isz = {float32: 4, float64: 8, complex128: 16}[dtype]
    reqs, _, counts = bank_counts(st.trace, kind="r", itemsize=isz)
    assert len(reqs) == max(1, isz // 4) and len(set(reqs.tolist())) == 1   # one row a phase
    assert counts.max(axis=1).sum() == waves
    # the stores (8 requests of consecutive elements) are conflict-free in every phase
    assert c["shared_store_wavefronts"] == 8 * max(1, isz // 4)
