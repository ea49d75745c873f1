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

// ===========================================================================
// Extended variants: Alman-Rao, Kahan/Neumaier stabilizers (error vector in
// device memory, or pass-local), and a wider compute type W inside the pass.
// Scalar units (no pairs); every operation rounded to W; values converted to
// the storage type T where the pass writes back.
// ===========================================================================

template <typename T, typename W> struct Conv {          // T == W
    static __device__ __forceinline__ W ld(T v) { return v; }
    static __device__ __forceinline__ T st(W v) { return v; }
};
template <> struct Conv<__half, float> {
    static __device__ __forceinline__ float ld(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half st(float v) { return __float2half_rn(v); }
};
template <> struct Conv<__nv_bfloat16, float> {
    static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 st(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Conv<float, double> {
    static __device__ __forceinline__ double ld(float v) { return (double)v; }
    static __device__ __forceinline__ float st(double v) { return __double2float_rn(v); }
};

// Exact helpers in the work type: magnitude (for Neumaier's tests), negation,
// halving (H8 blocks) and scaling by 2^e (Alman-Rao's pre-scaling), each rounded to W.
__device__ __forceinline__ double wabs(double v) { return fabs(v); }
__device__ __forceinline__ double wabs(float v) { return fabsf(v); }
__device__ __forceinline__ double wabs(__half v) { return fabsf(__half2float(v)); }
__device__ __forceinline__ double wabs(__nv_bfloat16 v) { return fabsf(__bfloat162float(v)); }
__device__ __forceinline__ double wneg(double v) { return -v; }
__device__ __forceinline__ float wneg(float v) { return -v; }
__device__ __forceinline__ __half wneg(__half v) { return __hneg(v); }
__device__ __forceinline__ __nv_bfloat16 wneg(__nv_bfloat16 v) { return __hneg(v); }
__device__ __forceinline__ double whalf(double v) { return __dmul_rn(v, 0.5); }
__device__ __forceinline__ float whalf(float v) { return __fmul_rn(v, 0.5f); }
__device__ __forceinline__ __half whalf(__half v) { return __hmul_rn(v, __float2half(0.5f)); }
__device__ __forceinline__ __nv_bfloat16 whalf(__nv_bfloat16 v) { return __hmul_rn(v, __float2bfloat16(0.5f)); }
__device__ __forceinline__ double wpow2(double v, int e) { return ldexp(v, e); }
__device__ __forceinline__ float wpow2(float v, int e) { return ldexpf(v, e); }
__device__ __forceinline__ __half wpow2(__half v, int e) { return __float2half_rn(ldexpf(__half2float(v), e)); }
__device__ __forceinline__ __nv_bfloat16 wpow2(__nv_bfloat16 v, int e) {
    return __float2bfloat16_rn(ldexpf(__bfloat162float(v), e));
}

// Stabilized butterfly (thesis 3.3.1 Kahan / 3.3.2 Neumaier); the true value is x - e.
template <typename W, bool NEU>
__device__ __forceinline__ void stab_butterfly(W& A, W& B, W& eA, W& eB) {
    typedef Num<W> N;
    const W eS = N::add(eA, eB), eD = N::sub(eA, eB);
    const W A1 = N::sub(N::add(A, B), eS);
    const W B1 = N::sub(N::sub(A, B), eD);
    W eA1, eB1;
    if (!NEU) {
        eA1 = N::add(N::sub(N::sub(A1, A), B), eS);
        eB1 = N::add(N::add(N::sub(B1, A), B), eD);
    } else {
        const double a1 = wabs(A1), a = wabs(A), b = wabs(B), b1 = wabs(B1);
        W t;
        if (a1 >= b && a >= b) t = N::sub(N::sub(A1, A), B);
        else if (a1 >= a && b >= a) t = N::sub(N::sub(A1, B), A);
        else t = N::add(N::sub(wneg(A), B), A1);
        eA1 = N::add(t, eS);
        if (b1 >= b && a >= b) t = N::add(N::sub(B1, A), B);
        else if (b1 >= a && b >= a) t = N::sub(N::add(B1, B), A);
        else t = N::add(N::add(wneg(A), B), B1);
        eB1 = N::add(t, eD);
    }
    A = A1; B = B1; eA = eA1; eB = eB1;
}

// Alman-Rao H8 block on v[0..7] (inputs 1..7 pre-doubled), thesis Alg. 9 lines 33-48.
template <typename W>
__device__ __forceinline__ void h8_block(W* v) {
    typedef Num<W> N;
    const W a = v[0], b = v[1], c = v[2], d = v[3], e = v[4], f = v[5], g = v[6], h = v[7];
    const W B1 = N::add(b, c), B2 = N::add(d, h), B3 = N::add(f, g);
    const W tot = whalf(N::add(N::add(N::add(B1, B2), B3), e));
    const W diff = N::sub(a, tot);
    const W D = N::add(diff, d), E = N::add(diff, e), H = N::add(diff, h);
    v[0] = N::add(a, tot);
    v[1] = N::add(N::add(E, c), g);
    v[2] = N::add(N::add(E, b), f);
    v[3] = N::add(E, B2);
    v[4] = N::add(D, B1);
    v[5] = N::add(N::add(H, c), f);
    v[6] = N::add(N::add(H, b), g);
    v[7] = N::add(D, B3);
}

// ALG 0 Folklore / 1 Alman-Rao; STAB 0 none / 1 Kahan / 2 Neumaier; ERRVEC: the error
// vector lives in device memory (err) between passes, else it is folded in at write-back.
// Alman-Rao passes: PRE radix-2 prefix stages, then (PS) the pre-scaling, then H8 stages.
template <typename T, typename W, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED,
          int VEC, int ALG, int STAB, bool ERRVEC, int PRE, bool PS>
__global__ void __launch_bounds__(1 << LOG_T, MIN_BLOCKS(LOG_T))
fwht_ext_pass(const T* src, T* dst, T* err, i64 ntiles, int log_inner, int log2n, int fbits,
              int check_input, int first, int last, double scale, unsigned int* flags)
{
    typedef Num<W> N;
    typedef Conv<T, W> CV;
    constexpr int R = 1 << LOG_R, G = 1 << LOG_G, TILE = R * G, THREADS = 1 << LOG_T;
    constexpr int NVEC = TILE / VEC, VPT = NVEC / THREADS;
    constexpr int RS = STRIDED ? G : 1, GS = STRIDED ? 1 : R;
    constexpr int GV = STRIDED ? G / VEC : 1;
    constexpr int CH = VPT < 4 ? VPT : 4;
    constexpr int PADDED = TILE + (TILE >> (sizeof(W) == 8 ? 4 : sizeof(W) == 4 ? 5 : 6));
    static_assert(VPT >= 1, "tile too small for the thread count");
    static_assert(ALG == 0 || STAB == 0, "stabilizers apply to Folklore only");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    W* sx = reinterpret_cast<W*>(smem_raw);
    W* se = sx + PADDED;                            // errors (STAB only)
    const int tid = threadIdx.x;
    const i64 inner = (i64)1 << log_inner;
    const i64 tiles_per_outer = STRIDED ? (inner >> LOG_G) : 1;
    const i64 nmask = ((i64)1 << log2n) - 1;
    bool bad_in = false, bad_out = false;

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        i64 base;
        if (STRIDED) {
            const i64 o = t / tiles_per_outer, cb = t - o * tiles_per_outer;
            base = o * ((i64)R << log_inner) + (cb << LOG_G);
        } else {
            base = t * (i64)TILE;
        }
        auto goff = [&](int i) -> i64 {
            const int v = i * THREADS + tid;
            if (STRIDED) { const int r = v / GV; return base + (i64)r * inner + (v - r * GV) * VEC; }
            return base + (i64)v * VEC;
        };
        auto soff = [&](int i, int k) -> int {
            const int v = i * THREADS + tid;
            if (STRIDED) { const int r = v / GV; return r * RS + ((v - r * GV) * VEC + k) * GS; }
            return v * VEC + k;
        };
        // global element index of tile position (g, r)
        auto gidx = [&](int g, int r) -> i64 {
            return STRIDED ? base + (i64)r * inner + g : base + (i64)g * R + r;
        };
        __syncthreads();
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<T, VEC> buf[CH], ebuf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                buf[i] = *reinterpret_cast<const Vec<T, VEC>*>(src + goff(c0 + i));
                if (STAB && ERRVEC && !first) ebuf[i] = *reinterpret_cast<const Vec<T, VEC>*>(err + goff(c0 + i));
            }
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    if (check_input && !Num<T>::finite(buf[i].v[k])) bad_in = true;
                    const int s = pad<W>(soff(c0 + i, k));
                    sx[s] = CV::ld(buf[i].v[k]);
                    if (STAB) se[s] = (ERRVEC && !first) ? CV::ld(ebuf[i].v[k]) : CV::ld(T(0.0f));
                }
            }
        }
        __syncthreads();
        // ---- rounds: [b, b + k) of the pass's row bits
        auto round = [&](int b, int k, int kind) {   // kind 0 radix-2, 1 H8
            const int J = 1 << k, QN = R >> k, ITEMS = (TILE >> k) / THREADS;
            for (int it = 0; it < ITEMS; ++it) {
                const int item = it * THREADS + tid;
                int g, q;
                if (STRIDED) { g = item & (G - 1); q = item >> LOG_G; }
                else { q = item & (QN - 1); g = item / QN; }
                const int r0 = ((q >> b) << (b + k)) | (q & ((1 << b) - 1));
                W v[1 << LOG_E], e[STAB ? (1 << LOG_E) : 1];
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) {
                        const int s = pad<W>((r0 | (j << b)) * RS + g * GS);
                        v[j] = sx[s];
                        if (STAB) e[j] = se[s];
                    }
                if (kind == 1) {
                    h8_block<W>(v);
                } else {
#pragma unroll
                    for (int m = 0; m < LOG_E; ++m) {
                        if (m < k) {
#pragma unroll
                            for (int j = 0; j < (1 << LOG_E); ++j) {
                                if (j < J && !(j & (1 << m))) {
                                    const int j2 = j | (1 << m);
                                    if (STAB) {
                                        stab_butterfly<W, STAB == 2>(v[j], v[j2], e[j], e[j2]);
                                    } else {
                                        const W a = v[j], c = v[j2];
                                        v[j] = N::add(a, c);
                                        v[j2] = N::sub(a, c);
                                    }
                                }
                            }
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) {
                        const int s = pad<W>((r0 | (j << b)) * RS + g * GS);
                        sx[s] = v[j];
                        if (STAB) se[s] = e[j];
                    }
            }
            __syncthreads();
        };
        if (ALG == 0) {
#pragma unroll
            for (int b = 0; b < LOG_R; b += LOG_E)
                round(b, (LOG_R - b < LOG_E) ? (LOG_R - b) : LOG_E, 0);
        } else {
            if (PRE > 0) round(0, PRE, 0);
            if (PS) {   // exponent: non-zero octal digits of (i >> fbits), i the index in the transform
                for (int u = tid; u < TILE; u += THREADS) {
                    const int g = STRIDED ? (u & (G - 1)) : u / R;
                    const int r = STRIDED ? (u >> LOG_G) : (u & (R - 1));
                    i64 i = (gidx(g, r) & nmask) >> fbits;
                    int ex = 0;
                    while (i) { ex += (i & 7) != 0; i >>= 3; }
                    const int s = pad<W>(r * RS + g * GS);
                    if (ex) sx[s] = wpow2(sx[s], ex);
                }
                __syncthreads();
            }
#pragma unroll
            for (int b = PRE; b < LOG_R; b += 3) round(b, 3, 1);
        }
        // ---- store (fold the compensation, round to T; last pass: scale, check)
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<T, VEC> buf[CH], ebuf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const int s = pad<W>(soff(c0 + i, k));
                    W w = sx[s];
                    if (STAB) {
                        if (!ERRVEC || last) w = N::sub(w, se[s]);
                        else ebuf[i].v[k] = CV::st(se[s]);
                    }
                    T val = CV::st(w);
                    if (last) {
                        if (scale != 1.0) val = Num<T>::scale(Num<T>::ld(val), scale);
                        if (!Num<T>::finite(val)) bad_out = true;
                    }
                    buf[i].v[k] = val;
                }
            }
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                *reinterpret_cast<Vec<T, VEC>*>(dst + goff(c0 + i)) = buf[i];
                if (STAB && ERRVEC && !last) *reinterpret_cast<Vec<T, VEC>*>(err + goff(c0 + i)) = ebuf[i];
            }
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
