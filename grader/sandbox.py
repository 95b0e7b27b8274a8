"""Run a submission in a separate, bounded process (the grader side of :mod:`grader.worker`).

Isolation, as far as a plain process allows (no containers on students' laptops):

* a new session and process group, killed as a whole on a time-out;
* ``RLIMIT_AS`` (address space: the memory limit), ``RLIMIT_CORE`` = 0, ``RLIMIT_FSIZE``
  (no file bigger than the limit) and a CPU-time cap;
* its own working directory; its stdout/stderr captured to files and shown, trimmed, in the
  report; the protocol runs over two private pipes;
* wall-clock limits per request: loading/compiling, each correctness call, the performance
  phase — each a separate budget, so a 60-second JIT compile never counts as run time.

Where the platform offers it, the worker also runs inside an OS sandbox (:func:`os_sandbox`):
bubblewrap (``bwrap``, Debian's ``bubblewrap`` package; the test target installs it) gives it
no network (a network namespace of its own), IPC and process-ID namespaces of its own (no other
process of the machine in its ``/proc``), no capabilities (also when the grader runs as root),
the whole filesystem
read-only except its work directory and the caches it must write (its submission's folder, the
codegen cache), a private ``/tmp``, the instructor's hidden-case file replaced by an empty one,
and death with the grader. ``KERNELLAB_SANDBOX=none`` turns it off; ``kernellab doctor`` says
which is in force. The worker then forbids itself new processes
(:mod:`kernellab.machine.process_filter`, a seccomp filter; not on the gpu tier, nor for a lab
whose grading runs programs itself).
What it does not do: stand against a hostile user with root on the same machine.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_PROJECT_ROOT = Path(__file__).resolve().parent.parent


#: bubblewrap's options for every worker (the module docstring says what each gives)
BWRAP_BASE = ("--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
              "--tmpfs", "/tmp", "--unshare-net", "--unshare-ipc", "--unshare-pid",
              "--cap-drop", "ALL", "--die-with-parent")


def _needed_under_tmp() -> list[str]:
    """What the worker must read that may lie under ``/tmp`` (which the sandbox replaces by an
    empty one): the course checkout and the Python installation (a clone in a temporary
    folder, as CI makes)."""
    out = []
    for p in (_PROJECT_ROOT, Path(sys.prefix), Path(sys.base_prefix),
              Path(os.path.realpath(sys.executable)).parent):
        p = Path(os.path.realpath(p))
        if p.is_relative_to("/tmp") and str(p) not in out:
            out.append(str(p))
    return out


@functools.lru_cache(maxsize=1)
def _bwrap() -> str | None:
    """The path of a ``bwrap`` that runs a command here (checked once), or None."""
    exe = shutil.which("bwrap")
    if not exe:
        return None
    try:
        ok = subprocess.run([exe, *BWRAP_BASE, "--", "/bin/true"], capture_output=True,
                            timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return exe if ok else None


def sandbox_off() -> bool:
    """``KERNELLAB_SANDBOX=none``: no OS sandbox and no process filter for the worker."""
    return os.environ.get("KERNELLAB_SANDBOX", "").lower() == "none"


def os_sandbox() -> str:
    """``"bubblewrap"`` when workers run inside it here, else ``"none"`` (resource limits
    only): no ``bwrap``, one that cannot make namespaces (a container without the
    privilege), or ``KERNELLAB_SANDBOX=none``."""
    if sandbox_off():
        return "none"
    return "bubblewrap" if _bwrap() else "none"


def new_processes() -> str:
    """Whether the worker may start processes, in words for ``kernellab doctor``: refused by
    :mod:`kernellab.machine.process_filter`'s seccomp filter (except where a lab's grading
    needs them), or allowed and why."""
    if sandbox_off():
        return "allowed (KERNELLAB_SANDBOX=none)"
    from grader.labs import LABS, get_spec_class
    from kernellab.machine.process_filter import unavailable

    reason = unavailable()
    if reason is not None:
        return f"allowed ({reason})"
    exempt = [k for k in LABS if get_spec_class(k).starts_processes]
    return ("refused (seccomp filter), except on the gpu tier"
            + "".join(f" and in {lab}" for lab in exempt))


def sandboxed(cmd: list[str], writable=(), hidden=()) -> list[str]:
    """``cmd`` run inside the OS sandbox when there is one (:func:`os_sandbox`): ``writable``
    folders bound read-write (created first), each ``hidden`` file replaced by an empty one."""
    if os_sandbox() != "bubblewrap":
        return list(cmd)
    args = [_bwrap(), *BWRAP_BASE]
    for r in _needed_under_tmp():
        args += ["--ro-bind", r, r]
    for w in writable:
        Path(w).mkdir(parents=True, exist_ok=True)
        args += ["--bind", str(w), str(w)]
    for h in hidden:
        if Path(h).exists():
            args += ["--ro-bind", "/dev/null", str(Path(h).resolve())]
    return args + ["--", *cmd]


class WorkerDied(RuntimeError):
    """The worker process ended or was killed; ``reason`` is in plain words."""


class WorkerTimeout(WorkerDied):
    pass


@dataclass
class Limits:
    """``memory_bytes``: the address-space limit (RLIMIT_AS), or None for none (the gpu tier:
    the CUDA driver reserves far more virtual address space than it uses, and ``cuInit`` fails
    under such a limit)."""

    memory_bytes: int | None
    cpu_seconds: int = 3600
    file_bytes: int = 256 << 20


def _capped(which: int, soft: int, hard: int | None = None) -> tuple[int, int]:
    """(soft, hard) for setrlimit, never above a hard limit the grader itself already runs under
    (a shared login node or a container may impose one; raising it would fail)."""
    hard = soft if hard is None else hard
    _, cur_hard = resource.getrlimit(which)
    if cur_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur_hard), min(hard, cur_hard)
    return soft, hard


def _preexec(limits: Limits):
    # computed here, in the grader, so the child only calls setrlimit
    settings = [
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_FSIZE, _capped(resource.RLIMIT_FSIZE, limits.file_bytes)),
        (resource.RLIMIT_CPU, _capped(resource.RLIMIT_CPU, limits.cpu_seconds,
                                      limits.cpu_seconds + 5)),
    ]
    if limits.memory_bytes is not None:
        settings.append((resource.RLIMIT_AS, _capped(resource.RLIMIT_AS, limits.memory_bytes)))

    def apply():
        for which, value in settings:
            resource.setrlimit(which, value)
    return apply


#: a frame of faulthandler's dump: ``  File "/path/submission.py", line 12 in gemm``
_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+) in (?P<fn>[\w<>.]+)')


class Worker:
    """One sandboxed worker process for one submission of one lab."""

    MAX_REPLY = 64 << 20  # bytes: a reply is a line of JSON (the measurements at most)

    def __init__(self, lab_id: str, submission: Path, workdir: Path, limits: Limits,
                 cpu_only: bool = False, tier: str | None = None, writable=(), hidden=()):
        """``tier``: the device tier the worker must use, as the grader chose it ("cpu", "sim"
        and "npu" run on the simulator, "gpu" on the GPU); ``cpu_only=True`` is ``tier="cpu"``.
        None: the worker chooses for itself (a driver probe). ``writable``: folders besides
        ``workdir`` the worker may write (its caches); ``hidden``: files it must not read (the
        hidden-case file), both for the OS sandbox (:func:`sandboxed`)."""
        self.workdir = workdir
        self.limits = limits
        self.submission = str(submission)
        self.stdout_path = workdir / "stdout.txt"
        self.stderr_path = workdir / "stderr.txt"
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        env = {k: v for k, v in os.environ.items()
               # the lab's codegen profile and thread counts are the grader's to set, not
               # whatever the calling shell or notebook exported; so are the sim tier's checks
               # (KERNELLAB_SIM_CHECKS=fast would drop the race detector and the counters)
               # torch.compile's cache folders too: the worker uses its own (a shared one
               # would load another grading's pickled artefacts)
               if not k.startswith(("NUMBA_", "KERNELLAB_SIM_", "TORCHINDUCTOR_", "TRITON_"))}
        env.pop("KERNELLAB_HIDDEN_SEED", None)  # the instructor's secret stays with the grader
        tier = "cpu" if cpu_only else tier
        if tier in ("cpu", "sim", "npu"):  # no CUDA driver probe (cuInit) under the memory limit
            env["KERNELLAB_DEVICE"] = "sim"
        elif tier == "gpu":  # the grader's choice, not a second probe that might disagree
            env["KERNELLAB_DEVICE"] = "gpu"
        # never an empty entry (the current folder) on its path
        env["PYTHONPATH"] = os.pathsep.join(
            [str(_PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["KERNELLAB_WORKDIR"] = str(workdir)
        env["KERNELLAB_GRADER_MEM"] = str(limits.memory_bytes or 0)  # 0: no limit
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        from kernellab.codegen import cache_base

        env["KERNELLAB_CACHE_DIR"] = cache_base()  # the same folder, found without writing
        cmd = sandboxed([sys.executable, "-m", "grader.worker", lab_id, str(submission),
                         str(workdir), str(req_r), str(resp_w)],
                        writable=[workdir, cache_base(), *writable], hidden=hidden)
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                cmd,
                # run from the course's folder (read-only in the sandbox), not the work folder:
                # `-m` puts the current folder first on sys.path, and a worker restarted after a
                # crash must not import what the last one wrote (nor read numba's config there)
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=str(_PROJECT_ROOT), env=env,
                pass_fds=(req_r, resp_w), start_new_session=True,
                preexec_fn=_preexec(limits))
        os.close(req_r)
        os.close(resp_w)
        self._buf = b""

    def request(self, obj: dict, timeout: float) -> dict:
        """Send one request; wait at most ``timeout`` seconds for the reply.

        Raises WorkerTimeout (process killed) or WorkerDied (process gone, with the reason).
        """
        try:
            os.write(self._req_w, (json.dumps(obj) + "\n").encode())
        except BrokenPipeError:
            raise WorkerDied(self._death_reason()) from None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                where = self.where_stopped(ask=True)
                self.kill()
                raise WorkerTimeout(f"did not finish within {timeout:g} s (an endless loop, or "
                                    f"far too slow?){where}")
            ready, _, _ = select.select([self._resp_r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._resp_r, 1 << 16)
                if not chunk:
                    raise WorkerDied(self._death_reason())
                self._buf += chunk
                if len(self._buf) > self.MAX_REPLY:
                    self.kill()
                    raise WorkerDied("sent the grader a reply far too large to be its own: "
                                     "was the grading process tampered with?")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerDied("sent the grader a reply it could not read: was the grading "
                             "process tampered with?")
        return reply

    def _death_reason(self) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        if rc is not None and rc > 128 and os.path.basename(self.proc.args[0]) == "bwrap":
            rc = 128 - rc  # bubblewrap exits 128 + N when its child dies of signal N
        if rc is not None and rc < 0:
            sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
            if sig == "SIGXCPU":
                return "was stopped: it used more CPU time than the grader allows"
            if sig == "SIGXFSZ":
                return ("was stopped: it wrote more than the grader allows into one file "
                        "(printing without end?)")
            if sig == "SIGKILL":
                return ("was killed (SIGKILL): usually the operating system ran out of memory "
                        "for it")
            return (f"crashed with signal {sig} (e.g. an out-of-bounds write in compiled code)"
                    + self.where_stopped())
        return f"ended the grading process itself (exit status {rc}): a kernel must return normally"

    def where_stopped(self, ask: bool = False) -> str:
        """`` — it was at line N of FN when it stopped``: the innermost frame of the submission
        in the stack the worker's faulthandler wrote (:data:`grader.worker.STACK_FILE`; with
        ``ask``, first request one with SIGUSR1 and wait up to a second for it). Empty when no
        line of the submission was on the stack (a compiled function the grader called
        directly) or the worker wrote none."""
        from grader.worker import STACK_FILE  # a stdlib-only module: cheap to import

        path = self.workdir / STACK_FILE
        if ask and self.proc.poll() is None:
            try:
                size = path.stat().st_size
                os.kill(self._python_pid(), signal.SIGUSR1)
            except OSError:
                return ""
            t_end = time.monotonic() + 1.0
            while time.monotonic() < t_end:
                time.sleep(0.02)
                try:
                    if path.stat().st_size > size:
                        time.sleep(0.05)  # the dump is a few short writes
                        break
                except OSError:
                    return ""
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        last = text.rsplit("most recent call first", 1)[-1]  # the newest dump only
        for m in _FRAME.finditer(last):  # innermost first
            if m.group("file") == self.submission:
                fn = m.group("fn")
                of = "" if fn.startswith("<") else f" of {fn}"  # <module>: top-level code
                return f" — it was at line {m.group('line')}{of} when it stopped"
        return ""

    def _python_pid(self) -> int:
        """The worker's Python process: the one started, or the first process below bubblewrap
        that runs ``grader.worker`` (below bubblewrap's own init in its PID namespace; signals
        sent to bubblewrap would end the sandbox, not ask for a stack)."""
        pid = self.proc.pid
        if os.path.basename(self.proc.args[0]) != "bwrap":
            return pid
        todo = [pid]
        for _ in range(8):  # a few levels: bubblewrap, its init, the worker
            kids = []
            for p in todo:
                try:
                    kids += Path(f"/proc/{p}/task/{p}/children").read_text().split()
                except OSError:
                    pass
            for k in kids:
                try:  # bubblewrap's init is a fork of bubblewrap: its argv[0] is bwrap's
                    argv = Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if os.path.basename(argv[0]) != b"bwrap" and b"grader.worker" in argv:
                    return int(k)
            todo = kids
        return pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        """Ask the worker to exit, kill it if it does not, close the pipes. Idempotent (a file
        descriptor closed twice could be someone else's by then)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if self.proc.poll() is None:
            try:
                os.write(self._req_w, b'{"op": "exit"}\n')
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for fd in (self._req_w, self._resp_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def output_tail(self, limit: int = 1500) -> str:
        """The last ``limit`` characters the submission printed (stdout then stderr). Reads only
        the end of each file: a submission may print hundreds of megabytes."""
        parts = []
        for p in (self.stdout_path, self.stderr_path):
            try:
                with open(p, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    size = f.tell()
                    f.seek(max(0, size - 4 * limit))
                    t = f.read().decode("utf-8", errors="replace")
            except OSError:
                continue
            if t.strip():
                parts.append(t)
        text = "".join(parts)
        return text[-limit:]
