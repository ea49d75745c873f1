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
//    per row: a 128-byte segment when the stride allows).
//
// Global memory is accessed with VEC-element vectors (16 bytes when possible) or,
// where a round is fused with the load or store, with one unit per thread and
// consecutive units across a warp.  Each round gives every thread 2^k units of one
// group (k <= LOG_E stages), which it transforms in registers.  Every addition and
// subtraction is rounded to the compute type (the storage type T unless a wider
// compute_dtype is planned; FP16/BF16 with the native correctly rounded
// half-precision add/sub), in the same order as the NumPy engine, so the two engines
// return identical bits.  Indices are 64-bit.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;

template <typename T> struct Num;

template <> struct Num<double> {
    typedef double W;
    static __device__ __forceinline__ W add(W a, W b) { return __dadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __dsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(v); }
    static __device__ __forceinline__ double scale(W v, double s) { return __dmul_rn(v, s); }
};

template <> struct Num<float> {
    typedef float W;
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
    static __device__ __forceinline__ W add(W a, W b) { return __hadd_rn(a, b); }
    static __device__ __forceinline__ W sub(W a, W b) { return __hsub_rn(a, b); }
    static __device__ __forceinline__ bool finite(W v) { return isfinite(__half2float(v)); }
    static __device__ __forceinline__ __half scale(W v, double s) {
        return __float2half_rn(__double2float_rn(__dmul_rn((double)__half2float(v), s)));
    }
};

template <> struct Num<__nv_bfloat16> {
    typedef __nv_bfloat16 W;
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

// Pairs of FP32 values (FP16/BF16 pairs computed in FP32).
template <> struct Num<float2> {
    typedef float2 W;
    static __device__ __forceinline__ W add(W a, W b) { return make_float2(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y)); }
    static __device__ __forceinline__ W sub(W a, W b) { return make_float2(__fsub_rn(a.x, b.x), __fsub_rn(a.y, b.y)); }
    static __device__ __forceinline__ W intra(W p) { return make_float2(__fadd_rn(p.x, p.y), __fsub_rn(p.x, p.y)); }
};

// The two values of a pair unit (Alman-Rao's first round runs on single values).
template <typename U> struct Lanes;
template <> struct Lanes<__half2> {
    typedef __half L;
    static __device__ __forceinline__ L lo(__half2 u) { return __low2half(u); }
    static __device__ __forceinline__ L hi(__half2 u) { return __high2half(u); }
    static __device__ __forceinline__ __half2 make(L a, L b) { return __halves2half2(a, b); }
};
template <> struct Lanes<__nv_bfloat162> {
    typedef __nv_bfloat16 L;
    static __device__ __forceinline__ L lo(__nv_bfloat162 u) { return __low2bfloat16(u); }
    static __device__ __forceinline__ L hi(__nv_bfloat162 u) { return __high2bfloat16(u); }
    static __device__ __forceinline__ __nv_bfloat162 make(L a, L b) { return __halves2bfloat162(a, b); }
};
template <> struct Lanes<float2> {
    typedef float L;
    static __device__ __forceinline__ L lo(float2 u) { return u.x; }
    static __device__ __forceinline__ L hi(float2 u) { return u.y; }
    static __device__ __forceinline__ float2 make(L a, L b) { return make_float2(a, b); }
};

// The unit a thread moves (S, storage) and transforms (U, compute): T, or a pair of T
// (PAIRED, 16-bit types); with a wider compute type C the units hold C values.
template <typename T, bool PAIRED> struct Unit { typedef T type; };
template <> struct Unit<__half, true> { typedef __half2 type; };
template <> struct Unit<__nv_bfloat16, true> { typedef __nv_bfloat162 type; };
template <typename C, bool PAIRED> struct WideUnit { typedef C type; };
template <> struct WideUnit<float, true> { typedef float2 type; };
template <typename T, typename C, bool PAIRED> struct Units {
    typedef typename Unit<T, PAIRED>::type S;
    typedef typename WideUnit<C, PAIRED>::type U;
};
template <typename T, bool PAIRED> struct Units<T, T, PAIRED> {
    typedef typename Unit<T, PAIRED>::type S;
    typedef S U;
};

