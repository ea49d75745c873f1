// The cluster pass fwht_cluster_pass (Hopper, sm_90+): a pass of plain Folklore stages
// whose tile is spread over a thread-block cluster of 2^LOG_CL blocks, so that one pass
// covers 2^LOG_CL times the bits one block's shared memory holds (two passes reach 2^30
// FP32 where fwht_pass needs three).
//
// The pass covers bits [first_bit, first_bit + LOG_R + LOG_CL) of every transform.  A
// cluster tile is 2^(LOG_R + LOG_CL) rows x 2^LOG_G groups (rows as in fwht_pass: the
// elements that differ in the pass's bits; a contiguous pass has LOG_G = 0); block q of the
// cluster holds rows q 2^LOG_R .. (q + 1) 2^LOG_R - 1, a tile of fwht_pass's shape
// (PassTraits with the same arguments).  Each block
//  * loads its tile with round 0 fused with the load and transforms its row bits in rounds
//    through shared memory, the last one writing shared memory as well;
//  * after a cluster barrier, takes a slice of the tile positions, reads the 2^LOG_CL
//    blocks' values at each through distributed shared memory, applies the last LOG_CL
//    stages (the pass's top bits, ascending) and writes them to global memory (consecutive
//    threads: consecutive positions, so a warp's stores coalesce);
//  * waits at a second cluster barrier before its shared memory is reused.
// The stages run in the NumPy engine's order (ascending bits, every operation rounded to T),
// so the result has the bits of any other grouping of the same plain Folklore plan.
// Round 0 and the shared rounds repeat fwht_pass's loops (its note: moving them out of
// fwht_pass into shared functions would change the code of its 1731 instantiations), with
// every round writing shared memory.  Template arguments, flags and the per-transform
// marking as fwht_pass's (C = T, ALG 0, no prefetch); ntiles counts block tiles and, like gridDim.x, is a multiple of 2^LOG_CL, so
// every block of a cluster runs the same barriers.  src may equal dst: a cluster reads its
// whole tile before it writes any of it.
#pragma once

#include "fwht_pass.cuh"
#include "cluster.cuh"

// What follows from fwht_cluster_pass's template arguments (usable on the host: SMEM_BYTES).
template <typename T, int LOG_R, int LOG_G, int LOG_CL, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          bool PAIRED>
struct ClusterPassTraits : PassTraits<T, T, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, PAIRED, 0, 0, false, false> {
    typedef PassTraits<T, T, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, PAIRED, 0, 0, false, false> Base;
    static constexpr int CLUSTER = 1 << LOG_CL;
    // tile positions each block of the cluster finishes
    static constexpr int SLICE_UNITS = Base::TILE_UNITS >> LOG_CL;
    static_assert(LOG_CL >= 1 && LOG_CL <= 4, "clusters of 2 to 16 blocks");
    static_assert(STRIDED || LOG_G == 0, "a contiguous cluster pass: one group per tile");
    static_assert(SLICE_UNITS % Base::THREADS == 0, "the threads divide a block's slice");
    static_assert(Base::FIRST_ROUND_BITS <= LOG_E, "round 0 within a thread's registers");
    // the padded tile (as fwht_pass's unpipelined tile; KernelConfig.smem_bytes' formula)
    static constexpr int SMEM_BYTES = Base::PADDED_UNITS * (int)sizeof(typename Base::U);
};

