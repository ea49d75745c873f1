"""Lengths n = K * 2**k on the GPU (issue 19, item 2): bit-exact against the NumPy engine
(:func:`fwht_gpu.hadamard.transform`, the specification), every shipped K, every dtype and
compute dtype, forward and inverse, every norm, batched along any axis, NaN/Inf and FP16
overflow.  The GPU tests run on a GPU machine (``python -m pytest -q
tests/test_fwht_lengths_gpu.py -m gpu``); the launcher's choices and the kernels' sign table
are checked everywhere."""
import dataclasses
import os
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import dtypes as _dt
from fwht_gpu import gpu, hadamard, make_plan
from fwht_gpu.cuda import config

KS = sorted(hadamard.ORDERS)
DTYPES = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), _dt.bfloat16]
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]
KERNELS = os.path.join(os.path.dirname(config.__file__), "kernels")


# --- everywhere: the sign table and the launcher's choices ------------------------------------

def test_the_kernels_sign_table_is_the_shipped_matrices():
    with open(os.path.join(KERNELS, hadamard.CUDA_SIGN_HEADER)) as f:
        assert f.read() == hadamard.cuda_sign_header()
    for K in KS:
        H = hadamard.matrix(K)
        masks = hadamard.sign_masks(K)
        for i in range(K):
            assert [(masks[i] >> c) & 1 for c in range(K)] == list((H[i] < 0).astype(int))
        assert masks[0] == 0 and all(m & 1 == 0 for m in masks)   # normalized: +e of group 0 first


def _max_fused_log2(dtype, K, compute=None, limits=gpu.H100):
    """The largest k whose rows of K * 2**k take the one-pass kernel (None: none)."""
    best = None
    for L in range(0, 20):
        plan = make_plan(1 << L, dtype, compute_dtype=compute, device="cuda")
        if config.k_launch(plan, K, 1, False, limits).fused:
            best = L
    return best


def test_the_launcher_fuses_rows_that_fit_in_shared_memory():
    names = {c.name for c in config.all_k_configs()}
    for dt in DTYPES:
        for K in KS:
            for L in range(0, 16):
                plan = make_plan(1 << L, dt, device="cuda")
                for rows in (1, 3, 4096):
                    for inverse in (False, True):
                        launch = config.k_launch(plan, K, rows, inverse, gpu.H100)
                        assert launch.stage_cfg.name in names       # compiled by the CI check
                        if launch.fused:
                            cfg = launch.rows_cfg
                            assert cfg.name in names
                            assert launch.smem <= gpu.H100.smem_per_block
                            assert launch.ntiles << launch.log_rows == rows
                            assert 32 <= launch.threads <= cfg.max_threads
                        else:
                            assert (dt.itemsize == 2 and L == 0) or \
                                (K * dt.itemsize << L) * 33 // 32 > gpu.H100.smem_per_block
    # the sizes: rows of up to 40 * 2**10 in one pass (FP32, FP16, BF16)
    for dt in DTYPES[1:]:
        for K, M in ((12, 256), (12, 1024), (20, 1024), (28, 1024), (20, 2048), (44, 1024)):
            assert config.k_launch(make_plan(M, dt, device="cuda"), K, 4096, False, gpu.H100).fused
    assert _max_fused_log2(np.float32, 12) == 13 and _max_fused_log2(np.float64, 44) == 9
    # the symmetric (Paley II) orders share one kernel for both directions
    assert not config.k_transpose(28, True) and config.k_transpose(12, True)
    # variants other than plain Folklore: the power-of-two passes, then the K-point stage
    for kw in (dict(algorithm="alman"), dict(stabilizer="kahan"), dict(stabilizer="neumaier-pass")):
        assert not config.k_launch(make_plan(256, np.float32, device="cuda", **kw), 12, 8,
                                   False, gpu.H100).fused
    # a wider compute type in one pass: fused (rounded to the dtype once, after the stages)
    assert config.k_launch(make_plan(1024, np.float16, compute_dtype="float32", device="cuda"),
                           20, 8, False, gpu.H100).fused


