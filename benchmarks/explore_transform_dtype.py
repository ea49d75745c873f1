"""FP64 data through FP32 transforms: a certified top-k's time and answer against FP64 transforms.

For each size, a planted FP64 product (``pagh_mm.synthetic.planted_product``), compressed with
``dtype`` float64 and with the library's rule (``dtype=None``: float32 where
``pagh_mm.auto.narrower_transforms`` allows; automatic buckets and repetitions for a top-k), then its
certified top-k: times (medians, fresh sketches), buckets, repetitions, whether certified, the
recall, whether the two answers agree (ids and exact values), and the rounding's worst-case
bound (:func:`bound`) against the sketch's noise level sigma.  With --gemm, DGEMM + top-k in the
same run.

    PYTHONPATH=. python3 benchmarks/explore_transform_dtype.py --n 16384 --n 32768 --json out.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics

import numpy as np

from fwht_gpu import provenance
from pagh_mm import compress, synthetic
from pagh_mm import bench
from pagh_mm.backend import cpu, gpu


def bound(be, A, B, b: int, u: float, loads: float) -> float:
    """Worst-case rounding of one estimate through transforms with unit roundoff u: FWHT
    (log2 b stages) of each factor's sketch rounded once, the product, the tree over the inner
    dimension, the inverse; the factors' sketches bounded by sqrt(load) times the vectors'
    norms (``loads``: the product of the two factors' largest bucket loads)."""
    xp = be.xp
    na = xp.sqrt((A.astype(xp.float64) ** 2).sum(axis=0))
    nb = xp.sqrt((B.astype(xp.float64) ** 2).sum(axis=1))
    total = float((na * nb).sum())
    L = b.bit_length() - 1
    K = A.shape[1]
    c = (2 * (L + 1) + 1 + max(1, (K - 1).bit_length()) + L) * u
    return c * math.sqrt(loads) * total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append", required=True)
    ap.add_argument("--k", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--gemm", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    be = gpu() if a.device == "gpu" else cpu()
    rows = []
    for n in a.n:
        data = synthetic.planted_product(n, a.k, seed=n, dtype=np.float64, xp=be.xp)
        answers = {}
        for name, dt in (("fp64", np.float64), ("auto", None)):
            state: dict = {}

            def flow():
                sk = compress(data.A, data.B, k=a.k, seed=1, dtype=dt)
                return sk, bench._queried(be, state, lambda: sk.top_k(a.k, verify=True))
            t, (sk, top) = bench._wall(be, flow, a.repeats)
            t_sk, _ = bench._wall(be, lambda: compress(data.A, data.B, k=a.k, seed=1, dtype=dt),
                                  a.repeats)
            q = statistics.median(state["query_s"][1:])
            rec = synthetic.recall(data.rows, data.cols, be.asnumpy(top.rows),
                                   be.asnumpy(top.cols))
            sig = math.sqrt(float(be.xp.max((be.xp.asarray(sk.sketch, dtype=be.xp.float64) ** 2)
                                            .sum(axis=1))) / sk.buckets)
            u = float(np.finfo(sk.dtype_object()).eps) / 2
            rb = bound(be, data.A, data.B, sk.buckets, u, 64.0)
            row = dict(n=n, transform=name, transforms=sk.dtype, buckets=sk.buckets, reps=sk.reps, flow_s=t,
                       sketch_s=t_sk, query_s=q, certified=bool(top.certified), recall=rec,
                       sigma=sig, rounding_bound=rb, bound_over_sigma=rb / sig)
            answers[name] = (be.asnumpy(top.rows), be.asnumpy(top.cols), be.asnumpy(top.exact))
            print(json.dumps(row), flush=True)
            rows.append(row)
            sk = top = None
            bench._free_gpu(be)
        r64, r32 = answers["fp64"], answers["auto"]
        same = all(np.array_equal(x, y) for x, y in zip(r64, r32))
        print(f"n={n}: same answer (ids, exact values) {same}", flush=True)
        rows.append(dict(n=n, same_answer=same))
        if a.gemm:
            g, _ = bench._wall(be, lambda: bench._exact_topk(be, data.A, data.B, a.k,
                                                             np.float64), a.repeats)
            rows.append(dict(n=n, dgemm_topk_s=g))
            print(f"n={n}: DGEMM + top-k {g:.4f} s", flush=True)
        data = None
        bench._free_gpu(be)
    if a.json:
        provenance.write(provenance.record("pagh-transform-dtype", rows, vars(a),
                                           device=a.device), a.json)


if __name__ == "__main__":
    main()
