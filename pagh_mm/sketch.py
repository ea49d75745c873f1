"""Count-Sketch scattering of the columns of A and the rows of B.

For repetition t the sketch of a vector x of length m is the length-b vector
P_t x with (P_t)[h_t(i), i] = s_t(i).  The sketches of a block of nb vectors for all
d repetitions form an (nb, d, b) float64 array.

Summation order (the same on every path, so dense and sparse inputs, the CPU and the
GPU give the same bits): each bucket's value is 0.0 plus the signed values s_t(i) x_i of
its keys i, added one at a time in increasing i.  The products s_t(i) x_i are exact
(s = +-1) and the inputs are converted to float64 first.

Cost: dense inputs O(d * size of the block); sparse inputs O(d * nnz of the block) time
and memory: keys without a non-zero are never hashed, so empty rows and columns cost
nothing.
"""
from __future__ import annotations

import numpy as np

from fwht_gpu import memory

from . import compiled, hashing
from .backend import Backend

#: Above this many aligned blocks a GPU side finds its largest block on the device (one
#: reduction) instead of copying the block bounds to the host.
DEVICE_BLOCKS = 4096
#: The fused kernel's key codes (:meth:`Side.gpu_codes`, fused.cu's sketch_keys): the
#: bucket in the low CODE_BUCKET_BITS bits, then these flags.
CODE_BUCKET_BITS = 29
CODE_SLOW = 1 << 30
CODE_NEG = 1 << 31
#: The slow buckets' key entries (:meth:`Side.gpu_codes`' ``skeys``, fused.cu's slow_buckets):
#: the key in the low bits, SKEY_ZERO when its sign is +-0 (a key masked by a decoding row
#: bit), SKEY_NEG when the sign's sign bit is set.
SKEY_ZERO = 1 << 30
SKEY_NEG = 1 << 31
#: Keys per chunk of the fused kernel's sketch in key order (fused.cu's SLOW_CHUNK): the slow
#: buckets whose last key lies in a chunk are summed right after the chunk's one-key buckets,
#: while the chunk's values are in L1 (:meth:`Side.gpu_codes` orders them so).
SLOW_CHUNK = 4096


