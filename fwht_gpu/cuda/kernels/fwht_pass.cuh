// The tuned pass kernel fwht_pass: Folklore (radix-2) or Alman-Rao (H8 blocks) stages,
// any compute type, no stabilizer.
//
// Template arguments (chosen by launch.py): tile of 2^LOG_R rows x 2^LOG_G groups of T;
// C the compute type (T, or FP32 for FP16/BF16 data, FP64 for FP32 data); 2^LOG_E units
// per thread per round; 2^LOG_T threads; VEC elements of T per vector access; PAIRED:
// 16-bit data moved and transformed as pairs along the unit-stride direction of the tile
// (columns in a strided pass; rows r, r+1 in a contiguous pass, whose stage 0 is then the
// butterfly inside each pair).
//
// The row bits of a pass are split into rounds, each transformed in registers:
//  * round 0 is fused with the load: in a contiguous pass the bits inside one
//    VEC-element vector (coalesced vector loads), in a strided pass LOG_E bits
//    (each thread loads 2^LOG_E rows of one column; a warp reads whole segments);
//  * middle rounds of LOG_E bits go through shared memory;
//  * the last round reads shared memory and writes global memory directly
//    (consecutive threads hold consecutive units, so a warp's stores coalesce).
// A pass of a single round never touches shared memory.  Values are converted
// to C on load and rounded back to T on store; every operation is rounded to C.
// ALG 1 (Alman-Rao): the pass's stages are PRE radix-2 stages, the pre-scaling (PS,
// only in the contiguous first pass) and H8 blocks; its rounds follow Rounds<>.
// ASYNC (passes of several rounds): each block loops over tiles and copies the next
// tile into a staging buffer in shared memory (cp.async) while it transforms the
// current one, so loads stay in flight through the shared-memory rounds; round 0
// then reads the staging buffer instead of global memory.
// src may equal dst (in-place passes): a tile is read completely before it is written.
// Flags written by the pass: bit 0 = non-finite input seen, bit 1 = non-finite output;
// with check_input, the transforms holding a non-finite input are marked in rows (mark_row).
#pragma once

#include "numeric.cuh"
#include "tile.cuh"
#include "butterflies.cuh"
#include "overflow.cuh"