template <typename T, int LOG_R, int LOG_G, int LOG_CL, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          bool PAIRED>
__global__ void FWHT_CLUSTER_DIMS(1 << LOG_CL) __launch_bounds__(1 << LOG_T, min_blocks_per_sm(LOG_T))
fwht_cluster_pass(const T* src, T* dst, i64 ntiles, int log_inner, int log2n, int fbits,
                  int check_input, int last, double scale, unsigned int* flags, unsigned int* rows,
                  int row_shift)
{
#if FWHT_CLUSTERS
    typedef ClusterPassTraits<T, LOG_R, LOG_G, LOG_CL, LOG_E, LOG_T, STRIDED, VEC, PAIRED> TR;
    typedef typename TR::S S;
    typedef typename TR::U U;
    typedef typename TR::V V;
    typedef typename TR::Layout Layout;
    typedef typename TR::RoundPlan RoundPlan;
    typedef Num<U> N;
    constexpr int THREADS = TR::THREADS, ITEM_UNITS = TR::ITEM_UNITS, UNITS_PER_VEC = TR::UNITS_PER_VEC;
    constexpr int FIRST_ROUND_BITS = TR::FIRST_ROUND_BITS, VECS_IN_FLIGHT = TR::VECS_IN_FLIGHT;
    constexpr int CLUSTER = TR::CLUSTER;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);                           // the padded tile
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x, q = cluster_rank();
    const i64 uinner = ((i64)1 << log_inner) / TR::UNIT_ELEMENTS;     // strided: row stride in units
    const i64 tiles_per_outer = STRIDED ? strided_tiles_per_outer<LOG_G>(log_inner) : 1;
    bool bad_in = false, bad_out = false;
    (void)fbits;

    auto finish = [&](U w) -> S { return pass_unit_out<TR>(w, last, scale, bad_out); };
    auto start = [&](S s, bool& bad) -> U { return pass_unit_in<TR>(s, check_input, bad); };
    auto mark = [&](int count, auto unit) {
        bad_in = true;
        mark_units<S, TR::UNIT_ELEMENTS>(rows, usrc, count, unit, log2n, row_shift);
    };
    // the cluster's tiles: 2^LOG_CL times a block's rows (a strided tile at the same stride)
    auto cluster_base = [&](i64 ct) -> i64 {
        if constexpr (STRIDED)
            return strided_tile_origin<LOG_G>(ct, tiles_per_outer,
                                              [=] { return (i64)1 << (LOG_R + LOG_CL + log_inner); })
                / TR::UNIT_ELEMENTS;
        return ct * ((i64)TR::TILE_UNITS << LOG_CL);
    };
    unsigned remote[CLUSTER];                  // the cluster's tiles, by block rank
