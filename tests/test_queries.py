"""Certified queries' machinery, automatic parameters, per-row results and their CLI (CPU)."""
import json
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sps
from click.testing import CliRunner

import pagh_mm
from fwht_gpu import memory
from pagh_mm import auto, certificate, query
from pagh_mm.cli import main as pagh_main
from tests.params import heavy_background_product


def heavy_product(seed=0, m=160, n=70, p=140):
    """Small integer product with a few large entries over a sparse background."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-2, 3, (m, n)) * (rng.random((m, n)) < 0.05)
    B = rng.integers(-2, 3, (n, p)) * (rng.random((n, p)) < 0.05)
    for r, c, s in ((3, 9, 1), (40, 9, -1), (77, 100, 1), (150, 5, 1)):
        A[r, :30] += 2
        B[:30, c] += 2 * s
    return A.astype(np.float64), B.astype(np.float64)


def test_multiplier_matches_the_binomial_tail_of_the_median():
    for d in (1, 3, 4, 5, 9):
        for count, delta in ((1, 1e-3), (500, 1e-2), (1e6, 1e-6)):
            lam = certificate.multiplier(d, count, delta)
            q = 1 / (1 + lam ** 2)
            tail = certificate.binomial_tail(d, certificate.median_votes(d), q)
            assert tail * count <= delta * (1 + 1e-9)
            q2 = 1 / (1 + (0.99 * lam) ** 2)          # a smaller margin breaks the bound
            assert certificate.binomial_tail(d, certificate.median_votes(d), q2) * count > delta
    assert certificate.median_votes(5) == 3 and certificate.median_votes(4) == 2
    assert certificate.entries_at_risk(100.0, 5.0, 10**6) == 4.0
    assert certificate.entries_at_risk(100.0, 0.0, 77) == 77.0
    with pytest.raises(ValueError, match="failure_probability"):
        certificate.multiplier(5, 1, 1.5)


def test_peeling_leaves_the_sketch_of_the_rest():
    """Subtracting verified entries gives the sketch of C minus those entries, bit for bit
    on integer data (every value exact in float64)."""
    A, B = heavy_product(1)
    C = A @ B
    kw = dict(buckets=256, reps=5, seed=4)
    sk = pagh_mm.compress(A, B, **kw)
    ids = np.array([3 * 140 + 9, 40 * 140 + 9, 77 * 140 + 100])
    res = query.peel(sk, sk.sketch.copy(), ids, C.ravel()[ids])
    R = C.copy()
    R.ravel()[ids] = 0
    # the sketch of R: compress R itself (A' = R, B' = I has the same hashes for rows/cols)
    ref = pagh_mm.compress(R, np.eye(140), **kw)
    assert np.array_equal(res, ref.sketch)


def test_certified_top_k_above_and_per_row_on_a_clear_product():
    A, B = heavy_product(2)
    C = A @ B
    sk = pagh_mm.compress(A, B, buckets=1 << 15, reps=5, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pagh_mm.CertificateWarning)
        top = sk.top_k(4, verify=True)
        ab = sk.above(100.0, verify=True)
        rows = sk.top_k_per_row(2, threshold=20.0, verify=True)
    assert top.certified and top.verified >= 4 and top.margin > 0 and top.noise > 0
    assert sorted(np.abs(top.exact)) == sorted(np.sort(np.abs(C).ravel())[-4:])
    assert (top.exact == C[top.rows, top.cols]).all()
    assert ab.certified and set(zip(ab.rows.tolist(), ab.cols.tolist())) == \
        set(zip(*np.nonzero(np.abs(C) >= 100.0)))
    assert sps.isspmatrix_csr(rows) and rows.shape == C.shape
    for i in range(C.shape[0]):
        want = np.sort(np.abs(C[i])[np.abs(C[i]) >= 20.0])[::-1][:2]
        got = np.sort(np.abs(rows[i].data))[::-1]
        assert np.array_equal(want, got), i
    ent = sk.top_k_per_row(2, threshold=20.0, verify=True, format="entries")
    assert ent.certified and (ent.exact == C[ent.rows, ent.cols]).all()
    est = sk.top_k_per_row(3)                    # estimates, no threshold
    assert est.nnz == 3 * C.shape[0]


def test_uncertified_answers_warn_and_name_the_parameter():
    A, B = heavy_product(3)
    sk = pagh_mm.compress(A, B, buckets=64, reps=3, seed=0)
    with pytest.warns(pagh_mm.CertificateWarning, match="buckets="):
        top = sk.top_k(4, verify=True)
    assert top.certified is False
    with pytest.warns(pagh_mm.CertificateWarning, match="not certified"):
        sk.top_k_per_row(2, verify=True)
    big = pagh_mm.compress(A, B, buckets=1 << 14, reps=5, seed=0)
    with pytest.warns(pagh_mm.CertificateWarning, match="not certified"):
        assert big.top_k(60, verify=True, candidates=60, rounds=1).certified is False


def test_certified_above_peels_a_dominant_block_instead_of_verifying_everything():
    # a 6 x 6 block of 400 over a background of 0.01: before peeling the noise puts the
    # cut below zero; the first pool verifies the largest estimates, peels them, certifies
    u = np.full(300, 0.1)
    v = np.full(280, 0.1)
    u[:6] = v[:6] = 20
    sk = pagh_mm.compress(u[:, None], v[None, :], buckets=1024, reps=5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sk.above(200.0, verify=True)
    assert got.certified and got.rows.size == 36
    assert got.verified <= query.FIRST_POOL_ABOVE < u.size * v.size // 4
    assert sorted(zip(got.rows.tolist(), got.cols.tolist())) == \
        [(i, j) for i in range(6) for j in range(6)]


def test_an_uncertified_answer_reports_the_margin_of_its_last_cut():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((200, 40)), rng.standard_normal((40, 200))
    sk = pagh_mm.compress(A, B, buckets=256, reps=5, seed=0)
    with pytest.warns(pagh_mm.CertificateWarning, match="buckets="):
        got = sk.top_k(5, verify=True)
    assert got.certified is False and math.isfinite(got.margin) and got.margin > 0
    d, sigma = sk.reps, got.noise
    ex = np.sort(np.abs(got.exact))
    norm2 = sigma * sigma * sk.buckets
    unreported = A.shape[0] * B.shape[1] - got.verified
    lam = certificate.multiplier(d, certificate.entries_at_risk(norm2, ex[0], unreported), 1e-3)
    assert got.margin == pytest.approx(lam * sigma, rel=1e-12)


def test_a_cut_that_is_not_positive_by_value_says_so():
    rng = np.random.default_rng(0)
    A = -np.abs(rng.standard_normal((600, 20)))
    B = np.abs(rng.standard_normal((20, 500)))          # every entry of A @ B is negative
    sk = pagh_mm.compress(A, B, buckets=1024, reps=5, seed=0)
    with pytest.warns(pagh_mm.CertificateWarning, match="not positive.*by='abs'"):
        got = sk.top_k(5, by="value", verify=True)
    assert got.certified is False


def test_query_arguments_are_validated():
    A, B = heavy_product(4)
    sk = pagh_mm.compress(A, B, buckets=64, reps=3, seed=0)
    for kw, match in ((dict(failure_probability=0), "failure_probability"),
                      (dict(failure_probability=1.0), "failure_probability"),
                      (dict(rounds=0), "rounds"), (dict(candidates=2), "candidates")):
        with pytest.raises(ValueError, match=match):
            sk.top_k(3, verify=True, **kw)
    with pytest.raises(ValueError, match="n="):
        sk.top_k_per_row(0)
    with pytest.raises(ValueError, match="format="):
        sk.top_k_per_row(2, format="coo")
    with pytest.raises(ValueError, match="finite"):
        sk.above(float("nan"))


def test_frobenius_estimate_is_unbiased_for_dense_sparse_and_gram():
    """||G A B H^T||_F^2 is unbiased for ||AB||_F^2 (mean over seeds), sparse factors give
    the dense factors' estimate, and the Gram form leaves the diagonal out."""
    be = pagh_mm.backend.cpu()
    rng = np.random.default_rng(3)
    A = sps.random(400, 300, density=0.03, random_state=4, format="csc", data_rvs=rng.standard_normal)
    B = sps.random(300, 350, density=0.03, random_state=5, format="csr", data_rvs=rng.standard_normal)
    A[7, :] = 0.0
    A[7, 3] = 40.0                          # one heavy row: the deviation is near its bound
    A.eliminate_zeros()
    C = (A @ B).toarray()
    r = np.array([auto.frobenius_estimate(A, B, be, seed=s) for s in range(120)]) ** 2
    assert abs(r.mean() / (C ** 2).sum() - 1) < 0.08
    assert auto.frobenius_estimate(A.toarray(), B.toarray(), be, seed=9) == \
        pytest.approx(auto.frobenius_estimate(A, B, be, seed=9), rel=1e-12)
    X = sps.random(500, 120, density=0.05, random_state=6, format="csr")
    G = (X.T @ X).toarray()
    D = np.diag(G).copy()
    off = ((G - np.diag(D)) ** 2).sum()
    g = np.array([auto.frobenius_estimate(X.T, X, be, seed=s, diagonal=D) for s in range(120)]) ** 2
    assert abs(g.mean() / off - 1) < 0.08
    with pytest.raises(ValueError, match="rows"):
        auto.frobenius_sketch(A, B, be, 0, rows=48)


