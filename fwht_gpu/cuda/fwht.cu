// fwht_gpu CUDA kernels: one launch = one pass of a Plan.
//
// A pass covers index bits [first_bit, first_bit + LOG_R) of every transform:
// it loads tiles of R = 2^LOG_R "rows" (the elements that differ in those
// bits) times G = 2^LOG_G "groups" into shared memory, applies the pass's
// radix-2 stages from the lowest bit up, and writes the tile back.
//
//  * contiguous pass (first_bit = 0): a tile is G consecutive chunks of R
//    consecutive elements (TILE contiguous elements);
//  * strided pass (first_bit > 0, inner = 2^first_bit): a tile is R rows at
//    stride `inner` of G consecutive columns (G * sizeof(T) contiguous bytes
//    per row: a full 32-byte sector when the planner can).
//
// Global memory is accessed with VEC-element vectors (16 bytes when possible).
// In shared memory each round gives every thread 2^k elements of one group
// (k <= LOG_E stages), which it transforms in registers.  Every addition and
// subtraction is rounded to the storage type T (FP16/BF16 with the native
// correctly rounded half-precision add/sub), in the same order as the NumPy engine,
// so the two engines return identical bits.  Indices are 64-bit.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;

template <typename T> struct Num;

template <> struct Num<double> {
    typedef double W;
    static __device__ __forceinline__ W ld(double v) { return v; }
    static __device__ __forceinline__ double st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __dadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __dsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(v); }
    static __device__ __forceinline__ double scale(W v, double s) { return __dmul_rn(v, s); }
};

template <> struct Num<float> {
    typedef float W;
    static __device__ __forceinline__ W ld(float v) { return v; }
    static __device__ __forceinline__ float st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __fsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(v); }
    static __device__ __forceinline__ float scale(W v, double s) {
        return __double2float_rn(__dmul_rn((double)v, s));
    }
};

// FP16/BF16: native add/sub (add.rn.f16 / add.rn.bf16) are correctly rounded, the
// same value as computing in FP32 and rounding once (24 >= 2p + 2), without the
// two conversions per operation.
template <> struct Num<__half> {
    typedef __half W;
    static __device__ __forceinline__ W ld(__half v) { return v; }
    static __device__ __forceinline__ __half st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __hadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __hsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(__half2float(v)); }
    static __device__ __forceinline__ __half scale(W v, double s) {
        return __float2half_rn(__double2float_rn(__dmul_rn((double)__half2float(v), s)));
    }
};

template <> struct Num<__nv_bfloat16> {
    typedef __nv_bfloat16 W;
    static __device__ __forceinline__ W ld(__nv_bfloat16 v) { return v; }
    static __device__ __forceinline__ __nv_bfloat16 st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __hadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __hsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(__bfloat162float(v)); }
    static __device__ __forceinline__ __nv_bfloat16 scale(W v, double s) {
        return __float2bfloat16_rn(__double2float_rn(__dmul_rn((double)__bfloat162float(v), s)));
    }
};

template <typename T, int VEC>
struct alignas(VEC * sizeof(T)) Vec { T v[VEC]; };

// Shared-memory padding: one element every 128 bytes breaks power-of-two strides.
template <typename T>
__device__ __forceinline__ int pad(int i) {
    return i + (i >> (sizeof(T) == 8 ? 4 : sizeof(T) == 4 ? 5 : 6));
}

// Occupancy: ask for 1024 resident threads per SM (a 64-register cap), enough
// loads in flight to cover memory latency in this memory-bound kernel.
#define MIN_BLOCKS(LOG_T) ((LOG_T) >= 10 ? 1 : (1024 >> (LOG_T)))