def test_short_rows_share_tiles_of_the_tuned_size():
    """Tiles of several short rows: up to ``Tuning.k_tile_bytes`` for 4-byte compute units
    (16 KiB: FP32, FP16/BF16 pairs), ``min_tile_bytes`` for 8-byte ones (32 KiB: FP64, or a
    wider compute type), and never more rows than divide the batch."""
    from fwht_gpu.tuning import Tuning

    def log_rows(dt, K, M, rows=4096, compute=None, **tuning):
        plan = make_plan(M, dt, device="cuda", compute_dtype=compute, tuning=Tuning(**tuning))
        return config.k_launch(plan, K, rows, False, gpu.H100).log_rows

    assert log_rows(np.float32, 12, 256) == 0                    # a 12 KiB row per tile
    assert log_rows(np.float16, 12, 256) == 1 and log_rows(_dt.bfloat16, 12, 1024) == 0
    assert log_rows(np.float32, 12, 64) == 2                     # 3 KiB rows in 16 KiB
    assert log_rows(np.float64, 12, 256) == 0                    # a 24 KiB row per tile
    assert log_rows(np.float64, 12, 64) == 2                     # 6 KiB rows in 32 KiB
    assert log_rows(np.float32, 12, 256, compute="float64") == 1  # 8-byte units: 32 KiB
    assert log_rows(np.float16, 12, 256, compute="float32") == 2
    assert log_rows(np.float32, 12, 256, k_tile_bytes=1 << 15) == 1
    assert log_rows(np.float64, 12, 64, min_tile_bytes=1 << 16) == 3
    assert log_rows(np.float32, 12, 256, rows=6, k_tile_bytes=1 << 16) == 1
    assert log_rows(np.float32, 12, 256, rows=5, k_tile_bytes=1 << 16) == 0


def test_small_tiles_take_fewer_threads():
    """One-block tiles of 4-byte units take the fewest threads (a power of two, at least a
    warp) that keep as many threads resident per SM (registers of the launch bound, shared
    memory): more, smaller blocks (session 41); FP64 and tiles whose blocks would then fill
    the SM less keep the previous choice."""
    def launch(dt, K, M, rows=4096, **tuning):
        from fwht_gpu.tuning import Tuning
        plan = make_plan(M, dt, device="cuda", tuning=Tuning(**tuning))
        got = config.k_launch(plan, K, rows, False, gpu.H100)
        return got.threads, got.log_rows

    assert launch(np.float16, 12, 256) == (64, 1)        # 12 KiB tiles, 16 per SM
    assert launch(np.float32, 12, 256) == (64, 0)
    assert launch(_dt.bfloat16, 12, 1024) == (128, 0)    # 24 KiB, 8 per SM
    assert launch(np.float16, 20, 1024) == (256, 0)      # 41 KiB, five fit, four resident
    assert launch(np.float32, 12, 1024) == (256, 0)      # 48 KiB, four per SM
    assert launch(np.float32, 20, 1024) == (512, 0)      # 82 KiB, two per SM
    assert launch(np.float64, 12, 256) == (256, 0)       # FP64: the direct copies' 256
    assert launch(np.float16, 12, 256, k_tile_bytes=1 << 16) == (256, 3)   # four 48 KiB tiles
    assert launch(np.float32, 36, 16) == (32, 2)         # a warp: a bound of 128 registers
    assert launch(np.float32, 36, 64) == (32, 0)
    # the blocks an SM holds bound them too: at most 8, 12 KiB FP16 tiles take 128 threads
    plan = make_plan(256, np.float16, device="cuda")
    assert config.k_launch(plan, 12, 4096, False, gpu.H100).threads == 64
    few = dataclasses.replace(gpu.H100, max_blocks_per_sm=8)
    assert config.k_launch(plan, 12, 4096, False, few).threads == 128
    for dt, K, M in ((np.float32, 12, 64), (np.float16, 12, 256), (np.float32, 12, 256)):
        threads, _ = launch(dt, K, M)
        assert threads >= 32 and threads & (threads - 1) == 0


