// Transforms of length n = K * M (M = 2^k) that are not powers of two: H_K (x) H_M
// (fwht_gpu/hadamard.py is the specification).  A row is K blocks of M contiguous
// elements; the transform is the power-of-two transform of each block, then the K-point
// stage across the blocks: output block i = sum_c H_K[i, c] * block c, summed in groups of
// four blocks (k_point_sums; H_K is normalized: its first column is all +1), every
// operation rounded to the compute type, the sum rounded once to the storage type, then
// the scale.
// The inverse uses H_K^T (TRANSPOSE).
//
// Three kernels, built from the blocks of this folder (numeric.cuh: Num<>, Units<>,
// to<>; tile.cuh: Vec<>, pad<>(); butterflies.cuh: radix2_stages; cluster.cuh):
//  * fwht_k_rows: the whole transform of 2^log_rows rows per tile in one pass: the tile
//    is loaded into shared memory with 16-byte vectors (the stages on the bits inside a
//    vector fused with the load, as fwht_pass's round 0; DIRECT: copied by cp.async straight
//    to shared memory, those stages then read from it), the remaining power-of-two
//    stages in rounds of up to 2^k_log_e units per thread through shared memory (as
//    fwht_pass's middle rounds), then the K-point round: each thread reads the K values
//    of one position of the K blocks, forms the K sums in groups of four blocks
//    (k_point_sums), scales and writes (consecutive threads: consecutive positions, so the
//    stores coalesce).  A
//    pass over memory, like a single-pass power-of-two transform.  16-bit data moves and
//    computes as pairs of adjacent positions (PAIRED; stage 0 inside the pairs).  For plain
//    Folklore and for plans of one pass with a wider compute type (rounded to storage
//    after the power-of-two stages, where the NumPy engine's pass writes back).
//  * fwht_k_rows_pair (sm_90): fwht_k_rows with each row over a cluster of two blocks (four
//    for FP64 rows of K = 20 and 28 that no block holds), the K-point round reading the
//    other blocks' values from their shared memory: for rows whose tile would sit alone on
//    its SM or not fit at all (config.k_launch).
//  * fwht_k_stage: the K-point stage alone, on rows whose blocks the power-of-two engine
//    (fwht_pass, any variant and any number of passes) has already transformed: rows too
//    long for shared memory, Alman-Rao, the stabilizers, wide plans of several passes.
// All set bit 1 of flags when an output is not finite (the caller then judges overflow
// per row).  src may equal dst.
#pragma once

#include "numeric.cuh"
#include "tile.cuh"
#include "butterflies.cuh"
#include "hadamard_signs.cuh"
#include "cluster.cuh"

// 16-byte vectors in flight per thread in round 0's loads, at most: k_vif<K, MAXT>() for a
// launch bound of MAXT threads (FWHT_K_VIF > 0 forces a count: benchmarks/explore_k_variants.py;
// under a bound of 256 threads or fewer k_load_round0 splits a thread's vectors into that few
// equal groups; unused by the DIRECT copies).  H100, 4096 rows, over a copy (session 29): 2 -> 4 took every one-block and two-block route 1-10% faster (FP32 12 * 2**10 1.167 -> 1.103x,
// 20 * 2**10 1.261 -> 1.181x, FP64 20 * 2**10 1.173 -> 1.052x, FP16 20 * 2**10 1.214 ->
// 1.151x); 6 won the K = 20 rows (FP32 20 * 2**10 1.136x, FP16 1.135x, FP64 1.012x, 40 *
// 2**10 FP32 1.031x, FP16 1.305x; FP64 40 * 2**10 1.337x against 1.329x) and lost K = 12 and
// 28 (FP32 12 * 2**10 1.171x, FP64 1.245x, FP32 28 * 2**10 1.357x).  Session 35: 7 where the
// bound is 256 threads (80-255 registers), in equal groups (k_load_round0): a 56 KiB tile
// holds 14 vectors per thread, two groups of 7 (8: 8 + 6 spilled more, ran the same; 12-16
// spilled, 1.2-1.9x slower).  H100, 4096 rows over a copy (explore_k_variants.py's vifN at the
// session's bounds): FP16 28 * 2**10 1.14 -> 1.04x, FP32 28 * 2**9 1.28 -> 1.11x, FP64 28 *
// 2**10 over four blocks 1.82 -> 1.58x, FP64 28 * 2**8 (one block per SM) 2.04 -> 1.76x.  K = 20
// at the other bounds 6 -> 5 (10 vectors per thread of 82 KiB tiles at 512 threads: 5 + 5
// instead of 6 + 4): FP32 20 * 2**10 1.14 -> 1.08x, FP16 1.10 -> 1.06x, 20 * 2**11 1.21 -> 1.18x.
#ifndef FWHT_K_VIF
#define FWHT_K_VIF 0
#endif
template <int K, int MAXT>
__host__ __device__ constexpr int k_vif() {
    return FWHT_K_VIF > 0 ? FWHT_K_VIF : MAXT <= 256 ? 7 : K == 20 ? 5 : 4;
}