// src may equal dst (in-place passes): a tile is read completely before it is written.
// Flags written by the pass: bit 0 = non-finite input seen, bit 1 = non-finite output.
template <typename T, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC>
__global__ void __launch_bounds__(1 << LOG_T, MIN_BLOCKS(LOG_T))
fwht_pass(const T* src, T* dst, i64 ntiles, int log_inner,
          int check_input, int last, double scale, unsigned int* flags)
{
    typedef Num<T> N;
    typedef typename N::W W;
    constexpr int R = 1 << LOG_R, G = 1 << LOG_G, TILE = R * G, THREADS = 1 << LOG_T;
    constexpr int NVEC = TILE / VEC, VPT = NVEC / THREADS;      // vectors per thread
    constexpr int RS = STRIDED ? G : 1, GS = STRIDED ? 1 : R;  // shared layout strides
    constexpr int GV = STRIDED ? G / VEC : 1;                   // vectors per strided row
    constexpr int CH = VPT < 4 ? VPT : 4;                      // vectors in flight per thread
    static_assert(VPT >= 1, "tile too small for the thread count");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sm = reinterpret_cast<T*>(smem_raw);
    const int tid = threadIdx.x;
    const i64 inner = (i64)1 << log_inner;
    const i64 tiles_per_outer = STRIDED ? (inner >> LOG_G) : 1;
    bool bad_in = false, bad_out = false;

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        i64 base;
        if (STRIDED) {
            const i64 o = t / tiles_per_outer, cb = t - o * tiles_per_outer;
            base = o * ((i64)R << log_inner) + (cb << LOG_G);
        } else {
            base = t * (i64)TILE;
        }
        // global offset of this thread's i-th vector, shared index of its k-th element
        auto goff = [&](int i) -> i64 {
            const int v = i * THREADS + tid;
            if (STRIDED) {
                const int r = v / GV;
                return base + (i64)r * inner + (v - r * GV) * VEC;
            }
            return base + (i64)v * VEC;
        };
        auto soff = [&](int i, int k) -> int {
            const int v = i * THREADS + tid;
            if (STRIDED) {
                const int r = v / GV;
                return r * RS + ((v - r * GV) * VEC + k) * GS;
            }
            return v * VEC + k;   // = g * R + r
        };
        // ---- load: global -> registers (CH vectors in flight) -> shared
        __syncthreads();   // the previous tile's store has finished reading shared memory
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<T, VEC> buf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i)
                buf[i] = *reinterpret_cast<const Vec<T, VEC>*>(src + goff(c0 + i));
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    if (check_input && !N::finite(buf[i].v[k])) bad_in = true;
                    sm[pad<T>(soff(c0 + i, k))] = buf[i].v[k];
                }
            }
        }
        __syncthreads();
        // ---- rounds of up to LOG_E stages in registers
#pragma unroll
        for (int b = 0; b < LOG_R; b += LOG_E) {
            const int k = (LOG_R - b < LOG_E) ? (LOG_R - b) : LOG_E;
            const int J = 1 << k;
            const int QN = R >> k;                      // items per group
            const int ITEMS = (TILE >> k) / THREADS;    // items per thread (>= 1)
#pragma unroll 1
            for (int it = 0; it < ITEMS; ++it) {
                const int item = it * THREADS + tid;
                int g, q;
                if (STRIDED) { g = item & (G - 1); q = item >> LOG_G; }
                else { q = item & (QN - 1); g = item / QN; }
                const int lowmask = (1 << b) - 1;
                const int r0 = ((q >> b) << (b + k)) | (q & lowmask);
                W v[1 << LOG_E];
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) v[j] = N::ld(sm[pad<T>((r0 | (j << b)) * RS + g * GS)]);
#pragma unroll
                for (int m = 0; m < LOG_E; ++m) {
                    if (m < k) {
#pragma unroll
                        for (int j = 0; j < (1 << LOG_E); ++j) {
                            if (j < J && !(j & (1 << m))) {
                                const W a = v[j], c = v[j | (1 << m)];
                                v[j] = N::add(a, c);
                                v[j | (1 << m)] = N::sub(a, c);
                            }
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) sm[pad<T>((r0 | (j << b)) * RS + g * GS)] = N::st(v[j]);
            }
            __syncthreads();
        }
        // ---- store: shared -> registers -> global (last pass: scale, check)
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<T, VEC> buf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    T val = sm[pad<T>(soff(c0 + i, k))];
                    if (last) {
                        if (scale != 1.0) val = N::scale(N::ld(val), scale);
                        if (!N::finite(val)) bad_out = true;
                    }
                    buf[i].v[k] = val;
                }
            }
#pragma unroll
            for (int i = 0; i < CH; ++i)
                *reinterpret_cast<Vec<T, VEC>*>(dst + goff(c0 + i)) = buf[i];
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
