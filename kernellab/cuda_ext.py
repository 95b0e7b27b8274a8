"""CUDA intrinsics numba-cuda 0.30 lacks, for the GPU compiler: ``cuda.dp4a`` and the warp-level
matrix and asynchronous-copy instructions of sm_80 (tensor cores).

* ``dp4a(a, b, c)``: the 4-way byte dot product with 32-bit accumulate of sm_61 and later
  (PTX ISA, "Integer Arithmetic Instructions: dp4a"): ``c + sum_k byte_k(a) * byte_k(b)``, the
  bytes signed when the operand's type is signed (``.s32``) and unsigned when it is unsigned
  (``.u32``); the result is int32 unless both operands are unsigned (then uint32), and wraps.
* ``mma_m16n8k16_f16(a, b, c)`` and ``mma_m16n8k16_bf16(a, b, c)``: one warp-wide
  ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` (PTX ISA, "Warp-level
  Matrix Multiply-Accumulate Instructions: mma"): D (16 x 8, float32) = A (16 x 16) @ B (16 x 8)
  + C. ``a``: 4 uint32 registers (8 halves of A), ``b``: 2 (4 halves of B), ``c``: 4 float32;
  returns 4 float32, in the fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16
  with floating point type"; :mod:`kernellab.sim.mma` writes them out).
* ``ldmatrix_x1/x2/x4(arr, idx)`` and ``ldmatrix_x1/x2/x4_trans(arr, idx)``: ``ldmatrix.sync
  .aligned.m8n8.{x1,x2,x4}[.trans].shared.b16`` (PTX ISA, "Data Movement and Conversion
  Instructions: ldmatrix"): 1, 2 or 4 8 x 8 matrices of 16-bit elements from shared memory,
  lane ``8j + r`` giving the address ``&arr[idx]`` of row r of matrix j (16-byte aligned);
  returns one uint32 (x1) or a tuple of 2 or 4 uint32 a lane.
* ``cp_async(dst, di, src, si, nbytes)``, ``cp_async_zfill(dst, di, src, si, nbytes,
  src_bytes)``: ``cp.async.ca.shared.global`` of 4, 8 or 16 bytes from ``&src[si]`` to
  ``&dst[di]`` (``.cg`` for 16), the zfill form reading ``src_bytes`` (0..nbytes) and filling
  the rest with zeros; ``cp_async_commit_group()``, ``cp_async_wait_group(n)``,
  ``cp_async_wait_all()`` (PTX ISA, "Data Movement and Conversion Instructions: cp.async",
  "cp.async.commit_group", "cp.async.wait_group"). ``nbytes`` and ``n`` are constants.
* ``ld_v2/ld_v4(arr, idx)`` and ``st_v2/st_v4(arr, idx, values)``: one 64- or 128-bit access
  of 2 or 4 consecutive 4-byte elements starting at ``&arr[idx]`` (``ld.v2/v4``,
  ``st.v2/v4``; the address must be aligned to the access's size: PTX ISA, "Vectors").

:func:`install` puts them on the real ``numba.cuda`` module (those numba-cuda does not have),
so one kernel source uses ``cuda.<name>`` on every tier: on a GPU each intrinsic emits its PTX
through inline assembly; on the sim tier :mod:`kernellab.sim.cudamod` evaluates the same
instruction in Python; the sim tier's GPU-compile helper (:mod:`kernellab.sim.ptx`) runs this
file too. This module imports only numba-cuda and llvmlite, so the compile helper can run it
without importing ``kernellab``.
"""

from __future__ import annotations

#: the intrinsics this module adds, by name
NAMES = ("dp4a", "mma_m16n8k16_f16", "mma_m16n8k16_bf16",
         "ldmatrix_x1", "ldmatrix_x2", "ldmatrix_x4",
         "ldmatrix_x1_trans", "ldmatrix_x2_trans", "ldmatrix_x4_trans",
         "cp_async", "cp_async_zfill", "cp_async_commit_group", "cp_async_wait_group",
         "cp_async_wait_all", "ld_v2", "ld_v4", "st_v2", "st_v4")


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


# ---------------------------------------------------------------------------------------------
# helpers of the codegen below


