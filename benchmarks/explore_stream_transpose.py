"""Streamed compression of a C-ordered pinned A (column chunks are pitched 2-d copies) with each
chunk turned F-ordered on the device before the sketch (a transpose kernel that reads the
chunk's rows coalesced) against the stream as it is, alternating, same process (session 26,
issue 18). The question: does the sketch's column reads of a C-ordered chunk slow the next
chunk's pitched DMA, and does one coalesced transpose per chunk avoid it?
Writes $OUT/stream-transpose.json."""
import os, statistics, sys, time
sys.path.insert(0, ".")
import numpy as np, cupy as cp, cupyx
from pagh_mm import stream

_orig = stream._dma
MODE = {"where": None}

def _dma_t(buf, slab, s):
    view = _orig(buf, slab, s)
    if MODE["where"] is None or view is None or slab.flags.c_contiguous or slab.flags.f_contiguous:
        return view
    if view.flags.c_contiguous and view.shape[1] > 1:      # a pitched column chunk of A
        return cp.asfortranarray(view)                      # on the copy stream, after the DMA
    return view

stream._dma = _dma_t

def med(f, reps):
    f(); cp.cuda.Device().synchronize(); ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); cp.cuda.Device().synchronize(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts

def link(nbytes):
    h = cupyx.empty_pinned(nbytes // 8, np.float64); h[:] = 1.0
    d = cp.empty(nbytes // 8, np.float64)
    f = lambda: d.set(h)
    return nbytes / med(f, 5)[0] / 1e9

rows = []
for n in [int(x) for x in (sys.argv[1:] or ["16384", "32768"])]:
    rng = np.random.default_rng(0)
    A = cupyx.empty_pinned((n, n), np.float64); A[...] = rng.standard_normal((n, n))
    B = cupyx.empty_pinned((n, n), np.float64); B[...] = rng.standard_normal((n, n))
    gbs = link(1 << 30)
    floor = 2 * A.nbytes / gbs / 1e9
    kw = dict(devices=[0], buckets=8192, reps=5, seed=1)
    ref = None
    for rnd in range(3):
        for where in (None, "copy"):
            MODE["where"] = where
            sk = stream.compress(A, B, **kw)
            bits = cp.asnumpy(sk.sketch).tobytes()
            if where is None:
                ref = bits
            same = bits == ref
            m, ts = med(lambda: stream.compress(A, B, **kw), 5)
            row = dict(n=n, transpose=where, round=rnd, seconds=m, ratio=m / floor, link_gbs=gbs,
                       same_bits=same, all=ts)
            rows.append(row)
            print(f"n {n} transpose {where}: {m * 1e3:.1f} ms = {m / floor:.3f}x the link ({gbs:.1f} GB/s)"
                  f" same bits {same}", flush=True)
    A = B = None
    cp.get_default_memory_pool().free_all_blocks()
from fwht_gpu import provenance  # noqa: E402
provenance.write(provenance.record("stream-transpose-explore", rows, {"buckets": 8192, "reps": 5}, device="gpu"),
                 os.path.join(os.environ.get("OUT", "."), "stream-transpose.json"))
