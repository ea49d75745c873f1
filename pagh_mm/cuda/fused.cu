// pagh_mm CUDA kernel: the fused FWHT compression of dense factors.  One thread block per
// (inner index k, repetition t) computes the Hadamard-domain term of k for t,
//
//     term = FWHT(P_t a_k) * FWHT(P_t b_k)     (Gram: FWHT(P_t a_k)^2),
//
// with the Count-Sketch, the transform and the product in shared memory and registers:
// only the term (b values of the transform dtype T) is written to device memory, where
// pagh_mm.reduction sums the terms over k in its pairwise tree.  Every step is the NumPy
// engine's, so the bits are the CPU's:
//  * the sketch: each bucket is 0.0 plus s(i) x_i of its keys in increasing key order, in
//    float64 (the scatter table of pagh_mm.sketch: keys sorted by bucket), rounded once to T;
//  * the transform: Folklore radix-2 stages on bits 0, 1, ..., log2(b) - 1 in that order,
//    each butterfly (a + b, a - b) correctly rounded in T (fwht_gpu's Num<T>), no FMA;
//  * the product in T.
// The vectors are read in place through element strides (any layout: C, F, transposed
// views; a Gram product's X^T is X read the other way), float64 or float32 values.
//
// Layout of the transform: VPT values per thread, THREADS = b / VPT threads.  A round
// applies the stages of r <= LOG_VPT consecutive bits [lo, lo + r) to values in registers:
// register q holds element base(g) + (q & (2^r - 1)) << lo of group g = (q >> r) THREADS +
// thread, base(g) being g with r zero bits inserted at bit lo.  Between rounds the values
// go through shared memory (padded: one slot every 128 bytes).  The last round's values
// stay in registers: A's wait there while B is sketched and transformed in the same buffer,
// and the product is written from them.
#include "../../fwht_gpu/cuda/kernels/butterflies.cuh"
#include "../../fwht_gpu/cuda/kernels/cluster.cuh"
#include "../../fwht_gpu/cuda/kernels/tile.cuh"

template <typename T> struct Mul;
template <> struct Mul<float> {
    static __device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
    static __device__ __forceinline__ float from(double v) { return __double2float_rn(v); }
};
template <> struct Mul<double> {
    static __device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
    static __device__ __forceinline__ double from(double v) { return v; }
};

// Element of register q in the round of bits [lo, lo + r) (see the header).
template <int VPT>
__device__ __forceinline__ int round_index(int q, int lo, int r, int threads) {
    const int g = (q >> r) * threads + (int)threadIdx.x;
    const int base = ((g >> lo) << (lo + r)) | (g & ((1 << lo) - 1));
    return base + ((q & ((1 << r) - 1)) << lo);
}

// Values of one chunk of the bucket-sorted key list in shared memory (see sketch()).
constexpr int CHUNK = 2048;
struct Stage {
    double* val;       // CHUNK signed values s(i) x_i
    int* bucket;       // CHUNK buckets
    double* carry;     // 2: the sum so far of a bucket that continues into the next chunk
};

// buf[u - u0] := bucket u of the sketch of vector k for repetition t, u0 <= u < u0 + nb (of
// b), rounded to T.  The keys of repetition t sorted by (bucket, key) (the scatter table:
// keys[p], sgn[p], bucket bpos[p] of position p = indptr[t b] .. indptr[t b + b] - 1; those
// of the range from indptr[t b + u0] on) are taken CHUNK positions at a time:
// every thread gathers values of the chunk into shared memory at once (independent loads),
// then each run of one bucket's positions is summed in order from shared memory by one
// thread, from 0.0 (or from the sum carried over from the previous chunk).  Each bucket is
// 0.0 plus its keys' values in increasing key order, the CPU's sum.
template <typename T, typename S>
__device__ __forceinline__ void sketch(T* buf, Stage st, const S* __restrict__ X, i64 s_key,
                                       i64 s_vec, const i64* __restrict__ indptr,
                                       const i64* __restrict__ keys,
                                       const double* __restrict__ sgn,
                                       const int* __restrict__ bpos, i64 k, int t, int b,
                                       int u0, int nb)
{
    const S* x = X + k * s_vec;
    const i64 p0 = indptr[(i64)t * b + u0], p1 = indptr[(i64)t * b + u0 + nb];
    for (int u = threadIdx.x; u < nb; u += blockDim.x) buf[pad<T>(u)] = T(0);  // empty buckets
    int parity = 0;
    for (i64 c0 = p0; c0 < p1; c0 += CHUNK, parity ^= 1) {
        const int len = (int)min((i64)CHUNK, p1 - c0);
        __syncthreads();                      // the previous chunk is summed, its carry written
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            st.val[i] = __dmul_rn(sgn[c0 + i], (double)x[keys[c0 + i] * s_key]);
            st.bucket[i] = bpos[c0 + i] - u0;
        }
        __syncthreads();
        const bool more = c0 + len < p1;
        const int next = more ? bpos[c0 + len] - u0 : -1;
        const int before = c0 > p0 ? bpos[c0 - 1] - u0 : -1;
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            const int u = st.bucket[i];
            if (i > 0 && st.bucket[i - 1] == u) continue;        // not the start of a run
            double sum = (i == 0 && before == u) ? st.carry[parity] : 0.0;
            int j = i;
            for (; j < len && st.bucket[j] == u; ++j) sum = __dadd_rn(sum, st.val[j]);
            if (j == len && next == u)
                st.carry[parity ^ 1] = sum;                      // the run goes on
            else
                buf[pad<T>(u)] = Mul<T>::from(sum);
        }
    }
}