class Side:
    """One factor seen as vectors along the inner dimension: the columns of A
    (``which`` = 1, keys are A's rows) or the rows of B (``which`` = 2, keys are B's
    columns).  ``M`` is dense, or sparse in the compressed format whose slices along the
    inner dimension are contiguous (CSC for A, CSR for B, canonical: sorted, no duplicates)."""

    def __init__(self, M, which: int, params: hashing.HashParams, log2b: int, be: Backend):
        self.which, self.params, self.log2b, self.be = which, params, log2b, be
        self.sparse = be.sp.issparse(M)
        self.keys = M.shape[0] if which == 1 else M.shape[1]
        self.M = M
        self._table = None
        self._positions = None
        self._codes = None
        self._hs = None
        self._distinct = None               # GPU pairs: the distinct repetitions' functions
        self._bnd: dict[int, object] = {}   # host index pointer at block bounds, per size
        self._most: dict[int, int] = {}     # most_values per block size
        self._norms = None                   # sparse: |v|_1 of every vector
        self._product = None                 # (other side, product_bound(other))
        self._integral = None                # sparse: every stored value an integer

    def hash_with(self, params: hashing.HashParams, log2b: int) -> "Side":
        """This side with the hash functions ``params`` into 2**log2b buckets (a side made
        with none, for the statistics that do not depend on them, keeps what it computed)."""
        self.params, self.log2b = params, log2b
        self._table = self._positions = self._codes = self._hs = self._distinct = None
        return self

    def norms(self):
        """|v|_1 of every vector along the inner dimension of a sparse side (float64, on its
        device; on the GPU added in stored order by one kernel that also counts the values
        that are not integers), computed once."""
        if self._norms is None:
            if self.be.gpu:
                from .cuda import kernels
                self._norms, self._fractional = kernels.vector_norms(self.M.indptr, self.M.data)
            else:
                v = abs(self.M.astype(np.float64))  # (float first: |int min| wraps in its dtype)
                self._norms = np.asarray(v.sum(axis=0 if self.which == 1 else 1)).ravel()
        return self._norms

    def product_bound(self, other: "Side") -> float:
        """sum_k |v_k|_1 |w_k|_1 of this sparse side's vectors v and ``other``'s w (one
        reading of the device's dot per pair of sides)."""
        if self._product is None or self._product[0] is not other:
            self._product = (other, float(self.norms() @ other.norms()))
        return self._product[1]

    def integral(self) -> bool:
        """Whether every stored value of a sparse side is an integer (computed once)."""
        if self._integral is None:
            if self.be.gpu:
                self.norms()
                self._integral = int(self._fractional[0]) == 0
            else:
                data = self.M.data.astype(np.float64)
                self._integral = bool((np.trunc(data) == data).all())
        return self._integral

    def adopt(self, other: "Side") -> None:
        """Take the per-key hash tables ``other`` (a dense side of another chunk of the same
        factor: the same keys, hash functions and buckets, on the same device) has built."""
        self._table, self._positions, self._hs = other._table, other._positions, other._hs
        self._codes = other._codes

    def most_values(self, block: int) -> int:
        """Most stored values in an aligned block of ``block`` inner indices (0 when dense)."""
        if not self.sparse:
            return 0
        n = int(self.M.indptr.size) - 1
        if n == 0:
            return 0
        if block not in self._most:
            if self.be.gpu and n // block > DEVICE_BLOCKS:      # many blocks: on the device
                ptr = self.M.indptr
                ends = self.be.xp.concatenate([ptr[block:n:block], ptr[n:]])
                self._most[block] = int((ends - ptr[0:n:block]).max())
            else:
                self._most[block] = int(np.diff(self._bounds(block)).max())
        return self._most[block]

    def block_bounds(self, block: int) -> None:
        """Keep the index pointer at the bounds of aligned blocks of ``block`` inner indices on
        the host (a sparse side), for the blocks' stored-value ranges."""
        if self.sparse:
            self._bounds(block)

    def _bounds(self, block: int):
        """The sparse index pointer at the aligned block bounds 0, block, 2 block, ..., n, on
        the host (int64): one small copy per block size, no synchronisation per block."""
        if block not in self._bnd:
            ptr, n = self.M.indptr, int(self.M.indptr.size) - 1
            ends = self.be.xp.concatenate([ptr[0:n:block], ptr[n:]])
            self._bnd[block] = self.be.asnumpy(ends).astype(np.int64)
        return self._bnd[block]

    def _bound(self, k: int) -> int:
        """indptr[k] on the host: from the bounds of a block size that k is a multiple of (or
        the end), else read."""
        n = int(self.M.indptr.size) - 1
        for block, v in self._bnd.items():
            if k == n:
                return int(v[-1])
            if k % block == 0:
                return int(v[k // block])
        return int(self.M.indptr[k])

    def nonempty(self):
        """Per inner index: whether its vector has a stored value (None: dense, all)."""
        if not self.sparse:
            return None
        return self.M.indptr[1:] != self.M.indptr[:-1]

    def block(self, k0: int, k1: int, ks=None):
        """(k1 - k0, d, b) float64 sketches of the vectors k0 .. k1 - 1 (or of the vectors
        ``ks``, increasing indices within that range)."""
        if self.sparse:
            return self._sparse_block(k0, k1, ks)
        cols = slice(k0, k1) if ks is None else ks
        X = self.M[:, cols] if self.which == 1 else self.M[cols].T
        X = self.be.xp.asarray(X, dtype=self.be.xp.float64)
        if self.be.gpu:         # vectors along the fast axis: a warp reads row segments
            X = self.be.xp.ascontiguousarray(X)
        return self._dense_block(X)

    # --- dense: a sparse (d b) x keys scatter matrix, or on the GPU its kernel ---------
    def _dense_block(self, X):
        """X: (keys, nb) float64."""
        be, d, b = self.be, self.params.reps, 1 << self.log2b
        nb = X.shape[1]
        if be.gpu:
            from .cuda import kernels
            indptr, keys, sgn = self.gpu_table()
            return kernels.scatter_dense(X, indptr, keys, sgn, d * b).reshape(nb, d, b)
        if compiled.ENABLED:                             # the same order, one read of X
            h, s = self._cpu_hashes()
            return compiled.scatter_dense(X, h, s, b)
        out = self._cpu_table() @ X                      # SciPy: per row, keys in increasing order
        return np.ascontiguousarray(out.T).reshape(nb, d, b)

    def gpu_vectors(self, k0: int, k1: int, dtype=None):
        """The dense vectors k0 .. k1 - 1 on the GPU for the fused kernel
        (:func:`pagh_mm.cuda.kernels.fused_terms`): a (keys, k1 - k0) view of the factor
        when its values are float64 or float32 (``dtype``, when given), else a float64 copy
        of the block."""
        V = (self.M if self.which == 1 else self.M.T)[:, k0:k1]
        want = V.dtype if dtype is None else np.dtype(dtype)
        if V.dtype == want and want in (np.float32, np.float64):
            return V
        return self.be.xp.asarray(V, dtype=np.float64 if dtype is None else want)

    def vectors(self, k0: int, k1: int):
        """The vectors k0 .. k1 - 1 for :class:`pagh_mm.compiled.Fused` (CPU): ("dense",
        (k1 - k0, keys) float64, buckets, signs) or ("sparse", ptr, keys, values, buckets, signs)."""
        if not self.sparse:
            h, s = self._cpu_hashes()
            X = self.M[:, k0:k1].T if self.which == 1 else self.M[k0:k1]
            return "dense", np.ascontiguousarray(X, dtype=np.float64), h, s
        lo, hi = int(self.M.indptr[k0]), int(self.M.indptr[k1])
        ptr = self.M.indptr[k0:k1 + 1].astype(np.int64) - lo
        keys = self.M.indices[lo:hi].astype(np.int64)
        vals = self.M.data[lo:hi].astype(np.float64)
        if self.hash_bytes():                          # few keys: hashed once, looked up
            h, s = self._cpu_hashes()
            return "sparse", ptr, keys, vals, h, s
        h = np.ascontiguousarray(hashing.bucket_table(self.params, self.which, keys, self.log2b).T)
        s = np.ascontiguousarray(hashing.sign_table(self.params, self.which, keys).T)
        return "sparse", ptr, keys[:0], vals, h, s      # hashes per stored value

    def hash_bytes(self) -> int:
        """Bytes of the per-key hash tables :meth:`vectors` keeps: dense factors, and sparse
        ones with fewer keys than stored values (and at most 64 MiB of tables); else 0."""
        table = 16 * self.params.reps * self.keys
        if self.sparse and (self.keys > int(self.M.nnz) or table > 64 << 20):
            return 0
        return table

    def _cpu_hashes(self):
        """(buckets (keys, d) int64, signs (keys, d) float64) of every key."""
        if self._hs is None:
            keys = np.arange(self.keys, dtype=np.int64)
            self._hs = (np.ascontiguousarray(
                hashing.bucket_table(self.params, self.which, keys, self.log2b).T),
                np.ascontiguousarray(hashing.sign_table(self.params, self.which, keys).T))
        return self._hs

    def _cpu_table(self):
        """The stacked (d b) x keys scatter matrix (CSR, float64; keys increasing in each row)."""
        if self._table is None:
            d, b = self.params.reps, 1 << self.log2b
            keys = np.arange(self.keys, dtype=np.int64)
            h = hashing.bucket_table(self.params, self.which, keys, self.log2b)
            h += (np.arange(d, dtype=np.int64) * b)[:, None]
            s = hashing.sign_table(self.params, self.which, keys)
            self._table = self.be.sp.csr_matrix(
                (s.ravel(), (h.ravel(), np.tile(keys, d))), shape=(d * b, self.keys))
            self._table.sort_indices()
        return self._table

    def gpu_table(self):
        """(indptr (d b + 1), keys, signs): the keys of each bucket of each repetition in
        increasing order, as the CPU's scatter matrix in CSR form."""
        if self._table is None:
            xp, d, b = self.be.xp, self.params.reps, 1 << self.log2b
            keys = xp.arange(self.keys, dtype=xp.int64)
            row = hashing.bucket_table(self.params, self.which, keys, self.log2b, xp)
            row += (xp.arange(d, dtype=xp.int64) * b)[:, None]
            s = hashing.sign_table(self.params, self.which, keys, xp)
            order = xp.argsort((row * self.keys + keys[None]).ravel())
            counts = xp.bincount(row.ravel(), minlength=d * b)
            indptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(counts)])
            self._table = (indptr, xp.tile(keys, d)[order], s.ravel()[order])
        return self._table

    def gpu_positions(self):
        """int32 (d keys,): the bucket (0 .. b - 1) of each position of :meth:`gpu_table`'s
        key list (the keys of each repetition sorted by bucket, then key)."""
        if self._positions is None:
            xp, b = self.be.xp, 1 << self.log2b
            indptr = self.gpu_table()[0]
            at = xp.arange(int(indptr[-1]), dtype=xp.int64)
            self._positions = (xp.searchsorted(indptr[1:], at, side="right") % b).astype(xp.int32)
        return self._positions

    def gpu_codes(self):
        """(code, cptr, slow, sptr, skeys) for the fused kernel's sketch in key order:
        ``code`` (d, keys) uint32, the bucket of key i in repetition t, | CODE_NEG when its
        sign is -1, | CODE_SLOW when its bucket is slow: one of several keys or of a key whose
        sign is neither +1 nor -1 (a decoding mask), whose value the kernel sums from the slow
        lists instead; ``slow`` int32, the slow buckets (t b + u) ordered by repetition, then
        by the chunk (SLOW_CHUNK keys) of their last key, then by bucket; ``cptr`` int32 (d nc
        + 1, nc = ceil(keys / SLOW_CHUNK)), slow[cptr[t nc + c]:cptr[t nc + c + 1]] those of
        repetition t whose last key is in chunk c; slow bucket r's keys in increasing order
        are ``skeys[sptr[r]:sptr[r + 1]]`` (uint32: the key | SKEY_ZERO when its sign is +-0
        | SKEY_NEG when the sign is negative: :meth:`gpu_table`'s signs are +-1 and +-0
        only)."""
        if self._codes is None:
            xp, d, b = self.be.xp, self.params.reps, 1 << self.log2b
            if self.log2b > CODE_BUCKET_BITS or d * b >= 2 ** 31 or self.keys > SKEY_ZERO:
                raise ValueError(f"the fused sketch's codes hold at most 2**{CODE_BUCKET_BITS} "
                                 f"buckets, fewer than 2**31 in all reps and at most 2**30 "
                                 f"keys (buckets={b}, reps={d}, keys={self.keys})")
            keys = xp.arange(self.keys, dtype=xp.int64)
            row = hashing.bucket_table(self.params, self.which, keys, self.log2b, xp)
            s = hashing.sign_table(self.params, self.which, keys, xp)
            at = row + (xp.arange(d, dtype=xp.int64) * b)[:, None]
            indptr, kl, sl = self.gpu_table()
            slow = xp.diff(indptr) >= 2
            odd = (s != 1) & (s != -1)
            if bool(odd.any()):
                slow[at[odd]] = True
            code = row.astype(xp.uint32) | xp.where(slow[at], xp.uint32(CODE_SLOW), xp.uint32(0))
            code |= xp.where(s == -1, xp.uint32(CODE_NEG), xp.uint32(0))
            del keys, row, s, at, odd
            slow = xp.nonzero(slow)[0]
            nc = -(-self.keys // SLOW_CHUNK)
            chunk = (slow // b) * nc + kl[indptr[slow + 1] - 1] // SLOW_CHUNK
            order = xp.argsort(chunk * b + slow % b)       # distinct: any sort's order
            slow, chunk = slow[order], chunk[order]
            # chunk is sorted now (CuPy 13's bincount raises on an empty array: no slow bucket)
            cptr = xp.searchsorted(chunk, xp.arange(d * nc + 1, dtype=xp.int64)).astype(xp.int32)
            del order, chunk
            first = indptr[slow]
            count = indptr[slow + 1] - first
            sptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(count)])
            total = int(sptr[-1])
            if total > 2 ** 31 - 64:      # the kernel's int indices run a few past the end
                raise ValueError(f"the fused sketch's slow lists hold fewer than 2**31 - 64 "
                                 f"keys ({total}: fewer keys per bucket, or fewer reps)")
            # positions of the slow buckets' keys in the bucket lists, bucket after bucket
            pos = xp.arange(total, dtype=xp.int64)
            pos += (first - sptr[:-1])[xp.searchsorted(sptr[1:], pos, side="right")]
            del first, count
            sg = sl[pos]
            if not bool(((sg == 1) | (sg == -1) | (sg == 0)).all()):
                raise RuntimeError("the fused sketch's slow lists take signs +-1 and +-0 only")
            skeys = kl[pos].astype(xp.uint32)
            del pos
            skeys |= xp.where(sg == 0, xp.uint32(SKEY_ZERO), xp.uint32(0))
            skeys |= xp.where(xp.signbit(sg), xp.uint32(SKEY_NEG), xp.uint32(0))
            del sg
            self._codes = (code, cptr, slow.astype(xp.int32), sptr.astype(xp.int32), skeys)
        return self._codes

    # --- sparse: only the stored values are hashed -----------------------------------
    def _stored(self, k0: int, k1: int):
        """(ptr, keys, values) of the sparse vectors k0 .. k1 - 1: the bounds (k1 - k0 + 1,
        int64) of their stored values, their keys (the index array's slice) and their values
        in float64."""
        xp = self.be.xp
        lo, hi = self._bound(k0), self._bound(k1)
        ptr = (self.M.indptr[k0:k1 + 1] - lo).astype(xp.int64)
        return ptr, self.M.indices[lo:hi], self.M.data[lo:hi].astype(xp.float64, copy=False)

    def sparse_values(self, k0: int, k1: int):
        """(ptr, h, w) of the sparse vectors k0 .. k1 - 1: the bounds (k1 - k0 + 1) of their
        stored values, and per repetition the bucket h and signed value w (d, stored values)
        of each."""
        xp = self.be.xp
        ptr, keys, vals = self._stored(k0, k1)
        h = hashing.bucket_table(self.params, self.which, keys, self.log2b, xp)
        w = hashing.sign_table(self.params, self.which, keys, xp) * vals[None]
        return ptr, h, w

    def distinct_rows(self):
        """((a, c, tables, coef) of the distinct repetitions, (base, bit)) on the GPU: see
        :func:`pagh_mm.hashing.distinct_rows` (made once per hash functions)."""
        if self._distinct is None:
            p = self.params
            rows, base, bit = hashing.distinct_rows(p)
            *fns, base, bit = upload([None if x is None else x[rows]
                                      for x in (p.a, p.c, p.tables, p.coefficients)]
                                     + [base, bit], self.be)
            self._distinct = (tuple(fns), (base, bit))
        return self._distinct

    def share_distinct(self, cache: dict) -> None:
        """Take the distinct repetitions' functions on the device that a side of an earlier
        chunk left in ``cache`` (the same hash functions, the same device), or leave this
        side's there: a chunk's sides upload them once, not every chunk (an upload from
        pageable memory waits for the stream's work)."""
        if self._distinct is None:
            self._distinct = cache.get("distinct")
        elif "distinct" not in cache:
            cache["distinct"] = self._distinct

    def distinct_count(self) -> int:
        """How many repetitions have functions of their own (the rest decode with them)."""
        return int(self.distinct_rows()[0][0].shape[0])

    def hashed_values(self, k0: int, k1: int):
        """(ptr, keys, h, w) of the sparse vectors k0 .. k1 - 1 on the GPU: the bounds
        (k1 - k0 + 1, int64) of their stored values, their keys (the index array's slice), and
        per distinct repetition (:meth:`distinct_rows`) the uint32 bucket h and signed value w
        (float64) of each, made by one kernel (``hash_values``, hash.cu)."""
        from .cuda import kernels
        xp = self.be.xp
        ptr, keys, vals = self._stored(k0, k1)
        if keys.dtype not in (xp.int32, xp.int64):
            keys = keys.astype(xp.int64)
        h, w = kernels.hash_values(keys, vals, self.params.family, self.distinct_rows()[0],
                                   self.which, self.log2b)
        return ptr, keys, h, w

    def _sparse_block(self, k0: int, k1: int, ks=None):
        be, xp = self.be, self.be.xp
        d, b = self.params.reps, 1 << self.log2b
        if ks is None:
            nb = k1 - k0
            ptr, h, w = self.sparse_values(k0, k1)
        else:                   # the stored values of the vectors ks, in order
            nb = int(ks.size)
            starts = self.M.indptr[ks].astype(xp.int64)
            counts = self.M.indptr[ks + 1].astype(xp.int64) - starts
            ptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(counts)])
            at = xp.arange(int(ptr[-1]), dtype=xp.int64)
            owner = xp.searchsorted(ptr[1:], at, side="right")
            take = starts[owner] + at - ptr[owner]
            keys = self.M.indices[take].astype(xp.int64)
            vals = self.M.data[take].astype(xp.float64)
            h = hashing.bucket_table(self.params, self.which, keys, self.log2b, xp)
            w = hashing.sign_table(self.params, self.which, keys, xp) * vals[None]
        if be.gpu:
            from .cuda import kernels
            return kernels.scatter_sparse(ptr, h, w, nb, b)
        # bincount adds the weights in input order: per bin, keys in increasing order
        col = np.repeat(np.arange(nb, dtype=np.int64), np.diff(ptr))
        bins = (col[None] * d + np.arange(d, dtype=np.int64)[:, None]) * b + h
        out = np.bincount(bins.ravel(), w.ravel(), minlength=nb * d * b)
        return out.astype(np.float64, copy=False).reshape(nb, d, b)    # (int64 when empty)

    def table_bytes(self) -> int:
        """Bytes of the hash structures kept for the whole compression (dense inputs), with
        the temporaries of their construction (measured peak about 40 d keys): the bucket
        lists and their positions (52 d keys) and bounds (8 d b); on the GPU also the fused
        kernel's key codes and slow lists (at most 16 d keys) and an allowance of 8 d b for
        their ordering by chunk (the bounds per chunk themselves: 4 d keys / SLOW_CHUNK),
        built after the lists (their temporaries within the lists' allowance)."""
        if self.sparse:
            return 0
        d, b = self.params.reps, 1 << self.log2b
        return 52 * d * self.keys + 8 * d * b + (16 * d * self.keys + 8 * d * b if self.be.gpu else 0)


