"""pagh_mm on the CPU against exact products (runs in CI)."""
import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from pagh_mm import hashing

METHODS = ["fwht", "fft"]
FAMILIES = list(pagh_mm.HASH_FAMILIES)


def sparse_int_product(rng, m=120, n=90, p=110, density=0.02):
    A = rng.integers(-4, 5, (m, n)) * (rng.random((m, n)) < density)
    B = rng.integers(-4, 5, (n, p)) * (rng.random((n, p)) < density)
    return A.astype(np.float64), B.astype(np.float64)


# --- hashing ------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_hashes_are_seeded_ranged_and_independent_of_t(family):
    keys = np.arange(1 << 14)
    p1 = hashing.HashParams.draw(family, 11, 3)
    p2 = hashing.HashParams.draw(family, 11, 3)
    p3 = hashing.HashParams.draw(family, 12, 3)
    h = hashing.buckets(p1, 0, 1, keys, 9)
    assert h.min() >= 0 and h.max() < 512 and h.dtype == np.int64
    assert (h == hashing.buckets(p2, 0, 1, keys, 9)).all()                 # same (seed, t)
    assert (h != hashing.buckets(p3, 0, 1, keys, 9)).mean() > 0.9          # other seed
    assert (h != hashing.buckets(p1, 1, 1, keys, 9)).mean() > 0.9          # other t
    assert (h != hashing.buckets(p1, 0, 2, keys, 9)).mean() > 0.9          # h2 independent of h1
    s = hashing.signs(p1, 0, 1, keys)
    assert set(np.unique(s)) == {-1.0, 1.0} and abs(s.mean()) < 0.05
    assert abs((s * hashing.signs(p1, 0, 2, keys)).mean()) < 0.05
    counts = np.bincount(h, minlength=512)
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()
    # derived from (seed, t) alone: a 1-repetition draw equals repetition 0 of a 3-repetition draw
    q = hashing.HashParams.draw(family, 11, 1)
    assert (hashing.buckets(q, 0, 2, keys, 9) == hashing.buckets(p1, 0, 2, keys, 9)).all()


# --- exactness ----------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_sparse_integer_product_recovered_exactly(method, family):
    rng = np.random.default_rng(5)
    A, B = sparse_int_product(rng)
    C = A @ B
    assert 0 < np.count_nonzero(C) < 600
    sk = pagh_mm.compress(A, B, buckets=1 << 16, reps=5, seed=3, method=method, hash=family,
                          dtype=np.float64)
    D = sk.to_dense()
    if method == "fwht":       # integer sums and differences: exact in float64
        assert (D == C).all()
    else:                      # floating-point FFT: exact up to its rounding
        assert np.abs(D - C).max() < 1e-9 and (np.round(D) == C).all()
    nz = np.nonzero(C)
    assert np.allclose(sk.estimate(nz[0], nz[1]), C[nz], rtol=0, atol=1e-9)
    top = sk.top_k(20, verify=True)
    assert (top.exact == C[top.rows, top.cols]).all()
    assert np.allclose(top.estimates, top.exact, rtol=0, atol=1e-9)
    assert np.sort(np.abs(C).ravel())[-20] == np.abs(top.exact).min()


def test_approx_matmul_defaults_and_type():
    rng = np.random.default_rng(1)
    A, B = sparse_int_product(rng, density=0.01)
    assert np.count_nonzero(A @ B) <= 150
    C = A @ B
    D = pagh_mm.approx_matmul(A, B, seed=0)
    assert isinstance(D, np.ndarray) and D.shape == C.shape and D.dtype == np.float64
    # ~10 (N/b)^3 of the entries may be wrong: N = 150, b = 2048 -> ~0.4% of 13200
    assert np.mean(D != C) < 0.01
    assert (pagh_mm.approx_matmul(A, B, seed=0, buckets=1 << 15) == C).all()
    assert pagh_mm.default_buckets(120, 110) == 2048


# --- statistics -----------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_each_repetition_unbiased_with_variance_bound(method, family):
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((30, 20)), rng.standard_normal((20, 40))
    C = A @ B
    b, S = 64, 300
    I, J = np.arange(30)[:, None], np.arange(40)[None, :]
    est = np.array([pagh_mm.compress(A, B, buckets=b, reps=1, seed=s, method=method, hash=family)
                    .estimate_reps(I, J)[0] for s in range(S)])
    bound = ((C ** 2).sum() - C ** 2) / b          # ||C||_F^2 / b without the entry itself
    var = est.var(axis=0, ddof=1)
    z = (est.mean(axis=0) - C) / np.sqrt(var / S)
    # unbiased: z ~ N(0, 1) per entry (1200 entries)
    assert abs(z.mean()) < 0.15 and np.mean(np.abs(z) > 3) < 0.01 and np.abs(z).max() < 5.5
    # variance at most ||C||_F^2 / b: the mean ratio within sampling error (sd ~ sqrt(2/S) per entry)
    ratio = var / bound
    assert ratio.mean() < 1.08 and np.quantile(ratio, 0.99) < 1.45


