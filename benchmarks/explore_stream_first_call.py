"""A first streamed call against the next ones (pinned FP64 factors, C-ordered A). Kernels are
warmed on a small product first; run in a fresh process. Session 25 (issue 18) ran it against a
variant that staged a pinned factor's narrow pitched slabs through page-locked buffers
(``--stage-pitched-below``, a stream setting since removed): locking those buffers made a
one-shot call 3.6-7x slower (results/h100/session25-stream-first-call.txt)."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cupy as cp  # noqa: E402
import cupyx  # noqa: E402

from pagh_mm import stream  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=16384)
ap.add_argument("--json")
a = ap.parse_args()
kw = dict(buckets=8192, reps=5, seed=1)
rng = np.random.default_rng(0)
small = [cupyx.empty_pinned((1024, 1024)) for _ in range(2)]
for M in small:
    M[...] = rng.standard_normal(M.shape)
stream.compress(*small, devices=[0], **kw)
cp.cuda.Device().synchronize()
A, B = cupyx.empty_pinned((a.n, a.n)), cupyx.empty_pinned((a.n, a.n))
A[...] = rng.standard_normal(A.shape)
B[...] = rng.standard_normal(B.shape)
ts = []
for _ in range(4):
    t0 = time.perf_counter()
    stream.compress(A, B, devices=[0], **kw)
    cp.cuda.Device().synchronize()
    ts.append(time.perf_counter() - t0)
floor = 2 * A.nbytes / 55e9
print(f"n={a.n} first {ts[0] * 1e3:.1f} ms "
      f"({ts[0] / floor:.2f}x 55 GB/s), then " + ", ".join(f"{t * 1e3:.1f}" for t in ts[1:]) + " ms")
if a.json:
    with open(a.json, "w") as f:
        json.dump(dict(n=a.n, times=ts), f)