// The fused kernel's key codes (pagh_mm.sketch.Side.gpu_codes): the bucket in the low bits.
constexpr unsigned CODE_SLOW = 1u << 30, CODE_NEG = 1u << 31, CODE_BUCKET = (1u << 29) - 1;

// The one-key buckets of the sketch in key order, ONE_KEY keys per thread in flight: the codes
// cu[g] and values v[g] of keys i0 + g step (codes c, values x[i s_key]; past i_hi: slow),
// loaded at once.  Every key's value is loaded beside its code, not after it (a slow key's
// value shares its sector with its neighbours'; session 32, H100: the fused stage
// 0.88-0.93x).
constexpr int ONE_KEY = 4;
template <typename S>
__device__ __forceinline__ void one_key_load(unsigned* cu, double* v, const S* __restrict__ x,
                                             i64 s_key, const unsigned* __restrict__ c, int i0,
                                             int i_hi, int step)
{
#pragma unroll
    for (int g = 0; g < ONE_KEY; ++g) {
        const int i = i0 + g * step;
        const bool in = i < i_hi;
        cu[g] = in ? c[i] : CODE_SLOW;
        v[g] = in ? (double)x[i * s_key] : 0.0;
    }
}

// buf[u] := 0.0 + s(i) x_i rounded to T for each key i of one_key_load's alone in its bucket
// u with sign +-1.
template <typename T>
__device__ __forceinline__ void one_key_store(T* buf, const unsigned* cu, const double* v)
{
#pragma unroll
    for (int g = 0; g < ONE_KEY; ++g)
        if (!(cu[g] & CODE_SLOW))
            buf[pad<T>((int)(cu[g] & CODE_BUCKET))] =
                Mul<T>::from(__dadd_rn(0.0, __dmul_rn((cu[g] & CODE_NEG) ? -1.0 : 1.0, v[g])));
}

// The slow buckets' key entries (pagh_mm.sketch.Side.gpu_codes' skeys): the key in the low
// bits, SKEY_ZERO when its sign is +-0 (a key masked by a decoding row bit), SKEY_NEG the
// sign's sign bit.
constexpr unsigned SKEY_ZERO = 1u << 30, SKEY_NEG = 1u << 31, SKEY_KEY = SKEY_ZERO - 1;

// The sign of a slow key entry: +-1 or +-0, exactly the bucket list's.
__device__ __forceinline__ double skey_sign(unsigned e) {
    return __longlong_as_double((long long)(((e & SKEY_NEG) ? 0x8000000000000000ull : 0ull) |
                                            ((e & SKEY_ZERO) ? 0ull : 0x3FF0000000000000ull)));
}

// buf[w - w0] := the slow buckets w = slow[r] (t b + u, w0 = t b) of r = r_lo .. r_hi - 1,
// each 0.0 plus s(i) x_i of its keys in increasing key order (sketch()'s rule), from its
// compact list skey[sptr[r] .. sptr[r + 1]].  G buckets per thread side by side, E keys of
// each at a time, their entries and then their values loaded at once: three dependent loads
// per bucket of up to E keys, where the bucket lists took two plus two per key.  H100, 13 x
// 2^15 FP32, FP64 data (session 37, the fused stage): n = 32768 (a key per bucket) 0.351 ->
// 0.216 s, of which the slow buckets 0.19 -> 0.05 s; n = 16384 0.089 -> 0.077 s (G = 2 and
// E = 4: 0.238 / 0.081 s, G = 1: 0.225-0.232 / 0.078-0.079 s, G = 4, E = 4: 0.247 / 0.082 s).
template <typename T, typename S>
__device__ __forceinline__ void slow_buckets(T* buf, const S* __restrict__ x, i64 s_key,
                                             int r_lo, int r1,
                                             const int* __restrict__ slow,
                                             const int* __restrict__ sptr,
                                             const unsigned* __restrict__ skey, i64 w0)
{
    constexpr int G = 2, E = 2;
    const int step = blockDim.x;
    for (int r0 = r_lo + (int)threadIdx.x; r0 < r1; r0 += G * step) {
        int w[G], q[G], qe[G];
        double sum[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int r = r0 + g * step;
            const bool in = r < r1;
            w[g] = in ? slow[r] : 0;
            q[g] = in ? sptr[r] : 0;
            qe[g] = in ? sptr[r + 1] : 0;
            sum[g] = 0.0;
        }
        for (bool more = true; more;) {
            unsigned e[G][E];
            double v[G][E];
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int j = 0; j < E; ++j) e[g][j] = q[g] + j < qe[g] ? skey[q[g] + j] : 0u;
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int j = 0; j < E; ++j)
                    v[g][j] = q[g] + j < qe[g] ? (double)x[(i64)(e[g][j] & SKEY_KEY) * s_key] : 0.0;
            more = false;
#pragma unroll
            for (int g = 0; g < G; ++g) {
#pragma unroll
                for (int j = 0; j < E; ++j)
                    if (q[g] + j < qe[g])
                        sum[g] = __dadd_rn(sum[g], __dmul_rn(skey_sign(e[g][j]), v[g][j]));
                q[g] += E;
                more |= q[g] < qe[g];
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (r0 + g * step < r1) buf[pad<T>((int)(w[g] - w0))] = Mul<T>::from(sum[g]);
    }
}

