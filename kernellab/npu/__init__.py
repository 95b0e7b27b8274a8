"""``kernellab.npu``: an Ascend-C-style AI-core simulator with a deterministic cost model. Students
write kernels in Python with Ascend C *concepts* and public API names in snake_case
(re-implemented; this is not Ascend C), run them on NumPy, and get a cycle count, a per-pipe trace
and roofline figures that are the same on every machine.

Fidelity target: performance *trends and bottlenecks* (overlap, latency hiding, bandwidth and
compute bounds, alignment and tile-size effects, multi-core scaling to the HBM roof) match a
real Ascend A2 (910B-class) chip; absolute cycle counts may differ by tens of percent. Assumed
constants are marked [A] on the machine card, and the labs grade against reference solutions on
the same frozen card, so an assumed constant never makes a lab unsolvable.

    import numpy as np
    from kernellab import npu
    from kernellab.npu import asc

    @asc.kernel(core="aiv")
    def add_kernel(x, y, z, n):
        ...                                   # TPipe, TQue, data_copy, asc.add, ...

    res = npu.launch(add_kernel, 48, (x, y, z, n), machine="ascend910b-like@1")
    print(res.summary()); res.trace.gantt("aiv0"); res.trace.to_chrome("add.json")

Two phases (the trace -> pipe scheduler structure of Huawei PTO-ISA's perf-sim design,
``include/pto/costmodel/PERF_SIM_DESIGN.md`` in https://gitcode.com/cann/pto-isa): the kernel runs
once per block, executing every call with NumPy in program order and recording it
(:mod:`~kernellab.npu.asc`, :mod:`~kernellab.npu.record`); then :mod:`~kernellab.npu.timing`
replays the records on the machine card (:mod:`~kernellab.npu.machine`): in-order pipes ordered by
the flags the queues lower to, DMA with latency and per-core caps, HBM shared by water-filling, an
LRU L2.

Modules: ``machine`` (cards, ``platform_info``, ``use_machine``), ``tensors`` (positions, GM/local
tensors), ``memory`` (on-chip buffers, GM), ``runtime`` (per-block context, queue state machine),
``asc`` (the kernel API; its instructions in ``dma``, ``vector`` (``repeat``: the repeat/mask
form) and ``cube``, its raw events in ``sync``, mix kernels and cross-core flags in ``mix``),
``record``,
``timing``, ``trace`` (Gantt, Chrome JSON), ``result`` (``RunResult``), ``launch`` (``launch``,
``retime``, ``capture``: the launches host code made, with what each wrote and read), ``errors``,
``examples`` (the reference kernels the tests and ``make bench-npu`` run).

Not in v1 (Ascend C has them; the simulator raises or lacks them):

* events with the scalar pipe (``S_V`` ...: GetValue/SetValue), ``AllocEventID``; the overlap
  of one pipe's instructions in the timing model (a missing one-pipe barrier is reported in a
  kernel with ``auto_sync=False``, never modelled faster). What it has: the queues' flags, a
  kernel's own ``set_flag``/``wait_flag`` and ``pipe_barrier`` (:mod:`~kernellab.npu.sync`),
  and the vector-clock check of every access they must order (``DataRaceError``; the timing
  replay waits on the same flags);
* cross-core flags of mode 0 (every core of a kind on the chip: ``SyncAll``) and the
  AIC:AIV = 1:1 mix kernels; the cube's own GM workspace API (a mix kernel's workspace is an
  array the host passes, :mod:`~kernellab.npu.mix`);
* the repeat/mask form of ``cast``, ``reduce_sum`` and ``reduce_max`` (the element-wise ops,
  ``duplicate`` and the whole/block reductions have it: :mod:`~kernellab.npu.repeat`),
  ``select``/``compare``/``gather``, ``get_value``/``set_value``;
* ``asc.adv.Matmul`` and the host matmul tiling heuristic; ``TQueBind``, ``TBufPool``;
* UB->L1 copies (on A2/A3 via GM: DataCopyPad's VECIN/VECOUT->TSCM goes UB->GM->L1,
  ``atlasascendc_api_07_0265``), GM->L0A/L0B (Load2D from GM), LoadDataWithTranspose's
  parameter form (``load_data(..., transpose=True)`` gives its int8 result) and Load3D (L1/L0 bytes
  are stored in the real fractal layouts, :mod:`~kernellab.npu.fractal`; ``load_data`` takes a
  block or a ``LoadData2DParams`` fractal walk), the coupled (910A-like) preset;
* UB bank conflicts, scalar-unit cost beyond a fixed issue cost per call.
"""

from kernellab.npu import asc, errors
from kernellab.npu.asc import tiling_struct
from kernellab.npu.errors import NPUError
from kernellab.npu.launch import capture, launch, retime
from kernellab.npu.machine import (DEFAULT_MACHINE, PRESETS, MachineConfig, PlatformInfo,
                                   describe, get_machine, platform_info, use_machine)
from kernellab.npu.result import RunResult
from kernellab.npu.trace import Trace

__all__ = ["asc", "errors", "NPUError", "launch", "retime", "capture", "tiling_struct",
           "MachineConfig", "PlatformInfo", "PRESETS", "DEFAULT_MACHINE", "get_machine",
           "platform_info", "use_machine", "describe", "RunResult", "Trace"]
