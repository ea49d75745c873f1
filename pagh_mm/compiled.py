"""Compiled CPU kernels of pagh_mm (numba), with the NumPy path's operations and orders.

* :func:`scatter_dense`: the Count-Sketches of dense vectors for every repetition in one
  read of the input.  Each bucket's value is 0.0 plus the signed values s(i) x_i of its keys,
  added one at a time in increasing key order: the order of the SciPy scatter-matrix product
  it replaces (and of the GPU kernel), so the bits are the same.
* :class:`Fused`: the whole FWHT compression of a block of inner indices, one inner index
  at a time in the cache: scatter both sketches (dense or sparse vectors), cast to the
  transform dtype, run the Plan's stages (:func:`fwht_gpu.compiled.serial`), multiply, and
  sum the terms in the pairwise tree of :mod:`pagh_mm.reduction`, keeping one partial sum
  per tree level.  Every term and every addition is the NumPy engine's, so the sketch has
  its bits.  Threads take disjoint aligned chunks of the tree (nodes of it), which are then
  combined as the tree combines them: the number of threads never changes a result.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from fwht_gpu import compiled as fcompiled

#: Whether pagh_mm uses these kernels (PAGH_MM_COMPILED=0: the NumPy/SciPy path, e.g. to
#: compare the two).
ENABLED = os.environ.get("PAGH_MM_COMPILED", "1") != "0"

#: Inner indices per chunk of the fused kernel (a power of two): its tree keeps
#: log2(CHUNK) + 2 buffers of d x b values per thread.
CHUNK = 64
#: Inner indices per chunk when every index is added pair by pair (no transform buffers).
CHUNK_DIRECT = 4096
#: How many butterflies of a transform cost about as much as one pair's random update.
PAIR_COST = 8


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import _cpu_kernels as k
    return (k.scatter, k.fused, k.tile_estimates, k.tile_estimates5, k.pair_dots,
            k.select_tile, k.select_fill, k.tile_keys, k.scan_tile5, k.pruned_scan5,
            k.pairs_only, k.scan_tile_odd)


def scatter_dense(X, h, s, b: int):
    """(nb, d, b) float64 sketches of the columns of the (keys, nb) float64 array ``X`` (any
    strides) with buckets ``h`` and signs ``s`` ((keys, d) int64 and float64, C order)."""
    keys, nb = X.shape
    d = h.shape[1]
    out = np.zeros((nb, d, b), dtype=np.float64)
    if nb and keys:
        _kernels()[0](np.ascontiguousarray(X.T), h, s, out)
    return out


def tile_estimates(h1, s1, h2, s2, sketch, fwht: bool, gram: bool, shift: int = -(1 << 62)):
    """(rows, cols) median estimates of a query tile from the (d, rows) and (d, cols) hashes
    and signs: the NumPy path's values (:mod:`pagh_mm.query`), threads over rows; entries
    (r, c) with c < r + ``shift`` are left 0.0 (not computed)."""
    out = np.empty((h1.shape[1], h2.shape[1]), dtype=np.float64)
    if out.size:
        args = (np.ascontiguousarray(h1), np.ascontiguousarray(s1, dtype=np.float64),
                np.ascontiguousarray(h2.T), np.ascontiguousarray(s2.T, dtype=np.float64),
                np.ascontiguousarray(sketch, dtype=np.float64))
        if fwht and h1.shape[0] == 5:
            _kernels()[3](*args, gram, shift, out)
        else:
            _kernels()[2](*args, fwht, gram, shift, out)
    return out


def pair_dots(rows, cols, r, c):
    """(sums, bounds): sum_k A[r, k] B[k, c] and sum_k |A[r, k] B[k, c]| in increasing k, from
    ``rows`` (A's CSR: indptr, indices, data) and ``cols`` (B's CSC), threads over pairs."""
    out = np.empty(r.size, dtype=np.float64)
    bound = np.empty(r.size, dtype=np.float64)
    if r.size:
        _kernels()[4](*rows, *cols, np.ascontiguousarray(r, dtype=np.int64),
                      np.ascontiguousarray(c, dtype=np.int64), out, bound)
    return out, bound


def select_tile(est, r0: int, c0: int, p: int, by_abs: bool, skip_diagonal: bool,
                upper: bool, lim: float, cut: float, most: int | None = None):
    """(estimates, flat ids, largest key below ``cut``) of a scan tile's entries whose key
    (|estimate| or estimate; -inf on the diagonal with ``skip_diagonal`` and below it with
    ``upper``) is >= ``lim`` (> -inf when ``lim`` is -inf), in row-major order: the NumPy
    scan's selection (:func:`pagh_mm.query.scan`) in two compiled passes."""
    ks = _kernels()
    rows = est.shape[0]
    counts = np.empty(rows, dtype=np.int64)
    lows = np.empty(rows, dtype=np.float64)
    strict = lim == -np.inf
    args = (est, r0, c0, p, by_abs, skip_diagonal, upper, float(lim), strict)
    ks[5](*args, float(cut), counts, lows)
    if most is not None and int(counts.sum()) > 4 * most:
        keys = np.empty(est.size, dtype=np.float64)
        ks[7](est, r0, c0, by_abs, skip_diagonal, upper, keys)
        kth = float(np.partition(keys, keys.size - most)[keys.size - most])
        if kth > lim:
            args = (est, r0, c0, p, by_abs, skip_diagonal, upper, kth, False)
            ks[5](*args, -np.inf, counts, np.empty(rows, dtype=np.float64))
    starts = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    values = np.empty(int(starts[-1]), dtype=np.float64)
    ids = np.empty(int(starts[-1]), dtype=np.int64)
    ks[6](*args, starts, values, ids)
    return values, ids, float(lows.max(initial=-np.inf))


