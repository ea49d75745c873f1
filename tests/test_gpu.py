"""GPU engine: bit-exact against the NumPy engine.  Run on a GPU machine with
``PYTHONPATH=. python3 -m pytest -q tests -m gpu``; skipped elsewhere."""
import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import cpu
from fwht_gpu.transform import norm_factor
from fwht_gpu import gpu
from fwht_gpu import variants
from tests import gpu_cases as cases
from tests.gpu_cases import DTYPE_IDS, DTYPES

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}"),
]


def _cp():
    return gpu.cupy()


def _poisoned(shape, dtype):
    return _cp().full(shape, np.nan, dtype=dtype)


def _rand(rng, shape, dtype):
    """Normal samples: drawn in float64 for FP64 data, in float32 (faster) for the others."""
    draw = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    return rng.standard_normal(shape, dtype=draw).astype(dtype)


def _cpu_same_plan(x, axis=-1, norm="backward", inverse=False):
    """The NumPy engine on the plan the GPU uses."""
    n = x.shape[axis]
    plan = F.make_plan(n, x.dtype, device="cuda")
    return F.run_plan(plan, x, axis, norm_factor(n, norm, inverse))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_single_transforms_bit_exact(dtype, rng):
    cp = _cp()
    for L in cases.single_sizes(dtype):
        x = _rand(rng, 1 << L, dtype)
        out = _poisoned(x.shape, dtype)
        res = F.fwht(cp.asarray(x), out=out)
        assert res is out
        got = out.get()
        want = _cpu_same_plan(x)
        assert got.dtype == dtype
        assert (got == want).all(), f"n=2**{L}: {np.count_nonzero(got != want)} differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", cases.BATCHED)
def test_batched_and_axes_bit_exact(dtype, shape, axis, rng):
    cp = _cp()
    x = _rand(rng, shape, dtype)
    n = x.shape[axis]
    plan = F.make_plan(n, dtype, device="cuda")
    unscaled = F.run_plan(plan, x, axis)        # every norm is this, then one scaling
    for norm in ("backward", "ortho", "forward"):
        for inverse in (False, True):
            fn = F.ifwht if inverse else F.fwht
            got = fn(cp.asarray(x), axis, norm=norm)
            assert isinstance(got, cp.ndarray) and got.shape == x.shape and got.dtype == dtype
            want = cpu.scale(unscaled.copy(), norm_factor(n, norm, inverse))
            assert (got.get() == want).all(), (norm, inverse)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_strided_views_out_and_in_place(dtype, rng):
    cp = _cp()
    base = _rand(rng, (64, 1 << 12), dtype)
    g = cp.asarray(base)
    for view, hview, axis in [(g[:, ::2], base[:, ::2], -1), (g[::2], base[::2], 0),
                              (g.T, base.T, 1), (g[::-1, ::-4], base[::-1, ::-4], -1)]:
        got = F.fwht(view, axis)
        want_v = _cpu_same_plan(np.ascontiguousarray(hview), axis)
        assert (got.get() == want_v).all(), f"view {view.shape} {view.strides} axis {axis}"
        assert (g.get() == base).all(), f"input modified by view {view.strides} axis {axis}"
    want = _cpu_same_plan(base)
    y = g.copy()
    assert F.fwht(y, out=y) is y and (y.get() == want).all(), "in place"
    o = _poisoned(base.T.shape, dtype)
    F.fwht(g.T, 0, out=o)                               # non-contiguous destination
    assert (o.get() == want.T).all(), "out= with another layout"
    odd = cp.empty(g.size + 1, dtype)[1:].reshape(g.shape)   # misaligned buffer
    odd[...] = g
    assert (F.fwht(odd).get() == want).all(), "misaligned input"


@pytest.mark.parametrize("dtype,log2n", cases.THREE_PASS, ids=["fp32", "fp16"])
def test_three_pass_transform_bit_exact(dtype, log2n, rng):
    x = (_rand(rng, 1 << log2n, np.float32) / 16).astype(dtype)   # |Hx| ~ 6 sqrt(n) / 16: no overflow
    plan = F.make_plan(1 << log2n, dtype, device="cuda")
    assert len(plan.passes) == 3
    got = F.fwht(_cp().asarray(x), tuning=F.Tuning(cluster_log=0)).get()   # (not two cluster passes)
    assert (got == F.run_plan(plan, x)).all()


