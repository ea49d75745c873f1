"""The issue-14 case: sparse +-1 factors (16 values per column of A / row of B) with 100
planted entries of about 256, queried for the verified top-100.

    python benchmarks/certified_sparse.py [--n 131072] [--device gpu] [--out JSON]

Rows: fixed small parameters (buckets=4096 or 16384, reps=5: certified or a warning, never
an unwarned miss) and the automatic ones (certified, recall 1).  Records recall,
certificate, margin, noise, verified candidates, chosen buckets and times (GPU
synchronized)."""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import pagh_mm
from fwht_gpu import provenance
from pagh_mm import synthetic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--fixed", type=int, nargs="*", default=[4096])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    d = synthetic.sparse_planted(args.n, 16, 100, 256, seed=0)
    A, B = d.A, d.B
    sync = lambda: None  # noqa: E731
    if args.device == "gpu":
        import cupy
        import cupyx.scipy.sparse as csp
        A, B = csp.csr_matrix(A), csp.csr_matrix(B)
        sync = cupy.cuda.Device().synchronize
        pagh_mm.compress(A[:64], B[:, :64], buckets=1024, reps=5, seed=0).top_k(5, verify=True)
    rows = []
    for label, kw in [(f"fixed b={b}", dict(buckets=b, reps=5)) for b in args.fixed] + \
            [("auto (k=100)", dict(k=100))]:
        t0 = time.perf_counter()
        sk = pagh_mm.compress(A, B, seed=1, **kw)
        sync()
        t1 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pagh_mm.CertificateWarning)
            top = sk.top_k(100, verify=True)
        sync()
        t2 = time.perf_counter()
        sk.top_k(100)
        sync()
        t3 = time.perf_counter()
        get = (lambda a: a.get()) if args.device == "gpu" else np.asarray
        rec = synthetic.recall(d.rows, d.cols, get(top.rows), get(top.cols))
        row = {"case": label, "buckets": sk.buckets, "reps": sk.reps, "recall": rec,
               "certified": bool(top.certified), "warned": bool(caught), "margin": top.margin,
               "noise": top.noise, "verified": top.verified, "compress_s": t1 - t0,
               "verified_query_s": t2 - t1, "unverified_query_s": t3 - t2,
               "chosen": sk.chosen.reason if sk.chosen else None,
               "warning": str(caught[0].message) if caught else None}
        rows.append(row)
        print(f"{label:16} b={sk.buckets:>8} recall {rec:.3f} certified {top.certified!s:5} "
              f"warned {bool(caught)!s:5} margin {top.margin:8.1f} noise {top.noise:7.2f} "
              f"verified {top.verified:6d} compress {t1 - t0:7.2f} s verified query "
              f"{t2 - t1:6.2f} s (unverified {t3 - t2:6.2f} s)", flush=True)
    if args.out:
        rec = provenance.record("certified-sparse", rows, vars(args), None, device=args.device)
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1, default=str)


if __name__ == "__main__":
    main()