def _as_i32(builder, v, t):
    from llvmlite import ir
    i32 = ir.IntType(32)
    w = v.type.width
    if w > 32:
        return builder.trunc(v, i32)
    if w < 32:
        return builder.sext(v, i32) if getattr(t, "signed", False) else builder.zext(v, i32)
    return v


def _tuple_items(builder, tup, n):
    return [builder.extract_value(tup, i) for i in range(n)]


def _elem_pointer(context, builder, aryty, ary, idxty, idx):
    """LLVM pointer to ``ary[idx]`` (idx an integer or a tuple of integers), as an i64."""
    from llvmlite import ir
    from numba.cuda import cgutils, types

    arr = context.make_array(aryty)(context, builder, ary)
    if isinstance(idxty, types.BaseTuple):
        inds = [context.cast(builder, builder.extract_value(idx, i), t, types.intp)
                for i, t in enumerate(idxty)]
    else:
        inds = [context.cast(builder, idx, idxty, types.intp)]
    ptr = cgutils.get_item_pointer(context, builder, aryty, arr, inds, wraparound=False)
    return builder.ptrtoint(ptr, ir.IntType(64))


def _index_ok(types, aryty, idxty):
    if not isinstance(aryty, types.Array):
        return False
    if isinstance(idxty, types.BaseTuple):
        return len(idxty) == aryty.ndim and all(isinstance(t, types.Integer) for t in idxty)
    return aryty.ndim == 1 and isinstance(idxty, types.Integer)


def _literal_intrinsic(fn):
    """``@intrinsic`` whose integer-constant arguments are typed as literals (``nbytes``,
    ``n``: PTX immediates)."""
    from numba.cuda.extending import _intrinsic
    return _intrinsic(target="cuda", prefer_literal=True)(fn)


def _bad(what: str):
    """A typing error in the course's words (numba reports it with the call's line)."""
    from numba.core.errors import TypingError
    raise TypingError(what)


def _literal_int(types, t):
    return t.literal_value if isinstance(t, types.IntegerLiteral) else None


def _make_mma(kind):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    asm_text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")

    def typer(typingctx, a, b, c):
        ok = (isinstance(a, types.BaseTuple) and len(a) == 4
              and all(isinstance(t, types.Integer) for t in a)
              and isinstance(b, types.BaseTuple) and len(b) == 2
              and all(isinstance(t, types.Integer) for t in b)
              and isinstance(c, types.BaseTuple) and len(c) == 4
              and all(isinstance(t, (types.Float, types.Integer)) for t in c))
        if not ok:
            _bad(f"mma_m16n8k16_{kind}(a, b, c): a is a tuple of 4 uint32 registers (8 halves "
                 "of A), b of 2 (4 halves of B), c of 4 float32 accumulators; got "
                 f"{a}, {b}, {c}")
        sig = types.UniTuple(types.float32, 4)(a, b, c)

        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            i32 = ir.IntType(32)
            ta, tb, tc = signature.args
            av = [_as_i32(builder, v, t) for v, t in zip(_tuple_items(builder, args[0], 4), ta)]
            bv = [_as_i32(builder, v, t) for v, t in zip(_tuple_items(builder, args[1], 2), tb)]
            cv = [context.cast(builder, v, t, types.float32)
                  for v, t in zip(_tuple_items(builder, args[2], 4), tc)]
            ret = ir.LiteralStructType([f32] * 4)
            fnty = ir.FunctionType(ret, [i32] * 6 + [f32] * 4)
            cons = ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4)
            out = builder.call(ir.InlineAsm(fnty, asm_text, cons), av + bv + cv)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(out, i) for i in range(4)])

        return sig, codegen

    typer.__name__ = f"mma_m16n8k16_{kind}"
    return intrinsic(typer)


