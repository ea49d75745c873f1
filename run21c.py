import sys, time
import numpy as np
import torch
from torch.profiler import profile, ProfilerActivity
import pagh_mm
from pagh_mm import stream, synthetic
from fwht_gpu import gpu
cp = gpu.cupy()
n = 1 << 20
d = synthetic.sparse_planted(n, 64, 300, 256, seed=n)
A, B = d.A.tocsc(), d.B.tocsr()
kw = dict(buckets=1 << 22, reps=5, seed=1, decode=False)
stream.EDGE_SPLIT = 0
torch.zeros(1, device="cuda")
for c in (1 << 18, 1 << 15):
    stream.compress(A, B, devices=[0], chunk=c, **kw); cp.cuda.Device(0).synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        stream.compress(A, B, devices=[0], chunk=c, **kw); cp.cuda.Device(0).synchronize()
        print(f"chunk {c}: {time.perf_counter() - t0:.3f} s", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70), flush=True)
