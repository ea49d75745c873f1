"""Recovery by decoding (pagh_mm.decode): the bit sketches are the sketches of the masked
products, decoding gives the scan's certified answers (every hash family, dense and sparse,
float and integer data, heavy rows and columns, many equal entries), bad options are named."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sps

import fwht_gpu.compiled
import pagh_mm
from pagh_mm import compiled, decode, query, synthetic
from tests.params import heavy_background_product

FAMILIES = ("multiply-add-shift", "tabulation", "polynomial")


def _masked(A, bit):
    """A with the rows whose bit ``bit`` is 0 left out (zeroed, or dropped when sparse)."""
    keep = ((np.arange(A.shape[0]) >> bit) & 1).astype(bool)
    if sps.issparse(A):
        return sps.diags(keep.astype(np.float64)) @ A if A.dtype.kind == "f" else \
            sps.csr_matrix(A.multiply(keep[:, None]))
    return A * keep[:, None]


def _engines():
    """(name, enter, leave): the compiled engine and the NumPy specification."""
    def spec_on():
        compiled.ENABLED = fwht_gpu.compiled.ENABLED = False

    def spec_off():
        compiled.ENABLED = fwht_gpu.compiled.ENABLED = True
    return [("compiled", lambda: None, lambda: None), ("numpy", spec_on, spec_off)]


@pytest.mark.parametrize("engine", [e[0] for e in _engines()])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["dense", "sparse-int", "fft"])
def test_bit_sketches_are_the_masked_products_sketches(engine, family, kind):
    enter, leave = {e[0]: e[1:] for e in _engines()}[engine]
    rng = np.random.default_rng(3)
    m, n, p = 37, 20, 29
    if kind == "sparse-int":
        A = sps.random(m, n, density=0.3, random_state=1, format="csr",
                       data_rvs=lambda k: rng.integers(-3, 4, k).astype(np.float64))
        B = sps.random(n, p, density=0.3, random_state=2, format="csr",
                       data_rvs=lambda k: rng.integers(-3, 4, k).astype(np.float64))
    else:
        A, B = rng.standard_normal((m, n)), rng.standard_normal((n, p))
    method = "fft" if kind == "fft" else "fwht"
    opts = dict(buckets=64, reps=3, seed=11, hash=family, method=method)
    enter()
    try:
        sk = pagh_mm.compress(A, B, decode=True, **opts)
        plain = pagh_mm.compress(A, B, decode=False, **opts)
        L = decode.row_bits(m)
        assert sk.bits.sketch.shape == (decode.REPS * L, 64) and plain.bits is None
        assert np.array_equal(sk.sketch, plain.sketch)
        for bit in range(L):
            masked = pagh_mm.compress(_masked(A, bit), B, decode=False, **opts)
            assert np.array_equal(sk.bits.sketch[bit], masked.sketch[0]), bit
    finally:
        leave()


def _same_answer(a, b):
    return (a.certified and b.certified and np.array_equal(a.rows, b.rows)
            and np.array_equal(a.cols, b.cols) and np.array_equal(a.exact, b.exact))


def _heavy_rows_cols(n, rng):
    """Dense factors whose product has a heavy row, a heavy column and 20 equal entries."""
    A = rng.standard_normal((n, 16)) * 0.1
    B = rng.standard_normal((16, n)) * 0.1
    A[5, :] = 0.0
    A[5, 0] = 10.0                          # row 5: large wherever B[0] is
    B[0, :] = 0.0
    B[0, rng.choice(n, 30, replace=False)] = 3.0
    B[:, 7] = 0.0
    B[1, 7] = 10.0                          # column 7: large wherever A[:, 1] is
    A[:, 1] = 0.0
    A[rng.choice(n, 30, replace=False), 1] = 2.0
    return A, B


def _cases():
    """(name, A, B, k): k at most the heavy entries the product has."""
    rng = np.random.default_rng(0)
    out = []
    P = synthetic.planted_product(512, 40, magnitude=128, seed=1)
    out.append(("dense-float", P.A, P.B, 30))
    S = synthetic.sparse_planted(4096, 4, 60, 64, seed=2)
    out.append(("sparse-int-4096", S.A, S.B, 50))
    Ai = rng.integers(-1, 2, (300, 24)).astype(np.float64)
    Bi = rng.integers(-1, 2, (24, 280)).astype(np.float64)
    R, Q = rng.choice(300, 10, replace=False), rng.choice(280, 10, replace=False)
    Ai[:, 20:], Bi[20:] = 0.0, 0.0
    Ai[R], Bi[:, Q] = 0.0, 0.0
    Ai[R, 20:], Bi[20:, Q[:, None]] = 5.0, 5.0            # 100 entries equal to 100
    out.append(("dense-int", Ai, Bi, 40))
    A, B = _heavy_rows_cols(400, rng)
    out.append(("heavy-rows-cols", A, B, 40))
    return out


CASES = _cases()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_decoding_gives_the_scans_certified_answer(case, family):
    _, A, B, k = next(c for c in CASES if c[0] == case)
    sk = pagh_mm.compress(A, B, buckets=1 << 15, seed=4, hash=family, decode=True)
    assert sk.bits is not None
    for query_ in (lambda s, m: s.top_k(k, verify=True, method=m),
                   lambda s, m: s.top_k(k // 2, verify=True, by="value", method=m)):
        a, b = query_(sk, "scan"), query_(sk, "decode")
        assert _same_answer(a, b)
    t = float(np.abs(sk.top_k(k, verify=True).exact).min())
    a = sk.above(t, verify=True, method="scan")
    b = sk.above(t, verify=True, method="decode")
    assert _same_answer(a, b) and a.rows.size >= k


def test_decoding_finds_entries_without_scanning(monkeypatch):
    """On a clear product decoding verifies the planted entries (and few others) and the
    certificate holds without a scan of the entries (no tile, no pruned pass)."""
    S = synthetic.sparse_planted(4096, 8, 50, 128, seed=5)
    sk = pagh_mm.compress(S.A, S.B, k=50, seed=6, decode=True)
    scans = []
    monkeypatch.setattr(query, "tiles", lambda *a, **k: scans.append(1) or iter(()))
    monkeypatch.setattr(query, "_pruned", lambda *a, **k: scans.append(2))
    got = sk.top_k(50, verify=True, method="decode")
    assert got.certified and not scans
    assert synthetic.recall(S.rows, S.cols, got.rows, got.cols) == 1.0
    assert got.verified <= query.first_pool(50) + 50     # the decoded buckets, not a scan


def test_undecodable_entries_are_found_by_the_scan():
    """Two heavy entries of opposite signs in one bucket of the decoding repetition cancel
    there: neither decodes; the scan after decoding finds them and the answer is the scan's."""
    rng = np.random.default_rng(7)
    n = 256
    A = rng.standard_normal((n, 8)) * 0.05
    B = rng.standard_normal((8, n)) * 0.05
    sk0 = pagh_mm.compress(A, B, buckets=1024, seed=8, decode=True)
    h1, _ = sk0._hashes(1, np.arange(n))
    h2, _ = sk0._hashes(2, np.arange(n))
    bucket = h1[0][:, None] ^ h2[0][None]
    i1, j1 = 3, 4
    same = np.argwhere(bucket == bucket[i1, j1])
    i2, j2 = next((i, j) for i, j in same if i != i1 and j != j1)
    s1 = sk0._hashes(1, np.array([i1, i2]))[1]
    s2 = sk0._hashes(2, np.array([j1, j2]))[1]
    # C[i1, j1] and C[i2, j2] of magnitude 20, signs chosen to cancel in repetition 0
    A[i1, 0], B[0, j1] = 20.0, 1.0
    A[i2, 1], B[1, j2] = -20.0 * s1[0, 0] * s2[0, 0] * s1[0, 1] * s2[0, 1], 1.0
    sk = pagh_mm.compress(A, B, buckets=1024, seed=8, decode=True)
    C = A @ B
    assert abs(sk.sketch[0, bucket[i1, j1]]) < 1.0          # they cancel in repetition 0
    a = sk.top_k(2, verify=True, method="scan")
    b = sk.top_k(2, verify=True, method="decode")
    assert _same_answer(a, b)
    assert {(int(r), int(c)) for r, c in zip(b.rows, b.cols)} == {(i1, j1), (i2, j2)}
    assert np.allclose(np.sort(np.abs(b.exact)), np.sort(np.abs([C[i1, j1], C[i2, j2]])))