// What follows from fwht_pass's template arguments (usable on the host: SMEM_BYTES).
template <typename T, typename C, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          bool PAIRED, int ALG, int PRE, bool PS, bool ASYNC>
struct PassTraits {
    // the template arguments used by the pieces of the kernel
    static constexpr int LOG_ROWS = LOG_R, LOG_GROUPS = LOG_G;
    static constexpr bool STRIDED_TILE = STRIDED;
    typedef typename Units<T, C, PAIRED>::S S;   // storage unit
    typedef typename Units<T, C, PAIRED>::U U;   // compute unit (shared memory, registers)
    // elements of T per unit (2: a pair of 16-bit values)
    static constexpr int UNIT_ELEMENTS = PAIRED ? 2 : 1;
    // pairs along the rows (contiguous pass): stage 0 is the butterfly inside each pair
    static constexpr bool PAIRS_INSIDE_ROWS = PAIRED && !STRIDED;
    // log2 of the tile's rows and groups, counted in units
    static constexpr int LOG_UNIT_ROWS = LOG_R - (PAIRS_INSIDE_ROWS ? 1 : 0);
    static constexpr int LOG_UNIT_GROUPS = LOG_G - ((PAIRED && STRIDED) ? 1 : 0);
    static constexpr int UNIT_ROWS = 1 << LOG_UNIT_ROWS, UNIT_GROUPS = 1 << LOG_UNIT_GROUPS;
    static constexpr int TILE_UNITS = UNIT_ROWS * UNIT_GROUPS;
    static constexpr int THREADS = 1 << LOG_T;
    // units per vector access, and its log2
    static constexpr int UNITS_PER_VEC = VEC / UNIT_ELEMENTS;
    static constexpr int LOG_UNITS_PER_VEC = UNITS_PER_VEC >= 16 ? 4 : UNITS_PER_VEC >= 8 ? 3
                                           : UNITS_PER_VEC >= 4 ? 2 : UNITS_PER_VEC >= 2 ? 1 : 0;
    static constexpr int VECS_PER_TILE = TILE_UNITS / UNITS_PER_VEC;
    static constexpr int VECS_PER_THREAD = VECS_PER_TILE / THREADS;
    // the tile in shared memory (row and group strides, padding)
    typedef TileLayout<U, STRIDED, LOG_UNIT_ROWS, LOG_UNIT_GROUPS> Layout;
    // round-0 vectors a thread loads before transforming them (16 units in flight)
    static constexpr int MAX_VECS_IN_FLIGHT = UNITS_PER_VEC >= 8 ? 2 : 4;
    static constexpr int VECS_IN_FLIGHT = VECS_PER_THREAD < MAX_VECS_IN_FLIGHT ? VECS_PER_THREAD : MAX_VECS_IN_FLIGHT;
    // Alman-Rao contiguous pass on pairs: round 0 runs on single values (the PRE radix-2
    // stages and the pre-scaling, then with PRE = 0 the H8 block of bits 0..2), so that no
    // later H8 block involves bit 0, the bit inside the pairs; the unit bits it covers
    // (ALMAN_SINGLES_BLOCK_BITS - 1) then count as a prefix for Rounds<>.
    static constexpr bool ALMAN_FIRST_ROUND_ON_SINGLES = ALG == 1 && PAIRS_INSIDE_ROWS;
    // element bits of one block of that round on single values
    static constexpr int ALMAN_SINGLES_BLOCK_BITS = PRE == 0 ? 3 : PRE;
    // row bits, in units, below the first H8 block handled by the shared rounds
    static constexpr int PREFIX_UNIT_BITS = ALMAN_FIRST_ROUND_ON_SINGLES ? ALMAN_SINGLES_BLOCK_BITS - 1 : PRE;
    // the round boundaries (Rounds<>, in unit row bits)
    typedef Rounds<ALG, LOG_UNIT_ROWS, LOG_E, PREFIX_UNIT_BITS> RoundPlan;
    // row bits of round 0, the round fused with the load
    static constexpr int FIRST_ROUND_BITS = ALMAN_FIRST_ROUND_ON_SINGLES
        ? PREFIX_UNIT_BITS : RoundPlan::first(STRIDED ? LOG_E : LOG_UNITS_PER_VEC);
    // rounds after round 0, through shared memory (the last one stores to global memory)
    static constexpr int SHARED_ROUNDS = RoundPlan::count(FIRST_ROUND_BITS);
    // round 0 covers every row bit: no shared memory
    static constexpr bool SINGLE_ROUND = FIRST_ROUND_BITS == LOG_UNIT_ROWS;
    // units a thread transforms in registers per round item (at most)
    static constexpr int ITEM_UNITS = 1 << LOG_E;
    // round-0 items per thread of a strided pass (2^FIRST_ROUND_BITS rows of one group each)
    static constexpr int FIRST_ROUND_ITEMS = (TILE_UNITS >> FIRST_ROUND_BITS) / THREADS;
    static_assert(VECS_PER_THREAD >= 1 && UNITS_PER_VEC >= 1 && (TILE_UNITS >> FIRST_ROUND_BITS) >= THREADS,
                  "tile too small for the threads");
    static_assert(ALG == 0 || (LOG_E >= 3 && (LOG_UNIT_ROWS - PREFIX_UNIT_BITS) % 3 == 0), "Alman-Rao pass layout");
    static_assert(!ALMAN_FIRST_ROUND_ON_SINGLES || (PS && 2 * UNITS_PER_VEC >= (1 << ALMAN_SINGLES_BLOCK_BITS)),
                  "Alman-Rao pairs: first pass, 8-element vectors");
    static_assert(!PS || (!STRIDED && (!PAIRED || ALMAN_FIRST_ROUND_ON_SINGLES) && PRE + 3 <= LOG_R),
                  "pre-scaling: first, contiguous pass");
    // the next tile is copied to the staging buffer while this one is transformed
    static constexpr bool PIPELINED = ASYNC && !SINGLE_ROUND;
    // staging bytes (one tile as stored)
    static constexpr int STAGING_BYTES = TILE_UNITS * (int)sizeof(S);
    // contiguous bytes per tile row in global memory
    static constexpr int ROW_BYTES = STRIDED ? UNIT_GROUPS * (int)sizeof(S) : STAGING_BYTES;
    // shared-memory slots of the padded tile (units)
    static constexpr int PADDED_UNITS = padded_size<U>(TILE_UNITS);
    // byte offset of the staging buffer, after the padded tile (16-byte aligned)
    static constexpr int STAGING_OFFSET = (PADDED_UNITS * (int)sizeof(U) + 15) / 16 * 16;
    static_assert(!PIPELINED || ROW_BYTES % 16 == 0, "asynchronous copies move 16-byte pieces of rows");
    // 16-byte pieces per tile row (one copy each)
    static constexpr int PIECES_PER_ROW = ROW_BYTES >= 16 ? ROW_BYTES / 16 : 1;
    typedef Vec<S, UNITS_PER_VEC> V;   // a round-0 vector as stored
    // 16-byte pieces per round-0 vector
    static constexpr int PIECES_PER_VEC = (int)(sizeof(V) / 16);
    static_assert(PIECES_PER_VEC <= 2, "round-0 vectors of at most 32 bytes");
    // Dynamic shared memory of a launch: the padded tile, and the staging buffer when
    // PIPELINED (launch.py's KernelConfig.smem_bytes; it reserves the padded tile even
    // for a single-round pass, which does not touch it, and pipelines only passes of
    // several rounds).
    static constexpr int SMEM_BYTES = PIPELINED ? STAGING_OFFSET + STAGING_BYTES : PADDED_UNITS * (int)sizeof(U);
    // A 32-byte round-0 vector (contiguous pass) moves as two 16-byte pieces; in the staging
    // buffer piece c sits at c ^ bit 3 of c, so that each quarter-warp's 16-byte reads hit
    // eight distinct bank groups.
    __host__ __device__ static constexpr int staging_piece(int c) {
        return (!STRIDED && PIECES_PER_VEC == 2) ? c ^ ((c >> 3) & 1) : c;
    }
};

