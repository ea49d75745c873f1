"""Resident and streamed compression of a 16384^2 FP64 product: A C-ordered (column chunks are
pitched copies) vs F-ordered (contiguous) (session 25, issue 18; results/h100/session25-layout-*)."""
import statistics, time, os, sys
sys.path.insert(0, ".")
import numpy as np, cupy as cp, cupyx
import pagh_mm
from pagh_mm import stream
n = 16384
rng = np.random.default_rng(0)
kw = dict(buckets=8192, reps=5, seed=1)
out = {}
def t(f, reps=5):
    f(); cp.cuda.Device().synchronize(); ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); cp.cuda.Device().synchronize(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
B = cupyx.empty_pinned((n, n), np.float64); B[...] = rng.standard_normal((n, n))
def case(order):
    A = cupyx.empty_pinned((n, n), np.float64, order=order)
    A[...] = rng.standard_normal((n, n))
    dA, dB = cp.asarray(A, order=order), cp.asarray(B)
    out[f"resident A {order}"] = t(lambda: pagh_mm.compress(dA, dB, **kw))
    dA = dB = None   # (frees them)
    cp.get_default_memory_pool().free_all_blocks()
    out[f"streamed pinned A {order}"] = t(lambda: stream.compress(A, B, devices=[0], **kw))
    print({k: round(v * 1e3, 1) for k, v in out.items()}, flush=True)
for order in ("C", "F"):
    case(order)
floor = 2 * n * n * 8 / 55e9
print(f"floor at 55 GB/s {floor * 1e3:.1f} ms; streamed/floor: C {out['streamed pinned A C'] / floor:.2f}x, F {out['streamed pinned A F'] / floor:.2f}x")
from fwht_gpu import provenance  # noqa: E402
provenance.write(provenance.record("stream-layout-explore", [{"case": k, "seconds": v} for k, v in out.items()], {"n": n, **kw}, device="gpu"),
                 os.path.join(os.environ.get("OUT", "."), "stream-layout.json"))
