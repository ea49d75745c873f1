// Tile addressing and staging of the fwht_gpu pass kernels: vector accesses, the
// shared-memory padding rule and layout of a tile, the tiles of a strided pass, the
// items of a round, cp.async copies and the launch bounds.
//
// A tile is 2^LOG_ROWS rows x 2^LOG_GROUPS groups of units (see fwht.cu).  In shared
// memory a strided tile is stored row after row (its groups are consecutive in global
// memory), a contiguous tile group after group (its rows are); either way with
// pad<>() applied to the position.
#pragma once

#include "numeric.cuh"

// N units accessed as one vector (16 or 32 bytes).
template <typename U, int N>
struct alignas(N * sizeof(U)) Vec { U v[N]; };

// ---- Shared-memory padding: one unit every 128 bytes breaks power-of-two strides.
template <typename U>
__host__ __device__ constexpr int pad_shift() {   // log2 of the units between two padding slots
    return sizeof(U) == 8 ? 4 : sizeof(U) == 4 ? 5 : 6;
}
template <typename U>
__host__ __device__ __forceinline__ constexpr int pad(int i) {
    return i + (i >> pad_shift<U>());
}
// The two extents of n padded units (n a tile, a power of two):
//  * padded_size: the slots positions 0 .. n - 1 occupy, pad(n - 1) + 1 (fwht_pass's tile;
//    launch.py's KernelConfig.smem_bytes);
//  * padded_end: pad(n), one slot more when 2^pad_shift divides n.  The stabilized pass
//    keeps this historical extent: its error array starts there (ExtConfig.smem_bytes
//    counts two of them), and moving it would change its addressing.
template <typename U>
__host__ __device__ constexpr int padded_size(int n) {
    return n + ((n - 1) >> pad_shift<U>());
}
template <typename U>
__host__ __device__ constexpr int padded_end(int n) {
    return pad<U>(n);
}

// The shared-memory layout of a tile of 2^LOG_ROWS rows x 2^LOG_GROUPS groups of U.
template <typename U, bool STRIDED, int LOG_ROWS, int LOG_GROUPS>
struct TileLayout {
    static constexpr int ROWS = 1 << LOG_ROWS, GROUPS = 1 << LOG_GROUPS;
    static constexpr int UNITS = ROWS * GROUPS;
    static constexpr int ROW_STRIDE = STRIDED ? GROUPS : 1;     // units between rows r, r + 1
    static constexpr int GROUP_STRIDE = STRIDED ? 1 : ROWS;     // units between groups g, g + 1
    // the padded shared-memory slot of (group g, row r)
    static __device__ __forceinline__ int slot(int g, int r) { return pad<U>(r * ROW_STRIDE + g * GROUP_STRIDE); }
};

// ---- Tiles of a strided pass (inner = 2^log_inner, the stride of its rows; tiles of
// 2^LOG_R rows x 2^LOG_G columns): an outer block of 2^LOG_R rows x inner columns holds
// tiles_per_outer tiles; tile t starts at element o * outer_elems + (cb << LOG_G), o and cb
// its outer block and column block (outer_elems = 2^LOG_R * inner).
template <int LOG_G>
__device__ __forceinline__ i64 strided_tiles_per_outer(int log_inner) {
    return ((i64)1 << log_inner) >> LOG_G;
}
// outer_elems() gives outer_elems, evaluated after the division: the two kernels spell it
// differently (fwht_pass 1 << (LOG_R + log_inner), the stabilized pass R << log_inner), and
// both the spelling and the place of its evaluation show in their generated code.
template <int LOG_G, typename OuterElems>
__device__ __forceinline__ i64 strided_tile_origin(i64 t, i64 tiles_per_outer, OuterElems outer_elems) {
    const i64 o = t / tiles_per_outer, cb = t - o * tiles_per_outer;
    return o * outer_elems() + (cb << LOG_G);
}

// Round item -> (group g, first row r0) of a round over row bits [b, b + k) of a tile of
// `rows` x 2^log_g: consecutive items take consecutive groups (strided tile, whose groups are
// consecutive in memory) or consecutive rows (contiguous tile); the item's rows are
// r0 | (j << b), j < 2^k.
template <bool STRIDED>
__device__ __forceinline__ void round_item(int item, int b, int k, int rows, int log_g, int& g, int& r0) {
    int q;
    if (STRIDED) { g = item & ((1 << log_g) - 1); q = item >> log_g; }
    else { const int qn = rows >> k; q = item & (qn - 1); g = item / qn; }
    r0 = ((q >> b) << (b + k)) | (q & ((1 << b) - 1));
}

// ---- 16-byte asynchronous copy global -> shared (cp.async, sm_80+), and its group fences.
__device__ __forceinline__ void cp_async16(void* sdst, const void* gsrc) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
#else
    *reinterpret_cast<int4*>(sdst) = *reinterpret_cast<const int4*>(gsrc);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// ---- Occupancy (the second argument of __launch_bounds__ for 2^log_t threads): ask for
// 1024 resident threads per SM (a 64-register cap), enough loads in flight to cover
// memory latency in these memory-bound kernels; 512 (a 128-register cap) when `wide`
// (values held in a wider compute type, or 32 units per thread per round).
__host__ __device__ constexpr int min_blocks_per_sm(int log_t, bool wide = false) {
    return wide ? (log_t >= 9 ? 1 : (512 >> log_t)) : (log_t >= 10 ? 1 : (1024 >> log_t));
}