def test_fwht_and_fft_agree_in_distribution():
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((40, 30)), rng.standard_normal((30, 50))
    C = A @ B
    I, J = np.arange(40)[:, None], np.arange(50)[None, :]
    err = {}
    for method in METHODS:
        err[method] = np.array([pagh_mm.compress(A, B, buckets=128, reps=1, seed=s, method=method)
                                .estimate_reps(I, J)[0] - C for s in range(200)]).ravel()
    v1, v2 = err["fwht"].var(), err["fft"].var()
    assert 0.93 < v1 / v2 < 1.07                          # 400k samples each
    assert abs(err["fwht"].mean()) < 0.05 * np.sqrt(v1) and abs(err["fft"].mean()) < 0.05 * np.sqrt(v2)
    q = np.linspace(0.05, 0.95, 19)
    assert np.allclose(np.quantile(err["fwht"], q), np.quantile(err["fft"], q), atol=0.05 * np.sqrt(v1))


def test_noise_estimate_matches_frobenius_norm():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((200, 50)), rng.standard_normal((50, 300))
    sk = pagh_mm.compress(A, B, buckets=1 << 12, reps=7, seed=1)
    fro = np.linalg.norm(A @ B)
    assert abs(sk.frobenius_estimate() / fro - 1) < 0.1
    assert abs(sk.noise() / (fro / np.sqrt(1 << 12)) - 1) < 0.1


# --- inputs, dtypes, composition ---------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_inputs_equal_dense(fmt):
    rng = np.random.default_rng(4)
    A, B = sparse_int_product(rng, density=0.05)
    dense = pagh_mm.compress(A, B, buckets=1 << 10, reps=3, seed=9)
    sp = pagh_mm.compress(sps.csr_matrix(A).asformat(fmt), sps.csr_matrix(B).asformat(fmt),
                          buckets=1 << 10, reps=3, seed=9)
    assert (sp.sketch == dense.sketch).all()
    t1, t2 = sp.top_k(10, verify=True), dense.top_k(10, verify=True)
    assert (t1.exact == t2.exact).all()


def test_sum_of_sketches_is_sketch_of_concatenated_inner_dimension():
    rng = np.random.default_rng(6)
    A, B = sparse_int_product(rng, density=0.05)
    k = A.shape[1] // 3
    kw = dict(buckets=1 << 11, reps=3, seed=4)
    whole = pagh_mm.compress(A, B, **kw)
    parts = pagh_mm.compress(A[:, :k], B[:k], **kw) + pagh_mm.compress(A[:, k:], B[k:], **kw)
    assert (parts.sketch == whole.sketch).all()
    top = parts.top_k(5, verify=True)                       # verification uses both factor pairs
    assert (top.exact == (A @ B)[top.rows, top.cols]).all()
    with pytest.raises(ValueError, match="identical"):
        whole + pagh_mm.compress(A, B, buckets=1 << 11, reps=3, seed=5)
    with pytest.raises(ValueError, match="identical"):
        whole + pagh_mm.compress(A, B, buckets=1 << 11, reps=3, seed=4, method="fft")


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((60, 40)), rng.standard_normal((40, 70))
    for family in FAMILIES:
        sk = pagh_mm.compress(A, B, buckets=256, reps=3, seed=8, hash=family, method="fwht")
        path = tmp_path / f"s-{family}.npz"
        sk.save(path)
        back = pagh_mm.CompressedProduct.load(path)
        assert (back.sketch == sk.sketch).all() and back.shape == sk.shape
        assert back.params.same_as(sk.params) and back.params.family == family
        i, j = rng.integers(0, 60, 50), rng.integers(0, 70, 50)
        assert (back.estimate(i, j) == sk.estimate(i, j)).all()
        with pytest.raises(ValueError, match="attach"):
            back.top_k(3, verify=True)
        assert (back.attach(A, B).top_k(3, verify=True).exact == sk.top_k(3, verify=True).exact).all()
    assert not list(tmp_path.glob(".tmp-*"))                # no temporary files left
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3))
    with pytest.raises(ValueError, match="not a pagh_mm sketch"):
        pagh_mm.CompressedProduct.load(bad)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable"):
        pagh_mm.CompressedProduct.load(tmp_path / "junk.npz")


