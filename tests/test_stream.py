"""pagh_mm.stream: compression of factors that stay where they are (host arrays, memory maps,
SciPy sparse), a chunk of inner indices at a time, on one or several devices: the bits of
pagh_mm.compress of the whole arrays. The CPU tests run the chunked flow on host threads
(devices="cpu"); the GPU tests (``-m gpu``) stream to one GPU and, where there are two, to
both."""
import numpy as np
import pytest
import scipy.sparse as sps
from click.testing import CliRunner

import pagh_mm
from fwht_gpu import gpu
from pagh_mm import chunks, reduction, stream
from pagh_mm.cli import main


def _same(a, b):
    a, b = (x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x for x in (a, b))
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _sparse_int(m, n, density, seed, fmt="csr"):
    M = sps.random(m, n, density=density, random_state=seed, format=fmt)
    M.data = np.round(M.data * 10) - 4
    return M


def _factors(kind, rng):
    if kind == "dense":
        return rng.standard_normal((300, 700)), rng.standard_normal((700, 200))
    if kind == "dense-fp32":
        return (rng.standard_normal((300, 700)).astype(np.float32),
                rng.standard_normal((700, 200)).astype(np.float32))
    if kind == "dense-int":
        return rng.integers(-5, 6, (300, 700)), rng.integers(-5, 6, (700, 200))
    if kind == "F-order":
        return np.asfortranarray(rng.standard_normal((300, 700))), rng.standard_normal((700, 200))
    if kind == "sparse-int":
        return _sparse_int(300, 700, 0.02, 1, "csc"), _sparse_int(700, 200, 0.02, 2)
    if kind == "sparse-counts":             # integer dtypes (co-occurrence counts)
        A, B = _sparse_int(300, 700, 0.02, 1, "csc"), _sparse_int(700, 200, 0.02, 2)
        return A.astype(np.int64), B.astype(np.int32)
    return (sps.random(300, 700, density=0.02, random_state=1, format="coo"),
            sps.random(700, 200, density=0.02, random_state=2, format="csr"))


def test_pairwise_sums_of_runs_merge_into_the_whole_tree():
    """Contiguous runs summed apart (absent blocks anywhere) and merged in order: the bits of
    one PairwiseSum over everything."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        G, block = int(rng.integers(1, 30)), 1 << int(rng.integers(0, 3))
        x = rng.standard_normal((G * block, 3))
        present = rng.random(G) < rng.random()
        whole = reduction.PairwiseSum(np, block)
        for g in np.nonzero(present)[0]:
            whole.add(int(g) * block, x[g * block:(g + 1) * block].copy())
        cuts = [0, *sorted(rng.integers(0, G + 1, int(rng.integers(0, 4)))), G]
        runs = []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            s = reduction.PairwiseSum(np, block, start=int(lo) * block)
            for g in range(lo, hi):
                if present[g]:
                    s.add(g * block, x[g * block:(g + 1) * block].copy())
            s.skip_to(int(hi) * block)
            runs.append(s)
        for s in runs[1:]:
            runs[0].merge(s)
        a, b = whole.total(), runs[0].total()
        assert (a is None and b is None) or _same(a, b)
    with pytest.raises(ValueError, match="cannot continue"):
        s = reduction.PairwiseSum(np, 2, start=4)
        s.add(4, np.ones((2, 1)))
        reduction.PairwiseSum(np, 2).merge(s)


def test_pairwise_sums_of_smaller_aligned_nodes_are_the_same_tree():
    """A block given as aligned pieces (halves, quarters, ... of it: subtrees), within runs
    merged in order, gives the bits of the whole blocks' tree; misaligned pieces are refused."""
    rng = np.random.default_rng(1)
    for trial in range(200):
        G, block = int(rng.integers(1, 12)), 1 << int(rng.integers(1, 4))
        x = rng.standard_normal((G * block, 2))
        whole = reduction.PairwiseSum(np, block)
        for g in range(G):
            whole.add(g * block, x[g * block:(g + 1) * block].copy())
        cut = int(rng.integers(0, G + 1))
        runs = [reduction.PairwiseSum(np, block), reduction.PairwiseSum(np, block, cut * block)]
        for g in range(G):
            s, k0 = runs[g >= cut], g * block
            sizes = [block]
            if rng.random() < 0.5:             # the block as c/2, c/4, ..., c/2^t, c/2^t
                t = int(rng.integers(1, block.bit_length()))
                sizes = [block >> i for i in range(1, t + 1)] + [block >> t]
            for size in sizes:
                s.add_node(k0, reduction.block_sum(x[k0:k0 + size].copy(), np), size)
                k0 += size
        runs[0].skip_to(cut * block)
        runs[1].skip_to(G * block)
        runs[0].merge(runs[1])
        assert _same(whole.total(), runs[0].total())
    s = reduction.PairwiseSum(np, 8)
    s.add_node(0, np.ones(2), 4)
    with pytest.raises(ValueError, match="aligned power of two"):
        s.add_node(6, np.ones(2), 4)


