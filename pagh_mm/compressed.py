"""CompressedProduct: the d sketches c_t of A @ B and everything read off them."""
from __future__ import annotations

from dataclasses import dataclass, field
import math

import numpy as np

from fwht_gpu import memory

from . import certificate, decode, hashing, query, sketchfile
from .backend import Backend, cpu, gpu, is_dask
from .convolution import combine_index
from .exact import ExactValueWarning, exact_pair  # noqa: F401
from .query import CertificateWarning, Entries, check_by  # noqa: F401
from .query import masked_median
from .reduction import row_sums

#: Times a certified query may rebuild an automatically sized sketch with more buckets.
REGROWTHS = 6
#: The most one rebuild multiplies the buckets by when the search's ask rests on a k-th
#: value that does not clear its own margin.  A search on a noisy sketch sizes from the k-th
#: largest exact value it has found, a lower bound of the true one, so it may ask for
#: (true / found)^2 too many buckets (a 300 x 40 x 200 product with three planted entries:
#: 2^21-2^22 buckets asked for from 1024, where 2^16-2^17 certify); at most 64x per rebuild,
#: each rebuilt sketch searched again, the buckets stay within 64x of what certifies and the
#: rebuilds cost at most 1/63 more than the last one.  An ask from a threshold or from a
#: k-th value above its margin (found entries that stand out of the noise) is taken whole.
#: 64, not 16: the sparse 2^20 x 64 planted product of ``pagh-mm bench`` asks about 64x
#: from a cut inside its margin and then certifies; 16 likely cost it a third sketch (H100:
#: its scanning query took 16.5 s with 16, against 9.1 s in session 15's run).
GROWTH = 64
#: What a rebuilt sketch's reason says when its bit sketches did not fit.
DROPPED = " without bit sketches (they did not fit)"
#: A query's scans slice the hashes of every row and column from whole tables kept on the
#: product while each side's fit in this many bytes (and in an eighth of the memory available):
#: on the GPU each chunk of a scan computed its own (H200, n = 16384, 13 repetitions: about
#: 0.6 ms a chunk, 3 ms of an 18 ms top-k; session 40).
HASH_CACHE_BYTES = 64 << 20


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
    chosen: object = None         # pagh_mm.auto.Choice: how buckets and reps were chosen
    diagonal: object = None       # Gram sketches: the exact diagonal of C (m,), float64
    bits: object = None           # pagh_mm.decode.BitSketch: what decoding reads, or None
    #: How a certified query rebuilds the sketch with more buckets (None: pagh_mm.compress,
    #: or pagh_mm.dask.compress for dask factors); pagh_mm.stream sets its devices here.
    recompress: object = field(default=None, repr=False, compare=False)
    #: _hash_range's whole tables, by (side, id of the hash parameters, log2b).
    _hash_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_hash_cache"] = {}          # derived: not pickled
        return state

    @property
    def gram(self) -> bool:
        """Whether this is a Gram sketch (:func:`pagh_mm.compress_gram`): one hash function
        on both sides, off-diagonal estimates halved, the diagonal exact."""
        return self.diagonal is not None

    # --- sizes and hashes --------------------------------------------------------
    @property
    def buckets(self) -> int:
        return 1 << self.log2b

    @property
    def reps(self) -> int:
        return self.params.reps

    def _hashes(self, which: int, keys, params=None):
        """(buckets (d, ...), signs (d, ...)) of row (which=1) or column (which=2) indices
        under ``params`` (default the sketch's; the bit sketches' for peeling them)."""
        xp = self.backend.xp
        params = self.params if params is None else params
        if self.gram:
            which = 1                   # one hash function on both sides
        return (hashing.bucket_table(params, which, keys, self.log2b, xp),
                hashing.sign_table(params, which, keys, xp))

    def _hash_range(self, which: int, k0: int, k1: int):
        """:meth:`_hashes` of the row (which=1) or column (which=2) indices k0 .. k1 - 1 (C-
        contiguous arrays, read only: they may be the kept tables themselves), sliced from
        the side's whole tables, computed at the first call and kept while they fit
        (HASH_CACHE_BYTES; else computed for the range)."""
        xp = self.backend.xp
        if self.gram:
            which = 1
        n = self.shape[0] if which == 1 else self.shape[1]
        key = (which, id(self.params), self.log2b)
        cache = self.__dict__.setdefault("_hash_cache", {})     # (pickled before it existed)
        got = cache.get(key)
        if got is None:
            size = 16 * self.reps * n
            if size > HASH_CACHE_BYTES:
                return self._hashes(which, xp.arange(k0, k1, dtype=xp.int64))
            room = memory.available(self.backend.name)
            if room is not None and size > room // 8:
                return self._hashes(which, xp.arange(k0, k1, dtype=xp.int64))
            for other in list(cache):
                if other[1:] != key[1:]:
                    cache.pop(other, None)      # other parameters or buckets: not needed again
            got = cache[key] = (self.params,) + self._hashes(which, xp.arange(n, dtype=xp.int64))
        if k0 == 0 and k1 == n:
            return got[1], got[2]
        return (xp.ascontiguousarray(got[1][:, k0:k1]), xp.ascontiguousarray(got[2][:, k0:k1]))

    def _values(self, h1, s1, h2, s2, sketch=None):
        """(d, ...) per-repetition estimates s1 s2 c_t[h1 op h2] from broadcastable hashes
        (of ``sketch``, default the product's own).  Gram sketches: halved (the bucket holds
        C[i, j] and C[j, i]), NaN where h1 = h2 (bucket 0: the repetition is blind)."""
        xp = self.backend.xp
        idx = combine_index(self.method, h1, h2, self.log2b)
        t = xp.arange(self.reps).reshape((-1,) + (1,) * (idx.ndim - 1))
        v = s1 * s2 * (self.sketch if sketch is None else sketch)[t, idx]
        if self.gram:
            v = xp.where(idx == 0, xp.nan, v * 0.5)
        return v

    def _median(self, v):
        """Median over the repetitions (axis 0); Gram sketches: of the repetitions that see
        the entry (NaN: blind), 0.0 when none does."""
        xp = self.backend.xp
        if not self.gram:
            return xp.median(v, axis=0)
        return masked_median(v, xp)

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
        return self._estimate(*self._entries(i, j))

    def _estimate(self, i, j):
        """:meth:`estimate` of valid int64 indices of equal shapes (not checked again)."""
        est = self._median(self._per_rep(i, j))
        if self.gram:
            xp = self.backend.xp
            est = xp.where(i == j, self.diagonal[xp.minimum(i, self.shape[0] - 1)], est)
        return est

    def estimate_reps(self, i, j):
        """The d single-repetition (unbiased) estimates of C[i, j], shape (d, ...) (Gram
        sketches: NaN for the repetitions blind to the entry, all of them on the diagonal)."""
        return self._per_rep(*self._entries(i, j))

    def to_dense(self, progress=None):
        """The m x p estimate, computed tile by tile (needs m * p * 8 bytes)."""
        xp = self.backend.xp
        m, p = self.shape
        memory.check(8 * m * p, f"the dense {m} x {p} estimate",
                     "query the entries you need with estimate(), top_k() or above() instead",
                     device=self.backend.name)
        out = xp.empty((m, p), dtype=xp.float64)
        for r0, c0, est in query.tiles(self, progress=progress):
            out[r0:r0 + est.shape[0], c0:c0 + est.shape[1]] = est
        return out

    def _size(self, exclude_diagonal: bool) -> int:
        """Entries a query ranges over."""
        if not isinstance(exclude_diagonal, (bool, np.bool_)):
            raise TypeError(f"exclude_diagonal={exclude_diagonal!r} must be True or False")
        m, p = self.shape
        return m * p - (min(m, p) if exclude_diagonal else 0)

    def _check_query(self, by, candidates, failure_probability, rounds, least: int):
        check_by(by)
        if candidates is not None and (isinstance(candidates, bool) or not isinstance(
                candidates, (int, np.integer)) or candidates < least):
            raise ValueError(f"candidates={candidates!r} must be an integer >= {least}"
                             + (f" (k = {least})" if least > 1 else ""))
        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
            raise ValueError(f"rounds={rounds!r} must be an integer >= 1")
        if not isinstance(failure_probability, (float, int, np.floating)) or \
                not 0 < failure_probability < 1:
            raise ValueError(f"failure_probability={failure_probability!r} must be a number in "
                             "(0, 1), e.g. 1e-3")

    def _decoding(self, method, verify: bool) -> bool:
        """Whether a query decodes (``method`` checked: "auto", "scan" or "decode")."""
        if method not in ("auto", "scan", "decode"):
            raise ValueError(f"method={method!r}: choose 'auto', 'scan' or 'decode'")
        if method == "decode":
            if not verify:
                raise ValueError("method='decode' proposes candidates that are then verified "
                                 "exactly: use verify=True, or method='scan'")
            if self.bits is None:
                raise ValueError("method='decode' needs the bit sketches: compress with "
                                 "decode=True (this sketch has none), or use method='scan'")
            return True
        return method == "auto" and verify and decode.pays(self)

    def _certified(self, run):
        """``run()``, a certified search; when it reports that more buckets are needed and
        this sketch was sized automatically from its factors, the sketch is rebuilt with the
        buckets it names, at most GROWTH times as many unless the ask rests on a cut that
        clears its margin (advice[3]), within the memory available (without its bit
        sketches when only that fits, the searches then scan), and the search repeated, up
        to REGROWTHS times (a search on too small a sketch may under- or overestimate what
        it needs); when it reports that the rounding of transforms the rule narrowed to
        float32 is too large, the same in float64."""
        out = run()
        for _ in range(REGROWTHS):
            found, ok, mg, sigma, advice = out
            kind = advice[0] if advice is not None else None
            wider = kind == "dtype" and self.chosen is not None and self.chosen.narrowed
            if ok or not (wider or (kind == "buckets" and advice[2] > self.buckets)) or \
                    len(self.factors) != 1 or self._auto_reason() is None or self.chosen.loaded:
                return out
            A, B = self.factors[0]
            grow = self.buckets if wider else advice[2] if len(advice) > 3 and advice[3] else \
                min(advice[2], GROWTH * self.buckets)
            if self.recompress is not None:
                compress = self.recompress          # the way it was made (devices, chunks)
            elif is_dask(A):
                from .dask import compress
            else:
                from .matmul import compress
            new = None
            dropped = False
            self.__dict__.get("_hash_cache", {}).clear()    # the old tables: not needed again
            # with the bit sketches if they fit, else without them: the scan certifies alone
            for with_bits in ((True, False) if self.bits is not None else (False,)):
                try:
                    new = compress(A, B, buckets=grow,
                                   reps=self.reps, seed=self.params.seed, method=self.method,
                                   dtype=np.float64 if wider else self.dtype_object(),
                                   algorithm=self.algorithm,
                                   stabilizer=self.stabilizer, hash=self.params.family,
                                   gram=self.gram, decode=with_bits, check_finite=False)
                    break
                except MemoryError:
                    dropped = with_bits
            if new is None:
                return out
            from .auto import Choice
            self.sketch, self.params, self.log2b, self.bits, self.dtype = new.sketch, \
                new.params, new.log2b, new.bits, new.dtype
            first = self.chosen.reason
            if first.startswith(("auto: grown to ", "auto: redone ")):   # the first sizing's
                rest = first.split(" by a verified query", 1)[1]
                first = rest.removeprefix(DROPPED)[2:-1]
            grown = "redone in float64 transforms (the float32 ones' rounding neared the " \
                "cut)" if wider else f"grown to {new.buckets} buckets"
            self.chosen = Choice(new.buckets, self.reps, self.chosen.frobenius, self.chosen.cut,
                                 f"auto: {grown} by a verified query"
                                 + (DROPPED if dropped else "") + f" ({first})",
                                 narrowed=self.chosen.narrowed and not wider)
            out = run()
        return out

    def rounding(self) -> float:
        """The most the transforms' rounding can move one estimate, whatever the data (a
        worst case, :func:`pagh_mm.certificate.rounding_coefficients`, underflow included,
        from the factors' squared row and column norms and the repetitions' bucket loads;
        the largest over the repetitions): certified queries widen their margin by it.  0.0
        for float64 transforms (their rounding, about 1e-14 of the factors' norms, is left to
        the noise model), for ``method="fft"`` (the FFT libraries' rounding, likewise) and
        without factors.  Computed once, on first use (a pass over the factors unless the
        compression kept their norms), in fixed orders: the same bits on every device and
        route."""
        cached = self.__dict__.get("_rounding")
        if cached is not None and cached[0] is self.sketch:
            return cached[1]
        dt = self.dtype_object()
        if dt == np.float64 or not self.factors or self.method != "fwht":
            value = 0.0
        else:
            xp = self.backend.xp
            kept = self.__dict__.get("_norms")
            b, parts = self.buckets, []
            for A, B in self.factors:
                ra, rb = kept if kept is not None and len(self.factors) == 1 else \
                    self._factor_norms(A, B)
                SA, la = self._loaded(1, ra)
                SB, lb = (SA, la) if self.gram else self._loaded(2, rb)
                parts.append((certificate.rounding_coefficients(
                    dt, self.log2b, A.shape[1], max(la, lb), self.algorithm), SA, SB,
                    A.shape[1]))
            norms = [math.sqrt(v) for v in
                     self.backend.asnumpy(row_sums(self.sketch * self.sketch, xp)).tolist()]
            rho = 0.0
            for t in range(self.reps):
                total = spread = 0.0
                for (e, f, c, q), SA, SB, n in parts:
                    S = math.sqrt(SA[t] * SB[t])
                    tiny = c * math.sqrt(b * n) * (math.sqrt(SA[t]) + math.sqrt(SB[t])) + q
                    if len(parts) == 1:         # the inverse's rounding, from the sketch's norm
                        total += e * S + f * norms[t] + tiny
                    else:                       # each part's own: |c_p| <= S_p (1 + e) per bucket
                        total += e * S + f * math.sqrt(b) * S * (1 + e) + tiny
                        spread += S * (1 + e)
                if len(parts) > 1:              # the float64 sum of the parts' sketches
                    total += certificate._gamma(len(parts) - 1, 2.0 ** -53) * spread
                rho = max(rho, total)
            value = rho * (1 + 1e-9) * (0.5 if self.gram else 1.0)   # (the norms' own sums)
        self.__dict__["_rounding"] = (self.sketch, value)
        return value

    def keep_norms(self, norms) -> "CompressedProduct":
        """Keep A's squared row norms and B's squared column norms (formed by the
        compression's choice of dtype) for :meth:`rounding`; returns self."""
        if norms is not None:
            self.__dict__["_norms"] = norms
        return self

    def _factor_norms(self, A, B):
        """(A's squared row norms, B's squared column norms): a Gram product's exact
        diagonal, else :func:`pagh_mm.exact.factor_norms` (the canonical pairwise order)."""
        from .exact import factor_norms
        if self.gram and len(self.factors) == 1:
            return self.diagonal, self.diagonal
        return factor_norms(self.backend, A, B, self.gram)

    def _loaded(self, which: int, w) -> tuple[list, int]:
        """([sum_i load_t(h_t(i)) w_i for each repetition t], the largest bucket load) for
        the keys of side ``which`` (both sides of a Gram product: side 1) weighted by ``w``
        (their squared norms), summed in the fixed pairwise order."""
        xp = self.backend.xp
        keys = int(w.shape[0])
        which = 1 if self.gram else which
        w = xp.asarray(w, dtype=xp.float64)
        out, most = [], 0
        step = 1 << 20

        def hashed(t, k0):
            at = xp.arange(k0, min(keys, k0 + step), dtype=xp.int64)
            return hashing.bucket_table(self.params, which, at, self.log2b, xp, reps=[t])[0]
        for t in range(self.reps):
            loads = xp.zeros(self.buckets, dtype=xp.int64)
            one = hashed(t, 0) if 0 < keys <= step else None    # (kept for the second loop)
            for k0 in range(0, keys, step):
                loads += xp.bincount(hashed(t, k0) if one is None else one,
                                     minlength=self.buckets)
            most = max(most, int(loads.max()) if keys else 0)
            weighted = xp.empty(keys, dtype=xp.float64)
            for k0 in range(0, keys, step):
                h = hashed(t, k0) if one is None else one
                weighted[k0:k0 + step] = loads[h] * w[k0:k0 + step]
            out.append(float(row_sums(weighted[None, :], xp)[0]) if keys else 0.0)
        return out, most

    def dtype_object(self):
        """The transforms' dtype as a NumPy dtype (``dtype`` holds its short name)."""
        import fwht_gpu.dtypes as fd
        return fd.resolve(self.dtype, "dtype")

    def _answer(self, ids, exact, certified, margin, sigma, delta, verified,
                known=None) -> Entries:
        """Entries of a certified query; the estimates come from ``known`` (sorted ids and
        the first scan's estimates) where it has them, else are computed."""
        xp = self.backend.xp
        p = self.shape[1]
        rows, cols = ids // p, ids % p
        if known is not None and known[0].size and ids.size:
            at = xp.minimum(xp.searchsorted(known[0], ids), known[0].size - 1)
            hit = known[0][at] == ids
            est = known[1][at]
            if not bool(hit.all()):
                miss = xp.nonzero(~hit)[0]
                est[miss] = self._estimate(rows[miss], cols[miss])
        else:
            est = self._estimate(rows, cols)
        return Entries(rows, cols, est, exact, bool(certified),
                       float(margin), float(sigma), float(delta), int(verified))

    def top_k(self, k: int, *, verify: bool = False, by: str = "abs", candidates: int | None = None,
              failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
              rounds: int = query.DEFAULT_ROUNDS, exclude_diagonal: bool = False,
              method: str = "auto", progress=None) -> Entries:
        """The k entries with the largest estimates (``by="abs"``: magnitude, or ``"value"``),
        never holding an m x p array; ties go to the smaller row-major index.

        ``verify=True``: the k largest *exact* values, certified.  Candidates are scanned,
        verified exactly from A and B, peeled off the sketch, and scanned again until no
        entry left out can reach the k-th exact value found (``Entries.certified``, with
        probability >= 1 - ``failure_probability`` under the model of
        :mod:`pagh_mm.certificate`), or until ``candidates`` entries (default
        max(16 k, 4096)) were verified or ``rounds`` scans made: then the answer is the best
        found, ``certified=False``, with a :class:`CertificateWarning` naming what to raise.

        ``exclude_diagonal``: leave the entries C[i, i] out (the variances of a covariance,
        the self-similarities of a Gram product).

        ``method``: how a verified query finds its candidates: "scan" (every entry's
        estimate, or the entries heavy buckets point to), "decode" (read the rows of the
        entries that dominate their buckets off the bit sketches, :mod:`pagh_mm.decode`;
        needs ``compress(..., decode=True)``), or "auto": decoding when the sketch has bit
        sketches and reading them costs less than a scan.  Either way the answer is verified
        and certified the same way; an unverified query always scans."""
        xp = self.backend.xp
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
            raise ValueError(f"k={k!r} must be an integer >= 1")
        size = self._size(exclude_diagonal)
        k = int(min(k, size))
        self._check_query(by, candidates if verify else None, failure_probability, rounds, k)
        decoding = self._decoding(method, verify)
        if k == 0:
            empty = xp.empty(0, xp.int64)
            if not verify:
                return Entries(empty, empty, xp.empty(0))
            return Entries(empty, empty, xp.empty(0), xp.empty(0), True, 0.0, self.noise(),
                           float(failure_probability), 0)
        if not verify:
            got = query.scan(self, by, k, skip_diagonal=exclude_diagonal, progress=progress)
            values, ids = got.values, got.ids
            if self.gram:
                values, ids = query.mirrored(self, values, ids, by, k)
            p = self.shape[1]
            return Entries(ids // p, ids % p, values)
        budget = int(min(size, candidates or max(16 * k, 4096)))
        found, ok, mg, sigma, advice = self._certified(lambda: query.search(
            self, query.Target(by, k=k, exclude_diagonal=exclude_diagonal),
            delta=failure_probability, candidates=budget,
            rounds=rounds, first_pool=min(budget, query.first_pool(k)), progress=progress,
            decoding=decoding and self.bits is not None))
        order = query.best(query.key_of(found.exact, by, xp), found.ids, k, xp)
        if not ok:
            query.warn_uncertified(f"top_k({k})", advice)
        return self._answer(found.ids[order], found.exact[order], ok, mg, sigma,
                            failure_probability, found.ids.size, found.known)

    def above(self, threshold: float, *, verify: bool = False, by: str = "abs",
              candidates: int | None = None,
              failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
              rounds: int = query.DEFAULT_ROUNDS, exclude_diagonal: bool = False,
              method: str = "auto", progress=None) -> Entries:
        """Every entry whose estimate (magnitude with by='abs') is >= threshold, found tile
        by tile, largest first (ties: smaller row-major index first); ``exclude_diagonal``
        as in :meth:`top_k`.

        ``verify=True``: every entry whose *exact* value passes, certified as
        :meth:`top_k` is: the scan keeps the entries whose estimate comes within the margin
        of the threshold, verifies them, and peels and scans again while the certificate
        fails (``candidates``: most entries verified, default no limit but memory).
        ``method`` as in :meth:`top_k`."""
        xp = self.backend.xp
        self._check_query(by, candidates if verify else None, failure_probability, rounds, 1)
        decoding = self._decoding(method, verify)
        try:
            threshold = float(threshold)
        except (TypeError, ValueError):
            raise TypeError(f"threshold={threshold!r} must be a number") from None
        if not math.isfinite(threshold):
            raise ValueError(f"threshold={threshold!r} must be finite")
        size = self._size(exclude_diagonal)
        if not verify:
            got = query.scan(self, by, max(size, 1), threshold, skip_diagonal=exclude_diagonal,
                             progress=progress, what=f"above({threshold!r})")
            values, ids = got.values, got.ids
            if self.gram:
                values, ids = query.mirrored(self, values, ids, by)
            p = self.shape[1]
            return Entries(ids // p, ids % p, values)
        budget = int(min(size, candidates or size))
        found, ok, mg, sigma, advice = self._certified(lambda: query.search(
            self, query.Target(by, threshold=threshold, exclude_diagonal=exclude_diagonal),
            delta=failure_probability,
            candidates=budget, rounds=rounds, first_pool=min(budget, query.FIRST_POOL_ABOVE),
            progress=progress, decoding=decoding and self.bits is not None))
        key = query.key_of(found.exact, by, xp)
        keep = xp.nonzero(key >= threshold)[0]
        order = keep[xp.lexsort(xp.stack([found.ids[keep], -key[keep]]))]
        if not ok:
            query.warn_uncertified(f"above({threshold!r})", advice)
        return self._answer(found.ids[order], found.exact[order], ok, mg, sigma,
                            failure_probability, found.ids.size, found.known)

    def top_k_per_row(self, n: int, *, threshold: float | None = None, verify: bool = False,
                      by: str = "abs", candidates: int | None = None,
                      failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
                      rounds: int = query.DEFAULT_ROUNDS, format: str = "csr",
                      exclude_diagonal: bool = False, method: str = "auto", progress=None):
        """The ``n`` largest entries of every row (by magnitude or value), keeping only those
        >= ``threshold`` when given: ``sparse_dot_topn.sp_matmul_topn(A, B, n, threshold)``'s
        answer, without forming A @ B.  Returns an m x p CSR matrix (SciPy for NumPy sketches,
        cupyx for CuPy ones) holding the estimates, or the exact values with ``verify=True``;
        ``format="entries"`` returns :class:`Entries` instead (row by row, largest first),
        which carries the certificate.

        ``verify=True`` certifies every row as :meth:`top_k` does: no entry left out of a
        row is larger than the row's smallest reported value (or reaches the threshold when
        the row has fewer than n such entries).  A row of pure noise cannot be certified
        without a threshold that separates it.  ``exclude_diagonal`` as in :meth:`top_k`;
        ``method`` too (decoding needs a ``threshold``: it finds the entries above it, and
        the rows are then certified by the scan, in O(d b) when nothing is left above it)."""
        xp = self.backend.xp
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
            raise ValueError(f"n={n!r} must be an integer >= 1")
        if format not in ("csr", "entries"):
            raise ValueError(f"format={format!r}; choose 'csr' or 'entries'")
        if threshold is not None:
            threshold = float(threshold)
            if not math.isfinite(threshold):
                raise ValueError(f"threshold={threshold!r} must be finite")
        self._check_query(by, candidates if verify else None, failure_probability, rounds, 1)
        decoding = self._decoding(method, verify)
        if method == "decode" and threshold is None:
            raise ValueError("method='decode' per row needs a threshold (the level decoding "
                             "reads buckets at); give threshold=, or use method='scan'")
        m, p = self.shape
        n = int(min(n, max(p, 1)))
        target = query.Target(by, k=n, threshold=threshold, exclude_diagonal=exclude_diagonal)
        if not verify:
            cuts = xp.full(m, -math.inf if threshold is None else threshold)
            PK, PV, PI, _ = query.scan_rows(self, by, n, cuts, skip_diagonal=exclude_diagonal,
                                            progress=progress)
            r, q = xp.nonzero(PK > -xp.inf)
            ids, vals, ex = r * p + PI[r, q], PV[r, q], None
            info = (None, None, None, None, None)
        else:
            budget = int(min(m * p, candidates or max(16 * n * m, 4096)))
            found, ok, mg, sigma, advice = self._certified(lambda: query.search_rows(
                self, target, delta=failure_probability, candidates=budget, rounds=rounds,
                width=min(p, 2 * n + 8), progress=progress,
                decoding=decoding and threshold is not None and self.bits is not None))
            if not ok:
                query.warn_uncertified(f"top_k_per_row({n})", advice)
            key = query.key_of(found.exact, by, xp)
            row = found.ids // p
            order = xp.lexsort(xp.stack([found.ids, -key, row]))
            row, ids, ex, key = row[order], found.ids[order], found.exact[order], key[order]
            first = xp.searchsorted(row, xp.arange(m))
            rank = xp.arange(row.size) - first[row]
            keep = rank < n
            if threshold is not None:
                keep &= key >= threshold
            ids, ex = ids[keep], ex[keep]
            vals = self._estimate(ids // p, ids % p)
            info = (bool(ok), float(mg), float(sigma), float(failure_probability),
                    int(found.ids.size))
        if format == "entries":
            return Entries(ids // p, ids % p, vals, ex, *info)
        data = ex if verify else vals
        return self.backend.sp.coo_matrix((data, (ids // p, ids % p)), shape=(m, p)).tocsr()

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
        self._need_factors()
        rows, cols = self._entries(rows, cols)
        return self._exact(rows.ravel(), cols.ravel()).reshape(rows.shape)

    def _need_factors(self) -> None:
        if not self.factors:
            raise ValueError("exact values need A and B: this sketch has none (it was loaded "
                             "from a file, or is a sum with such a sketch); pass them with "
                             "CompressedProduct.attach(A, B)")

    def _exact(self, r, c):
        """:meth:`exact` of valid flat int64 indices (not checked again)."""
        self._need_factors()
        xp = self.backend.xp
        total = xp.zeros(r.shape, dtype=xp.float64)
        for A, B in self.factors:
            if is_dask(A):             # only the rows and columns asked for are fetched
                from . import dask as _dask
                total += _dask.exact_pair(self.backend, A, B, r, c)
            else:
                total += exact_pair(self.backend, A, B, r, c)
        return total

    def attach(self, A, B) -> "CompressedProduct":
        """Attach the factors (after ``load``) so that ``verify=True`` works."""
        from .matmul import _as_matrix
        from .sketch import canonical
        if is_dask(A) or is_dask(B):      # kept as they are: verification fetches rows
            if not (is_dask(A) and is_dask(B)) or A.ndim != 2 or B.ndim != 2 or \
                    (A.shape[0], B.shape[1]) != tuple(self.shape) or A.shape[1] != B.shape[0]:
                raise ValueError(f"attach dask arrays A, B (both) with A @ B of shape "
                                 f"{self.shape}; got {getattr(A, 'shape', None)} and "
                                 f"{getattr(B, 'shape', None)}")
            self.factors = [(A, B)]
            self.__dict__.pop("_rounding", None)
            self.__dict__.pop("_norms", None)
            return self
        A, B = _as_matrix(A, "A", self.backend), _as_matrix(B, "B", self.backend)
        if (A.shape[0], B.shape[1]) != tuple(self.shape) or A.shape[1] != B.shape[0]:
            raise ValueError(f"A @ B has shape {(A.shape[0], B.shape[1])} (inner {A.shape[1]} and "
                             f"{B.shape[0]}); the sketch is of a {self.shape} product")
        self.factors = [(canonical(A, 1, self.backend), canonical(B, 2, self.backend))]
        self.__dict__.pop("_rounding", None)
        self.__dict__.pop("_norms", None)
        return self

    def _norms2(self, sketch):
        """Per repetition, an unbiased estimate of ||R||_F^2 for the product R a (residual)
        sketch holds (Gram: of its off-diagonal part, from the buckets other than 0), summed
        in the fixed pairwise order (the same bits on every device)."""
        xp = self.backend.xp
        sq = sketch * sketch
        if self.gram:           # E sum_{beta != 0} r^2 = 2 ||R - diag||_F^2 (1 - 1/b)
            sq[:, 0] = 0.0
            return row_sums(sq, xp) * (self.buckets / (2.0 * (self.buckets - 1)))
        return row_sums(sq, xp)

    def noise_model(self, sketch=None):
        """(norm2, sigma, pairs, blind) of a (residual) sketch: an upper estimate of
        ||R||_F^2 (the largest repetition's), the standard deviation bound of one
        repetition's estimate (||R||_F / sqrt(b); Gram: ||R - diag||_F / sqrt(2 b)), the
        entries per independent estimate (2 for Gram: C[i, j] and C[j, i] share it) and the
        probability a repetition is blind to an entry (Gram: 1/b)."""
        sketch = self.sketch if sketch is None else sketch
        cache = self.__dict__.get("_noise_of")
        if cache is not None and cache[0] is sketch:          # the sketch itself: once
            norm2 = cache[1]
        else:
            norm2 = float(self._norms2(sketch).max()) if sketch.size else 0.0
            if sketch is self.sketch:
                self.__dict__["_noise_of"] = (sketch, norm2)
        if self.gram:
            return norm2, math.sqrt(norm2 / (2.0 * self.buckets)), 2, 1.0 / self.buckets
        return norm2, math.sqrt(norm2 / self.buckets), 1, 0.0

    def noise(self) -> float:
        """Estimated standard deviation of one repetition's estimate: median_t ||c_t|| / sqrt(b)
        (E ||c_t||^2 = ||A B||_F^2; Gram sketches: ||C - diag||_F / sqrt(2 b))."""
        xp = self.backend.xp
        norms = xp.sqrt(self._norms2(self.sketch))
        scale = 2.0 if self.gram else 1.0
        return float(xp.median(norms)) / np.sqrt(scale * self.buckets)

    def _auto_reason(self) -> str | None:
        """Why ``buckets="auto"`` chose this sketch's size (None when the caller gave it)."""
        chosen = self.chosen
        return chosen.reason if chosen is not None and chosen.reason.startswith("auto") else None

    def describe(self) -> str:
        """One line: the shape, buckets and reps (and why, when chosen automatically), and
        the expected error of one repetition's estimate of an entry."""
        why = f" ({reason})" if (reason := self._auto_reason()) else ""
        if self.gram:
            return (f"{self.shape[0]} x {self.shape[1]} Gram product, buckets={self.buckets}, "
                    f"reps={self.reps}{why}; diagonal exact; off-diagonal error per entry and "
                    f"repetition: standard deviation <= ||C - diag||_F / sqrt(2 buckets) ~ "
                    f"{self.noise():.4g} (measured on the sketch)")
        return (f"{self.shape[0]} x {self.shape[1]} product, buckets={self.buckets}, "
                f"reps={self.reps}{why}; error per entry and repetition: standard deviation "
                f"<= ||AB||_F / sqrt(buckets) ~ {self.noise():.4g} (measured on the sketch)")

    def frobenius_estimate(self) -> float:
        """Estimate of ||A @ B||_F (median over repetitions of ||c_t||; Gram sketches:
        ||C - diag||_F)."""
        return self.noise() * np.sqrt((2.0 if self.gram else 1.0) * self.buckets)

    # --- combination, persistence --------------------------------------------------------
    def _meta(self):
        return (tuple(self.shape), self.log2b, self.method, self.dtype, self.algorithm, self.stabilizer)

    def __add__(self, other: "CompressedProduct") -> "CompressedProduct":
        if not isinstance(other, CompressedProduct):
            return NotImplemented
        if self._meta() != other._meta() or not self.params.same_as(other.params) or \
                self.gram != other.gram:
            raise ValueError("only sketches made with identical shape, buckets, reps, seed, hash, "
                             "method, dtype, algorithm and stabilizer (both Gram or neither) can "
                             f"be added (dtype {self.dtype} and {other.dtype}: automatic sketches "
                             "of float64 data may differ; pass buckets=, reps= and dtype= to "
                             "compress)")
        if self.backend.gpu != other.backend.gpu:
            raise ValueError("one sketch is on the GPU and the other on the CPU; use .to('cpu')")
        # exact values need the factors of every part: a part without them (loaded from a
        # file) leaves the sum without any, rather than with some
        factors = self.factors + other.factors if self.factors and other.factors else []
        diagonal = self.diagonal + other.diagonal if self.gram else None
        bits = None                 # decoding needs the bit sketches of every part
        if self.bits is not None and other.bits is not None and \
                (self.bits.reps, self.bits.bits) == (other.bits.reps, other.bits.bits):
            bits = decode.BitSketch(self.bits.reps, self.bits.bits,
                                    self.bits.sketch + other.bits.sketch)
        return CompressedProduct(self.sketch + other.sketch, self.params, self.shape, self.log2b,
                                 self.method, self.dtype, self.algorithm, self.stabilizer,
                                 self.backend, factors, self.chosen, diagonal, bits)

    def to(self, device: str) -> "CompressedProduct":
        """A copy of the sketch on 'cpu' or 'gpu'.  The factors stay where they are: they come
        along only when the device does not change (attach them on the new device)."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device={device!r}; choose 'cpu' or 'gpu'")
        be = {"cpu": cpu, "gpu": gpu}[device]()
        sk = be.xp.asarray(self.backend.asnumpy(self.sketch))
        factors = list(self.factors) if be.gpu == self.backend.gpu else []
        diagonal = None if not self.gram else be.xp.asarray(self.backend.asnumpy(self.diagonal))
        bits = None if self.bits is None else decode.BitSketch(
            self.bits.reps, self.bits.bits, be.xp.asarray(self.backend.asnumpy(self.bits.sketch)))
        return CompressedProduct(sk, self.params, self.shape, self.log2b, self.method, self.dtype,
                                 self.algorithm, self.stabilizer, be, factors, self.chosen,
                                 diagonal, bits)

    def save(self, path) -> None:
        """Write a sketch file (:mod:`pagh_mm.sketchfile`, format version 5: every hash
        parameter, the bit sketches, why ``buckets="auto"`` chose the size, a checksum),
        atomically."""
        sketchfile.write(path, {"sketch": self.backend.asnumpy(self.sketch), "shape": self.shape,
                                "log2b": self.log2b, "method": self.method, "dtype": self.dtype,
                                "algorithm": self.algorithm, "stabilizer": self.stabilizer,
                                "hash": self.params,
                                "diagonal": None if not self.gram else
                                self.backend.asnumpy(self.diagonal),
                                "decode_reps": 0 if self.bits is None else self.bits.reps,
                                "decode_sketch": None if self.bits is None else
                                self.backend.asnumpy(self.bits.sketch),
                                "chosen": self._auto_reason()})

    @staticmethod
    def load(path, device: str = "cpu") -> "CompressedProduct":
        """Read and check a sketch file onto 'cpu' or 'gpu' (a one-line ValueError naming the
        file and the problem otherwise; a LegacyHashWarning for multiply-shift sketches).
        ``chosen`` holds the automatic rule's reason where the file does (``loaded``: a
        certified query never rebuilds it from factors attached later)."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device={device!r}; choose 'cpu' or 'gpu'")
        f = sketchfile.read(path)
        be = {"cpu": cpu, "gpu": gpu}[device]()
        diagonal = None if f["diagonal"] is None else be.xp.asarray(f["diagonal"])
        bits = None if f["decode_sketch"] is None else decode.BitSketch(
            f["decode_reps"], decode.row_bits(f["shape"][0]), be.xp.asarray(f["decode_sketch"]))
        chosen = None
        if f["chosen"]:
            from .auto import Choice
            chosen = Choice(1 << f["log2b"], f["hash"].reps, reason=f["chosen"], loaded=True)
        return CompressedProduct(be.xp.asarray(f["sketch"]), f["hash"], tuple(f["shape"]), f["log2b"],
                                 f["method"], f["dtype"], f["algorithm"], f["stabilizer"], be,
                                 chosen=chosen, diagonal=diagonal, bits=bits)