def test_frobenius_sketch_chunks_and_memory(monkeypatch):
    """Chunks of the inner dimension (by count, and halved while a sparse side stores more
    than VALUE_CHUNK values in one) sum to the whole estimate; the memory is checked first."""
    be = pagh_mm.backend.cpu()
    rng = np.random.default_rng(8)
    A = sps.random(300, 200, density=0.05, random_state=9, format="csc", data_rvs=rng.standard_normal)
    B = sps.random(200, 250, density=0.05, random_state=10, format="csr", data_rvs=rng.standard_normal)
    whole = auto.frobenius_sketch(A, B, be, 3)
    with monkeypatch.context() as mp:
        mp.setattr(auto, "INNER_CHUNK", 64)
        np.testing.assert_allclose(auto.frobenius_sketch(A, B, be, 3), whole, rtol=1e-12, atol=1e-9)
        mp.setattr(auto, "VALUE_CHUNK", 40)              # halved to chunks of 8 or fewer
        sides = [auto._JLSide(M, w, auto._jl_params(3), 6, be) for w, M in ((1, A), (2, B))]
        assert max(s.most(64) for s in sides) > 40
        np.testing.assert_allclose(auto.frobenius_sketch(A, B, be, 3), whole, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(auto.frobenius_sketch(A.toarray(), B, be, 3), whole,
                                   rtol=1e-12, atol=1e-9)
    monkeypatch.setattr(memory, "host_available", lambda: 1 << 20)
    with pytest.raises(memory.InsufficientMemoryError, match="buckets="):
        auto.frobenius_estimate(A.toarray(), B.toarray(), be, seed=3)


def test_jl_sketch_csr_is_scipys():
    """The GPU estimate's CSR of G (auto._csr, here on NumPy) is SciPy's: the same row
    pointers, keys in increasing order within each row and signs, and the keys packed with the
    sign in bit 31 (scatter_keys'); an empty row and a row of one key included."""
    be = pagh_mm.backend.cpu()
    for keys, log2r in ((1000, 6), (5, 3), (1, 1)):
        side = auto._JLSide(np.ones((keys, 3)), 1, auto._jl_params(keys), log2r, be)
        indptr, order, sgn, skey = auto._csr(side.row, side.sign, 1 << log2r, np)
        G = side.G
        assert np.array_equal(indptr, G.indptr) and np.array_equal(order, G.indices)
        assert np.array_equal(sgn, G.data.astype(np.float64))
        assert skey.dtype == np.uint32
        assert np.array_equal(skey & 0x7FFFFFFF, order) and np.array_equal(skey >> 31, sgn < 0)
    row = np.array([2, 0, 2, 2], dtype=np.int64)             # rows 1 and 3 empty
    indptr, order, sgn, _ = auto._csr(row, np.array([1, -1, -1, 1]), 4, np)
    assert indptr.tolist() == [0, 1, 1, 4, 4] and order.tolist() == [1, 0, 2, 3]
    assert sgn.tolist() == [-1.0, 1.0, -1.0, 1.0]


def test_auto_parameters_are_reported_and_certify():
    A, B = heavy_product(5)
    C = A @ B
    F = auto.frobenius_estimate(A, B, pagh_mm.backend.cpu(), seed=0)
    assert 0.5 < F / np.linalg.norm(C) < 1.5
    assert auto.frobenius_estimate(sps.csr_matrix(A), sps.csc_matrix(B), pagh_mm.backend.cpu(),
                                   seed=0) == pytest.approx(F, rel=1e-12)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    whole = auto.frobenius_estimate(A32, B32, pagh_mm.backend.cpu(), seed=0)
    with pytest.MonkeyPatch.context() as mp:        # dense factors converted in chunks
        mp.setattr(auto, "DENSE_CHUNK_BYTES", 8 * A.shape[0] * 3)
        assert auto.frobenius_estimate(A32, B32, pagh_mm.backend.cpu(), seed=0) == whole
    sk = pagh_mm.compress(A, B, k=4, seed=2)
    assert sk.chosen.reason.startswith("auto") and sk.buckets == sk.chosen.buckets
    assert "buckets=" in sk.describe() and sk.reps == 5      # (a small product keeps 5)
    assert "reps 5 (of 5, 7" in sk.chosen.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error", pagh_mm.CertificateWarning)
        top = sk.top_k(4, verify=True)
    assert top.certified and sorted(np.abs(top.exact)) == sorted(np.sort(np.abs(C).ravel())[-4:])
    plain = pagh_mm.compress(A, B, seed=2)              # no query stated: 8 (m + p)
    assert plain.buckets == auto.default_buckets(*C.shape)
    assert pagh_mm.compress(A, B, threshold=50.0, seed=2).chosen.cut == 50.0
    with pytest.raises(ValueError, match="not both"):
        pagh_mm.compress(A, B, k=3, threshold=1.0)
    with pytest.raises(TypeError, match="'auto'"):
        pagh_mm.compress(A, B, buckets="many")


def test_auto_reps_trade_repetitions_for_buckets_where_the_transforms_cost():
    """reps="auto" for a stated query through the transforms: the count of AUTO_REPS whose
    buckets cost the fewest additions, the scan counted (a top-300 of a 16384^2 product: 13
    repetitions of 2^15 buckets, not 9 of 2^16, 7 of 2^17 or 5 of 2^18); 5 where the scan
    decides (a short inner dimension), where buckets cost no compression (pairs), with bit
    sketches, for small products (AUTO_REPS_MIN_WORK), and whenever reps or buckets are
    given."""
    be = pagh_mm.backend.cpu()
    big = np.broadcast_to(np.float64(0), (16384, 16384))         # shapes only: F is given
    kw = dict(k=300, delta=1e-3, seed=0, frobenius=1e6)
    thin = np.broadcast_to(np.float64(0), (16384, 8))             # a short inner dimension:
    t = auto.choose(thin, thin.T, be, auto.AUTO, auto.AUTO, **kw)   # the scan's d m p decides
    assert t.reps == 5
    c = auto.choose(big, big, be, auto.AUTO, auto.AUTO, **kw)
    five = auto.choose(big, big, be, auto.AUTO, 5, **kw)
    assert (c.reps, c.buckets, five.reps, five.buckets) == (13, 1 << 15, 5, 1 << 18)
    assert [auto.choose(big, big, be, auto.AUTO, d, **kw).buckets for d in (7, 9, 11)] == \
        [1 << 17, 1 << 16, 1 << 16]
    assert "reps 13 (of 5, 7, 9, 11, 13" in c.reason
    assert "reps" not in five.reason.split("probability")[1]
    assert auto.choose(big, big, be, auto.AUTO, auto.AUTO, cheap=True, **kw).reps == 5
    assert auto.choose(big, big, be, auto.AUTO, auto.AUTO, decoding=True, **kw).reps == 5
    assert auto.choose(big, big, be, 1 << 16, auto.AUTO, **kw).reps == 5
    small = np.broadcast_to(np.float64(0), (1024, 64))            # little work: 5 stays
    assert auto.choose(small, small.T, be, auto.AUTO, auto.AUTO, **kw).reps == 5
    mid = np.broadcast_to(np.float64(0), (1024, 1024))            # 2.4e10 additions with 5
    assert auto.choose(mid, mid, be, auto.AUTO, auto.AUTO, **kw).reps == 13


def test_auto_buckets_take_the_noise_models_cushion_where_buckets_cost_time():
    """The cushion for the scanned medians' largest noise: certificate.noise_level(d, m p)
    where the transforms cost (a Gram screen of 2^20 x 4096: 9 x 8192; a threshold query);
    CHEAP_SPREAD (4.5) for pair-accumulated products and bit sketches."""
    be = pagh_mm.backend.cpu()
    kw = dict(delta=1e-3, seed=0, frobenius=1e6)
    XT = np.broadcast_to(np.float64(0), (4096, 1 << 20))
    g = auto.choose(XT, XT.T, be, auto.AUTO, auto.AUTO, k=100, diagonal=np.zeros(4096), **kw)
    assert (g.reps, g.buckets) == (9, 1 << 13)
    big = np.broadcast_to(np.float64(0), (16384, 16384))
    t = auto.choose(big, big, be, auto.AUTO, 7, threshold=1e4, **kw)
    lam = certificate.multiplier(7, 1e4, 1e-3)            # (F / threshold)^2 entries at risk
    want = ((lam + certificate.noise_level(7, 16384 ** 2)) * 1.15 * 1e6 / 1e4) ** 2
    assert t.buckets == 1 << math.ceil(math.log2(want))
    c = auto.choose(big, big, be, auto.AUTO, auto.AUTO, k=300, cheap=True, **kw)
    lam = certificate.multiplier(5, 600, 1e-3)
    want = ((lam + auto.CHEAP_SPREAD) * 1.15) ** 2 * 600 * auto.CHEAP_SLACK
    assert (c.reps, c.buckets) == (5, 1 << math.ceil(math.log2(want)))


def test_noise_level_is_where_one_median_of_pure_noise_lies():
    """certificate.noise_level: about ``expected`` of the medians exceed it (the Gaussian
    model of query.expected_noise_entries), falling with d, rising with the entries; 0 when
    there are no more entries than expected; bad arguments named."""
    from pagh_mm import query
    levels = [certificate.noise_level(d, 2 ** 28) for d in (5, 7, 9, 11, 13)]
    assert [round(x, 2) for x in levels] == [3.25, 2.78, 2.46, 2.23, 2.06]
    for d, x in zip((5, 7, 9, 11, 13), levels):
        assert query.expected_noise_entries(1.0, x, d, "abs", 2 ** 28) == \
            pytest.approx(1.0, rel=1e-6)
    assert certificate.noise_level(5, 2 ** 20) < certificate.noise_level(5, 2 ** 28) < \
        certificate.noise_level(5, 2.0 ** 62) < 40
    assert certificate.noise_level(9, 1) == 0.0
    assert certificate.noise_level(9, 100, expected=100) == 0.0
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="expected="):
            certificate.noise_level(5, 1e6, expected=bad)
    with pytest.raises(ValueError, match="entries="):
        certificate.noise_level(5, math.inf)


