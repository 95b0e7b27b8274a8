"""Golden references (numpy, float64) and naive baseline kernels. Imports numpy only, so the
golden side stays small enough to trust."""
