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

// Packed pairs of FP16/BF16 values: two butterflies per instruction (HADD2).
template <> struct Num<__half2> {
    typedef __half2 W;
    static __device__ __forceinline__ W ld(__half2 v) { return v; }
    static __device__ __forceinline__ __half2 st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __hadd2_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __hsub2_rn(a, b); }
    // the butterfly between the two lanes (stage 0 of a contiguous pass)
    static __device__ __forceinline__ W intra(W p) {
        const __half a = __low2half(p), b = __high2half(p);
        return __halves2half2(__hadd_rn(a, b), __hsub_rn(a, b));
    }
    static __device__ __forceinline__ bool finite(W v) {
        return isfinite(__low2float(v)) && isfinite(__high2float(v));
    }
    static __device__ __forceinline__ __half2 scale(W v, double s) {
        return __halves2half2(Num<__half>::scale(__low2half(v), s), Num<__half>::scale(__high2half(v), s));
    }
};

template <> struct Num<__nv_bfloat162> {
    typedef __nv_bfloat162 W;
    static __device__ __forceinline__ W ld(__nv_bfloat162 v) { return v; }
    static __device__ __forceinline__ __nv_bfloat162 st(W v) { return v; }
    static __device__ __forceinline__ W add(W a, W b) { return __hadd2_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __hsub2_rn(a, b); }
    static __device__ __forceinline__ W intra(W p) {
        const __nv_bfloat16 a = __low2bfloat16(p), b = __high2bfloat16(p);
        return __halves2bfloat162(__hadd_rn(a, b), __hsub_rn(a, b));
    }
    static __device__ __forceinline__ bool finite(W v) {
        return isfinite(__low2float(v)) && isfinite(__high2float(v));
    }
    static __device__ __forceinline__ __nv_bfloat162 scale(W v, double s) {
        return __halves2bfloat162(Num<__nv_bfloat16>::scale(__low2bfloat16(v), s),
                                  Num<__nv_bfloat16>::scale(__high2bfloat16(v), s));
    }
};

// The unit a thread moves and transforms: T, or a pair of T (PAIRED, 16-bit types).
template <typename T, bool PAIRED> struct Unit { typedef T type; };
template <> struct Unit<__half, true> { typedef __half2 type; };
template <> struct Unit<__nv_bfloat16, true> { typedef __nv_bfloat162 type; };

template <typename U, int N>
struct alignas(N * sizeof(U)) Vec { U v[N]; };

// Shared-memory padding: one unit every 128 bytes breaks power-of-two strides.
template <typename U>
__device__ __forceinline__ int pad(int i) {
    return i + (i >> (sizeof(U) == 8 ? 4 : sizeof(U) == 4 ? 5 : 6));
}

// Occupancy: ask for 1024 resident threads per SM (a 64-register cap), enough
// loads in flight to cover memory latency in this memory-bound kernel.
#define MIN_BLOCKS(LOG_T) ((LOG_T) >= 10 ? 1 : (1024 >> (LOG_T)))

