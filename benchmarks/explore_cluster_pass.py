"""Two passes up to 2^30 with thread-block clusters (issue 19 item 4, exploration).

A single FP32 transform of 2^30 takes three passes today (a pass holds at most 2^15 contiguous
elements, or 2^8 rows of 128-byte segments, in one thread block's shared memory). A cluster of
2^CL thread blocks (Hopper) holds 2^CL times that: each block transforms its own rows in shared
memory, then the cluster's last CL bits are transformed with the other blocks' values read
through distributed shared memory, and written to global memory. Two such passes cover 30
bits: a contiguous one (2^L contiguous elements per block) and a strided one (2^L rows of
2^G-element segments per block).

This script times standalone kernels of that shape (FP32, Folklore, unnormalized) against
``fwht_gpu.fwht`` (three passes), a device copy and ``cupy.fft.rfft`` of the same length, and
checks that the two passes give fwht_gpu's bits (both apply the stages in ascending bit order).

    python benchmarks/explore_cluster_pass.py [--log2n 30] [--threads 512] [--rb 4]
        [--configs A B C D E] [--out JSON]
"""
from __future__ import annotations

import argparse
import os
import sys

import cupy as cp
import numpy as np

import fwht_gpu as F
from fwht_gpu import provenance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _events import event_median  # noqa: E402

