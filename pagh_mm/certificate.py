"""The error margin behind a certified query, and the model it rests on.

Model.  Let R be the part of C = A @ B not yet verified (C minus the entries found and
subtracted from the sketch: peeling), and r_t its sketch in repetition t.  For an entry
(i, j) the estimate of repetition t is R[i, j] + N_t with E[N_t] = 0 and
Var[N_t] <= ||R||_F^2 / b (Pagh 2013; it needs the combined bucket h1(i) XOR h2(j) and the
sign s1(i) s2(j) to be pairwise independent, which the strongly universal families give),
and the d repetitions are independent (independent hash functions).  We treat R as fixed
(the found set is a function of the sketch, a dependence the bound ignores) and estimate
||R||_F^2 from above by the largest ||r_t||^2 (each is unbiased; rounding errors of FP32/FP16
transforms add to it as noise).

Per repetition (Cantelli, one-sided): P[N_t <= -lam sigma] <= 1 / (1 + lam^2) =: q.
The median of d estimates lies more than lam sigma below R[i, j] (towards zero) only when at
least h = ceil(d / 2) of them do: probability at most T(q) = P[Binomial(d, q) >= h].

Gram sketches (one hash function on both sides): a repetition with h(i) = h(j) is blind
to (i, j) (probability 1/b, independently per repetition) and left out of its median; the
miss probability is then the mixture over the number j of blind repetitions,
sum_j C(d, j) b^-j (1 - 1/b)^(d - j) T_(d - j)(q), where an entry no repetition sees is
always verified (T_0 = 0).  Mirrored entries (i, j) and (j, i) share one estimate: the union
bound counts unordered pairs.

A certificate for a cut tau (the k-th exact value found, or a threshold) says: no
unreported entry has |C[i, j]| >= tau (by value: C[i, j] >= tau).  An unreported entry
above tau whose median stayed below tau - margin was underestimated by more than the
margin.  At most N = ||R||_F^2 / tau^2 unreported entries can be that large, so with
margin = lam sigma and N T(q) <= delta, the certificate is wrong with probability at most
delta (the ``failure_probability`` of the queries).
"""
from __future__ import annotations

import functools
import math

#: Failure probability of a certificate unless the query says otherwise.
DEFAULT_FAILURE_PROBABILITY = 1e-3


def median_votes(d: int) -> int:
    """How many of d estimates must fall below a value for their median to fall below it:
    ceil(d / 2) (with an even d the median is the mean of the two middle ones)."""
    return (d + 1) // 2


def binomial_tail(d: int, h: int, q: float) -> float:
    """P[Binomial(d, q) >= h]."""
    return math.fsum(math.comb(d, j) * q ** j * (1 - q) ** (d - j) for j in range(h, d + 1))


def miss_probability(d: int, q: float, blind: float = 0.0) -> float:
    """Probability that the median of an entry's estimates falls low, each of the d
    repetitions being low with probability q, and blind (left out) with probability
    ``blind``; an entry no repetition sees counts as kept (it is always verified)."""
    if blind == 0.0:
        return binomial_tail(d, median_votes(d), q)
    return math.fsum(math.comb(d, j) * blind ** j * (1 - blind) ** (d - j)
                     * binomial_tail(d - j, median_votes(d - j), q) for j in range(d))


@functools.lru_cache(maxsize=1024)
def multiplier(d: int, count: float, delta: float, blind: float = 0.0) -> float:
    """lam such that ``count`` entries, each missed when the median of its d estimates falls
    lam standard deviations low, are all kept with probability >= 1 - delta (the model of
    this module; ``blind``: the probability a repetition does not see an entry).  Grows like
    (count / delta)^(1 / (2h)) with h = ceil(d / 2)."""
    if not 0 < delta < 1:
        raise ValueError(f"failure_probability={delta!r} must be in (0, 1)")
    target = delta / max(1.0, count)
    lo, hi = 0.0, 0.5                    # T is increasing in q; find the largest q with T <= target
    if miss_probability(d, hi, blind) <= target:
        return 1.0
    for _ in range(64):                  # q to 2^-65: far below any margin's resolution
        mid = 0.5 * (lo + hi)
        if miss_probability(d, mid, blind) <= target:
            lo = mid
        else:
            hi = mid
    q = lo
    if q <= 0:
        return math.inf
    return math.sqrt(1.0 / q - 1.0)


def entries_at_risk(residual_norm2: float, tau: float, unreported: int) -> float:
    """Most unreported entries that can reach ``tau`` in magnitude: ||R||_F^2 / tau^2 (all of
    them when tau <= 0), at least 1."""
    if tau <= 0 or not math.isfinite(residual_norm2 / tau ** 2):
        return float(max(1, unreported))
    return float(max(1.0, min(unreported, residual_norm2 / tau ** 2)))


def margin(sigma: float, d: int, residual_norm2: float, tau: float, unreported: int,
           delta: float, blind: float = 0.0) -> float:
    """The margin an unreported entry's residual estimate must stay below ``tau`` by."""
    if sigma == 0:
        return 0.0
    return multiplier(d, entries_at_risk(residual_norm2, tau, unreported), delta, blind) * sigma


