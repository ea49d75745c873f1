"""The GPU suite's parameters, shared by the tests and by the session's background
precompilation (:func:`suite_plans`), so the kernels compiled up front are those the tests
launch, in about the order they launch them."""
from __future__ import annotations

import functools

import numpy as np

from fwht_gpu import dtypes as _dt
from fwht_gpu import make_plan, variants

DTYPES = list(_dt.SUPPORTED)
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]


def single_sizes(dtype) -> range:
    """Single contiguous transforms: every length up to 2^26 (2^24 in FP64): one pass, the
    split lone pass, two and three passes, every width of each pass."""
    return range(1, (26 if np.dtype(dtype).itemsize <= 4 else 24) + 1)


#: (shape, axis): batches, short transforms grouped in a tile, non-last axes with 2**s trailing
#: elements (interleaved in place) and with others (transposed).
BATCHED = [
    ((1 << 12, 1 << 8), -1), ((3, 1 << 20), -1), ((5, 7, 1 << 9), -1), ((1 << 10, 2), -1),
    ((1 << 9, 3), 0), ((4, 1 << 10, 3), 1), ((2, 1 << 17), -1), ((1 << 14, 1 << 4), 0),
    ((1 << 10, 1 << 9), 0), ((3, 1 << 12, 2), 1), ((1 << 20, 8), 0), ((2, 1 << 18, 64), 1),
]

#: Three passes at 2^27 (log2 length per dtype).
THREE_PASS = [(np.float32, 27), (np.float16, 27)]

#: The variants beyond plain Folklore (names of fwht_gpu.variants.VARIANTS).
EXTENDED = ["alman", "kahan", "neumaier", "kahan-pass", "neumaier-pass", "compute", "alman-compute"]


@functools.lru_cache(maxsize=None)
def extended_sizes(name: str, dtype, limits=None) -> list[int]:
    """log2 lengths of the extended-variant test, derived from the planner (on ``limits``, the
    H100's by default): every length whose transform launches a kernel configuration, or has a
    number of passes, that no shorter length has; every code path once, none twice.  Up to
    2^24 without a stabilizer, 2^22 with one: the stabilized configurations first launched at
    2^23-2^24 (FP32 and the 16-bit dtypes) cost the suite about 35 s of NumPy references and
    are not tested here."""
    from fwht_gpu.cuda import config
    from fwht_gpu.gpu import H100
    v = variants.variant(name)
    seen, sizes = set(), []
    for L in range(1, (22 if v.stabilizer else 24) + 1):
        n = 1 << L
        batch = extended_shape(L)[0] if L < 20 else 1
        plan = make_plan(n, dtype, v.algorithm, v.stabilizer, "cuda", v.compute_dtype(dtype),
                         batch=batch, sms=(limits or H100).sm_count)
        launched = {c.name for c in config.configs_for(plan, batch * n, limits or H100)}
        launched.add(("passes", len(plan.passes)))
        if launched - seen:
            sizes.append(L)
        seen |= launched
    return sizes


def extended_shape(log2n: int) -> tuple[int, ...]:
    """Two transforms below 2^20, one 1-d array above."""
    return (2, 1 << log2n) if log2n < 20 else (1 << log2n,)


#: Short Alman-Rao transforms sharing a tile (300 of each length).
ALMAN_SHORT = (3, 4, 5, 6, 9, 10, 11)

#: (dtype, compute dtype, stabilizer) of the NumPy-vs-CuPy default-call test.
SAME_CALL = [(np.float16, np.float32, None), (_dt.bfloat16, np.float32, None),
             (np.float32, np.float64, None), (np.float32, None, "neumaier-pass"),
             (np.float16, None, "kahan-pass"), (np.float16, None, None)]
SAME_CALL_IDS = ["fp16-compute", "bf16-compute", "fp32-compute", "fp32-neumaier-pass",
                 "fp16-kahan-pass", "fp16-plain"]


def same_call_sizes(dtype, cdt) -> list[int]:
    return list(range(1, 23)) + [24] + ([26] if cdt is not None and np.dtype(dtype) == np.float16 else [])


def _layout(shape, axis) -> tuple[int, int, int]:
    """(n, batch, interleave) of a C-contiguous array's transform along ``axis`` (as
    fwht_gpu.cuda.arrays.layout decides for plain Folklore)."""
    axis %= len(shape)
    n = shape[axis]
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    batch = int(np.prod(shape, dtype=np.int64)) // n
    s = inner.bit_length() - 1 if axis != len(shape) - 1 and inner & (inner - 1) == 0 else 0
    return n, batch, s


