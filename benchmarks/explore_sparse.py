"""Sparse compression on the GPU against cuSPARSE SpGEMM (issue 16 items 2 and 5,
exploration): stage times of compress (fixed and automatic buckets) and the SpGEMM +
top-k of the same planted products.

    python benchmarks/explore_sparse.py [--n 65536 131072 ...] [--per 16] [--out JSON]
"""
from __future__ import annotations

import argparse
import time

import cupy
import cupyx.scipy.sparse as csp

import pagh_mm
from fwht_gpu import provenance
from pagh_mm import bench, synthetic


def sync():
    cupy.cuda.Device().synchronize()


def timed(fn, repeat=3):
    out = fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="*", default=[65536, 131072])
    ap.add_argument("--per", type=int, nargs="*", default=[16])
    ap.add_argument("--out", default=None)
    ap.add_argument("--cprofile", action="store_true",
                    help="print the host profile of one compression (automatic buckets for k=100) per size")
    ap.add_argument("--no-spgemm", action="store_true")
    ap.add_argument("--buckets", type=int, nargs="*", default=[16384, 1 << 18],
                    help="fixed bucket counts to time (besides the automatic ones for k=100)")
    ap.add_argument("--decode", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--no-query", action="store_true", help="time the compressions only")
    args = ap.parse_args()
    rows = []
    for n in args.n:
        for per in args.per:
            d = synthetic.sparse_planted(n, per, 100, 256, seed=0)
            A, B = csp.csr_matrix(d.A), csp.csr_matrix(d.B)
            decode = {"auto": "auto", "on": True, "off": False}[args.decode]
            for kw in [dict(buckets=b, reps=5) for b in args.buckets] + [dict(k=100)]:
                kw["decode"] = decode
                prof = {}
                t, sk = timed(lambda: pagh_mm.compress(A, B, seed=1, **kw))
                pagh_mm.compress(A, B, seed=1, profile=prof, **kw)
                tq, rec, cert = None, None, None
                if not args.no_query:
                    tq, top = timed(lambda: sk.top_k(100, verify=True), 1)
                    rec = synthetic.recall(d.rows, d.cols, top.rows.get(), top.cols.get())
                    cert = bool(top.certified)
                row = {"n": n, "per": per, "buckets": sk.buckets, "compress_s": t,
                       "stages": prof, "query_s": tq, "recall": rec,
                       "certified": cert, "kw": str(kw), "decode": sk.bits is not None}
                rows.append(row)
                print(f"n={n} per={per} b={sk.buckets:>8} decode {row['decode']} compress {t:.4f} s "
                      f"query {tq} s recall {rec} cert {cert} stages "
                      + ", ".join(f"{k} {v:.4f}" for k, v in prof.items()), flush=True)
                sk = top = None
            if args.cprofile:
                import cProfile
                import pstats
                pr = cProfile.Profile()
                pr.enable()
                pagh_mm.compress(A, B, seed=1, k=100)
                sync()
                pr.disable()
                pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
                pstats.Stats(pr).sort_stats("tottime").print_stats(30)
            if args.no_spgemm:
                continue
            try:
                def spgemm():
                    C = A @ B
                    v = cupy.abs(C.data)
                    sel = bench.largest(cupy, v, 100)     # (CuPy's argpartition sorts)
                    return C, sel
                t, (C, _) = timed(spgemm)
                row = {"n": n, "per": per, "spgemm_s": t, "nnz_C": int(C.nnz)}
                print(f"n={n} per={per} SpGEMM + top-100 {t:.4f} s nnz(C) {C.nnz}", flush=True)
                C = None
            except Exception as exc:  # noqa: BLE001
                row = {"n": n, "per": per, "spgemm_error": str(exc).splitlines()[0][:120]}
                print(f"n={n} per={per} SpGEMM failed: {row['spgemm_error']}", flush=True)
            rows.append(row)
            cupy.get_default_memory_pool().free_all_blocks()
    if args.out:
        provenance.write(provenance.record("explore-sparse", rows, vars(args), None, device="gpu"), args.out)


if __name__ == "__main__":
    main()