@functools.lru_cache(maxsize=1024)
def noise_level(d: int, entries: float, expected: float = 1.0) -> float:
    """The level x, in standard deviations of one repetition's estimate, that about
    ``expected`` of ``entries`` medians of d estimates of pure noise (Gaussian, independent
    repetitions) exceed in magnitude: 2 entries P[Binomial(d, Q(x)) >= ceil(d / 2)] =
    ``expected``, Q the normal tail.  The largest of the m p scanned medians sits there (about
    3.3 for d = 5, 2.8 for 7, 2.5 for 9, 2.1 for 13 at m p = 2^28), a sizing rule's cushion,
    not a certificate's (the certificate bounds each entry's own error)."""
    if not (expected > 0 and math.isfinite(expected)):
        raise ValueError(f"expected={expected!r} must be a positive number")
    if not entries >= 0 or not math.isfinite(entries):
        raise ValueError(f"entries={entries!r} must be a finite count")
    if entries <= expected:
        return 0.0
    lo, hi = 0.0, 40.0
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        q = 0.5 * math.erfc(mid / math.sqrt(2.0))
        if 2.0 * entries * binomial_tail(d, median_votes(d), q) > expected:
            lo = mid
        else:
            hi = mid
    return hi


def buckets_for(b: int, sigma: float, tau: float, lam: float, spread: float = 4.0) -> int:
    """Buckets at which a cut ``tau`` clears the margin and the noise of the scanned
    estimates (about ``spread`` standard deviations at the largest): the noise scales as
    1/sqrt(b), so b ((lam + spread) sigma / tau)^2, as a power of two."""
    if tau <= 0 or sigma <= 0:
        return 2 * b
    want = b * ((lam + spread) * sigma / tau) ** 2
    return max(2 * b, 1 << max(1, math.ceil(math.log2(want))))


# --- rounding -----------------------------------------------------------------------------

def unit_roundoff(dtype) -> float:
    """u of a floating dtype (float64, float32, float16, bfloat16): half its epsilon."""
    import numpy as np
    import fwht_gpu.dtypes as fd
    dt = fd.resolve(dtype, "dtype")
    if dt == fd.bfloat16:
        return 2.0 ** -8
    return float(np.finfo(dt).eps) / 2


def _gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error of n successive roundings."""
    return math.inf if n * u >= 1 else n * u / (1 - n * u)


def tiny(dtype) -> float:
    """Half the smallest positive subnormal of a floating dtype: the most an underflowing
    rounding (a cast or a product; sums of subnormals are exact) can lose, absolutely."""
    import numpy as np
    import fwht_gpu.dtypes as fd
    dt = fd.resolve(dtype, "dtype")
    return 2.0 ** -134 if dt == fd.bfloat16 else float(np.finfo(dt).smallest_subnormal) / 2


#: Roundings allowed per bit of Alman-Rao's H8 blocks: a first-order worst case of one block
#: (every one of its 22 operations rounding the most) is 14.7 u sqrt(8) ||x||, 4.9 per bit;
#: a hill-climb on float32 found 8.6 u sqrt(8) ||x|| (session 32's review).
ALMAN_ROUNDINGS_PER_BIT = 5


def rounding_coefficients(dtype, log2b: int, inner: int, load: int,
                          algorithm: str = "folklore") -> tuple[float, float, float, float]:
    """(e, f, c, p) such that one bucket of a repetition's computed sketch differs from the
    exact sketch of the product by at most

        e S + f ||c||_2 + c sqrt(b inner) (sqrt(SA) + sqrt(SB)) + p

    whatever the data (a worst case, not a model): SA = sum_i load(h(i)) ||A_i||^2 (A's rows;
    SB likewise for B's columns), S = sqrt(SA SB), which bounds sum_k ||P |a_k| || ||P |b_k| ||
    (Cauchy-Schwarz), ||c||_2 the computed sketch's norm; for the pipeline of
    :class:`pagh_mm.convolution.Accumulator` with transforms in ``dtype`` (2^log2b buckets,
    ``inner`` inner indices, at most ``load`` keys per bucket): each bucket summed in float64
    (load - 1 roundings) and rounded to ``dtype`` (through float32 for 16-bit dtypes); the
    log2b Folklore stages (||fl(H x) - H x|| <= gamma_L sqrt(b) ||x||); the product and the
    pairwise tree over the inner dimension (depth <= ceil(log2 inner) + 1) in the
    accumulation dtype (float64 for float64 transforms, else float32), bounded in the l1
    norm; the inverse transform in the accumulation dtype (per bucket at most
    gamma_L ||c||_2); the float64 sum with pair-accumulated terms.  Relative roundings give
    e and f; underflow, absolute, c (the casts to ``dtype``: their errors transformed and
    multiplied by the other factor's transform) and p (the products, the inverse's scaling).
    Alman-Rao's H8 blocks (``algorithm="alman"``): :data:`ALMAN_ROUNDINGS_PER_BIT`."""
    import numpy as np
    u = unit_roundoff(dtype)
    wide = unit_roundoff(np.float64)
    narrow = u != wide
    ua = unit_roundoff(np.float32) if narrow else wide
    cast = 0.0 if not narrow else (ua + u + ua * u if u > ua else u)
    e1 = _gamma(max(load - 1, 0), wide) * (1 + cast) + cast
    stages = log2b * (ALMAN_ROUNDINGS_PER_BIT if algorithm == "alman" else 1)
    e1 = e1 + _gamma(stages, u) * (1 + e1)                     # the transform of each factor
    e2 = 2 * e1 + e1 * e1 + ua * (1 + e1) ** 2                  # their product
    depth = max(1, (max(inner, 1) - 1).bit_length()) + 1
    e3 = e2 + _gamma(depth, ua) * (1 + e1) ** 2 * (1 + ua)      # the tree over the inner index
    g = _gamma(stages, ua)
    acc = np.float32 if narrow else np.float64
    cast_tiny = (tiny(dtype) + (tiny(np.float32) if u > ua else 0.0)) if narrow else 0.0
    return (e3 + 2 * wide * (1 + e3), g * (1 + 2 * g), 2 * cast_tiny * (1 + e3),
            tiny(acc) * (max(inner, 1) + 1) * (1 + e3))