def test_overflow_detected_on_gpu():
    cp = _cp()
    x = cp.full(1 << 16, 30000, dtype=cp.float16)
    with pytest.raises(F.TransformOverflowError, match="fp16"):
        F.fwht(x)
    x = cp.ones(1 << 16, dtype=cp.float16)
    x[5] = np.inf   # non-finite input is not an overflow
    assert not np.isfinite(F.fwht(x).get()).all()


def test_errstate_ignore_on_gpu_is_the_cpus_and_never_waits(monkeypatch):
    """Under errstate(overflow="ignore") the GPU returns the NumPy engine's unchecked values
    (power-of-two and K * 2**k lengths, scaled and not, interleaved along axis 0, in place,
    host arrays) and takes no flags buffer (no read-back: the only synchronisation of a
    checked call)."""
    from fwht_gpu.cuda import engine
    cp = _cp()
    x = np.full((4, 1 << 12), 30000, np.float16)
    x[1, 7] = np.inf
    k = np.full((3, 12 << 8), 3000, np.float16)
    xt = np.ascontiguousarray(x.T)                               # axis 0: interleaved passes
    with F.errstate(overflow="ignore"):
        want = [F.fwht(x), F.ifwht(x), F.fwht(k), F.ifwht(k, norm="ortho"),
                F.ifwht(xt, axis=0), F.fwht(x)]
        monkeypatch.setattr(engine, "_take_flags", lambda *a: pytest.fail("a flags buffer"))
        inplace = cp.asarray(x)
        assert F.fwht(inplace, out=inplace) is inplace
        got = [F.fwht(cp.asarray(x)).get(), F.ifwht(cp.asarray(x)).get(),
               F.fwht(cp.asarray(k)).get(), F.ifwht(cp.asarray(k), norm="ortho").get(),
               F.ifwht(cp.asarray(xt), axis=0).get(), inplace.get()]
        host = F.fwht(x, device="cuda")
    for w, g in zip(want + [want[0]], got + [host]):           # NaN payloads are the device's
        nan = np.isnan(w.astype(np.float32))
        assert not np.isfinite(w).all() and (np.isnan(g.astype(np.float32)) == nan).all()
        assert ((w.view(np.uint16) == g.view(np.uint16)) | nan).all()
    monkeypatch.undo()
    with pytest.raises(F.TransformOverflowError):
        F.fwht(cp.asarray(x))


def test_host_array_through_gpu(rng):
    for dtype in DTYPES:
        x = _rand(rng, (3, 1 << 16), dtype)
        got = F.fwht(x, device="cuda")
        assert isinstance(got, np.ndarray) and (got == _cpu_same_plan(x)).all()
        got = F.fwht(x.T.copy(), 0, device="cuda", norm="ortho")
        assert (got == _cpu_same_plan(x.T.copy(), 0, "ortho")).all()
        p = F.pinned_empty(x.shape, dtype)
        p[...] = x
        assert gpu.is_pinned(p) and not gpu.is_pinned(x)
        assert (F.fwht(p, device="cuda") == _cpu_same_plan(x)).all()
    x = _rand(rng, (3, 1 << 10), np.float32)
    swapped = np.empty(x.shape, dtype=">f4")                   # non-native out: converted
    assert F.fwht(x, out=swapped, device="cuda") is swapped and (swapped == F.fwht(x)).all()
    with pytest.raises(F.TransformOverflowError):
        F.fwht(np.full(1 << 10, 30000, np.float16), device="cuda")


def test_unsupported_variant_and_device_errors():
    cp = _cp()
    x = cp.ones(8, cp.float32)
    with pytest.raises(ValueError, match="device='cpu' with a CuPy array"):
        F.fwht(x, device="cpu")
    with pytest.raises(ValueError, match="must match x"):
        F.fwht(x, out=cp.ones(8, cp.float64))
    with pytest.raises(TypeError, match="unsupported dtype"):
        F.fwht(cp.ones(8, cp.int32))
    with pytest.raises(ValueError, match="pad to 16 .* truncate to 12"):
        F.fwht(cp.ones(13, cp.float32))              # 12 = 12 * 2**0 is a supported length


