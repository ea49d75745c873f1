"""Timeline of one streamed compression from page-locked factors (issue 18, exploration):
where the time beyond the transfer floor goes.

CUDA events around every host-to-device copy (``pagh_mm.stream._dma``) and around each
chunk's compression (the worker's ``fn`` and ``each`` on the compute stream), all relative to an
event recorded when ``stream.compress`` is called; printed per chunk with the copy link's idle
gaps, the time before the first copy and after the last one.

    python benchmarks/explore_stream_timeline.py [--n 16384] [--buckets 8192] [--runs 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from fwht_gpu import gpu
from pagh_mm import stream


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--buckets", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--tail-splits", type=int, default=None, help="pagh_mm.stream.TAIL_SPLITS")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    if a.tail_splits is not None:
        stream.TAIL_SPLITS = a.tail_splits
    import cupyx
    rng = np.random.default_rng(0)
    A = cupyx.empty_pinned((a.n, a.n), np.float64)
    B = cupyx.empty_pinned((a.n, a.n), np.float64)
    A[...] = rng.standard_normal((a.n, a.n))
    B[...] = rng.standard_normal((a.n, a.n))
    kw = dict(buckets=a.buckets, reps=5, seed=1)
    ev = []                                     # (kind, label, start event, end event)
    real_dma, real_run = stream._dma, stream._Worker._run_gpu

    def dma(buf, slab, st):
        e0 = cp.cuda.Event()
        e0.record(st)
        out = real_dma(buf, slab, st)
        e1 = cp.cuda.Event()
        e1.record(st)
        ev.append(("copy", slab.nbytes, e0, e1))
        return out

    def run_gpu(self, fn, spans, each, report, prepare):
        state = {}

        def fn2(*x):
            e0 = cp.cuda.Event()
            e0.record(cp.cuda.get_current_stream())
            state["e0"] = e0
            return fn(*x)

        def each2(span, r):
            each(span, r)
            e1 = cp.cuda.Event()
            e1.record(cp.cuda.get_current_stream())
            ev.append(("compute", span, state["e0"], e1))
        return real_run(self, fn2, spans, each2, report, prepare)

    bw = []
    for _ in range(3):
        d = cp.empty(A.nbytes // 8, np.float64)
        s0, s1 = cp.cuda.Event(), cp.cuda.Event()
        s0.record()
        cp.cuda.runtime.memcpyAsync(d.data.ptr, A.ctypes.data, A.nbytes, 1, 0)
        s1.record(); s1.synchronize()
        bw.append(A.nbytes / cp.cuda.get_elapsed_time(s0, s1) * 1e3 / 1e9)
        del d
    floor = (A.nbytes + B.nbytes) / (max(bw) * 1e9)
    print(f"tail splits {stream.TAIL_SPLITS}; pinned H2D "
          f"{max(bw):.1f} GB/s: floor {floor * 1e3:.1f} ms for {a.n} x {a.n} FP64 x 2")
    for i in range(a.runs + 1):
        stream._dma, stream._Worker._run_gpu = dma, run_gpu
        ev.clear()
        cp.cuda.Device().synchronize()
        t0e = cp.cuda.Event()
        t0e.record()
        t0 = time.perf_counter()
        try:
            stream.compress(A, B, devices=[0], chunk=a.chunk, **kw)
            cp.cuda.Device().synchronize()
        finally:
            stream._dma, stream._Worker._run_gpu = real_dma, real_run
        wall = (time.perf_counter() - t0) * 1e3
        if i == 0:
            continue                            # (the first run allocates the pools)
        rel = lambda e: cp.cuda.get_elapsed_time(t0e, e)  # noqa: E731
        copies = sorted((rel(e0), rel(e1), nb) for k, nb, e0, e1 in ev if k == "copy")
        comps = sorted((rel(e0), rel(e1), sp) for k, sp, e0, e1 in ev if k == "compute")
        gaps = link = 0.0                       # (the link's busy time: the union of copies)
        end = copies[0][0]
        for c0, c1, _ in copies:
            gaps += max(0.0, c0 - end)
            link += max(0.0, c1 - max(c0, end))
            end = max(end, c1)
        print(f"run {i}: wall {wall:.1f} ms ({wall / floor / 1e3:.2f}x the floor); first copy at "
              f"{copies[0][0]:.1f} ms, last copy ends {copies[-1][1]:.1f} ms, link busy "
              f"{link:.1f} ms ({sum(nb for *_, nb in copies) / link / 1e6:.1f} GB/s), idle gaps "
              f"{gaps:.1f} ms; last compression ends {comps[-1][1]:.1f} ms; host end {wall:.1f}")
        for c0, c1, nb in copies:
            print(f"    copy    {c0:8.1f} {c1:8.1f}  {nb / 2**20:8.1f} MiB "
                  f"{nb / max(c1 - c0, 1e-9) / 1e6:6.1f} GB/s")
        for c0, c1, sp in comps:
            print(f"    compute {c0:8.1f} {c1:8.1f}  span {sp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
