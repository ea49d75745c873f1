"""K * 2**k rows (issue 19 item 2, exploration; session 29): round 0's loads in flight, a
persistent grid, the tiles of short rows, the launch bounds, against the library's kernels in
the same run.

Variants (each a build of ``k_stage.cuh`` with -D switches, the launch's grid, the tiles, config
settings): ``base`` the library; ``vif2`` .. ``vif16`` at most 2 to 16 16-byte vectors in flight
per thread in round 0 (FWHT_K_VIF; the library's: 7 under a bound of 256 threads, 5 for K = 20,
else 4; 2 before session 29); ``persist`` a grid of the blocks that are resident at once, each
looping over tiles; ``tile32`` / ``tile64`` short rows grouped into tiles of up to 32 / 64 KiB
(the library: 64 KiB for 16- and 32-bit data, 32 KiB for FP64; before session 29 32 KiB for
all; ``tile8`` / ``tile16`` 8 / 16 KiB); ``b1`` every kernel compiled for one block per SM
(before session 35); ``pair20`` FP64 20 * 2**11 over two blocks (before session 35);
``regload`` round 0 through registers everywhere (before session 36: the library copies plain
FP64 tiles by cp.async straight to shared memory in blocks of up to 256 threads), ``direct4``
those copies for every unit whose storage type computes (FP32, FP16/BF16 pairs: 4-byte
copies); ``q4b2`` four-block rows compiled for two blocks per SM (before session 36);
``halves3`` 4-byte rows whose tiles sit two per SM over two blocks of 256 threads, three per
SM (session 36, slower than the library).
``--compute``: a wider compute dtype for every
``--dtypes`` (float32 for fp16/bf16, float64 for fp32). Every variant's output is compared with
the library's (the same bits). Session 29 also measured (H100, then removed from the kernel):
the next tile's bytes prefetched into L2 by one thread (``cp.async.bulk.prefetch.L2``) once
round 0 had read the current tile, on the persistent grid: slower than the library on 9 of 14
routes; session 36 (H100, removed too): ``staged``, each tile's vectors copied by 16-byte
cp.async into a staging buffer behind the padded tile, the next tile's issued once round 0 had
read the current one, on the persistent grid: 1.10-1.83x a copy against the library's
0.97-1.59x (the doubled shared memory halves the blocks per SM), better only for FP16 12 * 2**8
at 4096 rows (1.43 -> 1.31-1.33x); also session 36, their kernel support removed after:
rows of 4-byte units over two / four blocks of 128 threads compiled for four to eight per SM
(``small2`` / ``small4``), FP64 rows over clusters of five / seven blocks (``q57``), all
slower (NOTES "Session 36").

    python benchmarks/explore_k_variants.py [--dtypes fp32 fp16 fp64] [--n 3072 12288 ...]
        [--variants base vif3 ...] [--out JSON]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ".")
import cupy as cp  # noqa: E402

import explore_k_lengths as kl  # noqa: E402
from fwht_gpu import dtypes as _dt  # noqa: E402
from fwht_gpu import gpu, hadamard, make_plan, provenance  # noqa: E402
from fwht_gpu.cuda import config, engine  # noqa: E402
from fwht_gpu.cuda.modules import OPTIONS, KernelModule  # noqa: E402

VARIANTS = {         # name: (-D switches, persistent grid, tiles of at least this many bytes[, config settings])
    "base": ((), False, None),
    "persist": ((), True, None),
    "tile8": ((), False, 1 << 13),
    "tile16": ((), False, 1 << 14),
    "tile32": ((), False, 1 << 15),
    "tile64": ((), False, 1 << 16),
    # session 35: one bound for every launch (``b1``: the bound of one block per SM, as before
    # session 35)
    "b1": ((), False, None, {"_k_bound_blocks": lambda cfg, threads, tiles: 1}),
    # FP64 20 * 2**11 over two blocks (before session 35; the library takes four)
    "pair20": ((), False, None, {"K_QUAD_ORDERS": (28,)}),
}


_library_pair_launch = config._k_pair_launch
_library_make = engine._make_k_launch
_library_k_launch = config.k_launch


# round 0 through registers everywhere (before session 36); direct copies for every unit whose
# storage type computes (4-byte copies for FP32 and FP16/BF16 pairs)
VARIANTS["regload"] = ((), False, None, {"_k_direct": lambda cfg, threads: False})
VARIANTS["direct4"] = ((), False, None, {"_k_direct": lambda cfg, threads: cfg.witem == cfg.itemsize})


def _quad_bound(b):
    """config._k_pair_launch with the four-block launches compiled for ``b`` blocks per SM."""
    def launch(cfg, stage, log_mu, row_units, rows, limits):
        got = _library_pair_launch(cfg, stage, log_mu, row_units, rows, limits)
        if got is None or got.rows_cfg.q != 4 or config._tiles_per_sm(got.smem, limits) < b:
            return got
        return dataclasses.replace(got, rows_cfg=dataclasses.replace(got.rows_cfg, b=b))
    return launch


VARIANTS["q4b2"] = ((), False, None, {"_k_pair_launch": _quad_bound(2)})     # before session 36


def _halves_three(cfg, stage, log_mu, row_units, rows, limits):
    """config._k_pair_launch, and rows of 4-byte units whose one-block tiles sit two per SM
    over two blocks of 256 threads, three halves per SM (b = 3)."""
    got = _library_pair_launch(cfg, stage, log_mu, row_units, rows, limits)
    if got is not None or cfg.unit_bytes != 4 or cfg.K % 2 or log_mu < 5 or limits.max_cluster_log < 1:
        return got
    if config._tiles_per_sm(cfg.smem_bytes(row_units), limits) != 2:
        return got
    smem = cfg.smem_bytes(row_units // 2)
    if config._tiles_per_sm(smem, limits) < 3 or cfg.max_threads < 1024:
        return got
    return config.KLaunch(config.k_pair_config(cfg, 2, 3), stage, log_mu, 0, rows, 256, smem)


VARIANTS["halves3"] = ((), False, None, {"_k_pair_launch": _halves_three})


def _halves_full(cfg, stage, log_mu, row_units, rows, limits):
    """config._k_pair_launch, and rows of 4-byte units whose one-block tiles sit at most three
    per SM over two blocks compiled for the bound of one block (64 registers), in the threads
    (128, 256 or 512) that keep the most resident, the fewer on a tie (session 41)."""
    got = _library_pair_launch(cfg, stage, log_mu, row_units, rows, limits)
    if got is not None or cfg.unit_bytes != 4 or cfg.K % 2 or log_mu < 5 or limits.max_cluster_log < 1:
        return got
    if config._tiles_per_sm(cfg.smem_bytes(row_units), limits) > 3:
        return got
    smem = cfg.smem_bytes(row_units // 2)
    tiles = config._tiles_per_sm(smem, limits)
    pcfg = config.k_pair_config(cfg, 2, 1)
    regs = pcfg.bound_registers(limits)
    best = max((t * min(tiles, limits.regs_per_sm // (t * regs), 2048 // t), -t) for t in (128, 256, 512)
               if t <= pcfg.max_threads)
    return config.KLaunch(pcfg, stage, log_mu, 0, rows, -best[1], smem)


VARIANTS["halves4"] = ((), False, None, {"_k_pair_launch": _halves_full})


for _n in range(2, 17):
    VARIANTS[f"vif{_n}"] = ((f"-DFWHT_K_VIF={_n}",), False, None)


def _threads_of(count):
    """config._k_threads giving one-block tiles ``count`` threads (within the launch bound)."""
    def threads(cfg, tile_units, tiles):
        return min(count, cfg.max_threads)
    return threads


# session 41: smaller tiles of short rows in smaller blocks, so that as many bytes as the
# library's 48 KiB tiles stay resident per SM (the 64 registers of the bound of 1024 threads
# allow 2048 threads), over more, independent blocks: ``tile16t64`` tiles of up to 16 KiB at
# 64 threads, ``tile32t128`` up to 32 KiB at 128 (the library: 256 threads, four 48 KiB tiles)
for _kib, _thr in ((16, 64), (16, 128), (32, 64), (32, 128)):
    VARIANTS[f"tile{_kib}t{_thr}"] = ((), False, _kib << 10, {"_k_threads": _threads_of(_thr)})
VARIANTS["tile128"] = ((), False, 1 << 17)
VARIANTS["tile8t32"] = ((), False, 1 << 13, {"_k_threads": _threads_of(32)})


def _fill_threads(cfg, tile_units, tiles):
    """Threads per block that fill the SM's registers under the launch bound of one block
    (64 registers for a bound of 1024 threads) with ``tiles`` blocks per SM, a power of two,
    at least a warp, at most the library's choice."""
    regs = cfg.bound_registers(config.H100)
    fill = max(32, 1 << ((config.H100.regs_per_sm // (regs * max(1, tiles))).bit_length() - 1))
    return min(fill, _library_config["_k_threads"](cfg, tile_units, tiles))


for _kib in (8, 16, 32, 64):
    VARIANTS[f"fill{_kib}"] = ((), False, _kib << 10, {"_k_threads": _fill_threads})
_library_config = {"K_QUAD_ORDERS": config.K_QUAD_ORDERS, "K_PAIR_QS": config.K_PAIR_QS,
                   "_k_bound_blocks": config._k_bound_blocks, "_k_pair_launch": config._k_pair_launch,
                   "_k_direct": config._k_direct, "_k_threads": config._k_threads,
                   "_k_fewer_threads": config._k_fewer_threads}


def _before41(plan, K, rows, inverse, limits=config.H100):
    """config.k_launch as before session 41: tiles of short 4-byte-unit rows up to 64 KiB."""
    tuned = dataclasses.replace(plan, tuning=dataclasses.replace(plan.tuning, k_tile_bytes=1 << 16))
    return _library_k_launch(tuned, K, rows, inverse, limits)


# the launches before session 41: tiles of up to 64 KiB, the threads of _k_threads alone
VARIANTS["before41"] = ((), False, None, {"k_launch": _before41,
                                          "_k_fewer_threads": lambda cfg, threads, tiles, limits: threads})


def _tiles_of(nbytes):
    """config.k_launch with tiles of short rows up to ``nbytes``."""
    def k_launch(plan, K, rows, inverse, limits=config.H100):
        tuned = dataclasses.replace(plan, tuning=dataclasses.replace(plan.tuning, min_tile_bytes=nbytes,
                                                                     k_tile_bytes=nbytes))
        return _library_k_launch(tuned, K, rows, inverse, limits)
    return k_launch


def _resident(launch, limits) -> int:
    """Blocks of ``launch`` resident per SM (shared memory, threads, the launch bound's
    registers)."""
    regs = launch.rows_cfg.bound_registers(limits)
    return max(1, min(config._tiles_per_sm(launch.smem, limits), 2048 // launch.threads,
                      limits.regs_per_sm // (launch.threads * regs)))


def _persistent_make(plan, K, rows, inverse, device):
    """engine._make_k_launch with a grid of the blocks resident at once (one-pass routes)."""
    step = _library_make(plan, K, rows, inverse, device)
    launch = step.launch
    if not launch.fused:
        return step
    limits = gpu.limits()
    per_sm = _resident(launch, limits)
    q = launch.rows_cfg.q if launch.pair else 1          # blocks per cluster
    grid = (q * min(launch.ntiles, max(1, per_sm // q) * limits.sm_count) if launch.pair
            else min(launch.ntiles, per_sm * limits.sm_count))
    return step._replace(grid=grid)


def _use(module, persistent, tile_bytes, settings=None):
    """The library's K route with a variant's kernels, grid, tiles and config settings
    (launches recomputed)."""
    engine.K_KERNELS = module
    engine._make_k_launch = _persistent_make if persistent else _library_make
    config.k_launch = _tiles_of(tile_bytes) if tile_bytes else _library_k_launch
    for key, value in {**_library_config, **(settings or {})}.items():
        setattr(config, key, value)
    engine._K_LAUNCHES.clear()


def _settings(v):
    return VARIANTS[v][3] if len(VARIANTS[v]) > 3 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--min-mb", type=float, default=0.0,
                    help="at least this many MiB of rows (a multiple of 512 rows, so that tiles of "
                         "up to 512 short rows divide the batch)")
    ap.add_argument("--dtypes", nargs="*", default=["fp32", "fp16", "fp64"])
    ap.add_argument("--n", type=int, nargs="*",
                    default=[12 * 256, 12 * 1024, 20 * 1024, 28 * 1024, 40 * 1024])
    ap.add_argument("--variants", nargs="*", default=["base", "vif2", "vif3", "vif6", "persist", "tile64"])
    ap.add_argument("--compute", default=None,
                    help="a wider compute dtype for every --dtypes: float32 (fp16, bf16) or float64 (fp32)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    print(f"# {gpu.status()}")
    library = engine.K_KERNELS
    modules = {v: library if not VARIANTS[v][0] else
               KernelModule(engine.K_SOURCE, OPTIONS + VARIANTS[v][0]) for v in args.variants}
    def count(n: int, name: str) -> int:
        least = -(-int(args.min_mb * 2**20) // (n * _dt.resolve(name).itemsize))
        return max(args.rows, -(-least // 512) * 512)

    items = []
    for name in args.dtypes:
        for n in args.n:
            K, M = hadamard.split(n)
            items.append((make_plan(M, _dt.resolve(name), compute_dtype=args.compute, device="cuda"), K,
                          count(n, name), False))
    for v in args.variants:             # compile everything first
        _use(modules[v], False, VARIANTS[v][2], _settings(v))
        engine.precompile_k(items)
    _use(library, False, None)
    rows = []
    for name in args.dtypes:
        dt = _dt.resolve(name)
        for n in args.n:
            K, M = hadamard.split(n)
            plan = make_plan(M, dt, compute_dtype=args.compute, device="cuda")
            nrows = count(n, name)
            x = cp.random.default_rng(2).standard_normal((nrows, n), dtype=cp.float32).astype(dt)
            ref = base_route = None
            line = f"{name:5} {K:>3} x {M:<5} {nrows:>6} rows"
            for v in args.variants:
                _use(modules[v], VARIANTS[v][1], VARIANTS[v][2], _settings(v))
                y = cp.empty_like(x)
                engine.run_k(plan, K, x, y, 1.0, False, check=False)
                same = True
                if ref is None:
                    ref = y
                else:
                    same = bool((y.view(cp.uint8) == ref.view(cp.uint8)).all())
                    if not same:        # how far a build that changes the order strays
                        dev = float(cp.abs(y.astype(cp.float64) - ref.astype(cp.float64)).max()
                                    / cp.abs(ref.astype(cp.float64)).max())
                r = kl.case(nrows, n, dt, args.compute)
                r.update(variant=v, same_bits=same)
                rows.append(r)
                base_route = base_route or r["route"]
                line += f"  {v} {r['ratio_copy']:.3f}{'' if same else f' (differs {dev:.1e})'}"
                if r["route"] != base_route:
                    line += f" [{r['route']}]"
            _use(library, False, None)
            print(line + f"   ({base_route})", flush=True)
    if args.out:
        provenance.write(provenance.record("explore-k-variants", rows, vars(args), None,
                                           device="gpu"), args.out)
        print(f"# written: {args.out}")


if __name__ == "__main__":
    main()
