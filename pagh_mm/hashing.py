"""Seeded hash families for Count-Sketch: bucket functions h1, h2 into [b] and
sign functions s1, s2 into {-1, +1}, one independent set per repetition t.

Every parameter is drawn from ``numpy.random.SeedSequence([seed, t, family])``, so a
function depends on (family, seed, t, b) alone.  Evaluation is plain uint64
arithmetic (wrapping multiplication, shifts, XOR, table lookups) that NumPy and
CuPy carry out identically.  Keys are indices below 2**32.

Pagh's variance bound (each repetition's estimate of C[i, j] has variance at most
||C||_F^2 / b) needs the *combined* bucket of an entry, h1(i) XOR h2(j) (``fwht``) or
h1(i) + h2(j) mod b (``fft``), to collide with another entry's with probability 1/b.
That holds when each bucket function is strongly universal (pairwise independent):
then h1(x) XOR h1(x') and h1(x) - h1(x') are uniform for x != x'.

Families offered (``hash=``):

* ``"multiply-add-shift"`` (default; Dietzfelbinger 1996, Thorup 2015):
  h(x) = ((a x + c) mod 2^64) >> (64 - l), strongly universal for 32-bit keys and
  l <= 32 buckets bits; one multiply-add per key.
* ``"tabulation"``: simple tabulation, the XOR of four byte-indexed tables of random
  64-bit words (3-independent, so strongly universal); four lookups per key.

* ``"polynomial"``: a random polynomial of degree 3 over GF(2^61 - 1) (Carter and Wegman
  1979), 4-independent; the top bits of its value are the bucket, a second polynomial's
  top bit the sign.  Three multiplications modulo 2^61 - 1 per key, in 32-bit limbs.
  Gram products (:func:`pagh_mm.compress_gram`) need it: with one hash function on both
  sides an entry's bucket h(i) XOR h(j) must collide with another entry's h(k) XOR h(l)
  with probability 1/b for *four* distinct keys, which 3-independent families do not give
  (simple tabulation puts (i, j) and (k, l) in one bucket, with one sign, whenever the
  four keys form a rectangle of bytes; multiply-add-shift crowds the entries (i, i + s)
  of a band into a few hundred buckets).

Signs always come from a strongly universal function of their own (multiply-add-shift's
top bit, or the tabulation tables of roles s1/s2), independent of the buckets.

``"multiply-shift"`` (h(x) = (a x mod 2^64) >> (64 - l)) is only 2-universal: it bounds
P[h(x) = h(x')] but not the distribution of h(x) XOR h(x'), and structured keys collide
far more often than 1/b (entries (x, y) and (3x, 3y): about 10/b at b = 2^10, 30/b at
b = 2^14).  It was the default before format version 2; it is no longer offered for new
sketches, and sketch files made with it still load (with a warning) and give the
estimates they always gave.
"""
from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

#: Families offered for new sketches; the first is the default.
FAMILIES = ("multiply-add-shift", "tabulation", "polynomial")
#: Families whose functions are 4-independent (what Gram sketches need).
FOUR_INDEPENDENT = ("polynomial",)
DEFAULT_FAMILY = FAMILIES[0]
#: Families that old sketch files may use; they load, but are not offered for new sketches.
LEGACY_FAMILIES = ("multiply-shift",)
ALL_FAMILIES = FAMILIES + LEGACY_FAMILIES
#: Part of every parameter draw (fixed forever: it keeps old sketches reproducible).
_FAMILY_ID = {"multiply-shift": 0, "multiply-add-shift": 1, "tabulation": 2, "polynomial": 3}
#: The Mersenne prime of the polynomial family.
P61 = (1 << 61) - 1
#: The four functions of a repetition, in the order their parameters are drawn.
ROLES = ("h1", "h2", "s1", "s2")
MAX_KEY = 1 << 32
#: Seeds are kept as decimal text in sketch files: at most this many bits (1233 digits).
MAX_SEED_BITS = 4096


