"""Probe for the out= layout case on the GPU (prints what the CuPy path sees)."""
import numpy as np
import fwht_gpu as F
from fwht_gpu.cuda import launch
cp = launch.cupy()
for dt in (np.float64, np.float32):
    base = np.random.default_rng(0).standard_normal((64, 4096)).astype(dt)
    g = cp.asarray(base)
    xm = cp.moveaxis(g.T, 0, -1)
    print(dt.__name__, "xm", xm.shape, xm.strides, xm.flags.c_contiguous, xm.data.ptr == g.data.ptr)
    want = F.fwht(base)
    o = cp.full((4096, 64), np.nan, dt)
    F.fwht(g.T, 0, out=o)
    print(" out= :", bool((o.get() == want.T).all()), " no out:", bool((F.fwht(g.T, 0).get() == want.T).all()),
          " plain:", bool((F.fwht(g).get() == want).all()), " input kept:", bool((g.get() == base).all()))
