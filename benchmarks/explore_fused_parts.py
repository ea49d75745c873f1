"""Where the fused compression kernel's time goes (issue 16): each part taken out in turn.

    python benchmarks/explore_fused_parts.py --case fp32:17:7 --case fp64:17:7 \
        --variants base nosketch nogather norounds noarith nodsmem notree [--json out.json]

A case is ``dtype:log2(buckets):reps`` for a dense N(0, 1) product of size ``--n`` (A
F-ordered, as the fastest layout).  Each variant compiles ``pagh_mm/cuda/fused.cu`` with one
part replaced by a trivial stand-in (text substitutions below, each asserted to apply; the
library's source is not changed) and times the compression's fused stage (``profile["fused"]``,
the kernel launches, GPU synchronized; median of ``--repeats``).  The answers of the ablated
variants are wrong by construction; ``base`` is the library's kernel.  The difference to
``base`` is what the part costs where it does not overlap with the others:

* ``nosketch``: the sketch by position only zero-fills the buffer (no table reads, gathers,
  sums; the sketch in key order, where the host takes it, is not replaced: see
  ``--key-order-load 0``);
* ``nogather``: the sketch reads x at its position's index instead of the key's (no dependent
  gather, no key list read; the rest as before);
* ``norounds``: the transform only loads its last round (no shared-memory rounds, no
  butterflies below the cluster's bits);
* ``noarith``: the rounds' shared-memory traffic and barriers without their butterflies;
* ``nodsmem``: the cluster's cross-block stage reads the block's own shared memory instead of
  the other blocks' (distributed shared memory), barriers kept;
* ``shapeVxC`` (``shape4x4``): not an ablation: the cluster kernels with 2^V values per thread
  in clusters of 2^C blocks (``kernels._cluster_log`` replaced while it runs; A's values in
  shared memory where they fit; the same bits), e.g. FP64 2^17 in 16 blocks of 512 threads;
* ``lb512``: not an ablation: the cluster kernels compiled for at most 512 threads per block
  (128 registers per thread instead of 64; only with a ``shape`` that launches 512);
* ``treepeel`` / ``treeunroll``: not ablations: the tree's merge loop with level 0 in code of
  its own, or every level unrolled (the same additions in the same order: the same bits);
* ``slotopaque`` / ``slotselect`` / ``slotsmem``: not ablations: the cluster kernel's tree
  slots through an opaque pointer, or a never-taken select (session 31: compiling in a level-0
  node in shared memory, even off at run time, made the FP64 2^17 cluster kernel 0.89x, by
  its register allocation; these did not reproduce it; that code is in commit a2153f0);
* ``keyafter``: not an ablation: the key-order sketch's one-key loop loads each key's value
  after its code, only for one-key buckets (the code before session 32; the library's loads
  both at once: 0.88-0.93x);
* ``slowgGeE`` (``slowg1e4``, ``slowg3e2``, ...; G and E from 1 to 4): not ablations: the
  slow buckets G per thread side by side, E keys of each at a time (the library: G = 2, E =
  2; the same sums);
* ``noslow`` / ``noonekey``: the key-order sketch without its slow buckets (several keys per
  bucket), or without its one-key loop (codes and values read, one-key buckets stored);
* ``noawait`` (an ablation: A's transform not kept for the product, which squares B's),
  ``outcs`` (the nodes written with streaming stores), ``onekeyg2`` / ``onekeyg8`` (the one-key
  loop's keys in flight per thread: 4 in the library);
* ``loggN`` (``logg3``): not an ablation: N levels of the tree summed in a block whose pending
  nodes are in device memory (``kernels.FUSED_GLOBAL_LOG_G``; the same bits);
* ``keysall``: not an ablation: the sketch in key order in every kernel of one block
  (``sketch_keys`` inlined; the host's codes at any buckets, FUSED_KEY_ORDER_MAX_LOAD keys per
  bucket at most; the same bits);
* ``maxgN`` (``maxg1``): not an ablation: at most N levels of the tree summed in a block
  whose pending nodes are in shared memory (``kernels.FUSED_MAX_LOG_G``; fewer levels, less
  shared memory, more blocks per SM; the same bits);
* ``keysgN`` (``keysg1``): not an ablation: at most N levels of the tree summed in the block
  of a Gram kernel that sketches in key order (no sketch stage in its shared memory) where
  the block is alone on its SM, 1024 threads (``kernels.FUSED_KEYS_MAX_LOG_G`` of every C
  type; the others FUSED_MAX_LOG_G; the same bits); ``withstage``: those kernels with the
  stage and the ``maxgN`` levels (the code before session 43);
* ``discard``: not an ablation: those pending nodes' lines dropped from L2 once read
  (``discard.global.L2``: no write-back of dead rows; the same bits; only the kernels of the
  most buckets per block);
* ``codesna`` / ``codescs`` / ``listsna``: not ablations: the one-key loop's codes loaded
  without allocating in L1 or as streaming loads, the slow buckets' lists without L1 (so that
  the column keeps the L1 for the slow buckets' gathers; the same bits);
* ``chunkN`` (``chunk2048``): not an ablation: the key-order sketch's chunks of N keys
  (fused.cu's SLOW_CHUNK and ``sketch.SLOW_CHUNK``; the library: 4096), ``chunk1048576``
  its order before session 40 (every slow bucket after the whole one-key loop; the same
  bits); ``nopipe`` / ``pipe``: the next chunk's keys loaded after the slow buckets, not
  before, or before for double T too (the library: before for float T only);
* ``unitkey``: not an ablation where the keys are contiguous (s_key = 1, the library's copies):
  the key-order sketch's key stride the constant 1 (no 64-bit multiplies in the keys'
  addresses);
* ``notree``: the group's pending tree nodes are neither stored nor read (device memory for
  clusters).

Each row prints the kernels it launched and the shared memory each asked for (A's values in
shared memory: the name's last template argument) and whether its sketch has the bits of
``base``.

Variants join with ``+`` (``nosketch+norounds``)."""
from __future__ import annotations

