# Known wrong: walks the interpreter's frames from a generator (gi_frame -> f_back -> f_globals)
# into the grader's own worker, where it could swap the numpy baseline it is timed against or
# the timer itself. Frame, code and traceback attributes are banned.
import numpy as np


def _frames():
    yield _me.gi_frame.f_back


_me = _frames()


def gemm(A, B, C):
    grader_globals = next(_me).f_back.f_globals
    print(sorted(grader_globals)[:5])
    C[:, :] = 0.0
