"""``pagh-mm bench``: compress + top-k on planted heavy hitters against the exact
product through cupy.matmul (cuBLAS) + top-k, in FP64, FP32 and FP16.

Times are wall-clock with the GPU synchronized (the pipeline has host steps),
median of ``repeats`` after a warm-up.  The floor is reading A and B once per
repetition at the device-copy bandwidth measured in the same run.

:func:`run` returns a result record of :mod:`fwht_gpu.provenance` (kind ``pagh-bench``).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from fwht_gpu import devices, provenance

from . import synthetic
from .backend import cpu, gpu
from .matmul import _is_transpose, compress, compress_gram

METHOD = ("wall clock with GPU synchronized, median of repeats (dense top-k queries: of at least "
          "21 interleaved verified / unverified runs; sparse rows: fresh compress + certified "
          "top-k, median of repeats // 2); floor = reps x (A + B bytes) at copy bandwidth "
          "(sparse rows: A and B's stored arrays read once)")


#: Repeats of the millisecond-scale query timings (medians of interleaved runs).
QUERY_REPEATS = 21


def _timed(be, fn):
    """(fn()'s result, its wall time in seconds), the GPU synchronized before and after."""
    if be.gpu:
        be.xp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    r = fn()
    if be.gpu:
        be.xp.cuda.Device().synchronize()
    return r, time.perf_counter() - t0


def _wall_pair(be, f, g, repeats):
    """(median time of f, median time of g, f's result), f and g run alternately."""
    r = f()
    g()
    tf, tg = [], []
    for _ in range(repeats):
        r, t = _timed(be, f)
        tf.append(t)
        tg.append(_timed(be, g)[1])
    return statistics.median(tf), statistics.median(tg), r


def _queried(be, state: dict, query):
    """query()'s result, its wall time (GPU synchronized) appended to state["query_s"]."""
    r, t = _timed(be, query)
    state.setdefault("query_s", []).append(t)
    return r


def _wall(be, fn, repeats):
    """(median wall time of ``repeats`` runs of fn after one warm-up, the last result)."""
    _timed(be, fn)
    out = []
    for _ in range(repeats):
        r, t = _timed(be, fn)
        out.append(t)
    return statistics.median(out), r


def _copy_bandwidth(be, nbytes=1 << 30):
    xp = be.xp
    a = xp.ones(nbytes // 8)
    b = xp.empty_like(a)
    t, _ = _wall(be, lambda a=a, b=b: b.__setitem__(Ellipsis, a), 5)
    return 2 * nbytes / t


#: Rows of A (and columns of B) per tile of the exact routes when the product does not fit.
GEMM_TILE = 16384
#: Inner indices per chunk, at least, of an exact route that sums the product over chunks.
GEMM_CHUNK_MIN = 1024


def _gemm_plan(be, A, B, dtype) -> tuple[str, int]:
    """How the exact routes form A @ B in ``dtype`` within 70% of the memory a CuPy
    allocation may take (the device's free memory and the pool's cached blocks):
    ``("whole", 0)``: A and B converted once (only B for a Gram product, whose A is B.T) and
    the product selected at once; ``("inner", c)``: the product whole, summed over chunks of
    c inner indices converted one at a time (where those chunks are contiguous: A
    F-ordered, B C-ordered, as X.T and X: a covariance screen whose X does not fit twice);
    ``("tiles", t)``: t x t tiles of the product, each from converted slabs of A and B and
    selected on its own."""
    m, K, p = A.shape[0], A.shape[1], B.shape[1]
    if not be.gpu:
        return "whole", 0
    xp = be.xp
    item = np.dtype(dtype).itemsize
    converted = item * ((0 if A.dtype == dtype or _is_transpose(A, B) else A.size) +
                        (0 if B.dtype == dtype else B.size))
    product = m * p * (item + 16)                   # the product, its selection's temporaries
    free = 0.7 * (xp.cuda.runtime.memGetInfo()[0] + xp.get_default_memory_pool().free_bytes())
    if converted + product <= free:
        return "whole", 0
    if A.dtype != dtype and A.flags.f_contiguous and B.flags.c_contiguous:
        acc = max(item, 4)                          # FP16 products summed in FP32
        c = 1 << max(0, K.bit_length() - 1)
        while c >= GEMM_CHUNK_MIN and \
                c * (m + p) * item + m * p * (item + acc + 16) > free:
            c //= 2
        if c >= GEMM_CHUNK_MIN:
            return "inner", c
    n = max(m, p)
    t = min(n, GEMM_TILE)
    while t > 64 and 2 * t * K * item + t * t * (2 * item + 16) > free:
        t //= 2
    return "tiles", t


def _product(be, A, B, dtype, how: str, chunk: int):
    """A @ B in ``dtype`` as ``_gemm_plan``'s ``"whole"`` or ``"inner"`` says (summed over
    chunks of inner indices in ``dtype``, FP16 in FP32)."""
    xp = be.xp
    gram = _is_transpose(A, B)
    if how == "whole":
        Bd = B.astype(dtype, copy=False)
        return (Bd.T if gram else A.astype(dtype, copy=False)) @ Bd
    acc = np.float32 if np.dtype(dtype) == np.float16 else dtype
    C = xp.zeros((A.shape[0], B.shape[1]), dtype=acc)
    for k0 in range(0, A.shape[1], chunk):
        Bk = B[k0:k0 + chunk].astype(dtype, copy=False)
        Ak = Bk.T if gram else A[:, k0:k0 + chunk].astype(dtype, copy=False)
        C += Ak @ Bk
    return C


#: Values above which a GPU selection of the largest goes through a threshold instead of
#: CuPy's ``argpartition`` (which sorts: 26-52 ms for the 2^28 magnitudes of a 16384 x 16384
#: product on an H200, where ``torch.topk`` takes 3 ms and this route 4 ms).
SELECT_DIRECT = 1 << 22
#: Values of the strided sample the threshold is read from (an odd stride: no aliasing with
#: the power-of-two rows of a flattened product).
SELECT_SAMPLE = 1 << 20
#: The share of the values a threshold may admit before the selection sorts them all instead
#: (a sample that missed the large values: the compaction would cost more than the sort).
SELECT_MOST = 1 / 8


def largest(xp, v, q: int):
    """Positions of the ``q`` largest values of the 1-D float array ``v`` (in no order; NaN
    only where fewer than q numbers): the set ``argpartition(-v, q - 1)[:q]`` selects, up to
    ties. A CuPy array of more than SELECT_DIRECT values is not sorted: a strided sample's
    value at twice the expected rank of the q-th largest (more where it admits fewer than q)
    is a threshold t, the values >= t counted and listed (the q largest are among them), and
    the q largest of those chosen; ``argpartition`` where no threshold admits between q and
    SELECT_MOST n values."""
    n = int(v.size)
    if q >= n:
        return xp.arange(n)
    if xp is np or n <= SELECT_DIRECT:
        return xp.argpartition(-v, q - 1)[:q]
    sample = xp.sort(-v[::(n // SELECT_SAMPLE) | 1])        # ascending -v, NaN last
    s = int(sample.size)
    rank = min(s, 2 * -(-q * s // n) + 64)
    while True:
        keep = v >= -sample[rank - 1]       # NaN compares False: never kept
        count = int(keep.sum())
        if count > SELECT_MOST * n:
            return xp.argpartition(-v, q - 1)[:q]
        if count >= q:
            break
        if rank == s:                       # the sample's smallest admits fewer than q
            return xp.argpartition(-v, q - 1)[:q]
        rank = min(s, 4 * rank)
    idx = xp.flatnonzero(keep)
    return idx[xp.argpartition(-v[idx], q - 1)[:q]]


def _tiled_largest(be, A, B, pool, dtype, exclude_diagonal: bool = False):
    """(rows, cols) of the ``pool`` largest |(A @ B)_ij| with the product computed in
    ``dtype`` (:func:`_gemm_plan`: whole, summed over chunks of inner indices, or tile by
    tile: each tile's ``pool`` largest, then the largest of those, the same selection as the
    whole product's); ``exclude_diagonal``: i = j left out (a Gram product's top-k)."""
    xp = be.xp
    m, p = A.shape[0], B.shape[1]
    how, t = _gemm_plan(be, A, B, dtype)
    if how != "tiles":
        _, r, c = _tile_largest(xp, _product(be, A, B, dtype, how, t), 0, 0, pool,
                                exclude_diagonal)
        return r, c
    vals, rows, cols = [], [], []
    for r0 in range(0, m, t):
        Ad = A[r0:r0 + t].astype(dtype, copy=False)
        for c0 in range(0, p, t):
            C = Ad @ B[:, c0:c0 + t].astype(dtype, copy=False)
            for part, got in zip((vals, rows, cols),
                                 _tile_largest(xp, C, r0, c0, pool, exclude_diagonal)):
                part.append(got)
            del C
    if len(vals) == 1:
        return rows[0], cols[0]
    v, r, c = xp.concatenate(vals), xp.concatenate(rows), xp.concatenate(cols)
    best = largest(xp, v, pool)
    return r[best], c[best]


def _tile_largest(xp, C, r0: int, c0: int, pool: int, exclude_diagonal: bool):
    """(float64 magnitudes, rows, cols) of the ``pool`` largest |C| of the product's tile C at
    (r0, c0) (C overwritten by its magnitudes)."""
    if exclude_diagonal and r0 < c0 + C.shape[1] and c0 < r0 + C.shape[0]:
        i = xp.arange(max(r0, c0), min(r0 + C.shape[0], c0 + C.shape[1]))
        C[i - r0, i - c0] = 0
    flat = xp.abs(C, out=C).ravel()
    sel = largest(xp, flat, min(flat.size, pool))
    w = C.shape[1]
    return flat[sel].astype(xp.float64), r0 + sel // w, c0 + sel % w


def _exact_topk(be, A, B, k, dtype):
    return _tiled_largest(be, A, B, k, dtype)


#: Candidates the FP16 screen verifies, per entry asked for.
SCREEN_POOL = 4


def _verified(xp, A, B, r, c):
    """float64 values of (A @ B)[r, c]: the distinct rows of A and columns of B among the
    candidates gathered once, converted, and multiplied by one small DGEMM (by row . column
    products where that DGEMM would compute more than VERIFY_SPREAD times the entries asked)."""
    ur, ir = xp.unique(r, return_inverse=True)
    uc, ic = xp.unique(c, return_inverse=True)
    if int(ur.size) * int(uc.size) > VERIFY_SPREAD * max(1, int(r.size)):
        return (A[r].astype(xp.float64) * B[:, c].T.astype(xp.float64)).sum(axis=1)
    return (A[ur].astype(xp.float64) @ B[:, uc].astype(xp.float64))[ir.ravel(), ic.ravel()]


#: The most entries :func:`_verified`'s DGEMM computes per entry asked.
VERIFY_SPREAD = 64


def _screen_topk(be, A, B, k, exclude_diagonal: bool = False):
    """The strongest exact route on a GPU: the product in FP16 (tensor cores), its
    SCREEN_POOL k largest magnitudes as candidates (formed and selected like the exact
    routes), their exact float64 values (:func:`_verified`), the k largest of those."""
    xp = be.xp
    r, c = _tiled_largest(be, A, B, min(A.shape[0] * B.shape[1], SCREEN_POOL * k), xp.float16,
                          exclude_diagonal)
    exact = _verified(xp, A, B, r, c)
    best = xp.argsort(-xp.abs(exact))[:k]
    return r[best], c[best]


def _free_gpu(be) -> None:
    if be.gpu:
        be.xp.get_default_memory_pool().free_all_blocks()


def _gemm_times(be, top_k, repeats, row, recall_of=None) -> dict:
    """Exact product + top-k per GEMM dtype (FP16 on the GPU only; ``top_k(dtype)`` ->
    (rows, cols)); errors, and with ``recall_of(rows, cols)`` the recalls, into ``row``."""
    gemm = {}
    for gname, gdt in (("fp64", np.float64), ("fp32", np.float32), ("fp16", np.float16)):
        if not be.gpu and gname == "fp16":
            continue
        try:
            gemm[gname], (r, c) = _wall(be, lambda gdt=gdt: top_k(gdt), repeats)
            if recall_of is not None:
                row[f"gemm_{gname}_recall"] = recall_of(be.asnumpy(r), be.asnumpy(c))
        except Exception as exc:  # noqa: BLE001 - memory
            gemm[gname] = float("nan")
            row[f"gemm_{gname}_error"] = str(exc).splitlines()[0][:80]
        _free_gpu(be)
    return gemm


def _compare(be, row, gemm, screen, recall_of, repeats) -> dict:
    """The FP16 screen's time and recall (``screen()`` -> (rows, cols); GPU only) and the
    speedups over the GEMMs into ``row``; returns the GEMM times formatted for the table."""
    if be.gpu:
        try:
            t_scr, (sr, sc) = _wall(be, screen, repeats)
            row.update(screen_s=t_scr, screen_pool=SCREEN_POOL,
                       screen_recall=recall_of(be.asnumpy(sr), be.asnumpy(sc)),
                       speedup_vs_screen=t_scr / row["total_s"])
        except Exception as exc:  # noqa: BLE001 - memory
            row["screen_error"] = str(exc).splitlines()[0][:80]
        _free_gpu(be)
    row["speedup_vs_fp64"] = gemm.get("fp64", np.nan) / row["total_s"]
    row["speedup_vs_fp32"] = gemm.get("fp32", np.nan) / row["total_s"]
    return {k: f"{gemm.get(k, float('nan')):9.4f}" for k in ("fp64", "fp32", "fp16")}


def _echo_screen(echo, row, indent: str) -> None:
    if "screen_s" in row:
        echo(f"{indent}FP16 screen + float64 verification of {SCREEN_POOL} k candidates: "
             f"{row['screen_s']:.4f} s, recall {row['screen_recall']:.3f}; its time over ours "
             f"{row['speedup_vs_screen']:.2f} (below 1: the screen is faster)")


def _case(be, n, name, planted, reps, repeats, bw, echo, buckets=None, staged=False,
          decode=False) -> dict:
    """One size and dtype: the compressed product against the exact GEMMs (``staged``: the
    GPU's staged compression timed too, for comparison with the fused kernel; ``decode``: a
    sketch with bit sketches and the decoding certified top-k too)."""
    from . import matmul
    dt = np.float64 if name == "fp64" else np.float32
    data = synthetic.planted_product(n, planted, seed=n, dtype=dt, xp=be.xp)
    prof: dict = {}
    kw = dict(k=planted, seed=1)        # the transforms' dtype the library's rule
    if reps is not None:
        kw["reps"] = reps
    if buckets is not None:
        kw["buckets"] = buckets
    t_sk, sk = _wall(be, lambda: compress(data.A, data.B, **kw), repeats)
    t_staged = None
    if staged and be.gpu:
        before = matmul.GPU_FUSED
        try:
            matmul.GPU_FUSED = False
            t_staged, other = _wall(be, lambda: compress(data.A, data.B, **kw), repeats)
            row_same = bool((other.sketch == sk.sketch).all())
            other = None
        finally:
            matmul.GPU_FUSED = before
    b, reps_used = sk.buckets, sk.reps
    compress(data.A, data.B, **kw, profile=prof)
    # queries take milliseconds: more repeats, interleaved, for a stable ratio
    t_top, t_scan, top = _wall_pair(be, lambda: sk.top_k(planted, verify=True),
                                    lambda: sk.top_k(planted), max(repeats, QUERY_REPEATS))
    final = sk.buckets          # a verified query may have recompressed it with more buckets
    if final != b:              # then what a user pays: a fresh sketch and its certified query
        state: dict = {}

        def flow():
            fresh = compress(data.A, data.B, **kw)
            return _queried(be, state, lambda: fresh.top_k(planted, verify=True))
        _, top = _wall(be, flow, repeats)
        t_top = statistics.median(state["query_s"][1:])
    rec = synthetic.recall(data.rows, data.cols, be.asnumpy(top.rows), be.asnumpy(top.cols))
    floor = reps_used * (data.A.nbytes + data.B.nbytes) / (bw / 2)
    row = {"n": n, "dtype": name, "transforms": sk.dtype, "buckets": b,
           "buckets_final": final, "reps": reps_used,
           "planted": planted,
           "chosen": sk.chosen.reason if sk.chosen else None,
           "sketch_s": t_sk, "topk_s": t_top, "total_s": t_sk + t_top, "recall": rec,
           "certified": bool(top.certified), "verified": int(top.verified),
           "topk_unverified_s": t_scan, "certificate_overhead": t_top / t_scan - 1,
           "floor_s": floor, "ratio_floor": (t_sk + t_top) / floor, "copy_bandwidth": bw,
           "stages_s": prof, "sketch_ratio_floor": t_sk / floor}
    adds = 2 * reps_used * n * b * max(1, b.bit_length() - 1)    # both factors' transforms
    rate = _add_rate(be, sk.dtype_object())
    if rate:                    # the issue's floor: A and B read once, or the transforms' adds
        row.update(transform_adds=adds, add_rate=rate, arithmetic_floor_s=adds / rate,
                   sketch_ratio_arithmetic=t_sk / (adds / rate),
                   sketch_ratio_physical=t_sk / max(adds / rate, floor / reps_used))
    if t_staged is not None:
        row.update(sketch_staged_s=t_staged, staged_same_bits=row_same,
                   speedup_vs_staged=t_staged / t_sk)
    if decode:
        _free_gpu(be)
        t_dsk, _, t_dtop, dtop, d_final, _, dsk = _flow(
            be, data.A, data.B, planted, repeats, True,
            **{k: v for k, v in kw.items() if k not in ("k", "seed")})
        row.update(sketch_decode_s=t_dsk, topk_decode_s=t_dtop, buckets_decode=dsk.buckets,
                   buckets_final_decode=d_final,
                   certified_decode=bool(dtop.certified),
                   decode_same_answer=bool((be.asnumpy(dtop.rows) == be.asnumpy(top.rows)).all()
                                           and (be.asnumpy(dtop.exact) ==
                                                be.asnumpy(top.exact)).all()))
        echo(f"       with bit sketches (fresh compress + query): sketch {t_dsk:.4f} s "
             f"({dsk.buckets} -> {d_final} buckets), decoding "
             f"certified top-k {t_dtop:.4f} s (scanning {t_top:.4f} s), certified "
             f"{row['certified_decode']}, the scan's answer: {row['decode_same_answer']}")
        dsk = dtop = None
    sk = top = None
    _free_gpu(be)
    gemm = _gemm_times(be, lambda gdt: _exact_topk(be, data.A, data.B, planted, gdt), repeats,
                       row)
    row.update({f"gemm_{k}_s": v for k, v in gemm.items()})
    g = _compare(be, row, gemm, lambda: _screen_topk(be, data.A, data.B, planted),
                 lambda r, c: synthetic.recall(data.rows, data.cols, r, c), repeats)
    echo(f"{n:>6} {name:5} {b:>9} {reps_used:>2} {t_sk:9.4f} {t_top:8.4f} {rec:7.3f} "
         f"{'yes' if row['certified'] else 'NO':>4} {row['certificate_overhead']:+6.0%} "
         f"{row['ratio_floor']:8.1f} | {g['fp64']} {g['fp32']} {g['fp16']} "
         f"{row['speedup_vs_fp64']:6.2f} {row['speedup_vs_fp32']:6.2f}")
    echo(f"       transforms in {row['transforms']}; stages: "
         + ", ".join(f"{k} {v:.4f} s" for k, v in prof.items())
         + f"; sketch {row['sketch_ratio_floor']:.1f} x floor"
         + (f"; transforms' additions {adds:.3g}, {adds / rate:.4f} s at the device's add "
            f"rate: sketch {row['sketch_ratio_arithmetic']:.1f}x that floor" if rate else ""))
    _echo_screen(echo, row, " " * 7)
    if t_staged is not None:
        echo(f"       staged compression {t_staged:.4f} s: the fused kernel is "
             f"{row['speedup_vs_staged']:.1f}x faster, same bits: {row_same}")
    return row


#: Floating-point add lanes per SM by compute capability (FP64, FP32): the data-center parts
#: whose rates are documented (A100, H100/H200).
ADD_LANES = {(8, 0): (32, 64), (9, 0): (64, 128)}


def _add_rate(be, dt) -> float | None:
    """Additions per second the device's lanes can issue in ``dt`` (None when unknown)."""
    if not be.gpu:
        return None
    dev = be.xp.cuda.Device()
    lanes = ADD_LANES.get(tuple(int(c) for c in dev.compute_capability))
    if lanes is None:
        return None
    try:
        attrs = dev.attributes
        clock = attrs["ClockRate"] * 1e3                  # kHz -> Hz
        return attrs["MultiProcessorCount"] * lanes[0 if np.dtype(dt) == np.float64 else 1] * clock
    except Exception:  # noqa: BLE001 - an attribute this CUDA no longer reports
        return None


#: Correlation of the planted column pairs of the Gram rows.
GRAM_RHO = 0.9


def _pairs(rows, cols) -> set:
    return {(min(int(i), int(j)), max(int(i), int(j))) for i, j in zip(rows, cols)}


def _gram_case(be, N, M, name, pairs, reps, repeats, bw, echo, buckets=None) -> dict:
    """Covariance screening, a tall inner dimension: X (N samples x M features, ``name``
    dtype) with ``pairs`` planted column pairs of correlation GRAM_RHO; the certified top
    2 pairs off-diagonal entries of X^T X from compress_gram against the exact GEMMs + top-k
    (diagonal left out) and the FP16 screen + float64 verification."""
    xp = be.xp
    dt = np.float64 if name == "fp64" else np.float32
    rng = xp.random.default_rng(N + M)
    X = rng.standard_normal((N, M), dtype=dt)
    pick = np.random.default_rng(M).choice(M, 2 * pairs, replace=False)
    a, b = xp.asarray(pick[:pairs]), xp.asarray(pick[pairs:])
    X[:, b] = dt(GRAM_RHO) * X[:, a] + dt(np.sqrt(1 - GRAM_RHO ** 2)) * X[:, b]
    planted = _pairs(pick[:pairs], pick[pairs:])
    k = 2 * pairs                       # both orientations of each pair
    kw = dict(k=k, seed=1)              # the transforms' dtype the library's rule
    if reps is not None:
        kw["reps"] = reps
    if buckets is not None:
        kw["buckets"] = buckets
    prof: dict = {}
    t_sk, sk = _wall(be, lambda: compress_gram(X, **kw), repeats)
    compress_gram(X, **kw, profile=prof)
    b0 = sk.buckets
    state = {}

    def flow():
        state["sk"] = compress_gram(X, **kw)
        return _queried(be, state, lambda: state["sk"].top_k(k, verify=True,
                                                              exclude_diagonal=True))
    t_total, top = _wall(be, flow, max(1, repeats // 2))
    t_top = statistics.median(state["query_s"][1:])         # the runs after the warm-up
    final = state["sk"].buckets
    found = _pairs(be.asnumpy(top.rows), be.asnumpy(top.cols))
    rec = len(found & planted) / pairs
    floor = X.nbytes / (bw / 2)
    d = sk.reps
    adds = d * N * b0 * max(1, b0.bit_length() - 1)         # one transform per sample
    rate = _add_rate(be, sk.dtype_object())
    if rate:
        arith = adds / rate
    row = {"kind": "gram", "n": N, "features": M, "dtype": name, "transforms": sk.dtype,
           "pairs": pairs, "k": k,
           "buckets": b0, "buckets_final": final, "reps": d, "chosen": sk.chosen.reason,
           "sketch_s": t_sk, "topk_s": t_top, "total_s": t_total, "recall": rec,
           "certified": bool(top.certified), "verified": int(top.verified), "stages_s": prof,
           "floor_s": floor, "sketch_ratio_floor": t_sk / floor, "transform_adds": adds,
           "copy_bandwidth": bw,
           "timing": "total_s: median of fresh compress_gram + certified top-k runs; topk_s: "
           "median of the top-k calls in those runs (a regrowth included)"}
    if rate:
        row.update(add_rate=rate, arithmetic_floor_s=arith, sketch_ratio_arithmetic=t_sk / arith)
    sk = top = state["sk"] = None
    _free_gpu(be)
    recall_of = lambda r, c: len(_pairs(r, c) & planted) / pairs  # noqa: E731
    gemm = _gemm_times(be, lambda gdt: _tiled_largest(be, X.T, X, k, gdt, True), repeats, row,
                       recall_of)
    row.update({f"gemm_{g}_s": v for g, v in gemm.items()})
    g = _compare(be, row, gemm, lambda: _screen_topk(be, X.T, X, k, True), recall_of, repeats)
    grown = f"->{final}" if final != b0 else ""
    echo(f"{N:>8} {M:>6} {name:5} {str(b0) + grown:>13} {d:>2} {t_sk:9.4f} "
         f"{t_top:8.4f} {rec:6.3f} {'yes' if row['certified'] else 'NO':>4} "
         f"{row['sketch_ratio_floor']:7.1f} | {g['fp64']} {g['fp32']} {g['fp16']} "
         f"{row['speedup_vs_fp64']:6.2f} {row['speedup_vs_fp32']:6.2f}")
    echo("         stages: " + ", ".join(f"{k2} {v:.4f} s" for k2, v in prof.items())
         + f"; transforms' additions {adds:.3g}"
         + (f", {row['arithmetic_floor_s']:.4f} s at the device's add rate: sketch "
            f"{row['sketch_ratio_arithmetic']:.1f}x that floor" if rate else ""))
    _echo_screen(echo, row, " " * 9)
    return row


#: Value of every planted entry of the sparse rows (inner indices A's row and B's column share).
SPARSE_MAGNITUDE = 256


def _spgemm_topk(A, B, k, xp):
    """cuSPARSE SpGEMM (cupyx) and the k largest |values| of the product: (C, flat positions
    into C.data of the k largest)."""
    C = A @ B
    v = xp.abs(C.data)
    sel = largest(xp, v, min(k, v.size)) if v.size else v.astype(xp.int64)
    return C, sel


def _flow(be, A, B, planted, repeats, decode: bool, **options):
    """(compress seconds, compress + certified top-k seconds, certified top-k seconds (timed
    within the flow), answer, final buckets, profile, the first sketch) of the automatic
    flow a user runs: a fresh sketch (with bit sketches
    when ``decode``) and its certified query (which may recompress it with the buckets its
    certificate asks for: the query's share includes any regrowth), decoding or scanning."""
    kw = dict(k=planted, seed=1, decode=decode, **options)
    prof: dict = {}
    t_sk, sk = _wall(be, lambda: compress(A, B, **kw), repeats)
    compress(A, B, **kw, profile=prof)
    state = {}

    def flow():
        state["sk"] = compress(A, B, **kw)
        return _queried(be, state, lambda: state["sk"].top_k(
            planted, verify=True, method="decode" if decode else "scan"))

    t_total, top = _wall(be, flow, max(1, repeats // 2))
    t_top = statistics.median(state["query_s"][1:])         # the runs after the warm-up
    return t_sk, t_total, t_top, top, state["sk"].buckets, prof, sk


def _sparse_case(be, n, per, planted, repeats, bw, echo) -> dict:
    """One sparse planted product (``per`` +-1 values per column of A and row of B, n x n):
    automatic compression + certified top-k, scanning and decoding, against cuSPARSE SpGEMM
    + top-k."""
    import cupyx.scipy.sparse as csp
    xp = be.xp
    data = synthetic.sparse_planted(n, per, planted, SPARSE_MAGNITUDE, seed=n + per)
    A, B = csp.csr_matrix(data.A), csp.csr_matrix(data.B)
    t_sk, t_total, t_top, top, final, prof, sk = _flow(be, A, B, planted, repeats, False)
    rows_, cols_ = be.asnumpy(top.rows), be.asnumpy(top.cols)
    rec = synthetic.recall(data.rows, data.cols, rows_, cols_)
    nbytes = sum(int(M.data.nbytes + M.indices.nbytes + M.indptr.nbytes) for M in (A, B))
    floor = nbytes / (bw / 2)
    pairs = float((xp.diff(A.tocsc().indptr).astype(xp.float64)
                   * xp.diff(B.indptr).astype(xp.float64)).sum())
    row = {"kind": "sparse", "n": n, "per_vector": per, "planted": planted, "nnz_A": int(A.nnz),
           "nnz_B": int(B.nnz), "pairs": pairs, "buckets": sk.buckets, "buckets_final": final,
           "reps": sk.reps, "chosen": sk.chosen.reason, "sketch_s": t_sk,
           "topk_s": t_top, "total_s": t_total, "timing": "total_s: median of fresh compress + "
           "certified top-k runs; topk_s: median of the top-k calls in those runs (a regrowth "
           "included); *_decode: "
           "the same with bit sketches (decode=True) and method='decode'",
           "recall": rec,
           "certified": bool(top.certified), "verified": int(top.verified), "stages_s": prof,
           "floor_s": floor, "sketch_ratio_floor": t_sk / floor, "copy_bandwidth": bw}
    exact = be.asnumpy(top.exact)
    sk = None
    _free_gpu(be)
    d_sk, d_total, d_top, dtop, d_final, d_prof, dsk = _flow(be, A, B, planted, repeats, True)
    row.update(buckets_decode=dsk.buckets, sketch_decode_s=d_sk, topk_decode_s=d_top,
               total_decode_s=d_total,
               buckets_final_decode=d_final, stages_decode_s=d_prof,
               recall_decode=synthetic.recall(data.rows, data.cols, be.asnumpy(dtop.rows),
                                              be.asnumpy(dtop.cols)),
               certified_decode=bool(dtop.certified), verified_decode=int(dtop.verified),
               decode_same_answer=bool(np.array_equal(be.asnumpy(dtop.rows), rows_) and
                                       np.array_equal(be.asnumpy(dtop.cols), cols_) and
                                       np.array_equal(be.asnumpy(dtop.exact), exact)),
               query_speedup_decode=t_top / max(d_top, 1e-9))
    top = dtop = dsk = None
    _free_gpu(be)
    try:
        t_sp, (C, _) = _wall(be, lambda: _spgemm_topk(A, B, planted, xp), repeats)
        picked = C[xp.asarray(rows_)].get()             # the returned entries' rows, on the host
        got = np.asarray(picked[np.arange(rows_.size), cols_]).ravel()
        best = min(row["total_s"], row["total_decode_s"])
        equal = bool((got == exact).all())
        if equal:
            row.update(spgemm_s=t_sp, nnz_C=int(C.nnz), speedup_vs_spgemm=t_sp / best,
                       sketch_vs_spgemm=t_sp / t_sk, exact_values_equal=True)
        else:           # e.g. nnz(C) past cuSPARSE's 32-bit indices: no error, a wrong product
            row.update(spgemm_wrong_s=t_sp, nnz_C=int(C.nnz), exact_values_equal=False,
                       spgemm_error=f"wrong product: nnz {int(C.nnz)} returned for up to "
                                    f"{pairs:.3g} products, and the values at our verified "
                                    "entries differ from their exact dot products")
        C = None
    except Exception as exc:  # noqa: BLE001 - out of device memory
        row["spgemm_error"] = str(exc).splitlines()[0][:120]
        row["spgemm_need_bytes_at_least"] = 12 * pairs     # upper bound of nnz(C): the pairs
    _free_gpu(be)
    sp = (f"{row['spgemm_s']:9.4f} {row['speedup_vs_spgemm']:6.2f}x"
          if "spgemm_s" in row else f"{'wrong' if 'spgemm_wrong_s' in row else 'failed':>9} {'':>7}")
    grown = f"->{final}" if final != row["buckets"] else ""
    echo(f"{n:>8} {per:>3} {str(row['buckets']) + grown:>9} {t_sk:9.4f} {t_top:8.4f} "
         f"{d_sk:9.4f} {d_top:8.4f} {rec:5.3f}/{row['recall_decode']:5.3f} "
         f"{'yes' if row['certified'] else 'NO':>3}/{'yes' if row['certified_decode'] else 'NO':>3} "
         f"{row['sketch_ratio_floor']:8.0f} | {sp}")
    echo("         stages: " + ", ".join(f"{k} {v:.4f} s" for k, v in prof.items())
         + "; with bit sketches: " + ", ".join(f"{k} {v:.4f} s" for k, v in d_prof.items())
         + (f"; SpGEMM: {row['spgemm_error']}" if "spgemm_error" in row else
            f"; exact values equal SpGEMM's: {row['exact_values_equal']}")
         + f"; decoding's answer is the scan's: {row['decode_same_answer']}")
    return row


def run(sizes=(4096, 8192, 16384, 32768), dtypes=("fp64", "fp32"), planted=300, reps=None,
        device="auto", repeats=3, echo=print, command: str | None = None, buckets=None,
        staged: bool = False, sparse=(), per_vector=(16,), decode: bool = False,
        gram=(), gram_pairs: int = 50) -> dict:
    """Benchmark; returns the result record (:mod:`fwht_gpu.provenance`).  ``sparse``: sizes
    of sparse planted products (GPU; ``per_vector`` values per column of A and row of B)
    against cuSPARSE SpGEMM, after the dense ``sizes``.  ``gram``: (N, M) covariance screens
    of N samples x M features (``gram_pairs`` planted pairs), in each of ``dtypes``."""
    be = gpu() if devices.resolve(device) == "gpu" else cpu()
    xp = be.xp
    if sparse and not be.gpu:
        raise ValueError("sparse rows compare with cuSPARSE: the GPU benchmark only "
                         "(the CPU benchmark has its own sparse row)")
    bw = _copy_bandwidth(be)
    echo(f"device: {'GPU' if be.gpu else 'CPU'}; copy bandwidth {bw / 1e9:.0f} GB/s (read + write)")
    if sizes:
        echo(f"{'n':>6} {'dtype':5} {'buckets':>9} {'d':>2} {'sketch s':>9} {'top-k s':>8} "
             f"{'recall':>7} {'cert':>4} {'cost':>6} {'x floor':>8} | {'GEMM64 s':>9} "
             f"{'GEMM32 s':>9} {'GEMM16 s':>9} {'vs 64':>6} {'vs 32':>6}")
    rows = []
    for n in sizes:
        for name in dtypes:
            dt = np.float64 if name == "fp64" else np.float32
            # the factors, and the exact routes' tiles (fp64 copies of A's and B's tiles, the
            # product's tile and its selection) when the product does not fit
            t = min(n, GEMM_TILE)
            need = 2 * n * n * np.dtype(dt).itemsize + 2 * t * n * 8 + t * t * 32
            if be.gpu and need > xp.cuda.runtime.memGetInfo()[0]:
                echo(f"{n:>6} {name:5} skipped: needs {need / 2**30:.0f} GiB")
                continue
            rows.append(_case(be, n, name, planted, reps, repeats, bw, echo, buckets, staged,
                              decode))
            _free_gpu(be)
    if sparse:
        echo(f"sparse planted products ({SPARSE_MAGNITUDE} shared inner indices per planted "
             "entry), automatic parameters, certified top-k, against cuSPARSE SpGEMM + top-k:")
        echo(f"{'n':>8} {'nnz':>3} {'buckets':>9} {'sketch s':>9} {'scan s':>8} "
             f"{'+bits s':>9} {'decode s':>8} {'recall s/d':>11} {'cert':>7} {'x floor':>8} | "
             f"{'SpGEMM s':>9} {'vs best':>7}")
    for n in sparse:
        for per in per_vector:
            rows.append(_sparse_case(be, n, per, min(planted, n), repeats, bw, echo))
    if gram:
        echo(f"covariance screens (Gram products, {gram_pairs} planted pairs of correlation "
             f"{GRAM_RHO}), certified top {2 * gram_pairs} off-diagonal entries, against the "
             "GEMMs X^T X + top-k:")
        echo(f"{'N':>8} {'M':>6} {'dtype':5} {'buckets':>13} {'d':>2} {'sketch s':>9} "
             f"{'top-k s':>8} {'recall':>6} {'cert':>4} {'x floor':>7} | {'GEMM64 s':>9} "
             f"{'GEMM32 s':>9} {'GEMM16 s':>9} {'vs 64':>6} {'vs 32':>6}")
    for N, M in gram:
        for name in dtypes:
            need = N * M * (8 if name == "fp64" else 4) * 2
            if be.gpu and need > xp.cuda.runtime.memGetInfo()[0]:
                echo(f"{N:>8} {M:>6} {name:5} skipped: needs {need / 2**30:.0f} GiB")
                continue
            rows.append(_gram_case(be, N, M, name, gram_pairs, reps, repeats, bw, echo, buckets))
            _free_gpu(be)
    settings = {"sizes": list(sizes), "dtypes": list(dtypes), "planted": planted, "reps": reps,
                "buckets": buckets, "staged": staged, "repeats": repeats,
                "sparse": list(sparse), "per_vector": list(per_vector), "decode": decode,
                "gram": [list(g) for g in gram], "gram_pairs": gram_pairs,
                "device": "gpu" if be.gpu else "cpu", "method": METHOD}
    return provenance.record("pagh-bench", rows, settings, command,
                             device="gpu" if be.gpu else "cpu")


def main(out_json=None, **kw) -> dict:
    """:func:`run` with keyword arguments ``kw``; writes the record to ``out_json`` when given."""
    res = run(**kw)
    if out_json:
        provenance.write(res, out_json)
    return res