// Storage <-> compute conversions (round to nearest even on the way down).
template <typename S> __device__ __forceinline__ S cvt(S v, S*) { return v; }
__device__ __forceinline__ float cvt(__half v, float*) { return __half2float(v); }
__device__ __forceinline__ __half cvt(float v, __half*) { return __float2half_rn(v); }
__device__ __forceinline__ float cvt(__nv_bfloat16 v, float*) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 cvt(float v, __nv_bfloat16*) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float2 cvt(__half2 v, float2*) { return __half22float2(v); }
__device__ __forceinline__ __half2 cvt(float2 v, __half2*) { return __float22half2_rn(v); }
__device__ __forceinline__ float2 cvt(__nv_bfloat162 v, float2*) { return __bfloat1622float2(v); }
__device__ __forceinline__ __nv_bfloat162 cvt(float2 v, __nv_bfloat162*) { return __float22bfloat162_rn(v); }
__device__ __forceinline__ double cvt(float v, double*) { return (double)v; }
__device__ __forceinline__ float cvt(double v, float*) { return __double2float_rn(v); }
template <typename D, typename S> __device__ __forceinline__ D to(S v) { return cvt(v, (D*)nullptr); }

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
__device__ __forceinline__ __half2 whalf(__half2 v) { return __hmul2_rn(v, __float2half2_rn(0.5f)); }
__device__ __forceinline__ __nv_bfloat162 whalf(__nv_bfloat162 v) {
    return __hmul2_rn(v, __float2bfloat162_rn(0.5f));
}
__device__ __forceinline__ float2 whalf(float2 v) { return make_float2(__fmul_rn(v.x, 0.5f), __fmul_rn(v.y, 0.5f)); }
// v * 2^e (0 <= e < 127), one correctly rounded multiplication as in the NumPy engine
// (exact unless it overflows; FP16/BF16 via FP32, rounded once).
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }
__device__ __forceinline__ double wpow2(double v, int e) { return __dmul_rn(v, (double)pow2f(e)); }
__device__ __forceinline__ float wpow2(float v, int e) { return __fmul_rn(v, pow2f(e)); }
__device__ __forceinline__ __half wpow2(__half v, int e) { return __float2half_rn(__fmul_rn(__half2float(v), pow2f(e))); }
__device__ __forceinline__ __nv_bfloat16 wpow2(__nv_bfloat16 v, int e) {
    return __float2bfloat16_rn(__fmul_rn(__bfloat162float(v), pow2f(e)));
}

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

