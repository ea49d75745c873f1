"""CompressedProduct: the d sketches c_t of A @ B and everything read off them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from fwht_gpu import memory

from . import hashing, sketchfile
from .backend import Backend, cpu, gpu, is_sparse
from .convolution import combine_index
from .exact import _EXACT_FLOAT, ExactValueWarning, _dense, _exact_integers, select  # noqa: F401
from .reduction import row_sums, sparse_row_sums

#: Bytes of temporaries one query tile may use (CPU; 4x on the GPU).
TILE_BUDGET = 256 << 20
class Entries(NamedTuple):
    """Entries (rows[k], cols[k]) of the product with their estimates; ``exact`` when verified."""

    rows: object
    cols: object
    estimates: object
    exact: object = None


def best(key, ids, k: int, xp):
    """Positions of the ``k`` largest ``key`` values, largest first, ties broken by the
    smaller ``ids`` (so the answer never depends on tiling or device)."""
    if key.size > k:
        kth = -xp.partition(-key, k - 1)[k - 1]
        above = xp.nonzero(key > kth)[0]
        tied = xp.nonzero(key == kth)[0]
        tied = tied[xp.argsort(ids[tied])[:k - above.size]]
        sel = xp.concatenate([above, tied])
    else:
        sel = xp.arange(key.size)
    return sel[xp.lexsort(xp.stack([ids[sel], -key[sel]]))]


@dataclass
class CompressedProduct:
    """Sketch of C = A @ B (m x p): c_t for t = 1..d, and the hash functions that made it.

    Build with :func:`pagh_mm.compress`.  ``factors`` keeps the (A, B) pairs the sketch
    was made from (several after ``+``) for ``verify=True``; it is empty after ``load``.
    Picklable (NumPy or CuPy arrays), e.g. for multiprocessing, Dask and joblib.
    """

    sketch: object                # (d, b) float64, NumPy or CuPy
    params: hashing.HashParams
    shape: tuple
    log2b: int
    method: str
    dtype: str
    algorithm: str
    stabilizer: str | None
    backend: Backend
    factors: list = field(default_factory=list)

    # --- sizes and hashes --------------------------------------------------------
    @property
    def buckets(self) -> int:
        return 1 << self.log2b

    @property
    def reps(self) -> int:
        return self.params.reps

    def _hashes(self, which: int, keys):
        """(buckets (d, ...), signs (d, ...)) of row (which=1) or column (which=2) indices."""
        xp = self.backend.xp
        return (hashing.bucket_table(self.params, which, keys, self.log2b, xp),
                hashing.sign_table(self.params, which, keys, xp))

    def _values(self, h1, s1, h2, s2):
        """(d, ...) per-repetition estimates s1 s2 c_t[h1 op h2] from broadcastable hashes."""
        xp = self.backend.xp
        idx = combine_index(self.method, h1, h2, self.log2b)
        t = xp.arange(self.reps).reshape((-1,) + (1,) * (idx.ndim - 1))
        return s1 * s2 * self.sketch[t, idx]

    def _per_rep(self, i, j):
        """(d, ...) per-repetition estimates of entries (i, j) (equal shapes)."""
        h1, s1 = self._hashes(1, i)
        h2, s2 = self._hashes(2, j)
        return self._values(h1, s1, h2, s2)

    def _check_index(self, v, n, name):
        xp = self.backend.xp
        v = xp.asarray(v)
        if v.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integer indices, got dtype {v.dtype}")
        if v.size and (int(v.min()) < -n or int(v.max()) >= n):
            raise IndexError(f"{name} out of range for a product with {n} "
                             f"{'rows' if name == 'i' else 'columns'} (valid: {-n} .. {n - 1})")
        return (v % n).astype(xp.int64) if n else v.astype(xp.int64)

    def _entries(self, i, j):
        xp = self.backend.xp
        i = self._check_index(i, self.shape[0], "i")
        j = self._check_index(j, self.shape[1], "j")
        return xp.broadcast_arrays(i, j)

    # --- queries ---------------------------------------------------------------------
    def estimate(self, i, j):
        """Median-of-d estimate of C[i, j]; ``i``, ``j`` integer arrays (broadcast).  With an
        even number of repetitions the median is the mean of the two middle estimates."""
        i, j = self._entries(i, j)
        return self.backend.xp.median(self._per_rep(i, j), axis=0)

    def estimate_reps(self, i, j):
        """The d single-repetition (unbiased) estimates of C[i, j], shape (d, ...)."""
        return self._per_rep(*self._entries(i, j))

    def _tile_shape(self):
        """(rows, cols) of a query tile: column hashes and estimates within the tile budget."""
        m, p = self.shape
        d = self.reps
        budget = TILE_BUDGET * (4 if self.backend.gpu else 1)
        cols = max(1, min(p, budget // (4 * 16 * d)))
        per_entry = 8 if self.backend.gpu else 4 * 8 * d      # CPU: (d, rows, cols) temporaries
        rows = max(1, min(m, budget // (per_entry * cols)))
        return rows, cols

    def _tiles(self, progress=None):
        """Yield (row0, col0, estimates of the tile's rows x cols), covering the product.

        On the GPU one kernel computes each tile's medians from the hash values and the
        sketch (:mod:`pagh_mm.cuda.kernels`); on the CPU NumPy gathers the d values."""
        xp = self.backend.xp
        m, p = self.shape
        rows, cols = self._tile_shape()
        done, total = 0, m * p
        for c0 in range(0, p, cols):
            c1 = min(p, c0 + cols)
            h2, s2 = self._hashes(2, xp.arange(c0, c1, dtype=xp.int64))
            for r0 in range(0, m, rows):
                r1 = min(m, r0 + rows)
                h1, s1 = self._hashes(1, xp.arange(r0, r1, dtype=xp.int64))
                if self.backend.gpu:
                    from .cuda import kernels
                    est = kernels.tile_estimates(h1, s1, h2, s2, self.sketch, 0, r1 - r0, self.log2b,
                                                 self.method == "fwht")
                else:
                    est = xp.median(self._values(h1[:, :, None], s1[:, :, None], h2[:, None, :],
                                                 s2[:, None, :]), axis=0)
                yield r0, c0, est
                done += (r1 - r0) * (c1 - c0)
                if progress:
                    progress("tiles", done, total)

    def to_dense(self, progress=None):
        """The m x p estimate, computed tile by tile (needs m * p * 8 bytes)."""
        xp = self.backend.xp
        m, p = self.shape
        memory.check(8 * m * p, f"the dense {m} x {p} estimate",
                     "query the entries you need with estimate(), top_k() or above() instead",
                     device=self.backend.name)
        out = xp.empty((m, p), dtype=xp.float64)
        for r0, c0, est in self._tiles(progress):
            out[r0:r0 + est.shape[0], c0:c0 + est.shape[1]] = est
        return out

    def _key(self, v, by):
        if by not in ("abs", "value"):
            raise ValueError(f"by={by!r}; choose 'abs' (largest magnitude) or 'value'")
        return self.backend.xp.abs(v) if by == "abs" else v

    def _flat_ids(self, r0, c0, est):
        xp = self.backend.xp
        r = xp.arange(r0, r0 + est.shape[0], dtype=xp.int64)[:, None]
        c = xp.arange(c0, c0 + est.shape[1], dtype=xp.int64)[None, :]
        return (r * self.shape[1] + c).ravel()

    def top_k(self, k: int, *, verify: bool = False, by: str = "abs", candidates: int | None = None,
              progress=None) -> Entries:
        """The k entries with the largest estimates (by magnitude, or by value), never
        holding an m x p array; ties go to the smaller row-major index.  ``verify=True``
        scans ``candidates`` (default 8k) entries, computes their exact values from A and B
        and returns the top k by exact value."""
        xp = self.backend.xp
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
            raise ValueError(f"k={k!r} must be an integer >= 1")
        self._key(xp.zeros(1), by)
        size = self.shape[0] * self.shape[1]
        k = int(min(k, size))
        if verify and candidates is not None and (
                isinstance(candidates, bool) or not isinstance(candidates, (int, np.integer))
                or candidates < k):
            raise ValueError(f"candidates={candidates!r} must be an integer >= k ({k})")
        if k == 0:
            empty = xp.empty(0, xp.int64)
            return Entries(empty, empty, xp.empty(0), xp.empty(0) if verify else None)
        pool = k if not verify else int(min(candidates or 8 * k, size))
        best_v = xp.empty(0, xp.float64)
        best_i = xp.empty(0, xp.int64)
        tau = None                      # the pool's smallest key once the pool is full
        for r0, c0, est in self._tiles(progress):
            flat = est.ravel()
            ids = self._flat_ids(r0, c0, est)
            if tau is not None:         # only entries that can still enter the pool
                sel = xp.nonzero(self._key(flat, by) >= tau)[0]
                if sel.size == 0:
                    continue
                flat, ids = flat[sel], ids[sel]
            best_v = xp.concatenate([best_v, flat])
            best_i = xp.concatenate([best_i, ids])
            keep = best(self._key(best_v, by), best_i, pool, xp)
            best_v, best_i = best_v[keep], best_i[keep]
            if best_v.size == pool:
                tau = self._key(best_v, by)[-1]
        p = self.shape[1]
        rows, cols = best_i // p, best_i % p
        if not verify:
            return Entries(rows[:k], cols[:k], best_v[:k])
        exact = self.exact(rows, cols)
        order = best(self._key(exact, by), best_i, k, xp)
        return Entries(rows[order], cols[order], best_v[order], exact[order])

    def above(self, threshold: float, *, verify: bool = False, by: str = "abs",
              progress=None) -> Entries:
        """Every entry whose estimate (magnitude with by='abs') is >= threshold, found tile
        by tile, largest first (ties: smaller row-major index first); ``verify=True`` adds
        exact values and keeps those whose exact value passes."""
        xp = self.backend.xp
        self._key(xp.zeros(1), by)
        room = memory.available(self.backend.name)
        vs, ids, count = [], [], 0
        for r0, c0, est in self._tiles(progress):
            flat = est.ravel()
            hit = xp.nonzero(self._key(flat, by) >= threshold)[0]
            count += int(hit.size)
            if room is not None and 32 * count > room // 2:
                raise memory.InsufficientMemoryError(
                    f"threshold={threshold!r} admits more than {count} entries, more than the memory "
                    f"available ({memory.gib(room)}) holds; raise the threshold or use top_k",
                    need=32 * count, available=room, device=self.backend.name,
                    hint="raise the threshold")
            vs.append(flat[hit])
            ids.append(self._flat_ids(r0, c0, est)[hit])
        v = xp.concatenate(vs) if vs else xp.empty(0)
        ix = xp.concatenate(ids) if ids else xp.empty(0, xp.int64)
        order = xp.lexsort(xp.stack([ix, -self._key(v, by)])) if v.size else xp.arange(0)
        v, ix = v[order], ix[order]
        p = self.shape[1]
        rows, cols = ix // p, ix % p
        if not verify:
            return Entries(rows, cols, v)
        exact = self.exact(rows, cols)
        keep = self._key(exact, by) >= threshold
        return Entries(rows[keep], cols[keep], v[keep], exact[keep])

    # --- exact values ------------------------------------------------------------------
    def exact(self, rows, cols):
        """Exact C[rows[k], cols[k]] as dot products of A's rows and B's columns (O(n) each).

        Products and sums in float64, summed in one fixed order (a pairwise tree over the
        inner index: the same bits on the CPU and the GPU, for dense and sparse factors);
        integer and boolean factors give exact integers as long as they stay below 2**53
        in magnitude, and beyond that the nearest float64 of the exact integer (computed
        with Python integers on the host) with an :class:`ExactValueWarning`.  The factors
        are the arrays given to :func:`compress` (kept by reference, not copied: modify them
        and the exact values change; ``attach`` replaces them)."""
        xp = self.backend.xp
        if not self.factors:
            raise ValueError("exact values need A and B: this sketch has none (it was loaded "
                             "from a file, or is a sum with such a sketch); pass them with "
                             "CompressedProduct.attach(A, B)")
        rows, cols = self._entries(rows, cols)
        r, c = rows.ravel(), cols.ravel()
        total = xp.zeros(r.shape, dtype=xp.float64)
        for A, B in self.factors:
            total += self._exact_pair(A, B, r, c)
        return total.reshape(rows.shape)

    def _exact_pair(self, A, B, r, c):
        xp = self.backend.xp
        integer = all(np.dtype(M.dtype).kind in "biu" for M in (A, B))
        n = A.shape[1]
        step = max(1, TILE_BUDGET // (3 * 8 * max(n, 1)))
        vals, bounds = [], []
        for q0 in range(0, r.size, step):
            rq, cq = r[q0:q0 + step], c[q0:q0 + step]
            vals.append(self._dots(A, B, rq, cq, absolute=False))
            if integer:
                bounds.append(self._dots(A, B, rq, cq, absolute=True))
        val = xp.concatenate(vals) if vals else xp.zeros(0)
        if integer and bounds:
            big = xp.nonzero(xp.concatenate(bounds) > _EXACT_FLOAT)[0]
            if big.size:
                val[big] = xp.asarray(_exact_integers(self.backend, A, B, r[big], c[big]))
        return val

    def _dots(self, A, B, r, c, absolute: bool):
        """Float64 dot products A[r[q]] . B[:, c[q]] (of |A| and |B| with ``absolute``): the
        pairwise tree over the inner index, dense or over the stored values of sparse rows
        (the same bits).  Only the rows and columns asked for are read."""
        xp = self.backend.xp
        if is_sparse(A) and is_sparse(B):
            Ar = select(A, r, self.backend, np.float64)           # q x n, from A's CSC
            Bc = select(B, c, self.backend, np.float64)           # q x n, from B's CSR
            if absolute:
                Ar, Bc = abs(Ar), abs(Bc)
            P = Ar.multiply(Bc).tocsr()
            P.sum_duplicates()
            P.sort_indices()
            row = xp.searchsorted(P.indptr[1:], xp.arange(P.nnz), side="right").astype(xp.int64)
            return sparse_row_sums(row, P.indices.astype(xp.int64), P.data.astype(xp.float64),
                                   P.shape[0], xp)
        f = xp.abs if absolute else (lambda a: a)
        Ar = select(A, r, self.backend, np.float64) if is_sparse(A) else A[r]
        Bc = select(B, c, self.backend, np.float64) if is_sparse(B) else B[:, c].T
        prod = f(_dense(Ar, xp)) * f(_dense(Bc, xp))
        return row_sums(prod, xp)

    def attach(self, A, B) -> "CompressedProduct":
        """Attach the factors (after ``load``) so that ``verify=True`` works."""
        from .matmul import _as_matrix
        from .sketch import canonical
        A, B = _as_matrix(A, "A", self.backend), _as_matrix(B, "B", self.backend)
        if (A.shape[0], B.shape[1]) != tuple(self.shape) or A.shape[1] != B.shape[0]:
            raise ValueError(f"A @ B has shape {(A.shape[0], B.shape[1])} (inner {A.shape[1]} and "
                             f"{B.shape[0]}); the sketch is of a {self.shape} product")
        self.factors = [(canonical(A, 1, self.backend), canonical(B, 2, self.backend))]
        return self

    def noise(self) -> float:
        """Estimated standard deviation of one repetition's estimate: median_t ||c_t|| / sqrt(b)
        (E ||c_t||^2 = ||A B||_F^2)."""
        xp = self.backend.xp
        norms = xp.sqrt((self.sketch ** 2).sum(axis=1))
        return float(xp.median(norms)) / np.sqrt(self.buckets)

    def frobenius_estimate(self) -> float:
        """Estimate of ||A @ B||_F (median over repetitions of ||c_t||)."""
        return self.noise() * np.sqrt(self.buckets)

    # --- combination, persistence --------------------------------------------------------
    def _meta(self):
        return (tuple(self.shape), self.log2b, self.method, self.dtype, self.algorithm, self.stabilizer)

    def __add__(self, other: "CompressedProduct") -> "CompressedProduct":
        if not isinstance(other, CompressedProduct):
            return NotImplemented
        if self._meta() != other._meta() or not self.params.same_as(other.params):
            raise ValueError("only sketches made with identical shape, buckets, reps, seed, hash, "
                             "method, dtype, algorithm and stabilizer can be added")
        if self.backend.gpu != other.backend.gpu:
            raise ValueError("one sketch is on the GPU and the other on the CPU; use .to('cpu')")
        # exact values need the factors of every part: a part without them (loaded from a
        # file) leaves the sum without any, rather than with some
        factors = self.factors + other.factors if self.factors and other.factors else []
        return CompressedProduct(self.sketch + other.sketch, self.params, self.shape, self.log2b,
                                 self.method, self.dtype, self.algorithm, self.stabilizer,
                                 self.backend, factors)

    def to(self, device: str) -> "CompressedProduct":
        """A copy of the sketch on 'cpu' or 'gpu'.  The factors stay where they are: they come
        along only when the device does not change (attach them on the new device)."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device={device!r}; choose 'cpu' or 'gpu'")
        be = {"cpu": cpu, "gpu": gpu}[device]()
        sk = be.xp.asarray(self.backend.asnumpy(self.sketch))
        factors = list(self.factors) if be.gpu == self.backend.gpu else []
        return CompressedProduct(sk, self.params, self.shape, self.log2b, self.method, self.dtype,
                                 self.algorithm, self.stabilizer, be, factors)

    def save(self, path) -> None:
        """Write a sketch file (:mod:`pagh_mm.sketchfile`, format version 2: every hash
        parameter, a checksum), atomically."""
        sketchfile.write(path, {"sketch": self.backend.asnumpy(self.sketch), "shape": self.shape,
                                "log2b": self.log2b, "method": self.method, "dtype": self.dtype,
                                "algorithm": self.algorithm, "stabilizer": self.stabilizer,
                                "hash": self.params})

    @staticmethod
    def load(path, device: str = "cpu") -> "CompressedProduct":
        """Read and check a sketch file onto 'cpu' or 'gpu' (a one-line ValueError naming the
        file and the problem otherwise; a LegacyHashWarning for multiply-shift sketches)."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device={device!r}; choose 'cpu' or 'gpu'")
        f = sketchfile.read(path)
        be = {"cpu": cpu, "gpu": gpu}[device]()
        return CompressedProduct(be.xp.asarray(f["sketch"]), f["hash"], tuple(f["shape"]), f["log2b"],
                                 f["method"], f["dtype"], f["algorithm"], f["stabilizer"], be)
