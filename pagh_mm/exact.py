"""Exact values of entries of A @ B: factor rows/columns selected in O(stored values), integer
products exact beyond 2**53 through Python integers."""
from __future__ import annotations

import warnings
import weakref

import numpy as np

from . import query
from .backend import cpu, is_sparse, on_gpu
from .reduction import PairwiseSum, row_sums, sparse_row_sums

#: Integer dot products whose magnitude bound stays below this are exact in float64.
_EXACT_FLOAT = float(2**53) * (1 - 2.0**-20)


class ExactValueWarning(UserWarning):
    """Exact values of an integer product exceed 2**53: returned as the nearest float64."""


def _dense(M, xp):
    """A slice of a factor as a dense float64 array (a few rows or columns)."""
    M = M.toarray() if hasattr(M, "toarray") else M
    return xp.asarray(M, dtype=xp.float64)


def select(M, idx, be, dtype=None):
    """Rows ``idx`` of A (CSC) or columns ``idx`` of B (CSR) as a CSR (len(idx), n) matrix, in
    O(stored values + len(idx) log len(idx)): never an index over the other dimension (SciPy's
    own row indexing of a CSC matrix allocates one over all m rows)."""
    xp, sp = be.xp, be.sp
    want, inv = xp.unique(idx, return_inverse=True)
    keys = M.indices.astype(xp.int64)
    at = xp.minimum(xp.searchsorted(want, keys), want.size - 1)
    hit = xp.nonzero(want[at] == keys)[0]
    inner = xp.searchsorted(M.indptr[1:], hit, side="right").astype(xp.int64)
    data = M.data[hit] if dtype is None else M.data[hit].astype(dtype)
    n = M.shape[1] if M.format == "csc" else M.shape[0]
    part = sp.csr_matrix((data, (at[hit], inner)), shape=(int(want.size), n))
    part.sum_duplicates()
    return part[inv.ravel()]


def _entries_of(M, idx: int, axis: int, be):
    """(indices, values) of the stored or non-zero values of row ``idx`` (axis 0) or column
    ``idx`` (axis 1) of a factor, on the host, as integers."""
    if is_sparse(M):
        part = select(M, be.xp.asarray([idx], dtype=be.xp.int64), be)
        return be.asnumpy(part.indices).astype(np.int64), be.asnumpy(part.data)
    v = be.asnumpy(M[idx] if axis == 0 else M[:, idx]).ravel()
    nz = np.flatnonzero(v)
    return nz, v[nz]


def _exact_integers(be, A, B, r, c):
    """Exact integer dot products of the candidates (r, c), as float64: Python integers over
    the positions where both the row of A and the column of B hold a value (on the host,
    O(values of that row and column) each); an ExactValueWarning for values beyond 2**53."""
    exact = []
    for ri, ci in zip(be.asnumpy(r).tolist(), be.asnumpy(c).tolist()):
        ia, va = _entries_of(A, ri, 0, be)
        ib, vb = _entries_of(B, ci, 1, be)
        _, pa, pb = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
        exact.append(sum(int(x) * int(y) for x, y in zip(va[pa].tolist(), vb[pb].tolist())))
    over = [v for v in exact if abs(v) > 2**53]
    if over:
        warnings.warn(f"{len(over)} exact value(s) of this integer product exceed 2**53 in magnitude "
                      f"(largest |C| = {max(abs(float(v)) for v in over):.6g}); they are returned as "
                      "the nearest float64 (relative error <= 2**-53)", ExactValueWarning, stacklevel=5)
    return np.array([float(v) for v in exact], dtype=np.float64)


#: Per sparse factor (weakly held): its rows (A) or columns (B) as sorted int64/float64 index
#: arrays and whether every stored value is an integer, for :func:`_integer_dots`.
_SLICES: dict = {}


def _cached(M, key: tuple, build):
    """``build()``, computed once per sparse factor ``M`` and ``key`` while ``M`` lives."""
    key = (id(M),) + key
    entry = _SLICES.get(key)
    got = entry[1] if entry is not None and entry[0]() is M else None
    if got is None:
        got = build()
        _SLICES[key] = (weakref.ref(M), got)
        weakref.finalize(M, _SLICES.pop, key, None)
    return got


