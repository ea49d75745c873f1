import statistics, sys, time
import numpy as np
import pagh_mm
from pagh_mm import stream, synthetic
from fwht_gpu import gpu
cp = gpu.cupy()
n = 1 << 20
d = synthetic.sparse_planted(n, 64, 300, 256, seed=n)
A, B = d.A.tocsc(), d.B.tocsr()
kw = dict(buckets=1 << 22, reps=5, seed=1, decode=False)
sync = lambda: [cp.cuda.Device(i).synchronize() for i in (0, 1)]
def t(fn, r=5):
    ts = []
    for _ in range(r):
        sync(); t0 = time.perf_counter(); fn(); sync(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
for slots, threads in ((2, 16), (3, 16), (3, 8), (2, 16)):
    stream.SLOTS, stream.COPY_THREADS = slots, threads
    for devs in ([0], [0, 1]):
        x = t(lambda: stream.compress(A, B, devices=devs, **kw))
        print(f"slots {slots} threads {threads} devices {devs}: {x:.3f} s", flush=True)
        for w in stream.last_workers:
            print("   ", {k: round(v, 4) for k, v in w.times.items()}, w.chunks, flush=True)
