"""Tuning: every measured setting of the planner and the GPU launcher, in one frozen object.

The defaults are the values measured fastest on the H100/H200 (the numbers are in each
field's comment).  A ``Tuning`` is passed to :func:`fwht_gpu.make_plan` (or
:class:`fwht_gpu.FWHT`), so an experiment sweeps settings in one process::

    for tile in (1 << 15, 1 << 16, 1 << 17):
        t = Tuning(tile_bytes=tile)
        ...make_plan(n, dtype, device="cuda", tuning=t)...

Environment variables are read only by :meth:`Tuning.from_env` (``FWHT_<FIELD>`` in upper
case, e.g. ``FWHT_TILE_BYTES=32768``).  The plan fields (the first group) decide where the
stages are grouped into passes, and so where ``compute_dtype`` and the ``-pass``
stabilizers round; with the defaults the rounding points depend on (n, dtype, variant)
alone.  The launch fields (the second group) change speed, never bits.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

ASYNC_CHOICES = ("wide", "all", "wide-strided", "none")


@dataclass(frozen=True)
class Tuning:
    """Planner and launcher settings (defaults: the measured values)."""

    # --- planning: the grouping of stages into passes ---------------------------------
    #: Shared-memory bytes of one tile when the whole transform fits in one pass.
    single_pass_bytes: int = 1 << 17
    #: Shared-memory bytes of one contiguous-pass tile in a multi-pass transform.
    tile_bytes: int = 1 << 16
    #: Shared-memory bytes of one strided-pass tile.
    strided_tile_bytes: int = 1 << 15
    #: Most shared-memory bytes of one tile with a wider compute type or a stabilizer
    #: (whose tiles hold as many elements as Folklore's, at twice the bytes, up to this).
    max_tile_bytes: int = 1 << 17
    #: Bytes of a wide tile when that takes no more passes than max_tile_bytes (three blocks
    #: per SM instead of one: FP32 data in FP64 at 2^24 1.21x, FP16 in FP32 1.19x faster, H200).
    wide_tile_bytes: int = 1 << 16
    #: Multi-pass Folklore: the first (contiguous) pass gets the fewest bits that keep the
    #: pass count (smaller tiles), instead of the most (1.1-1.4x faster at 2^16-2^24, H200).
    balanced_passes: bool = True
    #: Bytes of one contiguous row segment of a strided tile (128: whole cache lines;
    #: 32-byte segments measured 3-4x slower per pass on the H100).
    segment_bytes: int = 128
    #: Row-segment bytes of a strided tile holding wider values (compute dtype, stabilizer).
    wide_segment_bytes: int = 128
    #: Balance wide plans as Folklore's (the narrowest first pass that keeps the pass count).
    balanced_wide: bool = False
    #: Alman-Rao strided passes cover whole H8 stages (the strided bits rounded up to a
    #: multiple of 3), so that Alman-Rao takes no more passes than Folklore.
    alman_round_up: bool = True
    #: A lone single-pass Folklore transform of at least this many bytes, with fewer
    #: transforms than SMs, is split into two passes over more SMs (same bits; 1.7x faster
    #: for one transform on the H200).
    split_bytes: int = 1 << 17
    #: log2 of the thread-block clusters (sm_90+) that let a plain Folklore transform of
    #: three or more passes take two (kernels/cluster_pass.cuh), at most the device's
    #: limit; 0: never. Plain Folklore (and, with ``cluster_stabilized``, the global
    #: stabilizers), whose bits do not depend on the grouping. Clusters of 16 measured
    #: fastest (session 21's exploration); the engine's kernels (session 23, ``fwht bench``
    #: rows of kind ``plain``): H100 FP32 1.26-1.32x faster than three passes from 2^24 to
    #: 2^29, 2^30 7.37 against 8.98 ms; H200 1.03-1.18x (FP16 2^24 0.97x).
    cluster_log: int = 4
    #: Whether the global Kahan/Neumaier variants (``kahan``, ``neumaier``: grouping-independent
    #: bits, as plain Folklore's) take cluster passes too (kernels/stabilized_cluster_pass.cuh:
    #: values and errors over the cluster). Session 24 (``fwht bench --variants``, three
    #: passes against two): H100 Kahan FP32 2^23 0.204 -> 0.116 ms, 2^27 3.16 -> 1.85, 2^30
    #: 29.0 -> 19.6, FP64 2^27 9.90 -> 4.71; H200 FP16 2^30 20.5 -> 16.8, FP64 2^23 0.453 -> 0.214.
    cluster_stabilized: bool = True
    #: Neumaier's cluster passes only for elements of at least this many bytes: in FP32 and
    #: FP16 it is bound by its arithmetic, not by passes (H100 FP32 2^23 0.283 -> 0.242 ms,
    #: 2^27 4.28 -> 4.08, 2^30 38.0 -> 38.6; H200 FP32 2^27 3.93 -> 4.05, 2^30 35.1 -> 38.5,
    #: FP16 2^30 35.4 -> 39.5), in FP64 by memory (H100 2^23 1.10 -> 0.494 ms, 2^27 19.3 -> 8.94).
    cluster_neumaier_itemsize: int = 8
    #: Shared-memory bytes of one block's tile in a cluster pass (64 KiB: three blocks per
    #: SM; 128 KiB blocks measured slower).
    cluster_tile_bytes: int = 1 << 16
    #: Narrowest row segment of a strided cluster pass (its rows grow from 2^8 of 256 bytes
    #: to 2^10 of 64 bytes before a transform falls back to three passes).
    cluster_segment_bytes: int = 64

    # --- launching: tiles, threads, vectors (speed only, never bits) ---------------------
    #: log2 elements each thread transforms in registers per round.
    log_e: int = 4
    #: log2 resident threads per SM the launcher aims for; a block gets 2**log_sm_threads /
    #: (blocks that fit by shared memory, at most 4) threads.
    log_sm_threads: int = 10
    #: Which passes prefetch their next tile (cp.async) while transforming the current one:
    #: "wide" (wider compute dtype: FP32 data in FP64 at 2^30 1.41x -> 1.13x Folklore's time,
    #: FP16 in FP32 1.24x -> 1.08x, H200), "all" (Folklore 2^27-2^30 1.03-1.09x slower),
    #: "wide-strided" (the strided passes of those) or "none".
    async_passes: str = "wide"
    #: Alman-Rao FP32 contiguous passes load 32 bytes per thread (a whole H8 block in round 0;
    #: H100 2^30 first pass 3.37 -> 2.95 ms, Folklore's 2.84 ms).
    alman_vec32: bool = True
    #: FP16/BF16 Alman-Rao contiguous passes on pairs after a first round on single values
    #: (H100 FP16 2^30: first pass 3.18 -> 1.59 ms; the transform 1.41x -> 1.07x Folklore's).
    alman_pairs: bool = True
    #: Shared-memory bytes of an FP32 Alman-Rao strided tile of 9 row bits from 2^24
    #: elements: 64 KB gives 128-byte row segments (H100 2^27-2^30: 1.16-1.18x -> 1.12-1.13x).
    alman_strided_tile_bytes: int = 1 << 16
    #: log2 values per thread per round in FP32 Alman-Rao strided passes: 6 = two H8 blocks
    #: per round (H100 2^27/2^30: 1.12/1.13x -> 0.99/1.00x Folklore's time); 3 = one.
    alman_strided_e: int = 6
    #: A contiguous pass groups several short transforms into one tile of at least this many bytes.
    min_tile_bytes: int = 1 << 15
    #: ``fwht_k_rows`` groups short K * 2**k rows of 4-byte compute units (FP32, FP16/BF16
    #: pairs) into tiles of up to this many bytes (8-byte units - FP64, or a wider compute
    #: type -: ``min_tile_bytes``). H100, 4096 rows, over a copy (session 29, 256 threads per
    #: tile): 64 KiB against 32 KiB took FP32 12 * 2**8 1.185 -> 1.145x, FP16 12 * 2**8 1.524
    #: -> 1.449x, FP16 12 * 2**10 1.162 -> 1.126x (BF16 the same); FP64 12 * 2**8 lost (1.109
    #: -> 1.137x: two rows per 256-thread tile, whose 64 registers per thread spill).  Since
    #: session 41 small tiles take fewer threads (config._k_fewer_threads), and with them 16
    #: KiB beat 64 KiB (H200, 64 MiB of FP16 12 * 2**8 rows: 1.356 against 1.480x a copy;
    #: with the spread of the kernel's first round on every tile size, against the code
    #: before: FP16 1.49 -> 1.31x, FP32 1.30 -> 1.21x).
    k_tile_bytes: int = 1 << 14
    #: log2 threads per block of a cluster pass (256 beat 512 in every row of the
    #: exploration's sweep; 128 and 1024 lost badly).
    cluster_log_threads: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.cluster_log, int) and self.cluster_log > 4:
            raise ValueError(f"Tuning.cluster_log={self.cluster_log}: clusters of at most 16 blocks "
                             "(cluster_log 0 to 4)")
        if self.async_passes not in ASYNC_CHOICES:
            raise ValueError(f"Tuning.async_passes={self.async_passes!r}; choose one of {ASYNC_CHOICES}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"Tuning.{f.name}={v!r}: a non-negative int")
            if f.type in ("int", int) and f.name.endswith("_bytes") and v & (v - 1):
                raise ValueError(f"Tuning.{f.name}={v}: a power of two")

    @classmethod
    def from_env(cls, environ=None) -> Tuning:
        """The defaults overridden by ``FWHT_<FIELD>`` environment variables (for experiments)."""
        env = os.environ if environ is None else environ
        kw = {}
        for f in dataclasses.fields(cls):
            raw = env.get("FWHT_" + f.name.upper())
            if raw is None:
                continue
            if f.type in ("bool", bool):
                kw[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif f.type in ("int", int):
                try:
                    kw[f.name] = int(raw, 0)
                except ValueError:
                    raise ValueError(f"FWHT_{f.name.upper()}={raw!r}: an integer") from None
            else:
                kw[f.name] = raw
        return cls(**kw)

    def as_dict(self) -> dict:
        """All fields (for benchmark records)."""
        return dataclasses.asdict(self)

    def changes(self) -> dict:
        """The fields that differ from the defaults."""
        base = Tuning()
        return {k: v for k, v in self.as_dict().items() if getattr(base, k) != v}


#: The measured defaults.
DEFAULT = Tuning()