// Whether H_K[i, c] (TRANSPOSE: H_K[c, i]) is -1; constant-folded in the unrolled loops.
template <int K, bool TRANSPOSE>
__host__ __device__ constexpr bool k_negative(int i, int c) {
    return TRANSPOSE ? ((HadamardSigns<K>::row(c) >> i) & 1ULL) != 0
                     : ((HadamardSigns<K>::row(i) >> c) & 1ULL) != 0;
}

// H_K is normalized: first row and first column all +1 (each output starts with its first group's e).
template <int K>
__host__ __device__ constexpr bool k_normalized() {
    for (int i = 0; i < K; ++i)
        if ((HadamardSigns<K>::row(i) & 1ULL) || (HadamardSigns<K>::row(0) >> i) & 1ULL) return false;
    return true;
}

// Output i's sign pattern in the group of columns c0 .. c0 + 3 (k_point_sums): bit 2 whether
// column c0 + 1's sign differs from column c0's, bit 1 whether columns c0 + 2 and c0 + 3
// differ, bit 0 whether column c0 + 2's differs from column c0's.
template <int K, bool TRANSPOSE>
__host__ __device__ constexpr int k_pattern(int i, int c0) {
    const bool s0 = k_negative<K, TRANSPOSE>(i, c0);
    const int n1 = k_negative<K, TRANSPOSE>(i, c0 + 1) != s0;
    const int n2 = k_negative<K, TRANSPOSE>(i, c0 + 2) != s0;
    const int n3 = k_negative<K, TRANSPOSE>(i, c0 + 3) != s0;
    return 4 * n1 + 2 * (n2 ^ n3) + n2;
}

// Outputs i0 .. i0 + CH - 1 of the K-point stage (fwht_gpu/hadamard.py's order), the K values
// of the position from ``next()`` in column order: per group of four columns (a, b, c, d) p =
// a +- b, q = c +- d, e = p +- q with the signs relative to the group's first column, each of
// the eight e formed once for every output that uses it; acc = e for the first group (H_K is
// normalized: column 0 all +1), then acc +- e group after group.  K^2/4 + 2K operations per
// position instead of the K (K - 1) of output-by-output sums: H100, 4096 rows over a copy
// (session 34), FP32 28 * 2**10 1.33 -> 1.24x, FP16 28 * 2**10 1.24 -> 1.15x, FP32 44 * 2**10
// 2.80 -> 1.19x.  A smaller CH reads the values again per chunk of outputs (fewer registers).
template <typename W, int K, bool TRANSPOSE, int CH, typename NEXT>
__device__ __forceinline__ void k_point_sums(NEXT next, int i0, W* acc) {
    typedef Num<W> N;
#pragma unroll
    for (int g = 0; g < K / 4; ++g) {
        const int c0 = 4 * g;
        const W a = next(), b = next(), c = next(), d = next();
        const W p[2] = {N::add(a, b), N::sub(a, b)};
        const W q[2] = {N::add(c, d), N::sub(c, d)};
        W e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = k & 1 ? N::sub(p[k >> 2], q[(k >> 1) & 1]) : N::add(p[k >> 2], q[(k >> 1) & 1]);
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            const W t = e[k_pattern<K, TRANSPOSE>(i0 + j, c0)];
            acc[j] = g == 0 ? t : k_negative<K, TRANSPOSE>(i0 + j, c0) ? N::sub(acc[j], t) : N::add(acc[j], t);
        }
    }
}

