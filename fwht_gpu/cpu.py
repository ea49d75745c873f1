"""NumPy engine: executes a :class:`~fwht_gpu.plan.Plan` exactly.

Arrays are processed as (batch, n).  Every operation is rounded to the storage
dtype (see :mod:`fwht_gpu.dtypes`), in the order the Plan and the formulas
below fix; the CUDA kernels follow the same order, so both engines give the
same bits.  An optional :class:`OpCounter` records the arithmetic performed.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import compiled
from . import dtypes as _dt
from . import memory
from .overflow import checking, overflow_error, overflowed_rows, recompute_rows
from .plan import Plan


@dataclass
class OpCounter:
    """Counts of element operations executed by the engine (over the whole batch)."""

    add_sub: int = 0
    halving: int = 0
    scaling: int = 0
    compare: int = 0
    by_stage: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"add_sub": self.add_sub, "halving": self.halving,
                "scaling": self.scaling, "compare": self.compare}


class _Arith:
    """Rounded arithmetic in the work dtype, with optional counting."""

    def __init__(self, dtype, counter: OpCounter | None):
        self.r = _dt.rounder(dtype)
        self.r_temp = _dt.rounder(dtype, temporary=True)   # for a + b, a - b: in place
        self.c = counter
        # FP64/FP32 storage without counting: IEEE operations need no separate rounding step
        self.native = np.dtype(dtype).itemsize != 2 and counter is None

    def _count(self, a, k=1):
        if self.c is not None:
            self.c.add_sub += k * a.size

    def add(self, a, b):
        out = self.r_temp(a + b)
        self._count(out)
        return out

    def sub(self, a, b):
        out = self.r_temp(a - b)
        self._count(out)
        return out

    def ge(self, a, b):
        if self.c is not None:
            self.c.compare += a.size
        return np.abs(a) >= np.abs(b)


def _split(x: np.ndarray, bit: int, radix: int) -> np.ndarray:
    """View (batch, n) as (batch, n / (radix * 2**bit), radix, 2**bit)."""
    return x.reshape(x.shape[0], -1, radix, 1 << bit)


def _radix2(ar: _Arith, x, bit):
    """One Folklore stage, in place on the work array x."""
    v = _split(x, bit, 2)

    def block(s):
        a, b = v[s][:, :, 0, :], v[s][:, :, 1, :]
        d = ar.sub(a, b)
        if ar.native:                  # add in place (the same IEEE result)
            np.add(a, b, out=a)
        else:
            a[...] = ar.add(a, b)
        b[...] = d
    _each_block(v.shape, block, ar)
    return x


#: Stages over at least this many elements run on blocks in threads (NumPy releases the GIL
#: in its loops); every element sees the same operations, so the bits do not depend on it.
PARALLEL_ELEMENTS = 1 << 20
_POOL: dict = {}
_POOL_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_POOL.clear)     # a forked child makes its own threads


_LIMIT = threading.local()


def cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _workers() -> int:
    return getattr(_LIMIT, "workers", None) or cores()


def check_workers(workers) -> int | None:
    """``workers`` as in ``scipy.fft``: None (all cores), a positive count, or a negative one
    counted back from the cores (-1: all); 0 and non-integers are errors."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers == 0:
        raise ValueError(f"workers={workers!r} must be a non-zero integer (negative: counted "
                         "back from the number of cores, -1 for all) or None")
    n = int(workers) if workers > 0 else cores() + 1 + int(workers)
    if n < 1:
        raise ValueError(f"workers={workers} leaves no core of the {cores()} this process has")
    return n


#: limited_workers(None): nothing to change, and no generator per call (the GPU's hot path).
_UNLIMITED = contextlib.nullcontext()


def limited_workers(workers: int | None):
    """Run the CPU engine (its thread pool and the compiled kernels' threads) on at most
    ``workers`` threads in this thread (None: as it is); threads never change results."""
    return _UNLIMITED if workers is None else _limited(workers)