import argparse
import statistics
import time

import pagh_mm
from fwht_gpu import gpu, provenance
from fwht_gpu.cuda.modules import KernelModule
from pagh_mm import sketch
from pagh_mm.cuda import kernels

#: group_tree's merge loop in fused.cu, and two rewrites of it (the same additions in the same
#: order, so the same bits): ``treepeel`` level 0 (every term) in code of its own, its slot
#: addresses known at compile time; ``treeunroll`` every level so.
TREE_LOOP = """        int level = 0;                    // merge with the waiting left siblings
        while (level < LOG_G && (i >> level) & 1) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
            have &= ~(1 << level);
            ++level;
        }
"""
TREE_PEEL = """        int level = 0;
        if (LOG_G && (i & 1)) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(0, at(q)), v[q]);
            have &= ~1;
            level = 1;
            while (level < LOG_G && (i >> level) & 1) {
#pragma unroll
                for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
                have &= ~(1 << level);
                ++level;
            }
        }
"""
TREE_UNROLL = """        int level = LOG_G;
#pragma unroll
        for (int l = 0; l < LOG_G; ++l) {
            if (level == LOG_G) {
                if ((i >> l) & 1) {
#pragma unroll
                    for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(l, at(q)), v[q]);
                    have &= ~(1 << l);
                } else {
                    level = l;
                }
            }
        }
"""

#: The cluster kernel's slot of the tree (fused.cu), and a run-time condition never true.
CLUSTER_SLOT = """    auto slot = [&](int level, int idx) -> T& { return slots[(cid * LOG_G + level) * b + idx]; };
"""
NEVER = """    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const bool never = dyn == 0;
"""

#: Session 32: the key-order sketch's one-key loop loading every key's value beside its code
#: (kept in the library; ``keyafter`` puts back the code before it: the value loaded after its
#: code, for slow keys not at all).  Its slow buckets walked 2 or 4 at a time per thread from
#: the bucket lists (session 32: 0.87-1.40x, not kept) gave way to the compact lists in
#: session 37 (``slowgGeE``).
ONEKEY_LOAD = ('        cu[g] = i < i_hi ? c[i] : CODE_SLOW;\n        if (!(cu[g] & CODE_SLOW)) v[g] = (double)x[i * s_key];\n',
               '        const bool in = i < i_hi;\n        cu[g] = in ? c[i] : CODE_SLOW;\n        v[g] = in ? (double)x[i * s_key] : 0.0;\n')
