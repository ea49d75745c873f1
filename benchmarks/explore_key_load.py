"""The fused kernel's sketch in key order beyond one key per bucket: the compression's fused
stage with ``kernels.FUSED_KEY_ORDER_MAX_LOAD`` raised (key order, the buckets of several keys
summed from their lists) against the limit of one (the sketch by position), alternating, the
same bits checked.  Planted FP32 products as ``pagh-mm bench`` makes them (automatic buckets
for a top-300: 13 x 2^15 at these sizes, so n keys per factor are n / 2^15 per bucket).

    PYTHONPATH=. python3 benchmarks/explore_key_load.py --n 65536 --limit 1 --limit 2 --json out.json

With ``--inner m``: N(0, 1) factors of n x m and m x n (so that n keys per factor fit at
any n) compressed into ``--log2b`` buckets and ``--reps`` repetitions, the transforms in
``--dtype`` (fp64: the FP64 kernel's limit, ``FUSED_KEY_ORDER_MAX_LOAD["double"]``, with
2^14 buckets per block):

    PYTHONPATH=. python3 benchmarks/explore_key_load.py --n 32768 --inner 4096 --dtype fp64 \
        --log2b 14 --limit 1 --limit 2
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fwht_gpu import provenance


def main() -> None:
    import cupy as cp
    from pagh_mm import compress, synthetic
    from pagh_mm.cuda import kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append", required=True)
    ap.add_argument("--limit", type=float, action="append", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--inner", type=int, help="N(0, 1) factors with this inner dimension")
    ap.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32",
                    help="the transforms' dtype (with --inner; the data's too)")
    ap.add_argument("--log2b", type=int, default=15)
    ap.add_argument("--reps", type=int, default=13)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.dtype == "fp64" and not a.inner:
        ap.error("--dtype fp64 needs --inner (the planted products are FP32)")
    rows = []
    before = dict(kernels.FUSED_KEY_ORDER_MAX_LOAD)
    name, dt = {"fp32": ("float", np.float32), "fp64": ("double", np.float64)}[a.dtype]
    for n in a.n:
        if a.inner:
            rng = cp.random.default_rng(n)
            A = rng.standard_normal((n, a.inner), dtype=dt)
            B = rng.standard_normal((a.inner, n), dtype=dt)
            kw = dict(buckets=1 << a.log2b, reps=a.reps, dtype=dt)
        else:
            d = synthetic.planted_product(n, 300, seed=n, dtype=np.float32, xp=cp)
            A, B, kw = d.A, d.B, dict(k=300)
        ref = None
        for rnd in range(a.rounds):
            for lim in a.limit:
                kernels.FUSED_KEY_ORDER_MAX_LOAD[name] = lim
                ts, fused = [], []
                for _ in range(a.repeats + 1):
                    prof: dict = {}
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    sk = compress(A, B, seed=3, profile=prof, **kw)
                    cp.cuda.Device().synchronize()
                    ts.append(time.perf_counter() - t0)
                    fused.append(prof["fused"])
                same = True
                if ref is None:
                    ref = sk.sketch
                else:
                    same = bool((sk.sketch == ref).all())
                row = {"n": n, "limit": lim, "round": rnd, "buckets": sk.buckets, "reps": sk.reps,
                       "load": n / sk.buckets, "sketch_s": statistics.median(ts[1:]),
                       "fused_s": statistics.median(fused[1:]), "same_bits": same}
                print(row, flush=True)
                rows.append(row)
                sk = None
        A = B = d = ref = None
        cp.get_default_memory_pool().free_all_blocks()
    kernels.FUSED_KEY_ORDER_MAX_LOAD.update(before)
    if a.json:
        provenance.write(provenance.record("explore-key-load", rows, vars(a)), a.json)


if __name__ == "__main__":
    main()