def test_no_heavy_bucket_certifies_in_d_b():
    """scan() with a cut above every bucket of the first d - (d+1)//2 + 1 repetitions
    returns nothing and that bound, without looking at the entries."""
    rng = np.random.default_rng(9)
    A, B = rng.standard_normal((300, 10)), rng.standard_normal((10, 200))
    sk = pagh_mm.compress(A, B, buckets=256, reps=5, seed=1, decode=False)
    bound = query.bucket_bound(sk.sketch)
    assert bound == float(np.abs(sk.sketch[:3]).max())
    est = np.abs(sk.to_dense())
    assert est.max() <= bound
    got = query.scan(sk, "abs", 10, bound * 1.0001)
    assert got.ids.size == 0 and got.next_key == bound


def test_decode_options_are_checked():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((40, 6)), rng.standard_normal((6, 30))
    with pytest.raises(ValueError, match="decode='yes'"):
        pagh_mm.compress(A, B, decode="yes")
    with pytest.raises(ValueError, match="Gram"):
        pagh_mm.compress_gram(rng.standard_normal((20, 12)), decode=True)
    plain = pagh_mm.compress(A, B, buckets=64, decode=False)
    with pytest.raises(ValueError, match="compress with decode=True"):
        plain.top_k(3, verify=True, method="decode")
    sk = pagh_mm.compress(A, B, buckets=64, decode=True)
    with pytest.raises(ValueError, match="use verify=True"):
        sk.top_k(3, method="decode")
    with pytest.raises(ValueError, match="method='fast'"):
        sk.above(1.0, verify=True, method="fast")
    assert pagh_mm.compress(A, B, buckets=64).bits is None          # auto: small and dense


