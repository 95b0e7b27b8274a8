"""Lab 9 ``torch-op``, worker side: each case's tensors and checks, and the timed calls, next to
the student's operator.

:func:`run_case` makes the case's arrays into tensors in its layout (padding around a strided
view is NaN: a read past the view shows), runs the case's check (``opcheck``, ``gradcheck``,
``compile``), calls the operator and a backward of the given upstream gradients, and records in
``info["problem"]`` what breaks the operator's contract (an output sharing an input's memory, an
input changed, no autograd history) for :meth:`grader.labs.torch_op.spec.TorchOp.check_call`.
:func:`measure_cpu`: forward + backward of the operator and of the unfused PyTorch composition,
interleaved in one process on one thread, fresh inputs every call, each of the operator's
results checked right after it returns (outside the timer), the last one saved for the
grader's re-check.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

#: at most this many characters of a PyTorch check's message are quoted
QUOTE = 400
STAT = ("y", "h", "rstd")
GRADS = ("dx", "dresidual", "dweight")


#: set by :func:`use_project_cache` (the in-notebook checks); the grader's worker never sets it
_PROJECT_CACHE = False


def use_project_cache() -> None:
    """This process is a notebook's (:meth:`grader.labs.torch_op.spec.TorchOp.in_notebook`):
    torch.compile keeps the project's cache (``.kernellab-cache/torch``, or the folders the
    environment names) instead of the current folder."""
    global _PROJECT_CACHE
    _PROJECT_CACHE = True


def _torch():
    from kernellab.topics.torch_support import compile_cache, require

    if _PROJECT_CACHE:
        compile_cache()
    else:
        # the grader's worker: the grading's own folder, whatever the environment says --
        # Inductor's cached artefacts are pickles, and one grading's must never load in
        # another's
        compile_cache(Path(os.environ.get("KERNELLAB_WORKDIR") or os.getcwd()) / "torch-cache",
                      force=True)
    return require()


def _stub(exc: BaseException) -> BaseException | None:
    """A ``NotImplementedError`` raised by the submission's own code (an untouched stub) in
    ``exc``'s chain (PyTorch's checks wrap what they catch), else None."""
    seen, stack = set(), [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, NotImplementedError):
            tb = e.__traceback__        # Dynamo keeps the error it caught without its frames
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is None or f"{os.sep}torch{os.sep}" not in tb.tb_frame.f_code.co_filename:
                return e
        stack += [e.__cause__, e.__context__]
    return None


def _first(exc: BaseException) -> str:
    """The message of a PyTorch check's error in one line, without the traceback PyTorch may
    append to it (a report quotes no traceback)."""
    text = str(exc)
    for cut in ("Traceback", "\n  File ", "(scroll up", "Set TORCHDYNAMO_VERBOSE",
                "from user code:"):
        text = text.split(cut)[0]
    text = " ".join(text.split())
    return text[:QUOTE] + ("..." if len(text) > QUOTE else "")


def tensor(a: np.ndarray, layout: str):
    """``a`` as a tensor of its dtype (bfloat16 through its bits) in ``layout``: "contiguous";
    "strided" (every other row of a wider NaN-padded buffer; a vector: every other element);
    "transposed" (the transpose of a contiguous (N, R) tensor; a vector stays contiguous)."""
    torch = _torch()
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a).copy())
    if layout == "strided":
        if t.ndim == 2:
            R, N = t.shape
            buf = torch.full((2 * R, N + 3), float("nan"), dtype=t.dtype)
            buf[::2, 1:N + 1] = t
            return buf[::2, 1:N + 1]
        buf = torch.full((2 * t.shape[0] + 1,), float("nan"), dtype=t.dtype)
        buf[1::2] = t
        return buf[1::2]
    if layout == "transposed" and t.ndim == 2:
        return t.T.contiguous().T
    return t


def to_numpy(t, out: np.ndarray) -> None:
    """Write tensor ``t`` into ``out`` (BF16 by its bits)."""
    torch = _torch()
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        out.view(np.uint16)[...] = t.view(torch.int16).numpy().view(np.uint16)
    else:
        out[...] = t.numpy()


def same_bits(t, before) -> bool:
    """``t``'s whole buffer (its base: the padding of a strided view too) bit for bit as in
    ``before`` (:func:`snapshot`)."""
    now = snapshot(t)
    return now.shape == before.shape and bool((now == before).all())


def snapshot(t):
    """The bytes of ``t``'s whole buffer (its ``_base`` when ``t`` is a view)."""
    base = (t._base if t._base is not None else t).detach()
    return base.contiguous().view(-1).view(_torch().uint8).clone()