// a + b for the addresses of unrolled loops (shared-memory slots, element indices), opaque
// to the compiler: each address is the previous one plus the stride, so no table of
// loop-invariant offsets (c * stride for every c) is hoisted into registers.
__device__ __forceinline__ int k_step(int a, int b) {
    int r;
    asm("add.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ i64 k_step(i64 a, i64 b) {
    i64 r;
    asm("add.s64 %0, %1, %2;" : "=l"(r) : "l"(a), "l"(b));
    return r;
}

// The unit at byte offset `byte` of shared memory (addresses stepped in bytes: one add per
// access, no scaling of a unit index).
template <typename U>
__device__ __forceinline__ U& k_slot(U* sm, int byte) {
    return *reinterpret_cast<U*>(reinterpret_cast<char*>(sm) + byte);
}

// One item of a round over the power-of-two bits [b, b + KK) of a tile in shared memory: the
// units x0 + (j << b), j < 2^KK, loaded, through the KK radix-2 stages, stored back (every
// unit of the item present: no predicates).  x0 has the bits [b, b + KK) clear, so
// pad(x0 + (j << b)) = pad(x0) + pad(j << b): from b >= pad_shift on, or while the item's
// units share one run of 2^pad_shift slots (b + KK <= pad_shift), that is a constant step
// from pad(x0), so an address costs one add.
template <typename U, int KK>
__device__ __forceinline__ void k_round_item(U* sm, int x0, int b) {
    constexpr int PS = pad_shift<U>();
    U v[1 << KK];
    if (b >= PS || b + KK <= PS) {
        const int step = ((1 << b) + (b >= PS ? 1 << (b - PS) : 0)) * (int)sizeof(U);
        const int s0 = pad<U>(x0) * (int)sizeof(U);
        int s = s0;
#pragma unroll
        for (int j = 0; j < (1 << KK); ++j) { v[j] = k_slot(sm, s); s = k_step(s, step); }
        radix2_stages<U, KK, true>(v, KK);
        s = s0;
#pragma unroll
        for (int j = 0; j < (1 << KK); ++j) { k_slot(sm, s) = v[j]; s = k_step(s, step); }
    } else {
        int x = x0;
#pragma unroll
        for (int j = 0; j < (1 << KK); ++j) { v[j] = sm[pad<U>(x)]; x = k_step(x, 1 << b); }
        radix2_stages<U, KK, true>(v, KK);
        x = x0;
#pragma unroll
        for (int j = 0; j < (1 << KK); ++j) { sm[pad<U>(x)] = v[j]; x = k_step(x, 1 << b); }
    }
}

// Non-finite outputs, found with one fused multiply-add per stored unit: probe + v * 0 is
// NaN from the first v that is infinite or NaN on (0 * finite adds a zero), and the probe
// is tested once per thread.
__device__ __forceinline__ float k_probe(float p, float v) { return __fmaf_rn(v, 0.0f, p); }
__device__ __forceinline__ double k_probe(double p, double v) { return __fma_rn(v, 0.0, p); }
__device__ __forceinline__ __half2 k_probe(__half2 p, __half2 v) {
    return __hfma2(v, __float2half2_rn(0.0f), p);
}
__device__ __forceinline__ __nv_bfloat162 k_probe(__nv_bfloat162 p, __nv_bfloat162 v) {
    return __hfma2(v, __float2bfloat162_rn(0.0f), p);
}

// Threads per block fwht_k_rows is compiled for with one block per SM (launch bounds: the K
// values held in registers per thread): 1024 (64 registers) up to 28 registers of values, 512
// (128) up to 44, else 256 (config.py's KRowsConfig.max_threads; k_bound_threads below for
// two or three blocks per SM).  With the grouped K-point sums (all K accumulators live) nvcc
// 13 spills for sm_90 (stores; session 35's loads in flight): FP32 K = 20 / 28 8 / 40 bytes and
// FP16/BF16 K = 20 16 bytes at 64 registers, FP32 K = 44 32 bytes at 128, the FP16/BF16 pair
// kernels of K = 20 / 28 16-76 bytes (0-16 before session 34); at three blocks per SM (80
// registers) FP32 K = 28 / 36 20 / 68 bytes, the FP16/BF16 pairs of K = 28 20 / 72; at two
// (128) FP32-in-FP64 K = 36 / 44 100 / 64, FP16/BF16-in-FP32 K = 44 88-92; measured faster all
// the same where measured (NOTES).  The plain FP64 kernels the launcher takes load by DIRECT
// copies and spill nothing (with register loads FP64 K = 28 / 36 / 44 at two per SM spilled
// 96 / 208 / 160 bytes, the quarters of K = 28 at three per SM 344; session 36).
template <typename U, int K>
__host__ __device__ constexpr int k_rows_max_threads() {
    return K * (int)(sizeof(U) / 4) <= 28 ? 1024 : K * (int)(sizeof(U) / 4) <= 44 ? 512 : 256;
}

// The launch bound of fwht_k_rows and fwht_k_rows_pair compiled for B blocks per SM
// (config.KRowsConfig.b, config._k_bound_blocks): B = 1 k_rows_max_threads; B = 2 or 3 256
// threads (128 or 80 registers), for launches of 256 threads whose tiles' shared memory
// leaves B per SM: 4-byte units three per SM (the bound of one block leaves 64 registers for
// K <= 28), 8-byte units of K >= 28 two per SM (the bound of one block let ptxas take up to
// 255: one block per SM), clusters of four two or three per SM.  H100, 4096 rows over a copy
// (session 35, with
// k_vif): FP16 28 * 2**10 1.17 -> 1.05x, FP32 28 * 2**10 over two blocks 1.25 -> 1.21x,
// FP64 28 * 2**8 1.77 -> 1.10x.
template <typename U, int K, int B>
__host__ __device__ constexpr int k_bound_threads() {
    return B == 1 ? k_rows_max_threads<U, K>() : 256;
}

// log2 units per thread per round of the power-of-two stages through shared memory, at most:
// 4 for pairs of 16-bit values, 3 for single values (eight doubles: no spills at 64
// registers).  H100, 4096 rows (session 26): rounds of 4 bits took FP16/BF16 rows of
// 12-28 * 2^10 from 1.34-1.52x a copy to 1.21-1.29x (three rounds after round 0 -> two), but
// compiled for FP32 units they cost FP32 rows 3-5% with the same rounds.
template <typename U> struct KPair16 { static constexpr bool value = false; };
template <> struct KPair16<__half2> { static constexpr bool value = true; };
template <> struct KPair16<__nv_bfloat162> { static constexpr bool value = true; };
template <typename U>
__host__ __device__ constexpr int k_log_e() { return KPair16<U>::value ? 4 : 3; }

// The bits [b, b + k) of the round that starts at bit b (1 <= k <= k_log_e): rounds of 3 bits
// (the last shorter), or with k_log_e 4 as few rounds as that allows, the first ending at the
// padding run (its items spread over the banks, see fwht_k_rows), of balanced sizes (rows
// of 2^9 pairs: [2, 5), [5, 9) instead of [2, 5), [5, 8), [8, 9)).  The stages run bit after
// bit whatever the rounds, so the grouping does not change a bit of the result.
template <typename U>
__device__ __forceinline__ int k_round_bits(int b, int log_mu) {
    constexpr int PS = pad_shift<U>(), E = k_log_e<U>();
    const int rem = log_mu - b;
    if constexpr (E == 3) {
        return rem < E ? rem : E;
    } else {
        if (b < PS) return min(rem, min(PS - b, E));
        const int rounds = (rem + E - 1) / E;
        return (rem + rounds - 1) / rounds;
    }
}

template <typename A, typename B> struct KSame { static constexpr bool value = false; };
template <typename A> struct KSame<A, A> { static constexpr bool value = true; };

// DIRECT_: round 0 copies the tile by cp.async straight to its padded slots (k_load_round0;
// config._k_direct: plain FP64 in blocks of up to 256 threads).
template <typename T, typename C, int K, bool TRANSPOSE, bool PAIRED_, int B, bool DIRECT_ = false>
struct KRowsTraits {
    typedef typename Units<T, C, PAIRED_>::S S;    // storage unit
    typedef typename Units<T, C, PAIRED_>::U U;    // compute unit (shared memory, registers)
    static constexpr int UNITS_PER_VEC = 16 / (int)sizeof(S);
    static constexpr int LOG_UNITS_PER_VEC = UNITS_PER_VEC == 8 ? 3 : UNITS_PER_VEC == 4 ? 2 : UNITS_PER_VEC == 2 ? 1 : 0;
    static constexpr int MAX_THREADS = k_bound_threads<U, K, B>();
    static constexpr int VECS_IN_FLIGHT = k_vif<K, MAX_THREADS>();
    static constexpr bool PAIRED = PAIRED_;
    static constexpr bool DIRECT = DIRECT_;
    typedef Vec<S, UNITS_PER_VEC> V;
    static_assert(K % 4 == 0 && K <= 64, "K: a multiple of 4 (16-byte vectors never straddle rows)");
    static_assert(sizeof(T) != 2 || PAIRED_, "16-bit data as pairs (M >= 2)");
    static_assert(UNITS_PER_VEC <= 4, "a vector holds at most 4 units");
    static_assert(B >= 1 && B <= 3, "one to three blocks per SM");
    static_assert(!DIRECT_ || (KSame<S, U>::value && sizeof(U) >= 4), "direct copies: the storage unit computes");
    static_assert(k_normalized<K>(), "H_K normalized");
};

// The K outputs of one position, in chunks of CH: for each chunk ``cursor()`` gives a fresh
// ``next`` that returns the position's K values (the power-of-two stages' results, in the
// compute type) in column order; rounded to storage first when the compute type is wider
// (where the NumPy engine's pass writes back), the K sums (k_point_sums) rounded to storage,
// scaled when SCALED, written to y, y + mu, ...; returns the non-finite probe.
template <typename S, typename U, int K, bool TRANSPOSE, typename C, typename T, bool SCALED, int CH, typename CURSOR>
__device__ __forceinline__ S k_point_out(CURSOR cursor, S* y, int mu, double scale, S probe) {
    static_assert(K % CH == 0, "whole chunks");
#pragma unroll
    for (int i0 = 0; i0 < K; i0 += CH) {
        auto next = cursor();
        U acc[CH];
        k_point_sums<U, K, TRANSPOSE, CH>([&]() {
            U x = next();
            if constexpr (sizeof(C) != sizeof(T)) x = to<U>(to<S>(x));
            return x;
        }, i0, acc);
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            S o = to<S>(acc[j]);
            if constexpr (SCALED) o = Num<S>::scale(o, scale);
            probe = k_probe(probe, o);
            *y = o;
            y += mu;
        }
    }
    return probe;
}