SOURCE = r"""
typedef long long i64;

// the cluster's operations in PTX (no header needed under NVRTC)
__device__ __forceinline__ int cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// the shared::cluster address of p (this block's shared memory) in block `rank`'s
__device__ __forceinline__ unsigned map_rank(const void* p, int rank)
{
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(out) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    return out;
}
__device__ __forceinline__ float ld_cluster(unsigned addr)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ int slot(int i) { return i + (i >> 5); }   // a pad every 32 floats

template <int K>
__device__ __forceinline__ void stages(float* v)      // K radix-2 stages, ascending bits
{
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int j = 0; j < (1 << K); ++j)
            if (!(j & (1 << s))) {
                const float a = v[j], b = v[j | (1 << s)];
                v[j] = __fadd_rn(a, b);
                v[j | (1 << s)] = __fsub_rn(a, b);
            }
}

// one round of K row bits from bit B of the block's 2^LOG_L x 2^LOG_G tile in shared memory
template <int LOG_L, int LOG_G, int THREADS, int B, int K>
__device__ __forceinline__ void local_round(float* sm, int tid)
{
    constexpr int G = 1 << LOG_G, ITEMS = 1 << (LOG_L + LOG_G - K);
#pragma unroll 1
    for (int i = tid; i < ITEMS; i += THREADS) {
        const int g = i & (G - 1), rest = i >> LOG_G;
        const int r0 = ((rest >> B) << (B + K)) | (rest & ((1 << B) - 1));
        float v[1 << K];
#pragma unroll
        for (int j = 0; j < (1 << K); ++j) v[j] = sm[slot(((r0 | (j << B)) << LOG_G) | g)];
        stages<K>(v);
#pragma unroll
        for (int j = 0; j < (1 << K); ++j) sm[slot(((r0 | (j << B)) << LOG_G) | g)] = v[j];
    }
}

template <int LOG_L, int LOG_G, int THREADS, int RB, int B>
__device__ __forceinline__ void local_rounds(float* sm, int tid)
{
    if constexpr (B < LOG_L) {
        constexpr int K = (LOG_L - B) < RB ? (LOG_L - B) : RB;
        local_round<LOG_L, LOG_G, THREADS, B, K>(sm, tid);
        __syncthreads();
        local_rounds<LOG_L, LOG_G, THREADS, RB, B + K>(sm, tid);
    }
}

// Bits s .. s + LOG_L + LOG_CL - 1 of the index (row r of a cluster tile at r << s; s = 0 and
// LOG_G = 0: a contiguous pass): block q of a cluster holds rows q 2^LOG_L .. of 2^LOG_G
// consecutive elements each.
template <int LOG_L, int LOG_G, int LOG_CL, int THREADS, int RB>
__global__ void __cluster_dims__(1 << LOG_CL, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS)
cluster_pass(const float* src, float* dst, int s)    // (src may be dst: pass 2 runs in place)
{
    constexpr int L = 1 << LOG_L, G = 1 << LOG_G, P = L * G, C = 1 << LOG_CL;
    extern __shared__ float sm[];
    const int q = cluster_rank(), tid = threadIdx.x;
    const i64 c = blockIdx.x >> LOG_CL;
    const int seg_bits = s - LOG_G;
    const i64 seg = c & (((i64)1 << seg_bits) - 1), outer = c >> seg_bits;
    const i64 base = (outer << (s + LOG_L + LOG_CL)) + (seg << LOG_G);
    // round 0 fused with the load: rows r0 .. r0 + 2^K0 - 1 of one group per item
    constexpr int K0 = LOG_L < RB ? LOG_L : RB;
#pragma unroll 1
    for (int i = tid; i < (P >> K0); i += THREADS) {
        const int g = i & (G - 1), r0 = (i >> LOG_G) << K0;
        float v[1 << K0];
        if constexpr (LOG_G == 0 && K0 >= 2) {      // contiguous: 16-byte vectors
            const float4* p4 = reinterpret_cast<const float4*>(src + base + q * L + r0);
#pragma unroll
            for (int j = 0; j < (1 << K0) / 4; ++j) {
                const float4 w = __ldcs(p4 + j);
                v[4 * j] = w.x; v[4 * j + 1] = w.y; v[4 * j + 2] = w.z; v[4 * j + 3] = w.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < (1 << K0); ++j)
                v[j] = __ldcs(src + base + ((i64)(q * L + r0 + j) << s) + g);
        }
        stages<K0>(v);
#pragma unroll
        for (int j = 0; j < (1 << K0); ++j) sm[slot(((r0 + j) << LOG_G) | g)] = v[j];
    }
    __syncthreads();
    local_rounds<LOG_L, LOG_G, THREADS, RB, K0>(sm, tid);
    cluster_sync();                         // every block's rows are transformed
    unsigned remote[C];
#pragma unroll
    for (int j = 0; j < C; ++j) remote[j] = map_rank(sm, j);
    constexpr int SLICE = P / C;
#pragma unroll 1
    for (int e = q * SLICE + tid; e < (q + 1) * SLICE; e += THREADS) {
        float v[C];
#pragma unroll
        for (int j = 0; j < C; ++j) v[j] = ld_cluster(remote[j] + 4u * (unsigned)slot(e));
        stages<LOG_CL>(v);
        const int r = e >> LOG_G, g = e & (G - 1);
#pragma unroll
        for (int j = 0; j < C; ++j) __stcs(dst + base + ((i64)(j * L + r) << s) + g, v[j]);
    }
    cluster_sync();                         // no block leaves while others read its tile
}
"""

#: (name, [(LOG_L, LOG_G, LOG_CL, s) of pass 1, of pass 2]) for n = 2^30
CONFIGS = {
    "A: 2^15 x 8 contiguous, 2^9 x 32 x 8 strided": [(15, 0, 3, 0), (9, 5, 3, 18)],
    "B: 2^14 x 8 contiguous, 2^10 x 32 x 8 strided": [(14, 0, 3, 0), (10, 5, 3, 17)],
    "C: 2^14 x 8 contiguous, 2^10 x 16 x 8 strided": [(14, 0, 3, 0), (10, 4, 3, 17)],
    "D: 2^14 x 16 contiguous, 2^8 x 64 x 16 strided": [(14, 0, 4, 0), (8, 6, 4, 18)],
    "E: 2^13 x 16 contiguous, 2^9 x 32 x 16 strided": [(13, 0, 4, 0), (9, 5, 4, 17)],
}


def _name(L, G, CL, threads, rb):
    return f"cluster_pass<{L},{G},{CL},{threads},{rb}>"


