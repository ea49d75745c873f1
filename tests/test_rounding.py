"""fwht_gpu.rounding: the compiled FP16 rounding has NumPy's round-trip bits (all 2**32
patterns were checked once by .dev/round_exhaustive.py; here every FP16 value, every tie and
its neighbours, and random patterns)."""
import numpy as np
import pytest

from fwht_gpu.rounding import round_to_fp16


def _numpy_round_trip(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).astype(np.float32)


def _assert_same(got, want):
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (np.signbit(got[nan]) == np.signbit(want[nan])).all()
    differ = got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan]
    assert not differ.any(), f"{np.count_nonzero(differ)} differ, e.g. {got[~nan][differ][:3]}"


def _hard_patterns():
    """Every FP16 value, every midpoint between neighbours (the ties), one float32 ulp either
    side of both, and the range ends (overflow threshold, 2**-25, infinities, NaNs)."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    f = h[np.isfinite(h)].astype(np.float32)
    f = np.unique(f)
    mids = ((f[:-1].astype(np.float64) + f[1:]) / 2).astype(np.float32)   # exact in float32
    pts = np.concatenate([f, mids, np.float32([65504, 65519.996, 65520, 65536, 2.0**-25,
                                               2.0**-24 * 1.5, 2.0**-14, 3.0e38, np.inf])])
    pts = np.concatenate([pts, -pts])
    up = np.nextafter(pts, np.float32(np.inf))
    down = np.nextafter(pts, np.float32(-np.inf))
    nans = np.uint32([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0x7F801FFF]).view(np.float32)
    return np.concatenate([pts, up, down, nans]).astype(np.float32)


def test_every_fp16_value_tie_and_neighbour():
    x = _hard_patterns()
    _assert_same(round_to_fp16(x), _numpy_round_trip(x))


def test_random_bit_patterns():
    u = np.random.default_rng(0).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    x = u.view(np.float32)
    _assert_same(round_to_fp16(x), _numpy_round_trip(x))


def test_ties_go_to_even():
    # 1 + 2**-11 lies halfway between 1 and 1 + 2**-10: to 1 (even); 1 + 3 * 2**-11 up
    x = np.float32([1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.0**-25, 3 * 2.0**-25])
    assert round_to_fp16(x).tolist() == [1.0, 1 + 2.0**-9, 0.0, 2.0**-23]


@pytest.mark.parametrize("order", ["C", "F"])
def test_in_place_and_copies(order):
    rng = np.random.default_rng(1)
    x = np.asarray(rng.standard_normal((64, 48)), dtype=np.float32, order=order)
    want, before = _numpy_round_trip(x), x.copy()
    view = x[:, ::2]                                  # not contiguous: a new array
    got = round_to_fp16(view, in_place=True)
    assert got is not view and (got == want[:, ::2]).all() and (x == before).all()
    assert round_to_fp16(x, in_place=True) is x and (x == want).all()
    assert round_to_fp16(np.float32([])).shape == (0,)
