"""The compiled Folklore stages (fwht_gpu.compiled) give the NumPy engine's bits: every
size, the four dtypes and wider compute dtypes, batches, special values, any number of
threads."""
import ml_dtypes
import numba
import numpy as np
import pytest

import fwht_gpu
from fwht_gpu import compiled, cpu


def _numpy_engine(plan, x):
    compiled.ENABLED = False
    try:
        return cpu.execute(plan, x)
    finally:
        compiled.ENABLED = True


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("log2n", [0, 1, 2, 3, 5, 11, 12, 13, 14, 17])
def test_compiled_stages_equal_the_numpy_engine_bit_for_bit(dtype, log2n):
    n = 1 << log2n
    plan = fwht_gpu.make_plan(n, dtype, "folklore", None)
    assert compiled.supports(plan, None)
    rng = np.random.default_rng(log2n)
    x = (rng.standard_normal((3, n)) * np.exp2(rng.integers(-20, 20, (3, n)))).astype(dtype)
    x[0, : min(n, 4)] = [np.inf, -0.0, 1e-45, np.nan][: min(n, 4)]
    got = cpu.execute(plan, x)
    want = _numpy_engine(plan, x)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype,compute", [(np.float16, None), (ml_dtypes.bfloat16, None),
                                           (np.float16, "float32"),
                                           (ml_dtypes.bfloat16, "float32"),
                                           (np.float32, "float64")])
@pytest.mark.parametrize("log2n", [0, 1, 3, 11, 12, 13, 15, 17])
def test_rounded_and_wide_plans_equal_the_numpy_engine_bit_for_bit(dtype, compute, log2n):
    """FP16/BF16 computed in float32 with every operation rounded, or in a wider dtype
    rounded where each pass writes back: overflow to infinity, subnormals, NaN and -0.0."""
    n = 1 << log2n
    plan = fwht_gpu.make_plan(n, dtype, "folklore", None, compute_dtype=compute)
    assert compiled.supports(plan, None)
    rng = np.random.default_rng(log2n + 7)
    scale = np.exp2(rng.integers(-30, 12, (4, n)) - (log2n // 2))
    x = (rng.standard_normal((4, n)) * scale).astype(dtype)
    x[1] = (rng.standard_normal(n) * 2.0 ** -20).astype(dtype)     # FP16 subnormals
    with np.errstate(over="ignore"):
        x[2] = (rng.standard_normal(n) * 3e4).astype(dtype)        # FP16 overflow
    x[0, : min(n, 4)] = np.array([np.inf, -0.0, np.nan, 1.0], np.float32)[: min(n, 4)]
    got = cpu.execute(plan, x)
    want = _numpy_engine(plan, x)
    g32, w32 = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w32)                        # (a NaN's payload is not specified)
    assert got.dtype == want.dtype and np.array_equal(np.isnan(g32), nan)
    assert np.array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8))
    y = fwht_gpu.FWHT(n, dtype, compute_dtype=compute, device="cpu")(x[3:], overwrite_x=True) \
        if n > 1 and np.isfinite(want[3].astype(np.float32)).all() else None
    if y is not None:
        assert np.array_equal(y.view(np.uint8), want[3:].view(np.uint8))