def _make_ldmatrix(n, trans):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    regs = ", ".join(f"${i}" for i in range(n))
    asm_text = ("{ .reg .u64 p; .reg .u32 s; cvta.to.shared.u64 p, $%d; cvt.u32.u64 s, p; "
                "ldmatrix.sync.aligned.m8n8.x%d%s.shared.b16 {%s}, [s]; }"
                % (n, n, ".trans" if trans else "", regs))

    def typer(typingctx, arr, idx):
        if not _index_ok(types, arr, idx) or getattr(arr.dtype, "bitwidth", 0) != 16:
            _bad(f"ldmatrix_x{n}(arr, idx): arr is a shared array of 16-bit elements (uint16, "
                 f"float16) and idx one element's index; got {arr}, {idx}")
        ret = types.uint32 if n == 1 else types.UniTuple(types.uint32, n)
        sig = ret(arr, idx)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            addr = _elem_pointer(context, builder, signature.args[0], args[0],
                                 signature.args[1], args[1])
            rty = i32 if n == 1 else ir.LiteralStructType([i32] * n)
            fnty = ir.FunctionType(rty, [ir.IntType(64)])
            cons = ",".join(["=r"] * n + ["l"])
            out = builder.call(ir.InlineAsm(fnty, asm_text, cons, side_effect=True), [addr])
            if n == 1:
                return out
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(out, i) for i in range(n)])

        return sig, codegen

    typer.__name__ = f"ldmatrix_x{n}{'_trans' if trans else ''}"
    return intrinsic(typer)


_CP_ASYNC = ("{ .reg .u64 p, g; .reg .u32 s; cvta.to.shared.u64 p, $0; cvt.u32.u64 s, p; "
             "cvta.to.global.u64 g, $1; cp.async.%s.shared.global [s], [g], %d%s; }")


def _make_cp_async(zfill):
    from llvmlite import ir
    from numba.cuda import types

    def typer(typingctx, dst, di, src, si, nbytes, *rest):
        if zfill and (len(rest) != 1 or not isinstance(rest[0], types.Integer)):
            return None
        if not zfill and rest:
            return None
        nb = _literal_int(types, nbytes)
        if nb not in (4, 8, 16):
            _bad(f"cp_async: nbytes must be the constant 4, 8 or 16, got {nbytes}")
        if not _index_ok(types, dst, di) or not _index_ok(types, src, si):
            _bad("cp_async(dst, di, src, si, ...): dst and src are arrays and di, si one "
                 f"element's index of each (an integer, or a tuple of one per dimension); got "
                 f"{dst}, {di}, {src}, {si}")
        sig = types.void(dst, di, src, si, nbytes, *rest)
        text = _CP_ASYNC % ("cg" if nb == 16 else "ca", nb, ", $2" if zfill else "")

        def codegen(context, builder, signature, args):
            d = _elem_pointer(context, builder, signature.args[0], args[0],
                              signature.args[1], args[1])
            s = _elem_pointer(context, builder, signature.args[2], args[2],
                              signature.args[3], args[3])
            ops = [d, s]
            tys = [ir.IntType(64)] * 2
            cons = "l,l"
            if zfill:
                ops.append(_as_i32(builder, args[5], signature.args[5]))
                tys.append(ir.IntType(32))
                cons += ",r"
            fnty = ir.FunctionType(ir.VoidType(), tys)
            builder.call(ir.InlineAsm(fnty, text, cons + ",~{memory}", side_effect=True), ops)
            return context.get_dummy_value()

        return sig, codegen

    if zfill:
        def cp_async_zfill(typingctx, dst, di, src, si, nbytes, src_bytes):
            return typer(typingctx, dst, di, src, si, nbytes, src_bytes)
        return _literal_intrinsic(cp_async_zfill)

    def cp_async(typingctx, dst, di, src, si, nbytes):
        return typer(typingctx, dst, di, src, si, nbytes)
    return _literal_intrinsic(cp_async)


def _make_asm0(name, text):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx):
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(ir.InlineAsm(fnty, text, "~{memory}", side_effect=True), [])
            return context.get_dummy_value()
        return types.void(), codegen

    typer.__name__ = name
    return intrinsic(typer)


def _make_wait_group():
    from llvmlite import ir
    from numba.cuda import types

    def cp_async_wait_group(typingctx, n):
        k = _literal_int(types, n)
        if k is None or not 0 <= k <= 7:
            _bad(f"cp_async_wait_group(n): n must be a constant 0..7 (a PTX immediate), got {n}")

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(ir.InlineAsm(fnty, f"cp.async.wait_group {k};", "~{memory}",
                                      side_effect=True), [])
            return context.get_dummy_value()
        return types.void(n), codegen

    return _literal_intrinsic(cp_async_wait_group)