// Radix-2 stages on bits 0 .. k-1 of the register index (k <= LOG_K), lowest first.
template <typename W, int LOG_K>
__device__ __forceinline__ void radix2_stages(W* v, int k) {
    typedef Num<W> N;
#pragma unroll
    for (int m = 0; m < LOG_K; ++m) {
        if (m < k) {
#pragma unroll
            for (int j = 0; j < (1 << LOG_K); ++j) {
                if (j < (1 << k) && !(j & (1 << m))) {
                    const W a = v[j], c = v[j | (1 << m)];
                    v[j] = N::add(a, c);
                    v[j | (1 << m)] = N::sub(a, c);
                }
            }
        }
    }
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

template <typename U, int N>
struct alignas(N * sizeof(U)) Vec { U v[N]; };

// Shared-memory padding: one unit every 128 bytes breaks power-of-two strides.
template <typename U>
__device__ __forceinline__ int pad(int i) {
    return i + (i >> (sizeof(U) == 8 ? 4 : sizeof(U) == 4 ? 5 : 6));
}

// Occupancy: ask for 1024 resident threads per SM (a 64-register cap), enough
// loads in flight to cover memory latency in this memory-bound kernel; 512 (a
// 128-register cap) when values are held in a wider compute type.
#define MIN_BLOCKS(LOG_T) ((LOG_T) >= 10 ? 1 : (1024 >> (LOG_T)))
#define MIN_BLOCKS_W(LOG_T, WIDE) ((WIDE) ? ((LOG_T) >= 9 ? 1 : (512 >> (LOG_T))) : MIN_BLOCKS(LOG_T))

// Round boundaries of a pass (row bits, in units).  Round 0 covers [0, K0); middle
// round i covers [bound(i), bound(i + 1)).  Folklore: rounds of LOG_E bits.  Alman-Rao:
// the PRE radix-2 prefix bits, then whole H8 blocks (3 bits each, as many as fit in
// LOG_E bits) per round, so that no H8 block straddles two rounds.
template <int ALG, int LR, int LOG_E, int PRE>
struct Rounds {
    static constexpr int STEP = ALG == 0 ? LOG_E : 3 * (LOG_E / 3);
    // the widest round 0 within `lim` bits (lim: the bits a thread loads at once)
    __host__ __device__ static constexpr int first(int lim) {
        const int l = lim < LR ? lim : LR;
        return ALG == 0 ? l : (l <= PRE ? l : PRE + 3 * ((l - PRE) / 3));
    }
    __host__ __device__ static constexpr int bound(int k0, int i) {
        const int b = (ALG == 1 && k0 < PRE) ? (i == 0 ? k0 : PRE + STEP * (i - 1)) : k0 + STEP * i;
        return b < LR ? b : LR;
    }
    __host__ __device__ static constexpr int count(int k0) {   // middle rounds
        int i = 0;
        while (bound(k0, i) < LR) ++i;
        return i;
    }
};

// 16-byte asynchronous copy global -> shared (cp.async, sm_80+), and its group fences.
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

// Alman-Rao pre-scaling exponent of transform index i: the non-zero octal digits of
// i >> fbits (fbits: the radix-2 prefix bits).
__device__ __forceinline__ int alman_exponent(i64 i, int fbits) {
    const unsigned long long v = (unsigned long long)i >> fbits;
    return __popcll((v | (v >> 1) | (v >> 2)) & 0x9249249249249249ULL);
}

// One pass.  Template arguments (chosen by launch.py): tile of 2^LOG_R rows x
// 2^LOG_G groups of T; C the compute type (T, or FP32 for FP16/BF16 data, FP64 for
// FP32 data); 2^LOG_E units per thread per round; 2^LOG_T threads; VEC elements of T
// per vector access; PAIRED: 16-bit data moved and transformed as pairs along the
// unit-stride direction of the tile (columns in a strided pass; rows r, r+1 in a
// contiguous pass, whose stage 0 is then the butterfly inside each pair).
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
template <typename T, typename C, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC,
          bool PAIRED, int ALG, int PRE, bool PS, bool ASYNC>
__global__ void __launch_bounds__(1 << LOG_T, MIN_BLOCKS_W(LOG_T, sizeof(C) > sizeof(T) || LOG_E > 4))
fwht_pass(const T* src, T* dst, i64 ntiles, int log_inner, int log2n, int fbits,
          int check_input, int last, double scale, unsigned int* flags, unsigned int* rows,
          int row_shift)
{
    typedef typename Units<T, C, PAIRED>::S S;   // storage unit
    typedef typename Units<T, C, PAIRED>::U U;   // compute unit (shared memory, registers)
    typedef Num<U> N;
    constexpr int P = PAIRED ? 2 : 1;                           // elements per unit
    constexpr bool INTRA = PAIRED && !STRIDED;                  // stage 0 inside the pairs
    constexpr int LR = LOG_R - (INTRA ? 1 : 0);                 // unit rows (log2)
    constexpr int LG = LOG_G - ((PAIRED && STRIDED) ? 1 : 0);   // unit groups (log2)
    constexpr int UR = 1 << LR, UG = 1 << LG, UTILE = UR * UG;
    constexpr int THREADS = 1 << LOG_T, UVEC = VEC / P;
    constexpr int LOG_UVEC = UVEC >= 16 ? 4 : UVEC >= 8 ? 3 : UVEC >= 4 ? 2 : UVEC >= 2 ? 1 : 0;
    constexpr int NVEC = UTILE / UVEC, VPT = NVEC / THREADS;    // vectors per thread
    constexpr int RS = STRIDED ? UG : 1, GS = STRIDED ? 1 : UR; // shared layout strides (units)
    constexpr int CH0 = UVEC >= 8 ? 2 : 4;                      // vectors in flight per thread (16 units)
    constexpr int CH = VPT < CH0 ? VPT : CH0;
    // Alman-Rao contiguous pass on pairs: round 0 runs on single values (the PRE radix-2
    // stages and the pre-scaling, then with PRE = 0 the H8 block of bits 0..2), so that no
    // later H8 block involves bit 0, the bit inside the pairs; the unit bits it covers
    // (K0E - 1) then count as a prefix for Rounds<>.
    constexpr bool AINTRA = ALG == 1 && INTRA;
    constexpr int K0E = PRE == 0 ? 3 : PRE;
    constexpr int PREU = AINTRA ? K0E - 1 : PRE;
    typedef Rounds<ALG, LR, LOG_E, PREU> RD;
    constexpr int K0 = AINTRA ? PREU : RD::first(STRIDED ? LOG_E : LOG_UVEC);   // round 0 bits
    constexpr int NMID = RD::count(K0);                         // middle rounds
    constexpr bool SINGLE = K0 == LR;                           // one round: no shared memory
    constexpr int E = 1 << LOG_E;
    static_assert(VPT >= 1 && UVEC >= 1 && (UTILE >> K0) >= THREADS, "tile too small for the threads");
    static_assert(ALG == 0 || (LOG_E >= 3 && (LR - PREU) % 3 == 0), "Alman-Rao pass layout");
    static_assert(!AINTRA || (PS && 2 * UVEC >= (1 << K0E)), "Alman-Rao pairs: first pass, 8-element vectors");
    static_assert(!PS || (!STRIDED && (!PAIRED || AINTRA) && PRE + 3 <= LOG_R), "pre-scaling: first, contiguous pass");
    constexpr bool AS = ASYNC && !SINGLE;
    constexpr int SBYTES = UTILE * (int)sizeof(S);               // staging bytes (one tile as stored)
    constexpr int ROWB = STRIDED ? UG * (int)sizeof(S) : SBYTES; // contiguous bytes per row
    constexpr int PADDED = UTILE + ((UTILE - 1) >> (sizeof(U) == 8 ? 4 : sizeof(U) == 4 ? 5 : 6));
    constexpr int STG_OFF = (PADDED * (int)sizeof(U) + 15) / 16 * 16;
    static_assert(!AS || ROWB % 16 == 0, "asynchronous copies move 16-byte pieces of rows");
    constexpr int ROWP = ROWB >= 16 ? ROWB / 16 : 1;               // 16-byte pieces per row
    // A 32-byte round-0 vector (contiguous pass) moves as two 16-byte pieces; in the staging
    // buffer piece c sits at c ^ bit 3 of c, so that each quarter-warp's 16-byte reads hit
    // eight distinct bank groups.
    typedef Vec<S, UVEC> V;
    constexpr int VNP = (int)(sizeof(V) / 16);
    static_assert(VNP <= 2, "round-0 vectors of at most 32 bytes");
    auto swz = [](int c) -> int { return (!STRIDED && VNP == 2) ? c ^ ((c >> 3) & 1) : c; };
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);
    S* stg = reinterpret_cast<S*>(smem_raw + STG_OFF);           // ASYNC staging (as stored)
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x;
    const i64 uinner = ((i64)1 << log_inner) / P;               // strided: row stride in units
    const i64 tiles_per_outer = STRIDED ? (((i64)1 << log_inner) >> LOG_G) : 1;
    bool bad_in = false, bad_out = false;

    // the butterflies of bits [0, k) of the register index, unit stride 1 << 0
    auto stages = [](U* v, int k) { radix2_stages<U, LOG_E>(v, k); };
    // the stages of round [b, b + k) on v[0 .. 2^k); idx(j): transform index of v[j]
    auto apply = [&](U* v, int b, int k, auto idx) {
        if constexpr (ALG == 0) {
            stages(v, k);
        } else {
            const int r2 = (PREU < b + k ? PREU : b + k) - b;    // radix-2 prefix bits here
            if (r2 > 0) stages(v, r2);
            if constexpr (PS && !AINTRA) {
                if (b <= PRE && PRE < b + k) {
#pragma unroll
                    for (int j = 0; j < E; ++j)
                        if (j < (1 << k)) {
                            const int ex = alman_exponent(idx(j) & (((i64)1 << log2n) - 1), fbits);
                            if (ex) v[j] = wpow2(v[j], ex);
                        }
                }
            }
#pragma unroll
            for (int m = 0; m + 3 <= LOG_E; m += 3) {
                const int mm = m + (PREU > b ? PREU - b : 0);
                if (mm + 3 <= k) {
#pragma unroll
                    for (int j = 0; j < E; ++j) {
                        if (j < (1 << k) && !((j >> mm) & 7)) {
                            U h[8];
#pragma unroll
                            for (int r = 0; r < 8; ++r) h[r] = v[j | (r << mm)];
                            h8_block<U>(h);
#pragma unroll
                            for (int r = 0; r < 8; ++r) v[j | (r << mm)] = h[r];
                        }
                    }
                }
            }
        }
    };
    // AINTRA round 0 on the 2 * UVEC single values of w[0 .. UVEC), element e0 first: blocks
    // of 2^K0E elements share the exponent of their first element (PRE > 0: the same
    // i >> PRE; PRE = 0: elements 1..7 of an H8 block one more non-zero octal digit).
    auto alman_first = [&](U* w, i64 e0) {
        if constexpr (AINTRA) {
            typedef Lanes<U> LN;
            typedef typename LN::L L;
            L s[2 * UVEC];
#pragma unroll
            for (int k = 0; k < UVEC; ++k) { s[2 * k] = LN::lo(w[k]); s[2 * k + 1] = LN::hi(w[k]); }
#pragma unroll
            for (int blk = 0; blk < 2 * UVEC; blk += 1 << K0E) {
                L* v = s + blk;
                radix2_stages<L, K0E>(v, PRE);
                const int base = alman_exponent((e0 + blk) & (((i64)1 << log2n) - 1), fbits);
#pragma unroll
                for (int j = 0; j < (1 << K0E); ++j) {
                    const int ex = base + (PRE == 0 && j != 0 ? 1 : 0);
                    if (ex) v[j] = wpow2(v[j], ex);
                }
                if constexpr (PRE == 0) h8_block<L>(v);
            }
#pragma unroll
            for (int k = 0; k < UVEC; ++k) w[k] = LN::make(s[2 * k], s[2 * k + 1]);
        }
    };
    auto finish = [&](U w) -> S {   // round to storage; last pass: scale, check
        S val = to<S>(w);
        if (last) {
            if (scale != 1.0) val = Num<S>::scale(val, scale);
            if (!Num<S>::finite(val)) bad_out = true;
        }
        return val;
    };
    auto start = [&](S s, bool& bad) -> U {    // widen; first pass: check
        if (check_input && !Num<S>::finite(s)) bad = true;
        return to<U>(s);
    };
    // Rare path, after a chunk of input held a non-finite value and before any of it is
    // written: read its units again and mark their transforms (unit(q): global unit index).
    auto mark = [&](int count, auto unit) {
        bad_in = true;
        if (!rows) return;
#pragma unroll 1
        for (int q = 0; q < count; ++q) {
            const i64 u = unit(q);
            const S s = usrc[u];
            if (!Num<S>::finite(s)) mark_bad(rows, s, u * P, log2n, row_shift);
        }
    };

    auto tile_base = [&](i64 t) -> i64 {   // first unit of tile t
        if (STRIDED) {
            const i64 o = t / tiles_per_outer, cb = t - o * tiles_per_outer;
            return (o * ((i64)1 << (LOG_R + log_inner)) + (cb << LOG_G)) / P;
        }
        return t * (i64)UTILE;
    };
    auto prefetch = [&](i64 t) {          // tile t -> staging, 16 bytes per copy
        const char* g0 = reinterpret_cast<const char*>(usrc + tile_base(t));
#pragma unroll 4
        for (int c = tid; c < SBYTES / 16; c += THREADS) {
            const int r = c / ROWP, off = (c - r * ROWP) * 16;
            cp_async16(reinterpret_cast<char*>(stg) + swz(c) * 16,
                       g0 + (STRIDED ? r * uinner * (i64)sizeof(S) : 0) + off);
        }
        cp_async_commit();
    };
    if constexpr (AS) {
        if (blockIdx.x < ntiles) prefetch(blockIdx.x);
    }

    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const i64 ub = tile_base(t);   // first unit of the tile
        // global unit index of tile position (g, r)
        auto gidx = [&](int g, int r) -> i64 { return STRIDED ? ub + r * uinner + g : ub + g * UR + r; };
        auto sidx = [&](int g, int r) -> int { return pad<U>(r * RS + g * GS); };
        if constexpr (AS) cp_async_wait_all();   // this thread's copies of tile t have landed
        if (!SINGLE) __syncthreads();   // the previous tile's last round has read shared memory

        // ---- round 0, fused with the load
        if constexpr (!STRIDED) {
#pragma unroll 1
            for (int c0 = 0; c0 < VPT; c0 += CH) {
                V buf[CH];
#pragma unroll
                for (int i = 0; i < CH; ++i) {
                    const int vi = (c0 + i) * THREADS + tid;
                    if constexpr (VNP == 2) {
#pragma unroll
                        for (int p = 0; p < 2; ++p)
                            reinterpret_cast<int4*>(&buf[i])[p] =
                                AS ? reinterpret_cast<const int4*>(stg)[swz(2 * vi + p)]
                                   : reinterpret_cast<const int4*>(usrc + ub + (i64)vi * UVEC)[p];
                    } else {
                        buf[i] = AS ? *reinterpret_cast<const V*>(stg + vi * UVEC)
                                    : *reinterpret_cast<const V*>(usrc + ub + (i64)vi * UVEC);
                    }
                }
#pragma unroll
                for (int i = 0; i < CH; ++i) {
                    U w[E > UVEC ? E : UVEC];
                    bool bad = false;
#pragma unroll
                    for (int k = 0; k < UVEC; ++k) {
                        w[k] = start(buf[i].v[k], bad);
                        if constexpr (INTRA && !AINTRA) w[k] = N::intra(w[k]);
                    }
                    const int u0 = ((c0 + i) * THREADS + tid) * UVEC;
                    if (bad) mark(UVEC, [&](int q) -> i64 { return ub + u0 + q; });
                    if constexpr (AINTRA) {
                        alman_first(w, (ub + u0) * 2);
                    } else {
#pragma unroll
                        for (int blk = 0; blk < UVEC; blk += 1 << K0)
                            apply(w + blk, 0, K0, [&](int j) -> i64 { return ub + u0 + blk + j; });
                    }
                    if constexpr (SINGLE) {
#pragma unroll
                        for (int k = 0; k < UVEC; ++k) buf[i].v[k] = finish(w[k]);
                        if constexpr (VNP == 2) {
#pragma unroll
                            for (int p = 0; p < 2; ++p)
                                reinterpret_cast<int4*>(udst + ub + u0)[p] = reinterpret_cast<const int4*>(&buf[i])[p];
                        } else {
                            *reinterpret_cast<V*>(udst + ub + u0) = buf[i];
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < UVEC; ++k) sm[pad<U>(u0 + k)] = w[k];
                    }
                }
            }
        } else {
            constexpr int ITEMS = (UTILE >> K0) / THREADS;
#pragma unroll 1
            for (int it = 0; it < ITEMS; ++it) {
                const int item = it * THREADS + tid;
                const int g = item & (UG - 1), r0 = (item >> LG) << K0;
                S raw[E];
#pragma unroll
                for (int j = 0; j < E; ++j)
                    if (j < (1 << K0)) raw[j] = AS ? stg[(r0 + j) * UG + g] : usrc[gidx(g, r0 + j)];
                U w[E];
                bool bad = false;
#pragma unroll
                for (int j = 0; j < E; ++j)
                    if (j < (1 << K0)) w[j] = start(raw[j], bad);
                if (bad) mark(1 << K0, [&](int q) -> i64 { return gidx(g, r0 + q); });
                apply(w, 0, K0, [&](int j) -> i64 { return gidx(g, r0 + j); });
#pragma unroll
                for (int j = 0; j < E; ++j) {
                    if (j < (1 << K0)) {
                        if constexpr (SINGLE) udst[gidx(g, r0 + j)] = finish(w[j]);
                        else sm[sidx(g, r0 + j)] = w[j];
                    }
                }
            }
        }
        if constexpr (!SINGLE) {
            __syncthreads();
            if constexpr (AS) {                 // staging is free: fetch the next tile
                if (t + gridDim.x < ntiles) prefetch(t + gridDim.x);
            }
            // ---- rounds [b, b + k) through shared memory; the last one stores to global memory
#pragma unroll
            for (int ri = 0; ri < NMID; ++ri) {
                const int b = RD::bound(K0, ri), k = RD::bound(K0, ri + 1) - b;
                const bool final_round = ri == NMID - 1;
                const int ITEMS = (UTILE >> k) / THREADS;    // items per thread (>= 1)
#pragma unroll 1
                for (int it = 0; it < ITEMS; ++it) {
                    int g, r0;
                    round_item<STRIDED>(it * THREADS + tid, b, k, UR, LG, g, r0);
                    U v[E];
#pragma unroll
                    for (int j = 0; j < E; ++j)
                        if (j < (1 << k)) v[j] = sm[sidx(g, r0 | (j << b))];
                    apply(v, b, k, [&](int j) -> i64 { return gidx(g, r0 | (j << b)); });
                    if (final_round) {
#pragma unroll
                        for (int j = 0; j < E; ++j)
                            if (j < (1 << k)) udst[gidx(g, r0 | (j << b))] = finish(v[j]);
                    } else {
#pragma unroll
                        for (int j = 0; j < E; ++j)
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

// ===========================================================================
// Stabilized variants: Kahan/Neumaier (thesis 3.3), with the error vector in
// device memory, or pass-local.  Scalar units (no pairs); every operation rounded
// to the storage type T.
// ===========================================================================

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

// STAB 1 Kahan / 2 Neumaier; ERRVEC: the error vector lives in device memory (err)
// between passes, else it is folded in at write-back.
template <typename T, int LOG_R, int LOG_G, int LOG_E, int LOG_T, bool STRIDED, int VEC, int STAB,
          bool ERRVEC>
__global__ void __launch_bounds__(1 << LOG_T, MIN_BLOCKS(LOG_T))
fwht_ext_pass(const T* src, T* dst, T* err, i64 ntiles, int log_inner, int log2n,
              int check_input, int first, int last, double scale, unsigned int* flags,
              unsigned int* rows, int row_shift)
{
    typedef T W;
    typedef Num<W> N;
    constexpr int R = 1 << LOG_R, G = 1 << LOG_G, TILE = R * G, THREADS = 1 << LOG_T;
    constexpr int NVEC = TILE / VEC, VPT = NVEC / THREADS;
    constexpr int RS = STRIDED ? G : 1, GS = STRIDED ? 1 : R;
    constexpr int GV = STRIDED ? G / VEC : 1;
    constexpr int CH = VPT < 4 ? VPT : 4;
    constexpr int PADDED = TILE + (TILE >> (sizeof(W) == 8 ? 4 : sizeof(W) == 4 ? 5 : 6));
    static_assert(VPT >= 1, "tile too small for the thread count");
    static_assert(STAB == 1 || STAB == 2, "a stabilizer");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    W* sx = reinterpret_cast<W*>(smem_raw);
    W* se = sx + PADDED;                            // errors
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
        __syncthreads();
#pragma unroll 1
        for (int c0 = 0; c0 < VPT; c0 += CH) {
            Vec<T, VEC> buf[CH], ebuf[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                buf[i] = *reinterpret_cast<const Vec<T, VEC>*>(src + goff(c0 + i));
                if (ERRVEC && !first) ebuf[i] = *reinterpret_cast<const Vec<T, VEC>*>(err + goff(c0 + i));
            }
#pragma unroll
            for (int i = 0; i < CH; ++i) {
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
        auto round = [&](int b, int k) {
            const int J = 1 << k, ITEMS = (TILE >> k) / THREADS;
            for (int it = 0; it < ITEMS; ++it) {
                int g, r0;
                round_item<STRIDED>(it * THREADS + tid, b, k, R, LOG_G, g, r0);
                W v[1 << LOG_E], e[1 << LOG_E];
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) {
                        const int s = pad<W>((r0 | (j << b)) * RS + g * GS);
                        v[j] = sx[s];
                        e[j] = se[s];
                    }
#pragma unroll
                for (int m = 0; m < LOG_E; ++m) {
                    if (m < k) {
#pragma unroll
                        for (int j = 0; j < (1 << LOG_E); ++j)
                            if (j < J && !(j & (1 << m)))
                                stab_butterfly<W, STAB == 2>(v[j], v[j | (1 << m)], e[j], e[j | (1 << m)]);
                    }
                }
#pragma unroll
                for (int j = 0; j < (1 << LOG_E); ++j)
                    if (j < J) {
                        const int s = pad<W>((r0 | (j << b)) * RS + g * GS);
                        sx[s] = v[j];
                        se[s] = e[j];
                    }
            }
            __syncthreads();
        };
#pragma unroll
        for (int b = 0; b < LOG_R; b += LOG_E) round(b, (LOG_R - b < LOG_E) ? (LOG_R - b) : LOG_E);
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
            for (int i = 0; i < CH; ++i) {
                *reinterpret_cast<Vec<T, VEC>*>(dst + goff(c0 + i)) = buf[i];
                if (ERRVEC && !last) *reinterpret_cast<Vec<T, VEC>*>(err + goff(c0 + i)) = ebuf[i];
            }
        }
    }
    if (bad_in) atomicOr(flags, 1u);
    if (bad_out) atomicOr(flags, 2u);
}
