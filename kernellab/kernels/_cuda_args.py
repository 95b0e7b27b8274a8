"""What the CUDA kernel harnesses share: recognising numba device arrays."""

from __future__ import annotations

import kernellab  # noqa: F401  (chooses the gpu/sim tier before numba.cuda is imported)
from numba import cuda


def is_device_array(x) -> bool:
    """True for a numba device array (``cuda.to_device``, ``cuda.device_array``; the
    simulator's FakeCUDAArray included), False for anything else (numpy arrays included)."""
    return bool(cuda.devicearray.is_cuda_ndarray(x))
