"""The cost of compressing through dask (issue 18): pagh_mm.compress of in-memory arrays
against pagh_mm.dask.compress of the same arrays as dask arrays. The dask runs use the local
threaded scheduler and a dask.distributed LocalCluster (threads, or worker processes with
--processes), with the same buckets and seed. Every run's sketch is compared with `==`.
Medians of --repeats runs, after a warm-up.

    python benchmarks/dask_overhead.py --sparse 65536 --dense 2048 [--json out.json]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pagh_mm
import pagh_mm.dask as pdask
from fwht_gpu import provenance
from pagh_mm import synthetic


def _median(fn, repeats):
    out = fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _case(name, A, B, dA, dB, kw, repeats, client_factories):
    t_one, one = _median(lambda: pagh_mm.compress(A, B, **kw), repeats)
    row = {"case": name, "inner_chunk": int(dA.chunks[1][0]), "chunks": len(dA.chunks[1]),
           "buckets": one.buckets, "reps": one.reps, "single_process_s": t_one}
    print(f"{name}: one process {t_one:.3f} s ({one.buckets} buckets, {len(dA.chunks[1])} "
          f"inner chunks of {dA.chunks[1][0]})", flush=True)
    for label, make in client_factories:
        with make():
            t, got = _median(lambda: pdask.compress(dA, dB, **kw), repeats)
        same = bool(np.array_equal(got.sketch.view(np.uint8), one.sketch.view(np.uint8)))
        row[f"{label}_s"] = t
        row[f"{label}_overhead"] = t / t_one
        row[f"{label}_same_bits"] = same
        print(f"    {label}: {t:.3f} s ({t / t_one:.2f}x one process), same bits: {same}",
              flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sparse", type=int, action="append", default=[])
    ap.add_argument("--dense", type=int, action="append", default=[])
    ap.add_argument("--per-vector", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=None, help="inner chunk (default n / 8)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--processes", action="store_true", help="LocalCluster worker processes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    import contextlib

    import dask
    import dask.array as da
    from dask import distributed

    @contextlib.contextmanager
    def threaded():
        with dask.config.set(scheduler="threads"):
            yield

    @contextlib.contextmanager
    def cluster():
        with distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1,
                                      processes=a.processes, dashboard_address=None) as c, \
                distributed.Client(c):
            yield

    factories = [("threads", threaded), ("local_cluster", cluster)]
    rows = []
    for n in a.sparse:
        d = synthetic.sparse_planted(n, a.per_vector, 100, 256, seed=n)
        c = a.chunk or max(1, n // 8)
        dA = da.from_array(d.A.tocsc(), chunks=(n, c), asarray=False)
        dB = da.from_array(d.B.tocsr(), chunks=(c, n), asarray=False)
        rows.append(_case(f"sparse n={n}, {a.per_vector} per vector", d.A, d.B, dA, dB,
                          dict(buckets=1 << 20, reps=5, seed=1), a.repeats, factories))
    for n in a.dense:
        d = synthetic.planted_product(n, 100, seed=n)
        c = a.chunk or max(1, n // 8)
        dA, dB = da.from_array(d.A, chunks=(n, c)), da.from_array(d.B, chunks=(c, n))
        rows.append(_case(f"dense n={n}", d.A, d.B, dA, dB, dict(buckets=1 << 16, reps=5, seed=1),
                          a.repeats, factories))
    if a.json:
        provenance.write(provenance.record("dask-overhead", rows, vars(a), device="cpu"), a.json)


if __name__ == "__main__":
    main()
