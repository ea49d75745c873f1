"""Seeded hash families for Count-Sketch: bucket functions h1, h2 into [b] and
sign functions s1, s2 into {-1, +1}, one independent set per repetition t.

Every parameter is drawn from ``numpy.random.SeedSequence([seed, t, ...])``, so a
function depends on (family, seed, t, b) alone.  Evaluation is plain uint64
arithmetic (wrapping multiplication, shifts, XOR, table lookups) that NumPy and
CuPy carry out identically.  Keys are indices below 2**32.

Families (``hash=``):

* ``"multiply-shift"`` (default, Dietzfelbinger et al.): h(x) = (a x mod 2^64) >> (64 - l),
  a odd; 2-universal buckets.  Signs need pairwise independence for unbiased
  estimates, which multiply-shift does not give, so signs use multiply-add-shift.
* ``"multiply-add-shift"``: h(x) = ((a x + c) mod 2^64) >> (64 - l), strongly universal
  (pairwise independent) for 32-bit keys and l <= 32, for buckets and signs.
* ``"tabulation"``: simple tabulation, XOR of four byte-indexed tables of random 64-bit
  words (3-independent), for buckets and signs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FAMILIES = ("multiply-shift", "multiply-add-shift", "tabulation")
_FAMILY_ID = {f: i for i, f in enumerate(FAMILIES)}
#: The four functions of a repetition, in the order their parameters are drawn.
ROLES = ("h1", "h2", "s1", "s2")
MAX_KEY = 1 << 32


def check_family(hash: str) -> str:
    if hash not in FAMILIES:
        raise ValueError(f"hash={hash!r}; choose one of {', '.join(FAMILIES)}")
    return hash


@dataclass(frozen=True)
class HashParams:
    """Parameters of the 4 x reps functions: ``a``, ``c`` (reps, 4) uint64 and, for
    tabulation, ``tables`` (reps, 4, 4, 256) uint64 (role, byte, value)."""

    family: str
    seed: int
    reps: int
    a: np.ndarray
    c: np.ndarray
    tables: np.ndarray | None

    @staticmethod
    def draw(family: str, seed: int, reps: int) -> "HashParams":
        check_family(family)
        a = np.empty((reps, 4), np.uint64)
        c = np.empty((reps, 4), np.uint64)
        tables = np.empty((reps, 4, 4, 256), np.uint64) if family == "tabulation" else None
        for t in range(reps):
            rng = np.random.default_rng(np.random.SeedSequence([int(seed), t, _FAMILY_ID[family]]))
            words = rng.integers(0, 2**64, size=(4, 2), dtype=np.uint64, endpoint=False)
            a[t] = words[:, 0] | np.uint64(1)          # odd multipliers
            c[t] = words[:, 1]
            if tables is not None:
                tables[t] = rng.integers(0, 2**64, size=(4, 4, 256), dtype=np.uint64)
        return HashParams(family, int(seed), reps, a, c, tables)

    def to_arrays(self) -> dict:
        out = {"hash_family": np.array(self.family), "hash_seed": np.array(self.seed, np.int64),
               "hash_a": self.a, "hash_c": self.c}
        if self.tables is not None:
            out["hash_tables"] = self.tables
        return out

    @staticmethod
    def from_arrays(d) -> "HashParams":
        tables = d["hash_tables"] if "hash_tables" in d else None
        a = np.asarray(d["hash_a"], np.uint64)
        return HashParams(str(d["hash_family"]), int(d["hash_seed"]), a.shape[0], a,
                          np.asarray(d["hash_c"], np.uint64), tables)

    def same_as(self, other: "HashParams") -> bool:
        return (self.family == other.family and self.seed == other.seed and self.reps == other.reps
                and np.array_equal(self.a, other.a) and np.array_equal(self.c, other.c))


def _raw(params: HashParams, t: int, role: int, keys, xp, affine: bool):
    """64 hash bits of each key (uint64)."""
    if params.family == "tabulation":
        tab = xp.asarray(params.tables[t, role])
        out = xp.zeros(keys.shape, dtype=xp.uint64)
        for byte in range(4):
            idx = ((keys >> np.uint64(8 * byte)) & np.uint64(255)).astype(xp.int64)
            out ^= tab[byte][idx]
        return out
    a = np.uint64(params.a[t, role])
    if affine:
        return keys * a + np.uint64(params.c[t, role])
    return keys * a


def buckets(params: HashParams, t: int, which: int, keys, log2b: int, xp=np):
    """h1 (which=1) or h2 (which=2) of ``keys`` into [2**log2b], as int64."""
    keys = xp.asarray(keys).astype(xp.uint64)
    role = which - 1
    affine = params.family == "multiply-add-shift"
    if log2b == 0:
        return xp.zeros(keys.shape, dtype=xp.int64)
    h = _raw(params, t, role, keys, xp, affine)
    return (h >> np.uint64(64 - log2b)).astype(xp.int64)


def signs(params: HashParams, t: int, which: int, keys, xp=np, dtype=np.float64):
    """s1 (which=1) or s2 (which=2) of ``keys``: +1 or -1 in ``dtype``."""
    keys = xp.asarray(keys).astype(xp.uint64)
    role = 1 + which
    bit = (_raw(params, t, role, keys, xp, True) >> np.uint64(63)).astype(xp.int8)
    return (1 - 2 * bit).astype(dtype)