#: Session 37: the slow buckets' loop in fused.cu (compact lists, G buckets per thread side by
#: side, E keys of each at a time); ``slowgGeE`` variants (G, E of 1 .. 4) change G and E.
SLOW_GE = "    constexpr int G = 2, E = 2;\n"
SLOW_LOOP = "    for (int r0 = r_lo + (int)threadIdx.x; r0 < r1; r0 += G * step) {"

#: group_tree's reads of a pending node (the merge loop's and the final loop's).
MERGE_READ = """            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
            have &= ~(1 << level);
"""
FINAL_READ = """        if (have & (1 << level)) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
"""
#: Drops the lines of a warp's values of a row in device memory from L2 (their contents
#: undefined, never written back); p0: the thread's element at(0) = row + threadIdx.x.
DISCARD_ROW = """template <typename T, int VPT>
__device__ __forceinline__ void discard_row(T* p0)
{
    if (!__isGlobal(p0)) return;
    __syncwarp();
    constexpr int LINES = 32 * (int)sizeof(T) / 128, PER = 128 / (int)sizeof(T);
    const int lane = threadIdx.x & 31;
    if (lane < VPT * LINES) {
        T* line = p0 - lane + (lane / LINES) * 1024 + (lane % LINES) * PER;
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(line) : "memory");
    }
}

"""
#: The one-key loop's code load, the slow buckets' head, and a load that skips L1.
ONEKEY_CODE = "        cu[g] = in ? c[i] : CODE_SLOW;\n"
ONEKEY_HEAD = "template <typename S>\n__device__ __forceinline__ void one_key_load("
LD_NO_L1 = """#ifndef LD_NO_L1
#define LD_NO_L1
__device__ __forceinline__ unsigned ld_no_l1(const unsigned* p)
{
    unsigned v;
    asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
#endif

"""