def _vec_elem(types, arr):
    return isinstance(arr, types.Array) and arr.dtype.bitwidth == 32 and isinstance(
        arr.dtype, (types.Float, types.Integer))


def _reg(dtype):
    from numba.cuda import types
    return ("f", "f32") if isinstance(dtype, types.Float) else ("r", "b32")


def _make_ld_v(n):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, arr, idx):
        if not _vec_elem(types, arr) or not _index_ok(types, arr, idx):
            return None
        sig = types.UniTuple(arr.dtype, n)(arr, idx)
        c, kind = _reg(arr.dtype)
        regs = ", ".join(f"${i}" for i in range(n))
        text = f"ld.v{n}.{kind} {{{regs}}}, [${n}];"

        def codegen(context, builder, signature, args):
            addr = _elem_pointer(context, builder, signature.args[0], args[0],
                                 signature.args[1], args[1])
            et = context.get_value_type(arr.dtype)
            fnty = ir.FunctionType(ir.LiteralStructType([et] * n), [ir.IntType(64)])
            cons = ",".join([f"={c}"] * n + ["l"])
            out = builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), [addr])
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(out, i) for i in range(n)])
        return sig, codegen

    typer.__name__ = f"ld_v{n}"
    return intrinsic(typer)


def _make_st_v(n):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, arr, idx, vals):
        if (not _vec_elem(types, arr) or not _index_ok(types, arr, idx)
                or not isinstance(vals, types.BaseTuple) or len(vals) != n):
            return None
        sig = types.void(arr, idx, vals)
        c, kind = _reg(arr.dtype)
        regs = ", ".join(f"${i + 1}" for i in range(n))
        text = f"st.v{n}.{kind} [$0], {{{regs}}};"

        def codegen(context, builder, signature, args):
            addr = _elem_pointer(context, builder, signature.args[0], args[0],
                                 signature.args[1], args[1])
            et = context.get_value_type(arr.dtype)
            vs = [context.cast(builder, v, t, arr.dtype)
                  for v, t in zip(_tuple_items(builder, args[2], n), signature.args[2])]
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [et] * n)
            cons = ",".join(["l"] + [c] * n) + ",~{memory}"
            builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), [addr] + vs)
            return context.get_dummy_value()
        return sig, codegen

    typer.__name__ = f"st_v{n}"
    return intrinsic(typer)


def _makers():
    return {
        "dp4a": _make_dp4a,
        "mma_m16n8k16_f16": lambda: _make_mma("f16"),
        "mma_m16n8k16_bf16": lambda: _make_mma("bf16"),
        **{f"ldmatrix_x{n}{'_trans' if t else ''}": (lambda n=n, t=t: _make_ldmatrix(n, t))
           for n in (1, 2, 4) for t in (False, True)},
        "cp_async": lambda: _make_cp_async(False),
        "cp_async_zfill": lambda: _make_cp_async(True),
        "cp_async_commit_group": lambda: _make_asm0("cp_async_commit_group",
                                                    "cp.async.commit_group;"),
        "cp_async_wait_group": _make_wait_group,
        "cp_async_wait_all": lambda: _make_asm0("cp_async_wait_all", "cp.async.wait_all;"),
        "ld_v2": lambda: _make_ld_v(2), "ld_v4": lambda: _make_ld_v(4),
        "st_v2": lambda: _make_st_v(2), "st_v4": lambda: _make_st_v(4),
    }


def install() -> None:
    """Add the intrinsics of :data:`NAMES` that the real ``numba.cuda`` module lacks
    (idempotent). Call it in a process where ``numba.cuda`` is the real target (not the
    simulator)."""
    import numba.cuda as cuda
    from numba.cuda.core import config
    if config.ENABLE_CUDASIM:
        return
    for name, make in _makers().items():
        if not hasattr(cuda, name):
            setattr(cuda, name, make())
