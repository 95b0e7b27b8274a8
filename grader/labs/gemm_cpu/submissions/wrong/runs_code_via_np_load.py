# Known wrong: writes bytes to a file with numpy and loads them back with allow_pickle=True,
# which unpickles — i.e. runs — whatever they say (here a shell command). numpy's file
# functions are banned: with them, "only numpy, numba and math" would mean anything at all.
import numpy as np

_payload = b"cposix\nsystem\n(S'echo this ran outside the lab rules'\ntR."
np.frombuffer(_payload, dtype=np.uint8).tofile("payload.pkl")
np.load("payload.pkl", allow_pickle=True)


def gemm(A, B, C):
    C[:, :] = 0.0