PATCHES = {
    "nosketch": [(
        "    for (int u = threadIdx.x; u < nb; u += blockDim.x) buf[pad<T>(u)] = T(0);  // empty buckets\n",
        "    for (int u = threadIdx.x; u < nb; u += blockDim.x) buf[pad<T>(u)] = T(0);  // empty buckets\n"
        "    if (threadIdx.x == 0) buf[pad<T>(0)] = Mul<T>::from((double)x[0] + (double)p0);\n"
        "    return;\n")],
    "nogather": [("(double)x[keys[c0 + i] * s_key]", "(double)x[((c0 + i) & 1023) * s_key]")],
    "norounds": [(
        "    constexpr int R = LOG_VPT, VPT = 1 << LOG_VPT;\n    auto one_round",
        "    constexpr int R = LOG_VPT, VPT = 1 << LOG_VPT;\n"
        "    {\n"
        "        const int lb = LOGB > 0 ? LOGB : logb;\n"
        "        const int th = LOGB > 0 ? 1 << (LOGB - LOG_VPT) : threads;\n"
        "        const int lo = ((lb - 1) / R) * R, r = lb - lo;\n"
        "        __syncthreads();\n"
        "#pragma unroll\n"
        "        for (int q = 0; q < VPT; ++q) v[q] = buf[pad<T>(round_index<VPT>(q, lo, r, th))];\n"
        "        return;\n"
        "    }\n"
        "    auto one_round")],
    "noarith": [("            radix2_stages<T, LOG_VPT, true>(v, R);\n", "\n"),
                ("        radix2_stages<T, LOG_VPT, true>(v, r);     // every group of 2^r registers\n",
                 "\n")],
    "nodsmem": [("ld_cluster<T>(map_rank(x, r))", "x[r]")],
    "lb512": [("__global__ void FWHT_CLUSTER_DIMS(1 << LOG_CL) __launch_bounds__(1024)",
               "__global__ void FWHT_CLUSTER_DIMS(1 << LOG_CL) __launch_bounds__(512)")],
    # not ablations: the tree's merge loop with level 0 in code of its own, or every level
    "treepeel": [(TREE_LOOP, TREE_PEEL)],
    "treeunroll": [(TREE_LOOP, TREE_UNROLL)],
    # not ablations: the cluster kernel's tree slots through an opaque (generic) pointer; a
    # select, never taken, between two rows of device memory; or between shared memory and
    # device memory
    "slotopaque": [(CLUSTER_SLOT, CLUSTER_SLOT.replace(
        "{ return slots[(cid * LOG_G + level) * b + idx]; }",
        "{\n        T* p = slots + (cid * LOG_G + level) * b + idx;\n"
        "        asm volatile(\"\" : \"+l\"(p));\n        return *p;\n    }"))],
    "slotselect": [(CLUSTER_SLOT, NEVER + CLUSTER_SLOT.replace(
        "{ return slots", "{ return level == 0 && never ? o[idx] : slots"))],
    "slotsmem": [(CLUSTER_SLOT, NEVER + CLUSTER_SLOT.replace(
        "{ return slots", "{ return level == 0 && never ? buf[idx] : slots"))],
    "keyafter": [(ONEKEY_LOAD[1], ONEKEY_LOAD[0])],
    **{f"slowg{g}e{e}": [(SLOW_GE, f"    constexpr int G = {g}, E = {e};\n")]
       for g in range(1, 5) for e in range(1, 5)},
    # ablations of the key-order sketch (session 37): its slow buckets (several keys) not
    # summed; its one-key loop (codes and values read, one-key buckets stored) skipped
    "noslow": [(SLOW_LOOP, SLOW_LOOP.replace("= r_lo +", "= r1 +"))],
    "noonekey": [("        const bool in = i < i_hi;\n", "        const bool in = false;\n")],
    # session 37: A's last round not kept for the product (an ablation: B's squared); the
    # nodes written with streaming stores (st.global.cs); the one-key loop's keys in flight
    "noawait": [("#pragma unroll\n"
                 "        for (int q = 0; q < VPT; ++q) o[round_index<VPT>(q, last, rl, threads)] = v[q];\n"
                 "        __syncthreads();                                  // A's last round is read\n",
                 "        __syncthreads();                                  // A's last round is read\n"),
                ("            v[q] = Mul<T>::mul(o[round_index<VPT>(q, last, rl, threads)], v[q]);",
                 "            v[q] = Mul<T>::mul(v[q], v[q]);")],
    "outcs": [("\n    for (int q = 0; q < VPT; ++q) o[round_index<VPT>(q, last, rl, threads)] = v[q];\n}\n",
               "\n    for (int q = 0; q < VPT; ++q) __stcs(&o[round_index<VPT>(q, last, rl, threads)], v[q]);\n}\n")],
    **{f"onekeyg{g}": [("constexpr int ONE_KEY = 4;", f"constexpr int ONE_KEY = {g};")]
       for g in (2, 8)},
    # session 39: the tree's pending rows in device memory dropped from L2 once read (no
    # write-back of dead lines; the kernels of the most buckets per block only: their
    # register q holds element tid + 1024 q' of a permutation q' of q)
    "discard": [(MERGE_READ, MERGE_READ + "            discard_row<T, VPT>(&slot(level, at(0)));\n"),
                (FINAL_READ, FINAL_READ + "            discard_row<T, VPT>(&slot(level, at(0)));\n"),
                ("template <typename T, int VPT, int LOG_G, typename Term, typename At, typename Slot>\n",
                 DISCARD_ROW + "template <typename T, int VPT, int LOG_G, typename Term, typename At, typename Slot>\n")],
    # session 39: the one-key loop's codes (read once per term) loaded without allocating in
    # L1 (``ld.global.L1::no_allocate``) or as streaming loads (``__ldcs``), so that the column
    # x keeps the L1 for the slow buckets' gathers; ``listsna``: the slow buckets' lists so too
    "codesna": [(ONEKEY_CODE, ONEKEY_CODE.replace("c[i]", "ld_no_l1(c + i)")),
                (ONEKEY_HEAD, LD_NO_L1 + ONEKEY_HEAD)],
    "codescs": [(ONEKEY_CODE, ONEKEY_CODE.replace("c[i]", "__ldcs(c + i)"))],
    "listsna": [("skey[q[g] + j]", "ld_no_l1(skey + q[g] + j)"),
                ("w[g] = in ? slow[r] : 0;", "w[g] = in ? (int)ld_no_l1((const unsigned*)slow + r) : 0;"),
                ("q[g] = in ? sptr[r] : 0;", "q[g] = in ? (int)ld_no_l1((const unsigned*)sptr + r) : 0;"),
                ("qe[g] = in ? sptr[r + 1] : 0;", "qe[g] = in ? (int)ld_no_l1((const unsigned*)sptr + r + 1) : 0;"),
                (ONEKEY_HEAD, LD_NO_L1 + ONEKEY_HEAD)],
    # session 40: the key-order sketch's chunks of keys (after each, the slow buckets whose
    # last key is in it; the library: 4096); chunk1048576 sums every slow bucket after the
    # whole one-key loop (the order before session 40)
    **{f"chunk{c}": [("constexpr int SLOW_CHUNK = 4096;", f"constexpr int SLOW_CHUNK = {c};")]
       for c in (1024, 2048, 8192, 16384, 1 << 20)},
    "nopipe": [("    if (sizeof(T) == sizeof(float) && ONE_KEY * step == SLOW_CHUNK) {", "    if (false) {")],
    "pipe": [("    if (sizeof(T) == sizeof(float) && ONE_KEY * step == SLOW_CHUNK) {",
              "    if (ONE_KEY * step == SLOW_CHUNK) {")],
    # session 42: the sketch in key order in every kernel of one block (inlined where the
    # kernel inlines its sketch; the host gives the codes at any buckets: use_keys)
    "keysall": [("__device__ __noinline__ void sketch_keys(", "__device__ __forceinline__ void sketch_keys("),
                ("    } else {\n        sketch<T, S>(buf, st, X, s_key, s_vec, indptr, keys, sgn, bpos, k, t, b, 0, b);\n    }",
                 "    } else {\n        if (code)\n            sketch_keys<T, S>(buf, X, s_key, s_vec, n_keys, code, cptr, slow, sptr, skey, k, t, b);\n"
                 "        else\n            sketch<T, S>(buf, st, X, s_key, s_vec, indptr, keys, sgn, bpos, k, t, b, 0, b);\n    }")],
    # not an ablation where every factor's keys are contiguous (s_key = 1: the C copies of
    # GPU_FUSED_CONTIGUOUS): the key-order sketch's key stride a constant 1 (what a unit-stride
    # specialization would save: the 64-bit multiplies of the keys' addresses)
    "unitkey": [("one_key_load<S>(cu, v, x, s_key,", "one_key_load<S>(cu, v, x, (i64)1,"),
                ("slow_buckets<T, S>(buf, x, s_key,", "slow_buckets<T, S>(buf, x, (i64)1,")],
    "notree": [("v[q] = Num<T>::add(slot(level, at(q)), v[q]);", "v[q] = Num<T>::add(v[q], v[q]);"),
               ("for (int q = 0; q < VPT; ++q) slot(level, at(q)) = v[q];",
                "for (int q = 0; q < VPT; ++q) {}")],
}