def test_the_launcher_spreads_lone_rows_over_two_blocks(monkeypatch):
    """fwht_k_rows_pair where a row's one-block tile would sit alone on its SM (or not fit)
    and the halves keep 16 warps per SM: the issue's sizes measured faster (session 28); FP64
    28 * 2**10 over four blocks (two measured slower than the passes, four faster), 28 * 2**9
    not (one tile faster), 20 * 2**11 over four (session 35); three 256-thread blocks per SM
    compiled for that (b = 3; FP64 quarters of 28 * 2**10 too, session 36); never without
    clusters, never a kernel the CI check does not compile."""

    def launch(dt, K, M, limits=gpu.H100):
        return config.k_launch(make_plan(M, dt, device="cuda"), K, 4096, False, limits)

    for dt, K, M, threads, q, b in ((np.float32, 28, 1024, 256, 2, 3), (np.float32, 20, 2048, 512, 2, 1),
                                    (np.float64, 20, 1024, 256, 2, 1), (np.float64, 20, 2048, 256, 4, 2),
                                    (np.float64, 28, 1024, 256, 4, 3), (np.float16, 28, 2048, 256, 2, 3)):
        got = launch(dt, K, M)
        assert got.pair and got.fused and got.threads == threads and got.log_rows == 0
        assert got.ntiles == 4096 and got.rows_cfg.name.startswith("fwht_k_rows_pair<")
        direct = str(dt == np.float64).lower()
        assert got.rows_cfg.q == q and got.rows_cfg.name.endswith(f",{q},{b},{direct}>")
        assert got.threads <= got.rows_cfg.max_threads
        units = K * M // (2 if got.rows_cfg.paired else 1)             # 16-bit data: pairs
        assert got.smem == got.rows_cfg.smem_bytes(units // q) <= gpu.H100.smem_per_block
        assert got.rows_cfg.name in {c.name for c in config.all_k_configs()}
        # the registers of the launch bound: for every resident half; quarters 16 warps
        regs = got.rows_cfg.bound_registers(gpu.H100)
        tiles = gpu.H100.smem_per_sm // (got.smem + config.BLOCK_RESERVED_SMEM)
        if q == 2 or b == 3:
            assert got.threads * regs * min(tiles, b if q == 4 else tiles) <= gpu.H100.regs_per_sm
        assert min(tiles, gpu.H100.regs_per_sm // (got.threads * regs)) * got.threads >= 512
        assert not launch(dt, K, M, dataclasses.replace(gpu.H100, max_cluster_log=0)).pair
    assert not launch(np.float64, 28, 1024, dataclasses.replace(gpu.H100, max_cluster_log=1)).pair
    assert launch(np.float64, 20, 2048, dataclasses.replace(gpu.H100, max_cluster_log=1)).rows_cfg.q == 2
    for dt, K, M in ((np.float32, 12, 1024), (np.float32, 20, 1024), (np.float64, 12, 1024),
                     (np.float16, 28, 1024), (np.float16, 20, 2048), (np.float64, 36, 1024),
                     (np.float64, 28, 512)):
        assert not launch(dt, K, M).pair
    assert not launch(np.float64, 28, 2048).fused          # two passes and the K stage
    names = {c.name for c in config.all_k_configs()}
    for dt in DTYPES:
        for K in KS:
            for L in range(1, 16):
                got = launch(dt, K, 1 << L)
                assert not got.pair or got.rows_cfg.name in names
    monkeypatch.setattr(config, "K_PAIR_ROWS", False)
    assert not launch(np.float32, 28, 1024).pair and launch(np.float32, 28, 1024).fused
    assert _max_fused_log2(np.float32, 12) == 12


def test_the_launch_bound_follows_the_blocks_each_sm_holds():
    """``b`` (the blocks per SM a K kernel is compiled for): 3 where three 256-thread tiles of
    4-byte units share an SM, 2 where 8-byte units of K >= 28 (a bound of 256 threads) have
    two or more tiles per SM, else 1; every launch within its bound's threads and registers."""
    def launch(dt, K, M, compute=None):
        return config.k_launch(make_plan(M, dt, compute_dtype=compute, device="cuda"), K, 4096, False,
                               gpu.H100)

    # BF16 28 * 2**9: one 28 KiB row per tile since session 41's 16 KiB tiles (seven fit an
    # SM, four 256-thread blocks resident at 64 registers), so the bound of one block
    for dt, K, M, b in ((np.float16, 28, 1024, 3), (_dt.bfloat16, 28, 512, 1), (np.float32, 28, 512, 3),
                        (np.float32, 28, 1024, 3), (np.float32, 36, 512, 3), (np.float32, 12, 1024, 1),
                        (np.float16, 20, 2048, 1), (np.float64, 28, 256, 2), (np.float64, 36, 256, 2),
                        (np.float64, 28, 512, 1), (np.float64, 12, 1024, 1), (np.float64, 20, 1024, 1)):
        assert launch(dt, K, M).rows_cfg.b == b, (dt, K, M)
    assert launch(np.float32, 28, 256, "float64").rows_cfg.b == 2          # 8-byte compute units
    names = {c.name for c in config.all_k_configs()}
    for dt in DTYPES:
        for K in KS:
            for L in range(0, 14):
                got = launch(dt, K, 1 << L)
                if not got.fused:
                    continue
                cfg = got.rows_cfg
                assert cfg.name in names and got.threads <= cfg.max_threads
                tiles = gpu.H100.smem_per_sm // (got.smem + config.BLOCK_RESERVED_SMEM)
                if cfg.b > 1:
                    assert got.threads == 256 and tiles >= cfg.b
                    assert cfg.b * 256 * cfg.bound_registers(gpu.H100) <= gpu.H100.regs_per_sm


def test_direct_loads_for_plain_fp64_in_blocks_of_at_most_256_threads():
    """Round 0 copies by cp.async straight to shared memory (``direct``) for plain FP64 launches
    of up to 256 threads (measured faster, session 36), through registers at 512 or more and
    for every other dtype and compute type; every such kernel compiled by CI."""
    import dataclasses

    def launch(dt, K, M, compute=None, limits=gpu.H100, rows=4096):
        return config.k_launch(make_plan(M, dt, compute_dtype=compute, device="cuda"), K, rows, False,
                               limits)

    for K, M, direct in ((12, 256, True), (12, 1024, False), (20, 512, False), (20, 1024, True),
                         (20, 2048, True), (28, 1024, True), (36, 256, True), (12, 2048, False)):
        got = launch(np.float64, K, M)
        assert got.rows_cfg.direct == direct == (got.threads <= 256), (K, M)
    names = {c.name for c in config.all_k_configs()}
    devices = [gpu.H100] + [dataclasses.replace(gpu.H100, max_cluster_log=c) for c in (0, 1)]
    for dt in DTYPES:
        for compute in (None, _wide(dt)):
            for K in KS:
                for L in range(0, 14):
                    for limits in devices:
                        for rows in (1, 4096):
                            got = launch(dt, K, 1 << L, compute, limits, rows)
                            if got.fused:
                                plain = dt == np.float64 and compute is None
                                assert got.rows_cfg.direct == (plain and got.threads <= 256)
                                assert got.rows_cfg.name in names


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on the PATH")
def test_shared_memory_and_threads_formulas_equal_the_kernels(tmp_path):
    """nvcc evaluates, for every fwht_k_rows and fwht_k_rows_pair instantiation, the padded
    tile and the launch bound the kernel is compiled with against the Python side (a launch
    with more threads than the bound would fail)."""
    from fwht_gpu.cuda import engine
    lines = [f'#include "{engine.K_SOURCE}"']
    for c in config.all_k_configs():
        if type(c) is config.KStageConfig:
            continue
        traits = (f"KRowsTraits<{c.ctype}, {c.wtype}, {c.K}, {str(c.transpose).lower()}, "
                  f"{str(c.paired).lower()}, {c.b}, {str(c.direct).lower()}>")
        unit = f"typename {traits}::U"
        lines.append(f"static_assert({traits}::MAX_THREADS == {c.max_threads}, "
                     f'"{c.name} threads");')
        for units in (c.K, c.K << 5, c.K << 11):
            lines.append(f"static_assert(padded_size<{unit}>({units}) * sizeof({unit}) == "
                         f'{c.smem_bytes(units)}, "{c.name} {units}");')
    src = tmp_path / "k.cu"
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_80", "--ptx", "-o", str(tmp_path / "k.ptx"),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# --- on the GPU ----------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}")


def _sizes(dtype, K, compute=None):
    """k = 0, 1, 5, 8, 9, 10 (fwht_k_rows' round schedules: 16-bit pairs take rounds of 4 bits
    from 2**9 pairs on), the largest in one block's shared memory, the largest over two blocks
    (sm_90) and one beyond."""
    top = _max_fused_log2(dtype, K, compute, gpu.limits())
    if top is None:
        return sorted({0, 1, 5, 11})
    pair = config.K_PAIR_ROWS
    try:
        config.K_PAIR_ROWS = False
        one = _max_fused_log2(dtype, K, compute, gpu.limits())
    finally:
        config.K_PAIR_ROWS = pair
    return sorted({0, 1, 5, top, top + 1} | {one} - {None} | {L for L in (8, 9, 10) if L < top})


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)


