// The stabilized pass kernel fwht_stabilized_pass: Kahan/Neumaier (thesis 3.3), with
// the error vector in device memory, or pass-local.  Scalar units (no pairs); every
// operation rounded to the storage type T.
//
// A block loops over tiles (2^LOG_R rows x 2^LOG_G groups, see fwht.cu): it loads the
// tile's values, and with ERRVEC past the first pass their errors, into shared memory
// with VEC-element vector accesses, runs rounds of up to LOG_E compensated radix-2
// stages in registers through shared memory, then stores the tile back: values with
// their errors folded in (pass-local errors, or the last pass), else values and errors.
#pragma once

#include "numeric.cuh"
#include "tile.cuh"
#include "butterflies.cuh"
#include "overflow.cuh"

// What follows from fwht_stabilized_pass's template arguments (usable on the host: SMEM_BYTES).
template <typename T, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC, int STAB,
          bool ERRVEC>
struct StabilizedPassTraits {
    typedef T W;                                              // the work type: every operation in T
    // the template arguments used by the pieces of the kernel
    static constexpr int LOG_GROUPS = LOG_G, LOG_ITEM_UNITS = LOG_E, VEC_ELEMENTS = VEC;
    static constexpr bool STRIDED_TILE = STRIDED;
    static constexpr int ROWS = 1 << LOG_R, GROUPS = 1 << LOG_G;
    static constexpr int TILE = ROWS * GROUPS;                // elements per tile
    static constexpr int THREADS = 1 << LOG_T;
    static constexpr int VECS_PER_TILE = TILE / VEC;
    static constexpr int VECS_PER_THREAD = VECS_PER_TILE / THREADS;
    // the tile in shared memory (row and group strides, padding)
    typedef TileLayout<T, STRIDED, LOG_R, LOG_G> Layout;
    // vectors per tile row (strided pass; a contiguous tile is one run of vectors)
    static constexpr int VECS_PER_ROW = STRIDED ? GROUPS / VEC : 1;
    // vectors a thread loads before writing them to shared memory
    static constexpr int VECS_IN_FLIGHT = VECS_PER_THREAD < 4 ? VECS_PER_THREAD : 4;
    // shared-memory extent of the padded values; the errors follow at this offset
    // (padded_end: the stabilized pass's historical extent, see tile.cuh)
    static constexpr int PADDED_ELEMENTS = padded_end<T>(TILE);
    // dynamic shared memory of a launch: padded values and errors (launch.py's ExtConfig.smem_bytes)
    static constexpr int SMEM_BYTES = 2 * PADDED_ELEMENTS * (int)sizeof(T);
    static_assert(VECS_PER_THREAD >= 1, "tile too small for the thread count");
    static_assert(STAB == 1 || STAB == 2, "a stabilizer");
};

// ---- The pieces of fwht_stabilized_pass's body (TR: its StabilizedPassTraits), each
// called through a lambda as in fwht_pass (see the note there).

// first element of tile t
template <class TR>
__device__ __forceinline__ i64 stabilized_tile_base(i64 t, i64 tiles_per_outer, int log_inner) {
    if (TR::STRIDED_TILE)
        return strided_tile_origin<TR::LOG_GROUPS>(t, tiles_per_outer, [=] { return (i64)TR::ROWS << log_inner; });
    return t * (i64)TR::TILE;
}

// Vector v of a tile (v = i * THREADS + tid: this thread's i-th): its first element in
// global memory (tile at base, rows at stride inner) ...
template <class TR>
__device__ __forceinline__ i64 stabilized_vec_global(i64 base, i64 inner, int v) {
    constexpr int VEC = TR::VEC_ELEMENTS, VECS_PER_ROW = TR::VECS_PER_ROW;
    if (TR::STRIDED_TILE) {
        const int r = v / VECS_PER_ROW;
        return base + (i64)r * inner + (v - r * VECS_PER_ROW) * VEC;
    }
    return base + (i64)v * VEC;
}
// ... and the unpadded shared-memory position of its element k
template <class TR>
__device__ __forceinline__ int stabilized_vec_shared(int v, int k) {
    constexpr int VEC = TR::VEC_ELEMENTS, VECS_PER_ROW = TR::VECS_PER_ROW;
    typedef typename TR::Layout Layout;
    if (TR::STRIDED_TILE) {
        const int r = v / VECS_PER_ROW;
        return r * Layout::ROW_STRIDE + ((v - r * VECS_PER_ROW) * VEC + k) * Layout::GROUP_STRIDE;
    }
    return v * VEC + k;
}