// ---- The pieces of fwht_pass's body (TR: its PassTraits).  The kernel calls each through a
// lambda, as the code it replaced did: see the note above fwht_pass.

// first unit of tile t
template <class TR>
__device__ __forceinline__ i64 pass_tile_base(i64 t, i64 tiles_per_outer, int log_inner) {
    if (TR::STRIDED_TILE)
        return strided_tile_origin<TR::LOG_GROUPS>(t, tiles_per_outer,
                                                   [=] { return (i64)1 << (TR::LOG_ROWS + log_inner); })
            / TR::UNIT_ELEMENTS;
    return t * (i64)TR::TILE_UNITS;
}

// prefetch: tile t (tile_base(t): its first unit in usrc) -> staging, 16 bytes per copy
// (cp.async; uinner: a strided tile's row stride in units).  The arguments are references,
// read where they are used (behind the copies' memory clobbers) as in the lambda this
// replaced: passed by value, or with the tile's address computed by the caller, some
// instantiations get other code.
template <class TR, typename TileBase>
__device__ __forceinline__ void pass_prefetch(i64 t, TileBase& tile_base, const typename TR::S* const& usrc,
                                              const int& tid, typename TR::S* const& stg, const i64& uinner) {
    const char* g0 = reinterpret_cast<const char*>(usrc + tile_base(t));
#pragma unroll 4
    for (int c = tid; c < TR::STAGING_BYTES / 16; c += TR::THREADS) {
        const int r = c / TR::PIECES_PER_ROW, off = (c - r * TR::PIECES_PER_ROW) * 16;
        cp_async16(reinterpret_cast<char*>(stg) + TR::staging_piece(c) * 16,
                   g0 + (TR::STRIDED_TILE ? r * uinner * (i64)sizeof(typename TR::S) : 0) + off);
    }
    cp_async_commit();
}