#: Passing entries each row of a one-pass scan tile keeps at first (more: the tile is
#: scanned again in one pass with room for them, or the two-pass way when that room would
#: take more than :data:`ROW_ROOM_BYTES`).
ROW_ROOM = 32
ROW_ROOM_BYTES = 64 << 20
#: The same for :func:`pruned_scan` (whose rows hold the entries of heavy buckets).
PRUNED_ROOM = 256


def scan_tile(h1, s1, h2, s2, sketch, gram: bool, diagonal, shift: int, r0: int, c0: int,
              p: int, by_abs: bool, skip_diagonal: bool, lim: float, cut: float):
    """:func:`tile_estimates` (an odd number of repetitions of an FWHT sketch) and
    :func:`select_tile` in one pass that never holds the tile: (estimates, flat ids, a bound on
    the keys below cut), or None when the passing entries would take more than
    :data:`ROW_ROOM_BYTES`."""
    rows = h1.shape[1]
    counts = np.empty(rows, dtype=np.int64)
    lows = np.empty(rows, dtype=np.float64)
    diag = np.zeros(1) if diagonal is None else np.ascontiguousarray(diagonal, dtype=np.float64)
    args = (np.ascontiguousarray(h1), np.ascontiguousarray(s1, dtype=np.float64),
            np.ascontiguousarray(h2.T), np.ascontiguousarray(s2.T, dtype=np.float64),
            np.ascontiguousarray(sketch, dtype=np.float64), gram, diag, shift, r0, c0,
            by_abs, skip_diagonal, float(lim), lim == -np.inf, float(cut))
    if h1.shape[0] % 2 == 0:
        raise ValueError(f"scan_tile: {h1.shape[0]} repetitions; the one-pass scan takes "
                         "odd counts")
    kernel = _kernels()[8] if h1.shape[0] == 5 else _kernels()[11]
    got = _with_room(kernel, args, counts, lows, ROW_ROOM)
    if got is None:
        return None
    vals, cols, keep = got
    r = np.nonzero(keep)[0]
    ids = (r0 + r) * p + c0 + cols[keep]
    return vals[keep], ids, float(lows.max(initial=-np.inf))


