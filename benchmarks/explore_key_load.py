"""The fused kernel's sketch in key order beyond one key per bucket: the compression's fused
stage with ``kernels.FUSED_KEY_ORDER_MAX_LOAD`` raised (key order, the buckets of several keys
summed from their lists) against the limit of one (the sketch by position), alternating, the
same bits checked.  Planted FP32 products as ``pagh-mm bench`` makes them (automatic buckets
for a top-300: 13 x 2^15 at these sizes, so n keys per factor are n / 2^15 per bucket).

    PYTHONPATH=. python3 benchmarks/explore_key_load.py --n 65536 --limit 1 --limit 2 --json out.json
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
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    before = dict(kernels.FUSED_KEY_ORDER_MAX_LOAD)
    for n in a.n:
        d = synthetic.planted_product(n, 300, seed=n, dtype=np.float32, xp=cp)
        ref = None
        for rnd in range(a.rounds):
            for lim in a.limit:
                kernels.FUSED_KEY_ORDER_MAX_LOAD["float"] = lim
                ts, fused = [], []
                for _ in range(a.repeats + 1):
                    prof: dict = {}
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    sk = compress(d.A, d.B, k=300, seed=3, profile=prof)
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
        d = ref = None
        cp.get_default_memory_pool().free_all_blocks()
    kernels.FUSED_KEY_ORDER_MAX_LOAD.update(before)
    if a.json:
        provenance.write(provenance.record("explore-key-load", rows, vars(a)), a.json)


if __name__ == "__main__":
    main()