// The K-point round of fwht_k_rows on the tile in shared memory: position u of row r in the K
// blocks per thread (consecutive threads: consecutive positions, so the stores coalesce),
// the K values read from shared memory as the sums take them (fewer registers than all K
// first: FP32 K = 28 spills 40 bytes at its 64-register bound instead of 76), the outputs
// written to y (the tile in global memory) by k_point_out; returns the non-finite probe.
template <typename S, typename U, int K, bool TRANSPOSE, typename C, typename T, bool SCALED>
__device__ __forceinline__ S k_point_round(U* sm, S* y0, int tid, int threads, int log_mu, int log_rows,
                                           double scale, S probe) {
    const int mu = 1 << log_mu;
    const int positions = mu << log_rows;
    for (int p = tid; p < positions; p += threads) {
        const int r = p >> log_mu, u = p & (mu - 1);
        const int base = r * K * mu + u;
        if (log_mu >= pad_shift<U>()) {     // padded slots a constant step apart
            const int step = (mu + (mu >> pad_shift<U>())) * (int)sizeof(U);
            const int x0 = pad<U>(base) * (int)sizeof(U);
            probe = k_point_out<S, U, K, TRANSPOSE, C, T, SCALED, K>([&]() {
                return [sm, x = x0, step]() mutable { U v = k_slot(sm, x); x = k_step(x, step); return v; }; },
                y0 + base, mu, scale, probe);
        } else {
            probe = k_point_out<S, U, K, TRANSPOSE, C, T, SCALED, K>([&]() {
                return [sm, x = base, mu]() mutable { U v = sm[pad<U>(x)]; x = k_step(x, mu); return v; }; },
                y0 + base, mu, scale, probe);
        }
    }
    return probe;
}