def test_register_rounding_has_numpys_and_ml_dtypes_bits():
    """The kernels' scalar rounding (fwht_gpu._cpu_kernels._round through round_storage) on
    random float32 patterns and every pattern near the FP16 subnormal, normal and overflow
    boundaries: the bits of the round trip through float16 / bfloat16."""
    from fwht_gpu import _cpu_kernels as k
    rng = np.random.default_rng(0)
    u = np.concatenate([rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                        np.arange(0x33000000 - 4096, 0x38800000 + 4096, 7, dtype=np.uint32),
                        np.arange(0x477FF000 - 4096, 0x477FF000 + 4096, dtype=np.uint32),
                        np.arange(0x7F7F0000, 0x7F800002, dtype=np.uint32)])
    f = np.concatenate([u, u | np.uint32(0x80000000)]).view(np.float32)
    for mode, dt in ((1, np.float16), (2, ml_dtypes.bfloat16), (3, np.float16)):
        got = f.copy()                          # (mode 3: FP16 by integer operations)
        k.round_storage(got, mode)
        with np.errstate(over="ignore", invalid="ignore"):
            want = f.astype(dt).astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_threads_do_not_change_the_bits():
    plan = fwht_gpu.make_plan(1 << 16, np.float32, "folklore", None)
    x = np.random.default_rng(1).standard_normal((5, 1 << 16)).astype(np.float32)
    before = numba.get_num_threads()
    outs = []
    try:
        for t in sorted({1, before}):
            numba.set_num_threads(t)
            outs.append(cpu.execute(plan, x))
    finally:
        numba.set_num_threads(before)
    assert all(np.array_equal(o, outs[0]) for o in outs)
    assert np.array_equal(outs[0], _numpy_engine(plan, x))


def test_only_plain_folklore_is_compiled_and_the_api_uses_it():
    assert not compiled.supports(fwht_gpu.make_plan(64, np.float32, "folklore", "kahan"), None)
    assert not compiled.supports(fwht_gpu.make_plan(64, np.float32, "alman", None), None)
    assert not compiled.supports(fwht_gpu.make_plan(64, np.float32, "folklore", None),
                                 cpu.OpCounter())
    x = np.random.default_rng(2).standard_normal((4, 1024))
    H = np.array([[(-1) ** bin(i & j).count("1") for j in range(1024)] for i in range(1024)])
    assert np.allclose(fwht_gpu.fwht(x, device="cpu"), x @ H, rtol=1e-12, atol=1e-9)


def test_overwrite_x_transforms_in_place_with_the_same_bits_and_checks():
    F = fwht_gpu.FWHT(1 << 13, np.float32, device="cpu")
    x = np.random.default_rng(3).standard_normal((4, 1 << 13)).astype(np.float32)
    want = F(x)
    y = x.copy()
    got = F(y, overwrite_x=True)
    assert got is y and np.array_equal(got, want)
    z = x.copy()
    z[1, 5] = np.nan                                   # NaN input: NaN output, no error
    assert np.isnan(F(z, overwrite_x=True)[1]).any()
    big = np.full((2, 1 << 13), 3e38, np.float32)      # finite input that overflows
    with pytest.raises(fwht_gpu.TransformOverflowError):
        F(big, overwrite_x=True)
    assert np.array_equal(F(np.asfortranarray(x), overwrite_x=True), want)


def test_workers_as_in_scipy_fft():
    x = np.random.default_rng(4).standard_normal((6, 1 << 15)).astype(np.float32)
    want = fwht_gpu.fwht(x)
    before = numba.get_num_threads()
    for w in (1, 2, -1, None):
        got = fwht_gpu.fwht(x, workers=w)
        assert np.array_equal(got, want)
        assert np.array_equal(fwht_gpu.ifwht(got, workers=w), fwht_gpu.ifwht(want))
        assert np.array_equal(fwht_gpu.FWHT(1 << 15, np.float32)(x, workers=w), want)
    assert numba.get_num_threads() == before                 # restored after the call
    for bad in (0, 1.5, True, -1000):
        with pytest.raises(ValueError, match="workers"):
            fwht_gpu.fwht(x, workers=bad)


def _bits_equal(got, want):
    """Equal bits, NaN only where NaN (a NaN's payload is not specified)."""
    nan = np.isnan(want.astype(np.float64))
    return got.dtype == want.dtype and np.array_equal(np.isnan(got.astype(np.float64)), nan) and \
        np.array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8))


@pytest.mark.parametrize("route", ["rows", "passes"])
@pytest.mark.parametrize("dtype,compute", [(np.float64, None), (np.float32, None),
                                           (np.float16, None), (ml_dtypes.bfloat16, None),
                                           (np.float16, "float32"),
                                           (ml_dtypes.bfloat16, "float32"),
                                           (np.float32, "float64")])
