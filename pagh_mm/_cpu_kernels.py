"""The numba kernels of :mod:`pagh_mm.compiled` (module-level functions, so that numba's
on-disk cache finds them again in the next process; imported on first use).

They call :func:`fwht_gpu._cpu_kernels.serial`, whose code numba compiles into theirs: its
cache entries are only checked against this file, so after editing fwht_gpu's kernels in a
source tree, delete this package's ``__pycache__/*.nb*`` (an installed release is rebuilt
whole)."""
import numba
import numpy as np

from fwht_gpu._cpu_kernels import serial


@numba.njit(nogil=True, cache=True, parallel=True)
def scatter(XT, hT, sT, out):
    """out[k, t, hT[i, t]] += sT[i, t] XT[k, i] for i = 0, 1, ... (out zeroed): one
    vector per thread step, its d x b sketch staying in the cache."""
    nb, keys = XT.shape
    d = hT.shape[1]
    for k in numba.prange(nb):
        o = out[k]
        x = XT[k]
        for i in range(keys):
            v = x[i]
            for t in range(d):
                o[t, hT[i, t]] += sT[i, t] * v


@numba.njit(nogil=True, cache=True, inline="always")
def _sketch(w, k, D, ptr, idx, val, dense, h, s):
    """w (d, b) := the sketch of vector k: 0.0 plus s x_i in increasing key order.  Dense
    vectors: the rows of D, hashes per key (h, s: (keys, d)); sparse: the stored values
    ptr[k] .. ptr[k + 1] - 1 (keys idx, values val), hashes per key when h has a row per
    key (idx.size == 0 marks per-value hashes: h, s have a row per stored value)."""
    w[:] = 0.0
    d = h.shape[1]
    if dense:
        x = D[k]
        for i in range(x.size):
            v = x[i]
            for t in range(d):
                w[t, h[i, t]] += s[i, t] * v
    else:
        bykey = idx.size > 0
        for q in range(ptr[k], ptr[k + 1]):
            i = idx[q] if bykey else q
            v = val[q]
            for t in range(d):
                w[t, h[i, t]] += s[i, t] * v


@numba.njit(nogil=True, cache=True, inline="always")
def _transformed(wt, w64, f64, k, D, ptr, idx, val, dense, h, s, b, bits, block_bits):
    """wt := the FWHT (in wt's dtype) of vector k's sketch."""
    if f64:                         # float64 transforms: sketch in place
        _sketch(wt, k, D, ptr, idx, val, dense, h, s)
    else:                           # the float64 sketch, correctly rounded to wt's dtype
        _sketch(w64, k, D, ptr, idx, val, dense, h, s)
        for t in range(w64.shape[0]):
            for j in range(b):
                wt[t, j] = w64[t, j]
    serial(wt.reshape(-1), b, bits, block_bits)


@numba.njit(nogil=True, cache=True, inline="always")
def _pairs_rep(row, t, k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, hh, xx):
    """row[hA(i) ^ hB(j)] += sA(i) a_i sB(j) b_j in repetition t for the stored values of
    inner index k (Gram: i <= j, the pairs i < j twice)."""
    byA, byB = iA.size > 0, iB.size > 0
    a0, a1 = pA[k], pA[k + 1]
    b0, b1 = (a0, a1) if gram else (pB[k], pB[k + 1])
    for q in range(b0, b1):                          # B's (Gram: A's) hashes, signed values
        if gram:
            iq = iA[q] if byA else q
            hh[q - b0] = hA[iq, t]
            xx[q - b0] = sA[iq, t] * vA[q]
        else:
            iq = iB[q] if byB else q
            hh[q - b0] = hB[iq, t]
            xx[q - b0] = sB[iq, t] * vB[q]
    nq = b1 - b0
    for p in range(a0, a1):
        ip = iA[p] if byA else p
        hp = hA[ip, t]
        xp = sA[ip, t] * vA[p]
        if xp == 0.0:                                # a row left out of a bit sketch
            continue
        if gram:
            u = p - a0
            row[0] += xp * xp
            x2 = 2.0 * xp
            for q in range(u + 1, nq):
                row[hp ^ hh[q]] += x2 * xx[q]
        else:
            for q in range(nq):
                row[hp ^ hh[q]] += xp * xx[q]


