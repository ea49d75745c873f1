"""pagh_mm.dask: compressed products of dask arrays, one task per inner chunk, on the local
schedulers and a dask.distributed LocalCluster: the bits of pagh_mm.compress of the whole
arrays, the same automatic parameters and certified answers, exact values from the rows and
columns asked for only."""
import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from pagh_mm import synthetic
from tests.params import heavy_background_product

da = pytest.importorskip("dask.array")
pdask = pytest.importorskip("pagh_mm.dask")


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _sparse_int(m, n, density, seed):
    M = sps.random(m, n, density=density, random_state=seed, format="csr")
    M.data = np.round(M.data * 10) - 4
    return M


@pytest.mark.parametrize("kind", ["dense", "dense-fp32", "sparse-int", "sparse-float"])
@pytest.mark.parametrize("chunks", [(128, 100), (64, 300), (512, 37)])
def test_chunks_give_the_single_process_bits(kind, chunks):
    """Any inner chunk of one power of two (the last shorter), any row and column chunks:
    the sketch of pagh_mm.compress of the whole arrays, bit for bit (pairs or transforms)."""
    inner, outer = chunks
    rng = np.random.default_rng(5)
    if kind.startswith("dense"):
        A, B = rng.standard_normal((300, 500)), rng.standard_normal((500, 250))
        if kind == "dense-fp32":
            A, B = A.astype(np.float32), B.astype(np.float32)
        dA, dB = da.from_array(A, chunks=(outer, inner)), da.from_array(B, chunks=(inner, outer))
    else:
        A, B = _sparse_int(300, 500, 0.05, 1), _sparse_int(500, 250, 0.05, 2)
        if kind == "sparse-float":
            A.data = A.data + 0.25
        dA = da.from_array(A, chunks=(outer, inner), asarray=False)
        dB = da.from_array(B, chunks=(inner, outer), asarray=False)
    for kw in (dict(buckets=1 << 10, reps=5, seed=3), dict(buckets=1 << 14, reps=3, seed=8,
                                                            method="fft")):
        got = pdask.compress(dA, dB, **kw)
        want = pagh_mm.compress(A, B, **kw)
        assert _same(got.sketch, want.sketch), kw
        assert got.shape == want.shape and got.dtype == want.dtype