def _with_room(kernel, args, counts, lows, room: int):
    """Run a per-row selecting ``kernel(*args, vals, cols, counts, lows)`` with ``room``
    entries per row, again with room for the most crowded row when one has more (None when
    that would take more than :data:`ROW_ROOM_BYTES`): (vals, cols, which are filled, in
    row-major order)."""
    rows = counts.size
    room = max(1, min(room, ROW_ROOM_BYTES // (16 * max(1, rows))))
    while True:
        vals = np.empty((rows, room), dtype=np.float64)
        cols = np.empty((rows, room), dtype=np.int64)
        kernel(*args, vals, cols, counts, lows)
        most = int(counts.max()) if rows else 0
        if most <= room:
            return vals, cols, np.arange(room)[None, :] < counts[:, None]
        if 16 * rows * most > ROW_ROOM_BYTES:
            return None
        room = most                     # crowded rows: once more with room for them all


def bucket_members(h, b: int):
    """(starts (d, b + 1), members (d, n)) of the (d, n) buckets ``h``: per repetition t the
    indices in bucket v are members[t, starts[t, v]:starts[t, v + 1]], increasing."""
    d, n = h.shape
    members = np.argsort(h, axis=1, kind="stable").astype(np.int64)
    starts = np.zeros((d, b + 1), dtype=np.int64)
    for t in range(d):
        np.cumsum(np.bincount(h[t], minlength=b), out=starts[t, 1:])
    return starts, members


def heavy_buckets(sketch, factor: float, lim: float):
    """(buckets, starts (4,), bitmap, bound) of the five-repetition ``sketch`` at ``lim``:
    the heavy buckets (|value| x ``factor``, an estimate's magnitude there, >= ``lim``) of
    repetitions 0, 1, 2, concatenated; every repetition's heavy buckets as bits ((5, words)
    uint64, bucket v at bit v % 64 of word v // 64); the largest magnitude of the other
    buckets (-inf when there is none)."""
    mags = np.abs(sketch) * factor
    heavy = mags >= lim
    ids = [np.flatnonzero(heavy[t]).astype(np.int64) for t in range(3)]
    starts = np.zeros(4, dtype=np.int64)
    np.cumsum([x.size for x in ids], out=starts[1:])
    d, b = heavy.shape
    bits = np.zeros((d, -(-b // 64) * 64), dtype=np.uint8)
    bits[:, :b] = heavy
    bitmap = np.packbits(bits.reshape(d, -1, 8), axis=-1, bitorder="little")
    bitmap = np.ascontiguousarray(bitmap.reshape(d, -1)).view(np.uint64)
    below = mags[~heavy]
    return np.concatenate(ids), starts, bitmap, float(below.max(initial=-np.inf))


def pruned_scan(h1, s1, h2T, s2T, sketch, gram: bool, diagonal, r0: int, heavy, hstart,
                bitmap, starts, members, p: int, by_abs: bool, skip_diagonal: bool, lim: float,
                cut: float):
    """:func:`scan_tile`'s answer for rows r0 .. r0 + rows (all columns) from the entries
    that heavy buckets point to (:func:`pagh_mm._cpu_kernels.pruned_scan5`; ``lim`` > 0):
    (estimates, flat ids, largest key below cut among the entries it evaluated), or None
    when the passing entries would take more than :data:`ROW_ROOM_BYTES`."""
    if h1.shape[0] != 5:
        raise ValueError(f"pruned_scan: {h1.shape[0]} repetitions; it takes five")
    rows = h1.shape[1]
    counts = np.empty(rows, dtype=np.int64)
    lows = np.empty(rows, dtype=np.float64)
    diag = np.zeros(1) if diagonal is None else np.ascontiguousarray(diagonal, dtype=np.float64)
    args = (np.ascontiguousarray(h1), np.ascontiguousarray(s1, dtype=np.float64), h2T, s2T,
            np.ascontiguousarray(sketch, dtype=np.float64), gram, diag, r0, heavy, hstart,
            bitmap, starts, members, by_abs, skip_diagonal, float(lim), float(cut))
    got = _with_room(_kernels()[9], args, counts, lows, PRUNED_ROOM)
    if got is None:
        return None
    vals, cols, keep = got
    r = np.nonzero(keep)[0]
    ids = (r0 + r) * p + cols[keep]
    return vals[keep], ids, float(lows.max(initial=-np.inf))


def fused_supported(plan) -> bool:
    """Whether :class:`Fused` computes a compression whose forward transforms follow ``plan``."""
    return ENABLED and fcompiled.supports(plan, None) and plan.compute_dtype == plan.dtype \
        and np.dtype(plan.dtype) in (np.float64, np.float32)


_EMPTY_F = np.zeros((1, 1))
_EMPTY_I = np.zeros(1, dtype=np.int64)


class Fused:
    """The fused FWHT compression of :mod:`pagh_mm.matmul` on the CPU for a plan that
    :func:`fused_supported` accepts.  ``node(vectors_a, vectors_b, present, nb)``: the tree
    node (d, b) of a block of inner indices (None when no index has a term).

    ``pairs`` (exact integer products of sparse factors only, see :func:`exact_integers`):
    an inner index whose stored values form at most :attr:`pair_limit` pairs is added pair by
    pair to a time-domain table (:meth:`direct`) instead of transformed (the SpGEMM's
    multiplications without its output): the same exact sum, so the same bits.
    ``direct_only``: every inner index is (the caller checked); no transform buffers."""

    def __init__(self, plan, reps: int, chunk: int = CHUNK, threads: int | None = None,
                 sides: int = 2, pairs: bool = False, direct_only: bool = False):
        import numba
        self.plan, self.d, self.b, self.chunk = plan, reps, plan.n, chunk
        self.dtype = np.dtype(plan.dtype)
        self.bits, self.block_bits = fcompiled.stage_bits(plan)
        self.threads = threads or numba.get_num_threads()
        nchunk = 1
        while nchunk < self.threads:
            nchunk *= 2
        self.nchunk = nchunk
        # a pair costs one random update per repetition; a transform d b log2(b) butterflies
        # per side, which run about PAIR_COST times faster each
        self.pair_limit = self.pair_limit_of(self.b, sides) if pairs else 0
        self.direct_only = bool(direct_only and pairs)
        self._work = None

    @staticmethod
    def pair_limit_of(b: int, sides: int) -> int:
        """Most pairs of stored values an inner index adds directly (see the class)."""
        return sides * b * max(b.bit_length() - 1, 1) // PAIR_COST

    @property
    def block(self) -> int:
        """Inner indices per call (an aligned block of the pairwise tree)."""
        return self.nchunk * self.chunk

    def bytes(self) -> int:
        """Working memory (allocated once), besides the input vectors."""
        levels = self.chunk.bit_length() - 1
        if self.direct_only:
            return self.nchunk * 8 * self.d * self.b
        per = (levels + 4) * self.d * self.b * self.dtype.itemsize + \
            (0 if self.dtype == np.float64 else 8 * self.d * self.b) + \
            (8 * self.d * self.b if self.pair_limit else 0)
        return self.nchunk * (per + self.d * self.b * self.dtype.itemsize)

    def _buffers(self):
        if self._work is None:
            n, d, b, dt = self.nchunk, self.d, self.b, self.dtype
            levels = self.chunk.bit_length() - 1
            if self.direct_only:        # the tree's bookkeeping only; the time-domain table
                none = np.empty((n, 1, 1), dt)
                self._work = (np.empty((n, levels + 2, 1, 1), dt), none, none,
                              np.empty((n, 1, 1), np.float64), np.zeros((n, d, b), np.float64))
                return self._work
            self._work = (np.empty((n, levels + 2, d, b), dt), np.empty((n, d, b), dt),
                          np.empty((n, d, b), dt),
                          np.empty((n, d, b) if dt != np.float64 else (n, 1, 1), np.float64),
                          np.zeros((n, d, b) if self.pair_limit else (n, 1, 1), np.float64))
        return self._work

    def node(self, va, vb, present, nb: int):
        """``va``/``vb``: ("dense", (nb, keys) float64, h, s) or ("sparse", ptr, idx, val, h, s)
        for the nb vectors of the block (``vb`` None: a Gram product); ``present`` (nb,) bool."""
        fused = _kernels()[1]
        gram = vb is None
        A = _args(va)
        B = A if gram else _args(vb)
        limit = self.pair_limit if va[0] == "sparse" and (gram or vb[0] == "sparse") else 0
        most = 1
        if limit:
            ptr = (va if gram else vb)[1]
            most = max(1, int(np.diff(ptr).max(initial=0)))
        if self.direct_only and limit:      # every index pair by pair, repetition by repetition
            _kernels()[10](*A[1:4], *A[5:], *B[1:4], *B[5:], gram, present, nb,
                           self._buffers()[4], most)
            return None
        nodes = np.empty((self.nchunk,) + ((1, 1) if self.direct_only else (self.d, self.b)),
                         dtype=self.dtype)
        flags = np.zeros(self.nchunk, dtype=np.bool_)
        fused(*A, *B, gram, present, nb, self.chunk, self.bits, self.block_bits,
              self.dtype == np.float64, limit, *self._buffers(), most, nodes, flags)
        return _tree(nodes, flags)

    def direct(self):
        """The time-domain sum (d, b) of the inner indices added pair by pair (None if none)."""
        if not self.pair_limit or self._work is None:
            return None
        tab = self._work[4]
        out = tab[0].copy()                 # exact integer sums: any order, the same bits
        for c in range(1, tab.shape[0]):
            out += tab[c]
        return out


def exact_integers(sides, bound: float) -> bool:
    """Whether every stored value of the sparse ``sides`` is an integer and every sum the
    compression forms is an integer below 2^53 (``bound``: an upper bound on them), so that
    it is exact in float64 in any order."""
    if not bound < 2.0 ** 53:          # (a NaN bound, from inf values, is no bound)
        return False
    return all(s.integral() for s in sides)


def _args(v):
    if v[0] == "dense":
        _, D, h, s = v
        return D, _EMPTY_I, _EMPTY_I, _EMPTY_F[0], True, h, s
    _, ptr, idx, val, h, s = v
    return _EMPTY_F, ptr, idx, val, False, h, s


def _tree(nodes, flags):
    """The pairwise combination of aligned sibling nodes (absent ones skipped)."""
    items = [nodes[c] if flags[c] else None for c in range(nodes.shape[0])]
    while len(items) > 1:
        nxt = []
        for i in range(0, len(items), 2):
            left, right = items[i], items[i + 1]
            nxt.append(right if left is None else left if right is None else left + right)
        items = nxt
    return items[0]
