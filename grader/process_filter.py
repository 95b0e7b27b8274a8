"""No new processes: a seccomp filter the grader's worker installs on itself before the
submission loads (:mod:`grader.worker`).

The filter (libseccomp through ``pyseccomp``, its ctypes binding) makes these system calls fail
with ``EPERM`` for every thread of the process and everything it could still start:

* ``fork``, ``vfork``, and ``clone`` without ``CLONE_THREAD`` (a new process; ``clone`` with
  it is a new thread, which numba, OpenBLAS and Python's ``threading`` need);
* ``execve`` and ``execveat`` (running another program in this process);
* ``clone3`` fails with ``ENOSYS`` instead: its flags lie in a struct that a seccomp filter
  cannot read, and glibc's ``pthread_create`` falls back to ``clone`` on ``ENOSYS``.

Sources: Linux ``seccomp(2)`` (``SECCOMP_RET_ERRNO``, ``SECCOMP_FILTER_FLAG_TSYNC``: every
thread gets the filter), ``clone(2)`` (``CLONE_THREAD``), libseccomp's
``seccomp_rule_add(3)`` (``SCMP_CMP_MASKED_EQ``) and ``seccomp_attr_set(3)``
(``SCMP_FLTATR_CTL_TSYNC``, ``SCMP_FLTATR_CTL_NNP``: no_new_privs, so no privilege is needed).

A process the grading itself needs later is started before the filter, as a stand-in that
becomes it on demand (:meth:`kernellab.sim.ptx.helper._Helper.prepare`); a lab whose grading
starts processes after the submission loads (Lab 9: ``torch.compile`` runs the C++ compiler)
says so (:attr:`grader.spec.LabSpec.starts_processes`) and is not filtered.
"""

from __future__ import annotations

import errno
import sys

#: ``CLONE_THREAD`` (``<linux/sched.h>``): clone creates a thread of this process
CLONE_THREAD = 0x00010000


def unavailable() -> str | None:
    """Why the filter cannot be installed here, in plain words, or None when it can: not Linux,
    or no ``pyseccomp``/``libseccomp`` (Debian's ``libseccomp2``). Imports ``pyseccomp`` (it
    finds libseccomp with ``ctypes.util``, which itself starts a process: call this before the
    filter, never after)."""
    if not sys.platform.startswith("linux"):
        return f"no seccomp on {sys.platform}"
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp
        return f"pyseccomp/libseccomp not usable ({exc})"
    return None


def forbid_new_processes() -> None:
    """Install the filter (module docstring) on this process and all its threads. Irreversible.
    Raises OSError (or RuntimeError from :func:`unavailable`'s causes) when it cannot."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    deny = sc.ERRNO(errno.EPERM)
    for name in ("fork", "vfork", "execve", "execveat"):
        f.add_rule(deny, name)
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.load()


#: what a worker's report adds to a submission's ``PermissionError`` while the filter is in
#: force (:func:`grader.worker._describe_exception`)
REFUSED = ("the grader's sandbox refuses to start new processes (or run other programs): a "
           "kernel computes its result in its own process")