// The keys of a chunk of the sketch in key order (pagh_mm.sketch.SLOW_CHUNK): the slow
// buckets whose last key lies in a chunk are summed right after the chunk's one-key buckets.
constexpr int SLOW_CHUNK = 4096;

// buf := the sketch of vector k for repetition t, all b buckets, rounded to T, walked in key
// order (one block holds every bucket), SLOW_CHUNK keys at a time: a bucket of one key whose
// sign is +-1 is 0.0 + s(i) x_i, written by the thread that reads key i (x and the codes read
// contiguously along the keys when s_key = 1); then the slow buckets (several keys, or a
// masked one) whose last key is in the chunk (slow[cptr[t nc + c] .. cptr[t nc + c + 1] - 1]
// of chunk c of nc) are summed by sketch()'s rule from their compact key lists, while the
// chunk's values are in L1.  For float T with ONE_KEY x blockDim.x = SLOW_CHUNK (the
// launchers' 1024 threads) each thread's keys of the next chunk are loaded before the slow
// buckets of this one are summed, so that their loads are in flight meanwhile (for double T
// the registers this takes cost the kernel more).  H200, 13 repetitions, FP64 data, the
// fused stage (session 40): n = 32768, FP32 2^15 0.183 s against 0.185-0.189 s summed after
// the whole one-key loop (0.194-0.196 s without the loads ahead), FP64 2^14 0.248 s against
// 0.260-0.270 s (0.255-0.260 s with them); n = 16384 within the spread.  The same values as
// sketch().
template <typename T, typename S>
__device__ __forceinline__ void sketch_keys_inline(T* buf, const S* __restrict__ X, i64 s_key,
                                                   i64 s_vec, int n_keys,
                                                   const unsigned* __restrict__ code,
                                                   const int* __restrict__ cptr,
                                                   const int* __restrict__ slow,
                                                   const int* __restrict__ sptr,
                                                   const unsigned* __restrict__ skey, i64 k,
                                                   int t, int b)
{
    const S* x = X + k * s_vec;
    const int step = blockDim.x, tid = threadIdx.x;
    for (int u = tid; u < b; u += step) buf[pad<T>(u)] = T(0);          // empty buckets
    __syncthreads();                                      // before the buckets land
    const int nc = (n_keys + SLOW_CHUNK - 1) / SLOW_CHUNK;
    const int* cp = cptr + (i64)t * nc;
    const unsigned* c = code + (i64)t * n_keys;
    unsigned cu[ONE_KEY];
    double v[ONE_KEY];
    if (sizeof(T) == sizeof(float) && ONE_KEY * step == SLOW_CHUNK) {   // a load a chunk
        if (nc > 0) one_key_load<S>(cu, v, x, s_key, c, tid, n_keys, step);
        for (int ch = 0; ch < nc; ++ch) {
            one_key_store<T>(buf, cu, v);
            if (ch + 1 < nc)
                one_key_load<S>(cu, v, x, s_key, c, (ch + 1) * SLOW_CHUNK + tid, n_keys, step);
            slow_buckets<T, S>(buf, x, s_key, cp[ch], cp[ch + 1], slow, sptr, skey, (i64)t * b);
        }
    } else {
        for (int ch = 0; ch < nc; ++ch) {
            const int i_hi = min(n_keys, (ch + 1) * SLOW_CHUNK);
            for (int i0 = ch * SLOW_CHUNK + tid; i0 < i_hi; i0 += ONE_KEY * step) {
                one_key_load<S>(cu, v, x, s_key, c, i0, i_hi, step);
                one_key_store<T>(buf, cu, v);
            }
            slow_buckets<T, S>(buf, x, s_key, cp[ch], cp[ch + 1], slow, sptr, skey, (i64)t * b);
        }
    }
}

// sketch_keys_inline as a call (not inlined; see sketch_all), its arguments forwarded.
template <typename T, typename S, typename... Args>
__device__ __noinline__ void sketch_keys(Args... args)
{
    sketch_keys_inline<T, S>(args...);
}

// sketch() of all b buckets as a call (not inlined; see sketch_all).
template <typename T, typename S>
__device__ __noinline__ void sketch_call(T* buf, Stage st, const S* __restrict__ X, i64 s_key,
                                         i64 s_vec, const i64* __restrict__ indptr,
                                         const i64* __restrict__ keys,
                                         const double* __restrict__ sgn,
                                         const int* __restrict__ bpos, i64 k, int t, int b)
{
    sketch<T, S>(buf, st, X, s_key, s_vec, indptr, keys, sgn, bpos, k, t, b, 0, b);
}

