"""Recovery by decoding: the rows of the entries that dominate their buckets, read off
extra sketches, without looking at every entry (Pagh 2013, section 4).

What a sketch carries (``compress(..., decode=True)``): for each of the first ``reps``
repetitions t (:data:`REPS` by default) and each bit l < L = bit_length(m - 1) of the row
index, the sketch of the product with A's rows whose bit l is 0 left out, made with
repetition t's hash functions (:func:`pagh_mm.hashing.with_row_bits`: a pseudo-repetition
whose row signs are s1_t(i) times bit l of i), in the same pass over A and B as the
sketch itself.  Cost: L / d times the sketch's memory and (transform route) its
transforms; the direct pairs skip the left-out rows, about L / (2 d) more pair updates.

Why it finds entries: in a bucket u of repetition t dominated by one entry (i, j) of value
v (the rest of the bucket, noise of standard deviation sigma, much smaller than |v|), the
bit sketch (t, l) reads about v when bit l of i is 1 and about 0 when it is 0.  So the
ratios c_{t,l}[u] / c_t[u] spell i in binary, with O(L) work per bucket; the columns are
those j with h2_t(j) = u XOR h1_t(i) (the members of one bucket of h2_t, p / b of them on
average).

What was chosen, and why: plain bits, no error-correcting code (Pagh replaces the bits by
the codewords of a code of constant relative distance, so a constant fraction of misread
positions is corrected).  Here a misread bit costs a wrong row, and decoding only proposes
candidates: each is kept only when its median estimate over all d repetitions of the
residual reaches half the decoding level, and is then verified exactly, peeled (the bit
sketches with it), and decoding runs again on the residual (peeling makes it iterative: an
entry that shared its bucket with a larger one is decodable once that one is subtracted).
Misreads come from buckets whose noise is comparable with their entry, i.e. entries near
the noise level; for them the :data:`AMBIGUOUS` least clear bits (readings between 1/4
and 3/4) are tried both ways.  The certificate never rests on decoding: after it, the
certified search (:func:`pagh_mm.query.search`) bounds every entry left by the heavy
buckets of the residual's first d - (d + 1) // 2 + 1 repetitions (O(d b) when none is
heavy) and enumerates what those buckets point to otherwise.  An entry that never
dominates a bucket of a decoding repetition is found there, or the query is not
certified and says why.  A code would correct misreads in place of trying bits both ways
at the price of more sketches; with candidates verified exactly, plain bits cost the
fewest sketches for the same certified answer.

Not for Gram sketches (their bit sketches would read i AND j, not i).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compiled, hashing

#: Repetitions whose bit sketches ``compress(..., decode=True)`` makes (the first ones).
REPS = 1
#: Bits of a decoded row tried both ways (the least clear ones, readings in (1/4, 3/4)).
AMBIGUOUS = 4
#: A decoded entry is verified when its median residual key is at least this fraction of
#: the decoding level.
ACCEPT = 0.5
#: Decoding rounds (decode, verify, peel) a certified search makes before its scans.
ROUNDS = 8
#: Without a cut, the buckets decoded are those at least this many noise deviations large
#: (and at most the search's pool of them).
SIGMAS = 3.0
#: Decoding is chosen when it reads fewer than this fraction of the values a scan reads:
#: bits x buckets x repetitions against the m p entries (``method="auto"``).
COST = 0.25
#: compress(decode="auto") makes bit sketches for products of sparse factors with at least
#: this many entries (m p), on the GPU and on the CPU.  Measured with 16 values per vector
#: (fresh compress + certified top-k of the planted entries): on an H100 the decoding flow
#: lost at 2^32 - 2^36 entries (0.060 - 0.133 s against 0.045 - 0.100 s: the bit sketches'
#: compression costs more than the scan it saves) and won 4x at 2^40 (0.48 s against 1.90 s);
#: on 2 CPU cores it lost at 2^32 (2.4 s against 2.0 s), won at 2^34 (5.2 s against 5.7 s)
#: and 4x at 2^36 (12.6 s against 52.9 s).
AUTO_ENTRIES = {"gpu": 1 << 38, "cpu": 1 << 34}


def row_bits(m: int) -> int:
    """L: the bits of a row index below m (at least 1)."""
    return max(1, (int(m) - 1).bit_length())


@dataclass
class BitSketch:
    """The bit sketches of a CompressedProduct: (``reps`` x ``bits``, b) float64 (NumPy or
    CuPy), pseudo-repetition (t, l) at row t * bits + l."""

    reps: int
    bits: int
    sketch: object

    def params(self, params: hashing.HashParams) -> hashing.HashParams:
        """The hash parameters of the pseudo-repetitions alone."""
        return hashing.with_row_bits(params, self.reps, self.bits, main=False)


def check(value) -> bool | str:
    """``compress``'s ``decode=`` argument: True, False or "auto"."""
    if isinstance(value, (bool, np.bool_)) or value == "auto":
        return value if value == "auto" else bool(value)
    raise ValueError(f"decode={value!r}: choose True (make the bit sketches decoding needs), "
                     "False, or 'auto' (for large products of sparse factors)")


def wanted(value, sparse: bool, gram: bool, m: int, p: int, gpu: bool) -> bool:
    """Whether a compression makes bit sketches (``value`` checked by :func:`check`)."""
    if value == "auto":
        return sparse and not gram and m * p >= AUTO_ENTRIES["gpu" if gpu else "cpu"]
    if value and gram:
        raise ValueError("decode=True: decoding is not available for Gram sketches (their bit "
                         "sketches would read i AND j); use decode=False")
    return bool(value)


