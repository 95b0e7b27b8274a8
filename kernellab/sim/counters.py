"""The names of the sim tier's per-launch counters, in one dependency-free module: the engine
fills them, and code that predicts them (``kernellab.kernels.reduce_cuda.expected_counters``)
or runs on the gpu tier (where the engine's greenlet is not installed) can name them.

``*_requests`` are warp-level memory instructions; ``*_elements`` the thread accesses they carry
(elements / requests = active lanes per request: 32 for a full warp, fewer under divergence);
``global_*_sectors`` the 32-byte sectors they touch; ``shared_*_wavefronts`` the passes through
the 32 banks (wavefronts / requests = bank-conflict degree); ``dram_*_bytes`` each distinct
sector once (compulsory traffic); ``shuffles``/``votes``/``warp_syncs`` warp collectives;
``atomics`` atomic operations; ``flops`` is left for callers; ``local_frame_bytes`` one
thread's local-memory frame (the PTX local depot; per launch, not summed) and
``local_touched_bytes`` the bytes all threads stored to it (the model charges them when the
frames of an SM's resident threads overflow L1: :func:`kernellab.sim.model.local_traffic`);
``mma_ops`` warp-level ``mma.m16n8k16`` instructions (4096 FLOP each), ``cp_async_bytes`` the
bytes ``cp.async`` read from global memory (a zero fill reads none) and
``cp_async_overlapped_bytes`` those in flight across tensor-core work: each completed group's
bytes times the share of a pipeline stage's MMAs (its warp's MMAs / the thread's groups) that
its warp issued while it was in flight (:func:`kernellab.sim.sm80.block_overlap`).
"""

COUNTER_KEYS = (
    "blocks", "threads", "warps",
    "global_load_requests", "global_store_requests",
    "global_load_sectors", "global_store_sectors",
    "global_load_bytes", "global_store_bytes",
    "global_load_elements", "global_store_elements",
    "dram_read_bytes", "dram_write_bytes",
    "shared_load_requests", "shared_store_requests",
    "shared_load_elements", "shared_store_elements",
    "shared_load_wavefronts", "shared_store_wavefronts",
    "shared_bytes_per_block", "barriers", "warp_syncs", "shuffles", "votes", "atomics", "flops",
    "local_frame_bytes", "local_touched_bytes",
    "mma_ops", "cp_async_bytes", "cp_async_overlapped_bytes",
)