// buf := the sketch of vector k for repetition t (all b buckets).  CALLS (the kernels of the
// most buckets per block, FP32 2^15 and FP64 2^14, whose threads hold 16-32 values): in key
// order where the factor's codes are given (few keys per bucket: the host's choice), else by
// position, both out of line (the kernel spills far less).  The other kernels: inlined (there
// a call in the kernel, even one not taken, cost 13-31%: H100, FP32 2^12 and 2^14 buckets);
// KEYS (their Gram kernels): in key order where the codes are given, else by position; the
// others by position, and the host gives no codes (inlined, key order spills the products'
// kernels and made them 1.23-1.42x slower: H200, n = 8192, FP32 2^12-2^14, FP64 2^13, one
// tree level in the block).
template <typename T, typename S, bool CALLS, bool KEYS = false>
__device__ __forceinline__ void sketch_all(T* buf, Stage st, const S* __restrict__ X, i64 s_key,
                                           i64 s_vec, int n_keys, const i64* __restrict__ indptr,
                                           const i64* __restrict__ keys,
                                           const double* __restrict__ sgn,
                                           const int* __restrict__ bpos,
                                           const unsigned* __restrict__ code,
                                           const int* __restrict__ cptr,
                                           const int* __restrict__ slow,
                                           const int* __restrict__ sptr,
                                           const unsigned* __restrict__ skey, i64 k, int t,
                                           int b)
{
    if constexpr (CALLS) {
        if (code)
            sketch_keys<T, S>(buf, X, s_key, s_vec, n_keys, code, cptr, slow, sptr, skey, k, t,
                              b);
        else
            sketch_call<T, S>(buf, st, X, s_key, s_vec, indptr, keys, sgn, bpos, k, t, b);
    } else if (KEYS && code) {
        sketch_keys_inline<T, S>(buf, X, s_key, s_vec, n_keys, code, cptr, slow, sptr, skey, k,
                                 t, b);
    } else {
        sketch<T, S>(buf, st, X, s_key, s_vec, indptr, keys, sgn, bpos, k, t, b, 0, b);
    }
}

// v[q] := buf[pad(base + (q << lo))] (``load``), or the other way, q < VPT: from bit 5 (FP32;
// 4 for FP64) on the padded slots are a constant step apart (a padding slot every
// 2^pad_shift values moves with them), so an address costs one add.  ONE_RUN (the rounds of
// bits known at compile time, see transform): also a round whose bits stay below pad_shift
// (lo + log2(VPT) <= pad_shift: the values share one run of slots, 1 << lo apart); there the
// steps are constants and the addresses immediate offsets of one register.
template <typename T, int VPT, bool ONE_RUN = false>
__device__ __forceinline__ void round_slots(T* buf, T* v, int base, int lo, bool load)
{
    constexpr int PS = pad_shift<T>();
    if (lo >= PS || (ONE_RUN && (VPT << lo) <= (1 << PS))) {
        const int step = (1 << lo) + (lo >= PS ? 1 << (lo - PS) : 0);
        int s = pad<T>(base);
        if (load) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) { v[q] = buf[s]; s += step; }
        } else {
#pragma unroll
            for (int q = 0; q < VPT; ++q) { buf[s] = v[q]; s += step; }
        }
    } else {
        int x = base;
        if (load) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) { v[q] = buf[pad<T>(x)]; x += 1 << lo; }
        } else {
#pragma unroll
            for (int q = 0; q < VPT; ++q) { buf[pad<T>(x)] = v[q]; x += 1 << lo; }
        }
    }
}

// The transform of buf (b = 2^logb values) up to its last round, whose values are left in v.
// LOGB > 0: logb = LOGB and threads = 2^(LOGB - LOG_VPT), known at compile time (the kernels
// of the most buckets per block): the rounds unrolled, each round's bits constants, so its
// slots are immediate offsets of one address (round_slots' ONE_RUN) instead of an address
// register per value.  The same values in the same slots, the same operations.
template <typename T, int LOG_VPT, int LOGB = 0>
__device__ __forceinline__ void transform(T* buf, T* v, int logb, int threads)
{
    constexpr int R = LOG_VPT, VPT = 1 << LOG_VPT;
    auto one_round = [&](int lo, int lb, int th) {          // bits [lo, lo + R) of lb
        const int r = min(R, lb - lo);
        __syncthreads();                                  // the buffer is complete
        if (r == R) {           // a full round: one group per thread, elements base + (q << lo)
            const int tid = (int)threadIdx.x;
            const int base = ((tid >> lo) << (lo + R)) | (tid & ((1 << lo) - 1));
            round_slots<T, VPT, (LOGB > 0)>(buf, v, base, lo, true);
            radix2_stages<T, LOG_VPT, true>(v, R);
            if (lo + R < lb) {
                __syncthreads();                          // every value of the round read
                round_slots<T, VPT, (LOGB > 0)>(buf, v, base, lo, false);
            }
            return;
        }
#pragma unroll
        for (int q = 0; q < VPT; ++q) v[q] = buf[pad<T>(round_index<VPT>(q, lo, r, th))];
        radix2_stages<T, LOG_VPT, true>(v, r);     // every group of 2^r registers
        if (lo + R < lb) {
            __syncthreads();                              // every value of the round read
#pragma unroll
            for (int q = 0; q < VPT; ++q) buf[pad<T>(round_index<VPT>(q, lo, r, th))] = v[q];
        }
    };
    if constexpr (LOGB > 0) {
#pragma unroll
        for (int lo = 0; lo < LOGB; lo += R) one_round(lo, LOGB, 1 << (LOGB - LOG_VPT));
    } else {
        for (int lo = 0; lo < logb; lo += R) one_round(lo, logb, threads);
    }
}

