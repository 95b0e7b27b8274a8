"""No new processes: a seccomp filter the grader's worker (:mod:`grader.worker`) and the stand-in
for the sim tier's PTX compile helper (:mod:`kernellab.sim.ptx.standin`) install on themselves
before the worker loads the submission.

The filter (libseccomp through ``pyseccomp``, its ctypes binding) holds for every thread of the
process (``TSYNC``) and is inherited by any thread it starts later. These system calls fail with
``EPERM``:

* ``fork``, ``vfork``, and ``clone`` without ``CLONE_THREAD`` (a new process; ``clone`` with
  it is a new thread, which numba, OpenBLAS and Python's ``threading`` need);
* ``execve`` and ``execveat`` (running another program in this process);
* ``ptrace``, ``process_vm_readv``, ``process_vm_writev`` and ``pidfd_getfd`` (reaching into
  another process; writing one through ``/proc/PID/mem`` is an ``open``, which the filter
  cannot refuse: a process started before the filter makes itself non-dumpable instead,
  :func:`not_dumpable`).

``clone3`` fails with ``ENOSYS`` instead: its flags lie in a struct that a seccomp filter cannot
read, and glibc's ``pthread_create`` falls back to ``clone`` on ``ENOSYS``. System calls of
another architecture (the 32-bit entry on x86-64) are refused by libseccomp's default.

Sources: Linux ``seccomp(2)`` (``SECCOMP_RET_ERRNO``, ``SECCOMP_FILTER_FLAG_TSYNC``),
``clone(2)`` (``CLONE_THREAD``), libseccomp's ``seccomp_rule_add(3)`` (``SCMP_CMP_MASKED_EQ``)
and ``seccomp_attr_set(3)`` (``SCMP_FLTATR_CTL_TSYNC``; ``SCMP_FLTATR_CTL_NNP``, on by
default: no_new_privs, so no privilege is needed).

This file imports nothing but the standard library and ``pyseccomp``: the compile helper, which
never imports :mod:`kernellab`, runs it by path.
"""

from __future__ import annotations

import errno
import sys

#: ``CLONE_THREAD`` (``<linux/sched.h>``): clone creates a thread of this process
CLONE_THREAD = 0x00010000
#: system calls that fail with EPERM (the module docstring says why each)
DENIED = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv",
          "process_vm_writev", "pidfd_getfd")


def unavailable() -> str | None:
    """Why the filter cannot be installed here, in plain words, or None when it can: not Linux,
    or no ``pyseccomp``/``libseccomp`` (Debian's ``libseccomp2``). Imports ``pyseccomp``, which
    finds libseccomp with ``ctypes.util`` and so starts a process: call it before the filter."""
    if not sys.platform.startswith("linux"):
        return f"no seccomp on {sys.platform}"
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp
        return f"pyseccomp/libseccomp not usable ({exc})"
    return None


def forbid_new_processes() -> None:
    """Install the filter (module docstring) on this process and all its threads. Irreversible.
    Raises RuntimeError (with :func:`unavailable`'s reason) or OSError when it cannot."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        f.add_rule(deny, name)
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.load()


def not_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` on Linux (``prctl(2)``): a process of the same user without
    ``CAP_SYS_PTRACE`` can no longer attach to this one or write its memory through
    ``/proc/PID/mem``. A no-op elsewhere or when it fails."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


#: what a worker's report adds to a submission's ``PermissionError`` from starting a process
#: while the filter is in force (:func:`grader.worker._describe_exception`)
REFUSED = ("the grader's sandbox refuses to start new processes (or run other programs): a "
           "kernel computes its result in its own process")
