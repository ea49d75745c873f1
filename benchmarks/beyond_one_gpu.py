"""Beyond one GPU (issue 18): streaming host factors to a GPU, several GPUs, dask-cuda.

In one run, on the GPUs of one host:

* the floor: host-to-device bandwidth from pinned memory (each GPU alone, then all at once);
* per product: ``pagh_mm.compress`` of factors already in device memory (the compute alone);
  a user's upload (``cupy.asarray`` of both) then that compression; the streamed compression
  of the host factors on GPU 0 (``devices=[0]``) and on every GPU given; with
  ``--dask-cuda``, ``pagh_mm.dask.compress`` on a ``dask_cuda.LocalCUDACluster`` (one worker
  per GPU, CuPy blocks). Every sketch is compared with the resident one's bits;
* ``--beyond ROWS FEATURES``: a Gram screen of X (ROWS x FEATURES float32, generated in host
  memory with planted correlated column pairs), larger than one GPU's memory, streamed to
  every GPU given; the unverified top-k's recall of the planted pairs.

Medians of --repeats runs after a warm-up.

    python benchmarks/beyond_one_gpu.py --dense 32768 --dtype fp64 --buckets 8192 \\
        --sparse 1048576 --devices 0,1 --dask-cuda --json out.json
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import pagh_mm
from fwht_gpu import provenance
from pagh_mm import stream, synthetic


def _median(fn, repeats, sync):
    out = fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _bits(x):
    x = x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)
    return x.view(np.uint8)


def _same(a, b) -> bool:
    return bool(np.array_equal(_bits(a), _bits(b)))


def bandwidth(cp, devices, nbytes=1 << 30, repeats=3):
    """Host-to-device GB/s from pinned memory: each device alone, then all at once."""
    import cupyx
    host = cupyx.empty_pinned(nbytes, np.uint8)
    host[:] = 1
    bufs = {}
    for d in devices:
        with cp.cuda.Device(d):
            bufs[d] = cp.empty(nbytes, np.uint8)

    def copy(d):
        with cp.cuda.Device(d):
            s = cp.cuda.Stream(non_blocking=True)
            bufs[d].set(host, stream=s)
            s.synchronize()

    alone = {}
    for d in devices:
        copy(d)
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            copy(d)
            ts.append(time.perf_counter() - t)
        alone[d] = nbytes / statistics.median(ts) / 1e9
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        with ThreadPoolExecutor(len(devices)) as pool:
            list(pool.map(copy, devices))
        ts.append(time.perf_counter() - t)
    together = len(devices) * nbytes / statistics.median(ts) / 1e9
    print("host-to-device from pinned memory: " +
          ", ".join(f"GPU {d} {g:.1f} GB/s" for d, g in alone.items()) +
          f"; all {len(devices)} at once {together:.1f} GB/s", flush=True)
    # a C-ordered factor's chunk of columns goes as one pitched (2-d) copy of narrow rows
    d = devices[0]
    pitched = {}
    with cp.cuda.Device(d):
        s = cp.cuda.Stream(non_blocking=True)
        rt = cp.cuda.runtime
        for width in (8 << 10, 16 << 10, 32 << 10, 64 << 10):
            rows = nbytes // (4 * width)                # every fourth row-width of the host buffer

            def go():
                rt.memcpy2DAsync(bufs[d].data.ptr, width, host.ctypes.data, 4 * width, width, rows,
                                 rt.memcpyHostToDevice, s.ptr)
                s.synchronize()
            go()
            ts = []
            for _ in range(repeats):
                t = time.perf_counter()
                go()
                ts.append(time.perf_counter() - t)
            pitched[width] = rows * width / statistics.median(ts) / 1e9
    print(f"    pitched rows (a C-ordered factor's column chunk) to GPU {d}: " +
          ", ".join(f"{w >> 10} KiB {g:.1f} GB/s" for w, g in pitched.items()), flush=True)
    return alone, together, pitched


def _profile(fn, sync):
    """A cProfile of one run (one device: its worker runs in this thread), by cumulative and
    by internal time."""
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    fn()
    sync()
    pr.disable()
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats(key).print_stats(25)
        print(out.getvalue()[-5000:], flush=True)


def case(cp, name, A, B, kw, devices, repeats, bw, dask_client=None, chunk=None,
         dask_max=1 << 62, profile=False, all_chunks=()):
    sync = lambda: [cp.cuda.Device(d).synchronize() for d in devices]  # noqa: E731
    nbytes = sum(M.data.nbytes + M.indices.nbytes + M.indptr.nbytes if hasattr(M, "indptr")
                 else M.nbytes for M in (A, B))
    sparse = hasattr(A, "indptr")
    import cupyx.scipy.sparse as csp

    def upload(M):
        return (csp.csc_matrix(M) if M.format == "csc" else csp.csr_matrix(M)) if sparse \
            else cp.asarray(M)
    with cp.cuda.Device(devices[0]):
        dA, dB = upload(A), upload(B)
        t_res, res = _median(lambda: pagh_mm.compress(dA, dB, **kw), repeats, sync)
        dA = dB = None
        t_up, _ = _median(lambda: pagh_mm.compress(upload(A), upload(B), **kw), repeats, sync)
    floor1 = nbytes / (bw[0][devices[0]] * 1e9)
    floor_all = nbytes / (bw[1] * 1e9)
    row = {"case": name, "bytes": nbytes, "buckets": res.buckets, "reps": res.reps,
           "resident_s": t_res, "upload_then_compress_s": t_up,
           "transfer_floor_one_s": floor1, "transfer_floor_all_s": floor_all,
           "chunk": chunk}
    print(f"{name}: {nbytes / 2**30:.2f} GiB, b={res.buckets}: resident {t_res:.3f} s, "
          f"upload + compress {t_up:.3f} s, transfer floor {floor1:.3f} s (one GPU) / "
          f"{floor_all:.3f} s (all)", flush=True)
    for label, devs in (("stream_one", devices[:1]), ("stream_all", devices)):
        if label == "stream_all" and len(devices) == 1:
            continue
        t, sk = _median(lambda: stream.compress(A, B, devices=devs, chunk=chunk, **kw), repeats,
                        sync)
        same = _same(sk.sketch, res.sketch)
        floor = floor1 if len(devs) == 1 else floor_all
        times = [{k: round(v, 4) for k, v in w.times.items()} for w in stream.last_workers]
        row[f"{label}_worker_times"] = times
        row[f"{label}_worker_chunks"] = [w.chunks for w in stream.last_workers]
        print(f"    worker times (last run): {times}", flush=True)
        row.update({f"{label}_s": t, f"{label}_same_bits": same,
                    f"{label}_vs_transfer": t / floor,
                    f"{label}_vs_max_transfer_compute": t / max(floor, t_res / len(set(devs)))})
        print(f"    streamed on {devs}: {t:.3f} s ({t / floor:.2f}x the transfer floor, "
              f"{t / max(floor, t_res / len(set(devs))):.2f}x max(transfer, compute / GPUs)), "
              f"same bits: {same}", flush=True)
    if not sparse:
        import cupyx
        c = chunk or stream.chunk_size([stream._Source(A, 1), stream._Source(B, 2)],
                                       A.shape[1], 1, None)
        n = A.shape[1]
        ha = cupyx.empty_pinned((A.shape[0], c), A.dtype, order=stream._staging_order(A))
        hb = cupyx.empty_pinned((c, B.shape[1]), B.dtype, order=stream._staging_order(B))
        pool = ThreadPoolExecutor(stream.COPY_THREADS)
        t0 = time.perf_counter()
        for k0 in range(0, n, c):
            k1 = min(n, k0 + c)
            stream._copy_into(ha[:, :k1 - k0], A[:, k0:k1], pool)
            stream._copy_into(hb[:k1 - k0], B[k0:k1], pool)
        t_copy = time.perf_counter() - t0
        pool.shutdown()
        del ha, hb
        row["host_copy_floor_s"] = t_copy
        print(f"    copying the slabs into pinned memory ({stream.COPY_THREADS} threads): "
              f"{t_copy:.3f} s ({nbytes / t_copy / 1e9:.1f} GB/s)", flush=True)
        pA = cupyx.empty_pinned(A.shape, A.dtype, order=stream._staging_order(A))
        pB = cupyx.empty_pinned(B.shape, B.dtype, order=stream._staging_order(B))
        pA[...] = A
        pB[...] = B
        runs = [("stream_pinned", devices[:1], c), ("stream_pinned_auto", devices[:1], None)]
        if len(devices) > 1:
            runs.append(("stream_pinned_all", devices, None))
            runs += [(f"stream_pinned_all_chunk{ck}", devices, ck) for ck in all_chunks]
        for tag, devs, ck in runs:
            t, sk = _median(lambda: stream.compress(pA, pB, devices=devs, chunk=ck, **kw),
                            repeats, sync)
            same = _same(sk.sketch, res.sketch)
            ck = stream.last_workers[0].c
            times = [{k: round(v, 4) for k, v in w.times.items()} for w in stream.last_workers]
            floor = floor1 if len(devs) == 1 else floor_all
            bound = max(floor, t_res / len(set(devs)))
            row.update({f"{tag}_s": t, f"{tag}_same_bits": same, f"{tag}_chunk": ck,
                        f"{tag}_vs_transfer": t / floor,
                        f"{tag}_vs_max_transfer_compute": t / bound,
                        f"{tag}_worker_times": times})
            print(f"    factors in pinned memory, streamed on {devs}, chunk {ck}: {t:.3f} s "
                  f"({t / floor:.2f}x the transfer floor, {t / bound:.2f}x "
                  f"max(transfer, compute / GPUs)), same bits: {same}; {times}", flush=True)
        if "stream_pinned_all_s" in row:
            row["scaling_pinned_all_vs_one"] = row["stream_pinned_auto_s"] / \
                row["stream_pinned_all_s"]
            print(f"    {len(devices)} GPUs, pinned factors: "
                  f"{row['scaling_pinned_all_vs_one']:.2f}x one GPU", flush=True)
        if profile:
            _profile(lambda: stream.compress(pA, pB, devices=devices[:1], chunk=c, **kw), sync)
        del pA, pB
    elif profile:
        _profile(lambda: stream.compress(A, B, devices=devices[:1], chunk=chunk, **kw), sync)
    if "stream_all_s" in row:
        row["scaling_all_vs_one"] = row["stream_one_s"] / row["stream_all_s"]
        row["scaling_all_vs_resident"] = t_res / row["stream_all_s"]
        print(f"    {len(devices)} GPUs: {row['scaling_all_vs_one']:.2f}x one streamed GPU, "
              f"{row['scaling_all_vs_resident']:.2f}x one GPU with the factors resident",
              flush=True)
    if dask_client is not None and nbytes <= dask_max:
        import dask.array as da
        import pagh_mm.dask as pdask
        c = chunk or stream.chunk_size([stream._Source(A, 1), stream._Source(B, 2)],
                                       A.shape[1], len(devices), None)
        # the host blocks go to the workers once (scattered), then onto their GPUs
        n = A.shape[1]
        ks = list(range(0, n, c))
        fa = dask_client.scatter([A[:, k0:k0 + c] for k0 in ks])
        fb = dask_client.scatter([B[k0:k0 + c, :] for k0 in ks])
        if sparse:
            ma, mb = csp.csc_matrix((0, 0), dtype=A.dtype), csp.csr_matrix((0, 0), dtype=B.dtype)
            ga, gb = csp.csc_matrix, csp.csr_matrix
        else:
            ma = mb = cp.empty((0, 0), dtype=A.dtype)
            ga = gb = cp.asarray
        xA = da.concatenate([da.from_delayed(f, (A.shape[0], min(c, n - k0)), A.dtype, meta=ma)
                             .map_blocks(ga, meta=ma) for f, k0 in zip(fa, ks)], axis=1)
        xB = da.concatenate([da.from_delayed(f, (min(c, n - k0), B.shape[1]), B.dtype, meta=mb)
                             .map_blocks(gb, meta=mb) for f, k0 in zip(fb, ks)], axis=0)
        xA, xB = dask_client.persist(xA), dask_client.persist(xB)
        from distributed import wait
        wait([xA, xB])
        t, sk = _median(lambda: pdask.compress(xA, xB, **kw), repeats, sync)
        same = _same(sk.sketch, res.sketch)
        row.update({"dask_cuda_s": t, "dask_cuda_same_bits": same,
                    "dask_cuda_vs_resident": t / t_res, "dask_chunk": c})
        print(f"    dask-cuda, {len(devices)} workers, blocks on the GPUs: {t:.3f} s "
              f"({t / t_res:.2f}x one GPU resident), same bits: {same}", flush=True)
        del xA, xB
    return row


def beyond(cp, rows, features, devices, buckets, k, reps=5, pairs=50):
    """X (rows x features float32) in host memory, columns 2i and 2i + 1 (i < pairs)
    correlated: the Gram screen streamed to the GPUs; recall of the planted pairs."""
    X = np.empty((rows, features), dtype=np.float32)
    block = 1 << 14
    starts = range(0, rows, block)
    t0 = time.perf_counter()

    def fill(r0):
        g = np.random.default_rng(r0)
        blk = X[r0:r0 + block]
        g.standard_normal(out=blk, dtype=np.float32)
        blk[:, 1:2 * pairs:2] = 0.9 * blk[:, 0:2 * pairs:2] + 0.3 * blk[:, 1:2 * pairs:2]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(fill, starts))
    t_gen = time.perf_counter() - t0
    print(f"beyond one GPU: X {rows} x {features} float32, {X.nbytes / 2**30:.1f} GiB "
          f"(generated in {t_gen:.1f} s)", flush=True)
    free = []
    for d in devices:
        with cp.cuda.Device(d):
            free.append(cp.cuda.runtime.memGetInfo()[1])
    seen = []
    lock = threading.Lock()

    def progress(stage, done, total):
        with lock:
            seen.append((time.perf_counter(), done))
    t0 = time.perf_counter()
    sk = pagh_mm.compress(X.T, X, buckets=buckets, reps=reps, seed=1, devices=devices,
                          progress=progress)
    for d in devices:
        cp.cuda.Device(d).synchronize()
    t = time.perf_counter() - t0
    t1 = time.perf_counter()
    top = sk.top_k(k, exclude_diagonal=True)
    cp.cuda.Device(devices[0]).synchronize()
    tq = time.perf_counter() - t1
    rr, cc = (np.asarray(x.get() if hasattr(x, "get") else x) for x in (top.rows, top.cols))
    found = {(min(a, b), max(a, b)) for a, b in zip(rr.tolist(), cc.tolist())}
    planted = {(2 * i, 2 * i + 1) for i in range(pairs)}
    recall = len(found & planted) / pairs
    print(f"    streamed Gram sketch on {devices}: {t:.2f} s ({X.nbytes / t / 1e9:.1f} GB/s of X), "
          f"b={sk.buckets}, d={sk.reps}; unverified top-{k} in {tq:.3f} s, recall of the {pairs} planted "
          f"pairs {recall:.3f}; device memory of one GPU {free[0] / 2**30:.0f} GiB", flush=True)
    return {"case": f"beyond: Gram of X {rows} x {features} fp32", "bytes": int(X.nbytes),
            "device_memory": int(free[0]), "generate_s": t_gen, "stream_all_s": t,
            "buckets": sk.buckets, "reps": sk.reps, "query_s": tq, "recall": recall, "k": k,
            "progress_calls": len(seen), "devices": list(devices)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense", type=int, action="append", default=[])
    ap.add_argument("--dtype", action="append", choices=["fp64", "fp32"], default=[])
    ap.add_argument("--buckets", type=int, action="append", default=[])
    ap.add_argument("--a-order", action="append", choices=["C", "F"], default=[],
                    help="layout of the dense A (repeatable; default C): a C-ordered A's chunks "
                         "of columns are pitched copies, an F-ordered one's contiguous")
    ap.add_argument("--sparse", type=int, action="append", default=[])
    ap.add_argument("--per-vector", type=int, default=64)
    ap.add_argument("--sparse-buckets", type=int, default=1 << 22)
    ap.add_argument("--devices", default="0")
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--dask-cuda", action="store_true")
    ap.add_argument("--dask-max-gib", type=int, default=4,
                    help="dask-cuda rows only for factors of at most this many GiB (they are "
                         "scattered to the workers over the loopback network first)")
    ap.add_argument("--beyond", type=int, nargs=2, metavar=("ROWS", "FEATURES"))
    ap.add_argument("--beyond-buckets", type=int, default=16384)
    ap.add_argument("--beyond-reps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of one streamed run from pinned memory per dense case")
    ap.add_argument("--pinned-all-chunks", default="",
                    help="comma-separated chunk sizes of extra pinned runs on all the devices")
    ap.add_argument("--tail-splits", type=int, default=None,
                    help="pagh_mm.stream.TAIL_SPLITS: halvings of each worker's last chunk")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.tail_splits is not None:
        stream.TAIL_SPLITS = a.tail_splits
    from fwht_gpu import gpu
    cp = gpu.cupy()
    devices = [int(x) for x in a.devices.split(",")]
    rows = []
    bw = bandwidth(cp, devices)
    rows.append({"case": "bandwidth", "pinned_h2d_gbs": {str(k): v for k, v in bw[0].items()},
                 "pinned_h2d_all_gbs": bw[1],
                 "pinned_h2d_pitched_gbs": {str(k): v for k, v in bw[2].items()}})
    client = cluster = None
    if a.dask_cuda:
        from dask_cuda import LocalCUDACluster
        from distributed import Client
        t0 = time.perf_counter()
        unique = ",".join(str(d) for d in sorted(set(devices)))
        cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=unique, dashboard_address=None)
        client = Client(cluster)
        print(f"dask-cuda: {len(devices)} workers in {time.perf_counter() - t0:.1f} s",
              flush=True)
    try:
        for n in a.dense:
            for dt in a.dtype or ["fp64"]:
                dtype = np.float64 if dt == "fp64" else np.float32
                d = synthetic.planted_product(n, 300, seed=n, dtype=dtype, xp=cp)
                A, B = d.A.get(), d.B.get()
                del d
                for order in a.a_order or ["C"]:
                    A = np.asfortranarray(A) if order == "F" else np.ascontiguousarray(A)
                    for b in a.buckets or [8192]:
                        rows.append(case(cp, f"dense n={n} {dt}" + (" A F-ordered" if order == "F"
                                                                     else ""), A, B,
                                         dict(buckets=b, reps=5, seed=1), devices, a.repeats,
                                         bw, client, a.chunk, a.dask_max_gib << 30, a.profile,
                                         [int(x) for x in a.pinned_all_chunks.split(",") if x]))
                del A, B
        for n in a.sparse:
            d = synthetic.sparse_planted(n, a.per_vector, 300, 256, seed=n)
            rows.append(case(cp, f"sparse n={n}, {a.per_vector} per vector", d.A.tocsc(),
                             d.B.tocsr(), dict(buckets=a.sparse_buckets, reps=5, seed=1,
                                               decode=False),
                             devices, a.repeats, bw, client, a.chunk, a.dask_max_gib << 30,
                             a.profile))
            del d
    finally:
        if client is not None:
            client.close()
            cluster.close()
    if a.beyond:
        rows.append(beyond(cp, *a.beyond, devices, a.beyond_buckets, 100, a.beyond_reps))
    if a.json:
        provenance.write(provenance.record("beyond-one-gpu", rows, vars(a), device="gpu"), a.json)


if __name__ == "__main__":
    main()
