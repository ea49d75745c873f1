"""Streamed compression with fewer SMs (issue 18, exploration; session 29): does a compression
that runs on fewer SMs, spreading its memory traffic over more of each chunk's transfer, let a
C-ordered A's pitched copies run faster?

A kernel that holds N SMs (one block per SM: all of its shared memory, spinning until the host
sets a flag in page-locked memory) runs beside ``pagh_mm.stream.compress`` of a 16384^2 FP64
product (pinned factors, C-ordered A, b = 8192, d = 5), and beside the resident compression
(the compute's own slowdown). The transfer floor is one contiguous copy of A and of B, in the
same run.

    python benchmarks/explore_stream_gentle.py [--n 16384] [--hold 0 16 33 50 66] [--runs 5]

Writes $OUT/stream-gentle.json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, ".")
import cupy as cp  # noqa: E402
import cupyx  # noqa: E402
import numpy as np  # noqa: E402

import pagh_mm  # noqa: E402
from fwht_gpu import provenance  # noqa: E402
from pagh_mm import stream  # noqa: E402

HOLD = r'''
extern "C" __global__ void hold(const volatile int* flag, unsigned long long limit_ns) {
  extern __shared__ int s[];
  if (threadIdx.x == 0) s[0] = 0;
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(20000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (*flag == 0 && t - t0 < limit_ns);
}'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--hold", type=int, nargs="+", default=[0, 16, 33, 50, 66])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--order", default="C")
    args = ap.parse_args()
    n = args.n
    dev = cp.cuda.Device()
    smem = dev.attributes["MaxSharedMemoryPerBlockOptin"]
    hold = cp.RawKernel(HOLD, "hold")
    hold.max_dynamic_shared_size_bytes = smem
    flag = cupyx.empty_pinned((1,), np.int32)
    side = cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(0)
    A = cupyx.empty_pinned((n, n), np.float64, order=args.order)
    A[...] = rng.standard_normal((n, n))
    B = cupyx.empty_pinned((n, n), np.float64)
    B[...] = rng.standard_normal((n, n))
    kw = dict(buckets=8192, reps=5, seed=1)

    def held(fn, N):
        """Seconds of fn() while N SMs are held (fn synchronizes its own work)."""
        flag[0] = 0
        if N:
            with side:
                hold((N,), (32,), (cp.uint64(flag.ctypes.data), cp.uint64(5_000_000_000)),
                     shared_mem=smem)
            time.sleep(0.005)
        t0 = time.perf_counter()
        r = fn()
        dt = time.perf_counter() - t0
        flag[0] = 1
        side.synchronize()
        return dt, r

    dA = cp.empty((n, n), np.float64)
    dB = cp.empty((n, n), np.float64)
    st = cp.cuda.Stream(non_blocking=True)

    def upload():
        dA.data.copy_from_host_async(A.ctypes.data, A.nbytes, st)
        dB.data.copy_from_host_async(B.ctypes.data, B.nbytes, st)
        st.synchronize()

    upload()
    floors = [held(upload, 0)[0] for _ in range(args.runs)]
    floor = statistics.median(floors)
    gbs = 2 * A.nbytes / floor / 1e9
    print(f"transfer floor {floor * 1e3:.1f} ms ({gbs:.1f} GB/s), A {args.order}-ordered", flush=True)
    dA = cp.asarray(A, order=args.order)

    def resident():
        s = pagh_mm.compress(dA, dB, **kw)
        cp.cuda.get_current_stream().synchronize()
        return s

    def streamed():
        return stream.compress(A, B, devices=[dev.id], **kw)

    ref = resident()
    rows = []
    for N in args.hold:
        held(resident, N), held(streamed, N)                       # warm
        res = [held(resident, N)[0] for _ in range(args.runs)]
        sts, same = [], True
        for _ in range(args.runs):
            dt, s = held(streamed, N)
            sts.append(dt)
            same &= bool((s.sketch == ref.sketch).all())
        row = dict(held_sms=N, resident_s=statistics.median(res), streamed_s=statistics.median(sts),
                   streamed_all=sts, ratio=statistics.median(sts) / floor, same_bits=same)
        rows.append(row)
        print(f"{N:3d} SMs held: resident {row['resident_s'] * 1e3:6.1f} ms, streamed "
              f"{row['streamed_s'] * 1e3:6.1f} ms = {row['ratio']:.3f}x the floor "
              f"(runs {', '.join(f'{x / floor:.2f}' for x in sts)}), same bits {same}", flush=True)
    provenance.write(provenance.record("stream-gentle-explore", rows,
                                       {"n": n, "order": args.order, "floor_s": floor,
                                        "floor_gbs": gbs, **kw}, device="gpu"),
                     os.path.join(os.environ.get("OUT", "."), "stream-gentle.json"))


if __name__ == "__main__":
    main()