def _same(got, want):
    """Identical bits, NaN where NaN (the GPU's NaN payloads are not the CPU's)."""
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    gn = np.isnan(got.astype(np.float64))
    wn = np.isnan(want.astype(np.float64))
    assert np.array_equal(gn, wn), f"{np.count_nonzero(gn != wn)} NaN positions differ"
    u = {8: np.uint64, 4: np.uint32, 2: np.uint16}[got.dtype.itemsize]
    diff = (got.view(u) != want.view(u)) & ~gn
    assert not diff.any(), f"{np.count_nonzero(diff)} of {got.size} values differ"


@pytest.fixture(scope="module")
def _compiled():
    """Compile every kernel this module launches, in parallel, before the first test."""
    from fwht_gpu.cuda import engine
    items = []
    for dt in DTYPES:
        for compute in (None, _wide(dt)):
            for K in KS:
                for L in _sizes(dt, K, compute):
                    plan = make_plan(1 << L, dt, compute_dtype=compute, device="cuda")
                    for rows in (1, 3, 6, 10):
                        for inverse in (False, True):
                            items.append((plan, K, rows, inverse))
    engine.precompile_k(items, workers=len(os.sched_getaffinity(0)))


def _wide(dt):
    from fwht_gpu import variants
    return variants.wide_dtype(dt)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_rows_are_bit_exact(dtype, rng):
    cp = gpu.cupy()
    for K in KS:
        for L in _sizes(dtype, K):
            n = K << L
            x = _rand(rng, (3, n), dtype)
            g = cp.asarray(x)
            for fn, norm in ((F.fwht, "backward"), (F.ifwht, "backward"), (F.fwht, "ortho"),
                             (F.ifwht, "forward")):
                out = cp.full(x.shape, np.nan, dtype=dtype)          # poisoned
                res = fn(g, norm=norm, out=out)
                assert res is out
                _same(out.get(), fn(x, norm=norm))
            assert np.array_equal(g.get().view(np.uint8), x.view(np.uint8))    # x untouched