// Round 0's work on vector vi (its units converted to the compute type, the stages on the
// bits inside it, stored at their padded slots).
template <typename TR>
__device__ __forceinline__ void k_round0_vector(typename TR::U* sm, const typename TR::V& vec, int vi, int first) {
    typedef typename TR::U U;
    typedef Num<U> N;
    constexpr int UPV = TR::UNITS_PER_VEC, LOG_UPV = TR::LOG_UNITS_PER_VEC;
    U w[UPV];
#pragma unroll
    for (int k = 0; k < UPV; ++k) {
        w[k] = to<U>(vec.v[k]);
        if constexpr (TR::PAIRED) w[k] = N::intra(w[k]);
    }
    radix2_stages<U, LOG_UPV, true>(w, first);
    // a vector's units share one run of 2^pad_shift slots: constant offsets
    const int s0 = pad<U>(vi * UPV) * (int)sizeof(U);
#pragma unroll
    for (int k = 0; k < UPV; ++k) k_slot(sm, s0 + k * (int)sizeof(U)) = w[k];
}

// Round 0 of fwht_k_rows, fused with the load of nvec 16-byte vectors from ``in`` into the
// padded tile ``sm``: the stages on the bits inside a vector (groups of 2^first units side by
// side when a block is shorter than a vector); then a block barrier.  Two ways in:
//  * TR::DIRECT: every unit copied by cp.async straight to its padded slot (4- or 8-byte
//    copies: the padding breaks the vectors' 16-byte alignment; the storage unit is the
//    compute unit), the whole tile in flight with no registers held, then the stages inside
//    each vector from shared memory (config._k_direct says where: plain FP64);
//  * else VIF vectors per thread in flight in registers (under a bound of 256 threads or
//    fewer: a thread's vectors in as few equal groups as VIF allows, 18 with VIF 7 as 6 + 6 +
//    6), the stages applied on the way to shared memory.
template <typename TR>
__device__ __forceinline__ void k_load_round0(typename TR::U* sm, const typename TR::S* in, int nvec,
                                              int first, int tid, int threads) {
    typedef typename TR::U U;
    typedef typename TR::V V;
    constexpr int UPV = TR::UNITS_PER_VEC, VIF = TR::VECS_IN_FLIGHT;
    if constexpr (TR::DIRECT) {
        for (int u = tid; u < nvec * UPV; u += threads) {
            const unsigned slot = (unsigned)__cvta_generic_to_shared(sm + pad<U>(u));
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n"
                         :: "r"(slot), "l"(in + u), "n"((int)sizeof(U)) : "memory");
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        __syncthreads();
        for (int vi = tid; vi < nvec; vi += threads) {
            const int s0 = pad<U>(vi * UPV) * (int)sizeof(U);
            V vec;
#pragma unroll
            for (int k = 0; k < UPV; ++k) vec.v[k] = k_slot(sm, s0 + k * (int)sizeof(U));
            k_round0_vector<TR>(sm, vec, vi, first);
        }
    } else {
        const int per = (nvec + threads - 1) / threads;     // vectors per thread
        const int groups = (per + VIF - 1) / VIF;
        // in flight per group, <= VIF (equal groups under a bound of 256 threads or fewer, the
        // measured code; the other bounds keep groups of VIF as measured before session 35)
        const int g = TR::MAX_THREADS <= 256 ? (per + groups - 1) / groups : VIF;
        for (int v0 = 0; v0 < nvec; v0 += g * threads) {
            V buf[VIF];
#pragma unroll
            for (int i = 0; i < VIF; ++i) {
                const int vi = v0 + i * threads + tid;
                if (i < g && vi < nvec) buf[i] = *reinterpret_cast<const V*>(in + (i64)vi * UPV);
            }
#pragma unroll
            for (int i = 0; i < VIF; ++i) {
                const int vi = v0 + i * threads + tid;
                if (i < g && vi < nvec) k_round0_vector<TR>(sm, buf[i], vi, first);
            }
        }
    }
    __syncthreads();
}