def test_scan_kernel_constants_match_its_source():
    """kernels.SCAN_REG (sizing the scan's shared memory) is estimate.cu's SCAN_REG, and the
    auto repetitions stay within it (the median in registers)."""
    import re
    from pagh_mm.cuda import kernels
    src = open(kernels.ESTIMATE.path).read()
    assert int(re.search(r"#define SCAN_REG (\d+)", src).group(1)) == kernels.SCAN_REG
    assert int(re.search(r"#define SCAN_STAGED (\d+)", src).group(1)) * 12 * kernels.SCAN_REG \
        == kernels.SCAN_STATIC_BYTES
    assert max(auto.AUTO_REPS) <= kernels.SCAN_REG
    assert all(d in kernels.MAXDS for d in auto.AUTO_REPS)


def test_auto_reps_certify_a_dense_product_on_the_cpu():
    """End to end on the CPU: a 1024^2 planted product, top-300 with automatic parameters
    takes 13 repetitions and certifies the planted entries."""
    from pagh_mm import synthetic
    d = synthetic.planted_product(1024, 300, seed=3)
    sk = pagh_mm.compress(d.A, d.B, k=300, seed=1)
    assert sk.reps == 13
    top = sk.top_k(300, verify=True)
    assert top.certified
    assert synthetic.recall(d.rows, d.cols, top.rows, top.cols) == 1.0


