"""Warp collectives on the compiled path (:mod:`kernellab.sim.compiled`).

``cuda.syncwarp``, ``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``,
``all_sync``, ``any_sync`` and ``ballot_sync`` (CUDA C++ Programming Guide, "Warp Shuffle
Functions", "Warp Vote Functions", "__syncwarp"; numba-cuda docs "Warp Intrinsics").

The rewrite (:func:`rewrite_stmt`): a statement calling a collective is split, in Python's
evaluation order (every operand evaluated before the call is bound to a temporary first), so
that the call becomes: store the mask, value and lane argument in the thread's row of the slot
arrays ``WI`` (int64: mask, argument, integer value, integer result) and ``WF`` (float64: value,
result); mark the log; ``yield COLL + site``; read the result back, typed as the value.

The driver (:func:`run_block`) runs a block the way the greenlet executor
(:mod:`kernellab.sim.scheduler`) does: a barrier interval warp by warp, in the order the
threads reached the last barrier; a warp's lanes are resumed until each waits at a collective,
a barrier or has returned; a collective completes when every lane of the warp that is neither
at the barrier nor returned waits at that one call site with one mask naming exactly those
lanes, and the lane resumed last is one of them (the greenlet executor completes a collective
when its last lane arrives and resumes its lanes first, in lane order: the orders are then the
same). The exchange follows ``scheduler._complete_group``: a ``__syncwarp`` is a new warp-sync
event (``launch.wevents``) its lanes' later accesses carry, a shuffle's source lane must be in
the mask. Anything else (lanes at different collectives, other masks, a source lane outside the
mask, a negative or huge delta) raises ``Fallback``: the greenlet re-run decides, and names the
fault when there is one.
"""

from __future__ import annotations

import ast
import time

import numpy as np
from numba import njit, types as _nbt
from numba.core.errors import NumbaError
from numba.cuda.np import numpy_support as _npsupport
from numba.extending import overload

from kernellab.sim.settings import _OPTS, WARP
from kernellab.sim.warp import SHFL, shfl_source_jit

COLL = 1 << 16          # yield code of collective site k: COLL + k (barriers: 1 .. COLL - 1)
FULL = (1 << WARP) - 1
OPS = {"syncwarp": 0, **SHFL, "all_sync": 5, "any_sync": 6, "ballot_sync": 7}
_SYNCWARP, _XOR, _BALLOT = 0, 4, 7
_P = "_kl_"
_JIT = {"error_model": "numpy"}


# ----------------------------------------------------------------------------------------
# The rewrite


