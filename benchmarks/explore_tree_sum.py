"""The pairwise tree above the fused kernel (issue 16): ``kernels.tree_sum`` variants on nodes
of the fused kernel's shape, against a read of the same bytes.

    python benchmarks/explore_tree_sum.py --nodes 256 --reps 13 --log2b 15 [--json out.json]

The fused compression's "accumulate" stage is ``tree_sum`` of each launch's nodes (H100, n =
16384, FP32 2^15, d = 13: 256 nodes of 1.7 MB per launch, 0.33 ms each, about 1.3 TB/s).
Variants (each the same additions in the same order, so the same bits; checked):

* ``vV`` (``v1``, ``v2``, ``v4``): V columns per thread (``kernels.TREE_VECTOR``; the library:
  4 for float, 1 for double);
* ``lbB``: the kernel compiled for B resident blocks of 256 threads per SM
  (``__launch_bounds__(256, B)``: fewer registers, spills where 32 loads of V do not fit);
* ``halfH``: H of the 32 loads in flight before the sums start (the rest as the sums take
  them, in the loop over a vector's columns: for V > 1 issued per column unless the compiler
  merges them; fewer registers);
* ``pitchP``: the first level of the tree (32 nodes into one) over nodes whose rows are P
  values longer than a node (a node's row pitch off the powers of two), against the same
  launch at the nodes' own stride (``pitch0``): whether the strided reads of the 32 nodes
  meet in the same DRAM channels (timing only; the same kernel).

Session 39 (H100, ``results/h100/session39-tree-sum*``): the library's ``v4`` 0.300 ms (1.45
TB/s, 1.13x CuPy's own sum over axis 0 of the same nodes, 1.64 TB/s; a copy 2.74 TB/s read +
write); ``v1`` 0.316, ``v2`` 0.355, ``v4+lb2`` 0.484 ms (spills): none faster.  A kernel
reading longer runs per node in batches of 8-16 loads (not kept) took 216-255 registers in
ptxas (its stack of pending subtrees per column, 4-8 columns per thread) and was not run.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _events import event_median  # noqa: E402
from fwht_gpu import gpu, provenance  # noqa: E402
from fwht_gpu.cuda.modules import KernelModule  # noqa: E402
from pagh_mm.cuda import kernels  # noqa: E402

HEAD = "__global__ void tree_sum_32("
LOADS = """#pragma unroll
        for (int k = 0; k < 32; ++k)                 // every load in flight before the sums
            if (k < n) val[k] = x[(i64)k * sv];
"""
USE = "                    v = val[k].v[c];\n"


LIBRARY = kernels.FUSED         # (the variants replace kernels.FUSED while they run)


def module_for(variant: str) -> KernelModule:
    mod = KernelModule(LIBRARY.path, LIBRARY.options)
    src = LIBRARY.source
    for part in variant.split("+"):
        if part.startswith("lb"):
            assert src.count(HEAD) == 1
            src = src.replace(HEAD, f"__global__ void __launch_bounds__(256, {int(part[2:])}) tree_sum_32(")
        elif part.startswith("half"):
            h = int(part[4:])
            assert src.count(LOADS) == 1 and src.count(USE) == 1
            src = src.replace(LOADS, LOADS.replace("k < 32", f"k < {h}"))
            src = src.replace(USE, f"                    if (k >= {h}) val[k] = x[(i64)k * sv];\n" + USE)
    mod.__dict__["source"] = src
    return mod


def pitched_level(cp, nodes, pitch: int, timed) -> float:
    """Seconds of tree_sum_32's first level over ``nodes`` stored at a row pitch of
    ``pitch`` values more than a node (the library's vector width)."""
    import numpy as np
    count, stride = nodes.shape[0], nodes[0].size
    t_name = kernels.C_TYPES[nodes.dtype]
    v = kernels.TREE_VECTOR[t_name]
    assert (stride + pitch) % v == 0
    big = cp.zeros((count, stride + pitch), dtype=nodes.dtype)
    big[:, :stride] = nodes.reshape(count, stride)
    groups = -(-count // 32)
    out = cp.empty((groups, stride + pitch), dtype=nodes.dtype)
    fn = kernels.FUSED.function(f"tree_sum_32<{t_name},{v}>")
    launch = lambda: fn((kernels._grid(groups * (stride + pitch) // v),), (kernels.THREADS,),
                        (big, np.int64(count), np.int64(stride + pitch), out))
    return timed(launch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--reps", type=int, default=13)
    ap.add_argument("--log2b", type=int, default=15)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--variants", nargs="+", default=["v4", "v1", "v2", "v4+lb2", "v4+half16"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    nodes = cp.random.default_rng(1).standard_normal((a.nodes, a.reps, 1 << a.log2b),
                                                     dtype=cp.float32).astype(a.dtype)
    nbytes = nodes.nbytes
    t_name = kernels.C_TYPES[nodes.dtype]
    library, vector = kernels.FUSED, dict(kernels.TREE_VECTOR)

    def timed(f):
        return event_median(cp, f, a.repeats)

    rows = []
    read = timed(lambda: nodes.sum(axis=0))
    full = timed(lambda: nodes.sum())
    print(f"  cupy sum of every value {full * 1e3:.3f} ms ({nbytes / full / 1e12:.2f} TB/s)")
    copy = timed(lambda: cp.copyto(cp.empty_like(nodes), nodes))
    print(f"{a.nodes} nodes of {a.reps} x 2^{a.log2b} {a.dtype} ({nbytes / 1e6:.0f} MB): "
          f"cupy sum over axis 0 {read * 1e3:.3f} ms ({nbytes / read / 1e12:.2f} TB/s), "
          f"copy {copy * 1e3:.3f} ms ({2 * nbytes / copy / 1e12:.2f} TB/s read + write)", flush=True)
    ref = None
    try:
        for v in a.variants:
            if v.startswith("pitch"):
                t = pitched_level(cp, nodes, int(v[5:]), timed)
                print(f"  {v:18} {t * 1e3:7.3f} ms  {nbytes / t / 1e12:5.2f} TB/s (first level "
                      f"only)", flush=True)
                rows.append({"variant": v, "seconds": t, "tb_per_s": nbytes / t / 1e12})
                continue
            kernels.FUSED = module_for(v)
            kernels.TREE_VECTOR = dict(vector)
            for part in v.split("+"):
                if part.startswith("v"):
                    kernels.TREE_VECTOR[t_name] = int(part[1:])
            out = kernels.tree_sum(nodes)
            ref = out if ref is None else ref
            same = bool(cp.array_equal(out.view(cp.uint8), ref.view(cp.uint8)))
            t = timed(lambda: kernels.tree_sum(nodes))
            print(f"  {v:18} {t * 1e3:7.3f} ms  {nbytes / t / 1e12:5.2f} TB/s  {t / read:5.2f}x the "
                  f"cupy sum  same bits as the first {same}", flush=True)
            rows.append({"variant": v, "seconds": t, "tb_per_s": nbytes / t / 1e12,
                         "over_cupy_sum": t / read, "same_bits": same})
    finally:
        kernels.FUSED, kernels.TREE_VECTOR = library, vector
    if a.json:
        settings = {"nodes": a.nodes, "reps": a.reps, "log2b": a.log2b, "dtype": a.dtype,
                    "repeats": a.repeats, "cupy_sum_s": read, "copy_s": copy}
        provenance.write(provenance.record("pagh-tree-sum", rows, settings, device="gpu"), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