@contextlib.contextmanager
def _limited(workers: int):
    import numba
    before, before_numba = getattr(_LIMIT, "workers", None), numba.get_num_threads()
    _LIMIT.workers = workers
    numba.set_num_threads(max(1, min(workers, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        _LIMIT.workers = before
        numba.set_num_threads(before_numba)


def _pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    with _POOL_LOCK:
        if workers not in _POOL:
            _POOL[workers] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="fwht-cpu")
        return _POOL[workers]


def _each_block(shape, fn, ar: _Arith) -> None:
    """fn(index) over blocks of a (batch, outer, radix, inner) view: along ``outer`` when it
    has enough blocks, else along ``inner``; in a thread pool for large views."""
    workers = _workers()
    size = int(np.prod(shape))
    if ar.c is not None or workers == 1 or size < PARALLEL_ELEMENTS:
        fn((slice(None),) * 4)
        return
    axis = 1 if shape[1] >= workers else 3
    step = -(-shape[axis] // workers)
    index = [tuple(slice(k, k + step) if a == axis else slice(None) for a in range(4))
             for k in range(0, shape[axis], step)]

    def run(s):
        with np.errstate(over="ignore", invalid="ignore"):   # errstate is per thread
            fn(s)
    pool = _pool(workers)
    for f in [pool.submit(run, s) for s in index]:
        f.result()


def _radix2_stabilized(ar: _Arith, x, e, bit, neumaier: bool):
    """Thesis 3.3.1 (Kahan) / 3.3.2 (Neumaier) butterfly on values x and errors e.

    The true value of an element is x - e.
    """
    v, w = _split(x, bit, 2), _split(e, bit, 2)
    xo, eo = np.empty_like(v), np.empty_like(w)

    def block(s):
        _stabilized_butterflies(ar, v[s], w[s], xo[s], eo[s], neumaier)
    _each_block(v.shape, block, ar)
    return xo.reshape(x.shape), eo.reshape(e.shape)


def _stabilized_butterflies(ar: _Arith, v, w, xo, eo, neumaier: bool) -> None:
    """The compensated butterflies of (batch, outer, 2, inner) views of values and errors,
    written to the views ``xo`` and ``eo``."""
    A, B = v[:, :, 0, :], v[:, :, 1, :]
    eA, eB = w[:, :, 0, :], w[:, :, 1, :]
    eS = ar.add(eA, eB)                 # combine the errors first,
    eD = ar.sub(eA, eB)
    A1 = ar.sub(ar.add(A, B), eS)       # then the main summands, then fold the error
    B1 = ar.sub(ar.sub(A, B), eD)
    if not neumaier:
        eA1 = ar.add(ar.sub(ar.sub(A1, A), B), eS)
        eB1 = ar.add(ar.add(ar.sub(B1, A), B), eD)
    else:
        # e'_A: sum the two largest of |A'|, |A|, |B| first.
        c1 = ar.ge(A1, B) & ar.ge(A, B)
        c2 = ar.ge(A1, A) & ar.ge(B, A)
        eA1 = np.where(c1, ar.sub(ar.sub(A1, A), B),
                       np.where(c2, ar.sub(ar.sub(A1, B), A), ar.add(ar.sub(-A, B), A1)))
        eA1 = ar.add(eA1, eS)
        d1 = ar.ge(B1, B) & ar.ge(A, B)
        d2 = ar.ge(B1, A) & ar.ge(B, A)
        eB1 = np.where(d1, ar.add(ar.sub(B1, A), B),
                       np.where(d2, ar.sub(ar.add(B1, B), A), ar.add(ar.add(-A, B), B1)))
        eB1 = ar.add(eB1, eD)
    xo[:, :, 0, :], xo[:, :, 1, :] = A1, B1
    eo[:, :, 0, :], eo[:, :, 1, :] = eA1, eB1


def alman_exponents(n: int, folklore_bits: int) -> np.ndarray:
    """Pre-scaling exponent of each index: non-zero octal digits of (i >> folklore_bits)."""
    i = np.arange(n, dtype=np.int64) >> folklore_bits
    e = np.zeros(n, dtype=np.int64)
    while i.any():
        e += (i & 7) != 0
        i >>= 3
    return e


def _prescale(ar: _Arith, x, folklore_bits):
    e = alman_exponents(x.shape[1], folklore_bits)
    if ar.c is not None:
        ar.c.scaling += int(np.count_nonzero(e)) * x.shape[0]
    return ar.r(x * np.exp2(e).astype(x.dtype))


def _h8(ar: _Arith, x, bit):
    """Alman-Rao H8 block (thesis Alg. 9 lines 33-48) on inputs b..h pre-doubled."""
    v = _split(x, bit, 8)
    out = np.empty_like(v)

    def block(s):
        _h8_blocks(ar, v[s], out[s])
    _each_block(v.shape, block, ar)
    return out.reshape(x.shape)


def _h8_blocks(ar: _Arith, v, out) -> None:
    """The H8 blocks of a (batch, outer, 8, inner) view, written to the view ``out``."""
    a, b, c, d, e, f, g, h = (v[:, :, r, :] for r in range(8))
    B1, B2, B3 = ar.add(b, c), ar.add(d, h), ar.add(f, g)
    tot = ar.add(ar.add(ar.add(B1, B2), B3), e)
    tot = ar.r(tot * 0.5)
    if ar.c is not None:
        ar.c.halving += tot.size
    diff = ar.sub(a, tot)
    D, E, H = ar.add(diff, d), ar.add(diff, e), ar.add(diff, h)
    out[:, :, 0, :] = ar.add(a, tot)
    out[:, :, 1, :] = ar.add(ar.add(E, c), g)
    out[:, :, 2, :] = ar.add(ar.add(E, b), f)
    out[:, :, 3, :] = ar.add(E, B2)
    out[:, :, 4, :] = ar.add(D, B1)
    out[:, :, 5, :] = ar.add(ar.add(H, c), f)
    out[:, :, 6, :] = ar.add(ar.add(H, b), g)
    out[:, :, 7, :] = ar.add(D, B3)


#: Bytes of rows the engine transforms together (fits the L2 cache of typical CPUs;
#: measured 1.7-2.8x faster than whole arrays for 2048 x 2^14).
CHUNK_BYTES = 1 << 19


#: Work-dtype arrays of one row block alive at once, per variant (measured peaks: Folklore 2,
#: Kahan 6, Alman-Rao 6.3, Neumaier 7.8 block sizes).
_WORK_ARRAYS = {"folklore": 3, "alman": 8, "kahan": 8, "neumaier": 10}


def work_bytes(plan: Plan, batch: int) -> int:
    """Bytes of the temporaries :func:`execute` holds at once for ``batch`` rows."""
    item = _dt.work_dtype(plan.compute_dtype).itemsize
    rows = min(batch, max(1, CHUNK_BYTES // max(1, plan.n * item)))
    kind = plan.stabilizer_kind or plan.algorithm
    return _WORK_ARRAYS[kind] * rows * plan.n * item


def execute(plan: Plan, x: np.ndarray, counter: OpCounter | None = None) -> np.ndarray:
    """Run ``plan`` on a (batch, n) array of the plan's dtype; returns a new array (unscaled).

    Pass by pass: operations are rounded to the plan's compute dtype (the storage dtype by
    default); values are rounded to the storage dtype where a pass writes back; a
    pass-local stabilizer folds its compensation in there, a global one after the last
    stage."""
    if x.ndim != 2 or x.shape[1] != plan.n or x.dtype != plan.dtype:
        raise ValueError(f"execute expects a (batch, {plan.n}) {plan.dtype} array, "
                         f"got {x.shape} {x.dtype}")
    if compiled.supports(plan, counter):     # the same stages, compiled (the same bits)
        return compiled.run(plan, x)[0]
    with np.errstate(over="ignore", invalid="ignore"):   # overflow is detected by the caller
        # rows are independent: run every stage on cache-sized blocks of rows (same
        # operations in the same order per row, so the same bits)
        rows = max(1, CHUNK_BYTES // max(1, plan.n * _dt.work_dtype(plan.compute_dtype).itemsize))
        if counter is not None or x.shape[0] <= rows:
            return _execute(plan, x, counter)
        out = np.empty_like(x)
        for r0 in range(0, x.shape[0], rows):
            out[r0:r0 + rows] = _execute(plan, x[r0:r0 + rows], None)
        return out


def _execute(plan: Plan, x: np.ndarray, counter: OpCounter | None) -> np.ndarray:
    wide = plan.compute_dtype != plan.dtype
    ar = _Arith(plan.compute_dtype, counter)
    work = _dt.work_dtype(plan.compute_dtype)
    to_storage = _dt.rounder(plan.dtype) if not wide else \
        (lambda a: a.astype(plan.dtype).astype(work))
    w = x.astype(work, copy=True)
    neumaier = plan.stabilizer_kind == "neumaier"
    err = np.zeros_like(w) if plan.stabilizer else None
    for p in plan.passes:
        for st in p.stages:
            if st.kind == "radix2":
                if err is None:
                    w = _radix2(ar, w, st.bit)
                else:
                    w, err = _radix2_stabilized(ar, w, err, st.bit, neumaier)
            elif st.kind == "h8":
                w = _h8(ar, w, st.bit)
            elif st.kind == "prescale":
                w = _prescale(ar, w, st.bit)
            else:  # pragma: no cover - Plan only makes the kinds above
                raise AssertionError(st.kind)
        if plan.fold_each_pass:
            w = ar.sub(w, err)                  # fold where the pass writes back
            err = np.zeros_like(w)
        if wide:
            w = to_storage(w)                   # the pass writes back in the storage dtype
    if err is not None and not plan.fold_each_pass:
        w = ar.sub(w, err)                      # fold the error vector in at the end
    return w.astype(plan.dtype)


def scale(x: np.ndarray, factor: float) -> np.ndarray:
    """Multiply by ``factor``: product in FP64, rounded to the work dtype, then to storage
    (in place on the engine's fresh output, in blocks: no full-size FP64 temporary)."""
    if factor == 1.0:
        return x
    wd = _dt.work_dtype(x.dtype)
    x = np.ascontiguousarray(x)
    flat = x.reshape(-1)
    step = 1 << 20
    with np.errstate(over="ignore"):
        for k in range(0, flat.size, step):
            part = flat[k:k + step]
            part[...] = (part.astype(np.float64) * factor).astype(wd).astype(x.dtype)
    return x


def transform(plan: Plan, x: np.ndarray, axis: int, factor: float = 1.0, out=None,
              counter: OpCounter | None = None, recompute: bool = True,
              overwrite_x: bool = False) -> np.ndarray:
    """The engine's entry (the GPU engines have the same signature): ``plan`` along ``axis``
    of ``x``, multiplied by ``factor``, written to ``out`` (or a new array).  Overflowed
    transforms of finite input are recomputed in float64 when scaled (``recompute``), else
    TransformOverflowError (neither under ``errstate(overflow="ignore")``).  ``overwrite_x``:
    an unscaled compiled transform of a C-contiguous ``x`` along its last axis runs in place
    and returns ``x``."""
    axis = axis % x.ndim
    fast = compiled.supports(plan, counter)
    check = checking()
    if overwrite_x and out is None and factor == 1.0 and axis == x.ndim - 1 and x.size and \
            x.flags.c_contiguous and x.flags.writeable and x.dtype == plan.dtype and fast:
        if compiled.run(plan, x.reshape(-1, plan.n), in_place=True)[1] is not None and check:
            raise overflow_error(plan.dtype)        # unscaled: as the copying path
        return x
    xm = np.moveaxis(x, axis, -1)
    shape = xm.shape
    x2 = xm.reshape(-1, plan.n)
    if x2.shape[0] == 0:
        y2 = x2.copy()
    else:
        # reshape copy, engine output, result, and the engine's work arrays on row blocks
        memory.check(3 * x2.nbytes + work_bytes(plan, x2.shape[0]),
                     f"the {_dt.short_name(plan.dtype)} transform of {x2.shape[0]} x {plan.n} values",
                     "transform fewer rows at a time")
        if fast and out is not None and out is not x and factor == 1.0 and \
                axis == x.ndim - 1 and out.flags.c_contiguous and out.dtype == x.dtype and \
                out.shape == x.shape and not np.may_share_memory(out, x):
            # written straight into out (one read of x, one write of out)
            if compiled.run(plan, x2, out=out.reshape(x2.shape))[1] is not None and check:
                raise overflow_error(plan.dtype)    # unscaled: as below
            return out
        if fast:            # the compiled kernels flag the overflowed rows as they go
            y2, bad = compiled.run(plan, x2)
            y2 = scale(y2, factor)
            bad = bad if check else None
        else:
            y2 = scale(execute(plan, x2, counter), factor)
            bad = overflowed_rows(x2, y2, np)
        if bad is not None:
            if not recompute:
                raise overflow_error(plan.dtype)
            y2[bad] = recompute_rows(plan, x2[bad], factor, _run64, np)
    y = np.moveaxis(y2.reshape(shape), -1, axis)
    if out is None:
        if y.dtype == x.dtype and y.flags.c_contiguous:
            return y                            # the engine's fresh output, as it is
        out = np.empty(x.shape, dtype=x.dtype)
    out[...] = y
    return out


def _run64(plan: Plan, x64: np.ndarray, factor: float) -> np.ndarray:
    return transform(plan, x64, -1, factor, recompute=False)
