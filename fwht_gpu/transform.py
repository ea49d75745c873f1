"""The transform: :class:`FWHT` (a planned, reusable transform) and the thin wrappers
:func:`fwht` / :func:`ifwht` over a per-device cache of them."""
from __future__ import annotations

import functools
import math

import numpy as np

from . import cpu, devices, frameworks, hadamard, orders, variants
from . import dtypes as _dt
from .cuda import arrays as gpu_arrays
from .cuda import config as gpu_config
from .cuda import device as gpu_device
from .cuda import engine as gpu_engine
from .cuda import host as gpu_host
from .overflow import TransformOverflowError  # noqa: F401  (re-exported)
from .overflow import checking, recompute_rows
from .plan import Plan, make_plan
from .tuning import Tuning

NORMS = ("backward", "ortho", "forward")


def norm_factor(n: int, norm: str, inverse: bool) -> float:
    """Scale applied after the unnormalized transform, as in numpy.fft."""
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r}; choose 'backward', 'ortho' or 'forward'")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    scaled = (norm == "backward") == inverse
    return 1.0 / n if scaled else 1.0


#: Types seen to be CuPy arrays (the common case answers with one set lookup).
_CUPY_TYPES: set = set()


def _is_cupy(x) -> bool:
    t = type(x)
    if t in _CUPY_TYPES:
        return True
    if t is np.ndarray:
        return False
    if t.__module__.startswith("cupy") and hasattr(x, "__cuda_array_interface__"):
        if t.__module__.startswith("cupy._core") or t.__module__ == "cupy":
            _CUPY_TYPES.add(t)      # cupy.ndarray (and its own subclasses): always a GPU array
        return True
    return False


def _check_args(x, axis, out, xp) -> int:
    if x.ndim == 0:
        raise ValueError("x: a 0-d array has no axis to transform; pass at least a 1-d array")
    _dt.resolve(x.dtype, "x")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of bounds for a {x.ndim}-d array")
    axis = int(axis) % x.ndim
    if out is not None:
        if not isinstance(out, xp.ndarray):
            raise TypeError(f"out must be a {xp.__name__}.ndarray like x, got {type(out).__name__}")
        odt = _dt.native(out.dtype) if xp is np else out.dtype   # written through a conversion
        if out.shape != x.shape or odt != x.dtype:
            raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; it must match x "
                             f"({x.shape}, {x.dtype})")
        if xp is np and not out.flags.writeable:
            raise ValueError("out is read-only; pass a writeable array")
    return axis


def _as_array(x):
    """NumPy input in native byte order (masked arrays refused); CuPy arrays unchanged."""
    if _is_cupy(x):
        return x
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError("x is a masked array: the transform would use its masked values; "
                        "pass x.filled(0) (or another fill value) or x.data")
    x = np.asarray(x)
    if x.dtype != _dt.native(x.dtype):
        x = x.astype(_dt.native(x.dtype))             # non-native byte order: converted once
    return x