def module_for(variant: str) -> KernelModule:
    """The fused kernels' module with the variant's substitutions applied."""
    parts = variant.split("+")
    if "lb512" in parts and not any(p.startswith("shape") for p in parts):
        raise SystemExit(f"{variant}: lb512 needs a shapeVxC that launches at most 512 threads")
    mod = KernelModule(kernels.FUSED.path, kernels.FUSED.options)
    launched = mod.launched = {}
    load = mod.function

    def function(name, smem_bytes=0, cluster_blocks=0):     # what each launch asked for
        launched[name] = smem_bytes
        return load(name, smem_bytes, cluster_blocks)
    mod.function = function
    src = kernels.FUSED.source
    if variant != "base":
        for part in variant.split("+"):
            for old, new in PATCHES.get(part, ()):
                assert src.count(old) >= 1, (part, old)
                src = src.replace(old, new)
    mod.__dict__["source"] = src
    return mod


def use_level(variant: str, prefix: str, name: str, default: int) -> None:
    """``kernels.<name>`` of a ``<prefix>N`` variant (``loggN``: FUSED_GLOBAL_LOG_G, levels of
    the tree summed in a block whose pending nodes are in device memory; ``maxgN``:
    FUSED_MAX_LOG_G, the most levels summed in a block whose pending nodes are in shared
    memory); else the library's ``default``."""
    setattr(kernels, name, default)
    for part in variant.split("+"):
        if part.startswith(prefix):
            setattr(kernels, name, int(part[len(prefix):]))