// log2 of the values per thread that A's and B's last rounds keep in registers side by side
// (1024 threads: 64 registers each).  Above it (b = 2^15 FP32, 2^14 FP64) a product's A
// values wait in the block's own output row instead (written only at the block's end), and
// B's transform reuses the registers: the same values, the same bits.
template <typename T> struct RegLogVpt;
template <> struct RegLogVpt<float> { static constexpr int value = 4; };
template <> struct RegLogVpt<double> { static constexpr int value = 3; };

// log2 of the buckets of the kernels above RegLogVpt (their values wait in the output row):
// 1024 threads of 2^LOG_VPT values, always (kernels.fused_terms: the most buckets per block,
// FP32 2^15 and FP64 2^14); FIXED (kernels.FUSED_FIXED_LOG2B: a kernel of RegLogVpt values per
// thread compiled for 2^FIXED buckets, 2^(FIXED - LOG_VPT) threads) or 0 (any b) for the
// others.  Known at compile time, it unrolls their transform's rounds (transform's LOGB):
// H200, 2^13 buckets, the fused stage against the same kernel for any b (session 42): FP32
// covariance screen 2^18 x 4096, 9 repetitions 0.79x, FP64 0.89x, FP32 2^12 0.91x; a product
// n = 8192, 5 repetitions, FP32 2^13 0.92x.
template <typename T, int LOG_VPT, int FIXED = 0>
__host__ __device__ constexpr int fixed_logb() {
    static_assert(FIXED == 0 || (LOG_VPT == RegLogVpt<T>::value && FIXED > LOG_VPT &&
                                 FIXED - LOG_VPT <= 10), "FIXED: RegLogVpt values per thread");
    return LOG_VPT > RegLogVpt<T>::value ? LOG_VPT + 10 : FIXED;
}

// The term of inner index k for repetition t into v (the last round's registers); ``o``: the
// block's output row, scratch for A's last round when it does not stay in registers.
template <typename T, typename S, int LOG_VPT, bool GRAM, int FIXED>
__device__ __forceinline__ void term(T* buf, Stage st, T* v, T* o, const S* __restrict__ A, i64 sa_key,
                                     i64 sa_vec, int n_a, const i64* __restrict__ ia,
                                     const i64* __restrict__ ka, const double* __restrict__ ga,
                                     const int* __restrict__ pa,
                                     const unsigned* __restrict__ ca,
                                     const int* __restrict__ cpa, const int* __restrict__ sla,
                                     const int* __restrict__ spa,
                                     const unsigned* __restrict__ ska,
                                     const S* __restrict__ B, i64 sb_key, i64 sb_vec, int n_b,
                                     const i64* __restrict__ ib, const i64* __restrict__ kb,
                                     const double* __restrict__ gb,
                                     const int* __restrict__ pb,
                                     const unsigned* __restrict__ cb,
                                     const int* __restrict__ cpb, const int* __restrict__ slb,
                                     const int* __restrict__ spb,
                                     const unsigned* __restrict__ skb, i64 k, int t, int logb)
{
    constexpr int VPT = 1 << LOG_VPT;
    constexpr bool SPILL = LOG_VPT > RegLogVpt<T>::value;
    constexpr int LOGB = fixed_logb<T, LOG_VPT, FIXED>();
    if constexpr (LOGB > 0) logb = LOGB;
    const int b = 1 << logb, threads = LOGB > 0 ? 1 << (LOGB - LOG_VPT) : (int)blockDim.x;
    __syncthreads();                                      // the buffer's last reads are done
    sketch_all<T, S, SPILL, GRAM>(buf, st, A, sa_key, sa_vec, n_a, ia, ka, ga, pa, ca, cpa, sla,
                                  spa, ska, k, t, b);
    transform<T, LOG_VPT, LOGB>(buf, v, logb, threads);
    if (GRAM) {
#pragma unroll
        for (int q = 0; q < VPT; ++q) v[q] = Mul<T>::mul(v[q], v[q]);
        return;
    }
    const int last = ((logb - 1) / LOG_VPT) * LOG_VPT, rl = logb - last;
    if (SPILL) {                                          // A's values to the output row
#pragma unroll
        for (int q = 0; q < VPT; ++q) o[round_index<VPT>(q, last, rl, threads)] = v[q];
        __syncthreads();                                  // A's last round is read
        sketch_all<T, S, SPILL>(buf, st, B, sb_key, sb_vec, n_b, ib, kb, gb, pb, cb, cpb, slb,
                                spb, skb, k, t, b);
        transform<T, LOG_VPT, LOGB>(buf, v, logb, threads);
#pragma unroll
        for (int q = 0; q < VPT; ++q)                     // each thread reads what it wrote
            v[q] = Mul<T>::mul(o[round_index<VPT>(q, last, rl, threads)], v[q]);
        return;
    }
    T fb[SPILL ? 1 : VPT];
    __syncthreads();                                      // A's last round is read
    sketch_all<T, S, SPILL>(buf, st, B, sb_key, sb_vec, n_b, ib, kb, gb, pb, cb, cpb, slb, spb,
                            skb, k, t, b);
    transform<T, LOG_VPT, LOGB>(buf, fb, logb, threads);
#pragma unroll
    for (int q = 0; q < VPT; ++q) v[q] = Mul<T>::mul(v[q], fb[SPILL ? 0 : q]);
}

