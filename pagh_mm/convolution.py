"""Combining the sketches of A and B: XOR convolution through the FWHT, or Pagh's
cyclic convolution through the FFT, summed over the inner dimension in the
transform domain, with one inverse transform per repetition."""
from __future__ import annotations

import numpy as np

import fwht_gpu
import fwht_gpu.dtypes

from .backend import all_finite
from .reduction import PairwiseSum

METHODS = ("fwht", "fft")


#: finish()'s default: the accumulator's own Hadamard-domain sum.
_OWN = object()


class Accumulator:
    """Transform-domain sum over the inner dimension, for all d repetitions, in the canonical
    order of :mod:`pagh_mm.reduction` (a pairwise tree over the inner index): the result
    does not depend on how the inner dimension was split into blocks."""

    def __init__(self, method: str, reps: int, log2b: int, dtype, algorithm: str,
                 stabilizer, xp):
        self.method, self.xp = method, xp
        self.reps = reps
        self.dtype = np.dtype(dtype)
        self.b = 1 << log2b
        self.algorithm, self.stabilizer = algorithm, stabilizer
        # products are accumulated in float64 for float64 transforms, float32 otherwise
        self.acc_dtype = np.dtype(np.float64) if self.dtype == np.float64 else np.dtype(np.float32)
        if method == "fwht":      # planned once per compression: the sketches' and the sums' dtype
            device = "cpu" if xp is np else "cuda"
            self.transform = fwht_gpu.FWHT(self.b, self.dtype, algorithm=algorithm,
                                           stabilizer=stabilizer, device=device)
            self.inverse = fwht_gpu.FWHT(self.b, self.acc_dtype, algorithm=algorithm,
                                         stabilizer=stabilizer, device=device)
        self.sum = PairwiseSum(xp, 1)

    def begin(self, block: int) -> None:
        """Start summing blocks of ``block`` inner indices (a power of two)."""
        self.sum = PairwiseSum(self.xp, block)

    @property
    def value_dtype(self):
        """dtype of one inner index's transform-domain term."""
        if self.method == "fwht":
            return self.acc_dtype
        return np.dtype(np.complex128 if self.acc_dtype == np.float64 else np.complex64)

    def _to_dtype(self, P, what: str):
        """float64 sketches in the transform dtype: rounded to float32 first, then to a 16-bit
        dtype (the same two correctly rounded steps on NumPy and CuPy)."""
        xp = self.xp
        with np.errstate(over="ignore"):     # overflow is detected just below
            out = P.astype(np.float32) if self.dtype != np.float64 else P
            if self.dtype.itemsize == 2:
                out = out.astype(self.dtype)
        if self.dtype.itemsize == 2 and not bool(xp.isfinite(out).all()):
            raise OverflowError(
                f"the Count-Sketch of {what} exceeds the {fwht_gpu.dtypes.short_name(self.dtype)} "
                f"range (largest {fwht_gpu.dtypes.max_finite(self.dtype):.6g}); scale the inputs "
                "down or use dtype=float32")
        return out

    def _transform(self, P):
        """The sketches' transform (in place: our temporaries), its overflow checked whatever
        the caller's ``fwht_gpu.errstate``: a sketch's bits never depend on it."""
        with fwht_gpu.errstate(overflow="raise"):
            return self.transform(P, overwrite_x=True)

    def add_block(self, k0: int, PA, PB, clock=lambda stage: None, pos=None) -> None:
        """PA, PB: (nb, d, b) float64 sketches of inner indices k0 .. k0 + nb - 1 (an aligned
        block, see :class:`pagh_mm.reduction.PairwiseSum`), or of the inner indices k0 + pos
        when the others of the block are empty.  ``PB`` None: a Gram product, whose two
        sketches are equal: one transform, squared (FWHT only)."""
        xp = self.xp
        if self.method == "fwht":
            FA = self._transform(self._to_dtype(PA, "A"))
            if PB is None:
                clock("transform")
                FA = FA.astype(self.acc_dtype, copy=False)
                self.sum.add(k0, FA * FA, pos)
                del FA
                clock("accumulate")
                return
            FB = self._transform(self._to_dtype(PB, "B"))
            clock("transform")
            terms = FA.astype(self.acc_dtype, copy=False) * FB.astype(self.acc_dtype, copy=False)
        else:
            FA = xp.fft.rfft(self._to_dtype(PA, "A"), axis=-1)
            FB = xp.fft.rfft(self._to_dtype(PB, "B"), axis=-1)
            clock("transform")
            terms = (FA * FB).astype(self.value_dtype, copy=False)
        del FA, FB
        self.sum.add(k0, terms, pos)
        clock("accumulate")

    def finish(self, direct=None, total=_OWN):
        """The (d, b) sketches c_t of the product, in float64, zeros as +0.0 (``direct``: a
        time-domain part added after the inverse transform, exact by construction; when every
        term was added directly, ``direct`` itself becomes the sketch; ``total``: the
        Hadamard-domain sum when it was formed elsewhere, None for no terms)."""
        xp = self.xp
        acc = self.sum.total() if total is _OWN else total
        if acc is None and direct is not None:      # every term added directly: the
            direct += 0.0                           # transforms of zeros are +0.0 sums (in
            if not all_finite(direct, xp):          # place, checked without a temporary: a
                raise OverflowError(                # table may fill the device)
                    "the sketch of the product has non-finite values")
            return direct
        if acc is None:
            acc = xp.zeros((self.reps, self.b if self.method == "fwht" else self.b // 2 + 1),
                           dtype=self.value_dtype)
        if self.method == "fwht":
            with fwht_gpu.errstate(overflow="raise"):
                c = self.inverse(acc, inverse=True)
        else:
            c = xp.fft.irfft(acc, n=self.b, axis=-1)
        c = c.astype(xp.float64) + (0.0 if direct is None else direct)   # -0.0 + 0.0 = +0.0
        if not bool(xp.isfinite(c).all()):
            raise OverflowError("the sketch of the product has non-finite values: it overflowed "
                                "(scale the inputs down or use a wider dtype), or the inputs hold "
                                "NaN/Inf and check_finite=False was passed")
        return c

    def bytes_per_index(self, sides: int = 2) -> int:
        """Temporaries one inner index adds to a block (``sides`` sketched: 1 for a Gram
        product): the float64 sketches, their cast, the transforms and the engine's copies,
        the products."""
        item, acc = self.dtype.itemsize, self.value_dtype.itemsize
        per_side = 8 + (4 if item == 2 else 0) + 4 * item
        return self.reps * self.b * (sides * per_side + 3 * acc)


def combine_index(method: str, h1, h2, log2b: int):
    """Bucket of entry (i, j) in c_t: h1 XOR h2 (FWHT) or (h1 + h2) mod b (FFT)."""
    if method == "fwht":
        return h1 ^ h2
    return (h1 + h2) & ((1 << log2b) - 1)