// a stored unit, widened to the compute type; first pass (check_input): a non-finite
// value sets bad
template <class TR>
__device__ __forceinline__ typename TR::U pass_unit_in(typename TR::S s, int check_input, bool& bad) {
    typedef typename TR::S S;
    if (check_input && !Num<S>::finite(s)) bad = true;
    return to<typename TR::U>(s);
}

// a computed unit, rounded to storage; last pass: scaled, and a non-finite result sets bad_out
template <class TR>
__device__ __forceinline__ typename TR::S pass_unit_out(typename TR::U w, int last, double scale, bool& bad_out) {
    typedef typename TR::S S;
    S val = to<S>(w);
    if (last) {
        if (scale != 1.0) val = Num<S>::scale(val, scale);
        if (!Num<S>::finite(val)) bad_out = true;
    }
    return val;
}

// One pass (see the top of this file).  Each block loops over tiles: wait for its staged
// copy (PIPELINED), round 0 fused with the load, then the rounds through shared memory,
// the next tile's prefetch starting as soon as round 0 has emptied the staging buffer.
//
// Why one long function with lambdas: NVVM optimizes every function (a lambda, or a
// __forceinline__ function) on its own before inlining it, so moving a loop nest, or what a
// lambda captures, into another function changes the generated code of some of the 1731
// instantiations (.dev/ptx_compare.py: the split into kernels/ changed none).  The loops
// therefore stay here; the work inside them is in the functions above and in
// butterflies.cuh / overflow.cuh, each called through the lambda that held its code.
template <typename T, typename C, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          bool PAIRED, int ALG, int PRE, bool PS, bool ASYNC>
__global__ void __launch_bounds__(1 << LOG_T, min_blocks_per_sm(LOG_T, sizeof(C) > sizeof(T) || LOG_E > 4))
fwht_pass(const T* src, T* dst, i64 ntiles, int log_inner, int log2n, int fbits,
          int check_input, int last, double scale, unsigned int* flags, unsigned int* rows,
          int row_shift)
{
    typedef PassTraits<T, C, LOG_R, LOG_G, LOG_E, LOG_T, STRIDED, VEC, PAIRED, ALG, PRE, PS, ASYNC> TR;
    typedef typename TR::S S;
    typedef typename TR::U U;
    typedef typename TR::V V;
    typedef typename TR::Layout Layout;
    typedef typename TR::RoundPlan RoundPlan;
    typedef Num<U> N;
    constexpr int THREADS = TR::THREADS, ITEM_UNITS = TR::ITEM_UNITS, UNITS_PER_VEC = TR::UNITS_PER_VEC;
    constexpr int FIRST_ROUND_BITS = TR::FIRST_ROUND_BITS, VECS_IN_FLIGHT = TR::VECS_IN_FLIGHT;
    constexpr bool PIPELINED = TR::PIPELINED, SINGLE_ROUND = TR::SINGLE_ROUND;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);                           // the padded tile
    S* stg = reinterpret_cast<S*>(smem_raw + TR::STAGING_OFFSET);     // PIPELINED: staging (as stored)
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x;
    const i64 uinner = ((i64)1 << log_inner) / TR::UNIT_ELEMENTS;     // strided: row stride in units
    const i64 tiles_per_outer = STRIDED ? strided_tiles_per_outer<LOG_G>(log_inner) : 1;
    bool bad_in = false, bad_out = false;

    // the stages of round [b, b + k) on v[0 .. 2^k); idx(j): transform index of v[j]
    auto apply = [&](U* v, int b, int k, auto idx) {
        round_stages<U, LOG_E, ALG, TR::PREFIX_UNIT_BITS, PS && !TR::ALMAN_FIRST_ROUND_ON_SINGLES>(
            v, b, k, idx, log2n, fbits);
    };
    // ALMAN_FIRST_ROUND_ON_SINGLES: round 0 on the single values of w[0 .. UNITS_PER_VEC), element e0 first
    auto alman_first = [&](U* w, i64 e0) {
        if constexpr (TR::ALMAN_FIRST_ROUND_ON_SINGLES)
            alman_singles_round<U, UNITS_PER_VEC, TR::ALMAN_SINGLES_BLOCK_BITS, PRE>(w, e0, log2n, fbits);
    };
    auto finish = [&](U w) -> S { return pass_unit_out<TR>(w, last, scale, bad_out); };
    auto start = [&](S s, bool& bad) -> U { return pass_unit_in<TR>(s, check_input, bad); };
    // Rare path, after a chunk of input held a non-finite value and before any of it is
    // written: read its units again and mark their transforms (unit(q): global unit index).
    auto mark = [&](int count, auto unit) {
        bad_in = true;
        mark_units<S, TR::UNIT_ELEMENTS>(rows, usrc, count, unit, log2n, row_shift);
    };
    auto tile_base = [&](i64 t) -> i64 { return pass_tile_base<TR>(t, tiles_per_outer, log_inner); };
    auto prefetch = [&](i64 t) { pass_prefetch<TR>(t, tile_base, usrc, tid, stg, uinner); };
    if constexpr (PIPELINED) {
        if (blockIdx.x < ntiles) prefetch(blockIdx.x);
    }

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const i64 ub = tile_base(t);   // first unit of the tile
        // global unit index and shared-memory slot of tile position (g, r)
        auto gidx = [&](int g, int r) -> i64 { return STRIDED ? ub + r * uinner + g : ub + g * TR::UNIT_ROWS + r; };
        auto sidx = [&](int g, int r) -> int { return Layout::slot(g, r); };
        if constexpr (PIPELINED) cp_async_wait_all();   // this thread's copies of tile t have landed
        if (!SINGLE_ROUND) __syncthreads();   // the previous tile's last round has read shared memory

        // ---- round 0, fused with the load
        if constexpr (!STRIDED) {
            // VECS_IN_FLIGHT vectors per thread at a time; the bits inside each vector
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
                                PIPELINED ? reinterpret_cast<const int4*>(stg)[TR::staging_piece(2 * vi + p)]
                                          : reinterpret_cast<const int4*>(usrc + ub + (i64)vi * UNITS_PER_VEC)[p];
                    } else {
                        buf[i] = PIPELINED ? *reinterpret_cast<const V*>(stg + vi * UNITS_PER_VEC)
                                           : *reinterpret_cast<const V*>(usrc + ub + (i64)vi * UNITS_PER_VEC);
                    }
                }
