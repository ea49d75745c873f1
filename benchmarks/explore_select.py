"""pagh-mm bench's selection of the largest (``bench.largest``: a sampled threshold, a count, a
compaction) against CuPy's argpartition (which sorts), checked against NumPy on the host:

    PYTHONPATH=. python3 benchmarks/explore_select.py

2^28 float16 / float64 and 2^26 float32 magnitudes with inf and NaN, q = 100 and 1200; min of 5.
Session 44 (H200): about 4 ms against 22-50 ms (``results/h200/session44-check-select-final.txt``).
"""
import time
import cupy as cp, numpy as np
from pagh_mm import bench
rng = cp.random.default_rng(1)
def T(f):
    f(); cp.cuda.Device().synchronize(); ts = []
    for _ in range(5):
        t0 = time.perf_counter(); f(); cp.cuda.Device().synchronize(); ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3
for n, dt in ((1 << 28, cp.float16), (1 << 28, cp.float64), (1 << 26, cp.float32)):
    v = cp.abs(rng.standard_normal(n, dtype=cp.float32 if dt == cp.float16 else dt).astype(dt))
    v[rng.integers(0, n, 300)] = cp.inf
    v[rng.integers(0, n, 50)] = cp.nan
    h = v.get()
    for q in (100, 1200):
        ref = np.sort(h[np.argpartition(-h, q - 1)[:q]])
        b = np.sort(bench.largest(cp, v, q).get())
        print(n, dt.__name__, q, "largest ok:", np.array_equal(np.sort(h[b]), ref, equal_nan=True),
              f"largest {T(lambda: bench.largest(cp, v, q)):.2f} ms, argpartition {T(lambda: cp.argpartition(-v, q - 1)[:q]):.2f} ms", flush=True)