@pytest.mark.parametrize("tail", [1, 3])
@pytest.mark.parametrize("kind", ["dense", "sparse-int", "sparse-float"])
def test_runs_ending_in_smaller_chunks_give_the_same_bits(monkeypatch, tail, kind):
    """Each worker's last chunk split into aligned pieces (stream.TAIL_SPLITS, dense factors):
    the bits of the whole arrays (given and automatic buckets, the Gram diagonal), the factors
    read once."""
    monkeypatch.setattr(stream, "TAIL_SPLITS", tail)
    first, second = stream._runs(1000, 128, 2)
    assert first[:3] == [(0, 128, 128), (128, 256, 128), (256, 384, 128)]
    assert first[3:] == ([(384, 448, 64), (448, 512, 64)] if tail == 1 else
                         [(384, 448, 64), (448, 480, 32), (480, 496, 16), (496, 512, 16)])
    assert second[-1] == (896, 1000, 128)                 # a partial last chunk stays whole
    rng = np.random.default_rng(5)
    A, B = _factors(kind, rng)
    tails, runs = [], stream._runs         # the pieces for dense factors only (sparse chunks'
    monkeypatch.setattr(stream, "_runs", lambda *a, **k: tails.append(k.get("tail")) or
                        runs(*a, **k))     # fixed host work costs more than they save)
    stream.compress(A, B, devices=["cpu"], chunk=128, buckets=64, reps=1, seed=1)
    assert tails == [0 if kind.startswith("sparse") else None]
    for workers, chunk in ((1, 64), (3, 128)):
        kw = dict(buckets=1024, reps=3, seed=7)
        ref = pagh_mm.compress(A, B, **kw)
        sk = stream.compress(A, B, devices=["cpu"] * workers, chunk=chunk, **kw)
        assert _same(sk.sketch, ref.sketch)
        ref = pagh_mm.compress(A, B, k=5, seed=3)
        sk = stream.compress(A, B, devices=["cpu"] * workers, chunk=chunk, k=5, seed=3)
        assert sk.buckets == ref.buckets and _same(sk.sketch, ref.sketch)
    X = rng.integers(-3, 4, (2000, 150)).astype(float)
    ref = pagh_mm.compress_gram(X, buckets=256, seed=1)
    sk = stream.compress(X.T, X, buckets=256, seed=1, devices=["cpu", "cpu"], chunk=256)
    assert _same(sk.sketch, ref.sketch) and _same(sk.diagonal, ref.diagonal)


@pytest.mark.parametrize("kind", ["dense", "dense-fp32", "dense-int", "F-order", "sparse-int",
                                  "sparse-counts", "sparse-float"])
@pytest.mark.parametrize("workers,chunk", [(1, None), (1, 64), (3, 128), (2, 1024)])
def test_chunked_on_host_threads_gives_the_whole_arrays_bits(kind, workers, chunk):
    rng = np.random.default_rng(5)
    A, B = _factors(kind, rng)
    kw = dict(buckets=1024, reps=3, seed=7)
    ref = pagh_mm.compress(A, B, **kw)
    sk = stream.compress(A, B, devices=["cpu"] * workers, chunk=chunk, **kw)
    assert _same(sk.sketch, ref.sketch)


