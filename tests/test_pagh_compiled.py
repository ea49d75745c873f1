"""The compiled CPU engine of pagh_mm (pagh_mm.compiled, fwht_gpu.compiled) gives the bits of
the NumPy/SciPy specification: dense, sparse and Gram products, FWHT and FFT, FP64 and FP32,
any number of threads and any memory budget."""
import numba
import numpy as np
import pytest
import scipy.sparse as sps

import fwht_gpu.compiled
import pagh_mm
from pagh_mm import compiled, matmul


def _specification(*args, **kw):
    saved = compiled.ENABLED, fwht_gpu.compiled.ENABLED
    compiled.ENABLED = fwht_gpu.compiled.ENABLED = False
    try:
        return pagh_mm.compress(*args, **kw).sketch
    finally:
        compiled.ENABLED, fwht_gpu.compiled.ENABLED = saved


def _specification_answer(query):
    """``query()`` with the compiled kernels off: the NumPy specification's answer."""
    compiled.ENABLED = False
    try:
        return query()
    finally:
        compiled.ENABLED = True


def _watch_pruned(monkeypatch) -> list:
    """A list that records, for each call of compiled.pruned_scan, whether it answered."""
    used = []
    original = compiled.pruned_scan

    def spy(*a, **kw):
        got = original(*a, **kw)
        used.append(got is not None)
        return got

    monkeypatch.setattr(compiled, "pruned_scan", spy)
    return used


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _factors(kind, rng):
    if kind == "dense":
        A = rng.standard_normal((70, 300)) * np.exp2(rng.integers(-30, 30, (70, 300)))
        B = rng.standard_normal((300, 50))
        A[:, 7] = 0.0
        B[11] = 0.0
        return A, B
    if kind == "sparse":
        A = sps.random(90, 500, density=0.03, random_state=1, format="csc")
        B = sps.random(500, 80, density=0.03, random_state=2, format="csr")
        return A, B
    if kind == "wide":                      # more keys than stored values: hashes per value
        A = sps.random(5000, 300, density=0.001, random_state=5, format="csc")
        B = sps.random(300, 4000, density=0.001, random_state=6, format="csr")
        return A, B
    if kind == "mixed":
        return rng.standard_normal((40, 130)), sps.random(130, 60, density=0.1, random_state=3)
    X = sps.random(400, 120, density=0.05, random_state=4, format="csr")
    X.data[:] = 1.0
    return X.T, X                                                   # a Gram product


@pytest.mark.parametrize("kind", ["dense", "sparse", "wide", "mixed", "gram"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "fp16", "bf16"])
def test_compiled_compression_has_the_specifications_bits(kind, dtype):
    A, B = _factors(kind, np.random.default_rng(0))
    if dtype in ("fp16", "bf16"):             # within the 16-bit range: values up to 1 / 8
        A, B = (M * (0.125 / abs(M).max()) for M in (A, B))
    kw = dict(buckets=1024, reps=3, seed=5, dtype=dtype)
    got = pagh_mm.compress(A, B, **kw).sketch
    assert _same(got, _specification(A, B, **kw))


@pytest.mark.parametrize("method", ["fwht", "fft"])
def test_threads_and_memory_budgets_do_not_change_the_bits(method):
    A, B = _factors("dense", np.random.default_rng(1))
    kw = dict(buckets=512, reps=5, seed=2, method=method)
    want = _specification(A, B, **kw)
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, 2, before}):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            for budget in (1 << 19, 1 << 21, None):
                got = pagh_mm.compress(A, B, memory_budget=budget, **kw).sketch
                assert _same(got, want), (threads, budget)
    finally:
        numba.set_num_threads(before)


def test_scatter_kernel_matches_the_scatter_matrix():
    rng = np.random.default_rng(3)
    keys, nb, d, b = 37, 9, 4, 16
    X = rng.standard_normal((keys, nb))
    h = rng.integers(0, b, (keys, d))
    s = rng.choice([-1.0, 1.0], (keys, d))
    want = np.zeros((nb, d, b))
    for k in range(nb):
        for i in range(keys):               # 0.0 plus the keys' signed values, increasing key
            for t in range(d):
                want[k, t, h[i, t]] += s[i, t] * X[i, k]
    assert _same(compiled.scatter_dense(X, h, s, b), want)
    assert _same(compiled.scatter_dense(np.asfortranarray(X), h, s, b), want)