def check_family(hash: str, *, legacy: bool = False) -> str:
    """``hash`` itself; ValueError naming the offered families otherwise (``legacy``: also
    accept the families old files may hold)."""
    if hash in FAMILIES or (legacy and hash in LEGACY_FAMILIES):
        return hash
    if hash in LEGACY_FAMILIES:
        raise ValueError(
            f"hash={hash!r} is no longer offered: it is only 2-universal, so entries with "
            "structured indices (such as (x, y) and (3x, 3y)) share a bucket up to 30 times "
            "more often than 1/buckets and the variance bound fails; use "
            f"hash={DEFAULT_FAMILY!r} (the default) or 'tabulation'")
    raise ValueError(f"hash={hash!r}; choose one of {', '.join(map(repr, FAMILIES))}")


def check_seed(seed, name: str = "seed") -> int:
    """A seed as a Python int: any non-negative integer (``None``: a fresh random one)."""
    if seed is None:
        return int(np.random.default_rng().integers(2**63))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name}={seed!r} must be a non-negative integer (or None for a random "
                        "one)")
    if int(seed) < 0:
        raise ValueError(f"{name}={seed} must be a non-negative integer")
    if int(seed).bit_length() > MAX_SEED_BITS:
        raise ValueError(f"{name} has {int(seed).bit_length()} bits; sketch files hold seeds of up "
                         f"to {MAX_SEED_BITS} bits")
    return int(seed)


@dataclass(frozen=True)
class HashParams:
    """Parameters of the 4 x reps functions: ``a``, ``c`` (reps, 4) uint64; for
    tabulation, ``tables`` (reps, 4, 4, 256) uint64 (role, byte, value); for the polynomial
    family, ``coefficients`` (reps, 4, 4) uint64 below 2^61 - 1 (role, power 0..3)."""

    family: str
    seed: int
    reps: int
    a: np.ndarray
    c: np.ndarray
    tables: np.ndarray | None
    coefficients: np.ndarray | None = None
    #: Decoding pseudo-repetitions (:func:`with_row_bits`): per repetition, -1, or the bit
    #: of the row index that multiplies s1 (rows whose bit is 0 are left out of the sketch).
    row_bits: np.ndarray | None = None

    @staticmethod
    def draw(family: str, seed: int, reps: int) -> "HashParams":
        """The functions of ``reps`` repetitions drawn from (``seed``, t), read-only (the same
        object for the same small arguments: drawn once)."""
        check_family(family, legacy=True)
        seed, reps = check_seed(seed), int(reps)
        if family == "tabulation" or reps > CACHED_REPS:    # large: not kept
            return _draw.__wrapped__(family, seed, reps)
        return _draw(family, seed, reps)

    def to_arrays(self) -> dict:
        """The arrays a sketch file stores (the seed as decimal text: it may exceed 64 bits)."""
        out = {"hash_family": np.array(self.family), "hash_seed": np.array(str(self.seed)),
               "hash_a": self.a, "hash_c": self.c}
        if self.tables is not None:
            out["hash_tables"] = self.tables
        if self.coefficients is not None:
            out["hash_coefficients"] = self.coefficients
        return out

    @staticmethod
    def from_arrays(d) -> "HashParams":
        """Inverse of :meth:`to_arrays` (also reads format-1 files, whose seed is an int64)."""
        tables = np.asarray(d["hash_tables"], np.uint64) if "hash_tables" in d else None
        coef = np.asarray(d["hash_coefficients"], np.uint64) if "hash_coefficients" in d else None
        a = np.asarray(d["hash_a"], np.uint64)
        return HashParams(str(d["hash_family"]), int(str(d["hash_seed"])), a.shape[0], a,
                          np.asarray(d["hash_c"], np.uint64), tables, coef)

    def same_as(self, other: "HashParams") -> bool:
        def same(x, y):
            return (x is None) == (y is None) and (x is None or np.array_equal(x, y))
        return (self.family == other.family and self.seed == other.seed and self.reps == other.reps
                and np.array_equal(self.a, other.a) and np.array_equal(self.c, other.c)
                and same(self.tables, other.tables)
                and same(self.coefficients, other.coefficients)
                and same(self.row_bits, other.row_bits))

    def __eq__(self, other) -> bool:
        return isinstance(other, HashParams) and self.same_as(other)

    __hash__ = None


#: Draws kept (family, seed, reps), of at most CACHED_REPS repetitions and not tabulation
#: (32 KiB of tables per repetition): a few KiB each.
CACHED_DRAWS = 64
CACHED_REPS = 64