def _ms(fn, runs=10):
    return event_median(cp, fn, runs) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log2n", type=int, default=30)
    ap.add_argument("--threads", type=int, nargs="+", default=[512])
    ap.add_argument("--rb", type=int, nargs="+", default=[4], help="row bits per round")
    ap.add_argument("--configs", nargs="+", default=list("ABCDE"), help="CONFIGS' letters")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    n = 1 << a.log2n
    configs = {k: v for k, v in CONFIGS.items() if k[0] in a.configs}
    variants = [(th, rb) for th in a.threads for rb in a.rb]
    names = sorted({_name(L, G, CL, th, rb) for cfg in configs.values() for L, G, CL, _ in cfg
                    for th, rb in variants})
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    x = cp.random.default_rng(1).standard_normal(n, dtype=cp.float32)
    y = cp.empty_like(x)
    ref = F.fwht(x)
    t_ref = _ms(lambda: F.fwht(x, out=y))
    t_copy = _ms(lambda: cp.copyto(y, x))
    t_fft = _ms(lambda: cp.fft.rfft(x))
    cp.get_default_memory_pool().free_all_blocks()
    rows = []
    print(f"n = 2^{a.log2n} FP32: fwht_gpu {t_ref:.2f} ms, copy {t_copy:.2f} ms, rfft {t_fft:.2f} ms",
          flush=True)
    for (label, passes), (th, rb) in ((c, v) for c in configs.items() for v in variants):
        (L1, G1, C1, s1), (L2, G2, C2, s2) = passes
        assert s1 == G1 == 0 and s2 >= G2 > 0, passes     # a contiguous pass, then a strided one
        if L1 + C1 != s2 or s2 + L2 + C2 != a.log2n:
            print(f"{label}: covers 2^{s2 + L2 + C2}, not 2^{a.log2n}: skipped", flush=True)
            continue
        label = f"{label}, {th} threads, rounds of {rb} bits"
        launches = []
        try:
            for L, G, CL, s in passes:
                fn = mod.get_function(_name(L, G, CL, th, rb))
                P = 1 << (L + G)
                smem = (P + P // 32) * 4
                fn.max_dynamic_shared_size_bytes = smem
                if CL > 3:          # clusters of 16: a non-portable size, allowed by attribute
                    cp.cuda.driver.funcSetAttribute(fn.kernel.ptr, 14, 1)
                launches.append((fn, n >> (L + G), smem, s))
            out = cp.empty_like(x)

            def run(i, src, dst):
                fn, blocks, smem, s = launches[i]
                fn((blocks,), (th,), (src, dst, np.int32(s)), shared_mem=smem)

            run(0, x, out)
            run(1, out, out)
            same = bool(cp.array_equal(out.view(cp.uint32), ref.view(cp.uint32)))
            t1 = _ms(lambda: run(0, x, y))
            t2 = _ms(lambda: run(1, y, y))
            t12 = _ms(lambda: (run(0, x, y), run(1, y, y)))
            del out
        except Exception as e:      # noqa: BLE001 (an exploration: report and go on)
            print(f"{label}: failed: {type(e).__name__}: {e}", flush=True)
            rows.append({"config": label, "error": str(e)})
            continue
        row = {"config": label, "passes": passes, "threads": th, "round_bits": rb,
               "pass1_ms": t1, "pass2_ms": t2,
               "two_passes_ms": t12, "same_bits_as_fwht_gpu": same,
               "vs_copy": t12 / t_copy, "rfft_over_ours": t_fft / t12,
               "fwht_gpu_over_ours": t_ref / t12}
        rows.append(row)
        print(f"{label}: pass 1 {t1:.2f} ms ({t1 / t_copy:.2f}x copy), pass 2 {t2:.2f} ms "
              f"({t2 / t_copy:.2f}x), both {t12:.2f} ms: {t_fft / t12:.2f}x faster than rfft, "
              f"{t_ref / t12:.2f}x fwht_gpu; fwht_gpu's bits: {same}", flush=True)
    if a.out:
        provenance.write(provenance.record(
            "explore-cluster-pass", [{"case": "reference", "fwht_gpu_ms": t_ref, "copy_ms": t_copy,
                                      "rfft_ms": t_fft}] + rows, vars(a), device="gpu"), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
