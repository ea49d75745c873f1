"""Compiled CPU kernels of pagh_mm (numba), with the NumPy path's summation orders.

* :func:`scatter_dense`: the Count-Sketches of dense vectors for every repetition in one
  read of the input.  Each bucket's value is 0.0 plus the signed values s(i) x_i of its keys,
  added one at a time in increasing key order: the order of the SciPy scatter-matrix product
  it replaces (and of the GPU kernel), so the bits are the same.  Threads take disjoint
  vectors: the number of threads never changes a result.
"""
from __future__ import annotations

import functools
import os

import numpy as np

#: Whether pagh_mm uses these kernels (PAGH_MM_COMPILED=0: the NumPy/SciPy path, e.g. to
#: compare the two).
ENABLED = os.environ.get("PAGH_MM_COMPILED", "1") != "0"


@functools.lru_cache(maxsize=None)
def _kernels():
    import numba

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

    return scatter


def scatter_dense(X, h, s, b: int):
    """(nb, d, b) float64 sketches of the columns of the (keys, nb) float64 array ``X`` (any
    strides) with buckets ``h`` and signs ``s`` ((keys, d) int64 and float64, C order)."""
    keys, nb = X.shape
    d = h.shape[1]
    out = np.zeros((nb, d, b), dtype=np.float64)
    if nb and keys:
        _kernels()(np.ascontiguousarray(X.T), h, s, out)
    return out
