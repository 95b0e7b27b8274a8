"""The chapters' kernel ladders, llm.c ``dev/cuda`` style: one module per operator and device,
every version side by side, each a small step from the one before; each module's docstring gives
the versions' shared contract (shapes, dtypes, errors) and a line per version.

CPU (Numba): ``gemm_cpu`` (ch. 1), ``conv_cpu`` (ch. 4), ``attention_cpu`` (ch. 5), ``int8_cpu``
(ch. 6). CUDA (numba-cuda; ``sim`` or ``gpu`` tier): ``gemm_cuda`` (ch. 2), ``gemm_tc``
(ch. 2, second part: tensor cores), ``reduce_cuda``, ``softmax_cuda``, ``norms_cuda`` (ch. 3),
``conv_cuda`` (ch. 4), ``attention_cuda`` and ``attention_tc`` (ch. 5: scalar, and
FlashAttention-2 on tensor cores), ``int8_cuda`` (ch. 6), ``llm_ops`` and ``llm_rope`` (ch. 8:
fused add + RMSNorm, SwiGLU, RoPE in BF16), ``moe`` and ``decode_attention`` (ch. 8, Labs 8a
and 8b); ``python -m
kernellab.kernels.<cuda ladder>`` (the ladders with a ``main``) validates every version
against ``reference_kernels``, then times them (``_ladder``). ``_gemm_args`` and ``_cuda_args``
check the arguments the ladders share. The runtime never imports this package
(``tests/test_kernellab/test_import_rule.py``).
"""