def contract_problem(outs, ins: dict, before: dict, want_dtype) -> str | None:
    """What breaks the operator's contract in its returned ``outs`` and its inputs ``ins``
    (``before``: their values before the call), in plain words; None if nothing."""
    torch = _torch()
    if not isinstance(outs, (tuple, list)) or len(outs) != 3 or \
            not all(isinstance(o, torch.Tensor) for o in outs):
        return (f"add_rmsnorm must return three tensors (y, h, rstd), not "
                f"{type(outs).__name__}")
    y, h, rstd = outs
    x = ins["x"]
    stat = torch.float64 if x.dtype == torch.float64 else torch.float32
    for name, o, shape, dt in (("y", y, x.shape, want_dtype), ("h", h, x.shape, want_dtype),
                               ("rstd", rstd, x.shape[:1], stat)):
        if tuple(o.shape) != tuple(shape) or o.dtype != dt:
            return (f"{name} is {tuple(o.shape)} {o.dtype}, not {tuple(shape)} {dt}: check the "
                    "operator's outputs (and its fake kernel's, which must agree)")
    from kernellab.topics.torch_support import shares_memory

    named = dict(zip(STAT, outs))
    for oname, o in named.items():
        for iname, t in ins.items():
            if shares_memory(o, t):
                return (f"output {oname} shares memory with input {iname}: a custom op's outputs "
                        "must be new tensors (a view of an input, numpy's included, lets a "
                        "compiled graph write into the caller's tensor)")
        for pname, p in named.items():
            if pname < oname and shares_memory(o, p):
                return f"outputs {pname} and {oname} share memory: each must be its own tensor"
    for iname, t in ins.items():
        if not same_bits(t, before[iname]):
            return (f"the operator changed its input {iname}: its schema declares no mutation "
                    "(mutates_args=()), so compiled code may reuse the old values")
    return None


def run_case(op, a: dict, info: dict) -> None:
    """One case: the arrays ``a`` by name (inputs, ``eps``, ``layout``, ``check``, and the
    outputs to fill), what breaks the contract in ``info["problem"]``. PyTorch's warnings are
    silenced (its anomaly mode prints a forward's traceback beside an error the report already
    words)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_case(op, a, info)


def _run_case(op, a: dict, info: dict) -> None:
    torch = _torch()
    layout, check, eps = str(a["layout"]), str(a["check"]), float(a["eps"])
    grad = "grad_out" in a
    ins = {k: tensor(a[k], layout) for k in ("x", "residual", "weight")}
    before = {k: snapshot(v) for k, v in ins.items()}
    want_dtype = ins["x"].dtype
    for t in ins.values():
        t.requires_grad_(grad)
    args = (ins["x"], ins["residual"], ins["weight"], eps)
    if check == "opcheck":
        try:
            torch.library.opcheck(op, args)
        except Exception as exc:  # noqa: BLE001 - opcheck's verdict, quoted
            if _stub(exc):
                raise _stub(exc) from None
            info["problem"] = f"torch.library.opcheck: {_first(exc)}"
            return
    if check == "gradcheck":
        try:
            torch.autograd.gradcheck(lambda x, r, w: op(x, r, w, eps)[:2], args[:3])
        except Exception as exc:  # noqa: BLE001 - gradcheck's verdict, quoted
            if _stub(exc):
                raise _stub(exc) from None
            info["problem"] = (f"torch.autograd.gradcheck (float64, finite differences): "
                               f"{_first(exc)}")
            return
    fn = op
    if check == "compile":
        torch._dynamo.reset()
        fn = torch.compile(lambda x, r, w, e: op(x, r, w, e), fullgraph=True)
    try:
        outs = fn(*args)
    except Exception as exc:  # noqa: BLE001 - quoted in one line, without PyTorch's traceback
        if _stub(exc):
            raise _stub(exc) from None
        if check != "compile" and "Traceback" not in str(exc):
            raise       # the grader's own report: the line of the submission that raised
        what = "torch.compile(fullgraph=True) failed" if check == "compile" else \
            f"the operator raised {type(exc).__name__}"
        info["problem"] = f"{what}: {_first(exc)}"
        return
    problem = contract_problem(outs, ins, before, want_dtype)
    if problem:
        info["problem"] = problem
        return
    for name, t in zip(STAT, outs):
        to_numpy(t, a[name])
    if not grad:
        return
    y, h, _ = outs
    if y.grad_fn is None or h.grad_fn is None:
        info["problem"] = ("y and h carry no autograd history although the inputs require "
                           "grad: register the backward (add_rmsnorm.register_autograd)")
        return
    gy, gh = tensor(a["grad_out"], layout), tensor(a["grad_h"], layout)
    try:
        torch.autograd.backward([y, h], [gy, gh])
    except Exception as exc:  # noqa: BLE001 - quoted in one line, without PyTorch's traceback
        if _stub(exc):
            raise _stub(exc) from None
        if "Traceback" not in str(exc):
            raise
        info["problem"] = f"the backward raised {type(exc).__name__}: {_first(exc)}"
        return
    for iname, t in ins.items():
        if not same_bits(t, before[iname]):
            info["problem"] = (f"the backward changed the input {iname}: a backward returns "
                               "gradients and writes into nothing the forward was given")
            return
    for name, key in zip(GRADS, ("x", "residual", "weight")):
        g = ins[key].grad
        if g is None:
            info["problem"] = f"no gradient reached {key}: the backward returned None for it"
            return
        to_numpy(g, a[name])


def composition(x, residual, weight, eps: float):
    """The unfused PyTorch composition the lab's speed rule compares with: (y, h, rstd)."""
    torch = _torch()
    h = x + residual
    rstd = torch.rsqrt(h.pow(2).mean(-1) + eps)
    return h * rstd[:, None] * weight, h, rstd


