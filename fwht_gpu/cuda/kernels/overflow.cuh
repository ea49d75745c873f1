// Per-transform overflow marking of the fwht_gpu kernels.
#pragma once

#include "numeric.cuh"

// Overflow is judged per transform: the first pass records, in a bit per transform, which
// transforms hold a non-finite input (rows == nullptr: not recorded).  Element e belongs to
// transform ((e >> log2n) << row_shift) | (e mod 2^row_shift): rows of 2^log2n elements, each
// holding 2^row_shift interleaved transforms (a non-last axis with 2^row_shift trailing
// elements; 0 otherwise).  Only reached when a non-finite input is seen.
__device__ __forceinline__ void mark_row(unsigned int* rows, i64 e, int log2n, int row_shift) {
    const i64 id = ((e >> log2n) << row_shift) | (e & (((i64)1 << row_shift) - 1));
    atomicOr(rows + (id >> 5), 1u << (id & 31));
}
template <typename S>
__device__ __forceinline__ void mark_bad(unsigned int* rows, S, i64 e, int log2n, int row_shift) {
    mark_row(rows, e, log2n, row_shift);
}
template <typename P>   // pairs of 16-bit values: each lane on its own
__device__ __forceinline__ void mark_pair(unsigned int* rows, P s, i64 e, int log2n, int row_shift) {
    if (!isfinite(__low2float(s))) mark_row(rows, e, log2n, row_shift);
    if (!isfinite(__high2float(s))) mark_row(rows, e + 1, log2n, row_shift);
}
template <> __device__ __forceinline__ void mark_bad(unsigned int* r, __half2 s, i64 e, int l, int h) {
    mark_pair(r, s, e, l, h);
}
template <> __device__ __forceinline__ void mark_bad(unsigned int* r, __nv_bfloat162 s, i64 e, int l, int h) {
    mark_pair(r, s, e, l, h);
}

// The rare path of a pass that saw a non-finite input: read count units of src again
// (unit(q): the global index of the q-th, in units of P elements) and mark the transforms
// of their non-finite values (rows == nullptr: nothing to mark).
template <typename S, int P, typename Unit>
__device__ __forceinline__ void mark_units(unsigned int* rows, const S* src, int count, Unit unit, int log2n,
                                           int row_shift) {
    if (!rows) return;
#pragma unroll 1
    for (int q = 0; q < count; ++q) {
        const i64 u = unit(q);
        const S s = src[u];
        if (!Num<S>::finite(s)) mark_bad(rows, s, u * P, log2n, row_shift);
    }
}