@functools.lru_cache(maxsize=CACHED_DRAWS)
def _draw(family: str, seed: int, reps: int) -> HashParams:
    a = np.empty((reps, 4), np.uint64)
    c = np.empty((reps, 4), np.uint64)
    tables = np.empty((reps, 4, 4, 256), np.uint64) if family == "tabulation" else None
    coef = np.empty((reps, 4, 4), np.uint64) if family == "polynomial" else None
    for t in range(reps):
        rng = np.random.default_rng(np.random.SeedSequence([seed, t, _FAMILY_ID[family]]))
        words = rng.integers(0, 2**64, size=(4, 2), dtype=np.uint64, endpoint=False)
        a[t] = words[:, 0] | np.uint64(1)          # odd multipliers
        c[t] = words[:, 1]
        if tables is not None:
            tables[t] = rng.integers(0, 2**64, size=(4, 4, 256), dtype=np.uint64)
        if coef is not None:
            coef[t] = rng.integers(0, P61, size=(4, 4), dtype=np.uint64)
    for x in (a, c, tables, coef):
        if x is not None:
            x.setflags(write=False)
    return HashParams(family, seed, reps, a, c, tables, coef)


def with_row_bits(params: HashParams, reps: int, bits: int, main: bool = True) -> HashParams:
    """``params`` (if ``main``) followed by reps x bits decoding pseudo-repetitions (t, l),
    t < ``reps`` outer, l < ``bits`` inner: repetition t's functions, with s1(i) multiplied by
    bit l of i.  Sketched with these, the pseudo-repetition (t, l) is repetition t's sketch
    of the product with A's rows whose bit l is 0 left out (:mod:`pagh_mm.decode`)."""
    if params.row_bits is not None:
        raise ValueError("these hash parameters already carry decoding repetitions")
    if not 0 <= reps <= params.reps:
        raise ValueError(f"reps={reps} decoding repetitions: 0 .. {params.reps} (the sketch's)")
    base = np.repeat(np.arange(reps), bits)
    bit = np.tile(np.arange(bits), reps)
    if main:
        base = np.concatenate([np.arange(params.reps), base])
        bit = np.concatenate([np.full(params.reps, -1), bit])

    def take(x):
        return None if x is None else np.ascontiguousarray(x[base])
    return HashParams(params.family, params.seed, int(base.size), take(params.a), take(params.c),
                      take(params.tables), take(params.coefficients), bit.astype(np.int64))


