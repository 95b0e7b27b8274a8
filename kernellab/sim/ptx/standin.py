"""The compile helper's stand-in (:meth:`kernellab.sim.ptx.helper._Helper.prepare`), run by path.

It makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: the process that started it, which
is about to run untrusted code, can neither attach to it nor write its memory), says ``ready``
on stdout, then waits for one line on stdin. At the end of stdin it exits; on the line it runs
:mod:`kernellab.sim.ptx.child` in this same process (no ``exec``, which would make it dumpable
again), on the same pipes. Standard library only, like the helper.
"""

import ctypes
import os
import runpy
import sys

if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
os.write(1, b"ready\n")
line = b""
while not line.endswith(b"\n"):  # byte by byte: the helper's requests follow on this pipe
    c = os.read(0, 1)
    if not c:
        sys.exit(0)
    line += c
child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
sys.argv = [child]
runpy.run_path(child, run_name="__main__")
