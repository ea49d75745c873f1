"""fwht/ifwht as a user calls them: norms, axes, views, out=, bad input, overflow."""

import ml_dtypes
import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import dtypes as _dt
from tests.params import DTYPE_IDS, DTYPES, VARIANTS


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_inverse_roundtrip_each_norm(norm, dtype, rng):
    x = rng.standard_normal((4, 256)).astype(dtype)
    z = F.ifwht(F.fwht(x, norm=norm), norm=norm)
    tol = 20 * _dt.eps(dtype) * 8
    assert np.allclose(z.astype(np.float64), x.astype(np.float64), rtol=tol, atol=tol * 4)


def test_norm_scaling_values(rng):
    x = rng.standard_normal(64)
    y = F.fwht(x)
    assert np.allclose(F.fwht(x, norm="ortho"), y / 8, rtol=1e-15)
    assert np.allclose(F.fwht(x, norm="forward"), y / 64, rtol=1e-15)
    assert np.allclose(F.ifwht(x), y / 64, rtol=1e-15)
    assert np.allclose(F.ifwht(x, norm="forward"), y, rtol=1e-15)


def test_linearity(rng):
    x, z = rng.standard_normal((2, 3, 512))
    a, b = 1.5, -0.25
    assert np.allclose(F.fwht(a * x + b * z), a * F.fwht(x) + b * F.fwht(z), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_ortho_preserves_norm(dtype, tol, rng):
    x = rng.standard_normal((5, 4096)).astype(dtype)
    y = F.fwht(x, norm="ortho")
    assert np.allclose(np.linalg.norm(y.astype(np.float64), axis=1),
                       np.linalg.norm(x.astype(np.float64), axis=1), rtol=tol)


def _loop_reference(x, axis, **kw):
    xm = np.moveaxis(x, axis, -1)
    out = np.empty(xm.shape, x.dtype)
    for idx in np.ndindex(*xm.shape[:-1]):
        out[idx] = F.fwht(np.ascontiguousarray(xm[idx]), **kw)
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_batched_axes_equal_loop(axis, dtype, rng):
    x = rng.standard_normal((4, 8, 16)).astype(dtype)
    for alg, stab in VARIANTS:
        y = F.fwht(x, axis, algorithm=alg, stabilizer=stab)
        assert y.shape == x.shape and y.dtype == dtype
        assert (y == _loop_reference(x, axis, algorithm=alg, stabilizer=stab)).all()


def test_strided_views(rng):
    base = rng.standard_normal((16, 64)).astype(np.float32)
    for view, axis in [(base[:, ::2], -1), (base[::2, :], 0), (base.T, 1), (base[::-1, ::-2], -1),
                       (base.T[:, 3:11], 1)]:
        assert not view.flags.c_contiguous
        y = F.fwht(view, axis)
        assert (y == F.fwht(np.ascontiguousarray(view), axis)).all()
        assert (base == base).all()  # input untouched


def test_out_and_in_place(rng):
    x = rng.standard_normal((3, 128))
    want = F.fwht(x)
    out = np.full_like(x, np.nan)
    assert F.fwht(x, out=out) is out and (out == want).all()
    y = x.copy()
    F.fwht(y, out=y)
    assert (y == want).all()
    xt = rng.standard_normal((128, 3))
    o2 = np.empty_like(xt)
    F.fwht(xt, 0, out=o2)
    assert (o2 == F.fwht(np.ascontiguousarray(xt.T)).T).all()


def test_length_one_and_empty():
    x = np.array([[2.5], [-1.0]], dtype=np.float16)
    assert (F.fwht(x) == x).all() and F.fwht(x).dtype == np.float16
    e = np.zeros((0, 8), np.float32)
    y = F.fwht(e)
    assert y.shape == (0, 8) and y.dtype == np.float32
    assert F.fwht(np.zeros((3, 0, 4)), axis=-1).shape == (3, 0, 4)


def test_lists_are_accepted_as_float64():
    assert (F.fwht([1.0, 2.0, 3.0, 4.0]) == [10, -2, -4, 0]).all()


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"length 13 is not a power of two.*pad to 16"):
        F.fwht(np.ones(13))
    with pytest.raises(ValueError, match="pad to 8"):
        F.fwht(np.ones((5, 4)), axis=0)
    for bad in (np.ones(8, np.int64), np.ones(8, np.complex128), np.ones(8, bool),
                np.ones(8, ml_dtypes.float8_e4m3fn)):
        with pytest.raises(TypeError, match="unsupported dtype"):
            F.fwht(bad)
    x = np.ones(8)
    with pytest.raises(ValueError, match="norm="):
        F.fwht(x, norm="unitary")
    with pytest.raises(ValueError, match="algorithm="):
        F.fwht(x, algorithm="fast")
    with pytest.raises(ValueError, match="stabilizer="):
        F.fwht(x, stabilizer="pairwise")
    with pytest.raises(ValueError, match="only available with algorithm='folklore'"):
        F.fwht(x, algorithm="alman", stabilizer="kahan")
    with pytest.raises(ValueError, match="0-d"):
        F.fwht(np.float64(3.0))
    with pytest.raises(ValueError, match="out of bounds"):
        F.fwht(x, axis=1)
    with pytest.raises(TypeError, match="axis must be an int"):
        F.fwht(x, axis=0.5)
    with pytest.raises(ValueError, match="must match x"):
        F.fwht(x, out=np.empty(8, np.float32))
    ro = np.empty(8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        F.fwht(x, out=ro)
    with pytest.raises(ValueError, match="device="):
        F.fwht(x, device="tpu")


def test_overflow_is_reported_not_returned_as_inf():
    x = np.full(16, 30000, np.float16)
    with pytest.raises(F.TransformOverflowError, match="fp16 transform overflowed"):
        F.fwht(x)
    # Alman-Rao pre-scaling overflows where Folklore does not: element 511 is scaled by 2**3
    x = np.zeros(512, np.float16)
    x[511] = 10000
    assert np.isfinite(F.fwht(x)).all()
    with pytest.raises(F.TransformOverflowError):
        F.fwht(x, algorithm="alman")
    # non-finite input propagates as in numpy.fft (nothing to detect)
    x = np.ones(8)
    x[3] = np.inf
    assert not np.isfinite(F.fwht(x)).all()


def test_errstate_ignore_returns_the_engines_values_unchecked():
    """errstate(overflow="ignore"): no TransformOverflowError, no float64 recomputation: the
    values as the engine computed them (inf where they left the range), on every route of
    the NumPy engine (compiled kernels, the per-operation engine, in place, into out, K * 2**k);
    the default state is restored on exit, per thread."""
    import threading

    assert F.geterr() == {"overflow": "raise"}
    x = np.full(16, 30000, np.float16)
    with F.errstate(overflow="ignore"):
        assert F.geterr() == {"overflow": "ignore"}
        y = F.fwht(x)
        assert np.isinf(y[0]) and not np.isfinite(y[1:]).all()  # 16 * 30000 > 65504; inf - inf
        counted = F.run_plan(F.make_plan(16, np.float16), x, counter=F.transform.cpu.OpCounter())
        assert (counted.view(np.uint16) == y.view(np.uint16)).all()   # the per-operation engine
        out = np.empty_like(x)
        assert F.fwht(x, out=out) is out and (out.view(np.uint16) == y.view(np.uint16)).all()
        z = x.copy()
        t = F.FWHT(16, np.float16)
        assert (t(z, overwrite_x=True).view(np.uint16) == y.view(np.uint16)).all()
        # scaled: the default recomputes in float64 (finite), ignore keeps the overflowed value
        assert np.isinf(F.ifwht(x)[0])
        k = np.full(12 * 4, 3000, np.float16)                   # K * 2**k through the K stage
        assert np.isinf(F.fwht(k)).any()
        seen = []
        th = threading.Thread(target=lambda: seen.append(F.geterr()["overflow"]))
        th.start()
        th.join()
        assert seen == ["raise"]                                # another thread: the default
        with F.errstate(overflow="raise"):                      # nested
            with pytest.raises(F.TransformOverflowError):
                F.fwht(x)
        assert F.geterr()["overflow"] == "ignore"
    assert F.geterr() == {"overflow": "raise"}
    r = F.ifwht(x)                                              # recomputed: 16 * 30000 / 16
    assert r[0] == 30000 and (r[1:] == 0).all()
    with pytest.raises(F.TransformOverflowError):
        F.fwht(x)
    with pytest.raises(F.TransformOverflowError):
        F.fwht(np.full(12 * 4, 3000, np.float16))
    with pytest.raises(ValueError, match="overflow='warn'"):
        with F.errstate(overflow="warn"):
            pass
