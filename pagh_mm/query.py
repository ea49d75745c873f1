"""Queries of a CompressedProduct: scanning every entry's estimate tile by tile, peeling
verified entries off the sketch, and the certified search built on both.

Certified search (``top_k``/``above``/``top_k_per_row`` with ``verify=True``):

1. scan the residual sketch (at first the sketch itself) for the candidates whose estimate
   can reach the cut tau: the k-th exact value found so far, or the threshold;
2. compute the candidates' exact values (:meth:`CompressedProduct.exact`);
3. stop when no unreported entry's residual estimate comes within the margin of tau
   (:mod:`pagh_mm.certificate`): the answer is certified;
4. otherwise subtract the verified entries from every repetition's sketch (the sketch is
   linear: what is left is the sketch of the rest of the product, whose noise is smaller
   and whose collisions with the large entries are gone) and scan again, until the
   candidate or round budget runs out (then ``certified=False`` and a warning naming the
   parameter to raise).

With bit sketches (``compress(..., decode=True)``) step 1 is preceded by decoding rounds
(:mod:`pagh_mm.decode`): the entries that dominate their buckets are read off, verified and
peeled, and the scan that follows certifies the rest, in O(d b) when no bucket of the
residual reaches the cut (:func:`bucket_bound`).

Every step is a fixed-order computation on NumPy or CuPy arrays: the same inputs give the
same answer, certificate and margin on the CPU and the GPU.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fwht_gpu import memory

from . import certificate, compiled, decode
from .convolution import combine_index
from .reduction import sparse_row_sums

#: Bytes of temporaries one query tile may use (CPU; 4x on the GPU).
TILE_BUDGET = 256 << 20
#: Scans of the (residual) sketch a certified query may make unless told otherwise.
DEFAULT_ROUNDS = 4
#: A later round whose scan is predicted to return more than this many noise entries per
#: entry that can reach the cut stops and asks for more buckets instead.
CROWDED = 64
#: A scan of an FWHT sketch (on the CPU: of five repetitions) evaluates only the entries
#: that heavy buckets point to when that visits at most this fraction of the entries a scan
#: evaluates; without a cut, it tries limits that make PRUNE_POOLS pools and then (CPU)
#: these fractions of the buckets heavy, in turn, until one admits the pool (:func:`_pruned`).
PRUNE_COST = 0.25
PRUNE_FRACTIONS = (2.0 ** -8, 2.0 ** -6)
#: The limits a pruned scan without a cut tries first make this many pools (cap + 1) of buckets
#: heavy in repetition 0 (then, on the CPU, :data:`PRUNE_FRACTIONS` of them).  GPU: it pays
#: when the (row, heavy bucket) pairs it visits are at most GPU_PRUNE_THREADS of the entries a
#: scan evaluates (besides :data:`PRUNE_COST`).
PRUNE_POOLS = (4, 32)
GPU_PRUNE_THREADS = 0.25
#: GPU: a finer ladder of pools (a limit that admits too few entries costs one launch; the
#: scan it falls back to, of a product too large to form, costs minutes).
GPU_PRUNE_POOLS = (4, 16, 64, 256)
#: CPU: the pruned kernel walks every (row, heavy bucket) pair; it pays only while they are
#: at most this fraction of the entries a scan evaluates.
CPU_PRUNE_PAIRS = 1.0
#: Rows per call of the pruned kernel (its per-row buffers).
PRUNE_ROWS = 8192
#: A CPU scan with nothing to prune with yet starts with the first rows of its first tile,
#: about this many times its pool's entries, whose best set the floor for the rest.
SEED_ENTRIES = 64
#: The rows a one-pass scan takes after the seed grow this many times per step, each step's
#: best entries raising the floor the next is scanned against.
SEED_GROWTH = 4
#: GPU scans: entries of the largest chunk one selecting kernel call scans, and of the largest
#: without a heavy-bucket filter (when every entry it evaluates may be returned).
GPU_CHUNK = 1 << 32
GPU_CHUNK_OPEN = 1 << 24
#: Candidates the first scan of a certified ``above`` verifies (the largest estimates).
FIRST_POOL_ABOVE = 4096


def first_pool(k: int) -> int:
    """Candidates the first scan of a certified top-k verifies: the k largest estimates and
    max(64, k / 4) more, so that entries just below the k-th are verified too and the
    certificate can hold after one scan."""
    return k + max(64, k // 4)


class CertificateWarning(UserWarning):
    """A verified query could not certify its answer within its budget; the message says
    which parameter to raise."""


class Entries(NamedTuple):
    """Entries (rows[q], cols[q]) of the product with their estimates; ``exact`` when
    verified.  Verified queries also say whether the answer is ``certified`` (no entry
    left out belongs in it, with probability at least 1 - ``failure_probability`` under the
    model of :mod:`pagh_mm.certificate`), the ``margin`` the last scan's estimates stayed
    below the cut by, the ``noise`` (standard deviation bound of one repetition's estimate
    on the last residual), and how many entries were ``verified``."""

    rows: object
    cols: object
    estimates: object
    exact: object = None
    certified: bool | None = None
    margin: float | None = None
    noise: float | None = None
    failure_probability: float | None = None
    verified: int | None = None


#: GPU pools of at most this many entries are ranked by :func:`best` on the host (one copy
#: each way instead of about ten small kernels and two synchronizations: H200, n = 16384,
#: about 0.5 ms a call, five calls a top-k; session 40).
HOST_BEST = 1 << 17


def best(key, ids, k: int, xp):
    """Positions of the ``k`` largest ``key`` values, largest first, ties broken by the
    smaller ``ids`` (so the answer never depends on tiling or device)."""
    if xp is not np and key.size <= HOST_BEST:
        return xp.asarray(best(xp.asnumpy(key), xp.asnumpy(ids), k, np))
    if key.size > k:
        kth = -xp.partition(-key, k - 1)[k - 1]
        above = xp.nonzero(key > kth)[0]
        tied = xp.nonzero(key == kth)[0]
        # stable on both devices (CuPy's sort is), also for equal ids
        order = xp.argsort(ids[tied], kind="stable") if xp is np else xp.argsort(ids[tied])
        tied = tied[order[:k - above.size]]
        sel = xp.concatenate([above, tied])
    else:
        sel = xp.arange(key.size)
    return sel[xp.lexsort(xp.stack([ids[sel], -key[sel]]))]


def check_by(by: str) -> str:
    if by not in ("abs", "value"):
        raise ValueError(f"by={by!r}; choose 'abs' (largest magnitude) or 'value'")
    return by


def key_of(v, by: str, xp):
    return xp.abs(v) if by == "abs" else v


# --- scanning --------------------------------------------------------------------------

def masked_median(v, xp):
    """Median over axis 0 of the values that are not NaN ((a + b) / 2 of the two middle ones
    for an even count, the middle one (as (a + a) / 2, the same bits) for an odd count),
    0.0 where all are NaN: what the GPU kernel computes for Gram sketches."""
    s = xp.sort(v, axis=0)                              # NaN last
    c = v.shape[0] - xp.isnan(v).sum(axis=0)
    lo = xp.maximum(c - 1, 0) // 2
    hi = xp.minimum(c // 2, v.shape[0] - 1)
    a = xp.take_along_axis(s, lo[None], axis=0)[0]
    b = xp.take_along_axis(s, hi[None], axis=0)[0]
    return xp.where(c == 0, 0.0, (a + b) * 0.5)


def _diagonal_in_tile(r0, c0, shape):
    """(rows, cols) positions of the product's diagonal inside a tile at (r0, c0)."""
    lo, hi = max(r0, c0), min(r0 + shape[0], c0 + shape[1])
    i = np.arange(lo, max(lo, hi))
    return i - r0, i - c0


