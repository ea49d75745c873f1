"""Automatic sketch parameters (``buckets="auto"``, ``reps="auto"``).

The rule: a certified query should succeed in one scan of the sketch.  That needs the
cut tau (the k-th largest |C[i, j]|, or the threshold) to clear the certificate's margin
lam sigma plus the largest noise x sigma among the m p scanned medians, where sigma =
||A B||_F / sqrt(b) and x is where about one of m p medians of d Gaussian estimates lies
(:func:`pagh_mm.certificate.noise_level`: 3.3 for d = 5, 2.8 for 7, 2.1 for 13 at m p = 2^28;
4.5 where buckets cost no compression time, :data:`CHEAP_SPREAD`).  So

    b = ((lam + x) * 1.15 * F / tau)^2        (a power of two, at least 2**10)

with F an estimate of ||A B||_F (a Johnson-Lindenstrauss sketch: ||G A B H^T||_F for G and H
s x m and s x p Count-Sketches of A's rows and B's columns, costing O(nnz(A) + nnz(B))), 1.15
the slack for its error and for the largest-repetition noise estimate, tau the threshold when one is stated,
else F / sqrt(2 k) for a top-k query (exact when the product is k equal entries plus a
background of the same mass; smaller cuts need more buckets, and the query then peels and
scans again, or says which ``buckets`` to use).  Without a stated query: 8 (m + p)
buckets (:func:`default_buckets`).  Capped by the memory available.  ``reps="auto"`` is 5,
or for a stated query whose compression goes through the transforms the count in
:data:`AUTO_REPS` whose buckets cost the fewest additions (more repetitions need a smaller
margin, so fewer buckets: a top-300 query of a 16384 x 16384 product 13 x 2^15 instead of
5 x 2^18).  With ``dtype=None`` the transforms of dense float64 data run in float32 where
their worst-case rounding (which certified queries add to the margin) is a small share of
the noise and the buckets stay the same (:func:`narrower_transforms`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fwht_gpu import memory

from . import certificate, hashing
from .backend import is_sparse

AUTO = "auto"
DEFAULT_REPS = 5
#: The repetition counts ``reps="auto"`` chooses from for a stated query whose compression
#: goes through the transforms (not pair-accumulated, no bit sketches) and costs at least
#: AUTO_REPS_MIN_WORK: the one whose buckets cost the fewest additions, d (n b log2 b +
#: SCAN_WEIGHT m p); the first is the default (DEFAULT_REPS).
#: Odd (a median of one middle value); at most 13 (the GPU scan keeps up to 13 repetitions'
#: buckets in registers). A top-300 query of a 16384 x 16384 product needs 2^18 buckets with
#: 5, 2^17 with 7, 2^16 with 9 and 2^15 with 13: 0.66x, 0.40x and 0.27x the transforms'
#: additions of 5.
AUTO_REPS = (5, 7, 9, 11, 13)
#: A scanned estimate's cost per repetition in transform additions (the GPU's scan selects at
#: about 3e10 estimate-repetitions per second, its compression adds at about 2e11 per second;
#: on 2 CPU cores the one-pass scan of an odd count, which drops an entry once half its
#: repetitions fall short, takes about 1 ns per entry for 5-13 repetitions at a certificate's
#: cut and the compression adds at about 1e10 per second: less than this weight).
SCAN_WEIGHT = 8
#: The cushion for the scanned medians' largest noise, in noise levels, where buckets cost no
#: compression time (pair-accumulated products, bit sketches: 5 repetitions, CHEAP_SLACK
#: calibrated with it); elsewhere :func:`pagh_mm.certificate.noise_level`.
CHEAP_SPREAD = 4.5
#: Below this many additions with 5 repetitions (about a second of the 2-core CPU's
#: compression) 5 stays: small products gain nothing measurable, and on the CPU the pruned
#: scan and the sorting-network medians are for 5 (the CPU test suite took 7:46 with 5
#: everywhere, 10:10-10:38 when its small products took 7, before the one-pass scan of any odd
#: count).
AUTO_REPS_MIN_WORK = 1e10
MIN_LOG2B = 10
#: Rows s of each Count-Sketch of the Frobenius-norm estimate (relative standard deviation of
#: the squared norm at most sqrt(4 / s + 4 / s^2): about 25%).
JL_ROWS = 64
#: Sketch bytes per bucket and repetition the memory cap allows for (the sums, the block
#: temporaries of one inner index, the queries' residual).
BYTES_PER_BUCKET = 320


def default_buckets(m: int, p: int) -> int:
    """Buckets without a stated query: the power of two >= 8 (m + p), at least 1024, at most
    2**24."""
    want = max(1024, 8 * (m + p))
    return min(1 << 24, 1 << (want - 1).bit_length())


def frobenius_estimate(A, B, be, seed: int, rows: int = JL_ROWS, diagonal=None) -> float:
    """||A @ B||_F estimated as ||G A B H^T||_F, G (s x m) and H (s x p) Count-Sketches of A's
    rows and B's columns (one random sign per row or column, in a random row: the
    polynomial hash family's 4-independent functions h1, s1 and h2, s2 of one repetition,
    seeded from ``seed``; unbiased for the square, relative deviation at most
    sqrt(2 / s + 2 / s + 4 / s^2): about 25% at s = 64), computed where the data is in
    O(nnz(A) + nnz(B)) (dense factors: every entry once) and float64.  With ``diagonal``
    (of a square product): ||A @ B - diag||_F, as ||G A B H^T - G D H^T||_F."""
    m = A.shape[0]
    if m == 0 or A.shape[1] == 0 or B.shape[1] == 0:
        return 0.0
    return frobenius_of(frobenius_sketch(A, B, be, seed, rows), seed, diagonal, be, rows)


def frobenius_of(Y, seed: int, diagonal, be, rows: int = JL_ROWS) -> float:
    """||Y - G D H^T||_F: the estimate from G A B H^T (:func:`frobenius_sketch`, summed over
    the inner dimension) and, for a Gram product, its exact diagonal D."""
    xp = be.xp
    if diagonal is not None and diagonal.shape[0]:
        m = diagonal.shape[0]
        at = xp.arange(m, dtype=xp.int64)
        ptr = xp.arange(m + 1, dtype=xp.int64)
        D = be.sp.csc_matrix((xp.asarray(diagonal, dtype=xp.float64), at, ptr), shape=(m, m))
        eye = be.sp.csr_matrix((xp.ones(m), at, ptr), shape=(m, m))
        Y = Y - frobenius_sketch(D, eye, be, seed, rows)
    return float(xp.sqrt((Y * Y).sum()))


def _jl_params(seed: int) -> hashing.HashParams:
    """The hash functions of G (side 1) and H (side 2) of :func:`frobenius_estimate`."""
    return hashing.HashParams.draw("polynomial", (int(seed) << 16) | 0x4A4C, 1)


#: Most inner indices whose sketches (2 x s float64 each) :func:`frobenius_sketch` holds at a
#: time, and most stored values of a sparse side in one such chunk (halved until they fit).
INNER_CHUNK = 1 << 18
VALUE_CHUNK = 1 << 24
#: Temporaries per stored value of a chunk (hashes, signed values, their int64 and float64
#: copies), and the dense factors' float64 conversion (DENSE_CHUNK_BYTES at a time).
BYTES_PER_VALUE = 40


def frobenius_sketch(A, B, be, seed: int, rows: int = JL_ROWS):
    """G A B H^T (``rows`` x ``rows``, float64) of :func:`frobenius_estimate`; a sum over the
    inner dimension, so inner chunks' sketches add up to it (:mod:`pagh_mm.dask`).  Per chunk
    of up to INNER_CHUNK inner indices (fewer where a sparse side stores more than VALUE_CHUNK
    values in one; the memory checked first), the sketches G a_k and H b_k (sparse factors: of the stored
    values, added in stored order as the compression's sketches are, the same bits on the
    CPU and the GPU) and their products, summed in chunk order."""
    if rows < 2 or rows & (rows - 1):
        raise ValueError(f"rows={rows} must be a power of two >= 2")
    xp = be.xp
    n = A.shape[1]
    params = _jl_params(seed)
    log2r = rows.bit_length() - 1
    sides = [_JLSide(M, which, params, log2r, be) for which, M in ((1, A), (2, B))]
    size = INNER_CHUNK          # aligned chunks whose stored values fit VALUE_CHUNK per side
    while size > 1 and max(s.most(size) for s in sides) > VALUE_CHUNK:
        size //= 2
    dense = [s for s in sides if not s.sparse]
    need = 16 * rows * min(size, max(n, 1)) + sum(BYTES_PER_VALUE * s.most(size) for s in sides) \
        + (DENSE_CHUNK_BYTES if dense else 0)
    if dense and be.gpu:
        # _dense_sketch_gpu's CSRs of G and H (with their sort's temporaries), its output,
        # and a copied vector longer than DENSE_CHUNK_BYTES
        need += sum(48 * s.keys for s in dense) + 8 * rows * min(size, max(n, 1)) + \
            max(0, 8 * max(s.keys for s in dense) - DENSE_CHUNK_BYTES)
    memory.check(need, "the ||AB||_F estimate behind automatic buckets",
                 "pass buckets= (the estimate only sizes automatic buckets) or free memory",
                 device=be.name)
    Y = xp.zeros((rows, rows))
    for c0 in range(0, n, size):
        c1 = min(n, c0 + size)
        left, right = (s.block(c0, c1) for s in sides)
        Y += left.T @ right
    return Y


class _JLSide:
    """One factor's sketches for :func:`frobenius_sketch`: (nb, rows) float64 per block of
    inner indices, G a_k (which = 1) or H b_k (which = 2)."""

    def __init__(self, M, which: int, params, log2r: int, be):
        from .sketch import Side, canonical
        self.be, self.which, self.rows, self.sparse = be, which, 1 << log2r, is_sparse(M)
        if self.sparse:                 # its stored values' ranges (and GPU hashes) by Side
            M = canonical(M, which, be)
            self.side = Side(M, which, params, log2r, be)
        self.M = M
        self.keys = keys = M.shape[0] if which == 1 else M.shape[1]
        if self.sparse and be.gpu:      # the stored values' hashes by one kernel (hash.cu)
            return
        xp = be.xp                      # the hashes of every key, once
        at = xp.arange(keys, dtype=xp.int64)
        self.row = hashing.bucket_table(params, which, at, log2r, xp)[0]
        self.sign = hashing.sign_table(params, which, at, xp)[0]
        if not self.sparse and not be.gpu:
            self.G = be.sp.csr_matrix((self.sign, (self.row, at)), shape=(self.rows, keys))
        self._csr = None                # (the GPU's CSR of G or H, made at the first block)

    def csr(self):
        """G or H in CSR form on the GPU (:func:`_csr`), made at the first block (after
        :func:`frobenius_sketch`'s memory check)."""
        if self._csr is None:
            self._csr = _csr(self.row, self.sign, self.rows, self.be.xp)
        return self._csr

    def most(self, size: int) -> int:
        """Most stored values of an aligned chunk of ``size`` inner indices (0: dense); the
        index pointer is read at the chunk bounds, which the blocks then use."""
        return self.side.most_values(size) if self.sparse else 0

    def block(self, k0: int, k1: int):
        xp, nb = self.be.xp, k1 - k0
        if not self.sparse and self.be.gpu:     # the CPU's order, by scatter.cu's kernels
            return _dense_sketch_gpu(self.M[:, k0:k1].T if self.which == 1 else self.M[k0:k1],
                                     self.csr(), self.rows, xp)
        if not self.sparse:             # G A[:, k0:k1] or H B[k0:k1].T, transposed
            M = self.M[:, k0:k1] if self.which == 1 else self.M[k0:k1].T
            return _times_dense(self.G, M, xp).T
        if self.be.gpu:                 # scattered as the compression's sketches are
            from .cuda import kernels
            ptr, _, h, w = self.side.hashed_values(k0, k1)
            return kernels.scatter_sparse(ptr, h.astype(xp.int64), w, nb,
                                          self.rows).reshape(nb, self.rows)
        ptr, keys, vals = self.side._stored(k0, k1)
        # bincount adds in input order: each vector's stored values in stored order, as the
        # GPU's scatter_sparse does, so the same bits
        col = np.repeat(np.arange(nb, dtype=np.int64), np.diff(ptr))
        out = np.bincount(col * self.rows + self.row[keys], self.sign[keys] * vals,
                          minlength=nb * self.rows)
        return out.astype(np.float64, copy=False).reshape(nb, self.rows)


#: Bytes of a dense factor converted to float64 (or, on the GPU, copied) at a time by
#: :func:`frobenius_estimate`.
DENSE_CHUNK_BYTES = 1 << 28


def _csr(row, sign, rows: int, xp):
    """(indptr, keys, signs, skey) of the Count-Sketch (key i: ``sign[i]`` in row ``row[i]``)
    in CSR form, each row's keys increasing (SciPy's CSR of the CPU's route); ``skey``: the
    keys as uint32 with bit 31 set where the sign is -1 (None from 2**31 keys on)."""
    keys = row.shape[0]
    it = xp.int32 if rows * keys < 1 << 31 else xp.int64      # (a shorter sort key)
    order = xp.argsort(row.astype(it) * it(keys) + xp.arange(keys, dtype=it))
    indptr = xp.searchsorted(row[order], xp.arange(rows + 1)).astype(xp.int64)
    sgn = sign[order].astype(xp.float64)
    skey = None if keys >= 1 << 31 else \
        order.astype(xp.uint32) | (sgn < 0).astype(xp.uint32) << xp.uint32(31)
    return indptr, order.astype(xp.int64), sgn, skey


def _dense_sketch_gpu(X, csr, rows: int, xp):
    """(nb, rows) float64: X (nb x keys, a view of the factor) times the Count-Sketch's
    transpose, each row's sum 0.0 plus its keys' signed values in increasing key order (the
    CPU's SciPy CSR product's order: the same bits, a NaN's payload aside), by ``scatter.cu``'s
    kernels.  float32 and float64 factors are read in place: scatter_keys where each vector's
    keys are contiguous (an F-ordered A, a C-ordered B; up to 64 rows and 2**31 keys),
    scatter_dense otherwise (coalesced where consecutive vectors are adjacent: a C-ordered A,
    an F-ordered B).  Other dtypes go DENSE_CHUNK_BYTES of vectors at a time (at least one),
    copied to float64 with adjacent vectors.  H100, n = 32768, per factor: float64 3.1-3.5 ms,
    float32 2.1-2.7 ms, against 3.5-3.7 and 9.2-9.5 ms for the float64 GEMMs with dense +-1
    blocks of the route before (whose float32 factors went through float64 copies; session
    39, ``benchmarks/explore_choose.py``, ``explore_scatter_keys.py``)."""
    from .cuda import kernels
    nb, keys = X.shape
    indptr, order, sgn, skey = csr
    if X.dtype in (xp.float32, xp.float64):
        if nb > 1 and X.strides[0] != X.itemsize and (keys < 2 or X.strides[1] == X.itemsize) \
                and skey is not None and rows <= kernels.SCATTER_KEYS_ROWS:
            return kernels.scatter_keys(X.T, indptr, skey, rows)
        return kernels.scatter_dense(X.T, indptr, order, sgn, rows)
    out = xp.empty((nb, rows), dtype=xp.float64)
    step = max(1, DENSE_CHUNK_BYTES // (8 * max(1, keys)))
    for c0 in range(0, nb, step):
        W = xp.ascontiguousarray(X[c0:c0 + step].T, dtype=xp.float64)
        out[c0:c0 + step] = kernels.scatter_dense(W, indptr, order, sgn, rows)
        del W
    return out


def _times_dense(left, M, xp):
    """left @ M in float64 for a dense M, its columns converted DENSE_CHUNK_BYTES at a time
    (a whole float64 copy of a large FP32 factor would not fit beside it); each column's
    product is the same whatever the chunk."""
    cols = max(1, DENSE_CHUNK_BYTES // (8 * max(1, M.shape[0])))
    parts = [xp.asarray(left @ xp.asarray(M[:, c:c + cols], dtype=xp.float64))
             for c in range(0, M.shape[1], cols)]
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=1)


@dataclass(frozen=True)
class Choice:
    """What ``"auto"`` chose, and why (reported by :attr:`CompressedProduct.chosen`)."""

    buckets: int
    reps: int
    frobenius: float | None = None       # the estimate of ||A B||_F used
    cut: float | None = None             # the cut the buckets were sized for
    reason: str = "given"
    narrowed: bool = False               # float64 data's transforms chosen in float32
    #: Read from a sketch file (:meth:`CompressedProduct.load`): only the reason is known, and
    #: a certified query never rebuilds the sketch from factors attached later.
    loaded: bool = False

    def describe(self) -> str:
        return f"buckets={self.buckets}, reps={self.reps} ({self.reason})"


#: Extra buckets when they cost no compression time (CHEAP_SLACK x the rule's count).
CHEAP_SLACK = 4
#: The same with bit sketches (:mod:`pagh_mm.decode`): decoding reads the buckets in
#: O(b log m), so a larger sketch costs the query little, while a certificate that fails
#: costs a second compression (measured at 2^20 x 2^20, 16 values per vector, 300 planted:
#: the rule's 4x gave 1048576 buckets, the certificate asked for 4194304).
CHEAP_SLACK_DECODE = 16


def choose(A, B, be, buckets, reps, *, k=None, threshold=None, delta: float, seed: int,
           diagonal=None, cheap: bool = False, decoding: bool = False,
           frobenius: float | None = None) -> Choice:
    """Resolve ``"auto"`` buckets and reps (given values pass through unchanged).  For a
    Gram product (``diagonal``: its exact diagonal) the noise is that of the off-diagonal
    part, ||C - diag(C)||_F / sqrt(2 b), and F is its estimate.  ``cheap``: the compression
    costs the same at any bucket count (every inner index added pair by pair, see
    :class:`pagh_mm.compiled.Fused`): a top-k query gets ``CHEAP_SLACK`` times the rule's
    buckets, sized for a cut half the model's, which spread products (co-occurrences, where
    the top k hold far less than half of ||C||_F^2) need, instead of a second compression
    (``CHEAP_SLACK_DECODE`` times with bit sketches, ``decoding``).  ``frobenius``: the
    estimate of ||AB||_F when it was formed elsewhere (:mod:`pagh_mm.dask`).  ``reps="auto"``
    with a stated query and neither ``cheap`` nor ``decoding``: the count of
    :data:`AUTO_REPS` whose buckets cost the least (module docstring)."""
    d = DEFAULT_REPS if reps == AUTO else int(reps)
    if buckets != AUTO:
        return Choice(int(buckets), d, reason="buckets given" if reps != AUTO else "buckets given, reps auto")
    m, p = A.shape[0], B.shape[1]
    if k is None and threshold is None:
        b = default_buckets(m, p)
        return Choice(b, d, reason=f"auto: no query stated, 8 (m + p) = {8 * (m + p)} rounded up; "
                      "pass k= or threshold= to size the sketch for a certified query")
    F = frobenius_estimate(A, B, be, seed, diagonal=diagonal) if frobenius is None else frobenius
    cut = abs(float(threshold)) if threshold is not None else F / math.sqrt(2 * k)
    noise = F / math.sqrt(2) if diagonal is not None else F     # sigma sqrt(b)
    what = f"threshold {threshold:g}" if threshold is not None else f"top-{k}"
    if F == 0 or cut == 0:
        b = 1 << MIN_LOG2B
        reason = f"auto: ||AB||_F estimate {F:.4g}"
    else:
        count = min(m * p, (F / cut) ** 2)
        slack = (CHEAP_SLACK_DECODE if decoding else CHEAP_SLACK) \
            if cheap and threshold is None else 1
        norm = "||AB - diag||_F" if diagonal is not None else "||AB||_F"
        reason = (f"auto: one-scan certificate for {what} at {norm} ~ {F:.4g} (estimated "
                  f"before compressing), "
                  f"failure probability {delta:g}"
                  + (f", x{slack} (pair-accumulated: buckets cost no compression time)"
                     if slack > 1 else ""))
        # the repetitions: more of them need a smaller margin (the median's binomial tail
        # falls faster), so fewer buckets; where the transforms set the compression's cost
        # (d b log2 b per inner index), the count with the least of it and of the scan's
        options = (d,) if reps != AUTO or cheap or decoding else AUTO_REPS
        costs = []
        for dd in options:
            want = _wanted(dd, count, delta, m * p, noise / cut, cheap or decoding)
            bb, note = _capped(1 << max(MIN_LOG2B, math.ceil(math.log2(max(want * slack, 2)))),
                               dd, m, p, be)
            costs.append((dd * (A.shape[1] * bb * math.log2(bb) + SCAN_WEIGHT * m * p), dd, bb,
                          note))
        _, d, b, note = costs[0] if costs[0][0] < AUTO_REPS_MIN_WORK else min(costs)
        if len(options) > 1:
            reason += (f", reps {d} (of {', '.join(map(str, options))}: the fewest transform "
                       f"additions, {b} buckets)")
        return Choice(b, d, F, cut, reason + note)
    b, note = _capped(b, d, m, p, be)
    return Choice(b, d, F, cut, reason + note)


def _wanted(d: int, count: float, delta: float, entries: int, ratio: float, cheap: bool,
            extra: float = 0.0) -> float:
    """The rule's buckets (before rounding) for d repetitions: ((lam + x + extra) 1.15
    ``ratio``)^2, ``ratio`` the noise over the cut, ``extra`` more margin in noise levels."""
    lam = certificate.multiplier(d, count, delta)
    spread = CHEAP_SPREAD if cheap else certificate.noise_level(d, entries)
    return ((lam + spread + extra) * 1.15 * ratio) ** 2


#: Float64 data's transforms run in float32 (``dtype=None``, a stated query, dense floating
#: factors, the FWHT without a stabilizer) when the worst case of their rounding
#: (:meth:`pagh_mm.CompressedProduct.rounding`, predicted from the factors' norms) is at most
#: this share of the noise at the rule's buckets, and the margin widened by it keeps those
#: buckets (within a third of the rule's 15% slack): the certified answer is the same (exact
#: values are verified in float64) and the compression about twice as fast on the GPU
#: (n = 16384: 0.263 -> 0.131 s), 1.4x on the CPU.
ROUNDING_SHARE = 0.25
#: The largest magnitude the narrowed pipeline's values may reach (float32's largest is
#: about 2^128).
FLOAT32_CEILING = 2.0 ** 120


def narrower_transforms(A, B, be, chosen: Choice, *, delta: float, gram: bool,
                        norms2: tuple[float, float]) -> Choice:
    """``chosen`` with ``narrowed`` set when the automatic rule may run a float64 product's
    transforms in float32 (:data:`ROUNDING_SHARE`; the caller checks the data and settings).
    ``norms2``: ||A||_F^2 and ||B||_F^2."""
    F, cut = chosen.frobenius, chosen.cut
    if F is None or cut is None or not F > 0 or not cut > 0 or not math.isfinite(F):
        return chosen
    m, n, p = A.shape[0], A.shape[1], B.shape[1]
    b, d = chosen.buckets, chosen.reps
    na, nb = math.sqrt(norms2[0]), math.sqrt(norms2[1])
    # every float32 value of the pipeline (a transform: at most ||a_k||_1 <= sqrt(m) ||A||_F;
    # a product, a tree node, the inverse before its scaling by 1 / b) far from overflow
    if not b * math.sqrt(m * p) * na * nb <= FLOAT32_CEILING or \
            not max(math.sqrt(m) * na, math.sqrt(p) * nb) <= FLOAT32_CEILING:
        return chosen
    e, f, c, q = certificate.rounding_coefficients(np.float32, b.bit_length() - 1, n, 8)
    # S = sqrt(SA SB), SA = sum_i load(h(i)) ||A_i||^2 at the expected loads 1 + (m - 1) / b
    SA, SB = (1 + (m - 1) / b) * norms2[0], (1 + (p - 1) / b) * norms2[1]
    S = math.sqrt(SA * SB)
    noise = F / math.sqrt(2) if gram else F
    rho = (e * S + f * (F + S) + c * math.sqrt(b * n) * (math.sqrt(SA) + math.sqrt(SB)) + q) \
        * (0.5 if gram else 1.0)
    share = rho / (noise / math.sqrt(b))
    if share > ROUNDING_SHARE:
        return chosen
    count = min(m * p, (F / cut) ** 2)
    # the margin widened by the share, within the rule's buckets with a third of its slack
    want = _wanted(d, count, delta, m * p, noise / cut, False, share) * (1.10 / 1.15) ** 2
    if 1 << max(MIN_LOG2B, math.ceil(math.log2(max(want, 2)))) > b:
        return chosen
    return Choice(b, d, F, cut, chosen.reason + f"; float32 transforms (their rounding at "
                  f"most {share:.2g} of the noise)", narrowed=True)


def _capped(b: int, d: int, m: int, p: int, be) -> tuple[int, str]:
    """``b`` within 4 m p (rounded up), the memory available to d repetitions and 2**30; the
    reason's note for a cap."""
    note = ""
    most = 1 << max(MIN_LOG2B, (4 * m * p - 1).bit_length())    # beyond: rarely any collision
    if b > most:
        b = most
        note += f"; at most 4 m p rounded up ({most})"
    cap = _memory_cap(d, be)
    if cap is not None and b > cap:
        b = cap
        note += f"; capped by the memory available to {b} (certificates may need more)"
    return min(b, 1 << 30), note


def _memory_cap(d: int, be) -> int | None:
    have = memory.available(be.name)
    if have is None:
        return None
    most = have // (2 * BYTES_PER_BUCKET * d)
    return 1 << max(1, most.bit_length() - 1)