// v := the pairwise tree sum (pagh_mm.reduction's order) of the terms 0 .. count - 1 of a
// group of 2^LOG_G inner indices (those absent: absent nodes of the tree).  term(i) puts
// term i into v; at(q): the element register q holds; slot(level, idx): where the pending
// node of ``level`` keeps element idx.  Each thread merges the values it owns (no
// synchronization).
template <typename T, int VPT, int LOG_G, typename Term, typename At, typename Slot>
__device__ __forceinline__ void group_tree(T* v, int count, Term term, At at, Slot slot)
{
    int have = 0;                         // bit l: a node of level l waits in slot l
    for (int i = 0; i < count; ++i) {
        term(i);
        int level = 0;                    // merge with the waiting left siblings
        while (level < LOG_G && (i >> level) & 1) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
            have &= ~(1 << level);
            ++level;
        }
        if (level < LOG_G && i + 1 < count) {               // wait for the right sibling
#pragma unroll
            for (int q = 0; q < VPT; ++q) slot(level, at(q)) = v[q];
            have |= 1 << level;
        }
    }
    // left nodes still waiting: their right siblings are absent, they move up unchanged
    // and take the nodes above them as right siblings (the last term is in v)
    for (int level = 0; level < LOG_G; ++level) {
        if (have & (1 << level)) {
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = Num<T>::add(slot(level, at(q)), v[q]);
        }
    }
}

// out[(g * d + t) * b + i]: the pairwise tree sum (pagh_mm.reduction's order) of the terms
// of the inner indices g 2^LOG_G .. + 2^LOG_G - 1 (those below nb; the others are absent
// nodes of the tree) for repetition t, in T; blockIdx.x = g * d + t, blockDim.x = b / VPT
// (at most 1024; exactly 1024 above RegLogVpt; b = 2^FIXED where FIXED > 0: fixed_logb).
// The tree's pending nodes wait in shared memory after the buffer, each thread keeping the
// values it owns (no synchronization), or, when ``slots`` is given (the largest b, whose
// buffer leaves no room), in the block's LOG_G rows of ``slots``
// (slots[(blockIdx.x * LOG_G + level) * b + i]: the same values, so the same bits).  Shared
// memory: (1 + LOG_G) padded_size<T>(b) values (1 with ``slots``), rounded up to 16 bytes,
// then the sketch's Stage (CHUNK doubles, CHUNK ints, 2 doubles; none for a Gram kernel of
// RegLogVpt values per thread or fewer given the codes, which never reads it:
// kernels._stageless).  Each factor: its keys'
// bucket lists (ia, ka, ga, the buckets of their positions pa) and, for the sketch in key
// order, its key count n_a and codes ca (Side.gpu_codes: codes, the slow buckets' bounds per
// chunk of keys cpa, slow buckets sla, their key lists' bounds spa and entries ska; null, and
// n_a 0: the sketch by position); the same for B.
template <typename T, typename S, int LOG_VPT, bool GRAM, int LOG_G, int FIXED>
__global__ void __launch_bounds__(1024)
fused_dense_terms(const S* __restrict__ A, i64 sa_key, i64 sa_vec, int n_a, const i64* __restrict__ ia,
                  const i64* __restrict__ ka, const double* __restrict__ ga,
                  const int* __restrict__ pa, const unsigned* __restrict__ ca,
                  const int* __restrict__ cpa, const int* __restrict__ sla,
                  const int* __restrict__ spa, const unsigned* __restrict__ ska,
                  const S* __restrict__ B, i64 sb_key, i64 sb_vec, int n_b,
                  const i64* __restrict__ ib, const i64* __restrict__ kb,
                  const double* __restrict__ gb, const int* __restrict__ pb,
                  const unsigned* __restrict__ cb, const int* __restrict__ cpb,
                  const int* __restrict__ slb, const int* __restrict__ spb,
                  const unsigned* __restrict__ skb,
                  int d, int logb, i64 nb, T* __restrict__ out, T* __restrict__ slots)
{
    constexpr int VPT = 1 << LOG_VPT, G = 1 << LOG_G;
    constexpr int LOGB = fixed_logb<T, LOG_VPT, FIXED>();
    if constexpr (LOGB > 0) logb = LOGB;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* buf = reinterpret_cast<T*>(smem_raw);
    const int b = 1 << logb, threads = LOGB > 0 ? 1 << (LOGB - LOG_VPT) : (int)blockDim.x;
    const int span = b + ((b - 1) >> pad_shift<T>());
    Stage st;                                 // after the buffer and the tree's slots
    const int shared_slots = slots ? 0 : LOG_G;
    st.val = reinterpret_cast<double*>(smem_raw + ((((1 + shared_slots) * span * sizeof(T)) + 15) & ~(size_t)15));
    st.bucket = reinterpret_cast<int*>(st.val + CHUNK);
    st.carry = reinterpret_cast<double*>(st.bucket + CHUNK);
    const i64 g = blockIdx.x / d;
    const int t = (int)(blockIdx.x - g * d);
    const int last = ((logb - 1) / LOG_VPT) * LOG_VPT;     // the last round's first bit
    const int rl = logb - last;
    T* o = out + (g * d + t) * (i64)b;
    // element idx of the pending node of ``level``: in shared memory or in the block's rows
    auto slot = [&](int level, int idx) -> T& {
        return slots ? slots[((i64)blockIdx.x * LOG_G + level) * b + idx]
                     : buf[(1 + level) * span + pad<T>(idx)];
    };
    T v[VPT];
    const i64 first = g * G;
    const int count = (int)min((i64)G, nb - first);
    group_tree<T, VPT, LOG_G>(
        v, count,
        [&](int i) {
            term<T, S, LOG_VPT, GRAM, FIXED>(buf, st, v, o, A, sa_key, sa_vec, n_a, ia, ka, ga,
                                             pa, ca, cpa, sla, spa, ska, B, sb_key, sb_vec,
                                             n_b, ib, kb, gb, pb, cb, cpb, slb, spb, skb,
                                             first + i, t, logb);
        },
        [&](int q) { return round_index<VPT>(q, last, rl, threads); }, slot);
#pragma unroll
    for (int q = 0; q < VPT; ++q) o[round_index<VPT>(q, last, rl, threads)] = v[q];
}

