"""The planner: inspectable plans, groupings, the layout decisions (runs in CI)."""

import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import dtypes as _dt
from tests.params import DTYPES


def test_plan_is_inspectable():
    p = F.make_plan(1 << 30, np.float32, device="cuda")
    assert [s.bit for s in p.stages] == list(range(30))
    assert len(p.passes) >= 2 and sum(q.nbits for q in p.passes) == 30
    assert p.passes[1].first_bit == p.passes[0].nbits
    assert "pass 1" in p.describe() and p.rounding == "every operation rounded to fp32"
    a = F.make_plan(1 << 11, np.float16, "alman", device="cuda")
    kinds = [s.kind for s in a.stages]
    assert kinds == ["radix2", "radix2", "prescale", "h8", "h8", "h8"]
    # H8 stages are never split between passes, and Alman-Rao takes no more passes than
    # Folklore (its strided passes cover 9 bits: three H8 stages)
    for dtype in DTYPES:
        for L in range(1, 31):
            plan = F.make_plan(1 << L, dtype, "alman", device="cuda")
            for p in plan.passes:
                assert sum(s.nbits for s in p.stages) == p.nbits
            assert len(plan.passes) <= len(F.make_plan(1 << L, dtype, device="cuda").passes), (dtype, L)




# --- the planner decides every layout choice (issue 13) ---------------------------------------

def test_split_of_a_lone_pass_is_a_planner_decision():
    one = F.make_plan(1 << 15, np.float32, device="cuda", batch=1, sms=132)
    assert one.split and [p.nbits for p in one.passes] == [8, 7] and "split" in one.describe()
    many = F.make_plan(1 << 15, np.float32, device="cuda", batch=132, sms=132)
    assert not many.split and len(many.passes) == 1
    assert not F.make_plan(1 << 14, np.float32, device="cuda", batch=1, sms=132).split   # < 128 KB
    assert not F.make_plan(1 << 15, np.float32, "alman", device="cuda", batch=1, sms=132).split
    assert not F.make_plan(1 << 15, np.float32, device="cuda").split    # no device: no split
    x = np.random.default_rng(0).standard_normal((2, 1 << 15)).astype(np.float32)
    assert (F.run_plan(one, x) == F.run_plan(many, x)).all()            # same bits


def test_interleaved_plans_for_non_last_axes():
    p = F.make_plan(1 << 12, np.float16, device="cuda", interleave=3)
    assert p.interleave == 3 and "layout" in p.describe()
    assert all(q.nbits <= 8 for q in p.passes) and [s.bit for s in p.stages] == list(range(12))
    assert F.make_plan(1 << 12, np.float16, "alman", device="cuda", interleave=3).interleave == 0
    assert F.make_plan(1 << 12, np.float16, device="cuda", compute_dtype="float32",
                       interleave=3).interleave == 0
    x = np.random.default_rng(1).standard_normal((3, 1 << 12, 8)).astype(np.float16)
    assert (F.run_plan(p, x, 1) == F.fwht(x, 1)).all()


def test_alman_prefix_bits_are_in_the_plan():
    for L in range(1, 20):
        p = F.make_plan(1 << L, np.float32, "alman")
        assert p.prefix_bits == L % 3
        assert f"{p.prefix_bits} radix-2 prefix bits" in p.describe()
    assert F.make_plan(1 << 10, np.float32).prefix_bits == 0


def test_tuning_is_passed_not_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("FWHT_SINGLE_PASS_BYTES", "65536")
    default = F.make_plan(1 << 15, np.float32, device="cuda")
    assert default.tuning == F.Tuning() and len(default.passes) == 1   # the environment is not read
    t = F.Tuning.from_env()
    assert t.single_pass_bytes == 65536 and t.changes() == {"single_pass_bytes": 65536}
    small = F.make_plan(1 << 15, np.float32, device="cuda", tuning=t)
    assert len(small.passes) == 2 and "tuning" in small.describe()
    x = np.random.default_rng(2).standard_normal(1 << 15).astype(np.float32)
    assert (F.run_plan(small, x) == F.run_plan(default, x)).all()        # plain: same bits
    with pytest.raises(ValueError, match="power of two"):
        F.Tuning(tile_bytes=3000)
    with pytest.raises(ValueError, match="async_passes"):
        F.Tuning(async_passes="sometimes")
    with pytest.raises(TypeError, match="Tuning"):
        F.make_plan(8, np.float32, tuning={"tile_bytes": 1})
    monkeypatch.setenv("FWHT_LOG_E", "x")
    with pytest.raises(ValueError, match="FWHT_LOG_E"):
        F.Tuning.from_env()


def test_transform_object_plans_once_and_matches_fwht(rng):
    t = F.FWHT(1 << 10, np.float32, algorithm="alman")
    assert t.plan is t.plan and t.plan.algorithm == "alman"
    x = rng.standard_normal((3, 1 << 10)).astype(np.float32)
    assert (t(x) == F.fwht(x, algorithm="alman")).all()
    assert (t(x, inverse=True, norm="ortho") == F.ifwht(x, algorithm="alman", norm="ortho")).all()
    assert (t(x.T.copy(), axis=0) == F.fwht(x.T.copy(), axis=0, algorithm="alman")).all()
    with pytest.raises(ValueError, match="planned for n=1024"):
        t(x[:, :512])
    with pytest.raises(ValueError, match="planned for n=1024"):
        t(x.astype(np.float64))
    with pytest.raises(ValueError, match="algorithm"):
        F.FWHT(8, np.float32, algorithm="fast")
    assert "Plan: n = 2**10" in t.describe() and t.precompile() == 0


