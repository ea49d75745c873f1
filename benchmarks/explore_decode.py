"""Where a decoding certified top-k spends its time (issue 17): the stages of the search
(decoding, exact verification, peeling, scans, noise model) timed with the device
synchronized, on sparse planted products, for the automatic sketch and for one with the
buckets the certificate needs.

    python benchmarks/explore_decode.py --n 131072 --n 1048576 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from collections import defaultdict

import numpy as np

import pagh_mm
from pagh_mm import decode, query, synthetic
from fwht_gpu import provenance
from pagh_mm.backend import gpu as gpu_backend


def _sync(xp):
    if xp is not np:
        xp.cuda.Device().synchronize()


def _timed(table, name, fn, xp):
    def wrapper(*a, **k):
        _sync(xp)
        t = time.perf_counter()
        out = fn(*a, **k)
        _sync(xp)
        table[name] += time.perf_counter() - t
        table[name + " calls"] += 1
        return out
    return wrapper


def run(n: int, per: int, planted: int, device: str, buckets=None) -> dict:
    be = gpu_backend() if device == "gpu" else None
    xp = be.xp if be else np
    data = synthetic.sparse_planted(n, per, planted, 256, seed=n + per)
    A, B = data.A, data.B
    if be:
        import cupyx.scipy.sparse as csp
        A, B = csp.csr_matrix(A), csp.csr_matrix(B)
    kw = dict(k=planted, seed=1) if buckets is None else dict(buckets=buckets, seed=1)
    out = {"n": n, "per_vector": per, "planted": planted, "device": device}
    for dec in (False, True):
        pagh_mm.compress(A, B, decode=dec, **kw)                 # warm-up
        _sync(xp)
        t = time.perf_counter()
        sk = pagh_mm.compress(A, B, decode=dec, **kw)
        _sync(xp)
        out[f"compress_{'bits' if dec else 'plain'}_s"] = time.perf_counter() - t
    out["buckets"] = sk.buckets
    out["chosen"] = sk.chosen.reason
    for method in ("scan", "decode"):
        warm = pagh_mm.compress(A, B, decode=True, **kw)         # compiles every kernel used
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warm.top_k(planted, verify=True, method=method)
        warm = None
        table = defaultdict(float)
        saved = {}
        for mod, name in ((decode, "candidates"), (query, "exact_of"), (query, "peel"),
                          (query, "scan"), (query, "_pruned")):
            saved[(mod, name)] = getattr(mod, name)
            setattr(mod, name, _timed(table, name, getattr(mod, name), xp))
        try:
            sk2 = pagh_mm.compress(A, B, decode=True, **kw)
            _sync(xp)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t = time.perf_counter()
                got = sk2.top_k(planted, verify=True, method=method)
                _sync(xp)
                total = time.perf_counter() - t
        finally:
            for (mod, name), fn in saved.items():
                setattr(mod, name, fn)
        out[method] = {"query_s": total, "certified": bool(got.certified),
                       "verified": int(got.verified), "buckets_after": sk2.buckets,
                       "recall": synthetic.recall(data.rows, data.cols,
                                                  np.asarray(got.rows.get() if be else got.rows),
                                                  np.asarray(got.cols.get() if be else got.cols)),
                       "warnings": [str(w.message)[:200] for w in caught],
                       "stages": dict(table)}
        print(n, method, json.dumps(out[method], default=float)[:900], flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append", required=True)
    ap.add_argument("--per-vector", type=int, default=16)
    ap.add_argument("--planted", type=int, default=300)
    ap.add_argument("--buckets", type=int, default=None)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = [run(n, a.per_vector, a.planted, a.device, a.buckets) for n in a.n]
    if a.json:
        provenance.write(provenance.record("explore-decode", rows, vars(a), None,
                                           device=a.device), a.json)


if __name__ == "__main__":
    main()