def test_an_auto_sketch_grows_when_a_verified_query_needs_it():
    """A heavy background makes ||AB||_F / sqrt(2k) overestimate the k-th value: the first
    size is too small, and the query rebuilds the sketch once with the buckets it names."""
    A, B = heavy_background_product()
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    first = sk.buckets
    top = sk.top_k(5, verify=True)
    assert top.certified and sk.buckets > first and "grown" in sk.chosen.reason
    assert (np.abs(top.exact) == 150.0).all()
    fixed = pagh_mm.compress(A, B, buckets=first, reps=5, seed=3)   # given buckets never grow
    with pytest.warns(pagh_mm.CertificateWarning):
        fixed.top_k(5, verify=True)
    assert fixed.buckets == first


def test_a_loaded_auto_sketch_tells_its_reason_and_never_regrows(tmp_path):
    """A sketch file keeps why buckets="auto" chose the size: describe() shows it after
    load; a certified query on the loaded sketch with factors attached later never rebuilds
    it (the file may hold a sum of sketches), and a given size saves no reason."""
    A, B = heavy_product(7)
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    assert sk.chosen.reason.startswith("auto: one-scan certificate")
    sk.save(tmp_path / "auto.npz")
    back = pagh_mm.CompressedProduct.load(tmp_path / "auto.npz")
    assert back.chosen.loaded and back.chosen.reason == sk.chosen.reason
    assert f"({sk.chosen.reason})" in back.describe() and back.describe() == sk.describe()
    back.attach(A, B)
    first = back.buckets
    run = lambda: ([], False, 0.0, 1.0, ("buckets", "more", 2 * back.buckets))  # noqa: E731
    assert not back._certified(run)[1] and back.buckets == first
    assert not sk._certified(run)[1] and sk.buckets > first         # in session it regrows
    fixed = pagh_mm.compress(A, B, buckets=first, reps=5, seed=3)
    fixed.save(tmp_path / "given.npz")
    assert pagh_mm.CompressedProduct.load(tmp_path / "given.npz").chosen is None