@numba.njit(nogil=True, cache=True, inline="always")
def _pairs(tab, k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, hh, xx):
    """tab[t, hA(i) ^ hB(j)] += sA(i) a_i sB(j) b_j for the stored values of inner index k
    in every repetition: the XOR convolution of its two sketches, without transforms.
    Exact for the integer values it is used for (any order gives the same sum).
    hh, xx: scratch of at least the stored values of B's vector (Gram: A's)."""
    for t in range(tab.shape[0]):
        _pairs_rep(tab[t], t, k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, hh, xx)


@numba.njit(nogil=True, cache=True, parallel=True)
def pairs_only(pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, present, nb, tab, most):
    """Every inner index k < nb with present[k] added pair by pair (:func:`_pairs`) into
    tab[c] (c: the thread's share of the indices), repetition by repetition: the updates of
    one repetition stay in one (b,) table at a time (a cache-sized working set instead of
    the d b of all repetitions).  Exact integer sums: any order, the same bits."""
    nchunk, d = tab.shape[0], tab.shape[1]
    per = (nb + nchunk - 1) // nchunk
    for c in numba.prange(nchunk):
        chh = np.empty(most, dtype=np.int64)
        cxx = np.empty(most, dtype=np.float64)
        lo, hi = c * per, min(nb, (c + 1) * per)
        for t in range(d):
            row = tab[c, t]
            for k in range(lo, hi):
                if present[k]:
                    _pairs_rep(row, t, k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram,
                               chh, cxx)


@numba.njit(nogil=True, cache=True, parallel=True)
def fused(DA, pA, iA, vA, denseA, hA, sA, DB, pB, iB, vB, denseB, hB, sB, gram,
          present, nb, csize, bits, block_bits, f64, pair_limit, pool, wa, wb, w64, tab,
          most, nodes, flags):
    """nodes[c], flags[c]: the tree node of the inner indices c csize .. + csize - 1 of
    the block (present[k]: whether index k has a term; indices >= nb have none).  An index
    whose pairs of stored values number at most ``pair_limit`` (> 0 only for exact integer
    products of sparse factors) is added to the time-domain table tab[c] instead (no term
    in the tree).  pool[c], wa[c], wb[c], w64[c]: chunk c's work buffers; ``most``: the
    most stored values of one vector (the pairs' scratch)."""
    nchunk, d, b = nodes.shape
    levels = pool.shape[1] - 2
    for c in numba.prange(nchunk):
        cpool, cwa, cwb, cw64 = pool[c], wa[c], wb[c], w64[c]
        chh = np.empty(most, dtype=np.int64)
        cxx = np.empty(most, dtype=np.float64)
        free = np.arange(levels + 2)
        nfree = levels + 2
        slot = np.full(levels + 1, -1)
        for r in range(csize):
            k = c * csize + r
            cur = -1
            if k < nb and present[k]:
                direct = False
                if pair_limit > 0:
                    na = pA[k + 1] - pA[k]
                    pairs = na * (na + 1) // 2 if gram else na * (pB[k + 1] - pB[k])
                    direct = pairs <= pair_limit
                if direct:
                    _pairs(tab[c], k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, chh, cxx)
                else:
                    nfree -= 1
                    cur = free[nfree]
                    _transformed(cwa, cw64, f64, k, DA, pA, iA, vA, denseA, hA, sA, b, bits,
                                 block_bits)
                    o = cpool[cur]
                    if gram:
                        for t in range(d):
                            for j in range(b):
                                o[t, j] = cwa[t, j] * cwa[t, j]
                    else:
                        _transformed(cwb, cw64, f64, k, DB, pB, iB, vB, denseB, hB, sB, b,
                                     bits, block_bits)
                        for t in range(d):
                            for j in range(b):
                                o[t, j] = cwa[t, j] * cwb[t, j]
            level = 0
            while (r >> level) & 1:          # merge finished siblings: left + right
                left = slot[level]
                slot[level] = -1
                if left >= 0 and cur >= 0:
                    lo, ro = cpool[left], cpool[cur]
                    for t in range(d):
                        for j in range(b):
                            lo[t, j] = lo[t, j] + ro[t, j]
                    free[nfree] = cur
                    nfree += 1
                    cur = left
                elif left >= 0:
                    cur = left
                level += 1
            slot[level] = cur
        root = slot[levels]
        flags[c] = root >= 0
        if root >= 0:
            nodes[c] = cpool[root]