def test_top_k_and_above_match_the_dense_estimate():
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((80, 30)), rng.standard_normal((30, 90))
    sk = pagh_mm.compress(A, B, buckets=512, reps=5, seed=2)
    D = sk.to_dense()
    old = pagh_mm.query.TILE_BUDGET
    pagh_mm.query.TILE_BUDGET = 5 * 8 * 90 * 3 * 7          # force 7-row tiles
    try:
        top = sk.top_k(25)
        ab = sk.above(5.0)
        topv = sk.top_k(10, by="value")
    finally:
        pagh_mm.query.TILE_BUDGET = old
    assert np.allclose(np.sort(np.abs(D).ravel())[::-1][:25], np.abs(top.estimates))
    assert (D[top.rows, top.cols] == top.estimates).all()
    assert set(zip(*np.nonzero(np.abs(D) >= 5.0))) == set(zip(ab.rows.tolist(), ab.cols.tolist()))
    assert np.allclose(np.sort(D.ravel())[::-1][:10], topv.estimates)
    ver = sk.above(5.0, verify=True)
    assert (np.abs(ver.exact) >= 5.0).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_low_precision_transforms(dtype):
    rng = np.random.default_rng(9)
    A, B = sparse_int_product(rng)
    C = A @ B
    sk = pagh_mm.compress(A, B, buckets=1 << 14, reps=5, seed=1, dtype=dtype)
    assert sk.dtype == {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]
    D = sk.to_dense()
    tol = {"float32": 1e-4, "float16": 0.1, "bfloat16": 0.5}[dtype]
    assert np.abs(D - C).max() <= tol * np.abs(C).max()


def test_fp16_overflow_is_reported():
    A = np.full((256, 4), 20000.0)       # ~128 values of +-20000 per bucket
    B = np.full((4, 256), 1.0)
    with pytest.raises(OverflowError, match="fp16"):
        pagh_mm.compress(A, B, buckets=2, reps=1, seed=0, dtype="float16")
    assert np.isfinite(pagh_mm.compress(A, B, buckets=2, reps=1, seed=0, dtype="float32").sketch).all()


def test_bad_inputs():
    A, B = np.ones((4, 5)), np.ones((5, 6))
    kw = dict(buckets=16, reps=3)
    with pytest.raises(ValueError, match="not aligned"):
        pagh_mm.compress(A, np.ones((4, 6)), **kw)
    with pytest.raises(ValueError, match="power of two.*buckets=16"):
        pagh_mm.compress(A, B, buckets=12, reps=3)
    with pytest.raises(ValueError, match="power of two"):
        pagh_mm.compress(A, B, buckets=1, reps=3)
    with pytest.raises(ValueError, match="reps=0"):
        pagh_mm.compress(A, B, buckets=16, reps=0)
    bad = A.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf.*check_finite=False"):
        pagh_mm.compress(bad, B, **kw)
    with pytest.raises(ValueError, match="NaN or Inf"):
        pagh_mm.compress(A, sps.csr_matrix(np.where(B > 0, np.inf, 0)), **kw)
    with pytest.raises(OverflowError, match="check_finite=False"):
        pagh_mm.compress(bad, B, check_finite=False, **kw)
    with pytest.raises(TypeError, match="real"):
        pagh_mm.compress(A.astype(complex), B, **kw)
    with pytest.raises(ValueError, match="2-d"):
        pagh_mm.compress(np.ones(5), B, **kw)
    with pytest.raises(ValueError, match="method="):
        pagh_mm.compress(A, B, method="ntt", **kw)
    with pytest.raises(ValueError, match="hash="):
        pagh_mm.compress(A, B, hash="md5", **kw)
    with pytest.raises(ValueError, match="fft"):
        pagh_mm.compress(A, B, method="fft", dtype="float16", **kw)
    sk = pagh_mm.compress(A, B, seed=0, **kw)
    with pytest.raises(IndexError):
        sk.estimate([4], [0])
    with pytest.raises(ValueError, match="k="):
        sk.top_k(0)
    with pytest.raises(ValueError, match="by="):
        sk.top_k(3, by="size")
    # integer and boolean inputs are fine
    assert pagh_mm.compress(np.ones((4, 5), int), np.ones((5, 6), bool), seed=1, **kw).dtype == "fp64"


def test_the_gpu_sparse_exact_path_gives_the_tree_bits():
    """exact._gpu_sparse_dots (array passes; run here through NumPy) equals _dots, the
    pairwise tree over the inner index, bit for bit, values and absolute bounds."""
    from pagh_mm import exact
    from pagh_mm.backend import cpu
    rng = np.random.default_rng(0)
    r, c = rng.integers(0, 300, 1000), rng.integers(0, 400, 1000)
    for values in (rng.standard_normal, lambda k: rng.integers(-3, 4, k).astype(np.float64)):
        A = sps.random(300, 500, density=0.05, random_state=1, format="csc")   # new objects:
        B = sps.random(500, 400, density=0.05, random_state=2, format="csr")   # slices cached
        A.data, B.data = values(A.nnz), values(B.nnz)          # floats: the tree; integers: any order
        val, bound = exact._gpu_sparse_dots(cpu(), A, B, r, c)
        assert np.array_equal(val, exact._dots(cpu(), A, B, r, c, absolute=False))
        assert np.array_equal(bound, exact._dots(cpu(), A, B, r, c, absolute=True))
        assert np.allclose(val, (A @ B).toarray()[r, c], rtol=0, atol=1e-12)