def test_an_auto_sketch_grows_again_while_its_searches_ask(monkeypatch):
    """A search on too small a sketch may name too few buckets: the query rebuilds it again
    (at most REGROWTHS times, only upwards, the original reason kept)."""
    A, B = heavy_product(7)
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    first = sk.buckets
    asked = []

    def run():                               # asks for 2x, then 4x, then certifies
        asked.append(sk.buckets)
        if len(asked) < 3:
            return [], False, 0.0, 1.0, ("buckets", "more", 2 * sk.buckets)
        return [], True, 0.0, 1.0, None

    assert sk._certified(run)[1]
    assert asked == [first, 2 * first, 4 * first] and sk.buckets == 4 * first
    assert sk.chosen.reason.startswith(f"auto: grown to {4 * first} buckets") and \
        sk.chosen.reason.count("grown") == 1
    asked.clear()
    monkeypatch.setattr(pagh_mm.compressed, "REGROWTHS", 1)
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    assert not sk._certified(run)[1] and asked == [first, 2 * first]
    asked.clear()
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    assert not sk._certified(lambda: ([], False, 0.0, 1.0, ("buckets", "", first)))[1]
    assert sk.buckets == first                  # never rebuilt at the size it has
    # a search asking for far more than it needs grows the sketch GROWTH times at most per
    # rebuild, and is asked again on the larger sketch
    monkeypatch.setattr(pagh_mm.compressed, "REGROWTHS", 3)
    sk = pagh_mm.compress(A, B, k=5, seed=3)
    g = pagh_mm.compressed.GROWTH

    def greedy():
        asked.append(sk.buckets)
        if len(asked) < 2:
            return [], False, 0.0, 1.0, ("buckets", "more", 1000 * g * sk.buckets)
        return [], True, 0.0, 1.0, None
    asked.clear()
    assert sk._certified(greedy)[1]
    assert asked == [first, g * first] and sk.buckets == g * first
    # an ask resting on a cut that clears its margin (advice[3]) is taken whole
    sk = pagh_mm.compress(A, B, k=5, seed=3)

    def sound():
        asked.append(sk.buckets)
        if len(asked) < 2:
            return [], False, 0.0, 1.0, ("buckets", "more", 4 * g * sk.buckets, True)
        return [], True, 0.0, 1.0, None
    asked.clear()
    assert sk._certified(sound)[1]
    assert asked == [first, 4 * g * first] and sk.buckets == 4 * g * first