def use_keys(variant: str, default) -> None:
    """``kernels.fused_key_order`` of a ``keysall`` variant (key order wherever one block holds
    the buckets and the load allows; else the library's ``default``)."""
    kernels.fused_key_order = default
    if "keysall" in variant.split("+"):
        def everywhere(keys, log2b, dtype, gram=False):
            name = kernels.C_TYPES[kernels.np.dtype(dtype)]
            return keys <= kernels.FUSED_KEY_ORDER_MAX_LOAD[name] * (1 << log2b) and \
                not kernels._cluster_log(log2b, dtype)[1]
        kernels.fused_key_order = everywhere


def use_stage(variant: str, default) -> None:
    """``kernels._stageless`` of a ``withstage`` variant (never: every block with its stage);
    else the library's ``default``."""
    kernels._stageless = default
    if "withstage" in variant.split("+"):
        kernels._stageless = lambda *args: False


def use_chunk(variant: str, default: int) -> None:
    """``sketch.SLOW_CHUNK`` of a ``chunkN`` variant (the host's order of the slow buckets
    must match the kernel's chunks; else the library's ``default``)."""
    sketch.SLOW_CHUNK = default
    for part in variant.split("+"):
        if part.startswith("chunk"):
            sketch.SLOW_CHUNK = int(part[5:])


