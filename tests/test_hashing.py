"""Hash families (issue 20): every offered family keeps Pagh's variance bound for entries
with structured indices; the legacy multiply-shift family does not (and is refused)."""
import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from pagh_mm import hashing

FAMILIES = list(hashing.FAMILIES)
METHODS = ["fwht", "fft"]

#: Pairs of product entries ((i, j), (i', j')) with arithmetic structure, and controls.
STRUCTURED = [
    ((5, 5), (15, 15)), ((1001, 1001), (3003, 3003)), ((5, 7), (15, 21)),        # (3x, 3y)
    ((12345, 777), (37035, 2331)),
    ((5, 7), (10, 14)), ((1001, 99), (2002, 198)), ((640, 96), (1280, 192)),     # (2x, 2y)
    ((5, 7), (5 + 1024, 7 + 1024)), ((100, 3), (100 + 65536, 3 + 65536)),       # + 2^k
    ((77, 4000), (77 + 4096, 4000 + 4096)), ((3 * 256 + 1, 5 * 256 + 1), (4 * 256 + 1, 6 * 256 + 1)),
    ((3, 9), (4, 10)),                                                             # strided blocks
    ((40000, 123), (987, 55555)),                                                  # control
]


def collision_rates(family, method, log2b=10, draws=40000, chunk=2000):
    """b * P[entries collide] for every pair in STRUCTURED (1.0: the ideal 1/b), over
    ``draws`` independent draws of the hash functions."""
    b = 1 << log2b
    keys1 = np.array([k for p in STRUCTURED for k in (p[0][0], p[1][0])])
    keys2 = np.array([k for p in STRUCTURED for k in (p[0][1], p[1][1])])
    hits = np.zeros(len(STRUCTURED))
    for s in range(draws // chunk):
        params = hashing.HashParams.draw(family, 1000 + s, chunk)
        h1 = hashing.bucket_table(params, 1, keys1, log2b)
        h2 = hashing.bucket_table(params, 2, keys2, log2b)
        comb = (h1 ^ h2) if method == "fwht" else (h1 + h2) % b
        comb = comb.reshape(chunk, len(STRUCTURED), 2)
        hits += (comb[:, :, 0] == comb[:, :, 1]).sum(axis=0)
    return hits / draws * b


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_structured_entries_collide_with_probability_1_over_b(family, method):
    rates = collision_rates(family, method)
    # 40 000 draws at b = 1024: about 39 expected collisions per pair (sd ~ 6), so a rate
    # of 2/b (78) would stand out; the mean over the 13 pairs is within ~5% of 1
    assert rates.max() < 2.0, dict(zip(map(str, STRUCTURED), rates.round(2)))
    assert 0.85 < rates.mean() < 1.15


def test_the_collision_test_fails_for_multiply_shift():
    """The same measurement on the legacy family: (x, y) and (3x, 3y) share an XOR bucket
    about 10 times too often, which is why it is no longer offered."""
    rates = collision_rates("multiply-shift", "fwht")
    assert rates.max() > 5.0
    assert rates[:4].min() > 5.0          # every (3x, 3y) pair


def _structured_product(rng, bases=4):
    """A product whose non-zeros (value +-1) sit at (x, y) and (3x, 3y), (2x, 2y), (x + 2^10,
    y + 2^10), (x + 2^12, y + 2^12) for random (x, y): A has one 1 per column, B one +-1 per
    row (sparse, so only the non-zeros are hashed)."""
    xs = rng.choice(np.arange(1, 3000), bases, replace=False)
    ys = rng.choice(np.arange(1, 3000), bases, replace=False)
    ents = []
    for x, y in zip(xs, ys):
        ents += [(x, y), (3 * x, 3 * y), (2 * x, 2 * y), (x + 1024, y + 1024), (x + 4096, y + 4096)]
    ents = list(dict.fromkeys((int(i), int(j)) for i, j in ents))
    I, J = np.array([i for i, _ in ents]), np.array([j for _, j in ents])
    vals = rng.choice([-1.0, 1.0], len(ents))
    k = np.arange(len(ents))
    A = sps.csc_matrix((np.ones(len(ents)), (I, k)), shape=(I.max() + 1, len(ents)))
    B = sps.csr_matrix((vals, (k, J)), shape=(len(ents), J.max() + 1))
    return A, B, I, J, vals


LOG2B = 10
DRAWS = 8000


def _variance_ratio(err, vals):
    """Per entry: mean squared error of one repetition / (||C||_F^2 - C_ij^2) / b."""
    return (err ** 2).mean(axis=0) / ((len(vals) - 1) / (1 << LOG2B))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_variance_bound_holds_for_structured_heavy_entries(family, method):
    """Each repetition's estimate of an entry has variance at most (||C||_F^2 - C_ij^2) / b,
    measured through compress() on entries whose indices are multiples and shifts of each other."""
    A, B, I, J, vals = _structured_product(np.random.default_rng(20))
    chunk = 2000
    est = np.concatenate([pagh_mm.compress(A, B, buckets=1 << LOG2B, reps=chunk, seed=s, method=method,
                                           hash=family).estimate_reps(I, J)
                          for s in range(DRAWS // chunk)])
    err = est - vals
    ratio = _variance_ratio(err, vals)
    # 8000 draws, 19 other entries at 1/b each: the error is mostly 0, so the ratio's sampling
    # sd is ~8% per entry; a partner colliding 10x too often would add ~50%
    assert ratio.max() < 1.3, ratio.round(3)
    assert 0.9 < ratio.mean() < 1.1
    assert abs(err.mean()) < 0.01


def test_variance_bound_fails_for_multiply_shift():
    """The legacy family on the same product (estimates formed from the hash values directly,
    as the sketch forms them): the (3x, 3y) partners push the variance of the affected
    entries well above the bound, so the variance test above can fail."""
    _, _, I, J, vals = _structured_product(np.random.default_rng(20))
    params = hashing.HashParams.draw("multiply-shift", 0, DRAWS)
    h = hashing.bucket_table(params, 1, I, LOG2B) ^ hashing.bucket_table(params, 2, J, LOG2B)
    s = hashing.sign_table(params, 1, I) * hashing.sign_table(params, 2, J)
    same = h[:, :, None] == h[:, None, :]                     # (draws, entry, other)
    err = (same * (s * vals)[:, None, :]).sum(axis=2) * s - vals
    assert _variance_ratio(err, vals).max() > 1.3


def test_default_family_and_refused_legacy_family():
    assert hashing.DEFAULT_FAMILY == "multiply-add-shift" == pagh_mm.HASH_FAMILIES[0]
    assert "multiply-shift" not in pagh_mm.HASH_FAMILIES
    A, B = np.ones((4, 3)), np.ones((3, 5))
    assert pagh_mm.compress(A, B, buckets=16, reps=1, seed=0).params.family == "multiply-add-shift"
    with pytest.raises(ValueError, match="2-universal.*multiply-add-shift"):
        pagh_mm.compress(A, B, buckets=16, reps=1, seed=0, hash="multiply-shift")
    with pytest.raises(ValueError, match="hash='md5'"):
        pagh_mm.compress(A, B, buckets=16, reps=1, seed=0, hash="md5")


@pytest.mark.parametrize("family", hashing.ALL_FAMILIES)
def test_existing_sketches_keep_their_hash_functions(family):
    """The draws of every family are what they were before the default changed (old sketch
    files and seeds reproduce): a few values pinned."""
    p = hashing.HashParams.draw(family, 7, 2)
    got = hashing.bucket_table(p, 1, np.array([0, 1, 12345]), 12)
    pinned = {"multiply-add-shift": [[1983, 1300, 113], [2555, 1510, 655]],
              "tabulation": [[3365, 2159, 3009], [2799, 2448, 3172]],
              "multiply-shift": [[0, 2560, 3291], [0, 3154, 1597]],
              "polynomial": [[442, 3756, 383], [1057, 1027, 1984]]}
    assert got.tolist() == pinned[family]


def test_seeds_of_any_size():
    for seed in (0, 2**63, 2**64 + 5, 10**30):
        p = hashing.HashParams.draw("multiply-add-shift", seed, 2)
        assert p.seed == seed and hashing.HashParams.from_arrays(p.to_arrays()).same_as(p)
    for bad, err in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)):
        with pytest.raises(err, match="seed"):
            hashing.check_seed(bad)


@pytest.mark.parametrize("family", FAMILIES)
def test_distinct_rows_map_decoding_repetitions_to_their_functions(family):
    """distinct_rows: the GPU pair kernel hashes each distinct repetition once and derives the
    decoding pseudo-repetitions (with_row_bits) from it by their row bit; the functions it
    maps a repetition to are that repetition's, for every family."""
    p = hashing.HashParams.draw(family, 11, 4)
    rows, base, bit = hashing.distinct_rows(p)
    assert rows.tolist() == [0, 1, 2, 3] and base.tolist() == [0, 1, 2, 3] and (bit == -1).all()
    d = hashing.with_row_bits(p, 3, 5)
    rows, base, bit = hashing.distinct_rows(d)
    assert rows.tolist() == [0, 1, 2, 3] and base.dtype == np.int32
    assert bit.tolist() == [-1] * 4 + [b for _ in range(3) for b in range(5)]
    keys = np.array([0, 1, 5, 1023, 4096, 2 ** 32 - 1], dtype=np.uint64)
    for which in (1, 2):
        h = hashing.bucket_table(d, which, keys, 12)
        s = hashing.sign_table(d, which, keys)
        for r in range(d.reps):
            q = rows[base[r]]
            assert (h[r] == h[q]).all()
            on = np.ones(keys.size) if bit[r] < 0 or which == 2 else (keys >> np.uint64(bit[r])) & np.uint64(1)
            assert (s[r] == s[q] * on).all()
    only = hashing.with_row_bits(p, 2, 3, main=False)       # no main rows: the first of each
    rows, base, bit = hashing.distinct_rows(only)
    assert rows.tolist() == [0, 3] and base.tolist() == [0, 0, 0, 1, 1, 1]
