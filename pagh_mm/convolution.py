"""Combining the sketches of A and B: XOR convolution through the FWHT, or Pagh's
cyclic convolution through the FFT, summed over the inner dimension in the
transform domain, with one inverse transform per repetition."""
from __future__ import annotations

import numpy as np

import fwht_gpu
import fwht_gpu.dtypes

METHODS = ("fwht", "fft")


class Accumulator:
    """Running transform-domain sum over inner-dimension blocks, for all d repetitions."""

    def __init__(self, method: str, reps: int, log2b: int, dtype, algorithm: str,
                 stabilizer, xp):
        self.method, self.xp = method, xp
        self.dtype = np.dtype(dtype)
        self.b = 1 << log2b
        self.algorithm, self.stabilizer = algorithm, stabilizer
        # products are accumulated in float64 for float64 transforms, float32 otherwise
        self.acc_dtype = np.dtype(np.float64) if self.dtype == np.float64 else np.dtype(np.float32)
        if method == "fwht":
            self.acc = xp.zeros((reps, self.b), dtype=self.acc_dtype)
        else:
            cdt = np.complex128 if self.acc_dtype == np.float64 else np.complex64
            self.acc = xp.zeros((reps, self.b // 2 + 1), dtype=cdt)

    def _to_dtype(self, P, what: str):
        xp = self.xp
        with np.errstate(over="ignore"):     # overflow is detected just below
            out = P.astype(self.dtype)
        if self.dtype.itemsize == 2 and not bool(xp.isfinite(out).all()):
            raise OverflowError(
                f"the Count-Sketch of {what} exceeds the {fwht_gpu.dtypes.short_name(self.dtype)} "
                f"range (largest {fwht_gpu.dtypes.max_finite(self.dtype):.6g}); scale the inputs "
                "down or use dtype=float32")
        return out

    def add_block(self, PA, PB, clock=lambda stage: None) -> None:
        """PA, PB: (nb, d * b) float64 sketches of one block of the inner dimension."""
        xp = self.xp
        nb = PA.shape[0]
        PA = PA.reshape(nb, -1, self.b)
        PB = PB.reshape(nb, -1, self.b)
        if self.method == "fwht":
            FA = fwht_gpu.fwht(self._to_dtype(PA, "A"), algorithm=self.algorithm,
                               stabilizer=self.stabilizer)
            FB = fwht_gpu.fwht(self._to_dtype(PB, "B"), algorithm=self.algorithm,
                               stabilizer=self.stabilizer)
            clock("transform")
            self.acc += (FA.astype(self.acc_dtype) * FB.astype(self.acc_dtype)).sum(axis=0)
        else:
            FA = xp.fft.rfft(PA.astype(self.dtype), axis=-1)
            FB = xp.fft.rfft(PB.astype(self.dtype), axis=-1)
            clock("transform")
            self.acc += (FA * FB).sum(axis=0).astype(self.acc.dtype)
        clock("accumulate")

    def finish(self):
        """The (d, b) sketches c_t of the product, in float64."""
        xp = self.xp
        if self.method == "fwht":
            c = fwht_gpu.ifwht(self.acc, algorithm=self.algorithm, stabilizer=self.stabilizer)
        else:
            c = xp.fft.irfft(self.acc, n=self.b, axis=-1)
        if not bool(xp.isfinite(c).all()):
            raise OverflowError("the sketch of the product has non-finite values: it overflowed "
                                "(scale the inputs down or use a wider dtype), or the inputs hold "
                                "NaN/Inf and check_finite=False was passed")
        return c.astype(xp.float64)


def combine_index(method: str, h1, h2, log2b: int):
    """Bucket of entry (i, j) in c_t: h1 XOR h2 (FWHT) or (h1 + h2) mod b (FFT)."""
    if method == "fwht":
        return h1 ^ h2
    return (h1 + h2) & ((1 << log2b) - 1)