def test_request_larger_than_memory_fails_before_allocating():
    cp = _cp()
    free, total = cp.cuda.runtime.memGetInfo()
    n = 1 << int(np.log2(total // 4))       # ~ all of memory in FP32
    x = cp.ones(16, cp.float32)
    big = cp.lib.stride_tricks.as_strided(x, shape=(n,), strides=(0,)) if n > 16 else x
    with pytest.raises(MemoryError, match="GiB of GPU memory"):
        F.fwht(big)


@pytest.mark.parametrize("dtype,log2n", [(np.float32, 34), (np.float16, 35)], ids=["fp32-2^34", "fp16-2^35"])
def test_capacity_in_place(dtype, log2n):
    """The largest sizes the issue asks for on an 80 GB card, in place, checked exactly.

    Input: three non-zero entries (1, 2, 4) at indices p0, p1, p2; output entry k is
    sum v (-1)^popcount(k & p), never zero, so an unwritten element cannot pass.
    """
    cp = _cp()
    n = 1 << log2n
    free = cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes()
    if n * np.dtype(dtype).itemsize > 0.97 * free:
        pytest.skip(f"needs {n * np.dtype(dtype).itemsize / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free")
    x = cp.zeros(n, dtype=dtype)
    pos = [3, n - 5, (n >> 1) | 12345]
    for p, v in zip(pos, (1, 2, 4)):
        x[p] = v
    assert F.fwht(x, out=x) is x
    bad = cp.zeros(1, dtype=cp.uint64)
    check = cp.ElementwiseKernel(
        "T y, int64 p0, int64 p1, int64 p2", "raw uint64 bad",
        """
        const long long k = i;
        const float e = ((__popcll(k & p0) & 1) ? -1.f : 1.f) + ((__popcll(k & p1) & 1) ? -2.f : 2.f)
                      + ((__popcll(k & p2) & 1) ? -4.f : 4.f);
        if ((float)y != e) atomicAdd(&bad[0], 1ULL);
        """, "fwht_capacity_check")
    check(x, *[np.int64(p) for p in pos], bad)
    assert int(bad.get()[0]) == 0
    del x
    cp.get_default_memory_pool().free_all_blocks()


# --- extended variants (issue 4): Alman-Rao, stabilizers, compute dtype ------------------

def _variant(name, dtype):
    """(algorithm, stabilizer, compute dtype) of a named variant for ``dtype`` data."""
    v = variants.variant(name)
    return v.algorithm, v.stabilizer, v.compute_dtype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", cases.EXTENDED)
def test_extended_variants_bit_exact(dtype, name, rng):
    cp = _cp()
    if not variants.variant(name).applies_to(dtype):
        pytest.skip("no wider compute dtype for float64")
    alg, stab, cdt = _variant(name, dtype)
    for L in cases.extended_sizes(name, np.dtype(dtype), gpu.limits()):
        n = 1 << L
        x = _rand(rng, cases.extended_shape(L), dtype)
        if np.dtype(dtype) == np.float16:
            x = (x.astype(np.float32) / 8).astype(dtype)        # keep Alman-Rao's pre-scaling in range
        plan = F.make_plan(n, dtype, alg, stab, "cuda", cdt)
        out = _poisoned(x.shape, dtype)
        F.fwht(cp.asarray(x), algorithm=alg, stabilizer=stab, compute_dtype=cdt, out=out)
        want = F.run_plan(plan, x)
        got = out.get()
        assert (got == want).all(), f"n=2**{L}, {len(plan.passes)} passes: {np.count_nonzero(got != want)} differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["alman", "alman-compute"])
def test_alman_many_short_transforms(dtype, name, rng):
    """Short Alman-Rao transforms share a tile: the pre-scaling exponent uses each element's
    index within its own transform."""
    cp = _cp()
    if not variants.variant(name).applies_to(dtype):
        pytest.skip("no wider compute dtype for float64")
    cdt = _variant(name, dtype)[2]
    for L in cases.ALMAN_SHORT:
        x = (_rand(rng, (300, 1 << L), np.float32) / 8).astype(dtype)
        plan = F.make_plan(1 << L, dtype, "alman", None, "cuda", cdt)
        out = _poisoned(x.shape, dtype)
        F.fwht(cp.asarray(x), algorithm="alman", compute_dtype=cdt, out=out)
        assert (out.get() == F.run_plan(plan, x)).all(), f"n=2**{L}"


@pytest.mark.parametrize("name", cases.EXTENDED)
def test_extended_variants_batched_strided_norms(name, rng):
    cp = _cp()
    for dtype in (np.float32, np.float16):
        alg, stab, cdt = _variant(name, dtype)
        x = (_rand(rng, (6, 1 << 16, 3), np.float32) / 8).astype(dtype)
        plan = F.make_plan(1 << 16, dtype, alg, stab, "cuda", cdt)
        got = F.ifwht(cp.asarray(x), 1, norm="ortho", algorithm=alg, stabilizer=stab,
                      compute_dtype=cdt).get()
        assert (got == F.run_plan(plan, x, 1, norm_factor(1 << 16, "ortho", True))).all()


# --- issue 12: the same bits on every device, overflow per transform --------------------------

@pytest.mark.parametrize("dtype,cdt,stab", cases.SAME_CALL, ids=cases.SAME_CALL_IDS)
def test_numpy_and_cupy_calls_give_the_same_bits(dtype, cdt, stab, rng):
    """The default call on a NumPy array and on the same data as a CuPy array: identical bits
    for every size (the CPU plan rounds where the GPU plan does)."""
    cp = _cp()
    for L in cases.same_call_sizes(dtype, cdt):
        x = (_rand(rng, (2, 1 << L) if L < 20 else (1 << L,), np.float32) / 8).astype(dtype)
        want = F.fwht(x, compute_dtype=cdt, stabilizer=stab)
        got = F.fwht(cp.asarray(x), compute_dtype=cdt, stabilizer=stab).get()
        assert (got == want).all(), f"n=2**{L}: {np.count_nonzero(got != want)} differ"


def test_nan_in_one_transform_does_not_hide_overflow_on_gpu():
    cp = _cp()
    for shape, axis in (((3, 1 << 16), -1), ((3, 1 << 10), -1), ((1 << 10, 3), 0), ((4, 1 << 10, 8), 1)):
        x = cp.ones(shape, dtype=cp.float16)
        xm = cp.moveaxis(x, axis, -1)
        xm[0, ..., 5] = cp.nan                        # NaN in the first transform(s)
        F.fwht(x[:1] if axis != 0 else x[:, :1], axis)  # NaN alone: no error
        xm[-1, ...] = 30000                              # overflow in the last one(s)
        with pytest.raises(F.TransformOverflowError):
            F.fwht(x, axis)
        with pytest.raises(F.TransformOverflowError):
            F.fwht(x.copy(), axis, out=None)
        y = x.copy()
        with pytest.raises(F.TransformOverflowError):
            F.fwht(y, axis, out=y)                       # in place
    for stab in ("kahan", "neumaier-pass"):
        x = cp.ones((2, 1 << 12), dtype=cp.float16)
        x[0, 3] = cp.inf
        x[1] = 30000
        with pytest.raises(F.TransformOverflowError):
            F.fwht(x, stabilizer=stab)


def test_scaled_transforms_that_fit_on_gpu(rng):
    cp = _cp()
    x = (rng.standard_normal((4, 1 << 12)) * 100).astype(np.float16)
    x[1] = np.float16(60000) * np.sign(rng.standard_normal(1 << 12)).astype(np.float16)
    want = F.ifwht(x)
    assert np.isfinite(want).all()
    assert (F.ifwht(cp.asarray(x)).get() == want).all()
    assert (F.ifwht(x, device="cuda") == want).all()
    g = cp.asarray(x)
    assert (F.ifwht(g, out=g).get() == want).all()                     # in place: input kept
    xt = np.ascontiguousarray(x.T)
    assert (F.ifwht(cp.asarray(xt), axis=0).get() == F.ifwht(xt, axis=0)).all()   # strided axis
    assert (F.fwht(cp.asarray(x), norm="forward").get() == F.fwht(x, norm="forward")).all()
    z = x.copy()
    z[1] = np.float16(1000) * np.sign(rng.standard_normal(1 << 12)).astype(np.float16)
    assert (F.fwht(cp.asarray(z), norm="ortho").get() == F.fwht(z, norm="ortho")).all()
    with pytest.raises(F.TransformOverflowError):
        F.fwht(cp.full(4, 65000, dtype=cp.float16), norm="ortho")