def test_an_auto_sketch_grows_no_more_than_the_certificate_needs():
    """A noisy first sketch finds a k-th value far below the true one and asks for
    (true / found)^2 too many buckets (here 2^22 from 1024, where 2^16 certify); growing at
    most GROWTH times per rebuild, each sketch searched again, ends near the fewest buckets
    that certify."""
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((300, 40)), rng.standard_normal((40, 200))
    for r, c in ((5, 7), (100, 150), (250, 20)):
        A[r, :10] += 3.0
        B[:10, c] += 3.0
    sk = pagh_mm.compress(A, B, k=3, seed=1)
    top = sk.top_k(3, verify=True)
    assert top.certified and 1024 < sk.buckets <= 1 << 17, sk.buckets
    C = np.abs(A @ B)
    want = {divmod(int(i), C.shape[1]) for i in np.argsort(C.ravel())[-3:]}
    assert set(zip(top.rows.tolist(), top.cols.tolist())) == want


def _write(tmp_path):
    A, B = heavy_product(7)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    return A @ B


def test_cli_certified_top_threshold_and_per_row(tmp_path):
    C = _write(tmp_path)
    a, b = str(tmp_path / "A.npy"), str(tmp_path / "B.npy")
    r = CliRunner().invoke(pagh_main, ["top", a, b, "-k", 3, "--verify", "--output-format", "json"])
    assert r.exit_code == 0, r.output
    assert "certified: yes" in r.output and "sketch:" in r.output
    r = CliRunner().invoke(pagh_main, ["top", a, b, "--threshold", "100", "--verify", "-q",
                                       "--output-format", "json"])
    got = json.loads(r.output)
    assert r.exit_code == 0 and {(e["i"], e["j"]) for e in got} == \
        set(zip(*np.nonzero(np.abs(C) >= 100)))
    for ext in ("npz", "mtx", "csv"):
        out = tmp_path / f"rows.{ext}"
        r = CliRunner().invoke(pagh_main, ["top", a, b, "--per-row", 2, "--threshold", 20,
                                           "--verify", "-o", str(out), "-q"])
        assert r.exit_code == 0, r.output
        if ext == "csv":
            lines = out.read_text().splitlines()
            assert lines[0] == "i,j,estimate,exact" and len(lines) > 1
            assert all(float(x.split(",")[3]) == C[int(x.split(",")[0]), int(x.split(",")[1])]
                       for x in lines[1:])
        else:
            from fwht_gpu import matrixio
            M = matrixio.read_matrix(str(out))
            M = sps.csr_matrix(M)
            assert M.shape == C.shape and (M.toarray()[M.toarray() != 0] ==
                                           C[M.toarray() != 0]).all()
    r = CliRunner().invoke(pagh_main, ["top", a, b, "-k", 3, "-b", 64, "-d", 3, "--verify"])
    assert r.exit_code == 3 and "not certified" in r.output and "buckets=" in r.output
    r = CliRunner().invoke(pagh_main, ["top", a, b, "-k", 3, "--threshold", 5])
    assert r.exit_code == 2
    r = CliRunner().invoke(pagh_main, ["top", a, b, "--per-row", 2, "-o", str(tmp_path / "x.txt")])
    assert r.exit_code == 2