#pragma unroll
                for (int i = 0; i < VECS_IN_FLIGHT; ++i) {
                    U w[ITEM_UNITS > UNITS_PER_VEC ? ITEM_UNITS : UNITS_PER_VEC];
                    bool bad = false;
#pragma unroll
                    for (int k = 0; k < UNITS_PER_VEC; ++k) {
                        w[k] = start(buf[i].v[k], bad);
                        if constexpr (TR::PAIRS_INSIDE_ROWS && !TR::ALMAN_FIRST_ROUND_ON_SINGLES) w[k] = N::intra(w[k]);
                    }
                    const int u0 = ((c0 + i) * THREADS + tid) * UNITS_PER_VEC;
                    if (bad) mark(UNITS_PER_VEC, [&](int q) -> i64 { return ub + u0 + q; });
                    if constexpr (TR::ALMAN_FIRST_ROUND_ON_SINGLES) {
                        alman_first(w, (ub + u0) * 2);
                    } else {
#pragma unroll
                        for (int blk = 0; blk < UNITS_PER_VEC; blk += 1 << FIRST_ROUND_BITS)
                            apply(w + blk, 0, FIRST_ROUND_BITS, [&](int j) -> i64 { return ub + u0 + blk + j; });
                    }
                    if constexpr (SINGLE_ROUND) {
#pragma unroll
                        for (int k = 0; k < UNITS_PER_VEC; ++k) buf[i].v[k] = finish(w[k]);
                        if constexpr (TR::PIECES_PER_VEC == 2) {
#pragma unroll
                            for (int p = 0; p < 2; ++p)
                                reinterpret_cast<int4*>(udst + ub + u0)[p] = reinterpret_cast<const int4*>(&buf[i])[p];
                        } else {
                            *reinterpret_cast<V*>(udst + ub + u0) = buf[i];
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < UNITS_PER_VEC; ++k) sm[pad<U>(u0 + k)] = w[k];
                    }
                }
            }
        } else {
            // items of 2^FIRST_ROUND_BITS rows of one group (consecutive items: consecutive groups)
#pragma unroll 1
            for (int it = 0; it < TR::FIRST_ROUND_ITEMS; ++it) {
                const int item = it * THREADS + tid;
                const int g = item & (TR::UNIT_GROUPS - 1), r0 = (item >> TR::LOG_UNIT_GROUPS) << FIRST_ROUND_BITS;
                S raw[ITEM_UNITS];
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << FIRST_ROUND_BITS))
                        raw[j] = PIPELINED ? stg[(r0 + j) * TR::UNIT_GROUPS + g] : usrc[gidx(g, r0 + j)];
                U w[ITEM_UNITS];
                bool bad = false;
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j)
                    if (j < (1 << FIRST_ROUND_BITS)) w[j] = start(raw[j], bad);
                if (bad) mark(1 << FIRST_ROUND_BITS, [&](int q) -> i64 { return gidx(g, r0 + q); });
                apply(w, 0, FIRST_ROUND_BITS, [&](int j) -> i64 { return gidx(g, r0 + j); });
