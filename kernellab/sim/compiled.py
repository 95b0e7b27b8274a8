"""The sim tier's compiled path: a block's threads as compiled coroutines (MCUDA-style).

J. Stratton, S. Stone, W. Hwu, "MCUDA: an efficient implementation of CUDA kernels for
multi-core CPUs" (LCPC 2008, §3) run the barrier-free regions of a block as loops over its
threads; CuPBoP (R. Han et al., 2022) does the same from LLVM IR. Here each CUDA thread of a
block is a *generator* compiled by Numba (``numba.njit`` of a rewritten copy of the kernel's
source) that yields at every ``syncthreads``; a Python driver resumes the block's generators in
thread-id order, one barrier interval at a time, exactly the order the greenlet executor
(:mod:`kernellab.sim.scheduler`) runs them. Every global and shared element access goes through
a compiled helper (:mod:`kernellab.sim.compiled_access`) that bounds-checks it (negative
indices included) and appends its byte address (with write/atomic bits) to the block's log; at
the end of the block the addresses become the executor's log entries
(:mod:`kernellab.sim.arrays`, ``OFF_BITS``) and the same analysis runs
(:meth:`kernellab.sim.analysis._Launch.analyse`): races, uninitialised shared reads and the
traffic counters are those of the greenlet path, entry for entry.

Which kernels take this path (:func:`plan` says why not, ``LaunchStats.path_note``): kernels
whose source Numba compiles once rewritten, using ``threadIdx``/``blockIdx``/``blockDim``/
``gridDim``, ``cuda.grid``, ``cuda.gridsize``, ``laneid``, ``warpsize``, ``syncthreads``,
static ``cuda.shared.array`` and ``cuda.local.array`` with constant shapes, ``math``, a scalar's
``.view(dtype)`` of the same width (:data:`kernellab.sim.compiled_math.VIEW`), device
functions without barriers, atomics or warp collectives, and in the kernel the warp collectives
of :mod:`kernellab.sim.compiled_warp` (``syncwarp``, shuffles, ``all``/``any``/``ballot``),
launched in mode 1 (``checks="full"``, no source sites, no trace, no ``shuffle``) or
``checks="fast"`` with at least :data:`MIN_THREADS` threads. Anything else (other collectives,
atomics, dynamic shared memory, record or tuple arguments, odd views) runs on the greenlet
executor. A launch on this path that raises, diverges at a barrier, overflows its
log or runs a loop past :data:`LOOP_LIMIT` passes between two switches is run again from a copy
of its arguments on the greenlet executor, which names the threads and lines; a hazard the
analysis finds is explained the same way (mode 2 and 3 re-runs are greenlet runs).

Numerics follow Numba's typing, as numba-cuda compiles the kernel for a GPU: a Python float
literal is a float64 (``x * 0.5`` of a float32 ``x`` is computed in float64, as on the GPU),
where the greenlet path follows NumPy's scalar rules (NEP 50: float32). Kernels of float32
arithmetic on float32 data give bit-identical results on both paths; ``math`` functions go through
:mod:`kernellab.sim.compiled_math`, which gives the greenlet path's values bit for bit.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import time

import numpy as np
from numba import njit, types as _nbt
from numba.cuda.simulator import kernel as _simkernel
from numba.cuda.np import numpy_support as _npsupport

from kernellab.sim import arrays as _a, compiled_math as _cmath, compiled_warp as _cw, \
    gpumath as _gm
from kernellab.sim.compiled_access import _A61, _RAW, _W62, LOG_CAP, _ld, _mark, _st, _too_long
from kernellab.sim.arrays import AID_SHIFT, ATOMIC_BIT, WRITE_BIT
from kernellab.sim.cudamod import _poisoned
from kernellab.sim.settings import _OPTS, MAX_STATIC_SHARED, WARP

MIN_THREADS = 2048          # threads of a launch from which compiling (about a second) pays
LOOP_LIMIT = 1 << 24        # passes of one loop between two switches before the greenlet re-run

# yield codes: a barrier is its site number (>= 1)
_EXIT = 0
_LOOP = -1


class Fallback(Exception):
    """Run this launch (again) on the greenlet executor."""


# ----------------------------------------------------------------------------------------
# The rewrite of a kernel's (or device function's) source

_P = "_kl_"
_DIM = {"threadIdx": "t", "blockIdx": "b", "blockDim": "bd", "gridDim": "gd"}
_CTX = [f"{_P}{p}{c}" for p in ("t", "b", "bd", "gd") for c in "xyz"] + [f"{_P}tid"]


class Unsupported(Exception):
    """The kernel uses something the compiled path does not express."""


def _is_cuda(node, env):
    return isinstance(node, ast.Name) and env.get(node.id) is _CUDA_MOD


def _const(expr, env, what):
    try:
        return eval(compile(ast.Expression(expr), "<shape>", "eval"), dict(env))
    except Exception as exc:
        raise Unsupported(f"{what} is not a constant ({type(exc).__name__})") from None


class _Rewrite(ast.NodeTransformer):
    """Rewrites one function's body; collects its shared and local allocations."""

    def __init__(self, env, is_kernel, devices):
        self.env = env
        self.is_kernel = is_kernel
        self.devices = devices          # name -> compiled device function name
        self.shared = []                # (name, shape, dtype)
        self.local = []
        self.barriers = 0
        self.loops = 0
        self.tmp = 0
        self.coll = []                  # op of each warp collective call site (compiled_warp)

    def visit(self, node):
        if self.is_kernel and isinstance(node, ast.stmt):
            out = _cw.rewrite_stmt(self, node, lambda n: _is_cuda(n, self.env))
            if out is not None:
                return out
        return super().visit(node)

    # -- cuda.<attr>
    def _cuda_attr(self, node):
        """``cuda.X`` or ``cuda.X.y`` -> replacement expression, or None."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and _is_cuda(node.value.value, self.env):
            if node.value.attr in _DIM and node.attr in ("x", "y", "z"):
                return ast.Name(f"{_P}{_DIM[node.value.attr]}{node.attr}", ast.Load())
            raise Unsupported(f"cuda.{node.value.attr}.{node.attr}")
        if isinstance(node, ast.Attribute) and _is_cuda(node.value, self.env):
            if node.attr == "laneid":
                return ast.parse(f"({_P}tid % {WARP})", mode="eval").body
            if node.attr == "warpsize":
                return ast.Constant(WARP)
            raise Unsupported(f"cuda.{node.attr}")
        return None

    def visit_Attribute(self, node):
        rep = self._cuda_attr(node)
        if rep is not None:
            return ast.copy_location(rep, node)
        return self.generic_visit(node)

    def visit_Name(self, node):
        if _is_cuda(node, self.env):
            raise Unsupported("cuda used as a value")
        if node.id.startswith(_P) and not hasattr(node, "kl_own"):     # (compiled_warp's)
            raise Unsupported(f"a name starting with {_P}")
        return node

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and _is_cuda(f.value, self.env):
            if f.attr in ("grid", "gridsize") and len(node.args) == 1 and not node.keywords:
                nd = _const(node.args[0], self.env, "cuda.grid's argument")
                if nd not in (1, 2, 3):
                    raise Unsupported("cuda.grid(n) with n not 1, 2 or 3")
                c = "xyz"[:nd]
                if f.attr == "grid":
                    parts = [f"({_P}b{a} * {_P}bd{a} + {_P}t{a})" for a in c]
                else:
                    parts = [f"({_P}bd{a} * {_P}gd{a})" for a in c]
                src = parts[0] if nd == 1 else "(" + ", ".join(parts) + ")"
                return ast.copy_location(ast.parse(src, mode="eval").body, node)
            raise Unsupported(f"cuda.{f.attr}()")
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                and f.attr in _cmath.FUNCS and self.env.get(f.value.id) in (math, _gm.MODULE):
            node = self.generic_visit(node)
            node.func = ast.Name(f"{_P}m_{f.attr}", ast.Load())     # compiled_math's stand-in
            return node
        if isinstance(f, ast.Attribute) and f.attr == "view" and len(node.args) == 1 \
                and not node.keywords:
            node = self.generic_visit(node)      # x.view(dt): compiled_math's bit view
            node.args = [node.func.value] + node.args
            node.func = ast.Name(f"{_P}view", ast.Load())
            return node
        if _device_key(f) in self.devices:      # f(...) or module.f(...)
            node = self.generic_visit(node)
            node.func = ast.Name(self.devices[_device_key(f)], ast.Load())
            node.args.append(ast.Name(f"{_P}C", ast.Load()))
            return node
        return self.generic_visit(node)

    # -- statements
    def _alloc(self, node):
        """``x = cuda.shared.array(shape, dtype)`` / ``cuda.local.array`` -> replacement."""
        v = node.value
        if not (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
                and v.func.attr == "array" and isinstance(v.func.value, ast.Attribute)
                and _is_cuda(v.func.value.value, self.env)):
            return None
        space = v.func.value.attr
        if space not in ("shared", "local"):
            raise Unsupported(f"cuda.{space}.array")
        if not self.is_kernel:
            raise Unsupported(f"cuda.{space}.array in a device function")
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise Unsupported(f"cuda.{space}.array not assigned to one name")
        args = list(v.args) + [k.value for k in v.keywords if k.arg in ("shape", "dtype")]
        if len(args) < 2:
            raise Unsupported(f"cuda.{space}.array without shape and dtype")
        shape = _const(args[0], self.env, f"cuda.{space}.array's shape")
        dtype = _const(args[1], self.env, f"cuda.{space}.array's dtype")
        dtype = _as_dtype(dtype)
        shape = tuple(int(s) for s in shape) if isinstance(shape, tuple) else (int(shape),)
        if space == "shared" and (not shape or min(shape) <= 0):
            raise Unsupported("dynamic shared memory")
        name = node.targets[0].id
        lst = self.shared if space == "shared" else self.local
        k = len(lst)
        lst.append((name, shape, dtype))
        if space == "shared":
            src = f"{name} = {_P}sh{k}"
        else:
            src = f"{name} = {_P}lo{k}[{_P}tid]"
        return ast.copy_location(ast.parse(src).body[0], node)

    def _store(self, target, value, node):
        """``a[idx] = value`` -> ``_st(a, L, value, idx)``; other targets: visited."""
        if isinstance(target, ast.Subscript) and not _has_slice(target.slice):
            call = ast.Call(ast.Name(f"{_P}st", ast.Load()),
                            [self.visit(target.value), ast.Name(f"{_P}L", ast.Load()),
                             value, self.visit(target.slice)], [])
            return ast.copy_location(ast.Expr(call), node)
        if isinstance(target, ast.Subscript):
            raise Unsupported("a store to a slice")
        return None

    def visit_Assign(self, node):
        rep = self._alloc(node)
        if rep is not None:
            return rep
        value = self.visit(node.value)
        if len(node.targets) == 1:
            st = self._store(node.targets[0], value, node)
            if st is not None:
                return st
        if any(isinstance(t, ast.Subscript) for t in node.targets) or any(
                isinstance(e, ast.Subscript) for t in node.targets
                if isinstance(t, (ast.Tuple, ast.List)) for e in t.elts):
            raise Unsupported("a chained or unpacking store to an array")
        node.value = value
        node.targets = [self.visit(t) for t in node.targets]
        return node

    def visit_AugAssign(self, node):
        t = node.target
        if isinstance(t, ast.Subscript):
            if _has_slice(t.slice):
                raise Unsupported("an augmented store to a slice")
            # a[i] op= v  ->  tmp = i; a[tmp] = a[tmp] op v   (Python's evaluation order)
            self.tmp += 1
            tmp = f"{_P}i{self.tmp}"
            arr = self.visit(t.value)
            first = ast.Assign([ast.Name(tmp, ast.Store())], self.visit(t.slice))
            load = ast.Call(ast.Name(f"{_P}ld", ast.Load()),
                            [arr, ast.Name(f"{_P}L", ast.Load()), ast.Name(tmp, ast.Load())], [])
            val = ast.BinOp(load, node.op, self.visit(node.value))
            call = ast.Call(ast.Name(f"{_P}st", ast.Load()),
                            [arr, ast.Name(f"{_P}L", ast.Load()), val,
                             ast.Name(tmp, ast.Load())], [])
            if not isinstance(t.value, ast.Name):
                raise Unsupported("an augmented store through an expression")
            return [ast.copy_location(first, node), ast.copy_location(ast.Expr(call), node)]
        node.value = self.visit(node.value)
        return node

    def visit_Subscript(self, node):
        if isinstance(node.ctx, ast.Load) and not _has_slice(node.slice):
            return ast.copy_location(ast.Call(
                ast.Name(f"{_P}ld", ast.Load()),
                [self.visit(node.value), ast.Name(f"{_P}L", ast.Load()),
                 self.visit(node.slice)], []), node)
        return self.generic_visit(node)

    def visit_Expr(self, node):
        v = node.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) \
                and _is_cuda(v.func.value, self.env) and v.func.attr == "syncthreads":
            if not self.is_kernel:
                raise Unsupported("syncthreads in a device function")
            if v.args or v.keywords:
                raise Unsupported("syncthreads with arguments")
            self.barriers += 1
            return [ast.parse(f"{_P}mark({_P}L)").body[0],
                    ast.copy_location(ast.Expr(ast.Yield(ast.Constant(self.barriers))), node)]
        return self.generic_visit(node)

    def visit_Return(self, node):
        if not self.is_kernel:
            return self.generic_visit(node)
        if node.value is not None:
            raise Unsupported("a kernel that returns a value")
        return [ast.parse(f"{_P}mark({_P}L)").body[0],
                ast.Expr(ast.Yield(ast.Constant(_EXIT))), node]

    def _loop_body(self, node):
        self.generic_visit(node)
        if self.is_kernel:
            # a switch after LOOP_LIMIT passes: the driver re-runs the launch on the greenlet
            # executor, whose watchdog tells a spin-wait from a long loop
            self.loops += 1
            c = f"{_P}n{self.loops}"
            guard = ast.parse(
                f"{c} += 1\nif {c} > {LOOP_LIMIT}:\n    {_P}mark({_P}L)\n    yield {_LOOP}\n"
            ).body
        else:       # a device function cannot switch: it stops, and the greenlet re-run
            self.loops += 1
            c = f"{_P}n{self.loops}"
            guard = ast.parse(f"{c} += 1\nif {c} > {LOOP_LIMIT}:\n    {_P}too_long()\n").body
        node.body = guard + node.body
        return [ast.parse(f"{c} = 0").body[0], node]

    visit_For = _loop_body
    visit_While = _loop_body

    def visit_Global(self, node):
        raise Unsupported("global statement")

    visit_Nonlocal = visit_Global

    def visit_Yield(self, node):
        raise Unsupported("yield in a kernel")

    def visit_Lambda(self, node):
        raise Unsupported("lambda in a kernel")

    def visit_FunctionDef(self, node):
        raise Unsupported("a nested function")

    def visit_Try(self, node):
        raise Unsupported("try in a kernel")


def _as_dtype(dtype):
    if isinstance(dtype, _nbt.Type):
        return np.dtype(_npsupport.as_dtype(dtype))
    try:
        return np.dtype(dtype)
    except TypeError:
        raise Unsupported(f"dtype {dtype!r}") from None


def _has_slice(s):
    if isinstance(s, ast.Slice):
        return True
    if isinstance(s, ast.Tuple):
        return any(isinstance(e, ast.Slice) for e in s.elts)
    return False


import numba.cuda as _CUDA_MOD  # noqa: E402  (the module the kernels name as ``cuda``)


def _env(fn):
    env = dict(fn.__globals__)
    cv = inspect.getclosurevars(fn)
    env.update(cv.nonlocals)
    return env


def _function_ast(fn):
    src = textwrap.dedent(inspect.getsource(fn))
    mod = ast.parse(src)
    fdef = mod.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise Unsupported("not a plain function definition")
    fdef.decorator_list = []
    a = fdef.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
        raise Unsupported("defaults, *args or keyword-only parameters")
    return fdef, src


class Plan:
    """A kernel rewritten for the compiled path: the generator (compiled lazily by Numba per
    argument types) and the block-wide allocations it needs."""

    def __init__(self, gen, shared, local, source, coll=()):
        self.gen = gen
        self.coll = list(coll)      # the op of each warp collective site (compiled_warp.OPS)
        self.shared = shared        # [(name, shape, numpy dtype)] in source order
        self.local = local
        self.source = source
        self.failed = {}            # argument type signature -> why Numba refused it
        self.compiled = False       # a launch has run on it (Numba compiled it)


def _compile_device(fn, devs, glb, depth):
    """A device function (``cuda.jit(device=True)``) as a compiled function taking the block
    context as its last argument; returns its name in the generated globals."""
    key = id(fn)
    name = devs.get(key)
    if name is not None:
        return name
    if depth > 8:
        raise Unsupported("device functions nested more than 8 deep")
    name = f"{_P}dev{len(devs)}_{fn.__name__}"
    devs[key] = name
    fdef, _ = _function_ast(fn)
    env = _env(fn)
    local_devs = _device_names(env, fdef, devs, glb, depth + 1)
    rw = _Rewrite(env, False, local_devs)
    fdef.body = [_unpack_ctx()] + [s for b in fdef.body for s in _as_list(rw.visit(b))]
    fdef.name = name
    fdef.args.args.append(ast.arg(f"{_P}C"))
    _check_env(fdef, env)
    ns = _namespace(env, glb)
    code = compile(ast.fix_missing_locations(ast.Module([fdef], [])),
                   f"<kernellab.sim.compiled {fn.__name__}>", "exec")
    exec(code, ns)
    glb[name] = njit(error_model="python")(ns[name])
    return name


def _device_key(f):
    """``"f"`` for a call ``f(...)``, ``"mod.f"`` for ``mod.f(...)``; None otherwise."""
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return None


def _device_names(env, fdef, devs, glb, depth):
    out = {}
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call):
            key = _device_key(node.func)
            if key is None:
                continue
            if isinstance(node.func, ast.Name):
                obj = env.get(key)
            else:               # a module's device function: kernellab.bf16.narrow(...)
                mod = env.get(node.func.value.id)
                obj = getattr(mod, node.func.attr, None) if inspect.ismodule(mod) else None
            if isinstance(obj, _simkernel.FakeCUDAKernel):
                if not getattr(obj, "_device", False):
                    raise Unsupported("a kernel launched from a kernel")
                out[key] = _compile_device(obj.fn, devs, glb, depth)
    return out


def _unpack_ctx():
    names = ", ".join([f"{_P}L"] + _CTX)
    return ast.parse(f"{names} = {_P}C").body[0]


def _as_list(x):
    return x if isinstance(x, list) else [x]


_SAFE_MODULES = {"math", "numpy", "numba", "cmath"}


def _check_env(fdef, env):
    """Refuse globals Numba would freeze differently from the greenlet path's live reads (a
    parameter or a local variable of the same name is not a global: a notebook's ``x`` does
    not stop a kernel with a parameter ``x``)."""
    local = {a.arg for a in fdef.args.args + fdef.args.kwonlyargs}
    local |= {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)
              and isinstance(n.ctx, (ast.Store, ast.Del))}
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in env \
                and node.id not in local:
            v = env[node.id]
            if isinstance(v, np.ndarray) or hasattr(v, "_ary"):
                raise Unsupported(f"the global array {node.id}")


def _namespace(env, glb):
    ns = dict(env)
    ns.update(glb)
    for k, v in list(ns.items()):
        if v is _CUDA_MOD:
            del ns[k]
        elif v is _gm.MODULE:
            ns[k] = math
        elif callable(v) and _STAND_IN.get(id(v)) is not None:   # from math import exp
            ns[k] = _STAND_IN[id(v)]
    return ns


# Python's math functions and the greenlet path's stand-ins -> compiled_math's stand-ins
_STAND_IN = {id(f): _cmath.BY_FUNCTION[f] for f in _cmath.BY_FUNCTION}
_STAND_IN.update({id(g): _cmath.BY_FUNCTION[f] for f, g in _gm.FUNCTIONS.items()
                  if f in _cmath.BY_FUNCTION})


_PLANS: dict = {}


def plan(kernel):
    """The kernel's :class:`Plan`, or the reason (a str) it runs on the greenlet executor;
    cached per kernel function."""
    fn = kernel.fn
    got = _PLANS.get(fn)
    if got is not None:
        return got
    try:
        got = _plan(fn)
    except Unsupported as exc:
        got = str(exc)
    except (OSError, TypeError, SyntaxError, IndentationError) as exc:
        got = f"no source to rewrite ({type(exc).__name__})"
    _PLANS[fn] = got
    return got


def _plan(fn):
    fdef, src = _function_ast(fn)
    env = _env(fn)
    glb = {f"{_P}ld": _ld, f"{_P}st": _st, f"{_P}mark": _mark, f"{_P}too_long": _too_long}
    glb.update({f"{_P}m_{k}": v for k, v in _cmath.FUNCS.items()})
    glb[f"{_P}view"] = _cmath.VIEW
    glb.update(_cw.GLOBALS)
    devs = {}
    dev_names = _device_names(env, fdef, devs, glb, 1)
    rw = _Rewrite(env, True, dev_names)
    body = [s for b in fdef.body for s in _as_list(rw.visit(b))]
    ctx = ", ".join([f"{_P}L"] + _CTX)
    body = [ast.parse(f"{_P}C = ({ctx})").body[0]] + body + [
        ast.parse(f"{_P}mark({_P}L)").body[0], ast.Expr(ast.Yield(ast.Constant(_EXIT)))]
    fdef.body = body
    fdef.name = f"{_P}kernel_{fn.__name__}"
    extra = [f"{_P}L"] + _CTX + [f"{_P}sh{k}" for k in range(len(rw.shared))] + \
        [f"{_P}lo{k}" for k in range(len(rw.local))] + [f"{_P}WI", f"{_P}WF"]
    fdef.args.args += [ast.arg(n) for n in extra]
    _check_env(fdef, env)
    ns = _namespace(env, glb)
    code = compile(ast.fix_missing_locations(ast.Module([fdef], [])),
                   f"<kernellab.sim.compiled {fn.__name__}>", "exec")
    exec(code, ns)
    # Python's error model: a division by zero raises here, and the greenlet re-run names it
    return Plan(njit(error_model="python")(ns[fdef.name]), rw.shared, rw.local, src, rw.coll)


# ----------------------------------------------------------------------------------------
# The driver


def usable(launch_mode, rng, want_trace, grid, block, kernel, dev_args, L):
    """The kernel's :class:`Plan` when this launch may take the compiled path, else the reason
    it does not (a str). ``dev_args``: the launch's device arguments; ``L``: the launch, its
    arguments wrapped."""
    how = _OPTS["compiled"]
    if how == "off":
        return "the compiled path is off (configure(compiled=...))"
    if launch_mode not in (0, 1):
        return "source sites are logged (a re-run that names lines, or a trace)"
    if rng is not None:
        return "threads run in a shuffled order"
    if want_trace:
        return "a trace is captured"
    if L.dynshared_size:
        return "dynamic shared memory"
    for d in dev_args:
        if not (hasattr(d, "_ary") or isinstance(d, (int, float, complex, np.number, np.bool_))):
            return f"an argument of type {type(d).__name__}"
    if any(r.flat is None for r in L.groots):
        return "an argument is a view the compiled path does not address"
    nthreads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
    p = plan(kernel)
    if isinstance(p, str):
        return p
    if how == "auto" and nthreads < MIN_THREADS and not p.compiled:
        return f"{nthreads} threads: fewer than {MIN_THREADS}, not worth compiling"
    return p


def arg_signature(args):
    return tuple((a.dtype.str, a.ndim, a.flags.c_contiguous) if isinstance(a, np.ndarray)
                 else type(a).__name__ for a in args)


def run_blocks(L, p, kernel_args, grid, block, deadline):
    """Run every block of launch ``L`` (its arguments wrapped: the analysis uses their roots)
    on the compiled path. ``kernel_args``: the numpy arrays (the device arrays' memory) and
    scalars the kernel takes. Raises :class:`Fallback`."""
    sig = arg_signature(kernel_args)
    if sig in p.failed:
        raise Fallback(p.failed[sig])
    lg = np.empty(LOG_CAP, np.int64)
    pos = np.zeros(2, np.int64)
    bx, by, bz = block
    nthreads = bx * by * bz
    seg = np.empty(nthreads * 4 + 16, np.int64)
    nseg = np.zeros(1, np.int64)
    LL = (lg, pos, seg, nseg, np.zeros((nthreads, 4), np.int64), np.zeros((nthreads, 2)))
    tids = [(tx, ty, tz) for tz in range(bz) for ty in range(by) for tx in range(bx)]
    gen = p.gen
    gd = grid
    blin = 0
    c = L.counters
    for gz in range(gd[2]):
        for gy in range(gd[1]):
            for gx in range(gd[0]):
                _block(L, p, gen, kernel_args, LL, tids, (gx, gy, gz), blin, block, grid, sig)
                blin += 1
                if time.monotonic() > deadline:
                    raise Fallback("ran past the watchdog")
    p.compiled = True
    return c


def _block(L, p, gen, kargs, LL, tids, ctaid, blin, block, grid, sig):
    lg, pos, _, _, WI, WF = LL
    work0 = L.begin_block(ctaid, blin)
    shared = []
    for name, shape, dtype in p.shared:
        arr = _poisoned(shape, dtype)
        L.shared_bytes += arr.nbytes
        if L.shared_bytes + L.dynshared_size > MAX_STATIC_SHARED:
            raise Fallback("static shared memory over the limit")
        L._new_shared(name, arr)
        shared.append(arr)
    nthreads = len(tids)
    local = [_poisoned((nthreads,) + shape, dtype) for _, shape, dtype in p.local]
    for arr in local:
        for t in range(nthreads):
            L.block_locals.append((t, arr[t]))
    gx, gy, gz = ctaid
    (b0, b1, b2), (g0, g1, g2) = block, grid
    pos[0] = pos[1] = 0
    extra = tuple(shared) + tuple(local) + (WI, WF)
    segs = []   # per resumption round: (threads, interval, warp-sync epochs, log ends)
    try:
        tx, ty, tz = tids[0]
        args0 = (*kargs, LL, tx, ty, tz, gx, gy, gz, b0, b1, b2, g0, g1, g2, 0, *extra)
        first = gen(*args0)         # compiles on the first call
        # the compiled overload's entry point: the same call without the per-call type dispatch
        ep = gen.overloads.get(tuple(gen.typeof_pyval(v) for v in args0))
        ep = gen if ep is None else ep.entry_point
        gens = [first] + [ep(*kargs, LL, tx, ty, tz, gx, gy, gz, b0, b1, b2, g0, g1, g2, t,
                             *extra) for t, (tx, ty, tz) in enumerate(tids) if t]
        epoch = (_cw.run_block if p.coll else _cw.run_plain)(L, p.coll, gens, LL, blin, segs,
                                                             Fallback)
    except Fallback:
        raise
    except Exception as exc:    # Numba's (or the wall-clock alarm's: the re-run re-arms it)
        why = f"Numba could not compile it ({type(exc).__name__})"
        p.failed[sig] = why
        raise Fallback(why) from None
    n = int(pos[0])
    L.epoch = epoch
    L.block_open = False
    if n and _a._mode:
        _analyse_block(L, lg[:n], segs, blin)
    L.end_block(work0)


def _analyse_block(L, raw, segs, blin):
    """The block's byte-address log as the executor's log entries, analysed."""
    ends = np.concatenate([s[3] for s in segs])
    lens = np.diff(ends, prepend=0)
    tid = np.repeat(np.concatenate([s[0] for s in segs]), lens)
    epoch = np.repeat(np.repeat(np.array([s[1] for s in segs], np.int64),
                                [len(s[0]) for s in segs]), lens)
    wep = np.repeat(np.concatenate([s[2] for s in segs]), lens)
    roots = L.roots
    starts = np.array([r.arr.__array_interface__["data"][0] for r in roots], np.int64)
    ends = starts + np.array([r.arr.nbytes for r in roots], np.int64)
    order = np.argsort(starts, kind="stable")
    s_sorted = starts[order]
    addr = raw & _RAW
    k = np.searchsorted(s_sorted, addr, "right") - 1
    kk = order[np.maximum(k, 0)]
    inside = (k >= 0) & (addr < ends[kk])
    if not inside.all():        # cuda.local arrays and arrays outside the arguments
        addr, kk, tid, epoch, raw, wep = addr[inside], kk[inside], tid[inside], \
            epoch[inside], raw[inside], wep[inside]
    if not len(addr):
        return
    isz = np.array([r.itemsize for r in roots], np.int64)
    aid = np.array([r.aid for r in roots], np.int64)
    off = (addr - starts[kk]) // isz[kk]
    key = (aid[kk] << AID_SHIFT) | off
    key |= np.where(raw & _W62, WRITE_BIT, 0)
    key |= np.where(raw & _A61, ATOMIC_BIT | WRITE_BIT, 0)
    L.analyse(key, np.full(len(key), blin, np.int64), epoch, tid, wep)