// One round over row bits [b, b + k) (k <= LOG_E): values sx and errors se through
// registers, compensated stages (NEU: Neumaier's, else Kahan's); ends with a barrier.
template <class TR, bool NEU>
__device__ __forceinline__ void stabilized_round(typename TR::W* sx, typename TR::W* se, int tid, int b, int k) {
    typedef typename TR::W W;
    typedef typename TR::Layout Layout;
    constexpr int LOG_E = TR::LOG_ITEM_UNITS;
    const int J = 1 << k, ITEMS = (TR::TILE >> k) / TR::THREADS;
    for (int it = 0; it < ITEMS; ++it) {
        int g, r0;
        round_item<TR::STRIDED_TILE>(it * TR::THREADS + tid, b, k, TR::ROWS, TR::LOG_GROUPS, g, r0);
        W v[1 << LOG_E], e[1 << LOG_E];
#pragma unroll
        for (int j = 0; j < (1 << LOG_E); ++j)
            if (j < J) {
                const int s = Layout::slot(g, r0 | (j << b));
                v[j] = sx[s];
                e[j] = se[s];
            }
        stab_radix2_stages<W, LOG_E, NEU>(v, e, k);
#pragma unroll
        for (int j = 0; j < (1 << LOG_E); ++j)
            if (j < J) {
                const int s = Layout::slot(g, r0 | (j << b));
                sx[s] = v[j];
                se[s] = e[j];
            }
    }
    __syncthreads();
}

// STAB 1 Kahan / 2 Neumaier; ERRVEC: the error vector lives in device memory (err)
// between passes, else it is folded in at write-back.  One function with lambdas, for the
// reason given above fwht_pass.
template <typename T, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC, int STAB,
          bool ERRVEC>
__global__ void __launch_bounds__(1 << LOG_T, min_blocks_per_sm(LOG_T))
fwht_stabilized_pass(const T* src, T* dst, T* err, i64 ntiles, int log_inner, int log2n,
                     int check_input, int first, int last, double scale, unsigned int* flags,
                     unsigned int* rows, int row_shift)
{
    typedef StabilizedPassTraits<T, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, STAB, ERRVEC> TR;
    typedef T W;
    typedef Num<W> N;
    typedef Vec<T, VEC> V;
    constexpr int THREADS = TR::THREADS, VECS_IN_FLIGHT = TR::VECS_IN_FLIGHT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    W* sx = reinterpret_cast<W*>(smem_raw);          // values
    W* se = sx + TR::PADDED_ELEMENTS;                // errors
    const int tid = threadIdx.x;
    const i64 inner = (i64)1 << log_inner;
    const i64 tiles_per_outer = STRIDED ? (inner >> LOG_G) : 1;
    bool bad_in = false, bad_out = false;

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const i64 base = stabilized_tile_base<TR>(t, tiles_per_outer, log_inner);
        // this thread's vector i: its first element in global memory, the shared position of element k
        auto goff = [&](int i) -> i64 { return stabilized_vec_global<TR>(base, inner, i * THREADS + tid); };
        auto soff = [&](int i, int k) -> int { return stabilized_vec_shared<TR>(i * THREADS + tid, k); };
        __syncthreads();
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
        // ---- rounds: [b, b + k) of the pass's row bits
        auto round = [&](int b, int k) { stabilized_round<TR, STAB == 2>(sx, se, tid, b, k); };
#pragma unroll
        for (int b = 0; b < LOG_R; b += LOG_E) round(b, (LOG_R - b < LOG_E) ? (LOG_R - b) : LOG_E);
        // ---- store (fold the compensation, round to T; last pass: scale, check)
#pragma unroll 1
        for (int c0 = 0; c0 < TR::VECS_PER_THREAD; c0 += VECS_IN_FLIGHT) {
            V buf[VECS_IN_FLIGHT], ebuf[VECS_IN_FLIGHT];
#pragma unroll
            for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const int s = pad<W>(soff(c0 + i, k));
                    W w = sx[s];
                    if (!ERRVEC || last) w = N::sub(w, se[s]);
                    else ebuf[i].v[k] = se[s];
                    T val = w;
                    if (last) {
                        if (scale != 1.0) val = Num<T>::scale(val, scale);
                        if (!Num<T>::finite(val)) bad_out = true;
                    }
                    buf[i].v[k] = val;
                }
            }
#pragma unroll
            for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
                *reinterpret_cast<V*>(dst + goff(c0 + i)) = buf[i];
                if (ERRVEC && !last) *reinterpret_cast<V*>(err + goff(c0 + i)) = ebuf[i];
            }
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
