"""One fused-kernel compression for Nsight Compute (issue 16):

    ncu --kernel-name regex:fused_dense --launch-count 1 --section SpeedOfLight \
        python benchmarks/profile_fused.py --n 8192 --buckets 8192 --dtype float32
"""
import argparse

import pagh_mm
from fwht_gpu import gpu

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--n", type=int, default=8192)
ap.add_argument("--buckets", type=int, default=8192)
ap.add_argument("--dtype", default="float32")
a = ap.parse_args()
cp = gpu.cupy()
rng = cp.random.default_rng(0)
A, B = rng.standard_normal((a.n, a.n)), rng.standard_normal((a.n, a.n))
pagh_mm.compress(A, B, buckets=a.buckets, reps=5, seed=1, dtype=a.dtype)
cp.cuda.Device().synchronize()