// The power-of-two stages on bits [first, log_mu) of the tile's blocks (tile_units units in
// ``sm``), in rounds [b, b + k) through shared memory, a block barrier after each (rounds of
// 3: the step is 3, the last round shorter; so compiled, FP32 and FP64 rows keep the code
// they were measured with).
template <typename U>
__device__ __forceinline__ void k_pow2_rounds(U* sm, int tile_units, int first, int log_mu, int tid,
                                              int threads) {
    for (int b = first, k; b < log_mu; b += k_log_e<U>() == 3 ? 3 : k) {
        k = k_round_bits<U>(b, log_mu);
        const int items = tile_units >> k;
        // Item I is (R, lo): the units (R << (b + k)) | lo | (j << b), lo < 2^b, R the run
        // of 2^(b + k) units over the tile's blocks.  Taken as round_item<false> takes them
        // (lo the low bits of I), a round that ends at the padding run (b + k = pad_shift)
        // puts a warp's 32 items in 32 / 2^b runs of 2^pad_shift units, whose padded slots
        // share few banks (2^b-way conflicts: FP32 rows of 12 * 2^10, 10.4M conflicts for
        // 12.6M shared-memory accesses).  There the 32 items of a warp take 32 consecutive
        // runs instead (one bank each): bits [0, 5) and [5, 5 + b) of I swapped, for the items
        // below the largest multiple of 32 << b (a bijection onto the runs R below it; the rest,
        // whole runs above, as round_item takes them: tiles of a few short rows, e.g. FP32 20 *
        // 2**6 in 2560 units, whose items are no multiple of 128).
        const int spread_end = b + k == pad_shift<U>() ? items & ~((32 << b) - 1) : 0;
        auto item_at = [&](int R, int lo) {
            const int x0 = (R << (b + k)) | lo;     // unit j: x0 + (j << b)
            if (k == 3) k_round_item<U, 3>(sm, x0, b);
            else if (k_log_e<U>() == 4 && k == 4) k_round_item<U, k_log_e<U>()>(sm, x0, b);
            else if (k == 2) k_round_item<U, 2>(sm, x0, b);
            else k_round_item<U, 1>(sm, x0, b);
        };
        for (int item = tid; item < spread_end; item += threads)
            item_at((item & 31) | ((item >> (5 + b)) << 5), (item >> 5) & ((1 << b) - 1));
        for (int item = spread_end + tid; item < items; item += threads)
            item_at(item >> b, item & ((1 << b) - 1));
        __syncthreads();
    }
}

