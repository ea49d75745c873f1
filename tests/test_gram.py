"""Gram products C = X.T @ X (pagh_mm.compress_gram): one 4-independent hash function on
both sides, the diagonal exact, off-diagonal estimates halved, blind repetitions left out.

Covers the polynomial hash family (and why a 4-independent family is needed), the sketch
against its definition, detection and validation, the statistics of the estimates against
the general path's, exact integer Gram matrices queried with certificates, blind pairs,
an empirical check of the certificates, sketch files, ``+``, the halved forward
transforms and the command line.  CPU only.
"""
from __future__ import annotations

import functools
import json
import warnings
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sps
from click.testing import CliRunner

import fwht_gpu
import pagh_mm
from pagh_mm import hashing, query, sketchfile
from pagh_mm.cli import main as pagh_main
from pagh_mm.compressed import CompressedProduct

from tests.test_certificate import DELTA, allowed_wrong

P61 = hashing.P61


def poly_mod(coef, x: int) -> int:
    """sum_k coef[k] x^k mod 2^61 - 1 with Python integers (coef[k]: the power-k term)."""
    return sum(int(c) * pow(int(x), k, P61) for k, c in enumerate(coef)) % P61


def offdiag_mask(m):
    return ~np.eye(m, dtype=bool)


def int_gram_matrix(seed, n=60, m=40, density=0.3):
    rng = np.random.default_rng(seed)
    return (rng.integers(-3, 4, (n, m)) * (rng.random((n, m)) < density)).astype(np.int64)