// The cluster form of fused_dense_terms for more buckets than one block's shared memory
// holds (Hopper): 2^LOG_CL blocks per (group g, repetition t), blockIdx.x = (g d + t)
// 2^LOG_CL + rank, b = 2^LOG_CL bl buckets.  For each factor, block ``rank`` sketches the
// buckets rank bl .. rank bl + bl - 1 into its buffer and transforms them (the stages on bits
// 0 .. log2(bl) - 1, as fused_dense_terms); after a cluster barrier each block takes a
// slice of bl / 2^LOG_CL positions j, reads the 2^LOG_CL blocks' values at j through
// distributed shared memory and applies the stages on the top LOG_CL bits (ascending): the
// transform's values at buckets r bl + j.  Every stage in the NumPy engine's order, so the
// bits of fused_dense_terms and of the CPU.  A's values wait while B is transformed in the
// cluster's output row, or (A_SHARED) in the block's shared memory after the stage; the
// group's tree as fused_dense_terms', its pending nodes in ``slots``
// (slots[((g d + t) LOG_G + level) b + i]).  blockDim.x = bl / 2^LOG_VPT; shared memory:
// padded_size<T>(bl) values rounded up to 16 bytes, then the sketch's Stage, then (A_SHARED)
// bl values.  The factors' key counts and codes (the sketch in key order) are not read: the
// cluster kernels sketch by position (in key order measured slower, session 31).
// Clusters of 16 blocks are not portable: the launcher opts in (engine.kernel's attribute).
template <typename T, typename S, int LOG_VPT, bool GRAM, int LOG_G, int LOG_CL, bool A_SHARED>
__global__ void FWHT_CLUSTER_DIMS(1 << LOG_CL) __launch_bounds__(1024)
fused_cluster_terms(const S* __restrict__ A, i64 sa_key, i64 sa_vec, int n_a, const i64* __restrict__ ia,
                    const i64* __restrict__ ka, const double* __restrict__ ga,
                    const int* __restrict__ pa, const unsigned* __restrict__ ca,
                    const int* __restrict__ cpa, const int* __restrict__ sla,
                    const int* __restrict__ spa, const unsigned* __restrict__ ska,
                    const S* __restrict__ B, i64 sb_key, i64 sb_vec, int n_b,
                    const i64* __restrict__ ib, const i64* __restrict__ kb,
                    const double* __restrict__ gb, const int* __restrict__ pb,
                    const unsigned* __restrict__ cb, const int* __restrict__ cpb,
                    const int* __restrict__ slb, const int* __restrict__ spb,
                    const unsigned* __restrict__ skb,
                    int d, int logb, i64 nb, T* __restrict__ out, T* __restrict__ slots)
{
#if FWHT_CLUSTERS
    constexpr int VPT = 1 << LOG_VPT, G = 1 << LOG_G, CL = 1 << LOG_CL, P = VPT >> LOG_CL;
    static_assert(LOG_CL >= 1 && LOG_CL <= 4 && P >= 1, "clusters of 2 to 16 blocks, a slice per thread");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* buf = reinterpret_cast<T*>(smem_raw);
    const int b = 1 << logb, logbl = logb - LOG_CL, bl = 1 << logbl, threads = blockDim.x;
    const int span = bl + ((bl - 1) >> pad_shift<T>());
    Stage st;
    st.val = reinterpret_cast<double*>(smem_raw + ((span * sizeof(T) + 15) & ~(size_t)15));
    st.bucket = reinterpret_cast<int*>(st.val + CHUNK);
    st.carry = reinterpret_cast<double*>(st.bucket + CHUNK);
    const int rank = cluster_rank();
    const i64 cid = (i64)(blockIdx.x >> LOG_CL);
    const i64 g = cid / d;
    const int t = (int)(cid - g * d);
    const int last = ((logbl - 1) / LOG_VPT) * LOG_VPT;   // the last local round's first bit
    const int rl = logbl - last;
    const int j0 = rank * (bl >> LOG_CL) + (int)threadIdx.x;  // this thread's first position
    T* o = out + cid * (i64)b;
    // A_SHARED: A's values wait in shared memory after the stage, register q of thread i at
    // q threads + i (each thread reads what it wrote)
    T* aw = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(st.carry) + 16);
    // register q = p CL + r holds bucket r bl + j0 + p threads
    auto at = [&](int q) { return ((q & (CL - 1)) << logbl) + j0 + (q >> LOG_CL) * threads; };
    auto slot = [&](int level, int idx) -> T& { return slots[(cid * LOG_G + level) * b + idx]; };
    T v[VPT];
    // v := the transform of one factor's vector k at this thread's buckets
    auto factor = [&](const S* X, i64 s_key, i64 s_vec, const i64* ip, const i64* kp,
                      const double* gp, const int* pp, i64 k) {
        cluster_sync();                   // every block has read this buffer's last values
        sketch<T, S>(buf, st, X, s_key, s_vec, ip, kp, gp, pp, k, t, b, rank * bl, bl);
        transform<T, LOG_VPT>(buf, v, logbl, threads);
#pragma unroll
        for (int q = 0; q < VPT; ++q) buf[pad<T>(round_index<VPT>(q, last, rl, threads))] = v[q];
        cluster_sync();                   // every block's buckets are transformed
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const T* x = buf + pad<T>(j0 + p * threads);    // in each block's buffer
#pragma unroll
            for (int r = 0; r < CL; ++r) v[p * CL + r] = ld_cluster<T>(map_rank(x, r));
            radix2_stages<T, LOG_CL>(v + p * CL, LOG_CL);
        }
    };
    const i64 first = g * G;
    const int count = (int)min((i64)G, nb - first);
    group_tree<T, VPT, LOG_G>(
        v, count,
        [&](int i) {
            const i64 k = first + i;
            if constexpr (GRAM) {
                factor(A, sa_key, sa_vec, ia, ka, ga, pa, k);
#pragma unroll
                for (int q = 0; q < VPT; ++q) v[q] = Mul<T>::mul(v[q], v[q]);
            } else {
#pragma unroll 1
                for (int f = 0; f < 2; ++f) {     // one copy of the code for both factors
                    if (f == 0) factor(A, sa_key, sa_vec, ia, ka, ga, pa, k);
                    else factor(B, sb_key, sb_vec, ib, kb, gb, pb, k);
#pragma unroll
                    for (int q = 0; q < VPT; ++q) {   // A's values wait (row or shared)
                        T& a = A_SHARED ? aw[q * threads + (int)threadIdx.x] : o[at(q)];
                        if (f == 0) a = v[q];
                        else v[q] = Mul<T>::mul(a, v[q]);
                    }
                }
            }
        },
        at, slot);
