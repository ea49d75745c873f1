"""Beyond one device: a covariance screen whose data is made a chunk at a time and never
held whole, by the three routes of pagh_mm, with the same answer and the same bits.

Data: X, N samples x p features (float32), generated on the fly in chunks of 2**j rows (each
chunk from its own seed), with planted column pairs of correlation rho = 0.9.  Task: the
most correlated pairs, a certified top-k of the Gram product X^T X (diagonal left out).

* memory: X generated whole, then pagh_mm.compress_gram(X, k=...) (the reference; only
  where X fits this device);
* file: the chunks written to a .npy file (memory-mapped: the file may be larger than the
  memory), then pagh_mm.compress(X.T, X, k=..., devices=...): the file is streamed to the
  GPUs given (--devices; the host's threads without a GPU), a chunk at a time;
* dask: X as a dask array whose chunks are generated where they are computed, never
  stored, then pagh_mm.dask.compress_gram(X, k=...) on the local scheduler (a
  dask.distributed cluster, e.g. dask_cuda.LocalCUDACluster, runs it unchanged).

Each route's verified top-k reads only the columns of X it needs.  Prints per route and
sample count: time to compress and to query, the rate at which X was read, the buckets,
the certificate, the recall of the planted pairs, and whether the sketch has the memory
route's bits; plots the times.  Writes beyond_one_device.png and .json to --out-dir (the
.npy file goes to a temporary folder in --scratch, removed at the end).

    python examples/beyond_one_device.py [--small] [--cpu] [--features P] [--samples N]
        [--devices 0,1] [--scratch DIR] [--out-dir DIR] [--force]

Defaults: p = 1024, N up to 2**18 on the CPU; p = 4096, N up to 2**20 on a GPU; --small:
p = 256, N up to 2**14.
"""
import math
import os
import tempfile
import time

import numpy as np

import pagh_mm
from fwht_gpu import memory
from _shared import Figure, Table, args, backend, fail, host, log_axis, pyplot, record, sync, yes_no

NAME = "beyond_one_device"


def options(ap):
    ap.add_argument("--features", type=int, default=None, help="p, the number of features")
    ap.add_argument("--samples", type=int, default=None, help="the largest N (a power of two)")
    ap.add_argument("--devices", default=None,
                    help="GPUs for the file route, e.g. 0,1 (default: GPU 0; the CPU without one)")
    ap.add_argument("--scratch", default=None,
                    help="folder for the temporary .npy file (default: the system's)")


a = args(__doc__, NAME, options)
xp, gpu = backend(a.cpu)
device = "GPU" if gpu else "CPU"
if a.small:
    p, n_max = 256, 1 << 14
elif gpu:
    p, n_max = 4096, 1 << 20
else:
    p, n_max = 1024, 1 << 18
p = a.features or p
n_max = a.samples or n_max
if n_max < 1024 or n_max & (n_max - 1):
    fail(f"--samples must be a power of two >= 1024 (got {n_max})")
pairs, rho, seed = 5, 0.9, 0
if p < 4 * pairs:
    fail(f"need at least {4 * pairs} features (got {p})")