@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_many_rows_share_tiles_and_every_round_schedule(dtype, rng):
    """Many rows (tiles of several rows where they are short) at the round schedules of
    fwht_k_rows: 2**8 .. 2**10 blocks, each K."""
    cp = gpu.cupy()
    for K in KS:
        for L in (8, 9, 10):
            x = _rand(rng, (64, K << L), dtype)
            for fn in (F.fwht, F.ifwht):
                _same(fn(cp.asarray(x)).get(), fn(x))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_the_rows_kernel_loops_over_more_tiles_than_blocks(dtype, rng):
    """fwht_k_rows' loop over tiles (the launcher gives each tile its own block): 7 tiles on 3
    blocks, in place, a NaN in the last tile; FP64 28 * 2**8 takes the direct copies (b = 2),
    the others the register loads."""
    from fwht_gpu.cuda import engine
    cp = gpu.cupy()
    K, L = 28, 8
    plan = make_plan(1 << L, dtype, device="cuda")
    launch = config.k_launch(plan, K, 7, False, gpu.limits())
    cfg = launch.rows_cfg
    assert launch.fused and not launch.pair and launch.ntiles == 7
    assert cfg.direct == (dtype == np.float64)
    x = _rand(rng, (7, K << L), dtype)
    x[6, 5] = np.nan
    g = cp.asarray(x)
    flags = cp.zeros(1, dtype=cp.uint32)
    args = cfg.arguments(src=g, dst=g, ntiles=7, log_mu=launch.log_mu, log_rows=launch.log_rows, scale=1.0,
                         flags=flags)
    engine.K_KERNELS.function(cfg.name, launch.smem)((3,), (launch.threads,), args, shared_mem=launch.smem)
    _same(g.get(), F.fwht(x))
    assert int(flags.get()[0]) == 2                     # the NaN's outputs flagged


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_rows_over_two_blocks_are_bit_exact(dtype, rng):
    """fwht_k_rows_pair (sm_90) at the sizes the launcher gives it: both directions, every
    norm, in place, NaN and Inf, a grid-stride over more rows than clusters."""
    if gpu.limits().max_cluster_log < 1:
        pytest.skip("no thread-block clusters on this device")
    cp = gpu.cupy()
    took = 0
    for K in KS:
        for L in range(9, 14):
            plan = make_plan(1 << L, dtype, device="cuda")
            if not config.k_launch(plan, K, 5, False, gpu.limits()).pair:
                continue
            took += 1
            x = _rand(rng, (5, K << L), dtype)
            x[1, 3], x[2, -1], x[3, 0] = np.nan, np.inf, -np.inf
            g = cp.asarray(x)
            for fn, norm in ((F.fwht, "backward"), (F.ifwht, "backward"), (F.fwht, "ortho")):
                want = fn(x, norm=norm)
                _same(fn(g, norm=norm).get(), want)
                y = g.copy()
                assert fn(y, norm=norm, out=y) is y
                _same(y.get(), want)
    assert took >= 3
    from fwht_gpu.cuda import engine
    cases = {4: [(28, 10)], 8: [(20, 11), (28, 10)], 2: [(28, 11)]}[dtype.itemsize]
    for K, L in cases:                  # FP64 20 * 2**11 and 28 * 2**10: four blocks per row
        plan = make_plan(1 << L, dtype, device="cuda")
        assert config.k_launch(plan, K, 2000, False, gpu.limits()).pair
        x = _rand(rng, (2000, K << L), dtype)         # more rows than resident clusters
        _same(F.fwht(cp.asarray(x)).get(), F.fwht(x))
        # several rows per cluster (the kernel's loop over rows; the launcher gives each row
        # its own cluster): 7 rows on 3 clusters, in place, a NaN in the last row
        x = _rand(rng, (7, K << L), dtype)
        x[6, 5] = np.nan
        launch = config.k_launch(plan, K, 7, False, gpu.limits())
        cfg = launch.rows_cfg
        g = cp.asarray(x)
        flags = cp.zeros(1, dtype=cp.uint32)
        args = cfg.arguments(src=g, dst=g, nrows=7, log_mu=launch.log_mu, scale=1.0, flags=flags)
        engine.K_KERNELS.function(cfg.name, launch.smem, cfg.q)((3 * cfg.q,), (launch.threads,), args,
                                                                shared_mem=launch.smem)
        _same(g.get(), F.fwht(x))
        assert int(flags.get()[0]) == 2                 # the NaN's outputs flagged


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype,compute", [(np.float16, "float32"), (ml_dtypes.bfloat16, "float32"),
                                           (np.float32, "float64")],
                         ids=["fp16-fp32", "bf16-fp32", "fp32-fp64"])