def quiet(fn):
    """fn() with CertificateWarnings recorded: (result, number of CertificateWarnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, sum(issubclass(w.category, pagh_mm.CertificateWarning) for w in caught)


# --- 1. the polynomial family ------------------------------------------------------------

def test_mulmod61_matches_python_integers():
    rng = np.random.default_rng(11)
    x = rng.integers(0, P61, 5000, dtype=np.uint64)
    y = rng.integers(0, P61, 5000, dtype=np.uint64)
    edge = [0, 1, 2, P61 - 1, P61 - 2, (1 << 32) - 1, 1 << 32, (1 << 60) + 7, (1 << 61) - 3,
            (1 << 31) - 1, 12345678901234567]
    ex = np.array([a for a in edge for _ in edge], np.uint64)
    ey = np.array([b for _ in edge for b in edge], np.uint64)
    x, y = np.concatenate([x, ex]), np.concatenate([y, ey])
    got = hashing._mulmod61(x, y, np)
    assert got.dtype == np.uint64
    want = [(int(a) * int(b)) % P61 for a, b in zip(x.tolist(), y.tolist())]
    assert got.tolist() == want
    assert int(hashing._mulmod61(np.uint64(P61 - 1), np.uint64(P61 - 1), np)) == 1  # (-1)^2


def test_polynomial_buckets_and_signs_match_python_evaluation():
    params = hashing.HashParams.draw("polynomial", 2024, 3)
    assert params.coefficients.shape == (3, 4, 4)
    assert (params.coefficients < np.uint64(P61)).all()
    rng = np.random.default_rng(5)
    keys = np.concatenate([np.arange(50), rng.integers(0, 1 << 32, 200),
                           [(1 << 31) - 1, (1 << 32) - 1]]).astype(np.int64)
    for log2b in (1, 7, 12, 20, 32):
        h = hashing.bucket_table(params, 1, keys, log2b)
        for t in range(params.reps):
            want = [poly_mod(params.coefficients[t, 0], x) >> (61 - log2b) for x in keys.tolist()]
            assert h[t].tolist() == want, (log2b, t)
    s = hashing.sign_table(params, 1, keys)
    for t in range(params.reps):         # s1: role 2, the top bit of the 61-bit value
        want = [1 - 2 * (poly_mod(params.coefficients[t, 2], x) >> 60) for x in keys.tolist()]
        assert s[t].tolist() == want


def test_polynomial_hashing_is_identical_for_key_dtypes():
    params = hashing.HashParams.draw("polynomial", 9, 4)
    keys = np.concatenate([np.arange(1000), [(1 << 31) - 1, 1 << 20]])
    ref_h = hashing.bucket_table(params, 1, keys.astype(np.int64), 13)
    ref_s = hashing.sign_table(params, 1, keys.astype(np.int64))
    for dt in (np.int32, np.uint64, np.uint32):
        assert np.array_equal(hashing.bucket_table(params, 1, keys.astype(dt), 13), ref_h), dt
        assert np.array_equal(hashing.sign_table(params, 1, keys.astype(dt)), ref_s), dt
    assert ref_h.dtype == np.int64 and ref_h.min() >= 0 and ref_h.max() < 1 << 13


# --- 2. why: bands of pairs under one hash function --------------------------------------

def band_crowding(family, m=1 << 14, log2b=12, seed=1, t=0):
    """sum_beta (sum of s_i s_j over band pairs (i, i + 1) in bucket h(i) ^ h(i + 1) = beta)^2
    / pairs, over the pairs not in bucket 0: about 1 when the pairs' buckets and signs are
    independent, far above when they crowd into few buckets."""
    params = hashing.HashParams.draw(family, seed, t + 1)
    keys = np.arange(m)
    h = hashing.bucket_table(params, 1, keys, log2b)[t]
    s = hashing.sign_table(params, 1, keys)[t]
    i = np.arange(m - 1)
    beta, w = h[i] ^ h[i + 1], s[i] * s[i + 1]
    keep = beta != 0
    tot = np.bincount(beta[keep], weights=w[keep], minlength=1 << log2b)
    return float((tot ** 2).sum() / keep.sum())


def test_one_polynomial_hash_spreads_a_band_and_multiply_add_shift_does_not():
    for seed in range(3):
        assert band_crowding("polynomial", seed=seed) < 1.3
        assert band_crowding("multiply-add-shift", seed=seed) > 5


# --- 3. the sketch, detection and validation ---------------------------------------------

def gram_sketch_by_definition(sk, C):
    """c_t[beta] = sum over ordered (i, j) with h(i) ^ h(j) = beta of s(i) s(j) C[i, j]."""
    m = C.shape[0]
    h, s = sk._hashes(1, np.arange(m))
    out = np.zeros((sk.reps, sk.buckets))
    for t in range(sk.reps):
        beta = h[t][:, None] ^ h[t][None, :]
        w = s[t][:, None] * s[t][None, :] * C
        out[t] = np.bincount(beta.ravel(), weights=w.ravel(), minlength=sk.buckets)
    return out


def test_gram_sketch_equals_its_definition():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 12))
    C = X.T @ X
    sk = pagh_mm.compress_gram(X, buckets=16, reps=3, seed=4)
    assert sk.gram and sk.shape == (12, 12) and sk.sketch.shape == (3, 16)
    want = gram_sketch_by_definition(sk, C)
    assert np.allclose(sk.sketch, want, rtol=1e-12, atol=1e-12 * np.abs(C).sum())
    assert np.allclose(sk.diagonal, np.diag(C), rtol=1e-14)
    # both sides use h1/s1 (role 0 / 2): asking for "column" hashes gives the same
    h1, s1 = sk._hashes(1, np.arange(12))
    h2, s2 = sk._hashes(2, np.arange(12))
    assert np.array_equal(h1, h2) and np.array_equal(s1, s2)


def test_per_repetition_estimates_and_median_follow_the_definition():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((25, 10))
    C = X.T @ X
    sk = pagh_mm.compress_gram(X, buckets=4, reps=4, seed=2)      # small b: blind repetitions
    m = 10
    I, J = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    v = sk.estimate_reps(I, J)
    h, s = sk._hashes(1, np.arange(m))
    for t in range(sk.reps):
        beta = h[t][:, None] ^ h[t][None, :]
        want = s[t][:, None] * s[t][None, :] * sk.sketch[t][beta] / 2
        blind = beta == 0
        assert np.isnan(v[t][blind]).all() and not np.isnan(v[t][~blind]).any()
        assert np.array_equal(v[t][~blind], want[~blind])
    assert np.isnan(v[:, np.arange(m), np.arange(m)]).all()      # the diagonal: every rep blind
    est = sk.estimate(I, J)
    n_blind = 0
    for i in range(m):
        for j in range(m):
            if i == j:
                assert est[i, j] == C[i, i] or np.isclose(est[i, j], C[i, i], rtol=1e-14)
                continue
            vals = np.sort(v[:, i, j][~np.isnan(v[:, i, j])])
            c = vals.size
            n_blind += sk.reps - c
            want = 0.0 if c == 0 else (vals[(c - 1) // 2] + vals[c // 2]) / 2
            assert est[i, j] == want, (i, j, vals)
    assert n_blind > 0                                             # the case was exercised
    assert np.array_equal(est, est.T)


def test_gram_detection():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 15)) * (rng.random((40, 15)) < 0.4)
    kw = dict(buckets=64, reps=3, seed=0)
    assert pagh_mm.compress(X.T, X, **kw).gram
    Xs = sps.csr_matrix(X)
    assert pagh_mm.compress(Xs.T, Xs, **kw).gram
    assert not pagh_mm.compress(X.T.copy(), X, **kw).gram
    assert not pagh_mm.compress(X.T, X, gram=False, **kw).gram
    assert not pagh_mm.compress(X.T, X, hash="tabulation", **kw).gram
    assert not pagh_mm.compress(X.T, X, hash="multiply-add-shift", **kw).gram
    assert not pagh_mm.compress(X.T, X, method="fft", **kw).gram
    assert pagh_mm.compress(X.T, X, hash="polynomial", **kw).gram
    Y = X[:, :14]
    assert not pagh_mm.compress(Y.T, X[:, 1:], **kw).gram         # other memory
    g = pagh_mm.compress_gram(X, **kw)
    assert g.gram and g.params.family == "polynomial"
    assert pagh_mm.compress(X.T, X, **kw).params.family == "polynomial"
    assert pagh_mm.compress(X.T.copy(), X, **kw).params.family == hashing.DEFAULT_FAMILY
    assert "Gram" in g.describe()
    # gram=True also accepts an equal transpose that is not a view
    assert pagh_mm.compress(X.T.copy(), X, gram=True, **kw).gram
    assert np.array_equal(pagh_mm.compress(X.T.copy(), X, gram=True, **kw).sketch, g.sketch)


def test_gram_validation_errors():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((20, 8))
    kw = dict(buckets=32, reps=3, seed=0)
    Y = X.copy()
    Y[3, 4] += 1.0
    with pytest.raises(ValueError, match="A differs from B.T"):
        pagh_mm.compress(Y.T, X, gram=True, **kw)
    with pytest.raises(ValueError, match="A differs from B.T"):
        pagh_mm.compress(sps.csr_matrix(Y).T, sps.csr_matrix(X), gram=True, **kw)
    with pytest.raises(ValueError, match=r"needs A = B.T; got shapes"):
        pagh_mm.compress(rng.standard_normal((8, 20)), rng.standard_normal((20, 6)), gram=True,
                         **kw)
    for family in ("multiply-add-shift", "tabulation"):
        with pytest.raises(ValueError, match="4-independent"):
            pagh_mm.compress(X.T, X, gram=True, hash=family, **kw)
        with pytest.raises(ValueError, match="4-independent"):
            pagh_mm.compress_gram(X, hash=family, **kw)
    with pytest.raises(ValueError, match="method='fwht'"):
        pagh_mm.compress(X.T, X, gram=True, method="fft", **kw)
    with pytest.raises(ValueError, match="method='fwht'"):
        pagh_mm.compress_gram(X, method="fft", **kw)
    with pytest.raises(TypeError, match="gram="):
        pagh_mm.compress(X.T, X, gram="yes", **kw)
    with pytest.raises(ValueError, match="2-d"):
        pagh_mm.compress_gram(np.arange(5.0))


def test_sparse_and_dense_gram_sketches_are_identical():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((50, 30)) * (rng.random((50, 30)) < 0.3)
    X[7] = 0.0                                   # an empty row (inner index): skipped
    dense = pagh_mm.compress_gram(X, buckets=128, reps=5, seed=12)
    for M in (sps.csr_matrix(X), sps.csc_matrix(X), sps.coo_matrix(X)):
        sp = pagh_mm.compress_gram(M, buckets=128, reps=5, seed=12)
        assert sp.gram
        assert np.array_equal(sp.sketch, dense.sketch), M.format
        assert np.array_equal(sp.diagonal, dense.diagonal)
    Xs = sps.csr_matrix(X)
    auto = pagh_mm.compress(Xs.T, Xs, buckets=128, reps=5, seed=12)
    assert auto.gram and np.array_equal(auto.sketch, dense.sketch)


# --- 4. statistics against the general path ----------------------------------------------

@functools.cache
def estimate_samples(gram: bool, seeds=300, b=64, reps=5):
    """Per-repetition estimates of every off-diagonal entry of a fixed 12 x 12 product over
    ``seeds`` hash seeds: (C, samples (seeds * reps, pairs) with NaN for blind ones, I, J)."""
    rng = np.random.default_rng(77)
    Z = rng.standard_normal((40, 12))
    X = Z.copy()
    X[:, 1:] += 0.8 * Z[:, :-1]                  # banded covariance
    X[:, 7] += 1.5 * Z[:, 2]
    C = X.T @ X
    I, J = np.nonzero(offdiag_mask(12))
    out = []
    for seed in range(seeds):
        if gram:
            sk = pagh_mm.compress_gram(X, buckets=b, reps=reps, seed=seed)
        else:
            sk = pagh_mm.compress(X.T, X, gram=False, hash="polynomial", buckets=b, reps=reps,
                                  seed=seed)
        assert sk.gram == gram
        out.append(sk.estimate_reps(I, J))
    return C, np.concatenate(out), I, J


def test_gram_estimates_are_unbiased():
    C, v, I, J = estimate_samples(True)
    ok = ~np.isnan(v)
    frac_blind = 1 - ok.mean()
    assert 0.3 / 64 < frac_blind < 3 / 64                    # about 1/b of the repetitions
    n = ok.sum(axis=0)
    mean = np.nanmean(v, axis=0)
    se = np.nanstd(v, axis=0, ddof=1) / np.sqrt(n)
    z = (mean - C[I, J]) / se
    assert np.abs(z).max() < 5, np.abs(z).max()
    # mirrored entries share their estimates exactly
    full = np.full((v.shape[0], 12, 12), np.nan)
    full[:, I, J] = v
    assert np.array_equal(full, full.transpose(0, 2, 1), equal_nan=True)


def test_gram_variance_is_the_bound_and_smaller_than_the_general_paths():
    b = 64
    C, v, I, J = estimate_samples(True)
    off2 = float((C[offdiag_mask(12)] ** 2).sum())
    diag2 = float((np.diag(C) ** 2).sum())
    err = v - C[I, J]
    mse_gram = np.nanmean(err ** 2, axis=0)                  # per entry
    bound = off2 / (2 * b)
    assert mse_gram.mean() <= 1.3 * bound, (mse_gram.mean(), bound)
    assert mse_gram.max() <= 1.5 * bound, (mse_gram.max(), bound)     # each entry (sampled)
    # per entry the prediction is (||C - diag||^2 / 2 - C[i, j]^2) / b
    pred = (off2 / 2 - C[I, J] ** 2) / b
    assert np.allclose(mse_gram.mean(), pred.mean(), rtol=0.15), (mse_gram.mean(), pred.mean())
    _, vg, _, _ = estimate_samples(False)
    mse_gen = np.mean((vg - C[I, J]) ** 2, axis=0)
    assert np.allclose(mse_gen.mean(), (off2 + diag2) / b, rtol=0.2)
    ratio = mse_gen.mean() / mse_gram.mean()
    predicted = 2 * (1 + diag2 / off2)
    assert abs(ratio / predicted - 1) < 0.3, (ratio, predicted)
    assert ratio > 2


# --- 5. exact integer Gram matrices ------------------------------------------------------

@pytest.fixture(scope="module")
def int_gram():
    X = int_gram_matrix(21)
    C = X.T @ X
    sk = pagh_mm.compress_gram(X, buckets=1 << 14, reps=5, seed=3)
    return X, C, sk


def keys_multiset(values):
    return sorted(np.abs(np.asarray(values)).tolist())


def test_top_k_exclude_diagonal_is_exact(int_gram):
    X, C, sk = int_gram
    m = C.shape[0]
    off = np.abs(C[offdiag_mask(m)])
    for k in (1, 5, 12, 31):
        (e, warned) = quiet(lambda: sk.top_k(k, verify=True, exclude_diagonal=True))
        assert e.certified and warned == 0
        rows, cols = np.asarray(e.rows), np.asarray(e.cols)
        assert rows.size == k and (rows != cols).all()
        assert len(set(zip(rows.tolist(), cols.tolist()))) == k
        assert np.array_equal(e.exact, C[rows, cols])
        assert keys_multiset(e.exact) == sorted(np.sort(off)[-k:].tolist())
        assert np.all(np.diff(np.abs(e.exact)) <= 0)                   # largest first


def test_above_exclude_diagonal_is_the_exact_set(int_gram):
    X, C, sk = int_gram
    m = C.shape[0]
    off = offdiag_mask(m)
    for t in (4.5, 8.5, 12.5):
        e, warned = quiet(lambda: sk.above(t, verify=True, exclude_diagonal=True))
        assert e.certified and warned == 0
        got = set(zip(np.asarray(e.rows).tolist(), np.asarray(e.cols).tolist()))
        want = set(zip(*[a.tolist() for a in np.nonzero((np.abs(C) >= t) & off)]))
        assert got == want and len(want) > 0
        assert all((j, i) in got for i, j in got)                     # both orientations
        assert np.array_equal(e.exact, C[np.asarray(e.rows), np.asarray(e.cols)])
    # with the diagonal: the diagonal entries >= t join
    e = sk.above(8.5, verify=True)
    got = set(zip(np.asarray(e.rows).tolist(), np.asarray(e.cols).tolist()))
    want = set(zip(*[a.tolist() for a in np.nonzero(np.abs(C) >= 8.5)]))
    assert e.certified and got == want and any(i == j for i, j in got)


def test_top_k_with_the_diagonal_reports_the_largest_entries(int_gram):
    X, C, sk = int_gram
    m = C.shape[0]
    assert np.sort(np.abs(np.diag(C)))[-5] > np.abs(C[offdiag_mask(m)]).max()  # the premise
    e = sk.top_k(5, verify=True)
    rows, cols = np.asarray(e.rows), np.asarray(e.cols)
    assert e.certified and (rows == cols).all()
    assert keys_multiset(e.exact) == sorted(np.sort(np.abs(np.diag(C)))[-5:].tolist())
    assert np.array_equal(e.estimates, np.diag(C)[rows])                   # exact diagonal
    k = 60
    e = sk.top_k(k, verify=True)
    assert e.certified
    assert keys_multiset(e.exact) == sorted(np.sort(np.abs(C).ravel())[-k:].tolist())
    # unverified top_k: the diagonal too
    e = sk.top_k(5)
    assert (np.asarray(e.rows) == np.asarray(e.cols)).all()
    e = sk.top_k(5, exclude_diagonal=True)
    assert (np.asarray(e.rows) != np.asarray(e.cols)).all()


def test_top_k_per_row_exclude_diagonal_is_exact(int_gram):
    X, C, sk = int_gram
    m = C.shape[0]
    n, thr = 3, 5.5
    e, warned = quiet(lambda: sk.top_k_per_row(n, verify=True, threshold=thr,
                                               exclude_diagonal=True, format="entries"))
    assert e.certified and warned == 0
    rows, cols, ex = np.asarray(e.rows), np.asarray(e.cols), np.asarray(e.exact)
    assert (rows != cols).all() and np.array_equal(ex, C[rows, cols])
    for i in range(m):
        keys = np.abs(np.delete(C[i], i))
        want = sorted(np.sort(keys[keys >= thr])[-n:].tolist())
        assert keys_multiset(ex[rows == i]) == want, i
    # the CSR form holds the same exact values
    M = sk.top_k_per_row(n, verify=True, threshold=thr, exclude_diagonal=True)
    assert M.nnz == rows.size and np.array_equal(M.toarray()[rows, cols], ex)


def test_dense_estimate_diagonal_and_symmetry(int_gram):
    X, C, sk = int_gram
    D = sk.to_dense()
    assert np.array_equal(np.diag(D), sk.diagonal)
    assert np.array_equal(sk.diagonal, np.diag(C).astype(float))
    assert np.array_equal(D, D.T)
    # 2^14 buckets for 780 pairs: nearly every median is exact (a pair hit in 3 of 5
    # repetitions is possible: seed 3 has one)
    assert np.mean(np.abs(D - C) < 1e-6) > 0.99
    m = C.shape[0]
    assert np.array_equal(sk.estimate(np.arange(m), np.arange(m)), np.diag(C))


# --- 6. blind pairs ----------------------------------------------------------------------

def brute_blind_pairs(sk):
    m = sk.shape[0]
    h, _ = sk._hashes(1, np.arange(m))
    same = np.all(h[:, :, None] == h[:, None, :], axis=0) & offdiag_mask(m)
    i, j = np.nonzero(same)
    return np.sort(i * m + j)


def test_blind_pairs_match_brute_force():
    rng = np.random.default_rng(4)
    X = rng.integers(-2, 3, (30, 40)).astype(float)
    total = 0
    for seed in range(5):
        sk = pagh_mm.compress_gram(X, buckets=4, reps=3, seed=seed)
        got = np.asarray(query.blind_pairs(sk))
        want = brute_blind_pairs(sk)
        assert np.array_equal(got, want), seed
        total += want.size
        # every repetition is blind to them: NaN estimates throughout, estimate 0.0
        if want.size:
            v = sk.estimate_reps(want // 40, want % 40)
            assert np.isnan(v).all()
            assert (sk.estimate(want // 40, want % 40) == 0).all()
    assert total > 0
    general = pagh_mm.compress(X.T, X, gram=False, buckets=4, reps=3, seed=0)
    assert query.blind_pairs(general).size == 0


def first_blind_seed(m, log2b, reps):
    """The smallest hash seed whose polynomial functions put some pair (i, j) of [m] in one
    bucket in every repetition, and that pair."""
    for seed in range(100000):
        params = hashing.HashParams.draw("polynomial", seed, reps)
        h = hashing.bucket_table(params, 1, np.arange(m), log2b)
        same = np.all(h[:, :, None] == h[:, None, :], axis=0) & offdiag_mask(m)
        if same.any():
            i, j = np.argwhere(same)[0]
            return seed, int(i), int(j)
    raise AssertionError("no seed with a blind pair")


def test_the_largest_entry_on_a_blind_pair_is_found():
    """A pair every repetition is blind to has estimate 0 and is never scanned: certified
    queries verify it anyway (query.blind_pairs), so a large entry there is not missed."""
    m = 40
    seed, i, j = first_blind_seed(m, 6, 3)
    rng = np.random.default_rng(0)
    X = (rng.integers(-1, 2, (31, m)) * (rng.random((31, m)) < 0.3)).astype(float)
    X[30] = 0.0
    X[30, i], X[30, j] = 7.0, -7.0                 # C[i, j] = -49 + background
    C = X.T @ X
    off = np.abs(C[offdiag_mask(m)])
    assert np.sort(off)[-2] == abs(C[i, j]) > np.sort(off)[-3] + 10
    sk = pagh_mm.compress_gram(X, buckets=64, reps=3, seed=seed)
    assert np.isnan(sk.estimate_reps(i, j)).all() and sk.estimate(i, j) == 0.0
    assert np.isin([i * m + j, j * m + i], np.asarray(query.blind_pairs(sk))).all()
    e, warned = quiet(lambda: sk.top_k(2, verify=True, exclude_diagonal=True, candidates=100,
                                       failure_probability=DELTA))
    assert e.certified and warned == 0
    assert set(zip(np.asarray(e.rows).tolist(), np.asarray(e.cols).tolist())) == {(i, j), (j, i)}
    assert np.array_equal(e.exact, [C[i, j]] * 2)
    assert (np.asarray(e.estimates) == 0).all()    # found by verification, not by its estimate


def test_peeling_both_orientations_removes_an_entry_from_the_gram_sketch():
    rng = np.random.default_rng(14)
    X = rng.integers(-2, 3, (25, 16)).astype(float)
    C = X.T @ X
    m = 16
    sk = pagh_mm.compress_gram(X, buckets=32, reps=3, seed=5)
    pairs = [(2, 9), (9, 2), (4, 5), (5, 4), (7, 7)]
    ids = np.array(sorted(i * m + j for i, j in pairs), dtype=np.int64)
    residual = query.peel(sk, sk.sketch.copy(), ids, C[ids // m, ids % m].astype(float))
    R = C.astype(float).copy()
    R[ids // m, ids % m] = 0.0
    assert np.allclose(residual, gram_sketch_by_definition(sk, R), rtol=1e-12, atol=1e-9)


def test_miss_probability_with_blind_repetitions():
    from pagh_mm import certificate
    import itertools
    for d in (1, 2, 3, 4, 5):
        for q in (0.01, 0.1, 0.3):
            assert certificate.miss_probability(d, q) == certificate.binomial_tail(
                d, certificate.median_votes(d), q)
            for blind in (1 / 4, 1 / 64):
                # each repetition: blind, low or fine; missed when some repetition sees the
                # entry and at least ceil(seen / 2) of those are low
                want = 0.0
                for states in itertools.product("blf", repeat=d):
                    seen = d - states.count("b")
                    low = states.count("l")
                    if seen and low >= certificate.median_votes(seen):
                        want += (blind ** (d - seen) * ((1 - blind) * q) ** low
                                 * ((1 - blind) * (1 - q)) ** (seen - low))
                got = certificate.miss_probability(d, q, blind)
                assert np.isclose(got, want, rtol=1e-12, atol=0), (d, q, blind)
    for d in (3, 5):
        lam0 = certificate.multiplier(d, 100, 0.05)
        lam = certificate.multiplier(d, 100, 0.05, 1 / 16)
        assert lam > lam0            # fewer repetitions seen: a wider margin
        q = 1 / (1 + lam ** 2)
        assert np.isclose(certificate.miss_probability(d, q, 1 / 16), 0.05 / 100, rtol=1e-6)


def test_certified_queries_at_tiny_buckets_are_right_or_warn():
    certified = warned_total = 0
    for seed in range(12):
        X = int_gram_matrix(100 + seed, n=30, m=40, density=0.3)
        C = X.T @ X
        m = C.shape[0]
        off = offdiag_mask(m)
        sk = pagh_mm.compress_gram(X, buckets=4, reps=3, seed=seed)
        blind = np.asarray(query.blind_pairs(sk))
        for cand in (200, None):
            e, warned = quiet(lambda: sk.top_k(6, verify=True, exclude_diagonal=True,
                                               candidates=cand, failure_probability=DELTA))
            assert warned == (0 if e.certified else 1)
            if e.certified:
                certified += 1
                assert keys_multiset(e.exact) == sorted(np.sort(np.abs(C[off]))[-6:].tolist())
            else:
                warned_total += 1
            assert e.verified >= blind.size            # blind pairs are always verified
            e, warned = quiet(lambda: sk.above(9.5, verify=True, exclude_diagonal=True,
                                               candidates=cand, failure_probability=DELTA))
            assert warned == (0 if e.certified else 1)
            if e.certified:
                certified += 1
                got = set(zip(np.asarray(e.rows).tolist(), np.asarray(e.cols).tolist()))
                assert got == set(zip(*[a.tolist() for a in np.nonzero((np.abs(C) >= 9.5) & off)]))
            else:
                warned_total += 1
    assert certified > 0 and warned_total > 0, (certified, warned_total)


# --- 7. empirical certificate check ------------------------------------------------------
# In the spirit of tests/test_certificate.py (its DELTA = 0.05 and binomial allowance):
# over many seeds of the hash functions (and of the matrices), certified answers of Gram
# sketches are wrong no more often than the allowance, uncertified ones always warn, and
# most runs certify at adequate buckets.  Answers are compared with the dense X.T @ X by
# keys (|C|), since ties make positions ambiguous.

def banded_gaussian(rng):
    """Float: covariance-like Gram of a Gaussian X (n = 160 samples, 48 columns) whose
    neighbouring columns correlate (|C| about 64 on the band, up to about 105) and 6
    strongly correlated column pairs (|C| about 150 to 190)."""
    n, m = 160, 48
    Z = rng.standard_normal((n, m))
    X = Z.copy()
    X[:, 1:] += 0.4 * Z[:, :-1]
    cols = rng.choice(m, 12, replace=False)
    for a, c in zip(cols[:6], cols[6:]):
        X[:, c] = rng.choice([-1, 1]) * X[:, a] + 0.3 * rng.standard_normal(n)
    return X


def cooccurrence(rng):
    """Integer: co-occurrence counts of a sparse 0/1 X (n = 300 baskets, 96 items, 4%
    density; SciPy CSR) with 5 item pairs bought together in 40 extra baskets each."""
    n, m = 300, 96
    X = (rng.random((n, m)) < 0.04).astype(np.float64)
    items = rng.choice(m, 10, replace=False)
    for a, c in zip(items[:5], items[5:]):
        rows = rng.choice(n, 40, replace=False)
        X[rows, a] = X[rows, c] = 1.0
    return sps.csr_matrix(X)


def gram_ties(rng):
    """Integer, many exact ties: a background of small integers (|C| mostly <= 6) plus two
    groups of clean columns (no background) sharing one sample each, with values +-4 and
    +-3: 20 off-diagonal entries of exactly |C| = 16 and 12 of exactly |C| = 9."""
    n, m = 40, 64
    X = (rng.integers(-1, 2, (n, m)) * (rng.random((n, m)) < 0.25)).astype(np.int64)
    g = rng.choice(m, 9, replace=False)
    X[:, g] = 0                                               # clean columns: exact ties
    X[0, g[:5]] = 4 * rng.choice([-1, 1], 5)
    X[1, g[5:]] = 3 * rng.choice([-1, 1], 4)
    return X


class GramFamily(NamedTuple):
    make: object              # rng -> X
    k: int                    # top_k(k), lowered to the number of entries >= threshold
    threshold: float          # above(threshold), in a gap of the off-diagonal keys
    buckets: int              # "main": most runs certify, both queries


GRAM_FAMILIES = {
    "banded_gaussian": GramFamily(banded_gaussian, 10, 110.0, 2048),
    "cooccurrence": GramFamily(cooccurrence, 8, 25.5, 1024),
    "ties": GramFamily(gram_ties, 12, 12.5, 2048),
}
#: (seeds, buckets of each family or None for its main ones) per regime: "main" (most runs
#: certify), "edge" (top_k certifies in some runs, not all: the margin is tight) and
#: "small" (64 buckets: hardly any run certifies, and the answers are often wrong).
GRAM_REGIMES = {"main": (70, None), "edge": (60, {"cooccurrence": 128}), "small": (20, 64)}


def gram_problem(name, seed):
    f = GRAM_FAMILIES[name]
    X = f.make(np.random.default_rng(1000 + seed))
    Xd = X.toarray() if sps.issparse(X) else np.asarray(X, dtype=np.float64)
    C = Xd.T @ Xd
    key = np.where(offdiag_mask(C.shape[0]), np.abs(C), -np.inf)
    k = max(1, min(f.k, int((key >= f.threshold).sum())))
    return X, C, key, k


def gram_run(name, seed, buckets):
    """One seed: {query: (certified, number of CertificateWarnings, wrong)}."""
    thr = GRAM_FAMILIES[name].threshold
    X, C, key, k = gram_problem(name, seed)
    tol = 1e-9 * max(1.0, float(np.abs(C).max()))
    assert not (np.abs(key - thr) <= 1e-6 * thr).any(), "threshold not in a gap of the keys"
    sk = pagh_mm.compress_gram(X, buckets=buckets, reps=5, seed=seed)
    assert sk.gram
    # at most a quarter of the entries verified: never certified by verifying everything
    cand = max(k, C.size // 4)
    rec = {}
    e, warned = quiet(lambda: sk.top_k(k, verify=True, exclude_diagonal=True, candidates=cand,
                                       failure_probability=DELTA))
    rows, cols = np.asarray(e.rows), np.asarray(e.cols)
    assert np.allclose(e.exact, C[rows, cols], rtol=0, atol=tol), "exact values differ from C"
    assert (rows != cols).all() and e.failure_probability == DELTA
    wrong = rows.size != k or not np.allclose(np.sort(np.abs(e.exact)),
                                              np.sort(key.ravel())[-k:], rtol=0, atol=tol)
    rec["top_k"] = (bool(e.certified), warned, wrong)
    e, warned = quiet(lambda: sk.above(thr, verify=True, exclude_diagonal=True, candidates=cand,
                                       failure_probability=DELTA))
    rows, cols = np.asarray(e.rows), np.asarray(e.cols)
    assert np.allclose(e.exact, C[rows, cols], rtol=0, atol=tol), "exact values differ from C"
    wrong = set(zip(rows.tolist(), cols.tolist())) != \
        set(zip(*[a.tolist() for a in np.nonzero(key >= thr)]))
    rec["above"] = (bool(e.certified), warned, wrong)
    return rec


def gram_runs(name, regime="main"):
    """Every seed's records of a family in a regime (cached: the tests share them)."""
    return _gram_runs(name, regime)