// One pass.  Template arguments (chosen by launch.py): tile of 2^LOG_R rows x
// 2^LOG_G groups of T; 2^LOG_E units per thread per round; 2^LOG_T threads;
// VEC elements of T per global access; PAIRED: 16-bit data moved and
// transformed as pairs along the unit-stride direction of the tile (columns in
// a strided pass; rows r, r+1 in a contiguous pass, whose stage 0 is then the
// butterfly inside each pair).
// src may equal dst (in-place passes): a tile is read completely before it is written.
// Flags written by the pass: bit 0 = non-finite input seen, bit 1 = non-finite output.
template <typename T, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC, bool PAIRED>
__global__ void __launch_bounds__(1 << LOG_T, MIN_BLOCKS(LOG_T))
fwht_pass(const T* src, T* dst, i64 ntiles, int log_inner,
          int check_input, int last, double scale, unsigned int* flags)
{
    typedef typename Unit<T, PAIRED>::type U;
    typedef Num<U> N;
    typedef typename N::W W;
    constexpr int P = PAIRED ? 2 : 1;                           // elements per unit
    constexpr bool INTRA = PAIRED && !STRIDED;                  // stage 0 inside the pairs
    constexpr int LR = LOG_R - (INTRA ? 1 : 0);                 // unit rows (log2)
    constexpr int LG = LOG_G - ((PAIRED && STRIDED) ? 1 : 0);   // unit groups (log2)
    constexpr int R = 1 << LOG_R, UR = 1 << LR, UG = 1 << LG, UTILE = UR * UG;
    constexpr int THREADS = 1 << LOG_T, UVEC = VEC / P;
    constexpr int NVEC = UTILE / UVEC, VPT = NVEC / THREADS;    // vectors per thread
    constexpr int RS = STRIDED ? UG : 1, GS = STRIDED ? 1 : UR; // shared layout strides (units)
    constexpr int GV = STRIDED ? UG / UVEC : 1;                 // vectors per strided row
    constexpr int CH = VPT < 4 ? VPT : 4;                       // vectors in flight per thread
    static_assert(VPT >= 1 && UVEC >= 1, "tile too small for the thread count");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);
    const int tid = threadIdx.x;
    const i64 inner = (i64)1 << log_inner;
    const i64 tiles_per_outer = STRIDED ? (inner >> LOG_G) : 1;
    bool bad_in = false, bad_out = false;

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        i64 base;   // in elements of T
        if (STRIDED) {
            const i64 o = t / tiles_per_outer, cb = t - o * tiles_per_outer;
            base = o * ((i64)R << log_inner) + (cb << LOG_G);
        } else {
            base = t * (i64)(R << LOG_G);
        }
        // global offset (elements) of this thread's i-th vector; shared index (units) of its k-th unit
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
                return r * RS + ((v - r * GV) * UVEC + k) * GS;
            }
            return v * UVEC + k;   // = g * UR + r
        };
        // ---- load: global -> registers (CH vectors in flight) -> shared
        __syncthreads();   // the previous tile's store has finished reading shared memory
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<U, UVEC> buf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i)
                buf[i] = *reinterpret_cast<const Vec<U, UVEC>*>(src + goff(c0 + i));
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < UVEC; ++k) {
                    if (check_input && !N::finite(buf[i].v[k])) bad_in = true;
                    sm[pad<U>(soff(c0 + i, k))] = buf[i].v[k];
                }
            }
        }
        __syncthreads();
        if constexpr (INTRA && LR == 0) {
            // a 2-point transform: only the butterfly inside each pair
            for (int u = tid; u < UTILE; u += THREADS)
                sm[pad<U>(u)] = N::st(N::intra(N::ld(sm[pad<U>(u)])));
            __syncthreads();
        }
        // ---- rounds of up to LOG_E stages (over unit rows) in registers
#pragma unroll
        for (int b = 0; b < LR; b += LOG_E) {
            const int k = (LR - b < LOG_E) ? (LR - b) : LOG_E;
            const int J = 1 << k;
            const int QN = UR >> k;                      // items per group
            const int ITEMS = (UTILE >> k) / THREADS;    // items per thread (>= 1)
#pragma unroll 1
            for (int it = 0; it < ITEMS; ++it) {
                const int item = it * THREADS + tid;
                int g, q;
                if (STRIDED) { g = item & (UG - 1); q = item >> LG; }
                else { q = item & (QN - 1); g = item / QN; }
                const int lowmask = (1 << b) - 1;
                const int r0 = ((q >> b) << (b + k)) | (q & lowmask);
                W v[1 << LOG_E];
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) v[j] = N::ld(sm[pad<U>((r0 | (j << b)) * RS + g * GS)]);
                if constexpr (INTRA) {
                    if (b == 0) {
#pragma unroll
                        for (int j = 0; j < (1 << LOG_E); ++j)
                            if (j < J) v[j] = N::intra(v[j]);
                    }
                }
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
                    if (j < J) sm[pad<U>((r0 | (j << b)) * RS + g * GS)] = N::st(v[j]);
            }
            __syncthreads();
        }
        // ---- store: shared -> registers -> global (last pass: scale, check)
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<U, UVEC> buf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < UVEC; ++k) {
                    U val = sm[pad<U>(soff(c0 + i, k))];
                    if (last) {
                        if (scale != 1.0) val = N::scale(N::ld(val), scale);
                        if (!N::finite(val)) bad_out = true;
                    }
                    buf[i].v[k] = val;
                }
            }
#pragma unroll
            for (int i = 0; i < CH; ++i)
                *reinterpret_cast<Vec<U, UVEC>*>(dst + goff(c0 + i)) = buf[i];
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
