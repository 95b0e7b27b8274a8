"""The lab registry: lab id -> spec class. Spec modules import numpy but never numba at import
time (the worker applies the lab's codegen profile before numba loads)."""

from __future__ import annotations

import importlib

#: lab id -> "module:Class"
LABS = {
    "gemm-cpu": "grader.labs.gemm_cpu:GemmCPU",
    "gemm-cuda": "grader.labs.gemm_cuda:GemmCUDA",
    "softmax-cuda": "grader.labs.softmax_cuda:SoftmaxCUDA",
    "winograd": "grader.labs.winograd:Winograd",
    "flash-attention": "grader.labs.flash_attention:FlashAttention",
    "int8-linear": "grader.labs.int8_linear:Int8Linear",
    "npu-vector-add": "grader.labs.npu_vector_add:NPUVectorAdd",
    "npu-matmul": "grader.labs.npu_matmul:NPUMatmul",
}


class UnknownLab(KeyError):
    def __str__(self) -> str:
        return (f"unknown lab {self.args[0]!r}; available: {', '.join(sorted(LABS))} "
                "(see `kernellab list`)")


def get_spec_class(lab_id: str):
    """The spec class of ``lab_id``. Raises UnknownLab."""
    try:
        mod, cls = LABS[lab_id].split(":")
    except KeyError:
        raise UnknownLab(lab_id) from None
    return getattr(importlib.import_module(mod), cls)


def all_specs() -> list:
    return [get_spec_class(k)() for k in LABS]