def test_advice_beyond_the_largest_sketch_says_the_entries_do_not_stand_out():
    """A cut so deep in the noise that no sketch of at most 2**MAX_LOG2B buckets would
    certify it: the advice says so (kind "noise", no bucket count), so an automatically
    sized sketch does not try to grow to an impossible size (it raised a ValueError from
    compress before)."""
    from types import SimpleNamespace
    from pagh_mm import certificate, query
    from pagh_mm.matmul import MAX_LOG2B
    cp = SimpleNamespace(buckets=1 << 20)
    target = SimpleNamespace(by="abs", k=3)
    kind, text, want = query._advice(cp, target, 1e-3, 1.0, 14.0, 100, 10, 3, 1)
    assert kind == "noise" and want is None
    assert f"2**{MAX_LOG2B}" in text and "do not stand out" in text
    assert f"buckets={16 << 20}" in text                  # or the sketch is too noisy
    kind, text, want, sound = query._advice(cp, target, 17.0, 1.0, 14.0, 100, 10, 3, 1)
    assert kind == "buckets" and want == certificate.buckets_for(1 << 20, 1.0, 17.0, 14.0)
    assert f"buckets={want}" in text and sound          # the cut clears its margin (14)
    # a cut inside its margin: the ask may rest on noise (an automatic sketch grows GROWTH
    # times at most); a threshold's ask is sound whatever the noise
    assert query._advice(cp, target, 12.0, 1.0, 14.0, 100, 10, 3, 1)[3] is False
    assert query._advice(cp, SimpleNamespace(by="abs", k=None), 12.0, 1.0, 14.0, 100, 10, 3,
                         1)[3] is True