def use_shape(variant: str, cluster_log) -> None:
    """The cluster shape of a ``shapeVxC`` variant for every cluster size (else the library's
    ``cluster_log``) as ``kernels._cluster_log``."""
    kernels._cluster_log = cluster_log
    for part in variant.split("+"):
        if part.startswith("shape"):
            shape = tuple(int(x) for x in part[5:].split("x"))
            kernels._cluster_log = (lambda log2b, dtype, shape=shape:
                                    shape if cluster_log(log2b, dtype)[1] else (0, 0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--gram", type=int, default=0,
                    help="time compress_gram of an N(0, 1) X of this many samples x --n "
                         "features (C-ordered, as pagh-mm bench --gram) instead of a product")
    ap.add_argument("--case", action="append", help="dtype:log2b:reps (fp32:17:7)")
    ap.add_argument("--variants", nargs="+",
                    default=["base", "nosketch", "nogather", "norounds", "noarith", "nodsmem",
                             "notree"])
    ap.add_argument("--key-order-load", type=float, nargs="+", default=[None],
                    help="time each variant with kernels.FUSED_KEY_ORDER_MAX_LOAD at these "
                         "values (0: every factor sketched by position; inf: in key order "
                         "wherever one block holds the buckets)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    library = kernels.FUSED
    cases = []
    for c in a.case or ["fp32:17:7", "fp64:17:7"]:
        dt, lb, r = c.split(":")
        cases.append(({"fp32": "float32", "fp64": "float64"}[dt], int(lb), int(r)))
    rng = cp.random.default_rng(a.n)
    if a.gram:
        X = rng.standard_normal((a.gram, a.n))

        def run(rows=None, **kw):
            return pagh_mm.compress_gram(X if rows is None else X[:rows], **kw)
    else:
        A = cp.asfortranarray(rng.standard_normal((a.n, a.n)))
        B = rng.standard_normal((a.n, a.n))

        def run(rows=None, **kw):
            return pagh_mm.compress(A if rows is None else A[:, :rows],
                                    B if rows is None else B[:rows], **kw)
    modules = {v: module_for(v) for v in a.variants}
    # the kernels each case launches, compiled for every variant at once (NVRTC in threads)
    names = set()
    cluster_log = kernels._cluster_log
    kernels.FUSED = library
    for v in ["base"] + [v for v in a.variants if "shape" in v]:
        use_shape(v, cluster_log)
        for dt, lb, r in cases:
            run(64, buckets=1 << lb, reps=r, seed=1, dtype=dt)
            names |= {nm for (_, nm) in library._functions}
    kernels._cluster_log = cluster_log
    t0 = time.perf_counter()
    for v in a.variants:
        modules[v].precompile(sorted(names), wait=False)
    for v in a.variants:
        for nm in names:
            modules[v].function(nm)
        modules[v].launched.clear()
    print(f"compiled {len(names)} kernels x {len(a.variants)} variants in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    default_log_g = kernels.FUSED_GLOBAL_LOG_G
    default_max_g = kernels.FUSED_MAX_LOG_G
    default_keys = kernels.fused_key_order
    default_keys_g = getattr(kernels, "FUSED_KEYS_MAX_LOG_G", None)  # (older code: none)
    default_stageless = getattr(kernels, "_stageless", None)
    default_chunk = getattr(sketch, "SLOW_CHUNK", 0)          # (older code: none)
    default_load = getattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", None)   # (older code: none)
    for (dt, lb, r), load in ((c, x) for c in cases for x in a.key_order_load):
        base = None
        kernels.FUSED_KEY_ORDER_MAX_LOAD = default_load if load is None else \
            {"float": load, "double": load}
        ref = None
        for v in a.variants:
            kernels.FUSED = modules[v]
            use_shape(v, cluster_log)
            use_level(v, "logg", "FUSED_GLOBAL_LOG_G", default_log_g)
            use_level(v, "maxg", "FUSED_MAX_LOG_G", default_max_g)
            use_level(v, "keysg", "FUSED_KEYS_MAX_LOG_G", default_keys_g)
            if isinstance(kernels.FUSED_KEYS_MAX_LOG_G, int):      # (keysgN: every C type)
                kernels.FUSED_KEYS_MAX_LOG_G = dict.fromkeys(("float", "double"),
                                                             kernels.FUSED_KEYS_MAX_LOG_G)
            use_stage(v, default_stageless)
            use_chunk(v, default_chunk)
            use_keys(v, default_keys)
            ts, tot, acc = [], [], []
            out = None
            for i in range(a.repeats + 1):
                prof = {}
                t1 = time.perf_counter()
                try:
                    out = run(buckets=1 << lb, reps=r, seed=1, dtype=dt, profile=prof).sketch
                except OverflowError:           # an ablated kernel's values may overflow:
                    out = None                  # its fused stage was timed before the check
                cp.cuda.Device().synchronize()
                if i:                                     # the first run warms up
                    ts.append(prof["fused"])
                    acc.append(prof.get("accumulate", 0.0))
                    tot.append(time.perf_counter() - t1)
            t = statistics.median(ts)
            base = t if v == "base" else base
            if v == "base":
                ref = out
            same = out is not None and ref is not None and out.shape == ref.shape and \
                bool(cp.array_equal(out.view(cp.uint8), ref.view(cp.uint8)))     # bits
            rel = f"  {t / base:5.2f}x base, saves {base - t:7.4f} s" if base else ""
            print(f"{'gram ' + str(a.gram) + ' x ' if a.gram else ''}n={a.n} {dt} b=2^{lb} d={r} load {load}: "
                  f"{v:28} fused {t:8.4f} s  accumulate {statistics.median(acc):7.4f} s  total "
                  f"{statistics.median(tot):8.4f} s{rel}  same bits as base {same}", flush=True)
            fused = {nm: sm for nm, sm in modules[v].launched.items() if "terms" in nm}
            print("    launched: " + ", ".join(f"{nm} ({sm} bytes of shared memory)"
                                            for nm, sm in fused.items()), flush=True)
            modules[v].launched.clear()
            rows.append({"n": a.n, "gram_samples": a.gram, "dtype": dt, "log2b": lb, "reps": r, "variant": v,
                         "launched": fused,
                         "key_order_max_load": kernels.FUSED_KEY_ORDER_MAX_LOAD,
                         "fused_s": t, "fused_runs_s": ts,
                         "accumulate_s": statistics.median(acc), "total_s": statistics.median(tot),
                         "same_bits_as_base": same})
            cp.get_default_memory_pool().free_all_blocks()
    kernels.FUSED = library
    kernels.FUSED_GLOBAL_LOG_G = default_log_g
    kernels.FUSED_MAX_LOG_G = default_max_g
    kernels.FUSED_KEYS_MAX_LOG_G = default_keys_g
    kernels._stageless = default_stageless
    kernels.fused_key_order = default_keys
    sketch.SLOW_CHUNK = default_chunk
    kernels.FUSED_KEY_ORDER_MAX_LOAD = default_load
    kernels._cluster_log = cluster_log
    if a.json:
        settings = {"n": a.n, "gram_samples": a.gram, "cases": a.case, "variants": a.variants, "repeats": a.repeats,
                    "key_order_load": a.key_order_load,
                    "layout": "X C-order, N(0, 1) (Gram)" if a.gram else
                    "A F-order, B C-order, N(0, 1)"}
        provenance.write(provenance.record("pagh-fused-parts", rows, settings, device="gpu"),
                         a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