def test_bit_sketches_survive_save_load_add_and_to(tmp_path):
    S = synthetic.sparse_planted(2048, 4, 20, 64, seed=3)
    one = pagh_mm.compress(S.A, S.B, buckets=1 << 14, seed=2, decode=True)
    one.save(tmp_path / "s.npz")
    back = pagh_mm.CompressedProduct.load(tmp_path / "s.npz")
    assert np.array_equal(back.bits.sketch, one.bits.sketch) and back.bits.bits == 11
    both = one + one
    assert np.array_equal(both.bits.sketch, 2 * one.bits.sketch)
    assert (one + pagh_mm.compress(S.A, S.B, buckets=1 << 14, seed=2, decode=False)).bits is None
    assert np.array_equal(one.to("cpu").bits.sketch, one.bits.sketch)
    back.attach(S.A, S.B)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = back.top_k(20, verify=True, method="decode")
    assert got.certified and synthetic.recall(S.rows, S.cols, got.rows, got.cols) == 1.0


def test_per_row_decoding_gives_the_scans_certified_rows(monkeypatch):
    """top_k_per_row with a threshold decodes the entries above it and certifies every row
    without scanning the entries when nothing is left above the cut; its answer is the
    scan's.  Without a threshold method='decode' is refused."""
    S = synthetic.sparse_planted(4096, 4, 60, 64, seed=2)
    sk = pagh_mm.compress(S.A, S.B, buckets=1 << 15, seed=4, decode=True)
    a = sk.top_k_per_row(2, threshold=40.0, verify=True, format="entries", method="scan")
    scans = []
    original = query.tiles
    monkeypatch.setattr(query, "tiles", lambda *x, **k: scans.append(1) or original(*x, **k))
    b = sk.top_k_per_row(2, threshold=40.0, verify=True, format="entries", method="decode")
    assert _same_answer(a, b) and a.rows.size >= 60 and not scans
    with pytest.raises(ValueError, match="needs a threshold"):
        sk.top_k_per_row(2, verify=True, method="decode")


def test_a_regrowth_drops_the_bit_sketches_when_only_that_fits(monkeypatch):
    """A decoding query on an automatic sketch too small to certify: rebuilt with the buckets
    it names, and without its bit sketches when those do not fit (the search then scans),
    rather than left uncertified; the reason says so."""
    A, B = heavy_background_product()
    sk = pagh_mm.compress(A, B, k=5, seed=3, decode=True)
    first = sk.buckets
    original = pagh_mm.matmul.compress

    def tight(*args, decode="auto", **kw):
        if decode is True and kw.get("buckets") not in (None, "auto"):
            raise MemoryError("the bit sketches do not fit (test)")
        return original(*args, decode=decode, **kw)

    monkeypatch.setattr(pagh_mm.matmul, "compress", tight)
    top = sk.top_k(5, verify=True, method="decode")
    assert top.certified and sk.buckets > first and sk.bits is None
    assert "without bit sketches" in sk.chosen.reason and sk.chosen.reason.count("grown") == 1
    assert (np.abs(top.exact) == 150.0).all()
