"""The chapters' own libraries: what one chapter (and its lab's grader) studies, beside the
runtime. ``gemm_anchors`` (ch. 2), ``summation`` (ch. 3), ``welford`` (ch. 3), ``winograd``
and ``winograd_error`` (ch. 4), ``attention_io`` and ``attention_backward`` (ch. 5), ``quant``
and ``quant_study`` (ch. 6), ``torch_op`` (ch. 9; needs the torch extra). They may import the
runtime; the runtime never imports them."""
