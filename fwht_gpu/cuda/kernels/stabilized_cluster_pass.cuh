// The stabilized cluster pass fwht_stabilized_cluster_pass (Hopper, sm_90+): a pass of
// Kahan/Neumaier-compensated Folklore stages (fwht_stabilized_pass's) whose tile is spread
// over a thread-block cluster of 2^LOG_CL blocks, as fwht_cluster_pass spreads a plain pass's.
//
// Block q of a cluster holds rows q 2^LOG_R .. (q + 1) 2^LOG_R - 1 of the cluster's tile of
// 2^(LOG_R + LOG_CL) rows x 2^LOG_G groups: a tile of fwht_stabilized_pass's shape
// (StabilizedPassTraits with the same arguments), its values and errors in shared memory.
// Each block loads its tile as fwht_stabilized_pass does (values; with ERRVEC past the first
// pass their errors; the first pass checks and marks non-finite inputs), runs the
// compensated rounds over its row bits, then after a cluster barrier takes a slice of the
// tile positions, reads the 2^LOG_CL blocks' values and errors there through distributed
// shared memory, applies the last LOG_CL compensated stages (the pass's top bits, ascending)
// and stores values and errors (ERRVEC, not the last pass) or the values with their errors
// folded in (scaled and checked in the last pass); a second cluster barrier guards the tile
// before it is reused.  Values and errors take the same stages in the same order as in any
// other grouping of the plan (the NumPy engine's), stored as T between passes, so the result
// has the bits of the stabilized passes without clusters.  ntiles counts block tiles and,
// like gridDim.x, is a multiple of 2^LOG_CL; src may equal dst (and err is read before it is
// written): a cluster reads its whole tile before any of its blocks writes.  The load loop
// repeats fwht_stabilized_pass's (moving it into a shared function would change that kernel's
// generated code; the same reason as fwht_pass's note, and cluster_pass.cuh's).
#pragma once

#include "cluster_pass.cuh"
#include "stabilized_pass.cuh"

// What follows from fwht_stabilized_cluster_pass's template arguments (usable on the host).
template <typename T, int LOG_R, int LOG_G, int LOG_CL, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          int STAB, bool ERRVEC>
struct StabilizedClusterTraits : StabilizedPassTraits<T, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, STAB, ERRVEC> {
    typedef StabilizedPassTraits<T, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, STAB, ERRVEC> Base;
    static constexpr int CLUSTER = 1 << LOG_CL;
    // tile positions each block of the cluster finishes
    static constexpr int SLICE = Base::TILE >> LOG_CL;
    static_assert(LOG_CL >= 1 && LOG_CL <= 4, "clusters of 2 to 16 blocks");
    static_assert(STRIDED || LOG_G == 0, "a contiguous cluster pass: one group per tile");
    static_assert(SLICE % Base::THREADS == 0, "the threads divide a block's slice");
};

// The blocks of 2^log_t threads to keep resident on an SM (__launch_bounds__): 768 threads,
// three blocks of 256 as 64 KiB tiles of values and errors allow (at most 85 registers per
// thread; ptxas gives 77-80), one block of 512 or 1024.
__host__ __device__ constexpr int stabilized_cluster_blocks(int log_t) {
    return (768 >> log_t) > 0 ? (768 >> log_t) : 1;
}

