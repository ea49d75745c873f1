"""Gram mode against the general path on the covariance example: the correlation matrix
C = Z^T Z of a standardized n x m data matrix (Z = X / sqrt(n)) with planted correlated
column pairs (rho 0.85), as examples/covariance_screening.py builds it.

    python benchmarks/gram_covariance.py [--n 6000] [--m 512] [--pairs 20] [--buckets 8192]
        [--device cpu|gpu] [--out JSON]

For the same buckets, reps and seed, each path (``compress_gram(Z)``; ``compress(Z.T, Z,
gram=False)``, independent hashes) reports:

* the per-repetition error of off-diagonal estimates (root mean square over a sample of
  20 000 off-diagonal entries, against their exact values), the median's error, and the
  noise bound it predicts (general: ||C||_F / sqrt(b); Gram: ||C - diag||_F / sqrt(2 b));
  the measured reduction is compared with sqrt(2 (1 + ||diag||^2 / ||off||^2));
* the forward transforms (rows of length b transformed: 2 n d general, n d Gram) and the
  compression time (GPU synchronized), split into its stages;
* a certified ``top_k(2 pairs, exclude_diagonal=True)``: certified, recall of the planted
  pairs, verified candidates, time (median of 3 after a warm-up, with the unverified
  scan's);
* the buckets ``"auto"`` chooses for that query (Gram sizes for the off-diagonal noise).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

import fwht_gpu
import pagh_mm
from fwht_gpu import provenance

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
from _shared import correlated_data  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--buckets", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    X, planted = correlated_data(args.n, args.m, args.pairs, rho=0.85, seed=1)
    Z = X / np.sqrt(args.n)
    xp = np
    sync = lambda: None  # noqa: E731
    if args.device == "gpu":
        import cupy
        xp = cupy
        sync = cupy.cuda.Device().synchronize
    Zd = xp.asarray(Z)
    get = (lambda a: a.get()) if args.device == "gpu" else np.asarray

    rng = np.random.default_rng(5)
    i = rng.integers(0, args.m, 40000)
    j = rng.integers(0, args.m, 40000)
    keep = i != j
    i, j = i[keep][:20000], j[keep][:20000]
    C = Z.T @ Z
    diag2 = float((np.diag(C) ** 2).sum())
    off2 = float((C ** 2).sum()) - diag2
    predicted = float(np.sqrt(2 * (1 + diag2 / off2)))
    truth = {(min(a, b), max(a, b)) for a, b in planted}

    rows = []
    for label, make in [("general", lambda **kw: pagh_mm.compress(Zd.T, Zd, gram=False, **kw)),
                        ("gram", lambda **kw: pagh_mm.compress_gram(Zd, **kw))]:
        calls = {"forward": 0, "inverse": 0}
        real = fwht_gpu.FWHT.__call__

        def counting(self, x, *a, **kw):
            key = "inverse" if kw.get("inverse") else "forward"
            calls[key] += int(np.prod(x.shape[:-1]))
            return real(self, x, *a, **kw)

        make(buckets=args.buckets, reps=args.reps, seed=3)          # warm (kernels, caches)
        fwht_gpu.FWHT.__call__ = counting
        prof: dict = {}
        try:
            sync()
            t0 = time.perf_counter()
            sk = make(buckets=args.buckets, reps=args.reps, seed=3, profile=prof)
            sync()
            t_compress = time.perf_counter() - t0
        finally:
            fwht_gpu.FWHT.__call__ = real
        ii, jj = xp.asarray(i), xp.asarray(j)
        exact = get(sk.exact(ii, jj))
        reps = get(sk.estimate_reps(ii, jj)) - exact[None]
        per_rep = float(np.sqrt(np.nanmean(reps ** 2)))
        med = float(np.sqrt(np.mean((get(sk.estimate(ii, jj)) - exact) ** 2)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pagh_mm.CertificateWarning)
            times = []
            for _ in range(4):                  # the first warms up; median of the others
                sync()
                t0 = time.perf_counter()
                top = sk.top_k(2 * args.pairs, verify=True, exclude_diagonal=True)
                sync()
                times.append(time.perf_counter() - t0)
            t_query = float(np.median(times[1:]))
            t_unverified = []
            for _ in range(4):
                sync()
                t0 = time.perf_counter()
                sk.top_k(2 * args.pairs, exclude_diagonal=True)
                sync()
                t_unverified.append(time.perf_counter() - t0)
            t_unverified = float(np.median(t_unverified[1:]))
        found = {(int(min(a, b)), int(max(a, b))) for a, b in zip(get(top.rows), get(top.cols))}
        recall = len(found & truth) / len(truth)
        auto = make(k=2 * args.pairs, seed=3) if args.device == "gpu" or args.m <= 2048 else None
        row = {"path": label, "buckets": sk.buckets, "reps": sk.reps,
               "bound_per_rep": sk.noise(), "rms_error_per_rep": per_rep,
               "rms_error_median": med, "forward_rows": calls["forward"],
               "inverse_rows": calls["inverse"], "compress_s": t_compress,
               "stages_s": prof, "certified": bool(top.certified), "recall": recall,
               "verified": top.verified, "query_s": t_query, "unverified_query_s": t_unverified,
               "warning": str(caught[0].message) if caught else None,
               "auto_buckets": auto.buckets if auto is not None else None,
               "auto_reason": auto.chosen.reason if auto is not None else None}
        rows.append(row)
        print(f"{label:8} b={sk.buckets} noise bound {row['bound_per_rep']:.4g}, measured per "
              f"repetition {per_rep:.4g}, median {med:.4g}; forward rows {calls['forward']}; "
              f"compress {t_compress:.3f} s; top_k certified {top.certified} recall {recall:.2f} "
              f"verified {top.verified} in {t_query:.3f} s (unverified {t_unverified:.3f} s); "
              f"auto buckets {row['auto_buckets']}",
              flush=True)
    g, s = rows[1], rows[0]
    summary = {"predicted_reduction": predicted,
               "measured_reduction_per_rep": s["rms_error_per_rep"] / g["rms_error_per_rep"],
               "measured_reduction_median": s["rms_error_median"] / g["rms_error_median"],
               "forward_ratio": g["forward_rows"] / s["forward_rows"],
               "compress_speedup": s["compress_s"] / g["compress_s"],
               "diag_over_off_mass": diag2 / off2}
    print(f"noise reduction per repetition {summary['measured_reduction_per_rep']:.2f}x "
          f"(predicted {predicted:.2f}x), of the median {summary['measured_reduction_median']:.2f}x;"
          f" forward transforms x{summary['forward_ratio']:.2f}; compression "
          f"{summary['compress_speedup']:.2f}x faster")
    if args.out:
        rec = provenance.record("gram-covariance", rows + [summary], vars(args), None,
                                device=args.device)
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1, default=str)


if __name__ == "__main__":
    main()