def upload(arrays, be: Backend) -> list:
    """Small host arrays (None passes through) on the backend's device; on the GPU in one
    copy (each copy from pageable memory waits for the stream), as views of one buffer."""
    if not be.gpu:
        return [None if a is None else np.ascontiguousarray(a) for a in arrays]
    offsets, at = [], 0
    for a in arrays:
        offsets.append(at)
        if a is not None:
            at += -(-a.nbytes // 16) * 16          # 16-byte aligned views
    host = np.zeros(max(at, 16), dtype=np.uint8)
    for a, o in zip(arrays, offsets):
        if a is not None:
            host[o:o + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    buf = be.xp.asarray(host)
    return [None if a is None else buf[o:o + a.nbytes].view(a.dtype).reshape(a.shape)
            for a, o in zip(arrays, offsets)]


def canonical(M, which: int, be: Backend):
    """A factor in the layout :class:`Side` reads: dense as it is; sparse as CSC (A) or
    CSR (B) with sorted indices and no duplicates (every SciPy format is accepted).
    Duplicate entries are added in their stored order, as ``toarray()`` adds them, the same
    way on the CPU and the GPU (SciPy's and cupyx's own conversions add them in other,
    on the GPU even run-dependent, orders)."""
    if not be.sp.issparse(M):
        return M
    inner = M.shape[1] if which == 1 else M.shape[0]
    memory.check(8 * (inner + 1) + 48 * int(M.nnz),
                 f"the {'CSC' if which == 1 else 'CSR'} copy of a sparse {'A' if which == 1 else 'B'}",
                 "pass it in that format already", device=be.name)
    fmt = be.sp.csc_matrix if which == 1 else be.sp.csr_matrix
    if not (M.format in ("csr", "csc") and M.has_canonical_format) and M.format in ("coo", "csr", "csc"):
        M = _without_duplicates(M, be)
    known = M.format == ("csc" if which == 1 else "csr") and M.has_canonical_format
    M = fmt(M)
    if known:               # the same arrays: keep the check cached on the caller's matrix
        M.has_canonical_format = True
    if not M.has_sorted_indices:
        M = M.copy()
        M.sort_indices()
    return M


def _without_duplicates(M, be: Backend):
    """COO copy of ``M`` whose repeated (row, col) entries are summed in stored order and in
    the data's dtype, each sum starting from zero: what ``toarray()`` computes."""
    xp = be.xp
    C = M.tocoo()
    row, col, data = C.row.astype(xp.int64), C.col.astype(xp.int64), C.data
    if row.size == 0:
        return C
    order = xp.lexsort(xp.stack([xp.arange(row.size, dtype=xp.int64), col, row]))   # stable
    row, col, data = row[order], col[order], data[order]
    first = xp.concatenate([xp.ones(1, dtype=bool), (row[1:] != row[:-1]) | (col[1:] != col[:-1])])
    if bool(first.all()):
        return C
    group = xp.cumsum(first) - 1
    start = xp.nonzero(first)[0]
    rank = xp.arange(row.size) - start[group]
    total = xp.zeros(int(start.size), dtype=data.dtype)
    for k in range(int(rank.max()) + 1):                    # the k-th occurrence of every entry
        at = rank == k
        total[group[at]] = total[group[at]] + data[at]
    return be.sp.coo_matrix((total, (row[start], col[start])), shape=M.shape)
