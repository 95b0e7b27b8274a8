"""The compile helper's stand-in (:meth:`kernellab.sim.ptx.helper._Helper.prepare`), run by path
with ``python -I`` from ``/``.

Before it says ``ready`` on stdout, it makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``:
the process that started it, about to run untrusted code, can neither attach to it nor write its
memory), loads what would start programs later (libseccomp and libnvJitLink, found through
``ctypes.util``) and forbids itself new processes (:mod:`kernellab.machine.process_filter`, run
by path): from then on it is no more free than that process. It then waits for one line on
stdin: at the end of stdin it exits; on the line it runs :mod:`kernellab.sim.ptx.child` in this
same process (no ``exec``, which would make it dumpable again), on the same pipes. It says
``failed: <why>`` instead of ``ready`` when it cannot forbid new processes. Standard library
only, like the helper.
"""

import importlib
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
pf = runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(here)), "machine",
                                  "process_filter.py"))
pf["not_dumpable"]()
try:
    importlib.import_module("cuda.bindings.nvjitlink").version()
except BaseException:  # noqa: BLE001 - the helper's first ``resources`` request says why
    pass
try:
    pf["forbid_new_processes"]()
except BaseException as exc:  # noqa: BLE001
    os.write(1, f"failed: {exc}\n".encode())
    sys.exit(1)
os.write(1, b"ready\n")
line = b""
while not line.endswith(b"\n"):  # byte by byte: the helper's requests follow on this pipe
    c = os.read(0, 1)
    if not c:
        sys.exit(0)
    line += c
child = os.path.join(here, "child.py")
sys.argv = [child]
runpy.run_path(child, run_name="__main__")