def suite_plans(limits):
    """(plan, total elements) of every transform the GPU suite runs on a device of these
    :class:`~fwht_gpu.gpu.Limits`, in the order of the tests (the float64 recomputations of
    overflowed rows and pagh_mm's sketch transforms included)."""
    sms = limits.sm_count

    def plan(n, dt, batch=1, interleave=0, name="folklore"):
        v = variants.variant(name)
        p = make_plan(n, dt, v.algorithm, v.stabilizer, "cuda", v.compute_dtype(dt),
                      batch=batch, interleave=interleave if name == "folklore" else 0, sms=sms,
                      clusters=limits.max_cluster_log)
        return p, batch * n
    for dt in DTYPES:
        for L in single_sizes(dt):
            yield plan(1 << L, dt)
    for dt in DTYPES:
        for shape, axis in BATCHED:
            n, batch, s = _layout(shape, axis)
            yield plan(n, dt, batch, s)
        yield plan(1 << 12, dt, 64)                                      # views
    for dt, L in THREE_PASS:
        yield plan(1 << L, dt)
    for dt in DTYPES:
        yield plan(1 << 16, dt, 3)                                       # host arrays
    for dt in DTYPES:
        for name in EXTENDED:
            if variants.variant(name).applies_to(dt):
                for L in extended_sizes(name, dt, limits):
                    yield plan(1 << L, dt, 2 if L < 20 else 1, name=name)
        for L in ALMAN_SHORT:
            for name in ("alman", "alman-compute"):
                if variants.variant(name).applies_to(dt):
                    yield plan(1 << L, dt, 300, name=name)
    for name in EXTENDED:
        for dt in (np.float32, np.float16):
            yield plan(1 << 16, dt, 6 * 3, name=name)                    # batched strided norms
    for dt, cdt, stab in SAME_CALL:
        name = "compute" if cdt is not None else (stab or "folklore")
        for L in same_call_sizes(dt, cdt):
            yield plan(1 << L, dt, 2 if L < 20 else 1, name=name)
    yield plan(1 << 10, np.float16, 32, 3)                               # NaN vs overflow, axes
    yield plan(1 << 10, np.float16, 8, 3)
    yield plan(1 << 12, np.float16, 4, 2)                                # scaled, strided axis
    for L in (12, 16):                                                   # float64 recomputation
        for batch in (1, 2, 3, 4):
            for name in ("folklore", "kahan", "neumaier-pass"):
                yield plan(1 << L, np.float64, batch, name=name)
    for dt in DTYPES:                              # pagh_mm's sketches: (blocks x reps) transforms
        for L in (4, 5, 6, 8, 11, 12, 13, 14, 16):
            for k in range(11):
                yield plan(1 << L, dt, 1 << k)


def _warm_paths():
    """Tiny calls taking the GPU paths of the overflow and pagh_mm tests: each compiles the
    CuPy kernels (elementwise, reductions, indexing, sparse) its path launches."""
    import fwht_gpu as F
    import pagh_mm
    from fwht_gpu import gpu

    cp = gpu.cupy()
    import cupyx.scipy.sparse as csp

    def overflow(dt):
        def run():
            x = cp.ones((2, 1 << 12), dtype=dt)
            x[1] = _dt.max_finite(dt) / 2
            x[0, 3] = cp.inf
            for fn in (F.fwht, F.ifwht):
                try:
                    fn(x)
                except F.TransformOverflowError:
                    pass
            bool(cp.isfinite(x).all())
        return run

    def sketch(dt, fmt, method="fwht", source=np.float64, budget=None):
        def run():
            rng = np.random.default_rng(0)
            A = (rng.integers(-4, 5, (40, 30)) * (rng.random((40, 30)) < 0.3)).astype(source)
            B = (rng.integers(-4, 5, (30, 50)) * (rng.random((30, 50)) < 0.3)).astype(source)
            conv = {"dense": cp.asarray, "fortran": lambda M: cp.asfortranarray(cp.asarray(M)),
                    "csr": lambda M: csp.csr_matrix(cp.asarray(M.astype(np.float64))),
                    "csc": lambda M: csp.csc_matrix(cp.asarray(M.astype(np.float64))),
                    "coo": lambda M: csp.coo_matrix(cp.asarray(M.astype(np.float64)))}[fmt]
            sk = pagh_mm.compress(conv(A), conv(B), buckets=1 << 11, reps=3, seed=0, dtype=dt,
                                  method=method, memory_budget=budget)
            sk.to_dense()
            sk.top_k(5, verify=True)
            sk.above(1.0, verify=True)
            sk.exact(cp.asarray([1, 2]), cp.asarray([3, 4]))
        return run

    def reductions(dt, ops):
        def run():       # CuPy's CUB reductions: a kernel per block size (32..512 threads)
            for size in (100, 200, 400, 800, 4000):
                a = cp.zeros(size, dtype=dt)
                for op in ops:
                    getattr(a, op)()
        return run

    jobs = [overflow(dt) for dt in (np.float16, _dt.bfloat16)]
    jobs += [sketch(dt, fmt) for dt in ("float64", "float32", "float16", "bfloat16")
             for fmt in ("dense", "csr", "csc", "coo")]
    jobs += [sketch(None, "dense", "fft"), sketch(None, "fortran"), sketch(None, "dense", source=np.float32),
             sketch(None, "dense", source=np.int32), sketch(None, "csr", budget=3 << 20)]
    jobs += [reductions(np.bool_, ["all"]), reductions(np.bool_, ["any"]),
             reductions(np.int32, ["sum"]), reductions(np.int64, ["sum"])]
    return jobs


def warm_main(index: int, count: int) -> None:
    """Entry of a warm-up process: every ``count``-th path of :func:`_warm_paths` from
    ``index``; exits 1 if one failed (its error on stderr)."""
    import sys
    import traceback
    failed = 0
    for job in _warm_paths()[index::count]:
        try:
            job()
        except Exception:                   # noqa: BLE001  (reported, the tests decide)
            traceback.print_exc()
            failed += 1
    sys.exit(1 if failed else 0)


def warm_cupy_kernels(root: str, processes: int = 3) -> list:
    """Start ``processes`` Python processes running the GPU paths of :func:`_warm_paths`
    (working directory ``root``); returns the Popen objects, stderr in a temporary file.

    CuPy compiles its own kernels (elementwise, reductions, indexing, sparse: about 200 in the
    suite, 0.3-0.5 s each) at their first launch, on the launching thread.  Compiled in other
    processes (their own interpreter lock) into CuPy's disk cache, which every process reads,
    they are loaded in milliseconds by the time the tests launch them."""
    import subprocess
    import sys
    import tempfile
    procs = []
    for k in range(processes):
        err = tempfile.TemporaryFile(mode="w+")
        code = f"from tests.gpu_cases import warm_main; warm_main({k}, {processes})"
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=root,
                                      stdout=subprocess.DEVNULL, stderr=err))
        procs[-1].err = err
    return procs
