"""Probe: where do GPU and CPU pagh_mm results part? (device debugging aid)"""
import numpy as np
import pagh_mm
from fwht_gpu.cuda import launch
from tests.test_pagh_cpu import sparse_int_product
cp = launch.cupy()
A, B = sparse_int_product(np.random.default_rng(0), m=300, n=200, p=250, density=0.03)
kw = dict(buckets=1 << 14, reps=5, seed=3)
c = pagh_mm.compress(A, B, **kw)
g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), **kw)
print("sketch equal:", bool((g.sketch.get() == c.sketch).all()), "max diff", float(np.abs(g.sketch.get() - c.sketch).max()))
hc, hg = c._hash_arrays(), g._hash_arrays()
print("hash arrays equal:", [bool((x.get() == y).all()) for x, y in zip(hg, hc)])
i, j = np.arange(300)[:, None], np.arange(250)[None, :]
pc = c._per_rep(i, j)
pg = g._per_rep(cp.asarray(i), cp.asarray(j)).get()
print("per-rep equal:", bool((pc == pg).all()), "max diff", float(np.abs(pc - pg).max()))
mc = np.median(pc, axis=0)
mg = cp.median(cp.asarray(pc), axis=0).get()
print("median of the same input equal:", bool((mc == mg).all()), float(np.abs(mc - mg).max()))
x = cp.asarray(np.array([[[1.0, 5.0]], [[2.0, 4.0]], [[3.0, 3.0]], [[9.0, 1.0]], [[0.0, 2.0]]]))
print("median small:", cp.median(x, axis=0).get(), np.median(x.get(), axis=0))