def _slices(M, rows: bool):
    def build():
        T = M.tocsr() if rows else M.tocsc()
        T.sort_indices()
        val = T.data.astype(np.float64)
        return ((T.indptr.astype(np.int64), T.indices.astype(np.int64), val),
                bool((np.trunc(val) == val).all()))
    return _cached(M, (rows,), build)


def _device_slices(be, M, rows: bool):
    """(indptr, sort keys, values) of a sparse factor's rows (A, CSR: keys the inner index)
    or columns (B, CSC: keys column * n + inner index, increasing), float64, on the GPU;
    cached per factor like :func:`_slices`."""
    def build():
        xp = be.xp
        T = M.tocsr() if rows else M.tocsc()
        if not T.has_sorted_indices:
            T = T.copy()
            T.sort_indices()
        ptr = T.indptr.astype(xp.int64)
        keys = T.indices.astype(xp.int64)
        if not rows:                      # one sorted key per stored value of B's columns
            n = int(M.shape[0])
            keys = xp.repeat(xp.arange(ptr.size - 1, dtype=xp.int64), xp.diff(ptr)) * n + keys
        return ptr, keys, T.data.astype(xp.float64)
    return _cached(M, (rows, "device"), build)


def _gpu_sparse_dots(be, A, B, r, c):
    """(C[r, c], sum |A[r, k]| |B[k, c]|) of sparse factors on the GPU in a few array passes:
    the stored values of each row of A looked up in its column of B (one binary search over
    B's sorted (column, inner index) keys), the products summed by the pairwise tree over
    the inner index (:func:`pagh_mm.reduction.sparse_row_sums`: the bits of :func:`_dots`)."""
    xp = be.xp
    n = int(A.shape[1])
    aptr, aidx, aval = _device_slices(be, A, True)
    _, bkey, bval = _device_slices(be, B, False)
    q = int(r.size)
    start = aptr[r]
    la = aptr[r + 1] - start
    total = int(la.sum()) if q else 0
    if total == 0 or bkey.size == 0:
        z = xp.zeros(q, dtype=xp.float64)
        return z, z.copy()
    owner = xp.repeat(xp.arange(q, dtype=xp.int64), la)
    pos = start[owner] + xp.arange(total, dtype=xp.int64) - xp.repeat(xp.cumsum(la) - la, la)
    k = aidx[pos]
    want = c[owner] * n + k
    at = xp.minimum(xp.searchsorted(bkey, want), bkey.size - 1)
    hit = xp.nonzero(bkey[at] == want)[0]
    owner, k = owner[hit], k[hit]
    prod = aval[pos[hit]] * bval[at[hit]]
    mag = xp.abs(prod)
    if prod.size and bool((xp.trunc(prod) == prod).all()):
        bound = xp.bincount(owner, weights=mag, minlength=q)
        if float(bound.max()) < _EXACT_FLOAT:   # integer partial sums: exact in any order
            return xp.bincount(owner, weights=prod, minlength=q) + 0.0, bound
    return sparse_row_sums(owner, k, prod, q, xp), sparse_row_sums(owner, k, mag, q, xp)


def _integer_dots(be, A, B, r, c):
    """(values, done): exact C[r, c] of integer-valued sparse factors on the CPU where every
    partial sum is an integer below 2**53 (then exact in any order, so equal to the pairwise
    tree's bits), one compiled merge per pair; ``done`` marks those; None when not applicable."""
    from . import compiled
    if be.gpu or not compiled.ENABLED or not (is_sparse(A) and is_sparse(B)):
        return None
    for M, axis in ((A, 0), (B, 1)):       # the converted index: O(nnz), not O(dimension)
        if M.shape[axis] > max(4 * int(M.nnz), 1 << 16):
            return None
    rows, int_a = _slices(A, True)
    cols, int_b = _slices(B, False)
    if not (int_a and int_b):
        return None
    val, bound = compiled.pair_dots(rows, cols, r, c)
    return val + 0.0, bound < _EXACT_FLOAT


def exact_pair(be, A, B, r, c):
    """Exact C[r[q], c[q]] of one factor pair (see CompressedProduct.exact). Factors on the
    host with a GPU sketch (streamed, :mod:`pagh_mm.stream`) are read where they are: the
    values are computed on the CPU (the same bits) and returned on ``be``'s device."""
    if be.gpu and not on_gpu(A):
        return be.xp.asarray(exact_pair(cpu(), A, B, be.asnumpy(r), be.asnumpy(c)))
    fast = _integer_dots(be, A, B, r, c)
    if fast is not None:
        val, done = fast
        if not bool(done.all()):
            rest = np.nonzero(~done)[0]
            val[rest] = _exact_pair(be, A, B, r[rest], c[rest])
        return val
    return _exact_pair(be, A, B, r, c)


