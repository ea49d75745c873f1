"""The stream's copy sequence (A's pitched column chunks, B's contiguous row slabs of a 16384 x
16384 FP64 product, pinned), timed with events: alone, beside device-to-device copies, beside
host threads copying, with random values, after stream.compress ran in the process (session 25,
issue 18; results/h100/session25-copy-sequence-*). Writes $OUT/copy-contention.json."""
import threading, time, os
import numpy as np, cupy as cp, cupyx
rt = cp.cuda.runtime
n = 16384; c = 4096
A = cupyx.empty_pinned((n, n), np.float64); A[:] = 1.0
B = cupyx.empty_pinned((n, n), np.float64); B[:] = 1.0
bufs = [cp.empty(n * c, np.float64) for _ in range(4)]
s = cp.cuda.Stream(non_blocking=True)
busy = cp.cuda.Stream(non_blocking=True)
X = cp.ones(1 << 28, np.float64); Y = cp.empty_like(X)
seq = [(k, 4096) for k in range(0, 12288, 4096)] + [(12288, 2048), (14336, 1024), (15360, 1024)]  # (first column, width)
def issue(evs):
    for i, (k0, w) in enumerate(seq):
        e0 = cp.cuda.Event(); e0.record(s)
        rt.memcpy2DAsync(bufs[i % 2].data.ptr, w * 8, A.ctypes.data + k0 * 8, n * 8, w * 8, n, rt.memcpyHostToDevice, s.ptr)
        e1 = cp.cuda.Event(); e1.record(s)
        rt.memcpyAsync(bufs[2 + i % 2].data.ptr, B.ctypes.data + k0 * n * 8, w * n * 8, rt.memcpyHostToDevice, s.ptr)
        e2 = cp.cuda.Event(); e2.record(s)
        evs.append((w, e0, e1, e2))
def run(label, bg=None):
    stop = threading.Event()
    th = []
    if bg == "device":
        def loop():
            with busy:
                while not stop.is_set():
                    for _ in range(20): cp.copyto(Y, X)
                    busy.synchronize()
        th = [threading.Thread(target=loop)]
    elif bg == "host":
        big = [np.ones(1 << 26) for _ in range(8)]; dst = [np.empty(1 << 26) for _ in range(8)]
        def hl(i):
            while not stop.is_set(): np.copyto(dst[i], big[i])
        th = [threading.Thread(target=hl, args=(i,)) for i in range(8)]
    for t in th: t.start()
    time.sleep(0.2)
    res = []
    for _ in range(3):
        evs = []; issue(evs); s.synchronize()
        a = [(w, n * w * 8 / cp.cuda.get_elapsed_time(e0, e1) / 1e6, n * w * 8 / cp.cuda.get_elapsed_time(e1, e2) / 1e6) for w, e0, e1, e2 in evs]
        tot = cp.cuda.get_elapsed_time(evs[0][1], evs[-1][3])
        res.append((tot, a))
    stop.set()
    for t in th: t.join()
    tot, a = sorted(res)[1]
    print(f"{label}: {tot:.1f} ms for {2 * n * n * 8 / 2**30:.0f} GiB ({2 * n * n * 8 / tot / 1e6:.1f} GB/s); A/B GB/s per chunk: " +
          ", ".join(f"{w}:{x:.0f}/{y:.0f}" for w, x, y in a), flush=True)
    return dict(label=label, total_ms=tot, chunks=a)
out = [run("alone (ones)"), run("beside device copies", "device"),
       run("beside 8 host copy threads", "host")]
A[...] = np.random.default_rng(0).standard_normal((n, n)); B[...] = np.random.default_rng(1).standard_normal((n, n))
out.append(run("alone (random values)"))
import sys; sys.path.insert(0, ".")
from pagh_mm import stream
for _ in range(2):
    stream.compress(A, B, devices=[0], buckets=8192, reps=5, seed=1); cp.cuda.Device().synchronize()
out.append(run("after stream.compress"))
import gc; gc.collect(); cp.get_default_memory_pool().free_all_blocks()
out.append(run("after freeing the pool"))
from fwht_gpu import provenance  # noqa: E402
provenance.write(provenance.record("copy-contention-explore", out, {"n": n, "chunk": c}, device="gpu"),
                 os.path.join(os.environ.get("OUT", "."), "copy-contention.json"))
