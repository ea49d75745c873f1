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
def _pairs(tab, k, pA, iA, vA, hA, sA, pB, iB, vB, hB, sB, gram, hh, xx):
    """tab[t, hA(i) ^ hB(j)] += sA(i) a_i sB(j) b_j for the stored values of inner index k
    (Gram: i <= j, the pairs i < j twice): the XOR convolution of its two sketches, without
    transforms.  Exact for the integer values it is used for (any order gives the same sum).
    hh, xx: scratch of at least the stored values of B's vector (Gram: A's)."""
    d = tab.shape[0]
    byA, byB = iA.size > 0, iB.size > 0
    a0, a1 = pA[k], pA[k + 1]
    b0, b1 = (a0, a1) if gram else (pB[k], pB[k + 1])
    for t in range(d):
        row = tab[t]
        for q in range(b0, b1):                      # B's (Gram: A's) hashes, signed values
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
            if gram:
                u = p - a0
                row[0] += xp * xp
                x2 = 2.0 * xp
                for q in range(u + 1, nq):
                    row[hp ^ hh[q]] += x2 * xx[q]
            else:
                for q in range(nq):
                    row[hp ^ hh[q]] += xp * xx[q]


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


@numba.njit(nogil=True, cache=True, parallel=True)
def tile_estimates(h1, s1, h2, s2, sketch, fwht, gram, out):
    """out[r, c] := the median over the repetitions t of s1[t, r] s2[t, c] c_t[h1 op h2]
    (op: XOR for the FWHT, addition mod b for the FFT): the middle value for an odd count,
    (a + b) * 0.5 of the two middle ones for an even count; Gram sketches: the values are
    halved, the repetitions with h1 = h2 (bucket 0) left out, and 0.0 when none is left.
    The NumPy path's operations (pagh_mm.compressed._values, _median), values sorted by
    insertion (the order of equal values, +0.0 and -0.0, is the only freedom)."""
    d, rows = h1.shape
    cols = h2.shape[1]
    mask = sketch.shape[1] - 1
    for r in numba.prange(rows):
        v = np.empty(d, dtype=np.float64)
        for c in range(cols):
            n = 0
            for t in range(d):
                a = h1[t, r]
                b = h2[t, c]
                idx = (a ^ b) if fwht else ((a + b) & mask)
                if gram and idx == 0:
                    continue
                x = s1[t, r] * s2[t, c] * sketch[t, idx]
                if gram:
                    x = x * 0.5
                j = n                          # insertion: after the values <= x
                while j > 0 and v[j - 1] > x:
                    v[j] = v[j - 1]
                    j -= 1
                v[j] = x
                n += 1
            if n == 0:
                out[r, c] = 0.0
            elif gram:
                out[r, c] = (v[(n - 1) // 2] + v[n // 2]) * 0.5
            elif n % 2:
                out[r, c] = v[n // 2]
            else:
                out[r, c] = (v[n // 2 - 1] + v[n // 2]) / 2.0