#pragma unroll
    for (int q = 0; q < VPT; ++q) o[at(q)] = v[q];
    cluster_sync();                       // no block leaves while the others read its buffer
#else
    __trap();
#endif
}

// out[g * stride + j] := the pairwise tree sum (pagh_mm.reduction.block_sum's order: level
// by level, x_2i + x_2i+1, an element without a partner moving up unchanged) of the nodes
// 32 g .. 32 g + 31 (those below count) of column j: aligned blocks of 32 summands are nodes
// of the tree (the last block's own tree when it has fewer), so summing these again, 32 at a
// time, gives the whole tree's value.  The 32 nodes are merged with their pending left siblings
// in registers (every stack index is known at compile time), so each node is read once and
// only a 32nd as many values written: the whole tree costs a little over one read.  Each
// thread takes V consecutive columns (stride a multiple of V): its 32 loads of V values, all
// in flight before the sums (H100, 256 nodes of 13 x 2^15 FP32: 0.46 ms with one scalar load
// at a time, 0.33 ms with the 32 in flight).
template <typename T, int V> struct __align__(sizeof(T) * V) TreeVec { T v[V]; };

template <typename T, int V>
__global__ void tree_sum_32(const T* __restrict__ nodes, i64 count, i64 stride,
                            T* __restrict__ out)
{
    typedef TreeVec<T, V> W;
    const i64 groups = (count + 31) / 32, sv = stride / V;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < groups * sv;
         idx += (i64)gridDim.x * blockDim.x) {
        const i64 g = idx / sv, jv = idx - g * sv;
        const int n = (int)min((i64)32, count - 32 * g);
        const W* x = reinterpret_cast<const W*>(nodes + 32 * g * stride) + jv;
        W val[32], res;
#pragma unroll
        for (int k = 0; k < 32; ++k)                 // every load in flight before the sums
            if (k < n) val[k] = x[(i64)k * sv];
#pragma unroll
        for (int c = 0; c < V; ++c) {
            T stack[6];
            unsigned have = 0;
            T v = T(0);
#pragma unroll
            for (int k = 0; k < 32; ++k) {
                if (k < n) {
                    v = val[k].v[c];
                    int level = 0;
#pragma unroll
                    for (int l = 0; l < 5; ++l) {    // the waiting left siblings of node k
                        if (!((k >> l) & 1)) break;
                        v = Num<T>::add(stack[l], v);
                        have &= ~(1u << l);
                        level = l + 1;
                    }
                    if (k + 1 < n) {
                        stack[level] = v;
                        have |= 1u << level;
                    }
                }
            }
#pragma unroll
            for (int l = 0; l < 6; ++l)              // right siblings absent: move up
                if (have & (1u << l)) v = Num<T>::add(stack[l], v);
            res.v[c] = v;
        }
        reinterpret_cast<W*>(out + g * stride)[jv] = res;
    }
}
