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
def _transformed(wt, w64, direct, k, D, ptr, idx, val, dense, h, s, b, bits, block_bits):
    """wt := the FWHT (in wt's dtype) of vector k's sketch."""
    if direct:                      # float64 transforms: sketch in place
        _sketch(wt, k, D, ptr, idx, val, dense, h, s)
    else:                           # the float64 sketch, correctly rounded to wt's dtype
        _sketch(w64, k, D, ptr, idx, val, dense, h, s)
        for t in range(w64.shape[0]):
            for j in range(b):
                wt[t, j] = w64[t, j]
    serial(wt.reshape(-1), b, bits, block_bits)


@numba.njit(nogil=True, cache=True, parallel=True)
def fused(DA, pA, iA, vA, denseA, hA, sA, DB, pB, iB, vB, denseB, hB, sB, gram,
          present, nb, csize, bits, block_bits, direct, nodes, flags):
    """nodes[c], flags[c]: the tree node of the inner indices c csize .. + csize - 1 of
    the block (present[k]: whether index k has a term; indices >= nb have none)."""
    nchunk, d, b = nodes.shape
    levels = 0
    while (1 << levels) < csize:
        levels += 1
    for c in numba.prange(nchunk):
        pool = np.empty((levels + 2, d, b), dtype=nodes.dtype)
        wa = np.empty((d, b), dtype=nodes.dtype)
        wb = np.empty((d, b), dtype=nodes.dtype)
        w64 = np.empty((d, b) if not direct else (1, 1), dtype=np.float64)
        free = np.arange(levels + 2)
        nfree = levels + 2
        slot = np.full(levels + 1, -1)
        for r in range(csize):
            k = c * csize + r
            cur = -1
            if k < nb and present[k]:
                nfree -= 1
                cur = free[nfree]
                _transformed(wa, w64, direct, k, DA, pA, iA, vA, denseA, hA, sA, b, bits,
                             block_bits)
                o = pool[cur]
                if gram:
                    for t in range(d):
                        for j in range(b):
                            o[t, j] = wa[t, j] * wa[t, j]
                else:
                    _transformed(wb, w64, direct, k, DB, pB, iB, vB, denseB, hB, sB, b,
                                 bits, block_bits)
                    for t in range(d):
                        for j in range(b):
                            o[t, j] = wa[t, j] * wb[t, j]
            level = 0
            while (r >> level) & 1:          # merge finished siblings: left + right
                left = slot[level]
                slot[level] = -1
                if left >= 0 and cur >= 0:
                    lo, ro = pool[left], pool[cur]
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
            nodes[c] = pool[root]