@functools.cache
def _gram_runs(name, regime):
    seeds, buckets = GRAM_REGIMES[regime]
    if isinstance(buckets, dict):
        if name not in buckets:
            return []
        buckets = buckets[name]
    return [gram_run(name, seed, buckets or GRAM_FAMILIES[name].buckets)
            for seed in range(seeds)]


def gram_tally(recs):
    n_cert = sum(c for c, _, _ in recs)
    return n_cert, sum(c and w for c, _, w in recs)


@pytest.mark.parametrize("name", sorted(GRAM_FAMILIES))
def test_gram_certificates_at_adequate_buckets(name):
    for q in ("top_k", "above"):
        recs = [r[q] for r in gram_runs(name)]
        n_cert, wrong = gram_tally(recs)
        assert n_cert >= 0.8 * len(recs), (name, q, n_cert, len(recs))
        assert wrong <= allowed_wrong(n_cert), (name, q, wrong, n_cert)


def test_gram_certificates_at_tight_margins():
    recs = [r["top_k"] for r in gram_runs("cooccurrence", "edge")]
    n_cert, wrong = gram_tally(recs)
    assert 0.05 * len(recs) <= n_cert <= 0.95 * len(recs), n_cert
    assert wrong <= allowed_wrong(n_cert), (wrong, n_cert)


