# Known wrong: numba's types.ExternalFunction lets compiled code call any C function of the
# process by name — here libc's puts; system() would run any program. Banned along with numba's
# raw pointers (voidptr, CPointer …) and an array's .ctypes.
import numba
import numpy as np
from numba import types

puts = types.ExternalFunction("puts", types.intc(types.voidptr))


@numba.njit
def _say(buf):
    puts(buf.ctypes.data)


def gemm(A, B, C):
    _say(np.frombuffer(b"hello from libc\0", dtype=np.uint8))
    C[:, :] = 0.0