def _coll_op(node, is_cuda):
    """The collective's name when ``node`` is a ``cuda.<collective>(...)`` call, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and is_cuda(node.func.value) and node.func.attr in OPS:
        return node.func.attr
    return None


def _has(node, is_cuda):
    return node is not None and any(_coll_op(n, is_cuda) for n in ast.walk(node))


class _Unsupported(Exception):
    pass


def _children(node):
    """``node``'s operand fields in Python's evaluation order, or None when the order is
    conditional (short-circuit, conditional expressions, comprehensions)."""
    if isinstance(node, ast.Call):
        return [("args", k) for k in range(len(node.args))]
    if isinstance(node, ast.BinOp):
        return [("left", None), ("right", None)]
    if isinstance(node, ast.UnaryOp):
        return [("operand", None)]
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return [("left", None), ("comparators", 0)]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return [("value", None), ("slice", None)]
    if isinstance(node, (ast.Tuple, ast.List)) and isinstance(node.ctx, ast.Load):
        return [("elts", k) for k in range(len(node.elts))]
    if isinstance(node, ast.Attribute):
        return [("value", None)]
    return None


def _get(node, f, k):
    v = getattr(node, f)
    return v if k is None else v[k]


def _set(node, f, k, v):
    if k is None:
        setattr(node, f, v)
    else:
        getattr(node, f)[k] = v


class _Lin:
    """Splits an expression at its collective calls; ``pre`` collects the statements."""

    def __init__(self, rw, is_cuda):
        self.rw = rw
        self.is_cuda = is_cuda
        self.pre = []

    def temp(self, expr):
        if isinstance(expr, (ast.Name, ast.Constant)):
            return expr
        self.rw.tmp += 1
        name = f"{_P}h{self.rw.tmp}"
        self.pre.append(ast.Assign([_own(name, ast.Store())], expr))
        return _own(name, ast.Load())

    def expr(self, node):
        if not _has(node, self.is_cuda):
            return node
        op = _coll_op(node, self.is_cuda)
        if op is not None:
            return self.call(op, node)
        fields = _children(node)
        if fields is None or (isinstance(node, ast.Call) and (
                node.keywords or _has(node.func, self.is_cuda)
                or any(isinstance(a, ast.Starred) for a in node.args))):
            raise _Unsupported(f"a warp collective inside {type(node).__name__}")
        last = max(i for i, (f, k) in enumerate(fields) if _has(_get(node, f, k), self.is_cuda))
        for i, (f, k) in enumerate(fields[:last + 1]):
            sub = self.expr(_get(node, f, k))
            _set(node, f, k, self.temp(sub) if i < last else sub)
        return node

    def call(self, op, node):
        if node.keywords:
            raise _Unsupported(f"cuda.{op} with keyword arguments")
        nargs = {"syncwarp": (0, 1)}.get(op, (3,) if op.startswith("shfl") else (2,))
        if len(node.args) not in nargs:
            raise _Unsupported(f"cuda.{op} with {len(node.args)} arguments")
        args = [self.temp(self.expr(a)) for a in node.args]
        if op == "syncwarp":
            args = (args or [ast.Constant(FULL)]) + [ast.Constant(0), ast.Constant(0)]
        elif len(args) == 2:
            args.append(ast.Constant(0))
        rw = self.rw
        k = len(rw.coll)
        rw.coll.append(OPS[op])
        rw.tmp += 1
        res = f"{_P}r{rw.tmp}"
        self.pre.append(("coll", op, k, args, res))
        return _own(res, ast.Load())


def _own(name, ctx):
    """A name of the rewrite's own (the kernel's names may not start with ``_kl_``)."""
    n = ast.Name(name, ctx)
    n.kl_own = True
    return n


def rewrite_stmt(rw, node, is_cuda):
    """The rewrite of kernel statement ``node`` when it calls a warp collective (a list of
    statements, already rewritten), else None. ``rw``: the kernel's ``_Rewrite``."""
    if isinstance(node, ast.Expr):
        parts = [("value", node.value)]
    elif isinstance(node, ast.Assign):
        if any(_has(t, is_cuda) for t in node.targets):
            raise _unsupported("a warp collective in an assignment's target")
        parts = [("value", node.value)]
    elif isinstance(node, ast.AugAssign):
        if _has(node.value, is_cuda) and not isinstance(node.target, ast.Name):
            raise _unsupported("a warp collective in an augmented store to an array")
        parts = [("value", node.value)]
    elif isinstance(node, ast.If):
        parts = [("test", node.test)]
    else:
        fields = [getattr(node, f, None) for f in ("test", "iter", "value", "target")]
        if any(isinstance(v, ast.AST) and _has(v, is_cuda) for v in fields):
            raise _unsupported(f"a warp collective in a {type(node).__name__} header")
        return None
    if not any(_has(v, is_cuda) for _, v in parts):
        return None
    lin = _Lin(rw, is_cuda)
    try:
        for f, v in parts:
            setattr(node, f, lin.expr(v))
    except _Unsupported as exc:
        raise _unsupported(str(exc)) from None
    out = []
    for s in lin.pre:
        out += _emit(*s[1:]) if isinstance(s, tuple) else _flat(rw.visit(s))
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) \
            and node.value.id.startswith(f"{_P}r"):
        return out          # cuda.syncwarp() as a statement: nothing is left of it
    return out + _flat(rw.visit(node))


def _unsupported(msg):
    from kernellab.sim.compiled import Unsupported
    return Unsupported(msg)


def _flat(x):
    return x if isinstance(x, list) else [x]


def _emit(op, k, args, res):
    m, v, a = (ast.unparse(x) for x in args)
    put = "wput_p" if OPS[op] > _XOR else "wput"
    src = (f"{_P}{put}({_P}WI, {_P}WF, {_P}tid, {m}, {v}, {a})\n{_P}mark({_P}L)\n"
           f"yield {COLL + k}\n")
    if op.startswith("shfl"):
        src += f"{res} = {_P}wget({_P}WI, {_P}WF, {_P}tid, {v})\n"
    elif op in ("all_sync", "any_sync"):
        src += f"{res} = {_P}WI[{_P}tid, 3] != 0\n"
    elif op == "ballot_sync":
        src += f"{res} = {_P}i32({_P}WI[{_P}tid, 3])\n"
    return ast.parse(src).body


