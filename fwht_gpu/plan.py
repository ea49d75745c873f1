"""Plan: the single, inspectable description of how a transform is computed.

A transform of length n = 2**L is a sequence of *stages*; each stage acts on one
group of index bits:

* ``radix2`` on bit b: the butterflies (j, j + 2**b) of Folklore (thesis Alg. 2);
* ``h8`` on bits b..b+2: Alman-Rao's 23-operation H8 blocks on the elements
  j + r * 2**b, r = 0..7 (thesis Alg. 9, lines 22-53);
* ``prescale`` before the first ``h8`` stage: element i is multiplied by
  2**e(i), e(i) = number of non-zero octal digits of ``i >> b`` where b is the
  number of Folklore prefix bits (the rule derived from the recursion of thesis
  Alg. 3; thesis Alg. 10 omits the shift by b).

Stages run in the listed order, always from the lowest bits up.  Stages are
grouped into *passes* (the same on every device: the grouping depends on n, the
dtype and the variant alone, so every engine rounds at the same places): a GPU pass loads the 2**nbits elements that differ only
in bits [first_bit, first_bit + nbits) (stride 2**first_bit), applies its
stages and writes back.  With ``compute_dtype`` equal to the storage dtype
(the default) every operation is rounded to the storage dtype, so results do
not depend on the grouping; with a wider ``compute_dtype`` values are rounded
to the storage dtype only where a pass writes back.  Both engines execute any
Plan exactly this way, so the GPU result equals the NumPy result bit for bit.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import dtypes as _dt

ALGORITHMS = ("folklore", "alman")
#: "kahan"/"neumaier": thesis 3.3.1/3.3.2, an error vector carried through every stage and
#: folded in at the end; "-pass": the compensation lives only within a pass and is folded
#: in where the pass writes back (no error vector in device memory).
STABILIZERS = (None, "kahan", "neumaier", "kahan-pass", "neumaier-pass")
DEVICES = ("cpu", "cuda")

# Tile geometry, which decides the grouping of stages into passes on every device.  The
# FWHT_* environment variables exist for tuning experiments only: they change the grouping,
# and so the rounding points of compute_dtype and the "-pass" stabilizers (never the bits of
# the other variants).  Unset, the rounding points depend on (n, dtype, variant) alone.
#: Shared-memory bytes of one GPU tile when the whole transform fits in one pass.
SINGLE_PASS_BYTES = int(os.environ.get("FWHT_SINGLE_PASS_BYTES", 1 << 17))
#: Shared-memory bytes of one contiguous-pass tile in a multi-pass transform.
TILE_BYTES = int(os.environ.get("FWHT_TILE_BYTES", 1 << 16))
#: Shared-memory bytes of one strided-pass tile.
STRIDED_TILE_BYTES = int(os.environ.get("FWHT_STRIDED_TILE_BYTES", 1 << 15))
#: Most shared-memory bytes of one tile with a wider compute type or a stabilizer (whose
#: tiles hold as many elements as Folklore's, at twice the bytes, up to this).
MAX_TILE_BYTES = int(os.environ.get("FWHT_MAX_TILE_BYTES", 1 << 17))
#: Shared-memory bytes of a wide tile when that takes no more passes than MAX_TILE_BYTES
#: (three blocks per SM instead of one: FP32 data in FP64 at 2^24 1.21x, FP16 in FP32
#: 1.19x faster on the H200).
WIDE_TILE_BYTES = int(os.environ.get("FWHT_WIDE_TILE_BYTES", 1 << 16))
#: Multi-pass Folklore: give the first (contiguous) pass the fewest bits that keep the pass
#: count (smaller tiles), instead of the most (1.1-1.4x faster at 2^16-2^24 on the H200).
BALANCED_PASSES = os.environ.get("FWHT_BALANCED_PASSES", "1") == "1"
#: Bytes of one contiguous row segment of a strided tile (128: whole cache lines;
#: 32-byte segments measured 3-4x slower per pass on the H100).
SEGMENT_BYTES = int(os.environ.get("FWHT_SEGMENT_BYTES", 128))
#: Row-segment bytes of a strided tile holding wider values (compute dtype, stabilizer):
#: 64 doubles the rows per tile (a 9-bit strided pass within 64 KB of FP64).
WIDE_SEGMENT_BYTES = int(os.environ.get("FWHT_WIDE_SEGMENT_BYTES", 128))
#: Balance wide plans as Folklore's (the narrowest first pass that keeps the pass count).
BALANCED_WIDE = os.environ.get("FWHT_BALANCED_WIDE", "0") == "1"
#: Alman-Rao strided passes cover whole H8 stages: the strided bits rounded up to a multiple
#: of 3 (9 instead of 8: the same tile bytes in half-width row segments, or for FP32 from 2^24
#: elements a 64 KB tile, see launch.py), so that Alman-Rao takes no more passes than Folklore.
ALMAN_ROUND_UP = os.environ.get("FWHT_ALMAN_ROUND_UP", "1") == "1"


@dataclass(frozen=True)
class Stage:
    """One stage: ``kind`` in {'radix2', 'h8', 'prescale'} acting from index bit ``bit``."""

    kind: str
    bit: int

    @property
    def nbits(self) -> int:
        return {"radix2": 1, "h8": 3, "prescale": 0}[self.kind]


@dataclass(frozen=True)
class Pass:
    """Stages applied to chunks of 2**nbits elements at stride 2**first_bit."""

    first_bit: int
    nbits: int
    stages: tuple[Stage, ...]


@dataclass(frozen=True)
class Plan:
    """How a length-n transform is computed; made by :func:`make_plan`."""

    n: int
    dtype: np.dtype
    algorithm: str
    stabilizer: str | None
    device: str
    passes: tuple[Pass, ...]
    compute_dtype: np.dtype

    @property
    def log2n(self) -> int:
        return self.n.bit_length() - 1

    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(s for p in self.passes for s in p.stages)

    @property
    def stabilizer_kind(self) -> str | None:
        """'kahan' or 'neumaier' (the butterfly formulas), or None."""
        return None if self.stabilizer is None else self.stabilizer.split("-")[0]

    @property
    def fold_each_pass(self) -> bool:
        """Whether the compensation is folded in at every pass boundary."""
        return self.stabilizer is not None and self.stabilizer.endswith("-pass")

    @property
    def rounding(self) -> str:
        st = _dt.short_name(self.dtype)
        if self.compute_dtype == self.dtype:
            text = f"every operation rounded to {st}"
        else:
            text = (f"computed in {_dt.short_name(self.compute_dtype)} (every operation rounded to "
                    f"it), rounded to {st} where each pass writes back")
        if self.stabilizer:
            text += ("; compensation folded in where each pass writes back" if self.fold_each_pass
                     else "; error vector folded in after the last stage")
        return text

    def describe(self) -> str:
        """Human-readable schedule."""
        lines = [
            f"Plan: n = 2**{self.log2n}, {_dt.short_name(self.dtype)}, algorithm={self.algorithm}, "
            f"stabilizer={self.stabilizer}, device={self.device}",
            f"  rounding: {self.rounding}",
        ]
        for k, p in enumerate(self.passes):
            st = ", ".join(f"{s.kind}@{s.bit}" for s in p.stages)
            lines.append(f"  pass {k}: bits [{p.first_bit}, {p.first_bit + p.nbits}) "
                         f"(chunk 2**{p.nbits} at stride 2**{p.first_bit}): {st}")
        return "\n".join(lines)


def check_length(n: int, argname: str = "x") -> int:
    """Return log2(n); ValueError naming the length and the next power of two otherwise."""
    if n < 1:
        raise ValueError(f"{argname}: transform length must be >= 1, got {n}")
    if n & (n - 1):
        nxt = 1 << n.bit_length()
        raise ValueError(
            f"{argname}: transform length {n} is not a power of two; pad to {nxt} "
            f"(e.g. numpy.pad) or truncate to {nxt // 2}"
        )
    return n.bit_length() - 1


def _stages(log2n: int, algorithm: str) -> list[Stage]:
    if algorithm == "folklore":
        return [Stage("radix2", b) for b in range(log2n)]
    f, q = log2n % 3, log2n // 3
    st = [Stage("radix2", b) for b in range(f)]
    if q:
        st.append(Stage("prescale", f))
        st += [Stage("h8", f + 3 * k) for k in range(q)]
    return st


def smem_bytes_per_element(dtype, compute_dtype=None, stabilizer=None) -> int:
    """Shared-memory bytes one element takes in a GPU tile: the compute dtype's size,
    twice that with a stabilizer (value and error)."""
    item = np.dtype(compute_dtype if compute_dtype is not None else dtype).itemsize
    return item * (2 if stabilizer else 1)


def pass_bits(dtype, strided: bool, single: bool = False, footprint: int | None = None,
              max_tile: int = MAX_TILE_BYTES, segment: int = SEGMENT_BYTES) -> int:
    """Most index bits one GPU pass covers for ``dtype``.

    Tiles are sized by the stored bytes: a contiguous pass (stride 1) covers
    TILE_BYTES of ``dtype`` (SINGLE_PASS_BYTES when the whole transform fits in one
    pass), a strided pass STRIDED_TILE_BYTES in ``segment``-byte row segments.
    With ``footprint`` shared-memory bytes per element (a wider compute type, a
    stabilizer's errors) a tile also stays within ``max_tile`` bytes of shared memory.
    """
    item = np.dtype(dtype).itemsize
    foot = footprint or item
    if strided:
        elements = STRIDED_TILE_BYTES // item
        rows = STRIDED_TILE_BYTES // segment
        if foot > item:
            rows = min(rows, max_tile // foot // (segment // item))
        return rows.bit_length() - 1 if elements >= segment // item else 0
    elements = (SINGLE_PASS_BYTES if single else TILE_BYTES) // item
    if foot > item:
        elements = min(elements, max_tile // foot)
    return elements.bit_length() - 1


def _group(stages: list[Stage], log2n: int, dtype, footprint: int) -> tuple[Pass, ...]:
    """The passes of a transform: a function of (n, dtype, variant) alone, never of the device,
    so that the NumPy engine rounds where the GPU engine does (``compute_dtype`` and the
    ``-pass`` stabilizers round where a pass writes back)."""
    if log2n <= pass_bits(dtype, False, single=True, footprint=footprint):
        return (Pass(0, log2n, tuple(stages)),) if stages else ()
    h8 = any(s.kind == "h8" for s in stages)
    wide = footprint > np.dtype(dtype).itemsize

    def strided(tile: int) -> int:
        bits = pass_bits(dtype, True, footprint=footprint, max_tile=tile,
                         segment=WIDE_SEGMENT_BYTES if wide else SEGMENT_BYTES)
        return -(-bits // 3) * 3 if h8 and ALMAN_ROUND_UP else bits

    greedy = lambda tile: _greedy(stages, pass_bits(dtype, False, footprint=footprint, max_tile=tile),  # noqa: E731
                                  strided(tile))
    passes, tile = greedy(MAX_TILE_BYTES), MAX_TILE_BYTES
    if wide:
        # wider values in shared memory: the smaller tile (more blocks per SM) unless it costs a pass
        small = greedy(WIDE_TILE_BYTES)
        if len(small) == len(passes):
            passes, tile = small, WIDE_TILE_BYTES
        if not BALANCED_WIDE:
            return passes
    if BALANCED_PASSES:
        # the smallest first (contiguous) pass that keeps the pass count: smaller tiles
        for c in range(1, passes[0].nbits):
            fewer = _greedy(stages, c, strided(tile))
            if len(fewer) == len(passes):
                return fewer
    return passes


def _greedy(stages: list[Stage], cap: int, strided_cap: int) -> tuple[Pass, ...]:
    """Stages into passes, each as wide as it may be: ``cap`` bits first, then ``strided_cap``."""
    passes: list[Pass] = []
    cur: list[Stage] = []
    first = 0
    for s in stages:
        used = sum(t.nbits for t in cur)
        if used + s.nbits > cap:
            passes.append(Pass(first, used, tuple(cur)))
            first += used
            cur = []
            cap = strided_cap
        cur.append(s)
    passes.append(Pass(first, sum(t.nbits for t in cur), tuple(cur)))
    return tuple(passes)


def make_plan(n: int, dtype, algorithm: str = "folklore", stabilizer: str | None = None,
              device: str = "cpu", compute_dtype=None) -> Plan:
    """Plan a length-n transform of ``dtype`` data for ``device`` ('cpu' or 'cuda').

    ``compute_dtype`` (fp32 for fp16/bf16 data, fp64 for fp32 data) keeps values in that
    dtype inside a pass and rounds them to ``dtype`` where the pass writes back.
    """
    log2n = check_length(int(n), "n")
    dt = _dt.resolve(dtype)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}; choose one of {ALGORITHMS}")
    if stabilizer not in STABILIZERS:
        raise ValueError(f"stabilizer={stabilizer!r}; choose one of None, 'kahan', 'neumaier', "
                         "'kahan-pass', 'neumaier-pass'")
    if stabilizer is not None and algorithm != "folklore":
        raise ValueError(f"stabilizer={stabilizer!r} is only available with algorithm='folklore'")
    if device not in DEVICES:
        raise ValueError(f"device={device!r}; choose 'cpu' or 'cuda'")
    cdt = dt
    if compute_dtype is not None:
        cdt = _dt.resolve(compute_dtype, "compute_dtype")
        allowed = {2: np.dtype(np.float32), 4: np.dtype(np.float64)}.get(dt.itemsize)
        if cdt != allowed:
            raise ValueError(f"compute_dtype={_dt.short_name(cdt)} for {_dt.short_name(dt)} data: "
                             "use float32 for float16/bfloat16 data, float64 for float32 data")
        if stabilizer is not None:
            raise ValueError("compute_dtype and stabilizer are alternatives; choose one")
    stages = _stages(log2n, algorithm)
    foot = smem_bytes_per_element(dt, cdt if cdt != dt else None, stabilizer)
    return Plan(int(n), dt, algorithm, stabilizer, device, _group(stages, log2n, dt, foot), cdt)