def test_hash_range_slices_the_whole_tables_kept_on_the_product(monkeypatch):
    """The scans' hashes of a range of rows or columns are slices (C-contiguous) of the
    side's whole tables, the same values as hashing the range; kept per (side, parameters,
    buckets): after the buckets change they follow them; not pickled; computed per range
    above the cache's budget; a Gram product's columns are its rows."""
    import pickle
    from pagh_mm import compressed
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((40, 6)), rng.standard_normal((6, 33))

    def same(sk, which, k0, k1):
        h, s = sk._hash_range(which, k0, k1)
        hw, sw = sk._hashes(which, np.arange(k0, k1, dtype=np.int64))
        assert h.flags.c_contiguous and s.flags.c_contiguous
        assert h.tobytes() == hw.tobytes() and s.tobytes() == sw.tobytes()

    sk = pagh_mm.compress(A, B, buckets=256, reps=3, seed=4)
    for which, n in ((1, 40), (2, 33)):
        for k0, k1 in ((0, n), (3, 17), (n - 1, n), (5, 5)):
            same(sk, which, k0, k1)
    assert sorted(k[0] for k in sk._hash_cache) == [1, 2]    # both sides kept
    sk.log2b += 1                                        # as a certified query's rebuild does
    same(sk, 1, 2, 30)
    assert list(sk._hash_cache) == [(1, id(sk.params), sk.log2b)]
    assert pickle.loads(pickle.dumps(sk))._hash_cache == {}
    sk.log2b -= 1
    old = pickle.loads(pickle.dumps(sk))
    del old.__dict__["_hash_cache"]                      # pickled before the cache existed
    assert old.top_k(3).estimates.tobytes() == sk.top_k(3).estimates.tobytes()
    monkeypatch.setattr(compressed, "HASH_CACHE_BYTES", 0)
    sk._hash_cache.clear()
    same(sk, 2, 1, 20)
    assert sk._hash_cache == {}
    g = pagh_mm.compress_gram(rng.standard_normal((7, 25)), buckets=128, reps=3, seed=2)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(g._hash_range(2, 4, 9), g._hashes(1, np.arange(4, 9))))