# ----------------------------------------------------------------------------------------
# Compiled slot helpers


def _wput(WI, WF, tid, m, v, a):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


def _wput_p(WI, WF, tid, m, v, a):  # pragma: no cover
    raise NotImplementedError


def _wget(WI, WF, tid, v):  # pragma: no cover
    raise NotImplementedError


def _int_ok(t):
    """An integer the driver reads exactly as the greenlet executor's ``int()`` does."""
    return isinstance(t, _nbt.Boolean) or (isinstance(t, _nbt.Integer)
                                           and (t.signed or t.bitwidth < 64))


@overload(_wput, jit_options=_JIT)
def _ov_wput(WI, WF, tid, m, v, a):
    if not (isinstance(m, (_nbt.Integer, _nbt.Boolean)) and _int_ok(a)):
        return None
    if isinstance(v, _nbt.Float):
        def impl(WI, WF, tid, m, v, a):
            WI[tid, 0] = m
            WI[tid, 1] = a
            WF[tid, 0] = v
        return impl
    if isinstance(v, (_nbt.Integer, _nbt.Boolean)):
        def impl(WI, WF, tid, m, v, a):
            WI[tid, 0] = m
            WI[tid, 1] = a
            WI[tid, 2] = v
        return impl
    return None


@overload(_wput_p, jit_options=_JIT)
def _ov_wput_p(WI, WF, tid, m, v, a):
    if not isinstance(m, (_nbt.Integer, _nbt.Boolean)) or \
            not isinstance(v, (_nbt.Integer, _nbt.Boolean, _nbt.Float)):
        return None

    def impl(WI, WF, tid, m, v, a):
        WI[tid, 0] = m
        WI[tid, 2] = 1 if v else 0
    return impl


@overload(_wget, jit_options=_JIT)
def _ov_wget(WI, WF, tid, v):
    if isinstance(v, _nbt.Boolean):
        return lambda WI, WF, tid, v: WI[tid, 3] != 0
    if not isinstance(v, (_nbt.Integer, _nbt.Float)):
        return None
    cast = np.dtype(_npsupport.as_dtype(v)).type
    if isinstance(v, _nbt.Float):
        return lambda WI, WF, tid, v: cast(WF[tid, 1])
    return lambda WI, WF, tid, v: cast(WI[tid, 3])


GLOBALS = {f"{_P}wput": _wput, f"{_P}wput_p": _wput_p, f"{_P}wget": _wget,
           f"{_P}i32": np.int32}


@njit(cache=False, **_JIT)
def _xchg(op, WI, WF, tids, M):
    """Complete collective ``op`` of lanes ``tids`` (ascending, one warp; lane mask ``M``):
    0, or why not (1: a mask is not ``M``; 2: a source lane outside the mask; 3: a delta the
    driver does not take)."""
    n = len(tids)
    for k in range(n):
        if (WI[tids[k], 0] & 0xFFFFFFFF) != M:
            return 1
    if op == _SYNCWARP:
        return 0
    if op <= _XOR:
        for k in range(n):
            t = tids[k]
            ln = t & 31
            a = WI[t, 1]
            if op != 1 and (a < 0 or a > 64):
                return 3
            src = shfl_source_jit(op, ln, a)
            if not (M >> src) & 1:
                return 2
            s = t - ln + src
            WF[t, 1] = WF[s, 0]
            WI[t, 3] = WI[s, 2]
        return 0
    b = 0
    for k in range(n):
        if WI[tids[k], 2]:
            b |= 1 << (tids[k] & 31)
    if op == 5:
        r = 1 if b == M else 0
    elif op == 6:
        r = 1 if b != 0 else 0
    else:
        r = b - (1 << 32) if b >= (1 << 31) else b        # the uint32 viewed as int32
    for k in range(n):
        WI[tids[k], 3] = r
    return 0


# ----------------------------------------------------------------------------------------
# The driver


_WHY = {1: "lanes of a warp pass different masks", 2: "a shuffle reads a lane outside its mask",
        3: "a shuffle delta the compiled path does not take"}