class FWHT:
    """A planned Walsh-Hadamard transform of length ``n`` and ``dtype``, reusable across calls.

    ``n``: a power of two, or K * 2**k with a shipped Hadamard matrix of order K
    (:mod:`fwht_gpu.hadamard`: 12, 20, 28, 36, 44; NumPy arrays of such lengths run on the
    NumPy engine, CuPy arrays on their GPU with the same bits).

    ``device="cpu"`` runs the NumPy engine; ``"cuda"`` the GPU engine (CuPy arrays in place
    on their device, NumPy arrays through device memory).  ``plan`` is the plan of one
    contiguous transform; on the GPU the plan of each call also depends on the array's
    layout and batch (:meth:`plan_for`), always with the same bits.  ``precompile()``
    compiles the GPU kernels ahead of the first call.

    >>> t = FWHT(1024, "float32")
    >>> y = t(x)                      # the transform along the last axis
    >>> x2 = t(y, inverse=True)       # the inverse (1/n scaling)
    """

    def __init__(self, n: int, dtype, *, algorithm: str = "folklore", stabilizer: str | None = None,
                 compute_dtype=None, device: str = "cpu", tuning: Tuning | None = None):
        if device == "gpu":
            device = "cuda"
        self.n, self.device = int(n), device
        self.K, m = hadamard.split(self.n, "n")
        self._kw = dict(algorithm=algorithm, stabilizer=stabilizer, compute_dtype=compute_dtype,
                        tuning=tuning)
        base = make_plan(m, dtype, device=device if self.K == 1 else "cpu",
                         **self._kw)                                # validates every argument
        self.dtype = base.dtype
        self._plans: dict = {("base",): base}

    def plan_for(self, batch: int = 1, interleave: int = 0) -> Plan:
        """The plan for ``batch`` transforms (``interleave``: see :func:`fwht_gpu.make_plan`) on
        the current device (cached)."""
        if self.device == "cpu" or self.K > 1:
            return self._plans[("base",)]
        dev = gpu_device.current_id()
        lim = gpu_device.limits(dev)
        sms = lim.sm_count
        key = (dev, int(interleave), batch < sms)
        plan = self._plans.get(key)
        if plan is None:
            plan = make_plan(self.n, self.dtype, device="cuda", batch=batch, interleave=interleave,
                             sms=sms, clusters=lim.max_cluster_log, **self._kw)
            self._plans[key] = plan
        return plan

    def _k_plan(self) -> Plan:
        """n = K * 2**k on the GPU: the plan of the power-of-two stage of each block (the
        NumPy engine's passes: the grouping depends on (2**k, dtype, variant) alone)."""
        plan = self._plans.get(("k-cuda",))
        if plan is None:
            plan = make_plan(self._plans[("base",)].n, self.dtype, device="cuda", **self._kw)
            self._plans[("k-cuda",)] = plan
        return plan

    @property
    def plan(self) -> Plan:
        """The plan of one contiguous transform (for n = K * 2**k: of the 2**k-point stage)."""
        return self.plan_for(1) if self.device == "cuda" and gpu_device.available() \
            else self._plans[("base",)]

    def describe(self, batch: int = 1) -> str:
        """The plan of ``batch`` contiguous transforms and, on the GPU, each pass's kernel."""
        plan = self.plan_for(batch) if self.device == "cuda" and gpu_device.available() else self.plan
        text = plan.describe()
        if self.K > 1:
            kind, q = hadamard.ORDERS[self.K]
            name = {"paley1": "Paley I", "paley2": "Paley II"}[kind]
            return (text + f"\nthen the {self.K}-point stage across {self.K} blocks of {plan.n} "
                    f"(H_{self.K}: {name}, q = {q}; NumPy engine, or the GPU's for CuPy "
                    "arrays)")
        if self.device == "cuda":
            lim = gpu_device.limits() if gpu_device.available() else gpu_device.H100
            cfgs = gpu_config.configs_for(plan, batch * plan.n, lim)
            text += "\n" + "\n".join(f"  kernel {k}: {c.name}, {1 << c.log_t} threads, "
                                     f"{c.smem_bytes} B shared ({lim.name})"
                                     for k, c in enumerate(cfgs))
        return text

    def precompile(self, batches=(1,), workers: int | None = None) -> int:
        """Compile the GPU kernels of contiguous calls on ``batches`` transforms, in parallel
        threads (kept in CuPy's disk cache); returns how many kernels were queued."""
        if self.device != "cuda":
            return 0
        if self.K > 1:
            return gpu_engine.precompile_k([(self._k_plan(), self.K, b, inverse) for b in batches
                                            for inverse in (False, True)], workers)
        return gpu_engine.precompile([(self.plan_for(b), b * self.n) for b in batches], workers)

    def __call__(self, x, axis: int = -1, *, norm: str = "backward", inverse: bool = False, out=None,
                 overwrite_x: bool = False, workers: int | None = None, order: str = "natural"):
        """The transform (``inverse``: the inverse, as :func:`ifwht`) of ``x`` along ``axis``.
        ``overwrite_x``: the contents of ``x`` may be destroyed (as in ``scipy.fft``); the CPU
        engine then transforms a C-contiguous ``x`` in place, without a copy, when it can.
        ``workers``: CPU threads, as in ``scipy.fft`` (None: all cores). ``order``: the
        coefficients' order, as :func:`fwht`."""
        workers = cpu.check_workers(workers)
        _check_order(order, self.K)
        overwrite_x = overwrite_x and not frameworks.is_foreign(x)   # never write a caller's
        return frameworks.through(                                    # tensor through its view
            x, out, lambda a, o: self._call(a, axis, norm, inverse, o, overwrite_x, workers,
                                            order))

    def _call(self, x, axis, norm, inverse, out, overwrite_x, workers, order):
        x = _as_array(x)
        on_gpu = _is_cupy(x)
        if on_gpu and self.device != "cuda":
            raise ValueError("a GPU array (CuPy, or a CUDA tensor) given to an FWHT planned for "
                             "device='cpu'; plan it with device='cuda'")
        axis = _check_args(x, axis, out, gpu_device.cupy() if on_gpu else np)
        length = x.shape[axis]
        if length != self.n or x.dtype != self.dtype:
            hadamard.split(length, "x")
            raise ValueError(f"x has length {length} and dtype {x.dtype} along axis {axis}; this "
                             f"FWHT is planned for n={self.n}, {self.dtype}")
        factor = norm_factor(self.n, norm, inverse)
        with cpu.limited_workers(workers):
            return self._ordered(x, axis, factor, out, inverse, order, bool(overwrite_x))

    def _ordered(self, x, axis: int, factor: float, out, inverse: bool, order: str,
                 overwrite_x: bool = False):
        """The transform with its coefficients in ``order`` (checked arguments): the forward
        transform permutes its output, the inverse its input."""
        perm = orders.permutation(self.n, order)
        if perm is None:
            return self._execute(x, axis, factor, out, overwrite_x, inverse)
        xp = gpu_device.cupy() if _is_cupy(x) else np
        if inverse:
            x = orders.reorder(x, axis, orders.inverse_permutation(self.n, order), xp)
            return self._execute(x, axis, factor, out, True, inverse)
        y = orders.reorder(self._execute(x, axis, factor, None, overwrite_x, inverse), axis,
                           perm, xp)
        if out is None:
            return y
        out[...] = y
        return out

    def _execute(self, x, axis: int, factor: float, out, overwrite_x: bool = False,
                 inverse: bool = False):
        """The engine call on checked arguments (``axis`` non-negative)."""
        if self.K > 1:              # K * 2**k: the NumPy engine, or the GPU's for CuPy arrays
            if not _is_cupy(x):
                return hadamard.transform(self._plans[("base",)], self.K, x, axis, factor, out,
                                          inverse)
            return _gpu_k_transform(self._k_plan(), self.K, x, axis, factor, out, inverse)
        if _is_cupy(x):
            batch, interleave = gpu_arrays.layout(x, axis, out)
            return gpu_arrays.transform(self.plan_for(batch, interleave), x, axis, factor, out)
        if self.device == "cuda":
            return gpu_host.transform(self.plan_for(x.size // max(1, self.n)), x, axis, factor, out)
        return cpu.transform(self._plans[("base",)], x, axis, factor, out, overwrite_x=overwrite_x)


@functools.lru_cache(maxsize=256)
def _cached(n, dtype, algorithm, stabilizer, compute_dtype, device, tuning) -> FWHT:
    """The per-process cache of planned transforms (each caches its plans per GPU)."""
    return FWHT(n, dtype, algorithm=algorithm, stabilizer=stabilizer, compute_dtype=compute_dtype,
                device=device, tuning=tuning)


def _gpu_k_transform(plan: Plan, K: int, x, axis: int, factor: float, out, inverse: bool):
    """The transform of length K * plan.n along ``axis`` of the CuPy array ``x`` on its GPU
    (:func:`fwht_gpu.cuda.engine.run_k`), times ``factor``, into ``out`` (or a new array): the
    NumPy engine's bits (:func:`fwht_gpu.hadamard.transform`), its overflow rule included
    (rows of finite input whose result is not finite: recomputed in float64 when scaled,
    else TransformOverflowError; neither under ``errstate(overflow="ignore")``).  The axis is made contiguous (one transpose copy unless it
    already is); ``x`` is never modified unless it is ``out``."""
    cp = gpu_device.cupy()
    n = x.shape[axis]
    if x.size == 0:
        return out if out is not None else cp.empty_like(x)

    def usable(a):
        return a.flags.c_contiguous and a.data.ptr % 16 == 0

    xm = cp.moveaxis(x, axis, -1)
    om = None if out is None else cp.moveaxis(out, axis, -1)
    direct = om is not None and usable(om) and not cp.may_share_memory(out, x)
    gpu_arrays.check_device_memory(cp, (0 if usable(xm) else x.nbytes) + (0 if direct else x.nbytes),
                                   "the work buffers")
    if usable(xm):
        src = xm
    else:
        src = cp.empty(xm.shape, dtype=x.dtype)
        src[...] = xm                                   # explicit transpose / realignment
    dst = om if direct else (src if src is not xm else cp.empty(xm.shape, dtype=x.dtype))
    src2, dst2 = src.reshape(-1, n), dst.reshape(-1, n)
    if gpu_engine.run_k(plan, K, src2, dst2, factor, inverse, checking()):
        # the input rows: src, or x itself when src (a private copy) was transformed in place
        kept = src2 if src is not dst else cp.ascontiguousarray(xm).reshape(-1, n)
        bad = gpu_engine.nonfinite_rows(dst2) & ~gpu_engine.nonfinite_rows(kept)
        if bool(bad.any()):         # the NumPy engine's rule and steps (fwht_gpu.overflow)
            idx = cp.nonzero(bad)[0]
            dst2[idx] = recompute_rows(plan, kept[idx], factor,
                                       lambda wide, x64, f: _gpu_k_rows(wide, K, x64, f, inverse),
                                       cp)
    res = cp.moveaxis(dst, -1, axis)
    if out is not None:
        if not direct:
            out[...] = res
        return out
    return res if res.flags.c_contiguous else cp.ascontiguousarray(res)


def _gpu_k_rows(plan: Plan, K: int, x2, factor: float, inverse: bool):
    """The transforms of the rows of the (rows, K * plan.n) CuPy array ``x2`` (float64
    recomputations of overflowed rows)."""
    cp = gpu_device.cupy()
    x2 = cp.ascontiguousarray(x2)
    y2 = cp.empty_like(x2)
    gpu_engine.run_k(plan, K, x2, y2, factor, inverse)
    return y2


def _check_order(order, K: int) -> None:
    if orders.check(order) != "natural" and K > 1:
        raise ValueError(f"order={order!r} is defined for power-of-two lengths; lengths K * 2**k "
                         "(K > 1) have the natural order only")


def _transform(x, axis, norm, algorithm, stabilizer, compute_dtype, out, device, inverse, tuning,
               workers=None, order="natural"):
    """The transform of another framework's array (:mod:`fwht_gpu.frameworks`) through its
    NumPy or CuPy view, given back in its type; NumPy and CuPy arrays as they are."""
    return frameworks.through(
        x, out, lambda a, o: _transform_engine(a, axis, norm, algorithm, stabilizer,
                                               compute_dtype, o, device, inverse, tuning,
                                               workers, order))


def _transform_engine(x, axis, norm, algorithm, stabilizer, compute_dtype, out, device, inverse,
                      tuning, workers, order):
    dev = devices.for_array(device, _is_cupy(x))          # checked in the order of the arguments
    workers = cpu.check_workers(workers)
    x = _as_array(x)
    axis = _check_args(x, axis, out, gpu_device.cupy() if _is_cupy(x) else np)
    n = x.shape[axis]
    K, _ = hadamard.split(n, "x")
    _check_order(order, K)
    factor = norm_factor(n, norm, inverse)
    variants.check(algorithm, stabilizer)
    cdt = None if compute_dtype is None else _dt.resolve(compute_dtype, "compute_dtype")
    try:
        t = _cached(n, x.dtype, algorithm, stabilizer, cdt, dev, tuning)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        t = FWHT(n, x.dtype, algorithm=algorithm, stabilizer=stabilizer, compute_dtype=cdt,
                 device=dev, tuning=tuning)              # raises the argument's own error
    with cpu.limited_workers(workers):
        return t._ordered(x, axis, factor, out, inverse, order)   # arguments checked above


def fwht(x, axis: int = -1, *, norm: str = "backward", algorithm: str = "folklore",
         stabilizer: str | None = None, compute_dtype=None, out=None, device: str | None = None,
         tuning: Tuning | None = None, workers: int | None = None, order: str = "natural"):
    """Fast Walsh-Hadamard transform along ``axis`` (Hadamard / natural order by default).

    The unnormalized transform equals ``scipy.linalg.hadamard(n) @ x`` along the axis; for
    lengths n = K * 2**k (K in 12, 20, 28, 36, 44) it is ``kron(H_K, hadamard(2**k)) @ x`` with
    the shipped H_K of :mod:`fwht_gpu.hadamard`.

    Parameters
    ----------
    x : numpy.ndarray or cupy.ndarray
        float64, float32, float16 or ml_dtypes.bfloat16; the length along ``axis``
        must be a power of two or K * 2**k (K a shipped order; ``device="cuda"`` with a
        NumPy array of these lengths runs on the NumPy engine).  The array decides the device (NumPy:
        CPU, CuPy: GPU); the result has the input's type, dtype and shape.
    axis : int
        Axis to transform (default last); any other axes are batch axes.
    norm : {"backward", "ortho", "forward"}
        As in :mod:`numpy.fft`: "backward" leaves the forward transform unscaled,
        "ortho" scales by 1/sqrt(n), "forward" by 1/n.
    algorithm : {"folklore", "alman"}
        Radix-2 butterflies, or Alman-Rao's 23-operation H8 blocks.
    stabilizer : {None, "kahan", "neumaier", "kahan-pass", "neumaier-pass"}
        Compensated butterflies (Folklore only): with a per-element error vector folded in
        at the end (thesis 3.3), or ("-pass") compensation kept within each GPU pass and
        folded in where the pass writes back (no error vector in memory).
    compute_dtype : {None, "float32", "float64"}
        Arithmetic inside a pass in this wider dtype (FP16/BF16 data in FP32, FP32 in FP64),
        rounded to the data's dtype where each pass writes back.
    out : array, optional
        Destination of the same type, shape and dtype; may be ``x`` itself (in place).
    device : {None, "cpu", "cuda"}
        ``"cuda"`` with a NumPy array transforms on the GPU through pinned memory
        and returns a NumPy array.
    tuning : Tuning, optional
        Planner and launcher settings (experiments; the defaults are the measured ones).
    workers : int, optional
        CPU threads, as in :mod:`scipy.fft` (None: every core; negative: counted back from
        the cores, -1 for all).  The result does not depend on it.  Ignored on the GPU.
    order : {"natural", "sequency", "dyadic"}
        The coefficients' order (MATLAB's conventions, :mod:`fwht_gpu.orders`): natural
        (Hadamard), sequency (Walsh: coefficient k has k sign changes) or dyadic (Paley).
        Power-of-two lengths only.  ``ifwht`` takes its input in that order.

    Raises
    ------
    ValueError
        Unsupported length (the message names the nearest supported ones), bad norm,
        algorithm, stabilizer, order, axis or ``out``.
    TypeError
        Unsupported dtype.
    TransformOverflowError
        Finite input whose transform exceeds the dtype's range (not checked inside
        ``fwht_gpu.errstate(overflow="ignore")``: then inf or NaN, and a GPU call does not
        wait for its kernels).
    """
    return _transform(x, axis, norm, algorithm, stabilizer, compute_dtype, out, device, False, tuning,
                      workers, order)


def ifwht(x, axis: int = -1, *, norm: str = "backward", algorithm: str = "folklore",
          stabilizer: str | None = None, compute_dtype=None, out=None, device: str | None = None,
          tuning: Tuning | None = None, workers: int | None = None, order: str = "natural"):
    """Inverse transform: ``fwht`` with the inverse's scaling (1/n for norm="backward").

    ``ifwht(fwht(x, order=o), order=o) == x`` up to rounding for every ``norm`` and order; for
    n = K * 2**k the inverse applies H_K^T.  Arguments as :func:`fwht`.
    """
    return _transform(x, axis, norm, algorithm, stabilizer, compute_dtype, out, device, True, tuning,
                      workers, order)


def run_plan(plan: Plan, x: np.ndarray, axis: int = -1, factor: float = 1.0, out=None,
             counter: cpu.OpCounter | None = None) -> np.ndarray:
    """Execute ``plan`` with the NumPy engine along ``axis`` of ``x``, then multiply by ``factor``.

    Raises :class:`TransformOverflowError` when a transform of finite input gives a
    non-finite value (checked per transform, whatever the other rows hold; unchecked under
    :func:`fwht_gpu.errstate` ``(overflow="ignore")``)."""
    return cpu.transform(plan, x, axis, factor, out, counter, recompute=False)


def operation_count(n: int, algorithm: str = "folklore", stabilizer: str | None = None) -> dict:
    """Element operations of one length-n transform, counted by running the NumPy engine.

    Returns a dict with ``add_sub`` (additions/subtractions), ``halving`` (the H8
    blocks' division by 2), ``scaling`` (Alman-Rao power-of-two pre-scalings of
    elements with a non-zero exponent) and ``compare`` (Neumaier's magnitude tests).
    """
    plan = make_plan(n, np.float64, algorithm, stabilizer, "cpu")
    counter = cpu.OpCounter()
    x = np.random.default_rng(0).standard_normal((1, n))
    cpu.execute(plan, x, counter)
    return counter.as_dict()
