"""How often is a certified answer wrong?  The families of tests/test_certificate.py (ties,
a heavy row, a heavy column, a rank-one product, planted Gaussian and sparse products;
integer and float data, dense and SciPy sparse factors; by="abs" on even seeds and
by="value" on odd ones), with more seeds and larger sizes, queried with top_k and above
(verify=True), each answer compared with the dense A @ B.

    python benchmarks/certificate_failure.py [--seeds 1000] [--scale 2] [--delta 0.05]
        [--edge-seeds N] [--small-seeds N] [--families ...] [--jobs 2] [--out JSON]

Regimes: "main" (the test's bucket counts times scale^2, rounded down to a power of two:
most runs certify), "edge" (the test's times scale: some runs certify, with tight margins
and several rounds) and "small" (64 buckets: almost none certify).  Per family, regime and query: runs, certified fraction, wrong
answers that were certified (the certificate's failures: at most about delta x certified;
"allowed" is the 1 - 1e-6 binomial quantile), wrong answers that warned, mismatches between
the certificate and the warning (certified=False without a CertificateWarning or the
reverse: must be 0), the stated probability, the mean number of verified candidates, and the
mean number of rounds (scans of the sketch, counted by wrapping pagh_mm.query.scan, since
Entries does not report them).  At the defaults about 7 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time

import numpy as np
from scipy.stats import binom

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pagh_mm
from pagh_mm import query
from tests import test_certificate as T  # the families and the checks

_SCANS = [0]
_scan = query.scan


def _counting_scan(*args, **kwargs):
    _SCANS[0] += 1
    return _scan(*args, **kwargs)


query.scan = _counting_scan           # search() calls it once per round


def scaled_buckets(b: int, scale: float, regime: str) -> int:
    """A family's buckets for a product ``scale`` times larger in m and p, as a power of
    two (rounded down).  "main": the background's ||C||_F^2 grows like scale^2 and the
    noise like ||C||_F / sqrt(b), so b scale^2 (most runs still certify).  "edge": b scale
    (the planted entries, a good part of ||C||_F, do not grow with the size; b scale^2
    would certify every run).  "small": 64 as in the test."""
    grow = {"main": scale * scale, "edge": scale}.get(regime, 1.0)
    return b << max(0, math.floor(math.log2(grow)))


def one(task):
    """One seed of a family in a regime: compress (one sketch per distinct bucket count)
    and ask each query, counting its scans.  Returns (family, regime, seed, {query: record},
    seconds)."""
    name, regime, seed, scale, delta, reps = task
    f = T.BY_NAME[name]
    t0 = time.perf_counter()
    A, B, C, by, k = T.problem(f, seed, scale)
    recs, sketches = {}, {}
    for q, b in f.regime(regime).items():
        b = scaled_buckets(b, scale, regime)
        if b not in sketches:
            sketches[b] = pagh_mm.compress(A, B, buckets=b, reps=reps, seed=seed)
        _SCANS[0] = 0
        recs[q] = T.ask(sketches[b], f, q, C, by, k, delta)
        recs[q].update(rounds=_SCANS[0], buckets=b)
    return name, regime, seed, recs, time.perf_counter() - t0


def summarize(results, delta):
    rows = []
    for name in T.NAMES:
        for regime in T.REGIMES:
            for q in T.QUERIES:
                recs = [r[q] for n, reg, _, r, _ in results
                        if (n, reg) == (name, regime) and q in r]
                if not recs:
                    continue
                cert = [r for r in recs if r["certified"]]
                n_cert = len(cert)
                rows.append({
                    "family": name, "regime": regime, "buckets": recs[0]["buckets"], "query": q,
                    "runs": len(recs), "size": recs[0]["size"], "certified": n_cert,
                    "certified_fraction": n_cert / len(recs),
                    "wrong_certified": sum(r["wrong"] for r in cert),
                    "allowed_wrong": T.allowed_wrong(n_cert, delta),
                    "wrong_warned": sum(r["wrong"] and r["warned"] > 0 for r in recs),
                    # certified=False without a warning, or certified with one: must be 0
                    "mismatches": sum(r["warned"] != (0 if r["certified"] else 1) for r in recs),
                    "stated_probability": delta,
                    "mean_verified": float(np.mean([r["verified"] for r in recs])),
                    "mean_rounds": float(np.mean([r["rounds"] for r in recs])),
                    "certified_fraction_abs": _frac([r for r in recs if r["by"] == "abs"]),
                    "certified_fraction_value": _frac([r for r in recs if r["by"] == "value"]),
                })
    return rows


def _frac(recs):
    return sum(r["certified"] for r in recs) / len(recs) if recs else None


def print_table(rows):
    head = (f"{'family':22} {'regime':6} {'b':>6} {'query':6} {'runs':>5} {'cert':>6} "
            f"{'wrong&cert':>10} {'allowed':>7} {'delta':>6} {'wrong&warn':>10} "
            f"{'mismatch':>8} {'verified':>9} {'rounds':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['family']:22} {r['regime']:6} {r['buckets']:>6} {r['query']:6} {r['runs']:>5} "
              f"{r['certified_fraction']:>6.3f} {r['wrong_certified']:>10} {r['allowed_wrong']:>7} "
              f"{r['stated_probability']:>6g} {r['wrong_warned']:>10} {r['mismatches']:>8} "
              f"{r['mean_verified']:>9.1f} {r['mean_rounds']:>6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="seeds per family (main regime)")
    ap.add_argument("--edge-seeds", type=int, default=None,
                    help="seeds per family at its edge buckets (default seeds / 4)")
    ap.add_argument("--small-seeds", type=int, default=None,
                    help="seeds per family at 64 buckets (default seeds / 5)")
    ap.add_argument("--scale", type=float, default=2.0,
                    help="m and p relative to the test's sizes (128 x 128 and so on)")
    ap.add_argument("--delta", type=float, default=T.DELTA, help="failure_probability asked for")
    ap.add_argument("--families", nargs="*", default=T.NAMES, choices=T.NAMES)
    ap.add_argument("--reps", type=int, default=5, help="repetitions of every sketch")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=None, help="write a provenance record (JSON) here")
    args = ap.parse_args()
    n_seeds = {"main": args.seeds, "edge": args.seeds // 4 if args.edge_seeds is None
               else args.edge_seeds, "small": args.seeds // 5 if args.small_seeds is None
               else args.small_seeds}
    tasks = [(name, regime, s, args.scale, args.delta, args.reps) for name in args.families
             for regime in T.REGIMES if T.BY_NAME[name].regime(regime)
             for s in range(n_seeds[regime])]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(one, tasks, chunksize=4)
    else:
        results = [one(t) for t in tasks]
    wall = time.perf_counter() - t0
    rows = summarize(results, args.delta)
    print_table(rows)
    total_cert = sum(r["certified"] for r in rows)
    total_wrong = sum(r["wrong_certified"] for r in rows)
    mismatches = sum(r["mismatches"] for r in rows)
    print(f"\nall: {total_wrong} wrong of {total_cert} certified answers (allowed "
          f"{T.allowed_wrong(total_cert, args.delta)} at delta={args.delta}; "
          f"P[Binomial(n, delta) >= observed] = "
          f"{binom.sf(total_wrong - 1, total_cert, args.delta):.3g}); "
          f"{sum(r['wrong_warned'] for r in rows)} wrong answers warned; "
          f"warning/certificate mismatches: {mismatches}; {len(tasks)} seeds in {wall:.0f} s "
          f"({args.jobs} jobs)")
    if args.out:
        from fwht_gpu import provenance
        rec = provenance.record("certificate-failure", rows, vars(args), None, device="cpu",
                                notes=f"wall {wall:.1f} s")
        provenance.write(rec, args.out)


if __name__ == "__main__":
    main()
