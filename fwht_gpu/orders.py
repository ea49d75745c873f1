"""Orderings of the transform's coefficients: MATLAB's ``fwht``/``ifwht`` conventions.

The transform computes the coefficients in natural (Hadamard) order: coefficient k is the
inner product with row k of the Sylvester matrix, ``H[k, j] = (-1)**popcount(k & j)``. Two
other orders are in use, both permutations of it for a length n = 2**m:

* ``"sequency"`` (Walsh order): coefficient k belongs to the row with exactly k sign changes.
  Its natural index is ``bit_reverse(gray(k))``, with ``gray(k) = k ^ (k >> 1)``.
* ``"dyadic"`` (Paley order): coefficient k belongs to the product of the Rademacher functions
  named by the bits of k (bit i: the square wave of 2**(i+1) half-periods over the length).
  Its natural index is ``bit_reverse(k)``.

The forward transform returns ``y_natural[perm]``; the inverse takes coefficients in the given
order and inverts ``y_natural`` with ``y_natural[perm] = y``. So ``ifwht(fwht(x, order=o),
order=o)`` returns x for every order, and MATLAB's ``fwht(x, [], 'sequency')`` is
``fwht(x, order="sequency", norm="forward")`` (MATLAB scales the forward transform by 1/n).
"""
from __future__ import annotations

import functools

import numpy as np

ORDERS = ("natural", "sequency", "dyadic")


def check(order) -> str:
    """The order, validated (ValueError naming the choices)."""
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order={order!r}; choose 'natural' (Hadamard), 'sequency' (Walsh) "
                         "or 'dyadic' (Paley)")
    return order


def bit_reverse(k: np.ndarray, bits: int) -> np.ndarray:
    """The ``bits`` low bits of each k in reverse order (int64)."""
    k = np.asarray(k, dtype=np.int64)
    out = np.zeros_like(k)
    for i in range(bits):
        out |= ((k >> i) & 1) << (bits - 1 - i)
    return out


@functools.lru_cache(maxsize=64)
def _permutation(n: int, order: str) -> np.ndarray:
    m = n.bit_length() - 1
    k = np.arange(n, dtype=np.int64)
    if order == "sequency":
        k = k ^ (k >> 1)
    perm = bit_reverse(k, m)
    perm.setflags(write=False)
    return perm


def permutation(n: int, order: str) -> np.ndarray | None:
    """The natural index of each coefficient of a length-n transform in ``order`` (None for
    the natural order itself). ``n`` a power of two."""
    if check(order) == "natural" or n <= 2:
        return None
    return _permutation(int(n), order)


def inverse_permutation(n: int, order: str) -> np.ndarray | None:
    """``inv`` with ``inv[perm] = arange(n)``: the position in ``order`` of each natural index."""
    perm = permutation(n, order)
    if perm is None:
        return None
    inv = np.empty_like(perm)
    inv[perm] = np.arange(n, dtype=np.int64)
    return inv


def reorder(y, axis: int, perm: np.ndarray, xp):
    """``y`` with its coefficients along ``axis`` taken in the order ``perm`` (a new array)."""
    return xp.take(y, xp.asarray(perm), axis=axis)