def test_both_routes_give_the_numpy_engines_bits_and_overflowed_rows(monkeypatch, route,
                                                                     dtype, compute):
    """Rows through the cache one at a time (rows_direct / rows_work) and whole-array
    passes (blocked / wide): the NumPy engine's bits for rows shorter than a vector (scalar
    butterflies), one vector, cache blocks and stages above them; the rows flagged as
    overflowed are those with finite input and non-finite output."""
    monkeypatch.setattr(compiled, "ROW_BYTES", 1 << 40 if route == "rows" else 0)
    for log2n in (3, 4, 13, 15):
        n = 1 << log2n
        plan = fwht_gpu.make_plan(n, dtype, "folklore", None, compute_dtype=compute)
        rng = np.random.default_rng(log2n)
        x = (rng.standard_normal((5, n)) * np.exp2(rng.integers(-30, 10, (5, n)) -
                                                   log2n // 2)).astype(dtype)
        x[1] = (rng.standard_normal(n) * 2.0 ** -20).astype(dtype)     # FP16 subnormals
        top = 3e4 if dtype == np.float16 else 1e308 if dtype == np.float64 else 3e38
        x[2] = (rng.uniform(0.5, 1.0, n) * top).astype(dtype)           # overflows
        x[3, :4] = np.array([np.inf, -0.0, np.nan, 1.0], np.float32)
        got, bad = compiled.run(plan, x)
        want = _numpy_engine(plan, x)
        assert _bits_equal(got, want), (route, log2n)
        from fwht_gpu.overflow import overflowed_rows
        expect = overflowed_rows(x, want, np)
        assert expect is not None and np.array_equal(bad, expect)     # row 2, maybe 3


def test_integer_fp16_fallbacks_equal_numpy_and_the_hardware_path():
    """Where the hardware does not convert FP16 (``HARDWARE_HALF`` False) the kernels use
    integer operations (fmt / mode 3 reaches them anywhere): every FP16 pattern widened,
    every FP16 value narrowed back, and the SIMD butterflies rounded both ways."""
    from fwht_gpu import _cpu_kernels as k
    from fwht_gpu._cpu_simd import low_run, quad_run
    allh = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = allh.view(np.float16).astype(np.float32)
    for fmt in (1, 3):
        w = np.empty(allh.size, np.float32)
        k.widen(allh, w, fmt)
        assert _bits_equal(w, want)
        back = np.zeros_like(allh)
        k.narrow(w, back, fmt)
        nan = np.isnan(want)
        assert np.array_equal(back[~nan], allh[~nan])
        assert np.isnan(back[nan].view(np.float16)).all()

    @numba.njit
    def butterflies(x, mode):
        h = x.size // 4
        low_run(x, 0, x.size, 4, mode)
        quad_run(x, 0, h, h, mode)

    rng = np.random.default_rng(5)
    x = (rng.standard_normal(1 << 12) * np.exp2(rng.integers(-26, 14, 1 << 12))
         ).astype(np.float16).astype(np.float32)
    x[:3] = [np.inf, np.nan, -0.0]
    a, b = x.copy(), x.copy()
    butterflies(a, 1)
    butterflies(b, 3)
    assert _bits_equal(a, b)


def test_out_is_written_directly_with_the_same_bits():
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
        x = np.random.default_rng(6).standard_normal((8, 1 << 10)).astype(dt)
        want = fwht_gpu.fwht(x)
        out = np.empty_like(x)
        got = fwht_gpu.fwht(x, out=out)
        assert got is out and np.array_equal(out.view(np.uint8), want.view(np.uint8))
        y = x.copy()
        assert fwht_gpu.fwht(y, out=y) is y and np.array_equal(y.view(np.uint8),
                                                                 want.view(np.uint8))
    big = np.full((2, 1 << 10), 3e38, np.float32)
    with pytest.raises(fwht_gpu.TransformOverflowError):
        fwht_gpu.fwht(big, out=np.empty_like(big))
