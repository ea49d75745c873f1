"""CompressedProduct: the d sketches c_t of A @ B and everything read off them."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import hashing
from .backend import Backend, cpu, gpu, is_sparse
from .convolution import combine_index

FORMAT = "pagh_mm.CompressedProduct"
FORMAT_VERSION = 1
#: Bytes of temporaries one query tile may use (CPU; 4x on the GPU).
TILE_BUDGET = 256 << 20


class Entries(NamedTuple):
    """Entries (rows[k], cols[k]) of the product with their estimates; ``exact`` when verified."""

    rows: object
    cols: object
    estimates: object
    exact: object = None


@dataclass
class CompressedProduct:
    """Sketch of C = A @ B (m x p): c_t for t = 1..d, and the hash functions that made it.

    Build with :func:`pagh_mm.compress`.  ``factors`` keeps the (A, B) pairs the sketch
    was made from (several after ``+``) for ``verify=True``; it is empty after ``load``.
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
    _hashes: dict = field(default_factory=dict, repr=False)

    # --- sizes and hashes --------------------------------------------------------
    @property
    def buckets(self) -> int:
        return 1 << self.log2b

    @property
    def reps(self) -> int:
        return self.params.reps

    def _hash_arrays(self):
        """(h1 (d, m), s1 (d, m), h2 (d, p), s2 (d, p)), computed once."""
        if not self._hashes:
            xp = self.backend.xp
            m, p = self.shape
            ki, kj = xp.arange(m, dtype=xp.int64), xp.arange(p, dtype=xp.int64)
            d = self.reps
            self._hashes = {
                "h1": xp.stack([hashing.buckets(self.params, t, 1, ki, self.log2b, xp) for t in range(d)]),
                "s1": xp.stack([hashing.signs(self.params, t, 1, ki, xp) for t in range(d)]),
                "h2": xp.stack([hashing.buckets(self.params, t, 2, kj, self.log2b, xp) for t in range(d)]),
                "s2": xp.stack([hashing.signs(self.params, t, 2, kj, xp) for t in range(d)]),
            }
        h = self._hashes
        return h["h1"], h["s1"], h["h2"], h["s2"]

    def _per_rep(self, i, j):
        """(d, ...) per-repetition estimates s1(i) s2(j) c_t[h1(i) op h2(j)] (broadcast i, j)."""
        xp = self.backend.xp
        h1, s1, h2, s2 = self._hash_arrays()
        t = xp.arange(self.reps)[(slice(None),) + (None,) * i.ndim]
        idx = combine_index(self.method, h1[:, i], h2[:, j], self.log2b)
        return s1[:, i] * s2[:, j] * self.sketch[t, idx]

    def _check_index(self, v, n, name):
        xp = self.backend.xp
        v = xp.asarray(v)
        if v.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integer indices, got dtype {v.dtype}")
        if v.size and (int(v.min()) < -n or int(v.max()) >= n):
            raise IndexError(f"{name} out of range for a product with {n} {'rows' if name == 'i' else 'columns'}")
        return v % n

    # --- queries ---------------------------------------------------------------------
    def estimate(self, i, j):
        """Median-of-d estimate of C[i, j]; ``i``, ``j`` integer arrays (broadcast)."""
        xp = self.backend.xp
        i = self._check_index(i, self.shape[0], "i")
        j = self._check_index(j, self.shape[1], "j")
        i, j = xp.broadcast_arrays(i, j)
        return xp.median(self._per_rep(i, j), axis=0)

    def estimate_reps(self, i, j):
        """The d single-repetition (unbiased) estimates of C[i, j], shape (d, ...)."""
        xp = self.backend.xp
        i = self._check_index(i, self.shape[0], "i")
        j = self._check_index(j, self.shape[1], "j")
        i, j = xp.broadcast_arrays(i, j)
        return self._per_rep(i, j)

    def _tiles(self, progress=None):
        """Yield (row0, estimates of rows row0..row0+r-1 for all columns) tile by tile.

        On the GPU one kernel computes each tile's medians from the hash tables and the
        sketch (:mod:`pagh_mm.cuda.kernels`); on the CPU NumPy gathers the d values."""
        xp = self.backend.xp
        m, p = self.shape
        if self.backend.gpu:
            from .cuda import kernels
            h1, s1, h2, s2 = self._hash_arrays()
            rows = max(1, min(m, TILE_BUDGET // (8 * max(p, 1))))
        else:
            rows = max(1, min(m, TILE_BUDGET // (3 * 8 * self.reps * max(p, 1))))
            cols = xp.arange(p)[None, :]
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            if self.backend.gpu:
                est = kernels.tile_estimates(h1, s1, h2, s2, self.sketch, r0, r1 - r0, self.log2b,
                                             self.method == "fwht")
            else:
                est = xp.median(self._per_rep(xp.arange(r0, r1)[:, None], cols), axis=0)
            yield r0, est
            if progress:
                progress("tiles", r1, m)

    def to_dense(self, progress=None):
        """The m x p estimate, computed tile by tile (needs m * p * 8 bytes)."""
        xp = self.backend.xp
        m, p = self.shape
        out = xp.empty((m, p), dtype=xp.float64)
        for r0, est in self._tiles(progress):
            out[r0:r0 + est.shape[0]] = est
        return out

    def _key(self, v, by):
        if by not in ("abs", "value"):
            raise ValueError(f"by={by!r}; choose 'abs' (largest magnitude) or 'value'")
        return self.backend.xp.abs(v) if by == "abs" else v

    def top_k(self, k: int, *, verify: bool = False, by: str = "abs", candidates: int | None = None,
              progress=None) -> Entries:
        """The k entries with the largest estimates (by magnitude, or by value), never
        holding an m x p array.  ``verify=True`` scans ``candidates`` (default 8k) entries,
        computes their exact values from A and B and returns the top k by exact value."""
        xp = self.backend.xp
        if int(k) < 1:
            raise ValueError(f"k={k} must be >= 1")
        k = int(min(k, self.shape[0] * self.shape[1]))
        pool = k if not verify else int(min(candidates or 8 * k, self.shape[0] * self.shape[1]))
        best_v = xp.empty(0, xp.float64)
        best_i = xp.empty(0, xp.int64)
        p = self.shape[1]
        tau = None                      # the pool's smallest key once the pool is full
        for r0, est in self._tiles(progress):
            flat = est.ravel()
            key = self._key(flat, by)
            if tau is not None:         # only entries that can still enter the pool
                sel = xp.nonzero(key > tau)[0]
                if sel.size == 0:
                    continue
                sub = key[sel]
                if sel.size > pool:
                    sel = sel[xp.argpartition(-sub, pool - 1)[:pool]]
            else:
                take = min(pool, flat.size)
                sel = xp.argpartition(-key, take - 1)[:take] if take < flat.size else xp.arange(flat.size)
            best_v = xp.concatenate([best_v, flat[sel]])
            best_i = xp.concatenate([best_i, sel.astype(xp.int64) + r0 * p])
            if best_v.size > pool:
                keep = xp.argpartition(-self._key(best_v, by), pool - 1)[:pool]
                best_v, best_i = best_v[keep], best_i[keep]
            if best_v.size == pool:
                tau = self._key(best_v, by).min()
        order = xp.argsort(-self._key(best_v, by))
        best_v, best_i = best_v[order], best_i[order]
        rows, cols = best_i // p, best_i % p
        if not verify:
            return Entries(rows[:k], cols[:k], best_v[:k])
        exact = self.exact(rows, cols)
        order = xp.argsort(-self._key(exact, by))[:k]
        return Entries(rows[order], cols[order], best_v[order], exact[order])

    def above(self, threshold: float, *, verify: bool = False, by: str = "abs",
              progress=None) -> Entries:
        """Every entry whose estimate (magnitude with by='abs') is >= threshold, found tile
        by tile; ``verify=True`` adds exact values and keeps those whose exact value passes."""
        xp = self.backend.xp
        p = self.shape[1]
        vs, ids = [], []
        for r0, est in self._tiles(progress):
            flat = est.ravel()
            hit = xp.nonzero(self._key(flat, by) >= threshold)[0]
            vs.append(flat[hit])
            ids.append(hit.astype(xp.int64) + r0 * p)
        v = xp.concatenate(vs) if vs else xp.empty(0)
        ix = xp.concatenate(ids) if ids else xp.empty(0, xp.int64)
        order = xp.argsort(-self._key(v, by))
        v, ix = v[order], ix[order]
        rows, cols = ix // p, ix % p
        if not verify:
            return Entries(rows, cols, v)
        exact = self.exact(rows, cols)
        keep = self._key(exact, by) >= threshold
        return Entries(rows[keep], cols[keep], v[keep], exact[keep])

    def exact(self, rows, cols):
        """Exact C[rows[k], cols[k]] as dot products of A's rows and B's columns (O(n) each)."""
        xp = self.backend.xp
        if not self.factors:
            raise ValueError("exact values need A and B: this sketch has none (it was loaded "
                             "from a file); pass them with CompressedProduct.attach(A, B)")
        rows, cols = xp.asarray(rows), xp.asarray(cols)
        total = xp.zeros(rows.shape, dtype=xp.float64)
        for A, B in self.factors:
            if is_sparse(A) or is_sparse(B):
                Ar = self.backend.sp.csr_matrix(A)[rows.ravel()]
                Bc = self.backend.sp.csc_matrix(B)[:, cols.ravel()].T
                val = xp.asarray(Ar.multiply(Bc).sum(axis=1)).ravel()
            else:
                val = xp.einsum("kn,nk->k", xp.asarray(A[rows.ravel()], dtype=xp.float64),
                                xp.asarray(B[:, cols.ravel()], dtype=xp.float64))
            total += val.reshape(rows.shape)
        return total

    def attach(self, A, B) -> "CompressedProduct":
        """Attach the factors (after ``load``) so that ``verify=True`` works."""
        if tuple(np.shape(A)[:1]) + tuple(np.shape(B)[1:]) != tuple(self.shape):
            raise ValueError(f"A @ B has shape {(np.shape(A)[0], np.shape(B)[1])}, the sketch {self.shape}")
        self.factors = [(A, B)]
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
        return CompressedProduct(self.sketch + other.sketch, self.params, self.shape, self.log2b,
                                 self.method, self.dtype, self.algorithm, self.stabilizer,
                                 self.backend, self.factors + other.factors)

    def to(self, device: str) -> "CompressedProduct":
        """A copy of the sketch on 'cpu' or 'gpu' (factors are kept as they are)."""
        be = {"cpu": cpu, "gpu": gpu}[device]()
        sk = be.xp.asarray(self.backend.asnumpy(self.sketch))
        return CompressedProduct(sk, self.params, self.shape, self.log2b, self.method, self.dtype,
                                 self.algorithm, self.stabilizer, be, list(self.factors))

    def save(self, path) -> None:
        """Write a versioned .npz with the sketch and every hash parameter (atomically)."""
        path = os.fspath(path)
        arrays = {
            "format": np.array(FORMAT), "format_version": np.array(FORMAT_VERSION),
            "sketch": self.backend.asnumpy(self.sketch), "shape": np.array(self.shape, np.int64),
            "log2b": np.array(self.log2b), "method": np.array(self.method),
            "dtype": np.array(self.dtype), "algorithm": np.array(self.algorithm),
            "stabilizer": np.array(self.stabilizer or ""), **self.params.to_arrays(),
        }
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @staticmethod
    def load(path, device: str = "cpu") -> "CompressedProduct":
        """Read a sketch written by :meth:`save` onto 'cpu' or 'gpu'."""
        try:
            with np.load(os.fspath(path), allow_pickle=False) as z:
                d = {k: z[k] for k in z.files}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable .npz sketch ({exc})") from exc
        if str(d.get("format", "")) != FORMAT:
            raise ValueError(f"{path}: not a pagh_mm sketch file")
        if int(d["format_version"]) > FORMAT_VERSION:
            raise ValueError(f"{path}: sketch format {int(d['format_version'])} is newer than this "
                             f"pagh_mm reads ({FORMAT_VERSION}); upgrade pagh_mm")
        be = {"cpu": cpu, "gpu": gpu}[device]()
        params = hashing.HashParams.from_arrays(d)
        st = str(d["stabilizer"]) or None
        return CompressedProduct(be.xp.asarray(d["sketch"]), params, tuple(int(v) for v in d["shape"]),
                                 int(d["log2b"]), str(d["method"]), str(d["dtype"]), str(d["algorithm"]),
                                 st, be)
