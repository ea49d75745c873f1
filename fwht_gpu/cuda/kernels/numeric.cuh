// Arithmetic of the fwht_gpu kernels: the work types, their correctly rounded
// add/sub (Num<>), the two lanes of a pair unit (Lanes<>), the storage/compute units
// of a pass (Units<>), storage <-> compute conversions (to<>) and the exact helpers
// of the stabilizers and of Alman-Rao's algorithm.  The only header of kernels/ that
// includes system headers.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;   // element and unit indices are 64-bit

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