def tile_shape(cp):
    """(rows, cols) of a query tile: column hashes and estimates within the tile budget."""
    m, p = cp.shape
    d = cp.reps
    budget = TILE_BUDGET * (4 if cp.backend.gpu else 1)
    cols = max(1, min(p, budget // (4 * 16 * d)))
    # CPU: (d, rows, cols) temporaries, or the compiled kernel's estimates and the keys
    per_entry = 8 if cp.backend.gpu else 32 if compiled.ENABLED else 4 * 8 * d
    rows = max(1, min(m, budget // (per_entry * cols)))
    return rows, cols


def _tile_estimates(cp, h1, s1, h2, s2, sketch, r0, c0, upper):
    """The median estimates of one tile (see :func:`tiles`)."""
    xp = cp.backend.xp
    if cp.backend.gpu:
        from .cuda import kernels
        est = kernels.tile_estimates(h1, s1, h2, s2, sketch, cp.log2b, cp.method == "fwht",
                                     cp.gram)
    elif compiled.ENABLED:          # (upper: the entries below the diagonal unused)
        est = compiled.tile_estimates(h1, s1, h2, s2, sketch, cp.method == "fwht",
                                      cp.gram, r0 - c0 if upper else -(1 << 62))
    else:
        est = cp._median(cp._values(h1[:, :, None], s1[:, :, None], h2[:, None, :],
                                    s2[:, None, :], sketch))
    if cp.gram:                                 # the diagonal is known exactly
        a, b = _diagonal_in_tile(r0, c0, est.shape)
        if a.size:
            est[xp.asarray(a), xp.asarray(b)] = cp.diagonal[r0 + a[0]:r0 + a[-1] + 1]
    return est


def tiles(cp, sketch=None, progress=None, upper: bool = False, hashes: bool = False):
    """Yield (row0, col0, median estimates of the tile's rows x cols) from ``sketch``
    (default: the product's own), covering the product (``upper``: only the tiles that
    hold entries on or above the diagonal; the others are skipped, and a tile's entries
    below the diagonal may be left uncomputed).  ``hashes``: yield the tile's (h1, s1, h2,
    s2) instead of its estimates.

    On the GPU one kernel computes each tile's medians from the hash values and the
    sketch (:mod:`pagh_mm.cuda.kernels`); on the CPU NumPy gathers the d values."""
    sketch = cp.sketch if sketch is None else sketch
    m, p = cp.shape
    rows, cols = tile_shape(cp)
    done, total = 0, m * p
    for c0 in range(0, p, cols):
        c1 = min(p, c0 + cols)
        h2, s2 = cp._hash_range(2, c0, c1)
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            if upper and r0 >= c1:
                done += (r1 - r0) * (c1 - c0)
                continue
            h1, s1 = cp._hash_range(1, r0, r1)
            if hashes:
                yield r0, c0, (h1, s1, h2, s2)
            else:
                yield r0, c0, _tile_estimates(cp, h1, s1, h2, s2, sketch, r0, c0, upper)
            done += (r1 - r0) * (c1 - c0)
            if progress:
                progress("tiles", done, total)


def flat_ids(cp, r0, c0, est):
    xp = cp.backend.xp
    r = xp.arange(r0, r0 + est.shape[0], dtype=xp.int64)[:, None]
    c = xp.arange(c0, c0 + est.shape[1], dtype=xp.int64)[None, :]
    return (r * cp.shape[1] + c).ravel()


def _member(ids, sorted_set, xp):
    """Whether each of ``ids`` is in the sorted array ``sorted_set``."""
    if sorted_set is None or sorted_set.size == 0 or ids.size == 0:
        return xp.zeros(ids.shape, dtype=bool)
    at = xp.minimum(xp.searchsorted(sorted_set, ids), sorted_set.size - 1)
    return sorted_set[at] == ids


@dataclass
class Scan:
    """What one scan found: the candidates (estimates, flat ids; largest key first) and a
    bound on the keys of the entries it did not return (-inf when there is none): their
    largest key, or on the CPU's one-pass scans possibly more (never less, never a key at
    or above the cut unless one is)."""

    values: object
    ids: object
    next_key: float


def _below_diagonal(key, r0, c0, shape, xp):
    """``key`` (a flat tile) with the entries below the diagonal (row > column) set to -inf."""
    if r0 + shape[0] - 1 <= c0:
        return key
    r = xp.arange(r0, r0 + shape[0], dtype=xp.int64)[:, None]
    c = xp.arange(c0, c0 + shape[1], dtype=xp.int64)[None, :]
    return xp.where((r > c).ravel(), -xp.inf, key)


def mirrored(cp, values, ids, by: str, k: int | None = None):
    """Entries of a Gram sketch's upper-triangle scan as entries of the whole matrix: each
    off-diagonal (i, j) with its mirror (j, i) (the same estimate), largest key first, ties
    to the smaller id; the ``k`` largest when given (the k largest of the whole matrix are
    among the mirrors of the k largest of the upper triangle)."""
    xp = cp.backend.xp
    m = cp.shape[0]
    off = ids // m != ids % m
    ids = xp.concatenate([ids, (ids[off] % m) * m + ids[off] // m])
    values = xp.concatenate([values, values[off]])
    if k is None:
        k = int(ids.size)
    sel = best(key_of(values, by, xp), ids, min(k, int(ids.size)), xp)
    return values[sel], ids[sel]


def _skip_diagonal(key, r0, c0, shape, xp):
    """``key`` (a flat tile) with the diagonal's entries set to -inf (a copy)."""
    a, b = _diagonal_in_tile(r0, c0, shape)
    key = key.copy()
    if a.size:
        key[xp.asarray(a * shape[1] + b)] = -xp.inf
    return key


def _excluded(exclude) -> int:
    return 0 if exclude is None else int(exclude.size)


def _select(cp, est, r0, c0, by, skip_diagonal, upper, lim, cut):
    """(estimates, flat ids, largest key below ``cut`` (a device scalar, when cut > -inf)) of
    the tile's entries :func:`scan` keeps (estimates None when none)."""
    xp = cp.backend.xp
    flat = est.ravel()
    key = key_of(flat, by, xp)
    if skip_diagonal:
        key = _skip_diagonal(key, r0, c0, est.shape, xp)
    if upper:
        key = _below_diagonal(key, r0, c0, est.shape, xp)
    low = xp.where(key < cut, key, -xp.inf).max() if cut > -math.inf else None
    if lim > -math.inf or skip_diagonal or upper:
        sel = xp.nonzero(key >= lim)[0] if lim > -math.inf else xp.nonzero(key > lim)[0]
        if sel.size == 0:
            return None, None, low
        return flat[sel], flat_ids(cp, r0, c0, est)[sel], low
    return flat, flat_ids(cp, r0, c0, est), low


def _pruned(cp, sketch, by: str, cap: int, cut: float, exclude, skip_diagonal: bool,
            least: int | None = None):
    """What :func:`scan` returns (values, ids, next_key bound or None), found without
    looking at every entry (an FWHT sketch; on the CPU five repetitions): the entries whose
    key can reach a limit L > 0 have at least (d + 1) // 2 repetitions in heavy buckets, so
    one of the first d - (d + 1) // 2 + 1 repetitions sees them in a heavy bucket and they
    are among the entries those buckets point to (:func:`pagh_mm.compiled.pruned_scan`,
    ``pruned_tile`` of ``pagh_mm/cuda/estimate.cu``); every other entry's key is at most the
    largest magnitude of the other buckets, below L.  With a cut, L is the cut; without one,
    L is lowered through :data:`PRUNE_POOLS` pools of heavy buckets (then, on the CPU,
    :data:`PRUNE_FRACTIONS` of them; on the GPU :data:`GPU_PRUNE_POOLS`) until at least
    cap + 1 entries reach it (then they hold the cap + 1 largest keys).  None when no limit
    pays (:data:`PRUNE_COST`, and the (row, heavy bucket) pairs: :data:`CPU_PRUNE_PAIRS`,
    :data:`GPU_PRUNE_THREADS`) or the memory for it is not there: the caller scans.
    ``least`` (without a cut): when no limit admits the pool, the entries of the lowest limit
    tried that found at least ``least`` of them, with the bound of every other key (the
    caller then has fewer than ``cap``, all those above the bound)."""
    gpu = cp.backend.gpu
    xp = cp.backend.xp
    m, p = cp.shape
    d, b = sketch.shape
    scanned = m * p / (2.0 if cp.gram else 1.0)
    factor = 0.5 if cp.gram else 1.0
    room = memory.available(cp.backend.name)
    # the hashes and signs of every repetition, the members' lists, the buckets' marks
    if room is not None and 16 * d * (m + p) + 8 * d * p + 8 * d * (b + 1) > room // 4:
        return None
    if cut > -math.inf:
        limits = [cut] if cut > 0 else []
    else:
        mags = xp.sort(xp.abs(sketch[0]) * factor)[::-1]
        counts = [c * (cap + 1) for c in GPU_PRUNE_POOLS] if gpu else \
            [c * (cap + 1) for c in PRUNE_POOLS] + [int(f * b) for f in PRUNE_FRACTIONS]
        limits = sorted({float(mags[min(b - 1, max(c, cap + 1))]) for c in counts},
                        reverse=True)
        limits = [x for x in limits if x > 0]
    h1 = s1 = starts = members = h2T = s2T = None
    partial = None              # the lowest limit's entries, when at least `least` of them
    for lim in limits:
        if gpu:
            # the heavy buckets counted first (one reduction): their lists only where it pays
            hstart = int(xp.count_nonzero(xp.abs(sketch[:d - (d + 1) // 2 + 1]) * factor >= lim))
            if hstart * m > GPU_PRUNE_THREADS * scanned or \
                    hstart * m * (p / b) > PRUNE_COST * scanned:
                break
            heavy, hstart, bitmap, bound = _gpu_heavy(cp, sketch, factor, lim)
        else:
            heavy, hstart, bitmap, bound = compiled.heavy_buckets(sketch, factor, lim)
            if heavy.size * m > CPU_PRUNE_PAIRS * scanned or \
                    heavy.size * m * (p / b) > PRUNE_COST * scanned:
                break
        if h1 is None:
            h1, s1 = cp._hash_range(1, 0, m)
            h2, s2 = (h1, s1) if cp.gram else cp._hash_range(2, 0, p)
            if gpu:
                from .cuda import kernels
                starts, members = kernels.bucket_members(h2, b)
            else:
                starts, members = compiled.bucket_members(h2, b)
                h2T = np.ascontiguousarray(h2.T)
                s2T = np.ascontiguousarray(s2.T, dtype=np.float64)
        if gpu:
            vals, ids, low = _gpu_pruned(cp, sketch, h1, s1, h2, s2, heavy, bitmap, starts,
                                         members, by, skip_diagonal, lim, cut)
            if exclude is not None and exclude.size:
                new = ~_member(ids, exclude, xp)
                vals, ids = vals[new], ids[new]
        else:
            vals, ids, low = [], [], -math.inf
            for r0 in range(0, m, PRUNE_ROWS):
                got = compiled.pruned_scan(h1[:, r0:r0 + PRUNE_ROWS], s1[:, r0:r0 + PRUNE_ROWS],
                                           h2T, s2T, sketch, cp.gram, cp.diagonal, r0, heavy,
                                           hstart, bitmap, starts, members, p, by == "abs",
                                           skip_diagonal, lim, cut)
                if got is None:
                    return partial
                v, i, lo = got
                if exclude is not None and exclude.size:
                    new = ~_member(i, exclude, np)
                    v, i = v[new], i[new]
                vals.append(v)
                ids.append(i)
                low = max(low, lo)
                if sum(x.size for x in ids) > 2 * (cap + 1):          # keep the pool's size
                    v, i = np.concatenate(vals), np.concatenate(ids)
                    keep = best(key_of(v, by, np), i, cap + 1, np)
                    vals, ids = [v[keep]], [i[keep]]
            vals, ids = np.concatenate(vals), np.concatenate(ids)
        if cut > -math.inf:
            return vals, ids, max(low, bound) if bound < cut else low
        if ids.size > cap:
            return vals, ids, None
        if least is not None and ids.size >= least:
            # every entry not found has at least d - (d + 1) // 2 + 1 estimates in light
            # buckets (<= bound < lim) or was evaluated below lim (<= low)
            partial = vals, ids, max(float(low), float(bound))
    return partial


def _gpu_heavy(cp, sketch, factor: float, lim: float):
    """((heavy buckets, their repetitions), how many of them are heavy (not blind), exact
    bitmap, bound) of a GPU sketch at ``lim``: the heavy buckets of the first d - (d + 1) //
    2 + 1 repetitions (and, for a Gram sketch, bucket -1 of every repetition: the blind
    entries), as :func:`_pruned` needs them."""
    from .cuda import kernels
    xp = cp.backend.xp
    d = sketch.shape[0]
    first = d - (d + 1) // 2 + 1
    items = [xp.nonzero(xp.abs(sketch[t]) * factor >= lim)[0].astype(xp.int64)
             for t in range(first)]
    reps = [xp.full(int(x.size), t, dtype=xp.int32) for t, x in enumerate(items)]
    heavy = sum(int(x.size) for x in items)
    if cp.gram:
        items.append(xp.full(d, -1, dtype=xp.int64))
        reps.append(xp.arange(d, dtype=xp.int32))
    (bits, _), bound = kernels.heavy_bits(sketch, factor, lim, 0)
    return (xp.concatenate(items), xp.concatenate(reps)), heavy, bits, bound


def _gpu_pruned(cp, sketch, h1, s1, h2, s2, heavy, bits, starts, members, by, skip_diagonal,
                lim, cut):
    """(estimates, flat ids (increasing), largest key below ``cut`` among the entries
    evaluated) of :func:`_pruned` on the GPU: ``pruned_select`` over every row, and a Gram
    product's diagonal (exact) unless skipped."""
    from .cuda import kernels
    xp = cp.backend.xp
    p = cp.shape[1]
    items, reps = heavy
    vals, ids, low = kernels.pruned_select(h1, s1, 0, h2, s2, sketch, cp.gram, bits, items, reps,
                                           starts, members, by_abs=by == "abs",
                                           skip_diagonal=skip_diagonal, lim=lim, cut=cut)
    if cp.gram and not skip_diagonal:
        diag = cp.diagonal
        key = key_of(diag, by, xp)
        on = xp.nonzero(key >= lim)[0]
        vals = xp.concatenate([vals, diag[on]])
        ids = xp.concatenate([ids, on * p + on])
        under = key[key < cut]
        if under.size:
            low = max(low, float(under.max()))
    order = xp.argsort(ids)
    return vals[order], ids[order], low


def _gpu_chunks(cp, first: int, upper: bool, filtered, progress=None):
    """(row0, col0, (h1, s1, h2, s2)) of the chunks of a GPU scan: whole column blocks (their
    hashes within the tile budget), rows in chunks that start at ``first`` entries and
    grow 32-fold (the pool's floor rises with them: each returns about 32 pools), up to
    GPU_CHUNK entries while ``filtered()`` (a heavy-bucket filter applies),
    else GPU_CHUNK_OPEN; ``upper``: the rows that hold entries on or above the diagonal."""
    m, p = cp.shape
    d = cp.reps
    budget = TILE_BUDGET * 4
    cols = max(1, min(p, budget // (16 * d)))
    total = m * p
    done, entries = 0, max(1, first)
    for c0 in range(0, p, cols):
        c1 = min(p, c0 + cols)
        h2, s2 = cp._hash_range(2, c0, c1)
        end = min(m, c1) if upper else m
        r0 = 0
        while r0 < end:
            most = min(entries, GPU_CHUNK if filtered() else GPU_CHUNK_OPEN)
            rows = max(1, min(end - r0, most // (c1 - c0), budget // (16 * d)))
            h1, s1 = cp._hash_range(1, r0, r0 + rows)
            yield r0, c0, (h1, s1, h2, s2)
            r0 += rows
            done += rows * (c1 - c0)
            entries *= 32
            if progress:
                progress("tiles", done, total)
        done += (m - end) * (c1 - c0)


class _Filter:
    """The heavy-bucket bitmap of a GPU scan's sketch at its current limit (rebuilt when the
    limit moves; none at a limit <= 0, where it cannot prune)."""

    def __init__(self, cp, sketch):
        self.cp, self.sketch, self.lim = cp, sketch, None
        self.bits, self.bound = None, -math.inf

    def at(self, lim: float):
        if not (0 < lim < math.inf):
            return None, -math.inf
        if lim != self.lim:
            from .cuda import kernels
            self.bits, self.bound = kernels.heavy_bits(self.sketch, 0.5 if self.cp.gram else 1.0,
                                                       lim)
            self.lim = lim
        return self.bits, self.bound


def _gpu_select(cp, sketch, filt: _Filter, h, r0, c0, by, skip_diagonal, upper, lim, cut, cap):
    """(estimates, flat ids (increasing), bound on the keys below ``cut`` of the others) of
    a GPU chunk's entries :func:`scan` keeps: one selecting kernel (``scan_select``)."""
    from .cuda import kernels
    xp = cp.backend.xp
    bits, bound = filt.at(lim)
    size = h[0].shape[1] * h[2].shape[1]
    room = min(size, 1 << 20, max(1 << 16, 64 * (cap + 1)))
    vals, ids, low = kernels.scan_select(
        *h, sketch, cp.log2b, cp.method == "fwht", cp.gram, r0=r0, c0=c0, p=cp.shape[1],
        diagonal=cp.diagonal if cp.gram else None, by_abs=by == "abs",
        skip_diagonal=skip_diagonal, upper=upper, lim=lim, cut=cut, bits=bits, room=room)
    if bits is not None and bound < cut:
        low = max(low, bound)
    order = xp.argsort(ids)
    return vals[order], ids[order], low


def scan(cp, by: str, cap: int, cut: float = -math.inf, *, sketch=None, exclude=None,
         skip_diagonal: bool = False, progress=None, what: str = "this query",
         least: int | None = None) -> Scan:
    """The ``cap`` entries with the largest keys (|estimate| or estimate) >= ``cut`` among
    those not in ``exclude`` (sorted flat ids) nor on the diagonal (``skip_diagonal``), from
    ``sketch`` (default: the product's), never holding an m x p array.  ``next_key`` bounds
    every other entry's key, except excluded ones with a key >= ``cut``.  On a Gram sketch
    only the upper triangle (with the diagonal) is scanned: the entries below it are the
    mirrors of those above, with the same estimates (:func:`mirrored`).  ``least``: the
    caller also takes, when a pruned scan finds them faster, any number from ``least`` up of
    the largest keys, with ``next_key`` bounding the others."""
    xp = cp.backend.xp
    sketch = cp.sketch if sketch is None else sketch
    if cut > 0 and not cp.gram:         # no heavy bucket where every entry has one: O(d b)
        bound = bucket_bound(sketch)
        if bound < cut:
            if progress:
                progress("tiles", cp.shape[0] * cp.shape[1], cp.shape[0] * cp.shape[1])
            return Scan(xp.empty(0, xp.float64), xp.empty(0, xp.int64), bound)
    room = memory.available(cp.backend.name)
    pool_v, pool_i = xp.empty(0, xp.float64), xp.empty(0, xp.int64)
    parts_v, parts_i, held = [], [], 0
    floor = -math.inf                   # entries below it cannot enter the pool any more
    below = None                        # largest key under the cut (device scalar)

    def compact(v, i):
        keep = best(key_of(v, by, xp), i, cap + 1, xp)
        return v[keep], i[keep]

    upper = cp.gram
    gpu = cp.backend.gpu
    filt = _Filter(cp, sketch) if gpu else None
    fused = not gpu and compiled.ENABLED
    one_pass = fused and cp.method == "fwht" and cp.reps % 2 == 1

    def take(r0, c0, est):
        nonlocal pool_v, pool_i, parts_v, parts_i, held, floor, below
        lim = max(cut, floor)
        got = None
        if gpu:                         # estimates and selection in one kernel
            got = _gpu_select(cp, sketch, filt, est, r0, c0, by, skip_diagonal, upper, lim, cut,
                              cap)
        elif one_pass:                  # estimates and selection in one compiled pass
            h1, s1, h2, s2 = est
            got = None if lim == -math.inf else compiled.scan_tile(
                h1, s1, h2, s2, sketch, cp.gram, cp.diagonal,
                r0 - c0 if upper else -(1 << 62), r0, c0, cp.shape[1], by == "abs",
                skip_diagonal, lim, cut)
            if got is None:             # nothing to prune with yet, or a crowded tile
                est = _tile_estimates(cp, h1, s1, h2, s2, sketch, r0, c0, upper)
        if got is not None:
            flat, ids, low = got
            if cut > -math.inf:
                below = low if below is None else max(below, low)
            if flat.size == 0:
                return
        elif fused:                     # the same selection in two compiled passes
            flat, ids, low = compiled.select_tile(est, r0, c0, cp.shape[1], by == "abs",
                                                  skip_diagonal, upper, lim, cut,
                                                  cap + 1 + _excluded(exclude))
            if cut > -math.inf:
                below = low if below is None else max(below, low)
            if flat.size == 0:
                return
        else:
            flat, ids, low = _select(cp, est, r0, c0, by, skip_diagonal, upper, lim, cut)
            if cut > -math.inf:
                below = low if below is None else xp.maximum(below, low)
            if flat is None:
                return
        if exclude is not None and exclude.size:
            new = ~_member(ids, exclude, xp)
            flat, ids = flat[new], ids[new]
        parts_v.append(flat)
        parts_i.append(ids)
        held += int(flat.size)
        if held > 2 * (cap + 1) or (floor == -math.inf and held > cap):
            pool_v, pool_i = compact(xp.concatenate([pool_v] + parts_v),
                                     xp.concatenate([pool_i] + parts_i))
            parts_v, parts_i, held = [], [], int(pool_v.size)
            if pool_v.size == cap + 1:
                floor = float(key_of(pool_v[-1:], by, xp)[0])
        if room is not None and 32 * held > room // 2:
            raise memory.InsufficientMemoryError(
                f"{what} holds more than {held} candidate entries, more than the memory available "
                f"({memory.gib(room)}) holds; raise the threshold, or lower candidates=",
                need=32 * held, available=room, device=cp.backend.name,
                hint="raise the threshold or lower candidates")

    pruned = _pruned(cp, sketch, by, cap, cut, exclude, skip_diagonal, least) \
        if (one_pass and cp.reps == 5) or (gpu and cp.method == "fwht") else None
    if pruned is not None:              # the entries that can reach the limit, directly
        flat, ids, low = pruned
        parts_v, parts_i = [flat], [ids]
        if low is not None:             # a cut's, or (fewer than cap) the others' bound
            below = low
        if progress:
            progress("tiles", cp.shape[0] * cp.shape[1], cp.shape[0] * cp.shape[1])
    if pruned is not None:
        chunks = ()
    elif gpu:
        chunks = _gpu_chunks(cp, SEED_ENTRIES * (cap + 1), upper,
                             lambda: max(cut, floor) > 0, progress)
    else:
        chunks = tiles(cp, sketch, progress, upper=upper, hashes=one_pass)
    for r0, c0, est in chunks:
        if one_pass and max(cut, floor) == -math.inf:
            # nothing to prune with: a few rows first (two passes), whose best entries set
            # the floor the next rows are scanned against in one pass, 4x as many each time
            # while the floor rises with them, then the rest of the tile
            h1, s1, h2, s2 = est
            seed = -(-SEED_ENTRIES * (cap + 1) // h2.shape[1])
            while seed < h1.shape[1]:
                take(r0, c0, (h1[:, :seed], s1[:, :seed], h2, s2))
                r0, h1, s1 = r0 + seed, h1[:, seed:], s1[:, seed:]
                seed *= SEED_GROWTH
            est = (h1, s1, h2, s2)
        take(r0, c0, est)
    pool_v, pool_i = compact(xp.concatenate([pool_v] + parts_v), xp.concatenate([pool_i] + parts_i))
    next_key = -math.inf if below is None else float(below)
    if pool_v.size > cap:
        next_key = max(next_key, float(key_of(pool_v[cap:cap + 1], by, xp)[0]))
        pool_v, pool_i = pool_v[:cap], pool_i[:cap]
    return Scan(pool_v, pool_i, next_key)


def bucket_bound(sketch) -> float:
    """A bound on every entry's key (median of d estimates, Gram sketches aside): the
    largest bucket magnitude of the first d - (d + 1) // 2 + 1 repetitions.  An entry has
    one bucket in each of them, so at most (d + 1) // 2 - 1 of its estimates exceed it, and
    its median does not."""
    d = sketch.shape[0]
    first = d - (d + 1) // 2 + 1
    return float(abs(sketch[:first]).max()) if sketch.size else 0.0


# --- peeling ---------------------------------------------------------------------------

def peel(cp, residual, ids, values, params=None):
    """Subtract the entries (flat ``ids``, exact ``values``) from every repetition of the
    (d, b) ``residual`` sketch made with ``params`` (default the product's; its bit
    sketches with theirs), in place: contributions to one bucket are summed first, in
    the order of their ids (a pairwise tree), then subtracted once (the same bits on every
    device)."""
    xp = cp.backend.xp
    if ids.size == 0:
        return residual
    d, b = residual.shape
    p = cp.shape[1]
    h1, s1 = cp._hashes(1, ids // p, params)
    h2, s2 = cp._hashes(2, ids % p, params)
    bucket = combine_index(cp.method, h1, h2, cp.log2b) + \
        (xp.arange(d, dtype=xp.int64) * b)[:, None]
    contrib = (s1 * s2 * values[None].astype(xp.float64)).ravel()
    bucket = bucket.ravel()
    order = xp.lexsort(xp.stack([xp.tile(ids, d), bucket]))
    bucket, contrib = bucket[order], contrib[order]
    first = xp.concatenate([xp.ones(1, dtype=bool), bucket[1:] != bucket[:-1]])
    start = xp.nonzero(first)[0]
    group = xp.cumsum(first) - 1
    rank = xp.arange(bucket.size, dtype=xp.int64) - start[group]
    total = sparse_row_sums(bucket, rank, contrib, d * b, xp)
    residual -= total.reshape(d, b)
    return residual


# --- certified search ------------------------------------------------------------------

@dataclass
class Target:
    """What a certified query looks for.  ``k``: the k largest (``threshold`` then None),
    or every entry >= ``threshold``; per row when ``per_row`` (the k largest of each row
    that are >= threshold)."""

    by: str
    k: int | None = None
    threshold: float | None = None
    exclude_diagonal: bool = False


@dataclass
class Found:
    """Entries verified so far: sorted flat ids and their exact values."""

    ids: object
    exact: object
    #: (sorted flat ids, estimates) read off the unpeeled sketch by the first scan
    known: tuple | None = None

    def remember(self, cp, ids, values) -> None:
        """Keep the first scan's estimates (of the sketch itself) for the answer."""
        xp = cp.backend.xp
        if cp.gram and ids.size:
            m = cp.shape[0]
            off = ids // m != ids % m
            ids = xp.concatenate([ids, (ids[off] % m) * m + ids[off] // m])
            values = xp.concatenate([values, values[off]])
        order = xp.argsort(ids)
        self.known = (ids[order], values[order])

    def add(self, ids, exact, xp):
        ids_all = xp.concatenate([self.ids, ids])
        ex_all = xp.concatenate([self.exact, exact])
        order = xp.argsort(ids_all)
        self.ids, self.exact = ids_all[order], ex_all[order]


def blind_pairs(cp):
    """Flat ids (sorted, both orientations) of the off-diagonal entries of a Gram sketch
    that every repetition is blind to (h_t(i) = h_t(j) for all t: about m^2 / b^d of them),
    whose estimates carry no information: certified queries always verify them."""
    xp = cp.backend.xp
    m = cp.shape[0]
    if not cp.gram or m < 2:
        return xp.empty(0, xp.int64)
    h = cp.backend.asnumpy(cp._hash_range(1, 0, m)[0])     # (d, m)
    order = np.lexsort(h[::-1])
    hs = h[:, order]
    start = np.concatenate([[True], (hs[:, 1:] != hs[:, :-1]).any(axis=0)])
    group = np.cumsum(start) - 1
    sizes = np.bincount(group)
    ids = []
    for g in np.flatnonzero(sizes > 1):
        members = order[group == g]
        for i in members:
            for j in members:
                if i != j:
                    ids.append(int(i) * m + int(j))
    return xp.asarray(np.sort(np.array(ids, dtype=np.int64)))


def _start(cp, target: Target) -> Found:
    """What a certified search knows before its first scan: on a Gram sketch, the diagonal
    (exact, unless excluded) and the entries no repetition sees (verified)."""
    xp = cp.backend.xp
    found = Found(xp.empty(0, xp.int64), xp.empty(0, xp.float64))
    if cp.gram:
        m = cp.shape[0]
        if not target.exclude_diagonal:
            found.add(xp.arange(m, dtype=xp.int64) * (m + 1), cp.diagonal, xp)
        blind = blind_pairs(cp)
        if blind.size:
            found.add(blind, exact_of(cp, blind), xp)
    return found


def _new_ids(cp, ids, found: Found):
    """The scanned ``ids`` to verify: on a Gram sketch with their mirrors (C[j, i] = C[i, j]
    share one estimate and one bucket: both are verified and peeled together), without
    those already found; sorted."""
    xp = cp.backend.xp
    if cp.gram and ids.size:
        m = cp.shape[0]
        ids = xp.unique(xp.concatenate([ids, (ids % m) * m + ids // m]))
    return ids[~_member(ids, found.ids, xp)]


def exact_of(cp, ids):
    """Exact values of the entries ``ids`` (flat); on a Gram sketch each pair (i, j), (j, i)
    is computed once."""
    xp = cp.backend.xp
    p = cp.shape[1]
    if not cp.gram or ids.size == 0:
        return cp._exact(ids // p, ids % p)
    r, c = ids // p, ids % p
    canon = xp.minimum(r, c) * p + xp.maximum(r, c)
    uniq, back = xp.unique(canon, return_inverse=True)
    return cp._exact(uniq // p, uniq % p)[back.ravel()]


def _cut(target: Target, found: Found, xp) -> float:
    """The value no unreported entry may reach: the threshold, or the k-th exact key found
    (-inf while fewer than k are known)."""
    if target.k is None:
        return float(target.threshold)
    key = key_of(found.exact, target.by, xp)
    if key.size < target.k:
        return -math.inf
    return float(-xp.partition(-key, target.k - 1)[target.k - 1])


def expected_noise_entries(sigma: float, cut: float, d: int, by: str, unreported: int) -> float:
    """About how many unreported entries of pure noise (Gaussian, ``sigma`` per repetition)
    have a median estimate reaching ``cut``: what a scan at that cut would return.  A cost
    prediction only (the certificate does not rest on it)."""
    if cut <= 0 or sigma <= 0:
        return float(unreported) if cut <= 0 else 0.0
    one = 0.5 * math.erfc(cut / (sigma * math.sqrt(2.0)))
    tail = certificate.binomial_tail(d, certificate.median_votes(d), one)
    return unreported * tail * (2.0 if by == "abs" else 1.0)


def search(cp, target: Target, *, delta: float, candidates: int, rounds: int,
           first_pool: int, progress=None, decoding: bool = False):
    """The certified search of this module's docstring.  Returns (found, certified,
    margin, sigma, advice) where ``advice`` names what to raise when not certified.

    ``decoding``: before its scans, the search decodes the residual's dominant entries
    from the bit sketches (:mod:`pagh_mm.decode`), verifies and peels them (the bit
    sketches too), and decodes again, up to :data:`pagh_mm.decode.ROUNDS` times or until
    nothing new is decoded; the scans then find and certify the rest (with nothing
    heavy left, :func:`scan` certifies in O(d b)).  Decoding rounds do not count as
    ``rounds``.

    The first scan takes the ``first_pool`` largest estimates, whose exact values set the
    cut and whose peeling lowers the noise; later scans take every entry within the margin
    of the cut (``candidates`` in all).  A later round whose cut sits so deep in the
    residual noise that a scan would return mostly noise (more than the candidates left, or
    ``CROWDED`` times the entries that can reach the cut) stops with the advice to raise
    the buckets."""
    xp = cp.backend.xp
    m, p = cp.shape
    d = cp.reps
    size = m * p - (min(m, p) if target.exclude_diagonal else 0)
    found = _start(cp, target)
    residual = cp.sketch
    peeled = False
    left = candidates
    certified, mg, sigma, advice = False, math.inf, 0.0, None
    rho = cp.rounding()                 # the transforms' rounding, at most, per estimate
    decodes = decode.ROUNDS if decoding else 0
    bits = None
    level = math.inf                    # the last decoding level
    rnd = 0
    while rnd < rounds:
        norm2, sigma, pairs, blind = cp.noise_model(residual)
        unreported = size - int(found.ids.size)
        tau = _cut(target, found, xp)
        cap = int(min(left, first_pool)) if rnd == 0 else left
        cut = -math.inf
        if tau > -math.inf:
            at_risk = certificate.entries_at_risk(norm2 / pairs, tau, unreported)
            lam = certificate.multiplier(d, at_risk, delta, blind)
            mg = lam * sigma + rho
            cut = tau - mg
            noise = expected_noise_entries(sigma, cut, d, target.by, unreported)
            if rnd >= 1 and noise > min(cap, CROWDED * at_risk + first_pool):
                # peeled, and noise alone would fill the pool at this cut: more buckets
                advice = _advice(cp, target, tau, sigma, lam, candidates, left, rounds, rnd,
                                 crowded=True, rho=rho)
                break
        if decodes:
            decodes -= 1
            if bits is None:
                bits = cp.bits.sketch.copy()
                residual, peeled = residual.copy(), True
            level = cut if cut > 0 else decode.level(residual, 0, sigma, cap, xp)
            added = _decode_step(cp, residual, bits, level, cap, found, target)
            if added:
                left -= added
                if left > 0:
                    continue
                advice = ("candidates", f"raise candidates= (now {candidates}; all were "
                          "verified)", None)
                break
            decodes = 0                 # nothing new: the scans do the rest
        if rnd == 0 and target.k is not None and cut < level < math.inf:
            # fewer than k decoded entries stand out of the noise (some never dominated a
            # bucket of a decoding repetition): the first scan takes the largest estimates
            cut = -math.inf
        got = scan(cp, target.by, cap, cut, sketch=residual, exclude=found.ids,
                   skip_diagonal=target.exclude_diagonal, progress=progress,
                   what="a verified query", least=target.k)
        rnd += 1
        if not peeled:
            found.remember(cp, got.ids, got.values)
        ids = _new_ids(cp, got.ids, found)
        exact = exact_of(cp, ids)
        found.add(ids, exact, xp)
        left -= int(ids.size)
        tau = _cut(target, found, xp)
        unreported = size - int(found.ids.size)
        if unreported == 0 or got.next_key == -math.inf:
            certified, mg = True, 0.0
            break
        if tau > -math.inf:
            lam = certificate.multiplier(
                d, certificate.entries_at_risk(norm2 / pairs, tau, unreported), delta, blind)
            mg = lam * sigma + rho
            if got.next_key + mg < tau:
                certified = True
                break
            advice = _advice(cp, target, tau, sigma, lam, candidates, left, rounds, rnd, rho=rho)
        else:
            advice = ("candidates", f"raise candidates= (now {candidates})", None)
        if left <= 0:
            break               # out of candidates
        if not peeled:
            residual = residual.copy()
            peeled = True
        peel(cp, residual, ids, exact)
    return found, certified, mg, sigma, advice


def _decode_step(cp, residual, bits, level: float, cap: int, found: Found, target: Target) -> int:
    """One decoding round of a certified search: the entries decoded from the buckets of
    ``residual`` at ``level`` (:func:`pagh_mm.decode.candidates`; not found yet, off the
    diagonal when it is excluded) verified, added to ``found`` and peeled off ``residual``
    and its bit sketches ``bits``, in place.  Returns how many were added."""
    xp = cp.backend.xp
    p = cp.shape[1]
    ids = decode.candidates(cp, residual, bits, level, max(cap, 1))
    ids = ids[~_member(ids, found.ids, xp)]
    if target.exclude_diagonal and ids.size:
        ids = ids[ids // p != ids % p]
    if ids.size == 0:
        return 0
    exact = exact_of(cp, ids)
    found.add(ids, exact, xp)
    peel(cp, residual, ids, exact)
    peel(cp, bits, ids, exact, params=cp.bits.params(cp.params))
    return int(ids.size)


def _advice(cp, target, tau, sigma, lam, candidates, left, rounds, rnd, crowded=False,
            rho: float = 0.0):
    """Which parameter to raise when the search stops uncertified: a wider dtype when the
    transforms' rounding (``rho``, at most, per estimate) is most of the margin, the
    buckets when the residual noise keeps the margin near the cut, else candidates or
    rounds."""
    if tau <= 0 and target.by == "value":
        return ("by", f"the cut {tau:.6g} is not positive: with by='value' every entry may "
                "reach it, and the margin must cover them all; use by='abs', a positive "
                "threshold, or more buckets", None)
    if crowded or tau - lam * sigma - rho < 4 * sigma:
        if rho > lam * sigma:
            return ("dtype", f"the rounding of the {cp.dtype} transforms (up to {rho:.4g} per "
                    f"estimate, beside a noise margin of {lam * sigma:.4g}) is too close to "
                    f"the cut {tau:.6g}: compress with dtype=float64", None)
        want = certificate.buckets_for(cp.buckets, sigma, tau, lam + rho / sigma
                                       if sigma > 0 else lam)
        noise = (f"the residual noise ({sigma:.4g} per repetition) is too large for the cut "
                 f"{tau:.6g}: the certificate needs a margin of {lam * sigma:.4g} (the noise "
                 f"times {lam:.3g}) below what it keeps")
        from .matmul import MAX_LOG2B
        if want > 1 << MAX_LOG2B:
            more = min(1 << MAX_LOG2B, 16 * cp.buckets)
            return ("noise", f"{noise}, and at this cut no sketch (at most 2**{MAX_LOG2B} "
                    f"buckets) would certify it ({want} needed).  Either the entries asked for "
                    "do not stand out of the rest of the product (ask for larger ones: a higher "
                    "threshold, a smaller k; or compute them exactly), or this sketch is too "
                    f"noisy to find them (compress with more buckets, e.g. buckets={more}; "
                    f"now {cp.buckets})", None)
        # whether the ask rests on a cut that clears its own margin (a threshold, or a k-th
        # exact value standing out of the noise), else on values that may be far below the
        # true ones (pagh_mm.compressed.GROWTH)
        sound = target.k is None or tau > lam * sigma + rho
        return ("buckets", f"{noise}: compress with buckets={want} or more (now {cp.buckets})",
                want, sound)
    if left <= 0:
        return ("candidates", f"raise candidates= (now {candidates}; all were verified)", None)
    return ("rounds", f"raise rounds= (now {rounds})", None)


def warn_uncertified(query: str, advice) -> None:
    what = advice[1] if advice else "raise candidates="
    warnings.warn(f"{query} is not certified: {what}", CertificateWarning, stacklevel=3)


# --- per-row queries -------------------------------------------------------------------

def _top_per_row(K, V, I, w: int, xp):
    """Per row of the (rows, c) keys K (-inf: no entry), values V and column ids I: the
    ``w`` largest keys, ties to the smaller column id, as (rows, w) arrays (-inf padded)."""
    rows, c = K.shape
    if c <= w:
        pad = w - c
        K = xp.concatenate([K, xp.full((rows, pad), -xp.inf)], axis=1)
        V = xp.concatenate([V, xp.zeros((rows, pad))], axis=1)
        I = xp.concatenate([I, xp.full((rows, pad), -1, dtype=xp.int64)], axis=1)
        c = w
    kth = -xp.partition(-K, w - 1, axis=1)[:, w - 1:w]
    above = K > kth
    tied = (K == kth) & ~above
    room = w - above.sum(axis=1, keepdims=True)
    rank = xp.cumsum(tied, axis=1)                    # ties in column order (I ascending)
    take = above | (tied & (rank <= room))
    r, q = xp.nonzero(take)                           # row-major: w per row
    order = xp.lexsort(xp.stack([I[r, q], -K[r, q], r]))
    r, q = r[order], q[order]
    return (K[r, q].reshape(rows, w), V[r, q].reshape(rows, w), I[r, q].reshape(rows, w))


def scan_rows(cp, by: str, width: int, cuts, *, sketch=None, skip_diagonal: bool = False,
              progress=None):
    """Per row: the ``width`` largest keys >= ``cuts[row]`` (sorted, ties to the smaller
    column; -inf padded) with estimates and column ids, and ``next_key[row]``, the largest
    key of the row's other entries.  O(m width) memory."""
    xp = cp.backend.xp
    m, p = cp.shape
    w = width + 1
    PK = xp.full((m, w), -xp.inf)
    PV = xp.zeros((m, w))
    PI = xp.full((m, w), -1, dtype=xp.int64)
    below = xp.full(m, -xp.inf)
    if not cp.gram and m and bool(xp.isfinite(cuts).all()):
        bound = bucket_bound(cp.sketch if sketch is None else sketch)
        if bound < float(cuts.min()):        # no bucket reaches any row's cut: O(d b)
            if progress:
                progress("tiles", m * p, m * p)
            return PK[:, :width], PV[:, :width], PI[:, :width], xp.full(m, bound)
    for r0, c0, est in tiles(cp, sketch, progress):
        r1 = r0 + est.shape[0]
        K = key_of(est, by, xp)
        if skip_diagonal:
            K = _skip_diagonal(K.ravel(), r0, c0, est.shape, xp).reshape(est.shape)
        cut = cuts[r0:r1, None]
        below[r0:r1] = xp.maximum(below[r0:r1], xp.where(K < cut, K, -xp.inf).max(axis=1))
        K = xp.where(K >= cut, K, -xp.inf)
        cols = xp.broadcast_to(xp.arange(c0, c0 + est.shape[1], dtype=xp.int64), est.shape)
        PK[r0:r1], PV[r0:r1], PI[r0:r1] = _top_per_row(
            xp.concatenate([PK[r0:r1], K], axis=1), xp.concatenate([PV[r0:r1], est], axis=1),
            xp.concatenate([PI[r0:r1], cols], axis=1), w, xp)
    next_key = xp.maximum(below, PK[:, -1])
    return PK[:, :width], PV[:, :width], PI[:, :width], next_key


def _row_cuts(target: Target, found: Found, m: int, p: int, xp):
    """Per row: the n-th largest exact key found in the row if at least n are >= the
    threshold, else the threshold (-inf without one)."""
    thr = -math.inf if target.threshold is None else float(target.threshold)
    cuts = xp.full(m, thr)
    if found.ids.size == 0:
        return cuts
    key = key_of(found.exact, target.by, xp)
    row = found.ids // p
    order = xp.lexsort(xp.stack([-key, row]))             # by row, largest key first
    row, key = row[order], key[order]
    start = xp.searchsorted(row, xp.arange(m))
    count = xp.bincount(row, minlength=m)
    has = xp.nonzero(count >= target.k)[0]
    nth = key[start[has] + target.k - 1]
    cuts[has] = xp.maximum(nth, thr)
    return cuts


def search_rows(cp, target: Target, *, delta: float, candidates: int, rounds: int, width: int,
                progress=None, decoding: bool = False):
    """The certified search, per row: each row's answer is its ``target.k`` largest entries
    among those >= ``target.threshold``.  Returns (found, certified, margin, sigma, advice).
    ``decoding``: when every row has a cut (a threshold), the entries that dominate buckets
    above it are decoded, verified and peeled first (as in :func:`search`); the scans then
    certify every row, in O(d b) when no bucket is left above the lowest cut."""
    xp = cp.backend.xp
    m, p = cp.shape
    d = cp.reps
    size = m * p - (min(m, p) if target.exclude_diagonal else 0)
    found = _start(cp, target)
    residual, peeled = cp.sketch, False
    left = candidates
    certified, mg, sigma, advice = False, math.inf, 0.0, None
    rho = cp.rounding()                 # the transforms' rounding, at most, per estimate
    if decoding:
        bits = cp.bits.sketch.copy()
        residual, peeled = residual.copy(), True
        for _ in range(decode.ROUNDS):
            norm2, sigma, pairs, blind = cp.noise_model(residual)
            cuts = _row_cuts(target, found, m, p, xp)
            low = float(cuts.min()) if m else -math.inf
            if not math.isfinite(low) or left <= 0:
                break
            level = low - rho - certificate.margin(sigma, d, norm2 / pairs, low,
                                                   size - int(found.ids.size), delta, blind)
            added = _decode_step(cp, residual, bits, level, left, found, target) \
                if level > 0 else 0
            if not added:
                break
            left -= added
    for rnd in range(rounds):
        norm2, sigma, pairs, blind = cp.noise_model(residual)
        unreported = size - int(found.ids.size)
        cuts = _row_cuts(target, found, m, p, xp)
        finite = cuts[xp.isfinite(cuts)]
        low = float(finite.min()) if finite.size else -math.inf
        mg = certificate.margin(sigma, d, norm2 / pairs, low, unreported, delta, blind) + rho \
            if low > -math.inf else math.inf
        PK, PV, PI, nxt = scan_rows(cp, target.by, width, cuts - mg, sketch=residual,
                                    skip_diagonal=target.exclude_diagonal, progress=progress)
        r, q = xp.nonzero(PK > -xp.inf)
        ids = _new_ids(cp, r * p + PI[r, q], found)[:max(left, 0)]
        if cp.gram:             # keep mirrors together when the budget cuts the list
            ids = _new_ids(cp, ids, found)
        exact = exact_of(cp, ids)
        found.add(ids, exact, xp)
        left -= int(ids.size)
        cuts = _row_cuts(target, found, m, p, xp)
        finite = cuts[xp.isfinite(cuts)]
        low = float(finite.min()) if finite.size else -math.inf
        unreported = size - int(found.ids.size)
        lam = certificate.multiplier(d, certificate.entries_at_risk(norm2 / pairs, low, unreported),
                                     delta, blind) if low > -math.inf else math.inf
        mg = lam * sigma + rho
        ok_rows = (nxt == -xp.inf) | (nxt + mg < cuts)
        if bool(ok_rows.all()):
            certified = True
            break
        if low == -math.inf:
            advice = ("threshold", "give a threshold (rows whose n-th largest entry is not "
                      "separated from the noise cannot be certified without one)", None)
        else:
            advice = _advice(cp, target, low, sigma, lam, candidates, left, rounds, rnd,
                             rho=rho)
        if left <= 0 or (rnd >= 1 and advice[0] == "buckets"):
            break
        if not peeled:
            residual, peeled = residual.copy(), True
        peel(cp, residual, ids, exact)
        width = min(cp.shape[1], 2 * width)
    return found, certified, (mg if math.isfinite(mg) else float("inf")), sigma, advice
