"""CUDA intrinsics numba-cuda 0.30 lacks, for the GPU compiler: ``cuda.dp4a``.

``dp4a(a, b, c)`` is the 4-way byte dot product with 32-bit accumulate of sm_61 and later
(PTX ISA, "Integer Arithmetic Instructions: dp4a"): ``c + sum_k byte_k(a) * byte_k(b)``, the
bytes signed when the operand's type is signed (``.s32``) and unsigned when it is unsigned
(``.u32``); the result is int32 unless both operands are unsigned (then uint32), and wraps. INT8
GEMMs and convolutions are built on it.

:func:`install` puts it on the real ``numba.cuda`` module as ``cuda.dp4a`` (when numba-cuda does
not have one), so one kernel source uses ``cuda.dp4a`` on every tier: on a GPU this intrinsic
emits the PTX instruction through inline assembly; on the sim tier :mod:`kernellab.sim.engine`
evaluates the same arithmetic in Python; the sim tier's GPU-compile helper
(:mod:`kernellab.sim.ptx`) runs this file too. This module imports only numba-cuda and
llvmlite, so the compile helper can run it without importing ``kernellab``.
"""

from __future__ import annotations


def _make_dp4a():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def dp4a(typingctx, a, b, c):
        """dp4a(a, b, c) -> int32 (uint32 when a and b are unsigned); see the module docstring."""
        if not all(isinstance(t, types.Integer) for t in (a, b, c)):
            return None
        both_unsigned = not a.signed and not b.signed
        ret = types.uint32 if both_unsigned else types.int32
        sig = ret(a, b, c)
        asm_text = (f"dp4a.{'s32' if a.signed else 'u32'}.{'s32' if b.signed else 'u32'} "
                    "$0, $1, $2, $3;")

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            vals = []
            for v, t in zip(args, signature.args):
                w = v.type.width
                if w > 32:
                    v = builder.trunc(v, i32)
                elif w < 32:       # widen by the operand's own signedness
                    v = builder.sext(v, i32) if t.signed else builder.zext(v, i32)
                vals.append(v)
            fnty = ir.FunctionType(i32, [i32, i32, i32])
            return builder.call(ir.InlineAsm(fnty, asm_text, "=r,r,r,r"), vals)

        return sig, codegen

    return dp4a


def install() -> None:
    """Add ``dp4a`` to the real ``numba.cuda`` module if it has none (idempotent). Call it in a
    process where ``numba.cuda`` is the real target (not the simulator)."""
    import numba.cuda as cuda
    from numba.cuda.core import config
    if config.ENABLE_CUDASIM or hasattr(cuda, "dp4a"):
        return
    cuda.dp4a = _make_dp4a()
