"""Estimate-scan rates on the GPU (issue 16 item 3): entries per second of the selecting
scan behind top_k/above (heavy-bucket filter) and of the dense tile kernel behind
to_dense, on the planted sparse case and a dense planted product.

    python benchmarks/explore_scan.py [--sparse 131072] [--dense 16384] [--out JSON]
"""
from __future__ import annotations

import argparse
import time

import cupy
import cupyx.scipy.sparse as csp

import pagh_mm
from fwht_gpu import provenance
from pagh_mm import query, synthetic


def timed(fn, repeat=3):
    fn()
    cupy.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparse", type=int, nargs="*", default=[131072])
    ap.add_argument("--dense", type=int, nargs="*", default=[16384])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []

    def report(case, sk, what, entries, t):
        row = {"case": case, "buckets": sk.buckets, "reps": sk.reps, "what": what,
               "entries": entries, "seconds": t, "entries_per_s": entries / t}
        rows.append(row)
        print(f"{case:28} b={sk.buckets:>8} {what:22} {t:8.4f} s {entries / t:10.3e} entries/s",
              flush=True)

    for n in args.sparse:
        d = synthetic.sparse_planted(n, 16, 100, 256, seed=0)
        for kw in (dict(buckets=16384, reps=5), dict(k=100)):
            sk = pagh_mm.compress(csp.csr_matrix(d.A), csp.csr_matrix(d.B), seed=1, **kw)
            case = f"sparse {n} " + ("auto" if "k" in kw else "fixed")
            report(case, sk, "scan top-100", n * n, timed(lambda: query.scan(sk, "abs", 101)))
            report(case, sk, "top_k(100, verify)", n * n,
                   timed(lambda: sk.top_k(100, verify=True), 1))
    for n in args.dense:
        d = synthetic.planted_product(n, 300, seed=0, xp=cupy)
        for b in (8192, 65536):
            sk = pagh_mm.compress(d.A, d.B, buckets=b, reps=5, seed=0)
            case = f"dense {n}"
            report(case, sk, "scan top-300", n * n, timed(lambda: query.scan(sk, "abs", 301)))
            report(case, sk, "to_dense", n * n, timed(lambda: sk.to_dense(), 1))
            thr = float(abs(sk.top_k(300).estimates[-1]))
            report(case, sk, "above (300th)", n * n, timed(lambda: sk.above(thr)))
    if args.out:
        provenance.write(provenance.record("explore-scan", rows, vars(args), None, device="gpu"), args.out)


if __name__ == "__main__":
    main()