def measure_cpu(spec, namespace: dict, plan: dict, workdir: Path) -> dict:
    """The measurements ``spec.rules_cpu`` judges: per-round speedups of the operator's forward
    + backward over :func:`composition`'s, and its backward / forward time ratios."""
    from kernellab import timing
    from grader.labs._timed import cpu_figures, threads_words
    from grader.spec import Case, CaseData

    torch = _torch()
    op = namespace["add_rmsnorm"]
    R, N, rounds, threads_ = (int(plan[k]) for k in ("R", "N", "rounds", "threads"))
    torch.set_num_threads(threads_)
    rng = np.random.default_rng()
    eps = 1e-6
    names = ("x", "residual", "weight", "grad_out", "grad_h")
    state: dict = {"fwd": [], "bwd": [], "wrong": 0, "checked": 0, "last": None}

    def fresh():
        arrays = [rng.standard_normal((R, N), dtype=np.float32),
                  rng.standard_normal((R, N), dtype=np.float32),
                  (1.0 + 0.5 * rng.standard_normal(N)).astype(np.float32),
                  rng.standard_normal((R, N), dtype=np.float32),
                  0.5 * rng.standard_normal((R, N), dtype=np.float32)]
        ts = [torch.from_numpy(v.copy()) for v in arrays]
        for t in ts[:3]:
            t.requires_grad_(True)
        return (arrays, ts)

    def run(f, ts, record):
        x, r, w, gy, gh = ts
        t0 = time.perf_counter()
        y, h, rstd = f(x, r, w, eps)
        t1 = time.perf_counter()
        torch.autograd.backward([y, h], [gy, gh])
        t2 = time.perf_counter()
        if record:
            state["fwd"].append(t1 - t0)
            state["bwd"].append(t2 - t1)
            state["outs"] = (y, h, rstd, x.grad, r.grad, w.grad)

    p = spec.planned(plan)["params"]

    def after(name, args):
        if name != "submission":
            return
        arrays, ts = args
        outs = {k: np.empty(v.shape, np.float32) for k, v in zip(STAT + GRADS,
                                                                 state["outs"])}
        for k, v in zip(STAT + GRADS, state["outs"]):
            to_numpy(v, outs[k])
        before = dict(zip(names, arrays))
        data = CaseData(inputs=before, outputs={}, call=[])
        state["checked"] += 1
        # every output whole: the work between calls is part of what the timed calls see (a
        # check of 64 sampled rows instead left the allocator in another state, and the
        # solution's backward / forward ratio swung from 1.5 to 2.3 between gradings)
        if not spec.compare(Case("timed", p, seed=-1), data, outs).ok:
            state["wrong"] += 1
        state["last"] = (before, {k: t.detach().numpy().copy() for k, t in zip(names, ts)},
                         outs)

    g = timing.interleaved({"submission": lambda a, ts: run(op, ts, True),
                            "composition": lambda a, ts: run(composition, ts, False)},
                           baseline="composition", setup=fresh, warmup=1, rounds=rounds,
                           threads_=threads_, after=after)
    t = {k: v.times for k, v in g.timings.items()}
    fwd, bwd = state["fwd"][-rounds:], state["bwd"][-rounds:]
    before, ins, outs = state["last"]
    np.savez(workdir / "recheck_before.npz", **before)
    np.savez(workdir / "recheck.npz", **ins, **outs)
    return {
        "speedup": [c / s for c, s in zip(t["composition"], t["submission"])],
        "backward_ratio": [b / f for b, f in zip(bwd, fwd)],
        **cpu_figures(threads_, f"R x N = {R} x {N} float32, {threads_words(threads_)} "
                                f"(torch and numba), {rounds} interleaved rounds, fresh inputs "
                                "per call", g.to_dict()["timings"]),
        "recheck": {"path": str(workdir / "recheck.npz"),
                    "before": str(workdir / "recheck_before.npz"), "params": p,
                    "inputs": list(names), "outputs": list(STAT + GRADS),
                    "nan_after_return": 0, "wrong_calls": state["wrong"],
                    "checked_calls": state["checked"]},
    }