@pytest.mark.parametrize("kind", ["dense", "gram"])
@pytest.mark.parametrize("method", ["fwht", "fft"])
def test_compiled_query_tiles_equal_the_numpy_estimates(kind, method):
    if kind == "gram" and method == "fft":
        pytest.skip("Gram sketches are FWHT only")
    A, B = _factors(kind, np.random.default_rng(2))
    for reps in (4, 5):
        sk = pagh_mm.compress(A, B, buckets=64, reps=reps, seed=3, method=method)
        m, p = sk.shape
        ii, jj = np.meshgrid(np.arange(m), np.arange(p), indexing="ij")
        want = sk.estimate(ii, jj)
        got = np.empty((m, p))
        for r0, c0, est in pagh_mm.query.tiles(sk):
            got[r0:r0 + est.shape[0], c0:c0 + est.shape[1]] = est
        assert np.array_equal(got, want)      # (the sign of a zero median is not specified)
        want_top = sk.top_k(7)
        spec_top = _specification_answer(lambda: sk.top_k(7))
        assert np.array_equal(want_top.rows, spec_top.rows)
        assert np.array_equal(want_top.cols, spec_top.cols)
        assert np.array_equal(want_top.estimates, spec_top.estimates)


def _engines_made(monkeypatch) -> list:
    """A list that receives every compiled.Fused engine made from now on."""
    made = []
    original = compiled.Fused.__init__

    def spy(self, *a, **kw):
        original(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(compiled.Fused, "__init__", spy)
    return made


def test_exact_integer_sparse_products_use_pairs_with_the_same_bits(monkeypatch):
    rng = np.random.default_rng(7)
    A = sps.random(60, 400, density=0.05, random_state=8, format="csc")
    A.data = np.round(A.data * 10) - 4
    B = sps.random(400, 70, density=0.05, random_state=9, format="csr")
    B.data = np.round(B.data * 10) - 4
    X = sps.random(300, 50, density=0.1, random_state=10, format="csr")
    X.data = rng.integers(1, 4, X.nnz).astype(np.float64)
    made = _engines_made(monkeypatch)
    for a, b in ((A, B), (X.T, X)):
        for buckets in (16, 256):           # pairs everywhere; transforms and pairs mixed
            made.clear()
            got = pagh_mm.compress(a, b, buckets=buckets, reps=3, seed=4).sketch
            assert made and made[-1].pair_limit > 0
            assert _same(got, _specification(a, b, buckets=buckets, reps=3, seed=4))
    made.clear()
    Af = A.copy()
    Af.data = Af.data + 0.5                  # not integers: no pairs
    pagh_mm.compress(Af, B, buckets=16, reps=3, seed=4)
    assert made and made[-1].pair_limit == 0


def test_pairs_are_checked_on_the_inverse_transforms_sums(monkeypatch):
    """Large integers: the pairs are taken when the specification's inverse transform stays
    exact on these sums (buckets x sum_k |a_k|_1 |b_k|_1 may pass 2^53), and given up for
    the transforms when one of its sums could round (a pair of 2^52 beside small ones)."""
    rng = np.random.default_rng(17)
    A = sps.random(60, 400, density=0.05, random_state=18, format="csc")
    A.data = rng.integers(1 << 18, 1 << 19, A.nnz).astype(np.float64) * rng.choice([-1, 1], A.nnz)
    B = sps.random(400, 70, density=0.05, random_state=19, format="csr")
    B.data = rng.integers(1 << 18, 1 << 19, B.nnz).astype(np.float64) * rng.choice([-1, 1], B.nnz)
    made = _engines_made(monkeypatch)
    bound = pagh_mm.matmul._abs_product_bound
    kw = dict(buckets=64, reps=3, seed=5)
    got = pagh_mm.compress(A, B, **kw).sketch
    sides = [pagh_mm.matmul.Side(M, w, None, 6, pagh_mm.backend.cpu()) for M, w in ((A, 1), (B, 2))]
    assert 64 * bound(sides) >= 2.0 ** 53 > bound(sides)       # the old a-priori bound refused
    assert [e.pair_limit > 0 for e in made] == [True]
    assert _same(got, _specification(A, B, **kw))
    A2, B2 = A.tolil(), B.tolil()
    A2[0, 0], B2[0, 0] = 2.0 ** 26, 2.0 ** 26        # one pair of 2^52: the inverse would round
    A2, B2 = A2.tocsc(), B2.tocsr()
    made.clear()
    got = pagh_mm.compress(A2, B2, **kw).sketch
    assert [e.pair_limit > 0 for e in made] == [True, False]
    assert _same(got, _specification(A2, B2, **kw))


def test_pruning_that_walks_more_pairs_than_a_scan_is_left_to_the_scan(monkeypatch):
    """The pruned kernel walks every (row, heavy bucket) pair: where they outnumber the
    entries (CPU_PRUNE_PAIRS), the scan answers instead, with the same certified answer."""
    A, B = heavy_factors_for_pruning()
    sk = pagh_mm.compress(A, B, buckets=1 << 14, reps=5, seed=3)
    used = _watch_pruned(monkeypatch)
    want = sk.top_k(10, verify=True)
    assert used and any(used)                          # pruned at the default
    used.clear()
    monkeypatch.setattr(pagh_mm.query, "CPU_PRUNE_PAIRS", 1e-9)
    got = sk.top_k(10, verify=True)
    assert not used                                    # the kernel was never called
    assert np.array_equal(got.rows, want.rows) and np.array_equal(got.cols, want.cols)
    assert np.array_equal(got.exact, want.exact) and got.certified == want.certified


def test_a_pruned_first_scan_may_return_fewer_than_its_pool(monkeypatch):
    """Fewer entries than the first pool stand out (10 planted, a pool of 74): no limit of
    the pruned scan admits the pool, so it returns the entries of its lowest limit (at least
    k) with the bound of every other key instead of scanning everything; the certified
    answer is the specification's (which scans)."""
    A, B = heavy_factors_for_pruning()
    original = pagh_mm.query._pruned
    partial = []

    def spy(cp, sketch, by, cap, cut, exclude, skip, least=None):
        got = original(cp, sketch, by, cap, cut, exclude, skip, least)
        partial.append(got is not None and got[1].size <= cap and got[2] is not None)
        return got

    monkeypatch.setattr(pagh_mm.query, "_pruned", spy)
    for buckets in (1 << 16, 1 << 18):
        partial.clear()
        sk = pagh_mm.compress(A, B, buckets=buckets, reps=5, seed=3)
        got = sk.top_k(10, verify=True)
        assert partial and partial[0], buckets
        want = _specification_answer(lambda: sk.top_k(10, verify=True))
        assert got.certified and want.certified
        assert np.array_equal(got.rows, want.rows) and np.array_equal(got.cols, want.cols)
        assert np.array_equal(got.exact, want.exact)


def heavy_factors_for_pruning():
    rng = np.random.default_rng(23)
    A = sps.random(3000, 500, density=0.01, random_state=24, format="csc")
    B = sps.random(500, 2500, density=0.01, random_state=25, format="csr")
    A.data[:], B.data[:] = 1.0, 1.0
    A, B = A.tolil(), B.tolil()
    for r, c in zip(rng.choice(3000, 10, replace=False), rng.choice(2500, 10, replace=False)):
        ks = rng.choice(500, 40, replace=False)
        A[r, ks] = 1.0
        B[ks, c] = 1.0
    return A.tocsc(), B.tocsr()


@pytest.mark.parametrize("reps", [5, 7])
@pytest.mark.parametrize("kind", ["dense", "gram"])
def test_compiled_scans_give_the_specifications_answers(kind, reps):
    A, B = _factors(kind, np.random.default_rng(5))
    sk = pagh_mm.compress(A, B, buckets=256, reps=reps, seed=1)
    queries = [lambda: sk.top_k(9, by=by, exclude_diagonal=ex) for by in ("abs", "value")
               for ex in (False, True)]
    queries += [lambda: sk.top_k(5, verify=True), lambda: sk.above(0.5 * float(abs(sk.sketch).max()),
                                                                    verify=True)]
    for q in queries:
        got = q()
        want = _specification_answer(q)
        assert np.array_equal(got.rows, want.rows) and np.array_equal(got.cols, want.cols)
        assert np.array_equal(got.estimates, want.estimates)
        assert got.certified == want.certified


@pytest.mark.parametrize("prune,reps", [(False, 5), (True, 5), (False, 7), (False, 13),
                                        (False, 4), (True, 3), (True, 13)])
@pytest.mark.parametrize("kind", ["dense", "gram"])
def test_one_pass_scans_over_many_tiles_and_crowded_rows(kind, prune, reps, monkeypatch):
    """Small tiles (many of them, a seeded first one), rows with more passing entries than
    their first room (scanned again with room for them, or the two-pass way) and entries
    rejected after (d + 1) // 2 repetitions; or (``prune``) only the entries heavy buckets point to,
    in blocks of rows, Gram entries with blind repetitions included: the specification's
    answers, certificates included, and next_key bounds every entry not returned; odd
    repetition counts (one pass) and even ones (the two-pass tiles)."""
    used = _watch_pruned(monkeypatch) if prune else []
    if prune:                                   # whatever it costs (the answer must not change)
        monkeypatch.setattr(pagh_mm.query, "PRUNE_COST", 1e9)
        monkeypatch.setattr(pagh_mm.query, "CPU_PRUNE_PAIRS", 1e9)
        monkeypatch.setattr(pagh_mm.query, "PRUNE_ROWS", 64)
        monkeypatch.setattr(compiled, "PRUNED_ROOM", 2)
    else:
        monkeypatch.setattr(pagh_mm.query, "PRUNE_COST", 0.0)
    rng = np.random.default_rng(11)
    if kind == "gram":
        X = sps.random(3000, 260, density=0.04, random_state=12, format="csr")
        X.data[:] = 1.0
        X[:, :12] = (rng.random((3000, 12)) < 0.5).astype(float)    # crowded frequent terms
        A, B = X.T.tocsr(), X.tocsc()
    else:
        A, B = rng.standard_normal((240, 80)), rng.standard_normal((80, 230))
        A[:8] *= 20.0                                                # crowded rows
    sk = pagh_mm.compress(A, B, buckets=512, reps=reps, seed=2, gram=kind == "gram" or None)
    assert sk.gram == (kind == "gram")
    scanned, one_pass = [], compiled.scan_tile           # the one-pass kernel's repetitions
    monkeypatch.setattr(compiled, "scan_tile",
                        lambda h1, *a: scanned.append(h1.shape[0]) or one_pass(h1, *a))
    m, p = sk.shape
    ii, jj = np.meshgrid(np.arange(m), np.arange(p), indexing="ij")
    est = sk.estimate(ii, jj)
    monkeypatch.setattr(pagh_mm.query, "TILE_BUDGET", 1 << 19)
    for room_bytes in (64 << 20, 1):            # rerun in one pass / fall back to two passes
        monkeypatch.setattr(compiled, "ROW_ROOM", 2)
        monkeypatch.setattr(compiled, "ROW_ROOM_BYTES", room_bytes)
        for by in ("abs", "value"):
            key = np.abs(est) if by == "abs" else est
            upper = key[ii < jj] if kind == "gram" else key.ravel()
            for cut in (-np.inf, float(np.quantile(upper, 0.99)), float(np.sort(upper)[-20])):
                got = pagh_mm.query.scan(sk, by, 40, cut, skip_diagonal=kind == "gram")
                want = _specification_answer(lambda: pagh_mm.query.scan(
                    sk, by, 40, cut, skip_diagonal=kind == "gram"))
                assert np.array_equal(got.ids, want.ids)
                assert np.array_equal(got.values, want.values)
                assert got.next_key >= want.next_key
                left = np.ones(m * p, bool)
                left[got.ids] = False
                if kind == "gram":
                    left &= (ii < jj).ravel()                      # upper, off-diagonal
                assert got.next_key >= key.ravel()[left].max()
                if want.next_key < cut:          # certifiable at this cut on both paths
                    assert got.next_key < cut
        for q in (lambda: sk.top_k(10, verify=True, exclude_diagonal=kind == "gram"),
                  lambda: sk.top_k(30, by="value", verify=True)):
            got = q()
            want = _specification_answer(q)
            assert np.array_equal(got.rows, want.rows) and np.array_equal(got.cols, want.cols)
            assert np.array_equal(got.exact, want.exact)
            assert got.certified == want.certified and got.margin == want.margin
    # pruned (five repetitions only), and fallbacks; else one pass for odd counts
    assert any(used) == (prune and reps == 5) and (not used or not all(used))
    assert (prune and reps == 5) or set(scanned) == ({reps} if reps % 2 else set())


def test_pruned_scans_certify_what_the_specification_certifies(monkeypatch):
    """A co-occurrence screen (binary documents x terms, planted co-occurring pairs) whose
    certified top-20 the CPU finds from heavy buckets only, in both rounds of the search:
    the specification's answer and certificate."""
    rng = np.random.default_rng(21)
    X = (rng.random((4000, 400)) < 0.02).astype(np.float64)
    for a, b in rng.choice(400, (20, 2), replace=False):
        both = rng.random(4000) < 0.1
        X[both, a] = X[both, b] = 1.0
    X = sps.csr_matrix(X)
    used = _watch_pruned(monkeypatch)
    monkeypatch.setattr(pagh_mm.query, "CPU_PRUNE_PAIRS", 1e9)   # a small product: its scan
    sk = pagh_mm.compress_gram(X, buckets=1 << 14, reps=5, seed=3)   # would be as cheap
    got = sk.top_k(20, verify=True, exclude_diagonal=True)
    assert got.certified and len(used) >= 2 and all(used)      # both rounds
    want = _specification_answer(lambda: sk.top_k(20, verify=True, exclude_diagonal=True))
    assert np.array_equal(got.rows, want.rows) and np.array_equal(got.cols, want.cols)
    assert np.array_equal(got.exact, want.exact) and want.certified
    C = (X.T @ X).toarray()
    np.fill_diagonal(C, -1)
    assert np.sort(got.exact)[::-1][-1] >= np.sort(C.ravel())[::-1][39]   # the true top 20 x 2


def _inverse_exact_rows(sketch, direct):
    """The check's definition, a row at a time (the implementation folds groups of rows)."""
    worst = []
    for r in range(sketch.shape[0]):
        a = np.abs(sketch[r]) + (0 if direct is sketch else np.abs(direct[r]))
        while True:
            worst.append(a.max() * float(a.size))
            if a.size == 1:
                break
            a = a[:a.size // 2] + a[a.size // 2:]
    return bool((np.array(worst) < matmul.INVERSE_EXACT_LIMIT).all())


@pytest.mark.parametrize("group_bytes", [8, 8 * 64, 64 << 20])
def test_inverse_exactness_check_folds_groups_of_rows_as_its_definition(monkeypatch, group_bytes):
    monkeypatch.setattr(matmul, "INVERSE_EXACT_BYTES", group_bytes)
    rng = np.random.default_rng(3)
    for rows, b in ((1, 2), (5, 64), (7, 256), (25, 1024)):
        for scale in (1.0, 2.0 ** 40, 2.0 ** 43, 2.0 ** 44, 2.0 ** 50):
            sketch = np.round(rng.standard_normal((rows, b)) * scale / b)
            direct = np.round(rng.standard_normal((rows, b)) * scale / b)
            for d in (sketch, direct):
                assert matmul._inverse_exact(sketch, d, np) == _inverse_exact_rows(sketch, d)
        sketch = np.zeros((rows, b))
        sketch[-1, -1] = matmul.INVERSE_EXACT_LIMIT / b           # the last row decides
        assert not matmul._inverse_exact(sketch, sketch, np)
        sketch[-1, -1] = np.nextafter(matmul.INVERSE_EXACT_LIMIT / b, 0)
        assert matmul._inverse_exact(sketch, sketch, np)


def test_inverse_exactness_check_trusts_a_pair_bound_only_where_it_proves_exactness():
    """With the pair bound (sum_k ||a_k||_1 ||b_k||_1, which bounds each row's sum of |c|),
    the check returns True without reading the sketch when 2 b bound is below the limit, and
    the fold agrees there; otherwise it folds as without a bound."""
    rng = np.random.default_rng(4)
    b = 256
    for scale in (1.0, 2.0 ** 30, 2.0 ** 44, 2.0 ** 50):
        sketch = np.round(rng.standard_normal((3, b)) * scale / b)
        direct = np.round(rng.standard_normal((3, b)) * scale / b)
        bound = float(max(np.abs(sketch).sum(axis=1).max(), np.abs(direct).sum(axis=1).max()))
        want = _inverse_exact_rows(sketch, direct)
        assert matmul._inverse_exact(sketch, direct, np, bound) == want
        if 2 * b * bound < matmul.INVERSE_EXACT_LIMIT:
            assert want
            poisoned = np.full((3, b), np.nan)          # proven: the sketch is not read
            assert matmul._inverse_exact(poisoned, poisoned, np, bound)
        assert matmul._inverse_exact(sketch, direct, np, 1e300) == want     # no proof: folds
    big = np.zeros((2, b))
    big[1, 0] = matmul.INVERSE_EXACT_LIMIT / b
    assert not matmul._inverse_exact(big, big, np, float(big.sum()))


def test_pair_bound_of_the_smallest_integer_is_its_magnitude():
    """|int32 min| wraps in int32: the 1-norms (the pairs' bound) are taken in float64, so
    products near 2**62 that cancel are not added pair by pair (the specification's bits)."""
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    A, B = np.zeros((2, 3), dtype=np.int32), np.zeros((3, 1), dtype=np.int32)
    A[0, 0], B[0, 0], A[1, 1], B[1, 0], A[0, 2], B[2, 0] = lo, hi, 1, 1, hi, hi
    A, B = sps.csc_matrix(A), sps.csr_matrix(B)
    from pagh_mm.backend import for_arrays
    from pagh_mm.sketch import Side
    assert Side(A, 1, None, 0, for_arrays(A, B)).norms()[0] == 2.0 ** 31
    kw = dict(buckets=4, reps=3, seed=1)
    got = pagh_mm.compress(A, B, **kw).sketch
    assert np.array_equal(got.view(np.uint64), _specification(A, B, **kw).view(np.uint64))
