"""The sandboxed process that runs a submission (started by :mod:`grader.sandbox`).

``python -m grader.worker LAB SUBMISSION.py WORKDIR FD_IN FD_OUT``

It applies the lab's codegen profile and kernellab's thread settings *before* numba or numpy
load, imports the submission as a module (a real file, so ``numba.njit(cache=True)`` caches
it; compiled from its UTF-8 text, exactly the text the static rules checked, so an encoding
declaration cannot make Python run something else), and then answers one JSON request per line
on FD_IN with one JSON reply on FD_OUT. The submission's own prints go to stdout/stderr, which
the grader captures to files: they can never corrupt the protocol. Arrays travel as ``.npz``
files in WORKDIR.

Requests: ``{"op": "load"}``, ``{"op": "call", "fn", "in", "out", "outputs", "call",
"returns"}`` (``returns``: the outputs the function returns rather than writes),
``{"op": "perf", "plan", "out"}``, ``{"op": "exit"}``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
import traceback


def _reply(fd: int, obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_lines(fd: int):
    buf = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


#: Longest first line of a submission's exception message kept in a report.
MAX_MESSAGE = 300


def _message(exc: BaseException) -> str:
    """The first line of ``exc``'s message, cut at :data:`MAX_MESSAGE` characters, marked as the
    submission's own words (:func:`grader.source_map.protect`: the report never reads a
    location into them)."""
    from grader.source_map import protect

    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > MAX_MESSAGE:
        first = first[:MAX_MESSAGE] + "…"
    return protect(first)


def _user_frames(exc: BaseException, path: str) -> str:
    """``Type: message — at line N``: the exception's type, its message (:func:`_message`) and
    the innermost line of the submission in its traceback, as "line N" (the grader names the
    cell and quotes the line, :mod:`grader.source_map`), whatever the message says."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    where = f" — at line {frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {_message(exc)}{where}"


def _describe_safely(exc: BaseException, path: str, mem_limit: int) -> str:
    """:func:`_describe_exception`, for exceptions that fight back (a ``__str__`` that raises):
    the worker must answer whatever the submission raised."""
    try:
        return _describe_exception(exc, path, mem_limit)
    except BaseException:  # noqa: BLE001 - anything at all: the reply must go out
        try:
            name = type(exc).__name__
        except BaseException:  # noqa: BLE001
            name = "an exception"
        return f"raised {name} (its message could not be turned into text)"


#: Longest sim-tier hazard message kept in a report (a race names two threads, two lines, the
#: array and the address; a GPU compile error carries the compiler's words and the source line).
MAX_SIM_MESSAGE = 1500


def _describe_sim_error(exc: BaseException) -> str | None:
    """A sim-tier hazard (:mod:`kernellab.sim.errors`) as ``"<kind>: <message>"`` in one line
    (``race: ctaid=(0, 0, 0): race on shared array shared0[3, 5] ...``), so the report says what
    the GPU would have done wrong; a ``NotImplementedError`` inside a kernel (an untouched lab's
    kernel) reads "not implemented"; an NPU simulator error (:mod:`kernellab.npu.errors`) reads
    ``"<Class>: <its whole message>"``. None for anything else. The errors module imports nothing
    heavy; a worker of a CPU lab never raises these."""
    errors = sys.modules.get("kernellab.sim.errors")
    ptx = sys.modules.get("kernellab.sim.ptx")
    npu = sys.modules.get("kernellab.npu.errors")
    if npu is not None and isinstance(exc, npu.NPUError):
        # an NPU hazard: its class and its whole message (the line, then why: an overflow's
        # allocation table follows), not just the first 300 characters of a Python error
        text = " / ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
        if len(text) > MAX_SIM_MESSAGE:
            text = text[:MAX_SIM_MESSAGE] + "…"
        return f"{type(exc).__name__}: {text}"
    if ptx is not None and isinstance(exc, ptx.PTXToolError):
        return ("the GPU-compile check could not run (a problem of the grading machine, not of "
                "the kernel): " + " ".join(str(exc).split())[:MAX_SIM_MESSAGE])
    if errors is None or not isinstance(exc, errors.SimError):
        return None
    cause = exc.__cause__
    if isinstance(exc, errors.KernelError) and isinstance(cause, NotImplementedError):
        return _not_implemented(cause)
    if (isinstance(exc, errors.KernelError) and cause is not None
            and not isinstance(cause, errors.SimError) and getattr(exc, "where", None)):
        # an exception the kernel raised: its message is the submission's words (cut and
        # protected from being read as locations, :func:`_message`), the line the engine's
        line = f" (line {exc.line})" if getattr(exc, "line", None) else ""
        return f"{exc.kind}: {exc.where}: {type(cause).__name__}: {_message(cause)}{line}"
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = " / ".join(lines)
    if len(text) > MAX_SIM_MESSAGE:
        text = text[:MAX_SIM_MESSAGE] + "…"
    return f"{exc.kind}: {text}"


def _not_implemented(exc: NotImplementedError) -> str:
    """An untouched stub: ``not implemented: <its hint>`` (:func:`_message`)."""
    msg = _message(exc)
    return f"not implemented: {msg}" if msg else "not implemented"


#: a call that starts a process or runs a program, as the line raising it reads
_SPAWN_CALL = re.compile(r"\b(fork\w*|exec[lv]\w*|posix_spawnp?|spawn\w*|popen|system|"
                         r"Popen|run|call|check_call|check_output|getoutput|getstatusoutput)\s*\(")


def _starting_a_process(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``EPERM`` of the seccomp filter refusing a new process: raised
    inside ``subprocess``, ``multiprocessing``, ``pty`` or ``os.popen``, or by a line that calls
    a process-starting function (``os.fork()``, ``os.execv(...)`` ...), not any EPERM."""
    if not isinstance(exc, PermissionError) or exc.errno != errno.EPERM:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if any(os.path.basename(f.filename) in ("subprocess.py", "pty.py", "os.py")
           or "multiprocessing" in f.filename for f in frames):
        return True
    return bool(frames and _SPAWN_CALL.search(frames[-1].line or ""))


def _describe_exception(exc: BaseException, path: str, mem_limit: int) -> str:
    sim = _describe_sim_error(exc)
    if sim is not None:
        return sim
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == errno.EFBIG:
        return ("wrote more than the grader allows into one file (printing without end?); "
                "print less")
    if _NO_NEW_PROCESSES and _starting_a_process(exc):
        from kernellab.machine.process_filter import REFUSED

        return f"{_user_frames(exc, path)}: {REFUSED}"
    if isinstance(exc, MemoryError):
        allows = (f" (the grader allows {mem_limit / 2**30:.1f} GiB)" if mem_limit else "")
        return f"ran out of memory{allows}: does it allocate without bound?"
    if isinstance(exc, SystemExit):
        from grader.source_map import protect

        code = repr(exc.code)
        code = code if len(code) <= MAX_MESSAGE else code[:MAX_MESSAGE] + "…"
        return f"called exit()/sys.exit() (code {protect(code)}): a kernel must return normally"
    if isinstance(exc, NotImplementedError):
        return _not_implemented(exc)
    if isinstance(exc, RecursionError):
        return "exceeded the recursion limit"
    try:
        from numba.core.errors import TypingError
        if isinstance(exc, TypingError):
            # numba's own words without its pipeline chatter, and the line it points at (as
            # "line N": the grader names the cell and quotes it, grader.source_map)
            text = []
            for t in str(exc).strip().splitlines():
                t = t.strip()
                if t.startswith("File "):  # then numba's excerpt of the code: the location
                    break                  # is added once below, the line quoted by it
                if t and not t.startswith(("Failed in ", "During:")):
                    text.append(t)
            where = ""
            loc = getattr(exc, "loc", None)
            if getattr(loc, "filename", None) == path and getattr(loc, "line", None):
                where = f" — at line {loc.line}"
            return ("numba could not compile it: " + " ".join(text[:3])[:400]
                    + where)
    except ImportError:  # pragma: no cover
        pass
    return _user_frames(exc, path)


def _kind(exc: BaseException) -> str:
    try:
        return str(type(exc).__name__)
    except BaseException:  # noqa: BLE001
        return "exception"


def _signature(ns: dict, name: str, params: list):
    """``{"params": [...], "binds": bool, "jit": ...}`` for ``ns[name]`` (a numba
    dispatcher's or a torch custom op's Python function too): its parameter names, whether
    the lab's call ``name(*params)`` binds to them (defaults and ``*args`` count), and what
    it is:
    ``"python"``, ``"cpu-jit"`` (an ``@njit`` dispatcher) or ``"cuda-kernel"`` (a
    ``@cuda.jit`` kernel); None if it is missing, "not callable" if it is not a function."""
    import inspect

    obj = ns.get(name)
    if obj is None:
        return None
    if not callable(obj):
        return "not callable"
    try:
        # the Python function behind a numba dispatcher (py_func) or a torch.library custom
        # op (CustomOpDef._init_fn, whose own signature is (*args, **kwargs))
        sig = inspect.signature(getattr(obj, "py_func", None) or getattr(obj, "_init_fn", None)
                                or obj)
        jitted = hasattr(obj, "py_func")
    except Exception:  # noqa: BLE001 - whatever the object does, the signature is unknown
        return "unknown"
    try:
        sig.bind(*params)
        binds = True
    except TypeError:
        binds = False
    kind = type(obj).__name__
    jit = ("cuda-kernel" if "CUDA" in kind or "Kernel" in kind
           else "cpu-jit" if jitted else "python")
    return {"params": [str(p) for p in sig.parameters.values()], "binds": binds, "jit": jit}


#: at most this many of the submission's own functions are listed back (a missing function's
#: report names them: a misspelt name is the usual cause)
MAX_DEFINED = 40


def _defined(ns: dict, module: str = "submission") -> dict:
    """The functions (numba dispatchers and kernels too) the submission itself defines, by name:
    ``{name: [parameter, ...]}``; what it imported is left out (functions of another module
    than ``module``: ``"submission"`` in the worker, ``"__main__"`` in a notebook). Never
    raises."""
    import inspect

    out = {}
    for name, obj in list(ns.items()):
        if len(out) >= MAX_DEFINED:
            break
        try:
            if name.startswith("__") or not callable(obj) or isinstance(obj, type):
                continue
            func = obj
            for attr in ("py_func", "fn"):  # a numba dispatcher, a sim-tier kernel
                inner = getattr(obj, attr, None)
                if inner is not None and hasattr(inner, "__code__"):
                    func = inner
                    break
            if getattr(func, "__module__", None) != module:
                continue
            params = [str(p)[:40] for p in inspect.signature(func).parameters.values()][:12]
        except Exception:  # noqa: BLE001 - whatever the object does, it is left out
            continue
        out[str(name)[:60]] = params
    return out


#: where the worker writes the Python stack when it crashes or the grader asks (SIGUSR1, just
#: before a time-out kills it): :meth:`grader.sandbox.Worker.where_stopped` reads it
STACK_FILE = "stack.txt"


def _dump_stack_on_signals(workdir: str) -> None:
    """Python's faulthandler, writing into ``workdir/STACK_FILE``: on a fatal signal (SIGSEGV,
    SIGFPE, SIGABRT, SIGBUS, SIGILL) and on SIGUSR1. Its handler is C code, so it runs even
    inside a compiled loop; the stack holds Python frames only, so the report can name the
    line a hang or crash was at in Python code, and for ``@njit`` code at most the Python line
    that called it."""
    import faulthandler
    import signal

    f = open(os.path.join(workdir, STACK_FILE), "w")  # noqa: SIM115 - open for the process
    faulthandler.enable(file=f)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=False)
    _dump_stack_on_signals.file = f  # kept open (and referenced) for the process's life


#: True once this worker forbids itself new processes (:func:`_forbid_new_processes`)
_NO_NEW_PROCESSES = False


def _forbid_new_processes(spec) -> None:
    """Start what the grading needs to start later (``LabSpec.before_submission``), then
    install :mod:`kernellab.machine.process_filter`'s seccomp filter; or neither when the
    sandbox is off (``KERNELLAB_SANDBOX=none``), the lab's grading starts processes itself
    (:meth:`grader.spec.LabSpec.forbids_new_processes`) or the platform has no seccomp: then
    the worker's other limits remain (the report and ``kernellab doctor`` say which)."""
    global _NO_NEW_PROCESSES
    from grader.sandbox import sandbox_off
    from kernellab.machine import process_filter

    if (sandbox_off() or not spec.forbids_new_processes()
            or process_filter.unavailable() is not None):
        return
    spec.before_submission()
    try:
        process_filter.forbid_new_processes()
    except (RuntimeError, OSError):
        spec.not_forbidden_after_all()
        return
    _NO_NEW_PROCESSES = True


def main(argv: list[str]) -> int:
    lab_id, sub_path, workdir, fd_in, fd_out = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    mem_limit = int(os.environ.get("KERNELLAB_GRADER_MEM", 0))
    _dump_stack_on_signals(workdir)
    import kernellab  # noqa: F401  first: thread settings before numpy/numba load
    from grader.labs import get_spec_class  # imports numpy, never numba
    from grader.spec import CaseData
    from grader import npz
    from kernellab import codegen

    spec_cls = get_spec_class(lab_id)
    codegen.apply(spec_cls.codegen)  # before numba compiles anything (the grader removed any
    # NUMBA_* settings it inherited, so the profile is exactly the lab's)
    import warnings

    import numpy as np

    try:  # numba's advice about parallel=True is noise in a grading report
        from numba.core.errors import NumbaPerformanceWarning

        warnings.simplefilter("ignore", NumbaPerformanceWarning)
    except ImportError:  # pragma: no cover
        pass
    spec = spec_cls()
    spec.worker_module()  # before the submission loads: what it binds cannot be swapped
    _forbid_new_processes(spec)  # before the submission loads
    ns: dict = {}
    entry: dict = {}
    for req in _read_lines(fd_in):
        op = req.get("op")
        if op == "exit":
            return 0
        try:
            if op == "load":
                import importlib.util

                t0 = time.perf_counter()
                mspec = importlib.util.spec_from_file_location("submission", sub_path)
                module = importlib.util.module_from_spec(mspec)
                sys.modules["submission"] = module
                with open(sub_path, "rb") as f:
                    text = f.read().decode("utf-8")
                # compiled from the text (a str: any coding declaration is ignored), never by
                # the import system, which would decode the bytes by such a declaration
                code = compile(text, sub_path, "exec", dont_inherit=True)
                exec(code, vars(module))
                ns = vars(module)
                # the required functions as the module defined them: the grader calls these
                # objects for the cases and the timed calls alike, so a submission that
                # rebinds one of its own globals between calls cannot time another function
                # than the one graded
                entry = {f: ns[f] for f in req["functions"] if f in ns}
                _reply(fd_out, {"ok": True, "seconds": time.perf_counter() - t0,
                                "codegen": codegen.active(),
                                "no_new_processes": _NO_NEW_PROCESSES,
                                "signatures": {f: _signature(ns, f, p)
                                               for f, p in req["functions"].items()},
                                "defined": _defined(ns)})
            elif op == "compile":
                # Compile a numba entry point for the given argument types without running it,
                # so compilation has its own budget and a hang shows up as a hang.
                fn = entry.get(req["fn"]) or ns[req["fn"]]
                if not hasattr(fn, "compile") or not hasattr(fn, "py_func"):
                    _reply(fd_out, {"ok": True, "compiled": False})
                    continue
                if getattr(fn, "signatures", None) and not getattr(fn, "_can_compile", True):
                    # @njit([explicit signatures]) compiled them when the module loaded, and
                    # numba refuses to compile more: nothing left to do here
                    _reply(fd_out, {"ok": True, "compiled": True, "seconds": 0.0})
                    continue
                import numba

                t0 = time.perf_counter()
                for path in req["in"]:
                    arrays = npz.load(path)
                    for name, (shape, dtype) in req["outputs"].items():
                        arrays[name] = np.empty(tuple(shape), dtype=np.dtype(dtype))
                    scalars = req.get("scalars") or {}
                    fn.compile(tuple(numba.typeof(arrays[n] if n in arrays else scalars[n])
                                     for n in req["call"]))
                _reply(fd_out, {"ok": True, "compiled": True, "seconds": time.perf_counter() - t0})
            elif op == "call":
                fn = entry.get(req["fn"]) or ns[req["fn"]]
                arrays = npz.load(req["in"])
                arrays.update(CaseData({}, {k: (tuple(s), d) for k, (s, d)
                                            in req["outputs"].items()}, []).allocate_outputs())
                scalars = req.get("scalars") or {}
                args = [arrays[n] if n in arrays else scalars[n] for n in req["call"]]
                with spec.call_probe(arrays) as info:  # e.g. the GPU labs' kernel launches
                    t0 = time.perf_counter()
                    ret = spec.run_call(fn, args, req["call"], info)
                    dt_s = time.perf_counter() - t0
                wrong = CaseData({}, {k: (tuple(s), d) for k, (s, d) in req["outputs"].items()},
                                 [], returns=list(req.get("returns") or [])
                                 ).take_returned(ret, arrays)
                if wrong:
                    _reply(fd_out, {"ok": False, "error": wrong})
                    continue
                npz.save(req["out"], arrays)
                _reply(fd_out, {"ok": True, "seconds": dt_s, "info": info,
                                "returned": None if ret is None else type(ret).__name__})
            elif op == "perf":
                from pathlib import Path

                measured = spec.measure({**ns, **entry}, req["plan"], Path(workdir))
                _reply(fd_out, {"ok": True, "measured": measured})
            else:
                _reply(fd_out, {"ok": False, "error": f"unknown request {op!r}"})
        except BaseException as exc:  # the submission's failure, reported in plain words
            _reply(fd_out, {"ok": False, "error": _describe_safely(exc, sub_path, mem_limit),
                            "kind": _kind(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