def test_automatic_buckets_certified_answers_and_bit_sketches():
    """k= sizes the sketch from the chunks' Frobenius shares: the whole arrays' choice, the
    same certified top-k with exact values; decode=True: the same bit sketches."""
    rng = np.random.default_rng(3)
    A, B = _sparse_int(400, 3000, 0.004, 1, "csc"), _sparse_int(3000, 300, 0.004, 2)
    A[7, :50] = 9
    B[:50, 11] = 9
    ref = pagh_mm.compress(A, B, k=5, seed=2, decode=True)
    sk = stream.compress(A, B, devices=["cpu", "cpu"], chunk=256, k=5, seed=2, decode=True)
    assert sk.buckets == ref.buckets and _same(sk.sketch, ref.sketch)
    assert _same(sk.bits.sketch, ref.bits.sketch)
    e1, e2 = ref.top_k(5, verify=True), sk.top_k(5, verify=True)
    assert e2.certified and np.array_equal(e1.rows, e2.rows) and np.array_equal(e1.cols, e2.cols)
    assert _same(e1.exact, e2.exact)
    assert (7, 11) in set(zip(e2.rows.tolist(), e2.cols.tolist()))
    D = rng.standard_normal((200, 900))
    ref = pagh_mm.compress(D, D.T, k=10, seed=4)
    sk = stream.compress(D, D.T, devices="cpu", chunk=128, k=10, seed=4)
    assert sk.buckets == ref.buckets and _same(sk.sketch, ref.sketch)


def test_gram_products_and_their_diagonal():
    rng = np.random.default_rng(1)
    X = rng.integers(-3, 4, (2000, 150)).astype(float)
    ref = pagh_mm.compress_gram(X, buckets=256, seed=1)
    sk = stream.compress(X.T, X, buckets=256, seed=1, devices=["cpu", "cpu"], chunk=128)
    assert sk.gram and _same(sk.sketch, ref.sketch) and _same(sk.diagonal, ref.diagonal)
    S = _sparse_int(3000, 120, 0.05, 4)
    ref = pagh_mm.compress_gram(S, k=5, seed=3)
    sk = stream.compress(S.T, S, k=5, seed=3, devices=["cpu"] * 2, chunk=512)
    assert sk.gram and sk.buckets == ref.buckets
    assert _same(sk.sketch, ref.sketch) and _same(sk.diagonal, ref.diagonal)


def _passes(monkeypatch):
    """Counts of the chunks' statistics and sums computed (a chunk read each), and the sums'
    results (whether a chunk added pairs)."""
    seen = {"stats": 0, "sums": 0, "pairs": 0}
    real_stats, real_sums = chunks.chunk_stats, chunks.chunk_launch   # (a chunk's sums, after
                                                                       # its chunk_prepare)

    def stats(*a, **kw):
        seen["stats"] += 1
        return real_stats(*a, **kw)

    def sums(*a, **kw):
        seen["sums"] += 1
        out = real_sums(*a, **kw)
        seen["pairs"] += out[1] is not None
        return out
    monkeypatch.setattr(chunks, "chunk_stats", stats)
    monkeypatch.setattr(chunks, "chunk_launch", sums)
    return seen


def _bound(A, B):
    """sum_k |A[:, k]|_1 |B[k, :]|_1 per inner index."""
    return np.asarray(abs(A).sum(axis=0)).ravel() * np.asarray(abs(B).sum(axis=1)).ravel()