// One tile = 2^log_rows rows of K blocks of 2^log_mu units; tiles t = blockIdx.x, + gridDim.x, ...
// Dynamic shared memory: padded_size<U>(tile units) * sizeof(U) (config.py's KRowsConfig);
// compiled for B blocks per SM (k_bound_threads).
template <typename T, typename C, int K, bool TRANSPOSE, bool PAIRED, int B, bool DIRECT>
__global__ void __launch_bounds__(k_bound_threads<typename Units<T, C, PAIRED>::U, K, B>(), B)
fwht_k_rows(const T* src, T* dst, i64 ntiles, int log_mu, int log_rows, double scale, unsigned int* flags)
{
    typedef KRowsTraits<T, C, K, TRANSPOSE, PAIRED, B, DIRECT> TR;
    typedef typename TR::S S;
    typedef typename TR::U U;
    constexpr int UPV = TR::UNITS_PER_VEC, LOG_UPV = TR::LOG_UNITS_PER_VEC;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x, threads = blockDim.x;
    const int blocks = K << log_rows;                    // blocks per tile
    const int tile_units = blocks << log_mu;
    const int nvec = tile_units / UPV;
    // round 0: the bits inside a vector (groups of 2^first units side by side when a block
    // is shorter than a vector)
    const int first = log_mu < LOG_UPV ? log_mu : LOG_UPV;
    S probe = to<S>(U{});                                // k_probe's accumulator

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const S* in = usrc + t * (i64)tile_units;
        __syncthreads();                                 // the previous tile's last round has read sm
        k_load_round0<TR>(sm, in, nvec, first, tid, threads);
        k_pow2_rounds<U>(sm, tile_units, first, log_mu, tid, threads);
        // ---- the K-point round (the scale's test made once, not per output)
        if (scale != 1.0)
            probe = k_point_round<S, U, K, TRANSPOSE, C, T, true>(sm, udst + t * (i64)tile_units, tid, threads, log_mu, log_rows, scale, probe);
        else
            probe = k_point_round<S, U, K, TRANSPOSE, C, T, false>(sm, udst + t * (i64)tile_units, tid, threads, log_mu, log_rows, scale, probe);
    }
    if (!Num<S>::finite(probe)) atomicOr(flags, 2u);
}

// The K-point round of fwht_k_rows_pair for one row: block q of the Q-block cluster takes the
// positions u = q mu/Q .. q mu/Q + mu/Q - 1 and reads the K values of each, K/Q from each
// block's part of the row (distributed shared memory, rank h holding blocks h K/Q .. h K/Q +
// K/Q - 1).  The scale's test per position, not per row as in fwht_k_rows: so compiled, FP32
// K = 28 keeps its 64 registers without spills (ptxas, sm_90; 20-24 bytes spilled with the
// test per row or per output).
template <typename S, typename U, int K, bool TRANSPOSE, typename C, typename T, int Q>
__device__ __forceinline__ S k_pair_point_round(U* sm, S* y0, int q, int tid, int threads, int log_mu,
                                                double scale, S probe) {
#if FWHT_CLUSTERS
    constexpr int KQ = K / Q;
    const int mu = 1 << log_mu, part = mu / Q;
    const int step = (mu + (mu >> pad_shift<U>())) * (int)sizeof(U);     // log_mu >= pad_shift
    for (int p = tid; p < part; p += threads) {
        const int u = q * part + p;
        if constexpr (sizeof(U) == 4 || K <= 12 || Q == 4) {
            // 4-byte units, K = 12, four blocks: the K values read first, then the sums
            // (read as the sums take them, FP32 K = 20 / 28 spilled 120-128 bytes at 64
            // registers: 28 * 2**10 1.45x a copy against 1.24x; FP64 K = 12 spills 72 bytes,
            // 156 that way; FP64 28 * 2**10 over four blocks 1.81x against 1.98x)
            U v[K];
#pragma unroll
            for (int h = 0; h < Q; ++h) {
                unsigned x = map_rank(sm + pad<U>(u), h);
#pragma unroll
                for (int c = 0; c < KQ; ++c) { v[h * KQ + c] = ld_cluster<U>(x); x += step; }
            }
            auto cursor = [&]() { return [&v, c = 0]() mutable { return v[c++]; }; };
            if (scale != 1.0) probe = k_point_out<S, U, K, TRANSPOSE, C, T, true, K>(cursor, y0 + u, mu, scale, probe);
            else probe = k_point_out<S, U, K, TRANSPOSE, C, T, false, K>(cursor, y0 + u, mu, scale, probe);
        } else {
            // 8-byte units, K >= 20, two blocks: read as the sums take them, half of the
            // outputs at a time (FP64 20 * 2**10: 1.07x a copy; all K first 1.16x, all
            // outputs at once 1.13x; session 28's output-by-output sums 1.02x)
            U* const at = sm + pad<U>(u);
            auto cursor = [&]() {
                return [at, x = 0u, c = 0, step]() mutable {
                    if (c % KQ == 0) x = map_rank(at, c / KQ);
                    U v = ld_cluster<U>(x);
                    x += step;
                    ++c;
                    return v;
                };
            };
            if (scale != 1.0) probe = k_point_out<S, U, K, TRANSPOSE, C, T, true, K / 2>(cursor, y0 + u, mu, scale, probe);
            else probe = k_point_out<S, U, K, TRANSPOSE, C, T, false, K / 2>(cursor, y0 + u, mu, scale, probe);
        }
    }
#endif
    return probe;
}


