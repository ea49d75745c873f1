"""The compiled Folklore stages (fwht_gpu.compiled) give the NumPy engine's bits: every
size, FP64 and FP32, batches, special values, any number of threads."""
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
    assert not compiled.supports(fwht_gpu.make_plan(64, np.float16, "folklore", None), None)
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
