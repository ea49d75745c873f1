"""Count-Sketch scattering of the columns of A and the rows of B.

For repetition t the sketch of a vector x of length m is the length-b vector
P_t x with (P_t)[h(i), i] = s(i).  Stacking the d repetitions gives one sparse
(d b) x m matrix, so one sparse product scatters a block of columns of A for
every repetition at once, in O(nnz) work.
"""
from __future__ import annotations

from . import hashing
from .backend import Backend


def scatter_matrix(params: hashing.HashParams, which: int, n_keys: int, log2b: int, be: Backend,
                   offset=None):
    """The stacked (d * b) x n_keys Count-Sketch matrix of h_which, s_which (CSR, float64).

    ``offset(t)`` may remap bucket indices (identity by default).
    """
    xp = be.xp
    b = 1 << log2b
    keys = xp.arange(n_keys, dtype=xp.int64)
    rows, vals = [], []
    for t in range(params.reps):
        rows.append(hashing.buckets(params, t, which, keys, log2b, xp) + t * b)
        vals.append(hashing.signs(params, t, which, keys, xp))
    rows = xp.concatenate(rows)
    cols = xp.tile(keys, params.reps)
    vals = xp.concatenate(vals)
    return be.sp.csr_matrix((vals, (rows, cols)), shape=(params.reps * b, n_keys))


def sketch_block(S, M_block, be: Backend, transpose_input: bool):
    """Dense (nb, d * b) float64 sketches of the nb vectors of a block.

    ``M_block``: columns of A (m x nb), or rows of B (nb x p) with ``transpose_input``.
    """
    xp = be.xp
    X = M_block.T if transpose_input else M_block
    if be.sp.issparse(X):
        out = S @ X
        out = out.toarray() if be.sp.issparse(out) else out
    else:
        out = S @ xp.asarray(X, dtype=xp.float64)
    return xp.ascontiguousarray(xp.asarray(out, dtype=xp.float64).T)