def test_gram_certificates_at_small_buckets_fail_instead_of_being_wrong():
    recs = [r[q] for name in GRAM_FAMILIES for r in gram_runs(name, "small")
            for q in ("top_k", "above")]
    n_cert, wrong = gram_tally(recs)
    assert n_cert <= 0.5 * len(recs)
    assert wrong <= allowed_wrong(n_cert), (wrong, n_cert)
    assert sum(w for _, _, w in recs) > 0            # the regime does produce wrong answers


@pytest.mark.parametrize("regime", sorted(GRAM_REGIMES))
def test_gram_uncertified_answers_warn(regime):
    for name in GRAM_FAMILIES:
        for r in gram_runs(name, regime):
            for q, (cert, warned, _) in r.items():
                assert warned == (0 if cert else 1), (name, regime, q, cert, warned)


def test_gram_certificates_pooled():
    recs = [r[q] for name in GRAM_FAMILIES for reg in GRAM_REGIMES
            for r in gram_runs(name, reg) for q in ("top_k", "above")]
    n_cert, wrong = gram_tally(recs)
    assert sum(len(gram_runs(name)) for name in GRAM_FAMILIES) >= 200       # seeds, main
    assert n_cert >= 400
    assert wrong <= allowed_wrong(n_cert), (wrong, n_cert)