@pytest.mark.usefixtures("_compiled")
def test_wider_compute_dtypes(dtype, compute, rng):
    cp = gpu.cupy()
    for K in (12, 20, 44):
        for L in _sizes(np.dtype(dtype), K, np.dtype(compute)):
            x = _rand(rng, (3, K << L), dtype, 4.0)
            for fn in (F.fwht, F.ifwht):
                _same(fn(cp.asarray(x), compute_dtype=compute).get(), fn(x, compute_dtype=compute))



@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kw", [dict(algorithm="alman"), dict(stabilizer="kahan"),
                                dict(stabilizer="neumaier-pass")], ids=["alman", "kahan", "neumaier-pass"])
def test_other_variants_through_the_power_of_two_passes(kw, rng):
    cp = gpu.cupy()
    for dtype in (np.float32, np.float16):
        for K, L in ((12, 3), (28, 9), (20, 12)):
            x = _rand(rng, (2, K << L), dtype)
            for fn in (F.fwht, F.ifwht):
                _same(fn(cp.asarray(x), **kw).get(), fn(x, **kw))



@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_batched_any_axis_out_and_in_place(dtype, rng):
    cp = gpu.cupy()
    cases = [((2, 20 * 64, 3), 1), ((12 * 8, 5), 0), ((4, 3, 44 * 32), -1), ((28 * 4, 2, 3), 0),
             ((5, 2, 12 * 1024), 2), ((10, 12 * 2), -1), ((12,), 0)]
    for shape, axis in cases:
        x = _rand(rng, shape, dtype)
        g = cp.asarray(x)
        for fn, norm in ((F.fwht, "backward"), (F.ifwht, "ortho")):
            want = fn(x, axis, norm=norm)
            _same(fn(g, axis, norm=norm).get(), want)
            _same(fn(g.copy(), axis, norm=norm, out=cp.empty_like(g)).get(), want)
            y = g.copy()
            assert fn(y, axis, norm=norm, out=y) is y                    # in place
            _same(y.get(), want)
        t = F.FWHT(shape[axis], dtype, device="cuda")
        _same(t(g, axis, inverse=True).get(), F.ifwht(x, axis))
    # strided views (transposed, reversed)
    base = _rand(rng, (24, 20 * 16), dtype)
    gb = cp.asarray(base)
    _same(F.fwht(gb[::-2], -1).get(), F.fwht(base[::-2], -1))
    _same(F.fwht(gb.T[:, ::2][:, :12], 1).get(), F.fwht(base.T[:, ::2][:, :12], 1))
    assert F.fwht(cp.empty((0, 12), dtype=dtype)).shape == (0, 12)



