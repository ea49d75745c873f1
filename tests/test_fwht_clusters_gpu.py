"""Cluster passes on the GPU (sm_90+; kernels/cluster_pass.cuh): two passes where plain
Folklore takes three, with the bits of the NumPy engine and of the three-pass GPU route.
Run on a GPU machine with ``PYTHONPATH=. python3 -m pytest -q tests -m gpu``."""
import dataclasses

import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import gpu
from fwht_gpu.cuda import engine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available() or gpu.limits().max_cluster_log == 0,
                       reason=f"no GPU with thread-block clusters: {gpu.status()}"),
]

#: (dtype, log2 n): a second pass of one cluster bit, a first pass over clusters, 16-bit pairs
CASES = [(np.float32, 23), (np.float32, 27), (np.float16, 24), (np.float16, 28),
         (F.bfloat16, 24), (np.float64, 22), (np.float64, 26)]


def _tuning(log_cl: int | None = None) -> F.Tuning:
    return F.Tuning(cluster_log=gpu.limits().max_cluster_log if log_cl is None else log_cl)


def _bits(a):
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    return a.view({8: np.uint64, 4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


def _data(rng, shape, dtype):
    """Normal samples / 16: |H x| ~ 6 sqrt(n) / 16 stays finite in FP16 up to 2^30."""
    return (rng.standard_normal(shape, dtype=np.float32) / 16).astype(dtype)


def _reference(x, log2n: int, norm: str = "backward"):
    """The NumPy engine's bits up to 2^24 (two transforms); beyond, the three-pass GPU route's
    (bit-exact against the NumPy engine in tests/test_gpu.py; the NumPy engine would take
    minutes per call)."""
    if log2n <= 24:
        return F.run_plan(F.make_plan(1 << log2n, x.dtype), x.get(),
                          factor=F.transform.norm_factor(1 << log2n, norm, False))
    return F.FWHT(1 << log2n, x.dtype, device="cuda", tuning=_tuning(0))(x, norm=norm)


@pytest.mark.parametrize("dtype,log2n", CASES,
                         ids=[f"{np.dtype(d).name}-{L}" for d, L in CASES])
def test_two_cluster_passes_bit_exact(dtype, log2n, rng):
    cp = gpu.cupy()
    T = F.FWHT(1 << log2n, dtype, device="cuda", tuning=_tuning())
    plan = T.plan_for(1)
    assert plan.clustered and len(plan.passes) == 2, plan.describe()
    x = cp.asarray(_data(rng, (2, 1 << log2n) if log2n <= 24 else 1 << log2n, dtype))
    want = _bits(_reference(x, log2n))
    got = _bits(T(x))
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} differ"
    want = _bits(_reference(x, log2n, "ortho"))
    d = x.copy()                                                # in place, scaled in the last pass
    assert T(d, out=d, norm="ortho") is d
    assert np.array_equal(_bits(d), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_cluster_passes_at_2_30_equal_three_passes(dtype, rng):
    """2^30 in two passes (clusters of 16, and of 8) gives the three-pass route's bits; the
    kernels carry their cluster size."""
    cp = gpu.cupy()
    x = (cp.random.default_rng(1).standard_normal(1 << 30, dtype=cp.float32) / 16).astype(dtype)
    three = F.FWHT(1 << 30, dtype, device="cuda", tuning=_tuning(0))
    assert len(three.plan_for(1).passes) == 3
    want = _bits(three(x))
    for log_cl in sorted({3, gpu.limits().max_cluster_log}):
        T = F.FWHT(1 << 30, dtype, device="cuda", tuning=_tuning(log_cl))
        plan = T.plan_for(1)
        assert len(plan.passes) == 2 and max(p.cluster_bits for p in plan.passes) == log_cl
        assert np.array_equal(_bits(T(x)), want)
        for step, fn in engine.launches(plan, 1 << 30, cp.cuda.runtime.getDevice())[0]:
            width = cp.cuda.driver.funcGetAttribute(11, fn.kernel.ptr)   # REQUIRED_CLUSTER_WIDTH
            assert width == 1 << getattr(step.cfg, "log_cl", 0) or not step.cfg.name.startswith(
                "fwht_cluster_pass") and width == 0


@pytest.mark.parametrize("stabilizer", [None, "kahan"], ids=["plain", "kahan"])
def test_overflow_is_judged_per_transform_in_cluster_passes(stabilizer):
    """An FP16 overflow in one transform is reported; a non-finite input in another is not an
    overflow (the flags and per-transform marks of a cluster pass, plain or stabilized: at 2^28
    both passes are)."""
    cp = gpu.cupy()
    on = dataclasses.replace(_tuning(), cluster_stabilized=True, cluster_neumaier_itemsize=0)
    T = F.FWHT(1 << 28, np.float16, stabilizer=stabilizer, device="cuda", tuning=on)
    assert all(p.cluster_bits for p in T.plan_for(2).passes)
    x = cp.zeros((2, 1 << 28), dtype=cp.float16)
    x[1, 12345] = np.inf
    y = T(x)
    assert np.isfinite(y[0].get()).all() and not np.isfinite(y[1].get()).all()   # no error
    x[0] = 30000
    with pytest.raises(F.TransformOverflowError):
        T(x)


#: (stabilizer, dtype, log2 n) of the stabilized cluster passes (kernels/stabilized_cluster_pass.cuh)
#: (clusters of 2 to 8: strided blocks of 2^9 rows, the portable cluster size)
STABILIZED = [("kahan", np.float32, 23, None), ("neumaier", np.float32, 27, None),
              ("kahan", np.float16, 24, None), ("neumaier", F.bfloat16, 24, None),
              ("kahan", np.float64, 22, None), ("neumaier", np.float64, 26, None),
              ("kahan", np.float32, 24, 1), ("neumaier", np.float64, 25, 2),
              ("kahan", np.float16, 27, 3)]


@pytest.mark.parametrize("stabilizer,dtype,log2n,log_cl", STABILIZED,
                         ids=[f"{s}-{np.dtype(d).name}-{L}-{c}" for s, d, L, c in STABILIZED])
def test_stabilized_cluster_passes_bit_exact(stabilizer, dtype, log2n, log_cl, rng):
    """The global stabilizers in two cluster passes (values and errors across the cluster)
    give the NumPy engine's bits up to 2^24 and the stabilized passes' without clusters beyond;
    in place, scaled in the last pass, an error vector between the passes."""
    cp = gpu.cupy()
    on = dataclasses.replace(_tuning(log_cl), cluster_stabilized=True, cluster_neumaier_itemsize=0)
    T = F.FWHT(1 << log2n, dtype, stabilizer=stabilizer, device="cuda", tuning=on)
    plan = T.plan_for(1)
    assert plan.clustered and len(plan.passes) == 2, plan.describe()
    x = cp.asarray(_data(rng, (2, 1 << log2n) if log2n <= 24 else 1 << log2n, dtype))
    for norm in ("backward", "ortho"):
        if log2n <= 24:
            want = F.run_plan(F.make_plan(1 << log2n, dtype, stabilizer=stabilizer), x.get(),
                              factor=F.transform.norm_factor(1 << log2n, norm, False))
        else:
            want = F.FWHT(1 << log2n, dtype, stabilizer=stabilizer, device="cuda",
                          tuning=_tuning(0))(x, norm=norm)
        d = x.copy()
        assert T(d, out=d, norm=norm) is d
        assert np.array_equal(_bits(d), _bits(want)), f"{norm}: {np.count_nonzero(_bits(d) != _bits(want))} differ"