def run_plain(L, ops, gens, LL, blin, segs, fallback):
    """:func:`run_block` for a kernel without warp collectives: a barrier interval resumes
    every live thread in thread-id order (the greenlet executor's order)."""
    lg, pos, seg, nseg = LL[:4]
    c = L.counters
    live = list(range(len(gens)))
    gl = gens
    live_arr = np.arange(len(gens), dtype=np.int64)
    zeros = np.zeros(len(gens), np.int64)
    epoch = 0
    while live:
        nseg[0] = 0
        codes = _resume(gl, fallback)
        if len(codes) != len(gl):
            raise fallback("a thread ended without its exit")
        if pos[0] > len(lg):
            raise fallback("the block's log overflowed")
        segs.append((live_arr, epoch, zeros[:len(gl)], seg[:len(gl)].copy()))
        k0 = codes[0]
        if k0 > 0 and codes.count(k0) == len(codes):
            pass                    # every live thread at one barrier: the usual case
        else:
            if -1 in codes:
                raise fallback("a loop ran long without a switch")
            # threads that returned are done; the others wait at a barrier (a barrier waits
            # for the live threads only)
            keep = [j for j, k in enumerate(codes) if k > 0]
            if len({codes[j] for j in keep}) > 1:
                raise fallback("threads wait at different barriers")
            live = [live[j] for j in keep]
            gl = [gl[j] for j in keep]
            live_arr = np.asarray(live, np.int64)
            if not live:
                break
        epoch += 1
        c["barriers"] += 1
    return epoch


def run_block(L, ops, gens, LL, blin, segs, fallback):
    """Run the block's thread generators ``gens`` (by thread id) to their ends; ``ops``: the
    op of each collective site; ``LL``: the log state and the slot arrays. Appends ``(tids,
    barrier interval, warp-sync epochs, log ends)`` per resumption round to ``segs``; returns
    the index of the last barrier interval. Raises ``fallback(why)``."""
    lg, pos, seg, nseg, WI, WF = LL
    c = L.counters
    deadline = L.t0 + _OPTS["watchdog_s"]
    rounds = 0
    wep = np.zeros(len(gens), np.int64)
    order = list(range(len(gens)))
    epoch = 0
    cap = len(lg)
    while True:
        at_bar, bar_codes = [], set()
        i, n = 0, len(order)
        while i < n:
            w = order[i] >> 5
            j = i + 1
            while j < n and order[j] >> 5 == w:
                j += 1
            R = order[i:j]
            i = j
            while True:
                rounds += 1
                if not rounds & 1023 and time.monotonic() > deadline:
                    raise fallback("ran past the watchdog")     # a spin on a collective
                nseg[0] = 0
                codes = _resume([gens[t] for t in R], fallback)
                if len(codes) != len(R):
                    raise fallback("a thread ended without its exit")
                if pos[0] > cap:
                    raise fallback("the block's log overflowed")
                ra = np.array(R, np.int64)
                segs.append((ra, epoch, wep[ra], seg[:len(R)].copy()))
                last = codes[-1]
                if last >= COLL and codes.count(last) == len(codes):
                    A = R if len(R) == 1 or R[0] < R[1] else sorted(R)
                else:
                    A = []
                    odd = False
                    for t, k in zip(R, codes):
                        if k >= COLL:
                            A.append(t)
                            odd |= k != last
                        elif k > 0:
                            at_bar.append(t)
                            bar_codes.add(k)
                        elif k < 0:
                            raise fallback("a loop ran long without a switch")
                    if not A:
                        break
                    if last < COLL:
                        raise fallback("a lane left for a barrier or returned after the last "
                                       "lane of a warp collective arrived")
                    if odd:
                        raise fallback("lanes of a warp wait at different collectives")
                    A.sort()
                M = FULL if len(A) == WARP else sum(1 << (t & 31) for t in A)
                ta = np.array(A, np.int64)
                op = ops[last - COLL]
                st = _xchg(op, WI, WF, ta, M)
                if st:
                    raise fallback(_WHY[st])
                if op == _SYNCWARP:
                    L.nwevents += 1
                    L.wevents[L.nwevents] = M
                    wep[ta] = L.nwevents
                    c["warp_syncs"] += 1
                elif op <= _XOR:
                    c["shuffles"] += 1
                    L.shuffle_warps.add((blin, w))
                else:
                    c["votes"] += 1
                R = A
        if len(bar_codes) > 1:
            raise fallback("threads wait at different barriers")
        if not at_bar:
            return epoch
        epoch += 1
        c["barriers"] += 1
        order = at_bar


def _resume(gl, fallback):
    try:
        return list(map(next, gl))
    except NumbaError:
        raise
    except Exception as exc:
        raise fallback(f"{type(exc).__name__} in the kernel") from None