def _exact_pair(be, A, B, r, c):
    xp = be.xp
    integer = all(np.dtype(M.dtype).kind in "biu" for M in (A, B))
    if be.gpu and is_sparse(A) and is_sparse(B):
        val, bound = _gpu_sparse_dots(be, A, B, r, c)
        if integer:
            big = xp.nonzero(bound > _EXACT_FLOAT)[0]
            if big.size:
                val[big] = xp.asarray(_exact_integers(be, A, B, r[big], c[big]))
        return val
    n = A.shape[1]
    step = max(1, query.TILE_BUDGET // (3 * 8 * max(n, 1)))
    vals, bounds = [], []
    for q0 in range(0, r.size, step):
        rq, cq = r[q0:q0 + step], c[q0:q0 + step]
        vals.append(_dots(be, A, B, rq, cq, absolute=False))
        if integer:
            bounds.append(_dots(be, A, B, rq, cq, absolute=True))
    val = xp.concatenate(vals) if vals else xp.zeros(0)
    if integer and bounds:
        big = xp.nonzero(xp.concatenate(bounds) > _EXACT_FLOAT)[0]
        if big.size:
            val[big] = xp.asarray(_exact_integers(be, A, B, r[big], c[big]))
    return val


def _exact_in_any_order(P, xp) -> bool:
    """Whether the row sums of the sparse ``P`` are sums of integers whose every partial sum
    stays below 2**53 in magnitude: exact in float64 in any order, so equal to the pairwise
    tree's bits (a zero sum is +0.0 either way: x + (-x) = +0.0)."""
    data = P.data.astype(xp.float64, copy=False)
    if data.size == 0 or not bool((xp.trunc(data) == data).all()):
        return False
    return float(abs(P).sum(axis=1).max()) < _EXACT_FLOAT


def gram_diagonal(be, A):
    """The exact diagonal of the Gram product A @ A.T (A: m x n), C[i, i] = sum_k A[i, k]^2:
    the values :func:`exact_pair` gives for (i, i), a sparse A read once."""
    xp = be.xp
    m = A.shape[0]
    if not is_sparse(A):
        return _dense_gram_diagonal(be, A)
    R = A.tocsr()
    v = R.data.astype(xp.float64)
    S = R.copy()
    S.data = v * v
    if _exact_in_any_order(S, xp):                 # integers: any order is exact
        return xp.asarray(S.sum(axis=1), dtype=xp.float64).ravel() + 0.0
    S.sort_indices()
    row = xp.repeat(xp.arange(m, dtype=xp.int64), xp.diff(S.indptr).astype(xp.int64))
    out = sparse_row_sums(row, S.indices.astype(xp.int64), S.data, m, xp)
    return _exact_large_squares(be, A, A.T.tocsr(), out)


def _exact_large_squares(be, A, B, out):
    """``out`` (the Gram diagonal of A, B = A.T) with the sums of integer squares beyond
    2**53 recomputed exactly (squares: the bound is the value itself)."""
    xp = be.xp
    if np.dtype(A.dtype).kind in "biu":
        big = xp.nonzero(out > _EXACT_FLOAT)[0]
        if big.size:
            out[big] = xp.asarray(_exact_integers(be, A, B, big, big))
    return out


def _dense_gram_diagonal(be, A):
    """gram_diagonal of a dense A (m x n, usually the view X.T of n samples x m features):
    the squares of aligned blocks of its columns (rows of X, read in X's row order when X is
    C-ordered), each block's pairwise tree and the tree over the blocks
    (:class:`pagh_mm.reduction.PairwiseSum`): the value :func:`exact_pair` gives for (i, i)
    (the same tree), in one pass over A instead of a copy of every row."""
    xp = be.xp
    m, n = A.shape
    out = xp.zeros(m, dtype=xp.float64)
    if m == 0 or n == 0:
        return out
    X = A.T                                          # n x m: X[k] is inner index k
    if _rows_in_place(be, X):                       # one kernel over X's rows in place
        from .cuda import kernels
        return kernels.col_square_sums(X)
    rows = 1 << max(0, (query.TILE_BUDGET // (2 * 8 * m)).bit_length() - 1)
    tree = PairwiseSum(xp, rows)
    for k0 in range(0, n, rows):
        blk = xp.array(X[k0:k0 + rows], dtype=xp.float64, order="C")
        xp.multiply(blk, blk, out=blk)
        tree.add(k0, blk)
    return _exact_large_squares(be, A, A.T, tree.total())


def _rows_in_place(be, M) -> bool:
    """Whether M is a dense GPU array the square-sum kernels read where it is
    (:func:`pagh_mm.cuda.kernels.rows_in_place`)."""
    if not be.gpu or is_sparse(M) or not on_gpu(M):
        return False
    from .cuda import kernels
    return kernels.rows_in_place(M)


def _dots(be, A, B, r, c, absolute: bool):
    """Float64 dot products A[r[q]] . B[:, c[q]] (of |A| and |B| with ``absolute``): the
    pairwise tree over the inner index, dense or over the stored values of sparse rows
    (the same bits).  Only the rows and columns asked for are read."""
    xp = be.xp
    if is_sparse(A) and is_sparse(B):
        Ar = select(A, r, be, np.float64)           # q x n, from A's CSC
        Bc = select(B, c, be, np.float64)           # q x n, from B's CSR
        if absolute:
            Ar, Bc = abs(Ar), abs(Bc)
        P = Ar.multiply(Bc).tocsr()
        P.sum_duplicates()
        if _exact_in_any_order(P, xp):
            return xp.asarray(P.sum(axis=1), dtype=xp.float64).ravel()
        P.sort_indices()
        row = xp.searchsorted(P.indptr[1:], xp.arange(P.nnz), side="right").astype(xp.int64)
        return sparse_row_sums(row, P.indices.astype(xp.int64), P.data.astype(xp.float64),
                               P.shape[0], xp)
    f = xp.abs if absolute else (lambda a: a)
    Ar = select(A, r, be, np.float64) if is_sparse(A) else A[r]
    Bc = select(B, c, be, np.float64) if is_sparse(B) else B[:, c].T
    prod = f(_dense(Ar, xp)) * f(_dense(Bc, xp))
    return row_sums(prod, xp)


def squared_norms(be, M, axis: int):
    """Squared Euclidean norms in float64 of the rows (``axis`` 1) or columns (``axis`` 0) of
    a factor, on ``be``'s device: for dense, memory-mapped and sparse factors the Gram
    diagonal's pairwise tree over the other index (:func:`gram_diagonal`: the same bits on
    every device, and inner chunks' norms summed in their tree give them too); for dask
    arrays dask's sum (its last bits may differ: a dask product's bound is then the same
    only up to them, where the compression did not keep the chunks' norms).  What
    :meth:`pagh_mm.CompressedProduct.rounding` bounds with."""
    xp = be.xp
    from .backend import is_dask
    if is_dask(M):
        out = (M.astype(np.float64) ** 2).sum(axis=axis).compute()
        return xp.asarray(out.toarray().ravel() if hasattr(out, "toarray") else out,
                          dtype=xp.float64)
    R = M if axis == 1 else M.T                     # its rows' norms
    if _rows_in_place(be, R):                       # one kernel over the rows in place
        from .cuda import kernels
        return kernels.row_square_sums(R)
    flags = getattr(R, "flags", None)
    if is_sparse(R) or flags is None or not flags.c_contiguous:
        return gram_diagonal(be, R)                 # (reads R.T's rows: contiguous for X.T)
    xp = be.xp                                      # C-ordered: blocks of rows, the same tree
    out = xp.empty(R.shape[0], dtype=xp.float64)
    step = max(1, query.TILE_BUDGET // (2 * 8 * max(1, R.shape[1])))
    for r0 in range(0, R.shape[0], step):
        blk = xp.asarray(R[r0:r0 + step], dtype=xp.float64)
        if be.gpu:                                  # (one kernel: the tree in registers)
            from .cuda import kernels
            out[r0:r0 + step] = kernels.row_square_sums(blk)
        else:
            out[r0:r0 + step] = row_sums(blk * blk, xp)
    return out


def factor_norms(be, A, B, gram: bool = False):
    """(A's squared row norms, B's squared column norms) by :func:`squared_norms` (a Gram
    product's B is A's transpose: A's norms twice)."""
    ra = squared_norms(be, A, 1)
    return (ra, ra) if gram else (ra, squared_norms(be, B, 0))