#pragma unroll
                for (int j = 0; j < ITEM_UNITS; ++j) {
                    if (j < (1 << FIRST_ROUND_BITS)) {
                        if constexpr (SINGLE_ROUND) udst[gidx(g, r0 + j)] = finish(w[j]);
                        else sm[sidx(g, r0 + j)] = w[j];
                    }
                }
            }
        }
        if constexpr (!SINGLE_ROUND) {
            __syncthreads();
            if constexpr (PIPELINED) {                 // staging is free: fetch the next tile
                if (t + gridDim.x < ntiles) prefetch(t + gridDim.x);
            }
            // ---- rounds [b, b + k) through shared memory; the last one stores to global memory
#pragma unroll
            for (int ri = 0; ri < TR::SHARED_ROUNDS; ++ri) {
                const int b = RoundPlan::bound(FIRST_ROUND_BITS, ri);
                const int k = RoundPlan::bound(FIRST_ROUND_BITS, ri + 1) - b;
                const bool final_round = ri == TR::SHARED_ROUNDS - 1;
                const int ITEMS = (TR::TILE_UNITS >> k) / THREADS;    // items per thread (>= 1)
#pragma unroll 1
                for (int it = 0; it < ITEMS; ++it) {
                    int g, r0;
                    round_item<STRIDED>(it * THREADS + tid, b, k, TR::UNIT_ROWS, TR::LOG_UNIT_GROUPS, g, r0);
                    U v[ITEM_UNITS];
#pragma unroll
                    for (int j = 0; j < ITEM_UNITS; ++j)
                        if (j < (1 << k)) v[j] = sm[sidx(g, r0 | (j << b))];
                    apply(v, b, k, [&](int j) -> i64 { return gidx(g, r0 | (j << b)); });
                    if (final_round) {
#pragma unroll
                        for (int j = 0; j < ITEM_UNITS; ++j)
                            if (j < (1 << k)) udst[gidx(g, r0 | (j << b))] = finish(v[j]);
                    } else {
#pragma unroll
                        for (int j = 0; j < ITEM_UNITS; ++j)
                            if (j < (1 << k)) sm[sidx(g, r0 | (j << b))] = v[j];
                    }
                }
                if (!final_round) __syncthreads();
            }
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