def test_sparse_chunks_are_read_once_with_given_buckets(monkeypatch):
    """Given buckets: the pair statistics come from the sums' tasks (no statistics tasks) and
    integer or float factors are read once; pairs some chunks added that the whole forbids
    (values integer in some chunks only, sums that could reach 2**53) are dropped by a second
    pass of sums without pairs: the single-process bits every time."""
    from pagh_mm import chunks
    calls = {"stats": 0, "sums": 0}
    real_stats, real_sums = chunks.chunk_stats, chunks.chunk_sums

    def stats(*a, **kw):
        calls["stats"] += 1
        return real_stats(*a, **kw)

    def sums(*a, **kw):
        calls["sums"] += 1
        return real_sums(*a, **kw)
    monkeypatch.setattr(chunks, "chunk_stats", stats)
    monkeypatch.setattr(chunks, "chunk_sums", sums)
    n, c = 512, 64
    A, B = _sparse_int(300, n, 0.03, 1).tocsc(), _sparse_int(n, 250, 0.03, 2)
    rng = np.random.default_rng(0)
    floats = A.copy()
    floats.data = floats.data + rng.random(floats.nnz)
    mixed = A.copy()
    late = np.repeat(np.arange(n), np.diff(mixed.indptr)) >= 5 * c
    mixed.data[late] += rng.random(int(late.sum()))
    big_A, big_B = A.tolil(), B.tolil()             # 2**54 in chunk 0, cancelled in chunk 3
    big_A[5, 9], big_B[9, 4] = 2 ** 27, 2 ** 27
    big_A[5, 200], big_B[200, 4] = 2 ** 27, -2 ** 27
    kw = dict(buckets=1 << 10, reps=3, seed=5)
    for X, Y, passes in ((A, B, 1), (floats, B, 1), (mixed, B, 2),
                         (big_A.tocsc(), big_B.tocsr(), 2)):
        want = pagh_mm.compress(X, Y, **kw)
        calls.update(stats=0, sums=0)
        got = pdask.compress(da.from_array(X, chunks=(100, c), asarray=False),
                             da.from_array(Y, chunks=(c, 125), asarray=False), **kw)
        assert _same(got.sketch, want.sketch) and calls == {"stats": 0, "sums": passes * n // c}


def test_bit_sketches_come_from_the_same_tasks():
    A, B = _sparse_int(200, 256, 0.05, 3), _sparse_int(256, 180, 0.05, 4)
    dA = da.from_array(A, chunks=(200, 64), asarray=False)
    dB = da.from_array(B, chunks=(64, 180), asarray=False)
    got = pdask.compress(dA, dB, buckets=1 << 12, reps=5, seed=2, decode=True)
    want = pagh_mm.compress(A, B, buckets=1 << 12, reps=5, seed=2, decode=True)
    assert _same(got.sketch, want.sketch) and _same(got.bits.sketch, want.bits.sketch)


def test_certified_queries_on_a_local_cluster_match_one_process():
    """Automatic buckets, a certified top-k and exact values on a LocalCluster of two workers:
    one process's answers (exact values fetched from the rows and columns asked for)."""
    distributed = pytest.importorskip("dask.distributed")
    d = synthetic.planted_product(512, 10, magnitude=400.0, seed=1)
    dA, dB = da.from_array(d.A, chunks=(200, 128)), da.from_array(d.B, chunks=(128, 300))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        sk = pdask.compress(dA, dB, k=10, seed=3)
        top = sk.top_k(10, verify=True)
        r, c = np.array([0, 5, 511, 5]), np.array([7, 7, 0, 300])
        exact = sk.exact(r, c)
    ref = pagh_mm.compress(d.A, d.B, k=10, seed=3)
    want = ref.top_k(10, verify=True)
    assert sk.buckets == ref.buckets and _same(sk.sketch, ref.sketch)
    assert top.certified and want.certified
    assert np.array_equal(top.rows, want.rows) and np.array_equal(top.cols, want.cols)
    assert np.array_equal(top.exact, want.exact)
    assert synthetic.recall(d.rows, d.cols, top.rows, top.cols) == 1.0
    assert _same(exact, ref.exact(r, c))


def test_an_automatic_sketch_of_dask_arrays_grows_like_one_processes():
    """A heavy background: the first size is too small and the certified query rebuilds the
    sketch from the dask factors with the buckets it names, as one process does."""
    A, B = heavy_background_product()
    sk = pdask.compress(da.from_array(A, chunks=(80, 64)), da.from_array(B, chunks=(64, 70)),
                        k=5, seed=3)
    ref = pagh_mm.compress(A, B, k=5, seed=3)
    first = sk.buckets
    top, want = sk.top_k(5, verify=True), ref.top_k(5, verify=True)
    assert sk.buckets > first and "grown" in sk.chosen.reason and sk.buckets == ref.buckets
    assert top.certified and np.array_equal(top.exact, want.exact) and _same(sk.sketch, ref.sketch)


def test_bad_inputs_are_refused_with_the_fix():
    A, B = np.ones((30, 40)), np.ones((40, 20))
    with pytest.raises(TypeError, match="dask arrays"):
        pdask.compress(A, B, buckets=64)
    with pytest.raises(ValueError, match=r"rechunk both .* A.rechunk\(\{1: 4096\}\)"):
        pdask.compress(da.from_array(A, chunks=(30, 16)), da.from_array(B, chunks=(8, 20)),
                       buckets=64)
    with pytest.raises(ValueError, match=r"one power of two .* A.rechunk\(\{1: 8\}\)"):
        pdask.compress(da.from_array(A, chunks=(30, 12)), da.from_array(B, chunks=(12, 20)),
                       buckets=64)
    with pytest.raises(ValueError, match="not aligned"):
        pdask.compress(da.from_array(A, chunks=(30, 16)),
                       da.from_array(np.ones((41, 20)), chunks=(16, 20)), buckets=64)
    with pytest.raises(ValueError, match="compress_gram"):
        pdask.compress(da.from_array(A.T.copy(), chunks=(40, 16)),
                       da.from_array(A, chunks=(16, 40)), buckets=64, gram=True)
    with pytest.raises(ValueError, match="4-independent"):
        pdask.compress_gram(da.from_array(A, chunks=(16, 40)), buckets=64, hash="multiply-shift")
    with pytest.raises(TypeError, match="dask array"):
        pdask.compress_gram(A, buckets=64)
    with pytest.raises(ValueError, match="buckets"):
        pdask.compress(da.from_array(A, chunks=(30, 16)), da.from_array(B, chunks=(16, 20)),
                       buckets=100)
    bad = A.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        pdask.compress(da.from_array(bad, chunks=(30, 16)), da.from_array(B, chunks=(16, 20)),
                       buckets=64)


def test_fwht_of_dask_arrays_along_a_whole_axis():
    """fwht_gpu.dask: map_blocks along an axis each chunk holds whole, the in-memory bits for
    any chunks of the other axes, both directions, options passed on; a split axis refused."""
    import fwht_gpu
    import fwht_gpu.dask as fdask
    x = np.random.default_rng(2).standard_normal((37, 64, 8)).astype(np.float32)
    for axis, chunks in ((1, (10, 64, 3)), (-2, (37, 64, 1)), (2, (5, 16, 8))):
        dx = da.from_array(x, chunks=chunks)
        for fn, ref in ((fdask.fwht, fwht_gpu.fwht), (fdask.ifwht, fwht_gpu.ifwht)):
            got = fn(dx, axis=axis, norm="ortho").compute()
            assert _same(got, ref(x, axis=axis, norm="ortho"))
    with pytest.raises(ValueError, match=r"rechunk it whole, e.g. x.rechunk\(\{1: -1\}\)"):
        fdask.fwht(da.from_array(x, chunks=(37, 16, 8)), axis=1)
    with pytest.raises(TypeError, match="dask arrays"):
        fdask.fwht(x)
    with pytest.raises(ValueError, match="out of range"):
        fdask.fwht(da.from_array(x), axis=3)


@pytest.mark.parametrize("kind", ["dense", "sparse-int", "sparse-float"])
def test_gram_sketches_of_dask_arrays_are_one_processes(kind):
    """compress_gram of X chunked along its rows (samples): the sketch, the exact diagonal,
    the automatic size and the certified off-diagonal top-k of pagh_mm.compress_gram."""
    rng = np.random.default_rng(9)
    if kind == "dense":
        X = rng.standard_normal((600, 90))
        X[:, 5] = X[:, 7] * 3 + 0.1 * X[:, 5]             # a strongly co-varying pair
        dX = da.from_array(X, chunks=(128, 45))
    else:
        X = _sparse_int(600, 90, 0.08, 10).tolil()
        X[:, 7] = X[:, 5] * 3
        X = X.tocsr()
        if kind == "sparse-float":
            X.data = X.data + 0.5
        dX = da.from_array(X, chunks=(128, 90), asarray=False)
    got = pdask.compress_gram(dX, buckets=1 << 10, reps=5, seed=4)
    want = pagh_mm.compress_gram(X, buckets=1 << 10, reps=5, seed=4)
    assert got.gram and _same(got.sketch, want.sketch) and _same(got.diagonal, want.diagonal)
    sk, ref = pdask.compress_gram(dX, k=3, seed=4), pagh_mm.compress_gram(X, k=3, seed=4)
    top = sk.top_k(3, verify=True, exclude_diagonal=True)
    exp = ref.top_k(3, verify=True, exclude_diagonal=True)
    assert sk.buckets == ref.buckets and top.certified == exp.certified
    assert np.array_equal(top.rows, exp.rows) and np.array_equal(top.exact, exp.exact)


def test_edge_inputs_formats_attach_and_tiled_verification(tmp_path, monkeypatch):
    """An empty inner dimension; COO/BSR/DOK blocks (converted block by block); a loaded
    sketch re-attached to dask factors; exact values fetched a tile of entries at a time:
    one process's results."""
    z = pdask.compress(da.zeros((5, 0)), da.zeros((0, 4)), buckets=64, reps=3, seed=1)
    assert _same(z.sketch, pagh_mm.compress(np.zeros((5, 0)), np.zeros((0, 4)), buckets=64,
                                            reps=3, seed=1).sketch)
    A, B = _sparse_int(120, 256, 0.05, 11), _sparse_int(256, 90, 0.05, 12)
    want = pagh_mm.compress(A, B, buckets=1 << 10, reps=5, seed=2)
    for fmt in ("coo", "bsr", "dok"):
        def to(blk, fmt=fmt):
            return blk.asformat(fmt)
        dA = da.from_array(A, chunks=(120, 64), asarray=False)
        dB = da.from_array(B, chunks=(64, 90), asarray=False)
        dA = dA.map_blocks(to, dtype=A.dtype, meta=A[:0, :0].asformat(fmt))
        dB = dB.map_blocks(to, dtype=B.dtype, meta=B[:0, :0].asformat(fmt))
        got = pdask.compress(dA, dB, buckets=1 << 10, reps=5, seed=2)
        assert _same(got.sketch, want.sketch), fmt
    dA = da.from_array(A, chunks=(60, 64), asarray=False)
    dB = da.from_array(B, chunks=(64, 45), asarray=False)
    sk = pdask.compress(dA, dB, buckets=1 << 10, reps=5, seed=2)
    sk.save(tmp_path / "s.pmm")
    back = pagh_mm.CompressedProduct.load(tmp_path / "s.pmm").attach(dA, dB)
    r, c = np.arange(120) % 120, np.arange(120) % 90
    monkeypatch.setattr(pagh_mm.query, "TILE_BUDGET", 16 * 256 * 7)     # 7 entries a tile
    assert _same(back.exact(r, c), want.exact(r, c))
    with pytest.raises(ValueError, match="attach dask arrays"):
        back.attach(dA, B)


@pytest.mark.gpu
def test_cupy_blocks_give_the_single_gpu_bits():
    """Dask arrays of CuPy blocks: on the local scheduler, and with dask-cuda (one worker per
    GPU, each block on its worker's GPU) where it is installed: the bits of pagh_mm.compress of
    the whole CuPy arrays on one GPU, for dense and sparse (cupyx) blocks."""
    from fwht_gpu import gpu
    if not gpu.available():
        pytest.skip(f"no GPU: {gpu.status()}")
    cp = gpu.cupy()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(11)
    A = rng.standard_normal((300, 1000)).astype(np.float32)
    B = rng.standard_normal((1000, 260)).astype(np.float32)
    S1, S2 = _sparse_int(300, 1000, 0.02, 5).tocsc(), _sparse_int(1000, 260, 0.02, 6)
    kw = dict(buckets=1 << 12, reps=3, seed=7)
    cases = []
    for X, Y, fa, fb in ((A, B, cp.asarray, cp.asarray),
                         (S1, S2, csp.csc_matrix, csp.csr_matrix)):
        ma, mb = fa(X[:0, :0]), fb(Y[:0, :0])
        dX = da.from_array(X, chunks=(300, 128), asarray=False).map_blocks(fa, meta=ma)
        dY = da.from_array(Y, chunks=(128, 130), asarray=False).map_blocks(fb, meta=mb)
        cases.append((dX, dY, pagh_mm.compress(fa(X), fb(Y), **kw)))
    for dX, dY, want in cases:
        got = pdask.compress(dX, dY, **kw)
        assert got.backend.gpu and _same(cp.asnumpy(got.sketch), cp.asnumpy(want.sketch))
    try:
        from dask_cuda import LocalCUDACluster
        from distributed import Client
    except ImportError:
        return
    with LocalCUDACluster(dashboard_address=None) as cluster, Client(cluster):
        for dX, dY, want in cases:
            got = pdask.compress(dX, dY, **kw)
            assert _same(cp.asnumpy(got.sketch), cp.asnumpy(want.sketch))
