"""Automatic sketch parameters (``buckets="auto"``, ``reps="auto"``).

The rule: a certified query should succeed in one scan of the sketch.  That needs the
cut tau (the k-th largest |C[i, j]|, or the threshold) to clear the certificate's margin
lam sigma plus the largest noise among the m p scanned medians (about 4.5 sigma), where
sigma = ||A B||_F / sqrt(b) (:mod:`pagh_mm.certificate`).  So

    b = ((lam + 4.5) * 1.15 * F / tau)^2        (a power of two, at least 2**10)

with F an estimate of ||A B||_F (a Johnson-Lindenstrauss sketch: ||G A B||_F for G an s x m
Count-Sketch of A's rows, costing nnz(A) + s nnz(B) operations), 1.15 the slack for its
error and for the largest-repetition noise estimate, tau the threshold when one is stated,
else F / sqrt(2 k) for a top-k query (exact when the product is k equal entries plus a
background of the same mass; smaller cuts need more buckets, and the query then peels and
scans again, or says which ``buckets`` to use).  Without a stated query: 8 (m + p)
buckets (:func:`default_buckets`).  Capped by the memory available.  ``reps="auto"`` is 5.
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
MIN_LOG2B = 10
#: Rows of the Count-Sketch of the Frobenius-norm estimate (relative standard deviation at most sqrt(2 / s) of
#: the squared norm: 25%).
JL_ROWS = 32
#: Largest dense copy of the Frobenius estimate's Count-Sketch matrix (GPU, sparse A: cuSPARSE's
#: sparse-dense product is many times faster than its sparse-sparse one; on the CPU it is not).
DENSE_SKETCH_BYTES = 256 << 20
#: Sketch bytes per bucket and repetition the memory cap allows for (the sums, the block
#: temporaries of one inner index, the queries' residual).
BYTES_PER_BUCKET = 320


def default_buckets(m: int, p: int) -> int:
    """Buckets without a stated query: the power of two >= 8 (m + p), at least 1024, at most
    2**24."""
    want = max(1024, 8 * (m + p))
    return min(1 << 24, 1 << (want - 1).bit_length())


def frobenius_estimate(A, B, be, seed: int, rows: int = JL_ROWS, diagonal=None) -> float:
    """||A @ B||_F estimated as ||G A B||_F, G an s x m Count-Sketch of A's rows (one random
    sign per column, in a random row: the polynomial hash family's 4-independent functions,
    seeded from ``seed``; unbiased for the square, relative deviation at most sqrt(2 / s)),
    computed where the data is in O(nnz(A) + s nnz(B)) and float64.  With ``diagonal`` (of
    a square product): ||A @ B - diag||_F, as ||G A B - G D||_F."""
    xp = be.xp
    m = A.shape[0]
    if m == 0 or A.shape[1] == 0 or B.shape[1] == 0:
        return 0.0
    return frobenius_of(frobenius_sketch(A, B, be, seed, rows), seed, diagonal, xp)


def frobenius_of(Y, seed: int, diagonal, xp) -> float:
    """||Y - G D||_F: the estimate from G A B (:func:`frobenius_sketch`, summed over the inner
    dimension) and, for a Gram product, its exact diagonal D."""
    if diagonal is not None:
        rows, m = Y.shape[0], diagonal.shape[0]
        row, sign = _jl_hashes(m, seed, rows, xp)
        GD = xp.zeros((rows, m))
        GD[row, xp.arange(m, dtype=xp.int64)] = sign * diagonal
        Y = Y - GD
    return float(xp.sqrt((Y * Y).sum()))


def _jl_hashes(m: int, seed: int, rows: int, xp):
    """The row and sign of each of A's m rows in G (see :func:`frobenius_estimate`)."""
    if rows & (rows - 1):
        raise ValueError(f"rows={rows} must be a power of two")
    params = hashing.HashParams.draw("polynomial", (int(seed) << 16) | 0x4A4C, 1)
    keys = xp.arange(m, dtype=xp.int64)
    return (hashing.bucket_table(params, 1, keys, rows.bit_length() - 1, xp)[0],
            hashing.sign_table(params, 1, keys, xp)[0])


def frobenius_sketch(A, B, be, seed: int, rows: int = JL_ROWS):
    """G A B (``rows`` x p, float64) of :func:`frobenius_estimate`; a sum over the inner
    dimension, so inner chunks' sketches add up to it (:mod:`pagh_mm.dask`)."""
    xp = be.xp
    m = A.shape[0]
    row, sign = _jl_hashes(m, seed, rows, xp)
    keys = xp.arange(m, dtype=xp.int64)
    if be.gpu and is_sparse(A) and 8 * rows * m <= DENSE_SKETCH_BYTES:
        Gt = xp.zeros((m, rows))                # G^T dense: a sparse-dense product (SpMM)
        Gt[keys, row] = sign
        GA = xp.asarray(A.T.astype(np.float64) @ Gt).T
    else:
        G = be.sp.csr_matrix((sign, (row, keys)), shape=(rows, m))
        GA = xp.asarray((A.T.astype(np.float64) @ G.T).T.toarray()) if is_sparse(A) else \
            _times_dense(G, A, xp)
    if is_sparse(B):
        if be.gpu and B.format == "csr":
            # B^T as CSR: cuSPARSE's product with a transposed CSR matrix took 2.5x as long
            # as converting B and multiplying (H200, 2^20 x 2^20, 16 or 64 values per row)
            memory.check(8 * (B.shape[1] + 1) + 16 * int(B.nnz),
                         "the CSC copy of B for the ||AB||_F estimate",
                         "pass buckets= (the estimate only sizes automatic buckets) or free "
                         "GPU memory",
                         device="gpu")
            B = B.tocsc()
        return xp.asarray((B.T.astype(np.float64) @ GA.T).T)
    return _times_dense(GA, B, xp)


#: Bytes of a dense factor converted to float64 at a time by :func:`frobenius_estimate`.
DENSE_CHUNK_BYTES = 1 << 28


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
    estimate of ||AB||_F when it was formed elsewhere (:mod:`pagh_mm.dask`)."""
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
        lam = certificate.multiplier(d, count, delta)
        want = ((lam + 4.5) * 1.15 * noise / cut) ** 2
        slack = (CHEAP_SLACK_DECODE if decoding else CHEAP_SLACK) \
            if cheap and threshold is None else 1
        b = 1 << max(MIN_LOG2B, math.ceil(math.log2(max(want * slack, 2))))
        norm = "||AB - diag||_F" if diagonal is not None else "||AB||_F"
        reason = (f"auto: one-scan certificate for {what} at {norm} ~ {F:.4g}, "
                  f"failure probability {delta:g}"
                  + (f", x{slack} (pair-accumulated: buckets cost no compression time)"
                     if slack > 1 else ""))
    most = 1 << max(MIN_LOG2B, (4 * m * p - 1).bit_length())    # beyond: rarely any collision
    if b > most:
        b = most
        reason += f"; at most 4 m p rounded up ({most})"
    cap = _memory_cap(d, be)
    if cap is not None and b > cap:
        b = cap
        reason += f"; capped by the memory available to {b} (certificates may need more)"
    b = min(b, 1 << 30)
    return Choice(b, d, F, cut, reason)


def _memory_cap(d: int, be) -> int | None:
    have = memory.available(be.name)
    if have is None:
        return None
    most = have // (2 * BYTES_PER_BUCKET * d)
    return 1 << max(1, most.bit_length() - 1)