k = 2 * pairs
chunk = min(4096, n_max // 8)                    # rows per generated chunk (a power of two)
devices = ["cpu"] if not gpu else [0] if a.devices is None else \
    [int(d) for d in a.devices.split(",")]
pick = np.random.default_rng(seed).choice(p, 2 * pairs, replace=False)
ca, cb = pick[:pairs], pick[pairs:]
planted = {(int(min(i, j)), int(max(i, j))) for i, j in zip(ca, cb)}
sizes = [n_max // 4, n_max // 2, n_max]
try:
    import dask
    import dask.array as da
    import pagh_mm.dask as pdask
except ImportError:
    da = None


def chunk_of(k0: int, rows: int):
    """Rows k0 .. k0 + rows - 1 of X (float32), the same wherever they are generated."""
    g = np.random.default_rng([seed, k0])
    Z = g.standard_normal((rows, p), dtype=np.float32)
    Z[:, cb] = rho * Z[:, ca] + np.float32(math.sqrt(1 - rho ** 2)) * Z[:, cb]
    return Z


def found(top):
    r_, c_ = host(top.rows), host(top.cols)
    return {(int(min(i, j)), int(max(i, j))) for i, j in zip(r_, c_)}


def screen(compress):
    """(compress seconds, query seconds, the sketch, its verified top-k)."""
    sync(gpu)
    t0 = time.perf_counter()
    sk = compress()
    sync(gpu)
    t1 = time.perf_counter()
    top = sk.top_k(k, verify=True, exclude_diagonal=True)
    sync(gpu)
    return t1 - t0, time.perf_counter() - t1, sk, top


have = memory.available("gpu" if gpu else "cpu")
print(f"X: up to {n_max} samples x {p} features (float32, {n_max * p * 4 / 2**30:.3f} GiB at the "
      f"largest N), generated in chunks of {chunk} rows, {pairs} planted pairs of correlation "
      f"{rho}; the product X^T X is {p} x {p} ({p * p * 8 / 2**30:.3f} GiB in float64); task: "
      f"the certified top-{k} off-diagonal entries; file route on {devices}"
      + (f"; memory available: {have / 2**30:.1f} GiB" if have is not None else ""))
if da is None:
    print("dask is not installed (pip install 'pagh-mm[dask]'): the dask route is left out")

# warm-up, untimed: compile caches (numba, CuPy) on a small slice of the same data
warm = chunk_of(0, 1024)
pagh_mm.compress_gram(xp.asarray(warm), k=k, seed=seed).top_k(k, verify=True,
                                                               exclude_diagonal=True)

runs = Table(f"three routes by sample count N ({device}, p = {p})",
             [("N", "{:d}", 8), ("route", "{}", 6), ("compress_s", "{:.3f}", 8),
              ("query_s", "{:.3f}", 7), ("read_GB/s", "{:.2f}", 7), ("buckets", "{:d}", 8),
              ("certified", yes_no, 4), ("recall", "{:.2f}", 4), ("same_bits", "{}", 4)],
             note="memory: X generated whole on the device, then compress_gram; file: X written "
                  "chunk by chunk to a memory-mapped .npy, streamed to the devices; dask: X's "
                  "chunks generated inside the tasks, never stored;\nread_GB/s: bytes of X over "
                  "compress_s; same_bits: the sketch equals the memory route's bit for bit "
                  "('-': no memory route at this N, or other buckets)")
results = []
scratch = tempfile.TemporaryDirectory(dir=a.scratch, prefix="pagh_mm_beyond_")
try:
    for N in sizes:
        nbytes = N * p * 4
        ref = None
        if have is None or nbytes * 3 < have:
            X = xp.asarray(np.concatenate([chunk_of(k0, chunk) for k0 in range(0, N, chunk)]))
            t_c, t_q, ref, top = screen(lambda: pagh_mm.compress_gram(X, k=k, seed=seed))
            del X
            results.append(dict(N=N, route="memory", compress=t_c, query=t_q, rate=nbytes / t_c / 1e9,
                                b=ref.buckets, certified=bool(top.certified),
                                recall=len(found(top) & planted) / pairs, same="-"))
        path = os.path.join(scratch.name, f"X_{N}.npy")
        Xm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(N, p))
        for k0 in range(0, N, chunk):
            Xm[k0:k0 + chunk] = chunk_of(k0, chunk)
        Xm.flush()
        del Xm
        Xm = np.load(path, mmap_mode="r")
        routes = [("file", lambda: pagh_mm.compress(Xm.T, Xm, k=k, seed=seed, devices=devices))]
        if da is not None:
            Xd = da.concatenate([da.from_delayed(dask.delayed(chunk_of)(k0, chunk), (chunk, p),
                                                 np.float32) for k0 in range(0, N, chunk)])
            if gpu:
                Xd = Xd.map_blocks(xp.asarray, meta=xp.empty((0, 0), dtype=np.float32))
            routes.append(("dask", lambda: pdask.compress_gram(Xd, k=k, seed=seed)))
        for name, fn in routes:
            t_c, t_q, sk, top = screen(fn)
            same = "-" if ref is None or ref.buckets != sk.buckets else \
                yes_no(bool((host(sk.sketch) == host(ref.sketch)).all()))
            results.append(dict(N=N, route=name, compress=t_c, query=t_q, rate=nbytes / t_c / 1e9,
                                b=sk.buckets, certified=bool(top.certified),
                                recall=len(found(top) & planted) / pairs, same=same))
        Xm = None                            # (the map closed before the file goes)
        os.remove(path)
finally:
    scratch.cleanup()
for r in results:
    runs.add(r["N"], r["route"], r["compress"], r["query"], r["rate"], r["b"], r["certified"],
             r["recall"], r["same"])

print()
last = [r for r in results if r["N"] == n_max]
for r in last:
    print(f"at N = {n_max}, {r['route']}: {r['compress'] + r['query']:.2f} s in all, "
          f"X read at {r['rate']:.2f} GB/s, certified {yes_no(r['certified'])}, recall "
          f"{r['recall']:.2f}")
print("the file and dask routes hold one chunk of X per device or task at a time: their "
      "memory does not grow with N, so N and p are bounded by the disk (file) or by nothing "
      "(dask, chunks generated where they are used) rather than by the device; the answers "
      "and, with the same buckets, the sketches' bits are the memory route's.")

# --- the figure -----------------------------------------------------------------------------
plt = pyplot()
fig = Figure()
f, ax = plt.subplots(1, 1, figsize=(8, 4.4))
styles = {"memory": ("o-", "C0"), "file": ("s-", "C2"), "dask": ("^-", "C1")}
times = []
for route, (fmt, color) in styles.items():
    rows = [r for r in results if r["route"] == route]
    if not rows:
        continue
    ys = [r["compress"] for r in rows]
    fig.plot(ax, "time", [r["N"] for r in rows], ys, fmt, color=color,
             label=f"{route}: compress", table=runs, y_col="compress_s", x_col="N",
             match={"route": route})
    times += ys
log_axis(ax, "x", ticks=sizes)
log_axis(ax, "y", data=times)
ax.set(xlabel="samples N", ylabel="seconds",
       title=f"compressing X^T X, X made a chunk at a time ({device}, p = {p})")
ax.legend(fontsize=8)
ax.grid(True, which="major", alpha=0.3)
a.out.save(f, record(NAME, a, gpu, [runs], fig, runs=results, planted=sorted(planted),
                     devices=[str(d) for d in devices], chunk=chunk))