@numba.njit(nogil=True, cache=True, inline="always")
def _median_sorted(v, n, gram):
    """The median of the sorted v[:n] as the NumPy path forms it."""
    if n == 0:
        return 0.0
    if gram:
        return (v[(n - 1) // 2] + v[n // 2]) * 0.5
    if n % 2:
        return v[n // 2]
    return (v[n // 2 - 1] + v[n // 2]) / 2.0


@numba.njit(nogil=True, cache=True, inline="always")
def _sort2(a, b):
    """(min, max), compiled to selects (no branches)."""
    lo = a if a < b else b
    hi = b if a < b else a
    return lo, hi


@numba.njit(nogil=True, cache=True, inline="always")
def _median5(x0, x1, x2, x3, x4, gram):
    """The median of five values through a branch-free sorting network; Gram sketches:
    (m + m) * 0.5, the general path's (a + b) * 0.5 of the middle pair."""
    x0, x1 = _sort2(x0, x1)
    x3, x4 = _sort2(x3, x4)
    x2, x4 = _sort2(x2, x4)
    x2, x3 = _sort2(x2, x3)
    x0, x3 = _sort2(x0, x3)
    x0, x2 = _sort2(x0, x2)
    x1, x4 = _sort2(x1, x4)
    x1, x3 = _sort2(x1, x3)
    x1, x2 = _sort2(x1, x2)
    return (x2 + x2) * 0.5 if gram else x2


@numba.njit(nogil=True, cache=True, inline="always")
def _insert(v, n, x):
    """x into the sorted v[:n], after the values <= x (insertion sort's step)."""
    j = n
    while j > 0 and v[j - 1] > x:
        v[j] = v[j - 1]
        j -= 1
    v[j] = x


@numba.njit(nogil=True, cache=True, inline="always")
def _rep_value(sr, s2T, sketch, t, c, idx, gram):
    """Repetition t's estimate of an entry whose bucket is idx (Gram sketches: halved)."""
    x = sr[t] * s2T[c, t] * sketch[t, idx]
    return x * 0.5 if gram else x


@numba.njit(nogil=True, cache=True, inline="always")
def _estimate_any(hr, sr, h2T, s2T, c, sketch, fwht, gram, mask, v):
    """One entry's median over any number of repetitions (insertion sort)."""
    n = 0
    for t in range(hr.size):
        a = hr[t]
        b = h2T[c, t]
        idx = (a ^ b) if fwht else ((a + b) & mask)
        if gram and idx == 0:
            continue
        _insert(v, n, _rep_value(sr, s2T, sketch, t, c, idx, gram))
        n += 1
    return _median_sorted(v, n, gram)


@numba.njit(nogil=True, cache=True, parallel=True)
def tile_estimates(h1, s1, h2T, s2T, sketch, fwht, gram, shift, out):
    """out[r, c] := the median over the repetitions t of s1[t, r] s2T[c, t] c_t[h1 op h2]
    (op: XOR for the FWHT, addition mod b for the FFT): the middle value for an odd count,
    (a + b) / 2 of the two middle ones for an even count; Gram sketches: the values are
    halved, the repetitions with h1 = h2 (bucket 0) left out, (a + b) * 0.5 of the middle
    ones, and 0.0 when none is left.  The NumPy path's operations (pagh_mm.compressed._values,
    _median), values sorted by insertion (the order of equal values, +0.0 and -0.0, is the
    only freedom).  Entries with c < r + shift are not computed (0.0): the part of a tile
    below the diagonal, which a Gram scan skips."""
    rows = h1.shape[1]
    cols = h2T.shape[0]
    mask = sketch.shape[1] - 1
    for r in numba.prange(rows):
        v = np.empty(h1.shape[0], dtype=np.float64)
        hr = h1[:, r].copy()
        sr = s1[:, r].copy()
        first = min(max(0, r + shift), cols)
        out[r, :first] = 0.0
        for c in range(first, cols):
            out[r, c] = _estimate_any(hr, sr, h2T, s2T, c, sketch, fwht, gram, mask, v)


@numba.njit(nogil=True, cache=True, parallel=True)
def tile_estimates5(h1, s1, h2T, s2T, sketch, gram, shift, out):
    """:func:`tile_estimates` for five repetitions of an FWHT sketch: the medians through a
    branch-free sorting network (the same values; Gram entries with a blind repetition go
    through the general path)."""
    rows = h1.shape[1]
    cols = h2T.shape[0]
    mask = sketch.shape[1] - 1
    for r in numba.prange(rows):
        v = np.empty(5, dtype=np.float64)
        hr = h1[:, r].copy()
        sr = s1[:, r].copy()
        a0, a1, a2, a3, a4 = hr[0], hr[1], hr[2], hr[3], hr[4]
        b0, b1, b2, b3, b4 = sr[0], sr[1], sr[2], sr[3], sr[4]
        first = min(max(0, r + shift), cols)
        out[r, :first] = 0.0
        for c in range(first, cols):
            i0, i1, i2 = a0 ^ h2T[c, 0], a1 ^ h2T[c, 1], a2 ^ h2T[c, 2]
            i3, i4 = a3 ^ h2T[c, 3], a4 ^ h2T[c, 4]
            if gram and (i0 == 0 or i1 == 0 or i2 == 0 or i3 == 0 or i4 == 0):
                out[r, c] = _estimate_any(hr, sr, h2T, s2T, c, sketch, True, True, mask, v)
                continue
            x0 = b0 * s2T[c, 0] * sketch[0, i0]
            x1 = b1 * s2T[c, 1] * sketch[1, i1]
            x2 = b2 * s2T[c, 2] * sketch[2, i2]
            x3 = b3 * s2T[c, 3] * sketch[3, i3]
            x4 = b4 * s2T[c, 4] * sketch[4, i4]
            if gram:
                x0, x1, x2, x3, x4 = x0 * 0.5, x1 * 0.5, x2 * 0.5, x3 * 0.5, x4 * 0.5
            out[r, c] = _median5(x0, x1, x2, x3, x4, gram)


@numba.njit(nogil=True, cache=True, parallel=True)
def pair_dots(ap, ai, av, bp, bi, bv, r, c, out, bound):
    """out[q] = sum_k A[r[q], k] B[k, c[q]] over the common inner indices of row r[q] of A
    (ap, ai, av: CSR rows, sorted) and column c[q] of B (bp, bi, bv: CSC columns, sorted), in
    increasing k; bound[q] the same sum of |A| |B| (the caller uses out only where it proves
    every partial sum an exact integer)."""
    for q in numba.prange(r.size):
        i, j = r[q], c[q]
        x, xe = ap[i], ap[i + 1]
        y, ye = bp[j], bp[j + 1]
        s = 0.0
        a = 0.0
        while x < xe and y < ye:
            kx, ky = ai[x], bi[y]
            if kx == ky:
                p = av[x] * bv[y]
                s += p
                a += abs(p)
                x += 1
                y += 1
            elif kx < ky:
                x += 1
            else:
                y += 1
        out[q] = s
        bound[q] = a


@numba.njit(nogil=True, cache=True, inline="always")
def _tile_key(est, r, c, gr, gc, by_abs, skip_diag, upper):
    k = abs(est[r, c]) if by_abs else est[r, c]
    if (skip_diag and gr == gc) or (upper and gr > gc):
        k = -np.inf
    return k


@numba.njit(nogil=True, cache=True, parallel=True)
def select_tile(est, r0, c0, p, by_abs, skip_diag, upper, lim, strict, cut, counts, lows):
    """Pass 1 of :func:`pagh_mm.compiled.select_tile`: per row, how many keys pass (key > lim
    with ``strict``, else key >= lim) and the largest key below ``cut``."""
    rows, cols = est.shape
    for r in numba.prange(rows):
        n = 0
        low = -np.inf
        for c in range(cols):
            k = _tile_key(est, r, c, r0 + r, c0 + c, by_abs, skip_diag, upper)
            if k < cut and k > low:
                low = k
            if (k > lim) if strict else (k >= lim):
                n += 1
        counts[r] = n
        lows[r] = low


@numba.njit(nogil=True, cache=True, parallel=True)
def select_fill(est, r0, c0, p, by_abs, skip_diag, upper, lim, strict, starts, values, ids):
    """Pass 2: the passing entries' estimates and flat ids, in row-major order."""
    rows, cols = est.shape
    for r in numba.prange(rows):
        at = starts[r]
        for c in range(cols):
            k = _tile_key(est, r, c, r0 + r, c0 + c, by_abs, skip_diag, upper)
            if (k > lim) if strict else (k >= lim):
                values[at] = est[r, c]
                ids[at] = (r0 + r) * p + c0 + c
                at += 1


@numba.njit(nogil=True, cache=True, parallel=True)
def tile_keys(est, r0, c0, by_abs, skip_diag, upper, keys):
    """keys[r * cols + c]: the scan key of every entry of a tile (see :func:`select_tile`)."""
    rows, cols = est.shape
    for r in numba.prange(rows):
        for c in range(cols):
            keys[r * cols + c] = _tile_key(est, r, c, r0 + r, c0 + c, by_abs, skip_diag, upper)


@numba.njit(nogil=True, cache=True, inline="always")
def _bound_dropped(bnd, gr, gc, skip_diag, upper, cut, low):
    """An entry dropped early with its key at most ``bnd`` (< lim): ``bnd`` remembered in
    ``low`` when below ``cut``, unless the entry is skipped (the diagonal, or below it)."""
    if not ((skip_diag and gr == gc) or (upper and gr > gc)):
        if bnd < cut and bnd > low:
            low = bnd
    return low


@numba.njit(nogil=True, cache=True, inline="always")
def _offer_scanned(e, c, gr, gc, gram, diag, by_abs, skip_diag, upper, lim, strict, cut, r, n,
                   low, vals, cols_out):
    """A one-pass scan's evaluated entry (a Gram diagonal entry: its exact value) offered as
    :func:`_offer` does, unless it is skipped (the diagonal, or below it: its key -inf, below
    any low, and at lim = -inf the scan is strict); returns (n, low)."""
    if gram and gr == gc:
        e = diag[gr]
    if (skip_diag and gr == gc) or (upper and gr > gc):
        return n, low
    return _offer(e, c, gr, by_abs, lim, strict, cut, r, n, low, vals, cols_out)


@numba.njit(nogil=True, cache=True, parallel=True)
def scan_tile5(h1, s1, h2T, s2T, sketch, gram, diag, shift, r0, c0, by_abs, skip_diag, lim,
               strict, cut, vals, cols_out, counts, lows):
    """:func:`tile_estimates5` and :func:`select_tile` in one pass without the tile: per row r
    the passing entries' estimates and columns go to vals[r, :n], cols_out[r, :n] (their
    number in counts[r], which may exceed the buffer: the caller then scans the tile the
    two-pass way), to lows[r] a bound on the keys below ``cut`` (the largest such key, or
    for an entry rejected after three repetitions, the largest of their keys: three of five
    values within [-B, B] put the median there).  Gram sketches: the diagonal's estimates
    are its exact values ``diag``."""
    rows = h1.shape[1]
    cols = h2T.shape[0]
    mask = sketch.shape[1] - 1
    upper = shift > -(1 << 61)
    for r in numba.prange(rows):
        v = np.empty(5, dtype=np.float64)
        hr = h1[:, r].copy()
        sr = s1[:, r].copy()
        a0, a1, a2, a3, a4 = hr[0], hr[1], hr[2], hr[3], hr[4]
        b0, b1, b2, b3, b4 = sr[0], sr[1], sr[2], sr[3], sr[4]
        n = 0
        low = -np.inf
        for c in range(min(max(0, r + shift), cols), cols):
            i0, i1, i2 = a0 ^ h2T[c, 0], a1 ^ h2T[c, 1], a2 ^ h2T[c, 2]
            i3, i4 = a3 ^ h2T[c, 3], a4 ^ h2T[c, 4]
            if gram and (i0 == 0 or i1 == 0 or i2 == 0 or i3 == 0 or i4 == 0):
                e = _estimate_any(hr, sr, h2T, s2T, c, sketch, True, True, mask, v)
            else:
                x0 = b0 * s2T[c, 0] * sketch[0, i0]
                x1 = b1 * s2T[c, 1] * sketch[1, i1]
                x2 = b2 * s2T[c, 2] * sketch[2, i2]
                if gram:
                    x0, x1, x2 = x0 * 0.5, x1 * 0.5, x2 * 0.5
                if by_abs:
                    y0, y1, y2 = abs(x0), abs(x1), abs(x2)
                else:
                    y0, y1, y2 = x0, x1, x2
                if (y0 < lim) & (y1 < lim) & (y2 < lim):
                    # three of five below lim: the median's key is at most their largest
                    # (< lim: the entry fails), which bounds it where it counts (below cut)
                    low = _bound_dropped(max(y0, max(y1, y2)), r0 + r, c0 + c, skip_diag,
                                         upper, cut, low)
                    continue
                x3 = b3 * s2T[c, 3] * sketch[3, i3]
                x4 = b4 * s2T[c, 4] * sketch[4, i4]
                if gram:
                    x3, x4 = x3 * 0.5, x4 * 0.5
                e = _median5(x0, x1, x2, x3, x4, gram)
            n, low = _offer_scanned(e, c, r0 + r, c0 + c, gram, diag, by_abs, skip_diag, upper,
                                    lim, strict, cut, r, n, low, vals, cols_out)
        counts[r] = n
        lows[r] = low


@numba.njit(nogil=True, cache=True, parallel=True)
def scan_tile_odd(h1, s1, h2T, s2T, sketch, gram, diag, shift, r0, c0, by_abs, skip_diag, lim,
                  strict, cut, vals, cols_out, counts, lows):
    """:func:`scan_tile5` for any odd number d of repetitions of an FWHT sketch: an entry is
    rejected when h = (d + 1) // 2 of its keys are below ``lim`` (h values within [-B, B], B
    the largest of those keys, put the median there: the bound offered to lows[r]), after its
    first h values when they all are; the others' medians through :func:`_estimate_any`'s
    insertion, so the general path's values.  Gram entries with a blind repetition go through
    the general path."""
    d = h1.shape[0]
    h = (d + 1) // 2
    rows = h1.shape[1]
    cols = h2T.shape[0]
    mask = sketch.shape[1] - 1
    upper = shift > -(1 << 61)
    for r in numba.prange(rows):
        v = np.empty(d, dtype=np.float64)
        xs = np.empty(d, dtype=np.float64)
        hr = h1[:, r].copy()
        sr = s1[:, r].copy()
        n = 0
        low = -np.inf
        for c in range(min(max(0, r + shift), cols), cols):
            gr, gc = r0 + r, c0 + c
            blind = False
            if gram:
                for t in range(d):
                    if hr[t] ^ h2T[c, t] == 0:
                        blind = True
                        break
            if blind:
                e = _estimate_any(hr, sr, h2T, s2T, c, sketch, True, True, mask, v)
            else:
                # the first h keys, then (when not all below lim) the others; an entry with h
                # keys below lim fails
                below = 0
                bnd = -np.inf
                for t in range(h):
                    x = _rep_value(sr, s2T, sketch, t, c, hr[t] ^ h2T[c, t], gram)
                    xs[t] = x
                    y = abs(x) if by_abs else x
                    fail = y < lim
                    below += fail
                    bnd = max(bnd, y if fail else -np.inf)
                if below < h:
                    for t in range(h, d):
                        x = _rep_value(sr, s2T, sketch, t, c, hr[t] ^ h2T[c, t], gram)
                        xs[t] = x
                        y = abs(x) if by_abs else x
                        if y < lim:
                            below += 1
                            bnd = max(bnd, y)
                            if below == h:
                                break
                if below >= h:
                    # h keys below lim: the median's key is at most the largest of them (< lim:
                    # the entry fails), which bounds it where it counts (below cut)
                    low = _bound_dropped(bnd, gr, gc, skip_diag, upper, cut, low)
                    continue
                for t in range(d):             # insertion, in _estimate_any's order
                    _insert(v, t, xs[t])
                e = (v[h - 1] + v[h - 1]) * 0.5 if gram else v[h - 1]
            n, low = _offer_scanned(e, c, gr, gc, gram, diag, by_abs, skip_diag, upper, lim,
                                    strict, cut, r, n, low, vals, cols_out)
        counts[r] = n
        lows[r] = low


@numba.njit(nogil=True, cache=True, inline="always")
def _offer(e, c, gr, by_abs, lim, strict, cut, r, n, low, vals, cols_out):
    """An evaluated entry (estimate e, column c) of row r: stored when its key passes
    ``lim``, its key remembered in ``low`` when below ``cut``; returns (n, low)."""
    k = abs(e) if by_abs else e
    if k < cut and k > low:
        low = k
    if (k > lim) if strict else (k >= lim):
        if n < vals.shape[1]:
            vals[r, n] = e
            cols_out[r, n] = c
        n += 1
    return n, low


@numba.njit(nogil=True, cache=True, inline="always")
def _heavy(bitmap, t, v):
    return (bitmap[t, v >> 6] >> numba.uint64(v & 63)) & numba.uint64(1)


@numba.njit(nogil=True, cache=True, parallel=True)
def pruned_scan5(h1, s1, h2T, s2T, sketch, gram, diag, r0, heavy, hstart, bitmap, starts,
                 members, by_abs, skip_diag, lim, cut, vals, cols_out, counts, lows):
    """:func:`scan_tile5` without looking at every entry: the entries of rows r0 .. r0 +
    rows of a five-repetition FWHT product whose key can reach ``lim`` > 0.  A median of
    five has |median| >= lim only if three of its values have |value| >= lim (their
    buckets are heavy: ``bitmap``), so one of repetitions 0, 1, 2 sees the entry in a heavy
    bucket (``heavy[hstart[t]:hstart[t + 1]]``); the columns j with h_t(i) ^ h_t(j) = u are
    ``members[t, starts[t, v]:starts[t, v + 1]]`` for v = h_t(i) ^ u.  Each entry is
    considered once (at the first repetition that finds it) and evaluated when three of its
    buckets are heavy; the others' keys are at most the largest magnitude of a bucket that
    is not heavy (the caller's bound).  Gram sketches: the upper triangle; entries with a
    blind repetition (bucket 0) are all evaluated (the general median), the diagonal gives
    its exact value unless skipped.  Per row as :func:`scan_tile5` (vals, cols_out,
    counts, lows)."""
    rows = h1.shape[1]
    p = h2T.shape[0]
    mask = sketch.shape[1] - 1
    strict = False
    factor = 0.5 if gram else 1.0
    for r in numba.prange(rows):
        v = np.empty(5, dtype=np.float64)
        hr = h1[:, r].copy()
        sr = s1[:, r].copy()
        gr = r0 + r
        n = 0
        low = -np.inf
        for t in range(3):
            for q in range(hstart[t], hstart[t + 1]):
                want = hr[t] ^ heavy[q]
                for z in range(starts[t, want], starts[t, want + 1]):
                    c = members[t, z]
                    if (gram and c <= gr) or (skip_diag and c == gr):
                        continue
                    i0, i1, i2 = hr[0] ^ h2T[c, 0], hr[1] ^ h2T[c, 1], hr[2] ^ h2T[c, 2]
                    i3, i4 = hr[3] ^ h2T[c, 3], hr[4] ^ h2T[c, 4]
                    if gram and (i0 == 0 or i1 == 0 or i2 == 0 or i3 == 0 or i4 == 0):
                        continue                    # a blind repetition: below
                    k0, k1 = _heavy(bitmap, 0, i0), _heavy(bitmap, 1, i1)
                    if (t >= 1 and k0 == 1) or (t == 2 and k1 == 1):
                        continue                    # found at an earlier repetition
                    if k0 + k1 + _heavy(bitmap, 2, i2) + _heavy(bitmap, 3, i3) + \
                            _heavy(bitmap, 4, i4) < 3:
                        continue                    # below lim (the caller's bound)
                    x0 = sr[0] * s2T[c, 0] * sketch[0, i0] * factor
                    x1 = sr[1] * s2T[c, 1] * sketch[1, i1] * factor
                    x2 = sr[2] * s2T[c, 2] * sketch[2, i2] * factor
                    x3 = sr[3] * s2T[c, 3] * sketch[3, i3] * factor
                    x4 = sr[4] * s2T[c, 4] * sketch[4, i4] * factor
                    e = _median5(x0, x1, x2, x3, x4, gram)
                    n, low = _offer(e, c, gr, by_abs, lim, strict, cut, r, n, low, vals,
                                    cols_out)
        if gram:
            for t in range(5):                      # entries with a blind repetition
                want = hr[t]
                for z in range(starts[t, want], starts[t, want + 1]):
                    c = members[t, z]
                    if c <= gr:
                        continue
                    first = True                    # the first repetition blind to it
                    for t2 in range(t):
                        if hr[t2] == h2T[c, t2]:
                            first = False
                    if not first:
                        continue
                    e = _estimate_any(hr, sr, h2T, s2T, c, sketch, True, True, mask, v)
                    n, low = _offer(e, c, gr, by_abs, lim, strict, cut, r, n, low, vals,
                                    cols_out)
            if not skip_diag and gr < p:
                n, low = _offer(diag[gr], gr, gr, by_abs, lim, strict, cut, r, n, low, vals,
                                cols_out)
        counts[r] = n
        lows[r] = low