template <typename T, int LOG_R, int LOG_G, int LOG_CL, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          int STAB, bool ERRVEC>
__global__ void FWHT_CLUSTER_DIMS(1 << LOG_CL) __launch_bounds__(1 << LOG_T, stabilized_cluster_blocks(LOG_T))
fwht_stabilized_cluster_pass(const T* src, T* dst, T* err, i64 ntiles, int log_inner, int log2n,
                             int check_input, int first, int last, double scale, unsigned int* flags,
                             unsigned int* rows, int row_shift)
{
#if FWHT_CLUSTERS
    typedef StabilizedClusterTraits<T, LOG_R, LOG_G, LOG_CL, LOG_E, LOG_T, STRIDED, VEC, STAB, ERRVEC> TR;
    typedef T W;
    typedef Num<W> N;
    typedef Vec<T, VEC> V;
    typedef typename TR::Layout Layout;
    constexpr int THREADS = TR::THREADS, VECS_IN_FLIGHT = TR::VECS_IN_FLIGHT, CLUSTER = TR::CLUSTER;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    W* sx = reinterpret_cast<W*>(smem_raw);          // values
    W* se = sx + TR::PADDED_ELEMENTS;                // errors
    const int tid = threadIdx.x, q = cluster_rank();
    const i64 inner = (i64)1 << log_inner;
    const i64 tiles_per_outer = STRIDED ? (inner >> LOG_G) : 1;
    bool bad_in = false, bad_out = false;
    unsigned remote_x[CLUSTER], remote_e[CLUSTER];   // the cluster's tiles, by block rank
#pragma unroll
    for (int j = 0; j < CLUSTER; ++j) {
        remote_x[j] = map_rank(sx, j);
        remote_e[j] = map_rank(se, j);
    }

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        // the cluster's tile (2^LOG_CL times a block's rows, a strided one at the same stride)
        // and this block's rows in it
        const i64 ct = t >> LOG_CL;
        const i64 cb = STRIDED ? strided_tile_origin<LOG_G>(ct, tiles_per_outer,
                                                             [=] { return (i64)(TR::ROWS << LOG_CL) << log_inner; })
                               : ct * ((i64)TR::TILE << LOG_CL);
        const i64 base = cb + (STRIDED ? (i64)q * TR::ROWS * inner : (i64)q * TR::TILE);
        auto goff = [&](int i) -> i64 { return stabilized_vec_global<TR>(base, inner, i * THREADS + tid); };
        auto soff = [&](int i, int k) -> int { return stabilized_vec_shared<TR>(i * THREADS + tid, k); };
        // ---- load: values (and, ERRVEC past the first pass, errors) -> shared memory;
        // first pass: check and mark non-finite inputs
#pragma unroll 1
        for (int c0 = 0; c0 < TR::VECS_PER_THREAD; c0 += VECS_IN_FLIGHT) {
            V buf[VECS_IN_FLIGHT], ebuf[VECS_IN_FLIGHT];
#pragma unroll
            for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
                buf[i] = *reinterpret_cast<const V*>(src + goff(c0 + i));
                if (ERRVEC && !first) ebuf[i] = *reinterpret_cast<const V*>(err + goff(c0 + i));
            }
#pragma unroll
            for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    if (check_input && !Num<T>::finite(buf[i].v[k])) {
                        bad_in = true;
                        if (rows) mark_row(rows, goff(c0 + i) + k, log2n, row_shift);
                    }
                    const int s = pad<W>(soff(c0 + i, k));
                    sx[s] = buf[i].v[k];
                    se[s] = (ERRVEC && !first) ? ebuf[i].v[k] : W(0.0f);
                }
            }
        }
        __syncthreads();
        // ---- the block's row bits: compensated rounds through shared memory
        auto round = [&](int b, int k) { stabilized_round<TR, STAB == 2>(sx, se, tid, b, k); };
#pragma unroll
        for (int b = 0; b < LOG_R; b += LOG_E) round(b, (LOG_R - b < LOG_E) ? (LOG_R - b) : LOG_E);
        cluster_sync();                        // every block's rows are transformed
        // ---- the cluster's bits: this block's slice of the positions, from every block
#pragma unroll 1
        for (int e = q * TR::SLICE + tid; e < (q + 1) * TR::SLICE; e += THREADS) {
            int g, r;
            if constexpr (STRIDED) { g = e & (TR::GROUPS - 1); r = e >> LOG_G; }
            else { g = 0; r = e; }
            const unsigned at = (unsigned)(sizeof(W) * Layout::slot(g, r));
            W v[CLUSTER], ev[CLUSTER];
#pragma unroll
            for (int j = 0; j < CLUSTER; ++j) {
                v[j] = ld_cluster<W>(remote_x[j] + at);
                ev[j] = ld_cluster<W>(remote_e[j] + at);
            }
            stab_radix2_stages<W, LOG_CL, STAB == 2>(v, ev, LOG_CL);
#pragma unroll
            for (int j = 0; j < CLUSTER; ++j) {
                const i64 row = (i64)j * TR::ROWS + r;
                const i64 idx = STRIDED ? cb + row * inner + g : cb + row;
                W w = v[j];
                if (!ERRVEC || last) w = N::sub(w, ev[j]);
                else err[idx] = ev[j];
                T val = w;
                if (last) {
                    if (scale != 1.0) val = Num<T>::scale(val, scale);
                    if (!Num<T>::finite(val)) bad_out = true;
                }
                dst[idx] = val;
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