# --- 8. files and sums -------------------------------------------------------------------

def arrays_of(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def save_arrays(path, arrays):
    arrays = dict(arrays)
    arrays["checksum"] = np.array(sketchfile.checksum(arrays))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_gram_sketch_saves_and_loads(tmp_path):
    X = int_gram_matrix(5, n=50, m=30)
    sk = pagh_mm.compress_gram(X, buckets=256, reps=5, seed=17)
    path = tmp_path / "g.npz"
    sk.save(path)
    arrays = arrays_of(path)
    assert int(arrays["gram"]) == 1 and "hash_coefficients" in arrays
    assert int(arrays["format_version"]) == 5 and str(arrays["chosen"]) == ""
    back = CompressedProduct.load(path)
    assert back.gram and back.params.family == "polynomial"
    assert back.params == sk.params
    assert np.array_equal(back.params.coefficients, sk.params.coefficients)
    assert np.array_equal(back.diagonal, sk.diagonal)
    assert np.array_equal(back.sketch, sk.sketch)
    I, J = np.meshgrid(np.arange(30), np.arange(30), indexing="ij")
    assert np.array_equal(back.estimate(I, J), sk.estimate(I, J))
    assert np.array_equal(back.estimate_reps(I, J), sk.estimate_reps(I, J), equal_nan=True)
    assert np.array_equal(back.to_dense(), sk.to_dense())
    # verified queries after attach(X.T, X)
    back.attach(X.T, X)
    a = back.top_k(7, verify=True, exclude_diagonal=True)
    b = sk.top_k(7, verify=True, exclude_diagonal=True)
    assert a.certified and np.array_equal(a.exact, b.exact) and np.array_equal(a.rows, b.rows)


def test_sketchfile_rejects_inconsistent_gram_files(tmp_path):
    X = int_gram_matrix(5, n=50, m=30)
    g = pagh_mm.compress_gram(X, buckets=256, reps=3, seed=1)
    g.save(tmp_path / "g.npz")
    ga = arrays_of(tmp_path / "g.npz")
    save_arrays(tmp_path / "nodiag.npz", {k: v for k, v in ga.items() if k != "diagonal"})
    with pytest.raises(ValueError, match=r"array 'diagonal' is missing \(gram = 1 needs it\)"):
        sketchfile.read(tmp_path / "nodiag.npz")
    save_arrays(tmp_path / "gram0.npz", {**ga, "gram": np.array(0, np.int64)})
    with pytest.raises(ValueError, match="'diagonal' is present but gram is 0"):
        sketchfile.read(tmp_path / "gram0.npz")
    save_arrays(tmp_path / "shortdiag.npz", {**ga, "diagonal": ga["diagonal"][:-1]})
    with pytest.raises(ValueError, match="array 'diagonal' has shape"):
        sketchfile.read(tmp_path / "shortdiag.npz")
    bad = ga["diagonal"].copy()
    bad[2] = np.nan
    save_arrays(tmp_path / "nandiag.npz", {**ga, "diagonal": bad})
    with pytest.raises(ValueError, match="'diagonal' holds NaN"):
        sketchfile.read(tmp_path / "nandiag.npz")
    # a general (non-Gram) sketch marked gram = 1
    n = pagh_mm.compress(X.T.copy(), X, buckets=256, reps=3, seed=1)
    assert not n.gram
    n.save(tmp_path / "n.npz")
    na = arrays_of(tmp_path / "n.npz")
    save_arrays(tmp_path / "gram1.npz", {**na, "gram": np.array(1, np.int64)})
    with pytest.raises(ValueError, match=r"array 'diagonal' is missing \(gram = 1 needs it\)"):
        sketchfile.read(tmp_path / "gram1.npz")
    save_arrays(tmp_path / "gram1d.npz", {**na, "gram": np.array(1, np.int64),
                                          "diagonal": ga["diagonal"]})
    with pytest.raises(ValueError, match="4-independent hash family"):
        sketchfile.read(tmp_path / "gram1d.npz")
    # the untouched files still load
    assert CompressedProduct.load(tmp_path / "g.npz").gram
    assert not CompressedProduct.load(tmp_path / "n.npz").gram


def test_sum_of_gram_sketches_of_row_blocks():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((70, 20))
    kw = dict(buckets=128, reps=5, seed=8)
    whole = pagh_mm.compress_gram(X, **kw)
    parts = pagh_mm.compress_gram(X[:30], **kw) + pagh_mm.compress_gram(X[30:], **kw)
    assert parts.gram
    assert np.allclose(parts.sketch, whole.sketch, rtol=1e-12, atol=1e-10)
    assert np.allclose(parts.diagonal, whole.diagonal, rtol=1e-13)
    assert np.allclose(parts.diagonal, np.diag(X.T @ X))
    I, J = np.meshgrid(np.arange(20), np.arange(20), indexing="ij")
    assert np.allclose(parts.estimate(I, J), whole.estimate(I, J), rtol=1e-9, atol=1e-9)
    # the sum keeps both parts' factors: its exact values are those of X.T @ X
    e = parts.top_k(5, verify=True, exclude_diagonal=True)
    C = X.T @ X
    assert np.allclose(e.exact, C[np.asarray(e.rows), np.asarray(e.cols)])
    general = pagh_mm.compress(X.T, X, gram=False, hash="polynomial", **kw)
    assert general.params == whole.params and not general.gram
    with pytest.raises(ValueError, match="both Gram or neither"):
        whole + general
    with pytest.raises(ValueError, match="both Gram or neither"):
        general + whole


# --- 9. half the forward transforms ------------------------------------------------------

def test_gram_transforms_half_the_rows(monkeypatch):
    calls = {False: 0, True: 0}
    rows = {False: 0, True: 0}
    original = fwht_gpu.FWHT.__call__

    def counting(self, x, *args, inverse=False, **kw):
        calls[inverse] += 1
        rows[inverse] += int(np.prod(np.shape(x)[:-1]))
        return original(self, x, *args, inverse=inverse, **kw)

    monkeypatch.setattr(fwht_gpu.FWHT, "__call__", counting)
    monkeypatch.setattr(pagh_mm.compiled, "ENABLED", False)   # the specification's calls
    rng = np.random.default_rng(0)
    X = rng.standard_normal((96, 16))
    kw = dict(buckets=64, reps=3, seed=1, hash="polynomial")
    got = {}
    for gram in (True, False):
        for key in calls:
            calls[key] = rows[key] = 0
        sk = pagh_mm.compress(X.T, X, gram=gram, **kw)
        assert sk.gram == gram
        got[gram] = (dict(calls), dict(rows))
    (gc, gr), (nc, nr) = got[True], got[False]
    assert gr[False] == 96 * 3 and nr[False] == 2 * 96 * 3        # one row per inner index & rep
    assert 2 * gr[False] == nr[False] and 2 * gc[False] == nc[False]
    assert gc[True] == nc[True] == 1 and gr[True] == nr[True] == 3  # one inverse per repetition


# --- 10. the command line ----------------------------------------------------------------

def test_cli_top_gram_with_transpose_a(tmp_path):
    X = int_gram_matrix(31, n=50, m=30).astype(float)
    C = X.T @ X
    path = tmp_path / "X.npy"
    np.save(path, X)
    r = CliRunner().invoke(pagh_main, ["top", str(path), str(path), "--transpose-a", "-k", "4",
                                       "--verify", "--exclude-diagonal", "--output-format", "json"])
    assert r.exit_code == 0, r.output
    assert "Gram" in r.output and "certified: yes" in r.output
    start = r.output.index("[")
    entries = json.loads(r.output[start:r.output.rindex("]") + 1])
    assert len(entries) == 4
    off = np.abs(C[offdiag_mask(30)])
    assert sorted(abs(e["exact"]) for e in entries) == sorted(np.sort(off)[-4:].tolist())
    for e in entries:
        assert e["i"] != e["j"] and e["exact"] == C[e["i"], e["j"]]
    # the table form, as the brief's command line
    r = CliRunner().invoke(pagh_main, ["top", str(path), str(path), "--transpose-a", "-k", "4",
                                       "--verify", "--exclude-diagonal"])
    assert r.exit_code == 0, r.output
    assert "Gram product" in r.output
    lines = [ln.split() for ln in r.output.splitlines()]
    body = [ln for ln in lines if len(ln) == 4 and ln[0].isdigit() and ln[1].isdigit()]
    assert len(body) == 4
    got = sorted(abs(float(ln[3])) for ln in body)
    assert got == sorted(np.sort(off)[-4:].tolist())
    for ln in body:
        i, j = int(ln[0]), int(ln[1])
        assert i != j and float(ln[3]) == C[i, j]
    # two different files: no Gram product (a general sketch)
    path2 = tmp_path / "Y.npy"
    np.save(path2, X)
    r = CliRunner().invoke(pagh_main, ["top", str(path2), str(path), "--transpose-a", "-k", "4",
                                       "--verify", "--exclude-diagonal"])
    assert r.exit_code == 0, r.output
    assert "Gram" not in r.output


@pytest.mark.parametrize("lim", ["h100", "a100"])
def test_fused_gram_kernels_in_key_order_hold_no_stage_and_more_tree_levels_alone(monkeypatch,
                                                                                 lim):
    """The launch rule of the GPU's fused Gram kernels that sketch in key order: no sketch stage
    in shared memory; a block alone on its SM (1024 threads: FP32 2^14, FP64 2^13) sums
    FUSED_KEYS_MAX_LOG_G tree levels (FP32 two, FP64 one) where they fit, the others
    FUSED_MAX_LOG_G (the shared memory they would take is the sketch's L1); the memory plan's
    block bounds both; products and the sketch by position keep their stage (device limits
    given, no GPU needed)."""
    from fwht_gpu.cuda.device import A100, H100
    from pagh_mm.cuda import kernels
    limits = {"h100": H100, "a100": A100}[lim]
    monkeypatch.setattr(kernels, "_device_limits", lambda: limits)
    hopper = lim == "h100"
    names = {nm for nm, _, _ in kernels.fused_names()}
    for lb, dt, alone in ((12, np.float32, False), (13, np.float32, False), (14, np.float32, True),
                          (12, np.float64, False), (13, np.float64, True)):
        name = kernels.C_TYPES[np.dtype(dt)]
        # two levels: 198 KiB, within the H100's 227 KiB per block, not the A100's 163 KiB
        want = kernels.FUSED_KEYS_MAX_LOG_G[name] if alone and hopper else \
            kernels.FUSED_MAX_LOG_G
        c = kernels.fused_group(lb, dt, 1 << 20, gram=True, keyed=True)
        assert c == want, (lb, dt, c)
        assert kernels._fused_smem(lb, name, c, False) <= limits.smem_per_block
        assert kernels._fused_smem(lb, name, c, False) + kernels.FUSED_STAGE_BYTES == \
            kernels._fused_smem(lb, name, c)
        vpt = kernels.fused_log_vpt(lb, name)
        assert f"fused_dense_terms<{name},double,{vpt},true,{c},{kernels._fixed(lb, vpt, name)}>" \
            in names
        assert kernels.fused_group(lb, dt, 2, gram=True, keyed=True) == 1
        assert kernels.fused_group(lb, dt, 1, gram=True, keyed=True) == 0
        assert kernels.fused_group(lb, dt, 1 << 20) == kernels.FUSED_MAX_LOG_G
        assert kernels.fused_group(lb, dt, 1 << 20, gram=False, keyed=True) == \
            kernels.FUSED_MAX_LOG_G
        assert kernels.fused_group(lb, dt, 1 << 20, gram=True, keyed=False) == \
            kernels.FUSED_MAX_LOG_G
        assert kernels._stageless(lb, name, True, True)
        assert not kernels._stageless(lb, name, False, True)
        assert not kernels._stageless(lb, name, True, False)
    # the kernels of the most buckets per block (out of line sketch) keep theirs
    assert not kernels._stageless(15, "float", True, True)
    assert not kernels._stageless(14, "double", True, True)


@pytest.mark.parametrize("lim", ["h100", "a100"])
def test_fused_launches_hold_the_stage_wherever_the_sketch_by_position_may_run(monkeypatch,
                                                                               lim):
    """Every launch of ``kernels.fused_terms`` (a recorder in place of the GPU): a compiled
    kernel, within the device's shared memory, and the sketch stage allocated unless the
    launch is a Gram kernel of at most RegLogVpt values per thread given its factor's codes
    (the only kernels that never sketch by position); the tree levels of ``fused_group`` fit
    what it allocates.  Every bucket count the fused kernels take, both transform dtypes,
    products and Gram products, with and without codes, blocks of 1 to 2^20 inner indices."""
    from fwht_gpu.cuda.device import A100, H100
    from pagh_mm.cuda import kernels
    limits = {"h100": H100, "a100": A100}[lim]
    monkeypatch.setattr(kernels, "_device_limits", lambda: limits)
    launches = []

    class Recorder:
        def function(self, name, smem=0, cluster_blocks=0):
            return lambda grid, block, args, shared_mem=0: launches.append((name, shared_mem))

    monkeypatch.setattr(kernels, "FUSED", Recorder())
    monkeypatch.setattr(kernels, "cupy", lambda: np)
    compiled = {nm for nm, _, _ in kernels.fused_names() + kernels.fused_cluster_names()}
    stageless = 0
    for dt in (np.float32, np.float64):
        name = kernels.C_TYPES[np.dtype(dt)]
        for lb in range(1, 19):
            if not kernels.fused_supported(lb, dt):
                continue
            cluster = kernels._cluster_log(lb, dt)[1] > 0
            for gram in (True, False):
                for keyed in {False, kernels.fused_key_order(1, lb, dt, gram=gram)}:
                    for block in (1, 2, 4, 1 << 20):
                        c = kernels.fused_group(lb, dt, block, gram, keyed)
                        V = np.zeros((3, 5), dtype=dt)
                        table = (None,) * 4 + ((np.zeros(3, np.uint32),) + (None,) * 4
                                               if keyed else (None,) * 5)
                        del launches[:]
                        kernels.fused_terms(V, table, None if gram else V,
                                            None if gram else table, 2, lb, dt, c)
                        (kernel, smem), = launches
                        assert kernel in compiled, kernel
                        assert smem <= limits.smem_per_block, (kernel, smem)
                        assert int(kernel[kernel.index("<") + 1:-1].split(",")[4]) == c, kernel
                        if cluster:
                            continue
                        stage = not (gram and keyed and
                                     kernels.fused_log_vpt(lb, name) <=
                                     kernels.FUSED_REG_LOG_VPT[name])
                        stageless += not stage
                        shared = kernels._slots_shared(lb, dt, c, stage)
                        assert smem == kernels._fused_smem(lb, name, c if shared else 0, stage), \
                            (kernel, smem, stage, c)
    assert stageless > 0
