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

import functools
from dataclasses import dataclass, field

import numpy as np

from . import dtypes as _dt
from . import variants
from .tuning import DEFAULT, Tuning
from .variants import ALGORITHMS, STABILIZERS  # noqa: F401  (re-exported)

DEVICES = ("cpu", "cuda")


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
    """Stages applied to chunks of 2**nbits elements at stride 2**first_bit; on the GPU
    the top ``cluster_bits`` of them across a thread-block cluster of 2**cluster_bits
    blocks (sm_90+; the NumPy engine ignores it: the same stages in the same order)."""

    first_bit: int
    nbits: int
    stages: tuple[Stage, ...]
    cluster_bits: int = 0


@dataclass(frozen=True)
class Plan:
    """How a length-n transform is computed; made by :func:`make_plan`, executed unchanged by
    every engine.

    ``interleave`` (s > 0): the transform's consecutive elements lie 2**s apart in memory
    (an axis other than the last of a C-contiguous array with 2**s trailing elements),
    transformed in place with strided passes; ``split``: a lone single-pass transform
    planned as two passes over more SMs.  Neither changes a bit of the result (both occur
    only with plain Folklore, whose every operation rounds to the dtype).
    """

    n: int
    dtype: np.dtype
    algorithm: str
    stabilizer: str | None
    device: str
    passes: tuple[Pass, ...]
    compute_dtype: np.dtype
    interleave: int = 0
    split: bool = False
    tuning: Tuning = field(default=DEFAULT, repr=False)

    @property
    def log2n(self) -> int:
        return self.n.bit_length() - 1

    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(s for p in self.passes for s in p.stages)

    @property
    def prefix_bits(self) -> int:
        """Alman-Rao's radix-2 prefix: the bits below the first H8 stage, which the
        pre-scaling exponents skip (0 for Folklore)."""
        if self.algorithm != "alman":
            return 0
        return sum(1 for s in self.stages if s.kind == "radix2")

    @property
    def plain(self) -> bool:
        """Folklore, no stabilizer, no wider compute dtype: every operation rounded to the
        dtype, so any grouping of the stages gives the same bits."""
        return self.algorithm == "folklore" and self.stabilizer is None and self.compute_dtype == self.dtype

    @property
    def clustered(self) -> bool:
        """Whether some pass spans a thread-block cluster on the GPU."""
        return any(p.cluster_bits for p in self.passes)

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
        """Human-readable schedule: every decision the engines follow."""
        lines = [
            f"Plan: n = 2**{self.log2n}, {_dt.short_name(self.dtype)}, algorithm={self.algorithm}, "
            f"stabilizer={self.stabilizer}, device={self.device}",
            f"  rounding: {self.rounding}",
        ]
        if self.algorithm == "alman":
            lines.append(f"  Alman-Rao: {self.prefix_bits} radix-2 prefix bits; pre-scaling exponents "
                         f"count the non-zero octal digits of i >> {self.prefix_bits}")
        if self.interleave:
            lines.append(f"  layout: elements 2**{self.interleave} apart (a non-last axis, 2**"
                         f"{self.interleave} interleaved transforms per row), every pass strided, in place")
        if self.split:
            lines.append("  split: a lone single-pass transform as two passes over more SMs (same bits)")
        if self.clustered:
            lines.append("  clusters: passes whose top bits span a thread-block cluster (sm_90+; the "
                         "same bits as any other grouping of this variant)")
        if self.tuning != DEFAULT:
            lines.append(f"  tuning: {self.tuning.changes()}")
        for k, p in enumerate(self.passes):
            st = ", ".join(f"{s.kind}@{s.bit}" for s in p.stages)
            over = (f", over a cluster of 2**{p.cluster_bits} blocks of 2**{p.nbits - p.cluster_bits}"
                    if p.cluster_bits else "")
            lines.append(f"  pass {k}: bits [{p.first_bit}, {p.first_bit + p.nbits}) "
                         f"(chunk 2**{p.nbits} at stride 2**{p.first_bit + self.interleave}{over}): {st}")
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
              max_tile: int | None = None, segment: int | None = None,
              tuning: Tuning = DEFAULT) -> int:
    """Most index bits one GPU pass covers for ``dtype``.

    Tiles are sized by the stored bytes: a contiguous pass (stride 1) covers
    ``tuning.tile_bytes`` of ``dtype`` (``single_pass_bytes`` when the whole transform fits
    in one pass), a strided pass ``strided_tile_bytes`` in ``segment``-byte row segments.
    With ``footprint`` shared-memory bytes per element (a wider compute type, a
    stabilizer's errors) a tile also stays within ``max_tile`` bytes of shared memory.
    """
    t = tuning
    max_tile = t.max_tile_bytes if max_tile is None else max_tile
    segment = t.segment_bytes if segment is None else segment
    item = np.dtype(dtype).itemsize
    foot = footprint or item
    if strided:
        elements = t.strided_tile_bytes // item
        rows = t.strided_tile_bytes // segment
        if foot > item:
            rows = min(rows, max_tile // foot // (segment // item))
        return rows.bit_length() - 1 if elements >= segment // item else 0
    elements = (t.single_pass_bytes if single else t.tile_bytes) // item
    if foot > item:
        elements = min(elements, max_tile // foot)
    return elements.bit_length() - 1


def _group(stages: list[Stage], log2n: int, dtype, footprint: int, t: Tuning) -> tuple[Pass, ...]:
    """The passes of a transform: a function of (n, dtype, variant, tuning) alone, never of
    the device, so that the NumPy engine rounds where the GPU engine does (``compute_dtype``
    and the ``-pass`` stabilizers round where a pass writes back)."""
    if log2n <= pass_bits(dtype, False, single=True, footprint=footprint, tuning=t):
        return (Pass(0, log2n, tuple(stages)),) if stages else ()
    h8 = any(s.kind == "h8" for s in stages)
    wide = footprint > np.dtype(dtype).itemsize

    def strided(tile: int) -> int:
        bits = pass_bits(dtype, True, footprint=footprint, max_tile=tile,
                         segment=t.wide_segment_bytes if wide else t.segment_bytes, tuning=t)
        return -(-bits // 3) * 3 if h8 and t.alman_round_up else bits

    def greedy(tile: int) -> tuple[Pass, ...]:
        first = pass_bits(dtype, False, footprint=footprint, max_tile=tile, tuning=t)
        return _greedy(stages, first, strided(tile))

    passes, tile = greedy(t.max_tile_bytes), t.max_tile_bytes
    if wide:
        # wider values in shared memory: the smaller tile (more blocks per SM) unless it costs a pass
        small = greedy(t.wide_tile_bytes)
        if len(small) == len(passes):
            passes, tile = small, t.wide_tile_bytes
        if not t.balanced_wide:
            return passes
    if t.balanced_passes:
        # the smallest first (contiguous) pass that keeps the pass count: smaller tiles
        for c in range(1, passes[0].nbits):
            fewer = _greedy(stages, c, strided(tile))
            if len(fewer) == len(passes):
                return fewer
    return passes


def _greedy(stages: list[Stage], cap: int, strided_cap: int,
            first_strided: bool = False) -> tuple[Pass, ...]:
    """Stages into passes, each as wide as it may be: ``cap`` bits first, then ``strided_cap``
    (every pass ``strided_cap`` with ``first_strided``)."""
    passes: list[Pass] = []
    cur: list[Stage] = []
    first = 0
    cap = strided_cap if first_strided else cap
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
              device: str = "cpu", compute_dtype=None, *, batch: int = 1, interleave: int = 0,
              sms: int | None = None, split: bool | None = None, tuning: Tuning | None = None,
              clusters: int = 0) -> Plan:
    """Plan a length-n transform of ``dtype`` data for ``device`` ('cpu' or 'cuda').

    ``compute_dtype`` (fp32 for fp16/bf16 data, fp64 for fp32 data) keeps values in that
    dtype inside a pass and rounds them to ``dtype`` where the pass writes back.

    GPU layout (keywords; none changes a bit of the result): ``interleave`` = s > 0 plans a
    transform whose elements lie 2**s apart (a non-last axis of a C-contiguous array with
    2**s trailing elements) as strided passes in place, for plain Folklore; other variants
    keep s = 0 (the caller moves the axis last).  ``batch`` transforms on a device of ``sms``
    SMs: a lone single-pass Folklore transform of at least ``tuning.split_bytes`` with fewer
    transforms than SMs is split into two passes (``split`` True/False forces the choice).
    ``clusters``: log2 of the largest thread-block cluster the device runs (0: none); a plain
    Folklore transform (and with ``tuning.cluster_stabilized`` a globally stabilized one;
    Neumaier's for elements of ``tuning.cluster_neumaier_itemsize`` bytes or more) that
    takes three or more passes then takes two whose top bits span clusters of
    2**min(clusters, tuning.cluster_log) blocks (:func:`cluster_passes`), where its shape
    allows.
    """
    log2n = check_length(int(n), "n")
    dt = _dt.resolve(dtype)
    variants.check(algorithm, stabilizer)
    if device not in DEVICES:
        raise ValueError(f"device={device!r}; choose 'cpu' or 'cuda'")
    t = DEFAULT if tuning is None else tuning
    if not isinstance(t, Tuning):
        raise TypeError(f"tuning must be a fwht_gpu.Tuning, got {type(t).__name__}")
    cdt = dt
    if compute_dtype is not None:
        cdt = _dt.resolve(compute_dtype, "compute_dtype")
        if cdt != variants.wide_dtype(dt):
            raise ValueError(f"compute_dtype={_dt.short_name(cdt)} for {_dt.short_name(dt)} data: "
                             "use float32 for float16/bfloat16 data, float64 for float32 data")
        if stabilizer is not None:
            raise ValueError("compute_dtype and stabilizer are alternatives; choose one")
    if split is None:
        split = (sms is not None and batch < sms and n * dt.itemsize >= t.split_bytes)
    if isinstance(clusters, bool) or not isinstance(clusters, (int, np.integer)) or clusters < 0:
        raise ValueError(f"clusters={clusters!r}: log2 of the largest thread-block cluster (0: none)")
    return _plan(int(n), log2n, dt, algorithm, stabilizer, device, cdt, int(interleave),
                 bool(split), t, min(int(clusters), t.cluster_log))


@functools.lru_cache(maxsize=512)
def _plan(n: int, log2n: int, dt, algorithm: str, stabilizer, device: str, cdt, interleave: int,
          split: bool, t: Tuning, clusters: int = 0) -> Plan:
    """make_plan's plan for its checked arguments (a Plan is immutable: one object per
    distinct request, planned once)."""
    stages = _stages(log2n, algorithm)
    plain = algorithm == "folklore" and stabilizer is None and cdt == dt
    if interleave and plain and stages:
        return Plan(int(n), dt, algorithm, stabilizer, device,
                    _greedy(stages, 0, pass_bits(dt, True, tuning=t), first_strided=True),
                    cdt, interleave=int(interleave), tuning=t)
    foot = smem_bytes_per_element(dt, cdt if cdt != dt else None, stabilizer)
    passes = _group(stages, log2n, dt, foot, t)
    # global stabilizers: values and errors take the same stages in any grouping (stored as T
    # between passes, folded after the last), so their bits do not depend on it either
    stab_global = (stabilizer is not None and not stabilizer.endswith("-pass")
                   and algorithm == "folklore" and cdt == dt)
    stab_clusters = stab_global and t.cluster_stabilized and (
        stabilizer != "neumaier" or dt.itemsize >= t.cluster_neumaier_itemsize)
    if clusters and len(passes) >= 3 and (plain or stab_clusters):
        two = cluster_passes(stages, log2n, dt, clusters, t, foot)
        if two is not None:
            return Plan(int(n), dt, algorithm, stabilizer, device, two, cdt, tuning=t)
    if split and plain and len(passes) == 1 and log2n >= 2:
        lo = (log2n + 1) // 2
        passes = (Pass(0, lo, tuple(stages[:lo])), Pass(lo, log2n - lo, tuple(stages[lo:])))
        return Plan(int(n), dt, algorithm, stabilizer, device, passes, cdt, split=True, tuning=t)
    return Plan(int(n), dt, algorithm, stabilizer, device, passes, cdt, tuning=t)


def cluster_passes(stages: list[Stage], log2n: int, dtype, clusters: int,
                   t: Tuning = DEFAULT, footprint: int | None = None) -> tuple[Pass, ...] | None:
    """Two passes of a plain Folklore transform of 2**log2n (``stages``) with thread-block
    clusters of at most 2**clusters blocks, or None when its shape does not allow them;
    with ``footprint`` shared-memory bytes per element (a global stabilizer's value and error)
    the same rule over tiles of ``cluster_tile_bytes`` of both.

    The second (strided) pass keeps rows of 2**b2 (today's strided tiles: wide row segments)
    and spans clusters for up to ``clusters`` more bits; the first (contiguous) pass takes
    the rest: today's contiguous tile (b1 bits), then clusters over blocks of
    ``cluster_tile_bytes``. When the first pass cannot take more, the second's rows grow to
    what a block holds in row segments of ``cluster_segment_bytes``. FP32 with clusters of 16
    (first | second, cluster bits in brackets): 2^23 14 | 9 (1), 2^26 14 | 12 (4),
    2^27 15 (1) | 12 (4), 2^30 18 (4) | 12 (4)."""
    item = np.dtype(dtype).itemsize
    foot = footprint or item
    b1 = pass_bits(dtype, False, footprint=foot, tuning=t)
    b2 = pass_bits(dtype, True, footprint=foot, tuning=t)
    # one block's contiguous bits (at most a first pass's without clusters: a first pass of
    # more bits than that spans clusters)
    bc = min((t.cluster_tile_bytes // foot).bit_length() - 1, b1)
    rmax = (t.cluster_tile_bytes * item // foot // t.cluster_segment_bytes).bit_length() - 1
    s = min(b2 + clusters, log2n - b1)      # the second pass's bits
    c = log2n - s                           # the first's
    if c > bc + clusters:
        c = bc + clusters
        s = log2n - c
        if s > rmax + clusters:
            return None
    cl1 = max(0, c - bc)
    cl2 = min(clusters, max(0, s - b2))
    if s - cl2 > rmax or s < 1 or c < 1:
        return None
    return (Pass(0, c, tuple(stages[:c]), cl1), Pass(c, s, tuple(stages[c:]), cl2))