def test_variant_registry_and_wide_rule():
    from fwht_gpu import variants
    assert list(F.VARIANTS)[0] == "folklore" and len(F.VARIANTS) == 8
    assert variants.wide_dtype(np.float16) == np.float32 == variants.wide_dtype(_dt.bfloat16)
    assert variants.wide_dtype(np.float32) == np.float64 and variants.wide_dtype(np.float64) is None
    assert not variants.variant("compute").applies_to(np.float64)
    assert variants.variant("alman-compute").kwargs(np.float16) == dict(
        algorithm="alman", stabilizer=None, compute_dtype=np.float32)
    with pytest.raises(ValueError, match="choose one of"):
        variants.variant("fastest")


def test_device_resolver(monkeypatch):
    from fwht_gpu import devices
    from fwht_gpu.cuda import device
    monkeypatch.setattr(devices, "available", lambda: False)
    assert devices.resolve("auto") == "cpu" and devices.resolve("cpu") == "cpu"
    with pytest.raises(RuntimeError, match="gpu"):
        devices.resolve("gpu")
    with pytest.raises(ValueError, match="choose one of"):
        devices.resolve("tpu")
    assert devices.for_array(None, False) == "cpu" and devices.for_array("gpu", False) == "cuda"
    with pytest.raises(ValueError, match="CuPy array"):
        devices.for_array("cpu", True)
    assert device.H100.sm_count == 132


def test_cluster_passes_are_a_planner_decision():
    """With clusters (sm_90+), plain Folklore transforms of three or more passes take two
    whose top bits span a thread-block cluster; no other variant, layout or tuning changes;
    the NumPy engine runs a clustered plan to the same bits (the same stages in order)."""
    t4, t3 = F.Tuning(cluster_log=4), F.Tuning(cluster_log=3)
    want = {np.float32: {23: ((14, 0), (9, 1)), 27: ((15, 1), (12, 4)), 30: ((18, 4), (12, 4))},
            np.float16: {24: ((15, 0), (9, 1)), 28: ((16, 1), (12, 4)), 30: ((18, 3), (12, 4))}}
    for dt, cases in want.items():
        for L, shape in cases.items():
            p = F.make_plan(1 << L, dt, device="cuda", tuning=t4, clusters=4)
            assert tuple((q.nbits, q.cluster_bits) for q in p.passes) == shape
            assert p.clustered and "over a cluster of 2**" in p.describe()
            assert sum(q.nbits for q in p.passes) == L and p.stages == F.make_plan(1 << L, dt).stages
    # clusters of 8 (the portable size): 2^30 FP32 as 17 (3) | 13 (3), rows of 2^10
    p = F.make_plan(1 << 30, np.float32, device="cuda", tuning=t4, clusters=3)
    assert tuple((q.nbits, q.cluster_bits) for q in p.passes) == ((17, 3), (13, 3))
    assert F.make_plan(1 << 30, np.float32, device="cuda", tuning=t3, clusters=4).passes == p.passes
    # on by default where the device runs clusters
    assert F.make_plan(1 << 30, np.float32, device="cuda", clusters=4).passes == \
        F.make_plan(1 << 30, np.float32, device="cuda", tuning=t4, clusters=4).passes
    # off: no device clusters, a tuning without them, short transforms, other variants
    for kw in (dict(tuning=t4), dict(), dict(tuning=F.Tuning(cluster_log=0), clusters=4)):
        assert not F.make_plan(1 << 30, np.float32, device="cuda", **kw).clustered
    assert not F.make_plan(1 << 22, np.float32, device="cuda", tuning=t4, clusters=4).clustered
    for kw in (dict(algorithm="alman"), dict(stabilizer="kahan-pass"), dict(stabilizer="neumaier"),
               dict(compute_dtype="float64"), dict(interleave=3)):
        assert not F.make_plan(1 << 26, np.float32, device="cuda", tuning=t4, clusters=4, **kw).clustered
    with pytest.raises(ValueError, match="clusters"):
        F.make_plan(1 << 26, np.float32, device="cuda", clusters=-1)
    with pytest.raises(ValueError, match="cluster_log"):
        F.Tuning(cluster_log=5)
    # the NumPy engine: the clustered plan's bits are the three-pass plan's
    rng = np.random.default_rng(0)
    for dt, L in ((np.float32, 23), (np.float16, 24)):
        x = rng.standard_normal(1 << L).astype(dt)
        two = F.make_plan(1 << L, dt, device="cuda", tuning=t4, clusters=4)
        three = F.make_plan(1 << L, dt, device="cuda", clusters=4, tuning=F.Tuning(cluster_log=0))
        assert len(two.passes) == 2 and len(three.passes) == 3
        assert np.array_equal(F.run_plan(two, x).view(np.uint16 if dt == np.float16 else np.uint32),
                              F.run_plan(three, x).view(np.uint16 if dt == np.float16 else np.uint32))