def pays(cp) -> bool:
    """Whether decoding reads fewer values than a scan (``method="auto"``)."""
    bits = cp.bits
    if bits is None:
        return False
    m, p = cp.shape
    return bits.reps * (bits.bits + 1) * cp.buckets < COST * m * p


def _members(cp, t: int):
    """(starts (b + 1), columns sorted by h2_t): the columns of each bucket of h2_t (cached
    on the product, with its hash parameters)."""
    xp = cp.backend.xp
    cache = cp.__dict__.setdefault("_members", {})
    key = (t, cp.log2b, id(cp.params))
    if key not in cache:
        h2 = hashing.bucket_table(cp.params, 2, xp.arange(cp.shape[1], dtype=xp.int64),
                                  cp.log2b, xp, reps=t)
        if cp.backend.gpu:
            from .cuda import kernels
            starts, members = kernels.bucket_members(h2, cp.buckets)
        else:
            starts, members = compiled.bucket_members(h2, cp.buckets)
        cache.clear()
        cache[key] = (starts[0], members[0])
    return cache[key]


def _rows(reading, m: int, xp):
    """(bucket index, row) pairs: each bucket's row from its bit readings (L, H) (bit l is 1
    when the reading exceeds 1/2), and the rows its :data:`AMBIGUOUS` least clear bits
    flipped give, when those readings lie in (1/4, 3/4); rows >= m dropped."""
    L, H = reading.shape
    one = reading > 0.5
    weights = xp.asarray((np.uint64(1) << np.arange(L, dtype=np.uint64)).astype(np.int64))
    row = (one.astype(xp.int64) * weights[:, None]).sum(axis=0)
    f = min(AMBIGUOUS, L)
    clear = xp.abs(reading - 0.5)
    pos = xp.argsort(clear, axis=0)[:f]                                 # (f, H)
    unclear = xp.take_along_axis(clear, pos, axis=0) < 0.25
    flips = xp.where(unclear, weights[pos], 0)                          # (f, H)
    pattern = xp.asarray(((np.arange(1 << f)[:, None] >> np.arange(f)) & 1).astype(np.int64))
    delta = xp.zeros((1 << f, H), dtype=xp.int64)      # the flipped bits: distinct powers
    for q in range(f):
        delta += pattern[:, q:q + 1] * flips[q][None]
    rows = row[None] ^ delta                                            # (2^f, H)
    bucket = xp.broadcast_to(xp.arange(H, dtype=xp.int64)[None], rows.shape)
    keep = rows < m
    first = xp.ones(rows.shape, dtype=bool)       # a pattern that flips no unclear bit twice
    first[1:] = delta[1:] != 0
    keep &= first
    return bucket[keep], rows[keep]


def candidates(cp, residual, bits_residual, level: float, cap: int):
    """Sorted flat ids of the entries decoded from the buckets of the decoding repetitions
    of ``residual`` whose magnitude is >= ``level`` (at most the ``cap`` largest of each),
    whose median key (magnitude) over all repetitions of ``residual`` is >= :data:`ACCEPT`
    x ``level``."""
    xp = cp.backend.xp
    bs = cp.bits
    m, p = cp.shape
    b = cp.buckets
    found = []
    for t in range(bs.reps):
        mag = xp.abs(residual[t])
        heavy = xp.nonzero((mag >= level) & (mag > 0))[0]
        if heavy.size > cap:             # the largest, ties to the smaller bucket (any device)
            keep = xp.lexsort(xp.stack([heavy, -mag[heavy]]))
            heavy = xp.sort(heavy[keep[:cap]])
        if heavy.size == 0:
            continue
        value = residual[t, heavy]
        reading = bits_residual[t * bs.bits:(t + 1) * bs.bits][:, heavy] / value[None]
        which, rows = _rows(reading, m, xp)
        u = heavy[which]
        h1 = hashing.bucket_table(cp.params, 1, rows, cp.log2b, xp, reps=t)[0]
        want = _column_bucket(cp.method, u, h1, b, xp)
        starts, members = _members(cp, t)
        lo, count = starts[want], starts[want + 1] - starts[want]
        total = int(count.sum())
        if total == 0:
            continue
        owner = xp.repeat(xp.arange(rows.size, dtype=xp.int64), count)
        offset = xp.arange(total, dtype=xp.int64) - xp.repeat(xp.cumsum(count) - count, count)
        cols = members[lo[owner] + offset]
        found.append(rows[owner] * p + cols)
    if not found:
        return xp.empty(0, xp.int64)
    ids = xp.unique(xp.concatenate(found))
    h1, s1 = cp._hashes(1, ids // p)
    h2, s2 = cp._hashes(2, ids % p)
    key = xp.abs(cp._median(cp._values(h1, s1, h2, s2, residual)))
    return ids[key >= ACCEPT * level]


def _column_bucket(method: str, u, h1, b: int, xp):
    """The bucket of h2 that puts an entry of row bucket h1 into bucket u."""
    if method == "fwht":
        return u ^ h1
    return (u - h1) % b


def level(residual, t: int, sigma: float, cap: int, xp) -> float:
    """The decoding level without a cut: :data:`SIGMAS` noise deviations, raised to the
    ``cap``-th largest bucket magnitude of repetition t."""
    mag = xp.abs(residual[t])
    lo = SIGMAS * sigma
    if cap < mag.size:
        kth = float(-xp.partition(-mag, cap - 1)[cap - 1])
        lo = max(lo, kth)
    return lo