@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.usefixtures("_compiled")
def test_nan_and_inf_give_the_cpu_values(dtype, rng):
    cp = gpu.cupy()
    for K, L in ((12, 0), (20, 1), (28, 6), (44, 9), (12, 13), (12, 15)):
        x = _rand(rng, (6, K << L), dtype)
        x[0, 3] = np.nan
        x[1, -1] = np.inf
        x[2, 0], x[2, 5 % x.shape[1]] = np.inf, -np.inf
        x[3, :] = np.inf
        for fn, norm in ((F.fwht, "backward"), (F.ifwht, "backward"), (F.fwht, "ortho")):
            _same(fn(cp.asarray(x), norm=norm).get(), fn(x, norm=norm))



@pytest.mark.gpu
@needs_gpu
@pytest.mark.usefixtures("_compiled")
def test_fp16_overflow_raises_or_is_recomputed_as_on_the_cpu(rng):
    cp = gpu.cupy()
    # one block, one block (large), two blocks (sm_90), beyond shared memory
    for K, L in ((12, 2), (20, 10), (12, 14), (12, 15)):
        n = K << L
        big = _rand(rng, (4, n), np.float16)
        big[1] = np.float16(3000) * np.sign(_rand(rng, n, np.float32)).astype(np.float16) + 3000
        big[2, 7] = np.nan                             # NaN in one row: not an overflow
        g = cp.asarray(big)
        with pytest.raises(F.TransformOverflowError, match="fp16"):
            F.fwht(g)
        with pytest.raises(F.TransformOverflowError):
            F.fwht(g[1:2].copy())
        want = F.ifwht(big)                            # scaled by 1/n: recomputed in float64
        assert np.isfinite(want[1]).all()
        _same(F.ifwht(g).get(), want)
        y = g.copy()
        _same(F.ifwht(y, out=y).get(), want)           # in place: the input is kept
        try:                                           # 1/sqrt(n): fits for the short rows only
            want = F.fwht(big, norm="ortho")
        except F.TransformOverflowError:
            with pytest.raises(F.TransformOverflowError):
                F.fwht(g, norm="ortho")
        else:
            _same(F.fwht(g, norm="ortho").get(), want)
        _same(F.ifwht(g.T.copy(), axis=0).get(), F.ifwht(big.T.copy(), axis=0))
    with pytest.raises(F.TransformOverflowError):
        F.fwht(cp.full((1, 12 * 4), 65000, dtype=cp.float16), norm="ortho")

