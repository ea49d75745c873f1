"""Inner indices per node of the fused kernel where its pending nodes live in device memory
(``kernels.FUSED_GLOBAL_LOG_G``: 2^g indices summed in the kernel per node written): the
compression's stages at each g, the same bits checked (a planted FP64 product, automatic
buckets for a top-300 as ``pagh-mm bench`` runs it).

    PYTHONPATH=. python3 benchmarks/explore_fused_group.py --n 16384 --g 1 --g 2 --json out.json
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
    ap.add_argument("--g", type=int, action="append", required=True)
    ap.add_argument("--dtype", default="fp64", choices=("fp64", "fp32"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for n in a.n:
        d = synthetic.planted_product(n, 300, seed=n, dtype=np.float64 if a.dtype == "fp64"
                                      else np.float32, xp=cp)
        ref = None
        for rnd in range(2):                        # the values alternate: two rounds
            for g in a.g:
                kernels.FUSED_GLOBAL_LOG_G = g
                compress(d.A, d.B, k=300, seed=3)
                cp.cuda.Device().synchronize()
                ts, profs = [], []
                for _ in range(a.repeats):
                    prof: dict = {}
                    t0 = time.perf_counter()
                    sk = compress(d.A, d.B, k=300, seed=3, profile=prof)
                    cp.cuda.Device().synchronize()
                    ts.append(time.perf_counter() - t0)
                    profs.append(prof)
                if ref is None:
                    ref = sk.sketch
                row = {"n": n, "g": g, "round": rnd, "sketch_s": statistics.median(ts),
                       "fused_s": statistics.median(p["fused"] for p in profs),
                       "accumulate_s": statistics.median(p["accumulate"] for p in profs),
                       "same_bits": bool((sk.sketch == ref).all()), "buckets": sk.buckets,
                       "reps": sk.reps, "transforms": sk.dtype}
                print(row, flush=True)
                rows.append(row)
                sk = None
        d = ref = None
    if a.json:
        provenance.write(provenance.record("explore-fused-group", rows, vars(a)), a.json)


if __name__ == "__main__":
    main()