// fwht_k_rows with each row over a cluster of Q blocks (Hopper, sm_90; Q = 2, or 4 for FP64
// rows that no block holds, compiled for B = 2 or 3 blocks per SM: quarter rows of 80 KiB (20 *
// 2**11) two per SM at 128 registers, of 56 KiB (K = 28) three per SM at 80, with the DIRECT
// copies no spills): for rows whose tile would sit alone on its SM (or not fit one block's
// shared memory at all), so that several parts of rows per SM overlap one's loads with
// another's stages.  The barrier before a block's next part is written waits only for the
// others' reads (cluster_sync_after_reads: H100, 4096 rows, over a copy, session 36: FP32 28 *
// 2**10 1.15 -> 1.08x, FP64 28 * 2**10 1.29 -> 1.10x, FP64 20 * 2**11 1.44 -> 1.29x against
// cupy.copyto; benchmarks/explore_cluster_sync.py).  Block q holds the row's blocks q K/Q .. q K/Q + K/Q - 1 (K/Q << log_mu contiguous
// units) and applies the power-of-two stages to them as fwht_k_rows does (k_load_round0,
// k_pow2_rounds); after a cluster barrier, the K-point round on 1/Q of the positions
// (k_pair_point_round).  Every operation is fwht_k_rows' in its order: the same bits.  Rows
// t = cluster, + clusters, ... (grid: Q blocks per cluster); log_mu >= pad_shift<U> (whole
// padded runs per block).  Dynamic shared memory: padded_size<U>(K/Q << log_mu) units
// (config.KRowsConfig).
template <typename T, typename C, int K, bool TRANSPOSE, bool PAIRED, int Q, int B, bool DIRECT>
__global__ void FWHT_CLUSTER_DIMS(Q) __launch_bounds__(k_bound_threads<typename Units<T, C, PAIRED>::U, K, B>(), B)
fwht_k_rows_pair(const T* src, T* dst, i64 nrows, int log_mu, double scale, unsigned int* flags)
{
#if FWHT_CLUSTERS
    typedef KRowsTraits<T, C, K, TRANSPOSE, PAIRED, B, DIRECT> TR;
    typedef typename TR::S S;
    typedef typename TR::U U;
    constexpr int UPV = TR::UNITS_PER_VEC, LOG_UPV = TR::LOG_UNITS_PER_VEC;
    static_assert((Q == 2 || Q == 4) && K % Q == 0, "Q parts of K / Q blocks");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x, threads = blockDim.x, q = cluster_rank();
    const int tile_units = (K / Q) << log_mu;            // this block's part of the row
    const int first = log_mu < LOG_UPV ? log_mu : LOG_UPV;
    S probe = to<S>(U{});

    for (i64 t = blockIdx.x / Q; t < nrows; t += gridDim.x / Q) {
        cluster_sync_after_reads();                      // every block's K-point reads are done
        k_load_round0<TR>(sm, usrc + t * ((i64)K << log_mu) + (i64)q * tile_units, tile_units / UPV,
                          first, tid, threads);
        k_pow2_rounds<U>(sm, tile_units, first, log_mu, tid, threads);
        cluster_sync();                                  // every part transformed
        probe = k_pair_point_round<S, U, K, TRANSPOSE, C, T, Q>(sm, udst + t * ((i64)K << log_mu), q, tid, threads,
                                                                log_mu, scale, probe);
    }
    cluster_sync_after_reads();                          // no block leaves while read
    if (!Num<S>::finite(probe)) atomicOr(flags, 2u);
#else
    __trap();
#endif
}

// The K-point stage alone on rows of K blocks of 2^log_m elements already transformed by the
// power-of-two engine (storage values): position p = (row, j) per thread, grid-stride; its K
// values are all read before its first output is written (src may equal dst).
template <typename T, typename C, int K, bool TRANSPOSE>
__global__ void __launch_bounds__(256)
fwht_k_stage(const T* src, T* dst, i64 npos, int log_m, double scale, unsigned int* flags)
{
    static_assert(k_normalized<K>(), "H_K normalized");
    const i64 m = (i64)1 << log_m;
    bool bad_out = false;
    for (i64 p = (i64)blockIdx.x * blockDim.x + threadIdx.x; p < npos; p += (i64)gridDim.x * blockDim.x) {
        const i64 base = (p >> log_m) * K * m + (p & (m - 1));
        C acc[K];
        i64 x = base;
        k_point_sums<C, K, TRANSPOSE, K>([&]() { C v = to<C>(src[x]); x = k_step(x, m); return v; }, 0, acc);
#pragma unroll
        for (int i = 0; i < K; ++i) {
            T o = to<T>(acc[i]);
            if (scale != 1.0) o = Num<T>::scale(o, scale);
            if (!Num<T>::finite(o)) bad_out = true;
            dst[base + i * m] = o;
        }
    }
    if (bad_out) atomicOr(flags, 2u);
}