@pytest.mark.parametrize("workers", [1, 3])
def test_sparse_statistics_fold_into_the_sums_pass(monkeypatch, workers):
    """Given buckets (or automatic ones without a query): integer sparse factors are read once,
    the pairs added and kept; float values are read once too (no chunk adds pairs); values
    integer in some chunks only, sums that could reach 2**53 in the whole though not in any
    chunk, or an inverse transform that would round: the pairs some chunks added are
    forbidden, and the second pass without them gives the bits of pagh_mm.compress."""
    n, c = 1024, 128
    kw = dict(buckets=1024, reps=3, seed=7)
    A, B = _sparse_int(300, n, 0.02, 1, "csc"), _sparse_int(n, 200, 0.02, 2)
    mixed_A = A.copy()
    mixed_A.data = mixed_A.data.astype(float)
    cols = np.repeat(np.arange(n), np.diff(mixed_A.indptr))
    late = cols >= 3 * c                        # chunks 0 .. 2 integer, the others not
    mixed_A.data[late] += np.random.default_rng(0).random(int(late.sum()))
    big_A, big_B = A.copy(), B.copy()
    big_A.data = big_A.data * 2 ** 18 + np.sign(big_A.data)
    big_B.data = big_B.data * 2 ** 18 + np.sign(big_B.data)
    per = _bound(big_A, big_B)                  # each chunk's bound below 2**53, not the sum
    assert per.sum() >= 2 ** 53 and max(per[k:k + c].sum() for k in range(0, n, c)) < 2 ** 53
    cancel_A, cancel_B = A.tolil(), B.tolil()   # 2**54 in chunk 0, cancelled in chunk 2: the
    cancel_A[5, 9], cancel_B[9, 4] = 2 ** 27, 2 ** 27       # pairs of the other chunks give
    cancel_A[5, 300], cancel_B[300, 4] = 2 ** 27, -2 ** 27  # other bits than the transforms
    cancel_A, cancel_B = cancel_A.tocsc(), cancel_B.tocsr()
    floats = A.copy()
    floats.data = floats.data * 0.25 + 0.125
    huge_A, huge_B = A.tolil(), B.tolil()       # one product of 2**45 in one bucket
    huge_A[5, 9], huge_B[9, 4] = 2 ** 22, 2 ** 23
    huge_A, huge_B = huge_A.tocsc(), huge_B.tocsr()
    assert _bound(huge_A, huge_B).sum() < 2 ** 53
    cases = [  # (A, B, options, sums passes, pairs kept)
        (A, B, kw, 1, True),
        (A, B, dict(seed=7, reps=3), 1, True),                   # automatic, no query
        (floats, B, kw, 1, False),                               # no chunk adds pairs
        (mixed_A, B, kw, 2, False),
        (big_A, big_B, kw, 2, False),
        (cancel_A, cancel_B, kw, 2, False),
        (huge_A, huge_B, kw, 2, False),                          # the inverse's check
    ]
    for i, (X, Y, opts, passes, kept) in enumerate(cases):
        ref = pagh_mm.compress(X, Y, **opts)
        seen = _passes(monkeypatch)
        sk = stream.compress(X, Y, devices=["cpu"] * workers, chunk=c, **opts)
        assert _same(sk.sketch, ref.sketch), i
        assert seen["stats"] == 0 and seen["sums"] == passes * (n // c), (i, seen)
        assert (seen["pairs"] > 0) == (kept or passes == 2), (i, seen)
    S = _sparse_int(n, 120, 0.05, 4)             # a sparse Gram product: its diagonal too
    ref = pagh_mm.compress_gram(S, buckets=1024, seed=3)
    seen = _passes(monkeypatch)
    sk = stream.compress(S.T, S, buckets=1024, seed=3, devices=["cpu"] * workers, chunk=c)
    assert sk.gram and _same(sk.sketch, ref.sketch) and _same(sk.diagonal, ref.diagonal)
    assert seen["stats"] == 0 and seen["sums"] == n // c and seen["pairs"] > 0
    bad = floats.copy()                         # the sums pass checks the values now
    bad.data[-1] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        stream.compress(bad, B, devices=["cpu"] * workers, chunk=c, **kw)


def test_memory_mapped_factors_are_read_a_chunk_at_a_time(tmp_path):
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((256, 2048)), rng.standard_normal((2048, 128))
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    mA = np.load(tmp_path / "a.npy", mmap_mode="r")
    mB = np.load(tmp_path / "b.npy", mmap_mode="r")
    seen = []
    sk = pagh_mm.compress(mA, mB, buckets=512, seed=1, devices="cpu",
                          progress=lambda *a: seen.append(a))
    assert _same(sk.sketch, pagh_mm.compress(A, B, buckets=512, seed=1).sketch)
    total = A.nbytes + B.nbytes
    assert seen[-1] == ("bytes", total, total) and all(s[0] == "bytes" for s in seen)
    assert len(seen) > 4 and [s[1] for s in seen] == sorted(s[1] for s in seen)
    assert stream.chunk_size([stream._Source(mA, 1), stream._Source(mB, 2)], 2048, 1, None) \
        == 512


def test_regrowth_goes_through_the_same_devices(monkeypatch):
    """A certified query that asks for more buckets rebuilds the sketch with the devices
    and chunks it was made with: the bits of pagh_mm.compress with those buckets."""
    calls = []
    real = stream.compress

    def spy(*args, **kw):
        calls.append((kw.get("devices"), kw.get("chunk"), kw.get("buckets")))
        return real(*args, **kw)
    monkeypatch.setattr(stream, "compress", spy)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((200, 512)), rng.standard_normal((512, 200))
    sk = stream.compress(A, B, devices=["cpu", "cpu"], chunk=128, k=3, seed=1)
    first = sk.buckets
    asked = []

    def run():                               # asks for 2x, then certifies
        asked.append(sk.buckets)
        if len(asked) < 2:
            return [], False, 0.0, 1.0, ("buckets", "more", 2 * sk.buckets)
        return [], True, 0.0, 1.0, None

    assert sk._certified(run)[1] and sk.buckets == 2 * first
    assert calls[-1] == (["cpu", "cpu"], 128, 2 * first)
    ref = pagh_mm.compress(A, B, buckets=2 * first, seed=1, dtype=sk.dtype_object())
    assert _same(sk.sketch, ref.sketch)


@pytest.mark.parametrize("devices,match", [
    ([], "empty"), (0, "at least 1"), (["cpu", 0], "not both"), (["gpu"], "ordinals"),
    ([-1], "non-negative"), (True, "GPU ordinals"),
])
def test_bad_devices(devices, match):
    A = np.ones((4, 4))
    with pytest.raises((ValueError, TypeError), match=match):
        pagh_mm.compress(A, A, devices=devices)


@pytest.mark.parametrize("chunk", [3, 0, 1.5, True])
def test_bad_chunk(chunk):
    with pytest.raises(ValueError, match="power of two"):
        stream.compress(np.ones((4, 8)), np.ones((8, 4)), devices="cpu", chunk=chunk)


def test_gpu_factors_with_host_devices_are_refused(monkeypatch):
    """devices='cpu' with factors on a GPU: a clear error naming both ways out (checked with
    stand-in sources, so it runs without a GPU)."""
    monkeypatch.setattr(stream._Source, "__init__", _gpu_source_init)
    with pytest.raises(ValueError, match="host copies"):
        stream.compress(np.ones((4, 8)), np.ones((8, 4)), devices="cpu", buckets=16)


_real_source_init = stream._Source.__init__


def _gpu_source_init(self, M, which):
    _real_source_init(self, M, which)
    self.gpu = True


def test_staging_buffers_are_sized_by_the_chunks_there_are():
    """A chunk larger than the inner dimension stages no more than the factors hold: the
    sparse buffers hold the largest chunk's non-zeros, the dense ones the whole slab."""
    A = _sparse_int(100, 1000, 0.01, 1, "csc")
    S = stream._Source(A, 1)
    want = A.nnz * (A.data.itemsize + A.indices.itemsize) + 1001 * A.indices.itemsize
    assert stream._Worker(0, [S], 1 << 30, 1000).staging_bytes() == stream.SLOTS * want
    parts = S.staged(256)
    ptr = A.indptr
    assert parts[0][1] == max(ptr[min(k + 256, 1000)] - ptr[k] for k in range(0, 1000, 256))
    D = stream._Source(np.ones((1000, 30), np.float32), 2)
    assert stream._Worker(0, [D], 1 << 30, 1000).staging_bytes() == stream.SLOTS * 1000 * 30 * 4


def test_profile_and_devices_do_not_mix():
    with pytest.raises(ValueError, match="profile"):
        pagh_mm.compress(np.ones((4, 4)), np.ones((4, 4)), devices="cpu", profile={})


def test_cli_devices_cpu_streams_npy_files(tmp_path):
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((64, 1000)), rng.standard_normal((1000, 48))
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    r = CliRunner()
    out1, out2 = tmp_path / "s1.npz", tmp_path / "s2.npz"
    base = ["compress", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "-b", "256", "--seed",
            "3", "--progress", "always"]
    res = r.invoke(main, base + ["-o", str(out1), "--devices", "cpu"])
    assert res.exit_code == 0, res.output
    assert "read:" in res.output and "KiB" in res.output
    res = r.invoke(main, base + ["-o", str(out2), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    s1, s2 = pagh_mm.CompressedProduct.load(out1), pagh_mm.CompressedProduct.load(out2)
    assert _same(s1.sketch, s2.sketch)
    res = r.invoke(main, base + ["-o", str(tmp_path / "x.npz"), "--devices", "0,x"])
    assert res.exit_code == 2 and "GPU ordinals" in res.output


# --- on the GPU ---------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}")
@pytest.mark.parametrize("kind", ["dense", "dense-fp32", "dense-int", "F-order", "sparse-int",
                                  "sparse-counts", "sparse-float"])
def test_streamed_to_the_gpu_gives_the_cpu_bits(kind, monkeypatch):
    cp = gpu.cupy()
    rng = np.random.default_rng(6)
    A, B = _factors(kind, rng)
    kw = dict(buckets=2048, reps=3, seed=9)
    ref = pagh_mm.compress(A, B, **kw)
    count = cp.cuda.runtime.getDeviceCount()
    for devices, chunk in (([0], None), ([0], 64), ([0, 0], 128), (list(range(min(2, count))), 128)):
        sk = stream.compress(A, B, devices=devices, chunk=chunk, **kw)
        assert sk.backend.gpu and _same(sk.sketch, ref.sketch), (devices, chunk)
    monkeypatch.setattr(stream, "TAIL_SPLITS", 2)      # each run's last chunk in pieces
    for devices in ([0], list(range(min(2, count)))):
        sk = stream.compress(A, B, devices=devices, chunk=128, **kw)
        assert _same(sk.sketch, ref.sketch), devices
    if not sps.issparse(A):                  # CuPy factors: chunks are views (or copies)
        sk = stream.compress(cp.asarray(A), cp.asarray(B), devices=[0, 0], chunk=128, **kw)
        assert _same(sk.sketch, ref.sketch)
        import cupyx                         # page-locked: by DMA (pitched slabs too)
        calls, real = [], stream._dma
        monkeypatch.setattr(stream, "_dma", lambda buf, slab, st: calls.append(
            not (slab.flags.c_contiguous or slab.flags.f_contiguous)) or real(buf, slab, st))
        order_a = "F" if A.flags.f_contiguous and not A.flags.c_contiguous else "C"
        for order_b in ("C", "F"):
            pA = cupyx.empty_pinned(A.shape, A.dtype, order=order_a)
            pB = cupyx.empty_pinned(B.shape, B.dtype, order=order_b)
            pA[...], pB[...] = A, B
            for devices in ([0], [0, 0], list(range(min(2, count)))):
                calls.clear()
                sk = stream.compress(pA, pB, devices=devices, chunk=128, **kw)
                assert _same(sk.sketch, ref.sketch), (devices, order_b)
                assert calls and any(calls) == (order_a == "C" or order_b == "F")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}")
def test_streamed_gpu_queries_verify_from_the_host_factors(tmp_path):
    cp = gpu.cupy()
    A, B = _sparse_int(500, 4000, 0.003, 1, "csc"), _sparse_int(4000, 400, 0.003, 2)
    A[3, :60] = 7
    B[:60, 5] = 7
    ref = pagh_mm.compress(A, B, k=5, seed=2)
    sk = pagh_mm.compress(A, B, k=5, seed=2, devices=[0, 0])
    assert sk.buckets == ref.buckets and _same(sk.sketch, ref.sketch)
    e1, e2 = ref.top_k(5, verify=True), sk.top_k(5, verify=True)
    assert e2.certified and _same(e1.exact, cp.asnumpy(e2.exact))
    X = np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    mX = np.load(tmp_path / "x.npy", mmap_mode="r")
    ref = pagh_mm.compress_gram(X, buckets=4096, seed=1)
    sk = pagh_mm.compress(mX.T, mX, buckets=4096, seed=1, devices=[0])
    assert sk.gram and _same(sk.sketch, ref.sketch) and _same(sk.diagonal, ref.diagonal)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available() or gpu.cupy().cuda.runtime.getDeviceCount() < 2,
                    reason="needs two GPUs")
def test_two_gpus_give_one_gpus_bits():
    cp = gpu.cupy()
    rng = np.random.default_rng(8)
    A = rng.standard_normal((512, 4096)).astype(np.float32)
    B = rng.standard_normal((4096, 384)).astype(np.float32)
    one = pagh_mm.compress(cp.asarray(A), cp.asarray(B), buckets=8192, seed=4)
    for chunk in (None, 256, 1024):
        two = stream.compress(A, B, devices=[0, 1], chunk=chunk, buckets=8192, seed=4)
        assert _same(one.sketch, two.sketch)
        with cp.cuda.Device(1):
            other = stream.compress(cp.asarray(A), cp.asarray(B), devices=[1, 0], chunk=chunk,
                                    buckets=8192, seed=4)
        assert _same(one.sketch, other.sketch)
    S1, S2 = _sparse_int(2000, 30000, 0.001, 3, "csc"), _sparse_int(30000, 1500, 0.001, 4)
    one = pagh_mm.compress(S1, S2, k=10, seed=5)
    two = pagh_mm.compress(S1, S2, k=10, seed=5, devices=2)
    assert one.buckets == two.buckets and _same(one.sketch, two.sketch)


def test_host_copies_in_bands_copy_everything(monkeypatch):
    """_copy_into: every element, whatever the bands (at most COPY_THREADS of at least
    BAND_BYTES): 1-d ranges, C- and F-ordered slabs, empty and tiny arrays; a chunk's
    page-locked copy takes the slab's own layout (_staging_order)."""
    from concurrent.futures import ThreadPoolExecutor
    monkeypatch.setattr(stream, "BAND_BYTES", 64)
    rng = np.random.default_rng(4)
    with ThreadPoolExecutor(4) as pool:
        for shape in [(0,), (1,), (7,), (1000,), (0, 7), (7, 0), (3, 5), (257, 33)]:
            for order in "CF":
                src = np.asarray(rng.standard_normal(shape), order=order)
                dst = np.full(shape, np.nan, order=order)
                stream._copy_into(dst, src, pool)
                assert np.array_equal(dst, src), (shape, order)
        big = rng.standard_normal((1000, 3))[:, 1]      # a strided 1-d view
        dst = np.empty(1000)
        stream._copy_into(dst, big, pool)
        assert np.array_equal(dst, big)
        # a chunk's page-locked copy keeps the slab's layout: contiguous runs, no transpose
        M = rng.standard_normal((300, 40))
        for F in (False, True):
            X = np.asfortranarray(M) if F else M
            for slab, want in ((X[:, 5:17], "F" if F else "C"), (X[5:17, :], "F" if F else "C")):
                assert stream._staging_order(slab) == want
                dst = np.full(slab.shape, np.nan, order=want)
                stream._copy_into(dst, slab, pool)
                assert np.array_equal(dst, slab) and dst.flags[want + "_CONTIGUOUS"]
