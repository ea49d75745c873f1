"""Where a streamed sparse compression's time goes on one and two GPUs: copy threads per
worker and chunk sizes (issue 18's two-GPU scaling). Prints the medians and worker times.

    python benchmarks/explore_stream_threads.py --n 1048576 --threads 16,4,1 --chunks 4,8
"""
import argparse
import statistics
import sys
import time

import pagh_mm
from pagh_mm import stream, synthetic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--per-vector", type=int, default=64)
    ap.add_argument("--threads", default="16,4")
    ap.add_argument("--chunks", default="4,8", help="chunks per device")
    ap.add_argument("--switch", type=float, default=None, help="sys.setswitchinterval")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from fwht_gpu import gpu
    cp = gpu.cupy()
    if a.switch:
        sys.setswitchinterval(a.switch)
    d = synthetic.sparse_planted(a.n, a.per_vector, 300, 256, seed=a.n)
    A, B = d.A.tocsc(), d.B.tocsr()
    kw = dict(buckets=1 << 22, reps=5, seed=1, decode=False)
    sync = lambda: [cp.cuda.Device(i).synchronize() for i in (0, 1)]  # noqa: E731
    for th in (int(x) for x in a.threads.split(",")):
        stream.COPY_THREADS = th
        for per in (int(x) for x in a.chunks.split(",")):
            for devs in ([0], [0, 1]):
                c = 1 << ((a.n // (per * len(devs))).bit_length() - 1)
                ts = []
                for _ in range(a.repeats + 1):
                    t = time.perf_counter()
                    stream.compress(A, B, devices=devs, chunk=c, **kw)
                    sync()
                    ts.append(time.perf_counter() - t)
                times = [{k: round(v, 3) for k, v in w.times.items()} for w in stream.last_workers]
                print(f"threads {th:2d} chunk {c:7d} devices {devs}: "
                      f"{statistics.median(ts[1:]):.3f} s; {times}", flush=True)


if __name__ == "__main__" and not {"--halves", "--processes"} & set(sys.argv):
    main()


def halves():
    """Each GPU compresses its resident half of the inner dimension: one after the other, then
    both at once from two threads (does the compute itself scale?)."""
    from concurrent.futures import ThreadPoolExecutor

    import cupyx.scipy.sparse as csp
    from fwht_gpu import gpu
    cp = gpu.cupy()
    n = 1 << 20
    d = synthetic.sparse_planted(n, 64, 300, 256, seed=n)
    A, B = d.A.tocsc(), d.B.tocsr()
    kw = dict(buckets=1 << 22, reps=5, seed=1, decode=False)
    parts = []
    for g, (k0, k1) in enumerate(((0, n // 2), (n // 2, n))):
        with cp.cuda.Device(g):
            parts.append((g, csp.csc_matrix(A[:, k0:k1]), csp.csr_matrix(B[k0:k1])))

    def one(p):
        g, a, b = p
        with cp.cuda.Device(g):
            t = time.perf_counter()
            pagh_mm.compress(a, b, **kw)
            cp.cuda.Device(g).synchronize()
            return time.perf_counter() - t
    for p in parts:
        one(p)
    for _ in range(3):
        t = time.perf_counter()
        each = [one(p) for p in parts]
        seq = time.perf_counter() - t
        t = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(one, parts))
        par = time.perf_counter() - t
        print(f"resident halves: one after the other {seq:.3f} s {[round(x, 3) for x in each]}, "
              f"both at once {par:.3f} s {[round(x, 3) for x in both]}", flush=True)


if __name__ == "__main__" and "--halves" in sys.argv:
    halves()


def _proc(g, barrier, queue):
    import cupyx.scipy.sparse as csp
    from fwht_gpu import gpu
    cp = gpu.cupy()
    n = 1 << 20
    d = synthetic.sparse_planted(n, 64, 300, 256, seed=n)
    k0, k1 = (0, n // 2) if g == 0 else (n // 2, n)
    kw = dict(buckets=1 << 22, reps=5, seed=1, decode=False)
    with cp.cuda.Device(g):
        a, b = csp.csc_matrix(d.A.tocsc()[:, k0:k1]), csp.csr_matrix(d.B.tocsr()[k0:k1])
        pagh_mm.compress(a, b, **kw)
        cp.cuda.Device(g).synchronize()
        for _ in range(3):
            barrier.wait()
            t = time.perf_counter()
            pagh_mm.compress(a, b, **kw)
            cp.cuda.Device(g).synchronize()
            queue.put((g, time.perf_counter() - t))


def processes():
    """The resident halves at once from two processes (no shared interpreter lock)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=_proc, args=(g, barrier, queue)) for g in (0, 1)]
    for p in ps:
        p.start()
    got = [queue.get() for _ in range(6)]
    for p in ps:
        p.join()
    print("resident halves, two processes at once:", [(g, round(t, 3)) for g, t in got],
          flush=True)


if __name__ == "__main__" and "--processes" in sys.argv:
    processes()
