"""reps="auto" against fixed counts for certified top-k queries of dense planted products.

The compression goes through the transforms; ``--against`` names the fixed counts (default 5).
Rows: the repetitions and buckets chosen, compression and query times, whether the answer is
certified and its recall; same data, same run.

    python benchmarks/auto_reps.py [--n 2048 --n 4096] [--planted 300] [--device cpu|gpu]
        [--against 5 --against 7] [--repeats 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import statistics
import time

import pagh_mm
from fwht_gpu import provenance
from pagh_mm import synthetic


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--planted", type=int, default=300)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--against", type=int, action="append",
                    help="fixed repetition counts to compare with (default 5)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    be = pagh_mm.backend.gpu() if a.device == "gpu" else pagh_mm.backend.cpu()
    xp = be.xp
    rows = []
    print(f"{'n':>6} {'reps':>6} {'buckets':>8} {'compress s':>10} {'top-k s':>8} {'cert':>5} "
          f"{'recall':>6}")
    for n in a.n or [2048, 4096]:
        data = synthetic.planted_product(n, a.planted, seed=n, dtype=a.dtype, xp=xp)
        for reps in ("auto", *(a.against or [5])):
            t_c, t_q = [], []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                sk = pagh_mm.compress(data.A, data.B, k=a.planted, reps=reps, seed=1)
                if be.gpu:                       # (the sketch finished before the clock)
                    xp.cuda.Device().synchronize()
                t1 = time.perf_counter()
                top = sk.top_k(a.planted, verify=True)
                t2 = time.perf_counter()
                t_c.append(t1 - t0)
                t_q.append(t2 - t1)
            rec = synthetic.recall(data.rows, data.cols, be.asnumpy(top.rows),
                                   be.asnumpy(top.cols))
            row = {"n": n, "reps_asked": reps, "reps": sk.reps, "buckets": sk.buckets,
                   "compress_s": statistics.median(t_c), "topk_s": statistics.median(t_q),
                   "certified": bool(top.certified), "recall": rec, "chosen": sk.chosen.reason}
            rows.append(row)
            print(f"{n:>6} {str(reps) + '->' + str(sk.reps):>6} {sk.buckets:>8} "
                  f"{row['compress_s']:10.3f} {row['topk_s']:8.3f} {str(row['certified']):>5} "
                  f"{rec:6.3f}", flush=True)
    if a.json:
        provenance.write(provenance.record("pagh-auto-reps", rows, vars(a), device=a.device),
                         a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
