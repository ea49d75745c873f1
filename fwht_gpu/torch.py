"""The transform for PyTorch: a custom operator with a fake (meta) kernel and an autograd
formula, so that it runs under ``torch.compile`` and in training. Importing this module
imports PyTorch; ``import fwht_gpu`` does not.

``fwht(x, dim)`` / ``ifwht(x, dim)`` take ``fwht_gpu.fwht``'s ``norm`` and ``order``; every
length the library supports (powers of two, K * 2**k); float64, float32, float16, bfloat16;
CPU tensors through the NumPy engine and CUDA tensors through the GPU engine on PyTorch's
current stream, through DLPack (no copy of a contiguous input transformed along its last
dimension, lengths K * 2**k included; CUDA results come from PyTorch's caching allocator).
Inside ``fwht_gpu.errstate(overflow="ignore")`` a CUDA call neither reads the overflow flag
back nor synchronises, and the transform of a contiguous tensor can be captured in a CUDA
graph (``torch.cuda.graph`` after a warm-up call, ``torch.compile(mode="reduce-overhead")``;
tested); checked calls cannot be captured.
``hadamard_transform(x, scale)``
has fast-hadamard-transform's signature and meaning: the last dimension, zero-padded to the
next power of two and truncated back, times ``scale``.

The operator ``torch.ops.fwht_gpu.transform(x, scale, inverse, order)`` transforms the last
dimension: ``scale * P H x`` (P the order's permutation of the output) or, with ``inverse``,
``scale * H^T P^T x``. Each is the other's adjoint, so the gradient of one is the other with
the same scale (H^T differs from H for the Paley matrices of lengths K * 2**k).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import frameworks, hadamard
from . import transform as _transform
from .dtypes import bfloat16

_DTYPES = {torch.float64: np.dtype(np.float64), torch.float32: np.dtype(np.float32),
           torch.float16: np.dtype(np.float16), torch.bfloat16: bfloat16}


def _planned(n: int, dtype: torch.dtype, cuda: bool) -> _transform.FWHT:
    return _transform._cached(n, _DTYPES[dtype], "folklore", None, None,
                              "cuda" if cuda else "cpu", None)


@torch.library.custom_op("fwht_gpu::transform", mutates_args=())
def _op(x: torch.Tensor, scale: float, inverse: bool, order: str) -> torch.Tensor:
    t = _planned(x.shape[-1], x.dtype, x.is_cuda)
    y = frameworks.through(x.detach().contiguous(), None,
                           lambda a, o: t._ordered(a, a.ndim - 1, float(scale), o,
                                                   bool(inverse), order))
    return y.contiguous()


@_op.register_fake
def _(x, scale, inverse, order):
    return x.new_empty(x.shape)


def _setup_context(ctx, inputs, output):
    _, ctx.scale, ctx.inverse, ctx.order = inputs


def _backward(ctx, grad):
    return _op(grad.contiguous(), ctx.scale, not ctx.inverse, ctx.order), None, None, None


_op.register_autograd(_backward, setup_context=_setup_context)


def _check(x, dim: int, order: str) -> tuple[int, int]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__} (fwht_gpu.fwht takes "
                        "NumPy, CuPy and other DLPack arrays)")
    if x.dtype not in _DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; pass float64, float32, float16 or bfloat16")
    if x.ndim == 0:
        raise ValueError("x: a 0-d tensor has no dimension to transform")
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim={dim} is out of range for a {x.ndim}-d tensor")
    n = x.shape[dim]
    K, _ = hadamard.split(n, "x")
    _transform._check_order(order, K)
    return dim % x.ndim, n


def _along(x, dim, norm, order, inverse):
    dim, n = _check(x, dim, order)
    scale = _transform.norm_factor(n, norm, inverse)
    last = x.ndim - 1
    y = _op(x.movedim(dim, last), scale, inverse, order)
    return y.movedim(last, dim)


def fwht(x: torch.Tensor, dim: int = -1, *, norm: str = "backward",
         order: str = "natural") -> torch.Tensor:
    """:func:`fwht_gpu.fwht` of a tensor along ``dim``, differentiable and compilable."""
    return _along(x, dim, norm, order, False)


def ifwht(x: torch.Tensor, dim: int = -1, *, norm: str = "backward",
          order: str = "natural") -> torch.Tensor:
    """:func:`fwht_gpu.ifwht` of a tensor along ``dim``, differentiable and compilable."""
    return _along(x, dim, norm, order, True)


def hadamard_transform(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``H x * scale`` along the last dimension, zero-padded to the next power of two and
    truncated to its length (fast-hadamard-transform's ``hadamard_transform``)."""
    if not isinstance(x, torch.Tensor) or x.ndim == 0:
        _check(x, -1, "natural")            # the argument's own error
    dim = x.shape[-1]
    padded = 1 << max(0, math.ceil(math.log2(max(dim, 1))))
    if padded != dim:
        x = torch.nn.functional.pad(x, (0, padded - dim))
    _check(x, -1, "natural")
    return _op(x, float(scale), False, "natural")[..., :dim]


__all__ = ["fwht", "ifwht", "hadamard_transform"]
