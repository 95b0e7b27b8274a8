"""The compile helper subprocess seen from the parent (:class:`_Helper`, one per process).

In a ``sim``-tier process ``numba.cuda`` *is* the simulator (``NUMBA_ENABLE_CUDASIM=1`` is read
once, at import; the simulator's ``compile_ptx`` is ``None``), so compilation happens in a
helper subprocess (:mod:`kernellab.sim.ptx.child`): started lazily, kept alive between kernels,
closed at exit (:meth:`_Helper.close`, idempotent; a helper that failed to start is not retried
until it is closed). A process that will forbid itself new processes (the grader's worker,
:mod:`kernellab.machine.process_filter`) calls :meth:`_Helper.prepare` first: a small stand-in
waiting on the helper's stdin becomes the helper on the first compile, so the start costs a
bare Python, not a helper, when every kernel is in the PTX cache. If the helper dies during a
request it is restarted once (with a :class:`RuntimeWarning` carrying the tail of its
stderr); a second death, or no reply within :data:`COMPILE_TIMEOUT_S`, raises
:class:`~kernellab.sim.ptx.messages.PTXToolError`. In a process that forbade itself new
processes there is no restart: a dead helper's kernels report that the GPU-compile check
could not run.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from kernellab.sim.ptx.messages import PTXToolError

#: Seconds a single compile (or the helper's start) may take before the helper is killed.
COMPILE_TIMEOUT_S = 180.0

#: The helper program, run by path.
CHILD = Path(__file__).resolve().parent / "child.py"
#: The stand-in that becomes the helper (:meth:`_Helper.prepare`), run by path.
STANDIN = Path(__file__).resolve().parent / "standin.py"
#: Seconds the stand-in may take to say it is ready.
STANDIN_TIMEOUT_S = 20.0


def _child_command() -> list:
    """The helper's command line: :data:`CHILD` by path, or ``python -c`` of
    ``kernellab.sim.ptx._CHILD_SOURCE`` when that is set (a test of a helper that cannot
    start)."""
    from kernellab.sim import ptx

    source = ptx._CHILD_SOURCE
    return [sys.executable, "-c", source] if source else [sys.executable, str(CHILD)]


class _ChildDied(Exception):
    def __init__(self, message, retry=True):
        super().__init__(message)
        self.retry = retry


class _Helper:
    """The compile helper subprocess (one per parent process)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._proc = None
        self._stderr = None
        self.info: dict | None = None
        self.starts = 0
        self.restarts = 0
        self._owner_pid = None
        self._start_error: PTXToolError | None = None  # sticky until close()
        self._standin = None  # (Popen of the waiting stand-in, its stderr file)

    def _forget_if_forked(self):
        """After a fork the helper's pipes belong to the parent: start our own helper."""
        if self._owner_pid != os.getpid() and (self._proc is not None
                                               or self._standin is not None):
            self._proc = None
            self._stderr = None
            self._standin = None
            self.info = None

    @staticmethod
    def _env() -> dict:
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        # intrinsics numba-cuda lacks (cuda.dp4a), installed in the helper from this file
        env["KERNELLAB_CUDA_EXT"] = str(Path(__file__).resolve().parents[2] / "cuda_ext.py")
        return env

    def prepare(self) -> None:
        """Start now the stand-in that becomes the helper on the first compile (module
        docstring), and wait until it has forbidden itself new processes
        (:mod:`kernellab.sim.ptx.standin`), as the process that calls this is about to. A no-op
        while a helper or a stand-in runs, or with a test's ``_CHILD_SOURCE``; when the
        stand-in fails, none is kept (and in a process that then forbids new processes the
        first compile reports that the GPU-compile check could not run)."""
        from kernellab.sim import ptx

        with self._lock:
            self._forget_if_forked()
            if self._alive() or self._standin is not None or ptx._CHILD_SOURCE:
                return
            stderr = tempfile.TemporaryFile()
            try:
                # -I and "/": nothing of the caller's folder (a grading's work folder, which
                # the submission writes) or environment on its path
                proc = subprocess.Popen(
                    [sys.executable, "-I", str(STANDIN)], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=stderr, env=self._env(), close_fds=True,
                    cwd="/")
            except OSError:
                stderr.close()
                return
            self._owner_pid = os.getpid()
            self._standin = (proc, stderr)
            ready = select.select([proc.stdout], [], [], STANDIN_TIMEOUT_S)[0]
            if not ready or os.read(proc.stdout.fileno(), 6) != b"ready\n":
                proc.kill()
                self._drop_standin()

    def _drop_standin(self, standin=None):
        """End ``standin`` (default: the one kept) and forget the one kept."""
        standin, self._standin = standin or self._standin, None
        if standin is None:
            return
        proc, stderr = standin
        for f in (proc.stdin, proc.stdout):  # the stand-in sees the end of stdin, exits
            f.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
        stderr.close()

    def _start(self):
        if self._start_error is not None:
            raise self._start_error
        try:
            self._start_once()
        except PTXToolError as exc:
            self._start_error = exc  # a helper that cannot start will not start next time either
            raise

    def _start_once(self):
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
        self._owner_pid = os.getpid()
        standin, self._standin = self._standin, None
        if standin is not None and standin[0].poll() is None:
            self._proc, self._stderr = standin
            try:  # the line the stand-in waits for: it runs the helper on its pipes
                self._proc.stdin.write(b"go\n")
                self._proc.stdin.flush()
            except OSError:
                pass  # it died just now: the hello below says so
        else:
            self._drop_standin(standin)  # one that died: ended, and the helper started anew
            self._stderr = tempfile.TemporaryFile()
            try:
                self._proc = subprocess.Popen(
                    _child_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=self._stderr, env=self._env(), close_fds=True)
            except OSError as exc:  # e.g. a process that forbade itself new ones
                raise PTXToolError(f"the GPU compile helper could not be started: {exc}") \
                    from None
        self.starts += 1
        try:
            reply = self._exchange({"op": "hello", "sys_path": list(sys.path)})
        except _ChildDied as exc:
            self._kill()
            raise PTXToolError(f"the GPU compile helper did not start: {exc}") from None
        if not reply.get("ok"):
            self._kill()
            raise PTXToolError("the GPU compiler is not available in the compile helper: "
                               f"{reply.get('message')}")
        self.info = reply

    def _stderr_tail(self, n: int = 2000) -> str:
        f = self._stderr
        if f is None:
            return ""
        try:
            f.flush()
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def _read_exact(self, n: int, deadline: float, timeout_s: float) -> bytes:
        out = self._proc.stdout
        chunks, got = [], 0
        while got < n:
            if os.name == "posix":
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([out], [], [], left)[0]:
                    self._kill()
                    raise _ChildDied(f"no reply within {timeout_s:.0f} s (killed)",
                                     retry=False)
                data = os.read(out.fileno(), n - got)
            else:  # pragma: no cover - Windows pipes have no select
                data = out.read(n - got)
            if not data:
                try:
                    code = self._proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                raise _ChildDied(f"the helper exited (code {code}); stderr: "
                                 f"{self._stderr_tail() or '(empty)'}")
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def _exchange(self, msg: dict, timeout_s: float | None = None) -> dict:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._proc.stdin.write(struct.pack(">Q", len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            code = self._proc.poll()
            raise _ChildDied(f"the helper exited (code {code}); stderr: "
                             f"{self._stderr_tail() or '(empty)'}") from None
        timeout_s = COMPILE_TIMEOUT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        (n,) = struct.unpack(">Q", self._read_exact(8, deadline, timeout_s))
        return pickle.loads(self._read_exact(n, deadline, timeout_s))

    def _alive(self) -> bool:
        self._forget_if_forked()
        return self._proc is not None and self._proc.poll() is None

    def ensure_started(self) -> dict:
        with self._lock:
            if not self._alive():
                self._start()
            return self.info

    def request(self, msg: dict, timeout_s: float | None = None, retry: bool = True) -> dict:
        """Send ``msg``; on a helper death restart it once (warning), then give up.
        ``timeout_s``: seconds to wait for the reply (default :data:`COMPILE_TIMEOUT_S`);
        ``retry=False``: a death is not retried."""
        with self._lock:
            for attempt in (0, 1):
                if not self._alive():
                    self._start()
                try:
                    return self._exchange(msg, timeout_s)
                except _ChildDied as exc:
                    self._kill()
                    if not (exc.retry and retry):
                        raise PTXToolError(f"the GPU compile helper gave up on "
                                           f"{msg.get('name')!r}: {exc}") from None
                    if attempt:
                        raise PTXToolError(
                            f"the GPU compile helper died twice compiling {msg.get('name')!r}: "
                            f"{exc}") from None
                    self.restarts += 1
                    warnings.warn(f"the GPU compile helper died ({exc}); restarting it once",
                                  RuntimeWarning, stacklevel=4)
            raise AssertionError("unreachable")  # pragma: no cover

    def _kill(self):
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self):
        """Ask the helper to exit, then make sure it has; idempotent."""
        with self._lock:
            self._start_error = None
            self._forget_if_forked()
            self._drop_standin()
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                try:
                    data = pickle.dumps({"op": "exit"})
                    proc.stdin.write(struct.pack(">Q", len(data)) + data)
                    proc.stdin.flush()
                    proc.wait(timeout=5)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._kill()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._alive() else None


_helper = _Helper()
atexit.register(_helper.close)