#pragma unroll
    for (int j = 0; j < CLUSTER; ++j) remote[j] = map_rank(sm, j);

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const i64 cb = cluster_base(t >> LOG_CL);
        const i64 ub = cb + (STRIDED ? (i64)q * TR::UNIT_ROWS * uinner : (i64)q * TR::UNIT_ROWS);  // this block's rows
        auto gidx = [&](int g, int r) -> i64 { return STRIDED ? ub + r * uinner + g : ub + g * TR::UNIT_ROWS + r; };
        auto sidx = [&](int g, int r) -> int { return Layout::slot(g, r); };

        // ---- round 0, fused with the load (as fwht_pass), into shared memory
        if constexpr (!STRIDED) {
#pragma unroll 1
            for (int c0 = 0; c0 < TR::VECS_PER_THREAD; c0 += VECS_IN_FLIGHT) {
                V buf[VECS_IN_FLIGHT];
#pragma unroll
                for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
                    const int vi = (c0 + i) * THREADS + tid;
                    if constexpr (TR::PIECES_PER_VEC == 2) {
#pragma unroll
                        for (int p = 0; p < 2; ++p)
                            reinterpret_cast<int4*>(&buf[i])[p] =
                                reinterpret_cast<const int4*>(usrc + ub + (i64)vi * UNITS_PER_VEC)[p];
                    } else {
                        buf[i] = *reinterpret_cast<const V*>(usrc + ub + (i64)vi * UNITS_PER_VEC);
                    }
                }
#pragma unroll
                for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
                    U w[ITEM_UNITS > UNITS_PER_VEC ? ITEM_UNITS : UNITS_PER_VEC];
                    bool bad = false;
#pragma unroll
                    for (int k = 0; k < UNITS_PER_VEC; ++k) {
                        w[k] = start(buf[i].v[k], bad);
                        if constexpr (TR::PAIRS_INSIDE_ROWS) w[k] = N::intra(w[k]);
                    }
                    const int u0 = ((c0 + i) * THREADS + tid) * UNITS_PER_VEC;
                    if (bad) mark(UNITS_PER_VEC, [&](int qq) -> i64 { return ub + u0 + qq; });
#pragma unroll
                    for (int blk = 0; blk < UNITS_PER_VEC; blk += 1 << FIRST_ROUND_BITS)
                        radix2_stages<U, LOG_E>(w + blk, FIRST_ROUND_BITS);
#pragma unroll
                    for (int k = 0; k < UNITS_PER_VEC; ++k) sm[pad<U>(u0 + k)] = w[k];
                }
            }
        } else {
#pragma unroll 1
            for (int it = 0; it < TR::FIRST_ROUND_ITEMS; ++it) {
                const int item = it * THREADS + tid;
                const int g = item & (TR::UNIT_GROUPS - 1), r0 = (item >> TR::LOG_UNIT_GROUPS) << FIRST_ROUND_BITS;
                S raw[ITEM_UNITS];
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << FIRST_ROUND_BITS)) raw[j] = usrc[gidx(g, r0 + j)];
                U w[ITEM_UNITS];
                bool bad = false;
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << FIRST_ROUND_BITS)) w[j] = start(raw[j], bad);
                if (bad) mark(1 << FIRST_ROUND_BITS, [&](int qq) -> i64 { return gidx(g, r0 + qq); });
                radix2_stages<U, LOG_E>(w, FIRST_ROUND_BITS);
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << FIRST_ROUND_BITS)) sm[sidx(g, r0 + j)] = w[j];
            }
        }
        __syncthreads();
        // ---- the block's other row bits, in rounds through shared memory
#pragma unroll
        for (int ri = 0; ri < TR::SHARED_ROUNDS; ++ri) {
            const int b = RoundPlan::bound(FIRST_ROUND_BITS, ri);
            const int k = RoundPlan::bound(FIRST_ROUND_BITS, ri + 1) - b;
            const int ITEMS = (TR::TILE_UNITS >> k) / THREADS;
#pragma unroll 1
            for (int it = 0; it < ITEMS; ++it) {
                int g, r0;
                round_item<STRIDED>(it * THREADS + tid, b, k, TR::UNIT_ROWS, TR::LOG_UNIT_GROUPS, g, r0);
                U v[ITEM_UNITS];
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << k)) v[j] = sm[sidx(g, r0 | (j << b))];
                radix2_stages<U, LOG_E>(v, k);
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << k)) sm[sidx(g, r0 | (j << b))] = v[j];
            }
            __syncthreads();
        }
        cluster_sync();                        // every block's rows are transformed
        // ---- the cluster's bits: this block's slice of the positions, from every block
#pragma unroll 1
        for (int e = q * TR::SLICE_UNITS + tid; e < (q + 1) * TR::SLICE_UNITS; e += THREADS) {
            int g, r;
            if constexpr (STRIDED) { g = e & (TR::UNIT_GROUPS - 1); r = e >> TR::LOG_UNIT_GROUPS; }
            else { g = 0; r = e; }
            const unsigned at = (unsigned)(sizeof(U) * sidx(g, r));
            U v[CLUSTER];
#pragma unroll
            for (int j = 0; j < CLUSTER; ++j) v[j] = ld_cluster<U>(remote[j] + at);
            radix2_stages<U, LOG_CL>(v, LOG_CL);
#pragma unroll
            for (int j = 0; j < CLUSTER; ++j) {
                const i64 row = (i64)j * TR::UNIT_ROWS + r;
                udst[STRIDED ? cb + row * uinner + g : cb + row] = finish(v[j]);
            }
        }
        cluster_sync_after_reads();            // no block reuses its tile while others read it
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
#else
    __trap();
#endif
}