def distinct_rows(params: HashParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, base, bit): the repetitions whose functions differ (``rows``, increasing, int64),
    and for every repetition r the index ``base[r]`` in ``rows`` of the one with r's functions
    and the row bit ``bit[r]`` (-1: none) that masks r's s1 (:func:`with_row_bits`) (int32):
    a kernel hashes the distinct repetitions once and derives the decoding ones."""
    rows: list[int] = []
    seen: dict[bytes, int] = {}
    base = np.empty(params.reps, np.int32)
    parts = [x for x in (params.a, params.c, params.tables, params.coefficients) if x is not None]
    for r in range(params.reps):
        key = b"".join(np.ascontiguousarray(x[r]).tobytes() for x in parts)
        if key not in seen:
            seen[key] = len(rows)
            rows.append(r)
        base[r] = seen[key]
    bit = np.full(params.reps, -1, np.int32) if params.row_bits is None else \
        np.asarray(params.row_bits, np.int32)
    return np.asarray(rows, np.int64), base, bit


def _raw(params: HashParams, role: int, keys, xp, affine: bool, reps=None):
    """64 hash bits of each key for repetitions ``reps`` (default all): (len(reps), *keys.shape)."""
    t = np.arange(params.reps) if reps is None else np.atleast_1d(np.asarray(reps))
    expand = (slice(None),) + (None,) * keys.ndim
    if params.family == "polynomial":                           # top 61 bits: the value
        if xp is not np:                                        # CuPy: one kernel (hash.cu)
            from .cuda import kernels
            out = kernels.poly61(keys, params.coefficients[t, role])
            return out.reshape((t.size,) + keys.shape)
        coef = xp.asarray(params.coefficients[t, role])         # (r, 4)
        v = xp.broadcast_to(coef[:, 3][expand], (t.size,) + keys.shape)
        for power in (2, 1, 0):
            v = _addmod61(_mulmod61(v, keys[None], xp), coef[:, power][expand], xp)
        return v << np.uint64(3)
    if params.family == "tabulation":
        tab = xp.asarray(params.tables[t, role])                # (r, 4, 256)
        out = xp.zeros((t.size,) + keys.shape, dtype=xp.uint64)
        for byte in range(4):
            idx = ((keys >> np.uint64(8 * byte)) & np.uint64(255)).astype(xp.int64)
            out ^= tab[:, byte][:, idx]
        return out
    a = xp.asarray(params.a[t, role])[expand]
    if affine:
        return keys[None] * a + xp.asarray(params.c[t, role])[expand]
    return keys[None] * a


_M29, _M32, _P61 = np.uint64((1 << 29) - 1), np.uint64((1 << 32) - 1), np.uint64(P61)


def _reduce61(s, xp):
    """s mod 2^61 - 1 for s < 2^63 (two folds and a conditional subtraction)."""
    s = (s & _P61) + (s >> np.uint64(61))
    return xp.where(s >= _P61, s - _P61, s)


def _mulmod61(x, y, xp):
    """x y mod 2^61 - 1 for x, y < 2^61, in 32-bit limbs of uint64 words (the same bits on
    NumPy and CuPy): 2^64 = 8 and 2^61 = 1 modulo 2^61 - 1."""
    x0, x1 = x & _M32, x >> np.uint64(32)
    y0, y1 = y & _M32, y >> np.uint64(32)
    lo = x0 * y0                                   # < 2^64
    mid = x1 * y0 + x0 * y1                        # < 2^62
    s = ((x1 * y1) << np.uint64(3)) + (mid >> np.uint64(29)) + ((mid & _M29) << np.uint64(32)) \
        + (lo & _P61) + (lo >> np.uint64(61))      # < 2^63
    return _reduce61(s, xp)


def _addmod61(x, y, xp):
    return _reduce61(x + y, xp)


def _keys(keys, xp):
    keys = xp.asarray(keys)
    if keys.dtype.kind not in "iu":
        raise TypeError(f"hash keys must be integers, got dtype {keys.dtype}")
    return keys.astype(xp.uint64)


def bucket_table(params: HashParams, which: int, keys, log2b: int, xp=np, reps=None):
    """h1 (which=1) or h2 (which=2) of ``keys`` into [2**log2b] for every repetition (or
    those in ``reps``), shape (reps, *keys.shape), int64."""
    keys = _keys(keys, xp)
    n = params.reps if reps is None else np.atleast_1d(np.asarray(reps)).size
    if log2b == 0:
        return xp.zeros((n,) + keys.shape, dtype=xp.int64)
    affine = params.family != "multiply-shift"
    h = _raw(params, which - 1, keys, xp, affine, reps)
    return (h >> np.uint64(64 - log2b)).astype(xp.int64)


def sign_table(params: HashParams, which: int, keys, xp=np, dtype=np.float64, reps=None):
    """s1 (which=1) or s2 (which=2) of ``keys``: +1 or -1 in ``dtype``, shape (reps, *keys.shape)."""
    keys = _keys(keys, xp)
    bit = (_raw(params, 1 + which, keys, xp, True, reps) >> np.uint64(63)).astype(xp.int8)
    out = (1 - 2 * bit).astype(dtype)
    if which == 1 and params.row_bits is not None:          # decoding: rows masked by a bit
        t = np.arange(params.reps) if reps is None else np.atleast_1d(np.asarray(reps))
        lbit = params.row_bits[t]
        if (lbit >= 0).any():
            shift = xp.asarray(np.maximum(lbit, 0).astype(np.uint64)).reshape(
                (-1,) + (1,) * keys.ndim)
            on = ((keys[None] >> shift) & np.uint64(1)).astype(dtype)
            keep = xp.asarray(lbit < 0).reshape((-1,) + (1,) * keys.ndim)
            out = xp.where(keep, out, out * on)
    return out


def buckets(params: HashParams, t: int, which: int, keys, log2b: int, xp=np):
    """h1 (which=1) or h2 (which=2) of ``keys`` into [2**log2b] in repetition t, as int64."""
    return bucket_table(params, which, keys, log2b, xp, reps=t)[0]


def signs(params: HashParams, t: int, which: int, keys, xp=np, dtype=np.float64):
    """s1 (which=1) or s2 (which=2) of ``keys`` in repetition t: +1 or -1 in ``dtype``."""
    return sign_table(params, which, keys, xp, dtype, reps=t)[0]
