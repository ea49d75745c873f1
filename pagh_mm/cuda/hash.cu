// pagh_mm CUDA kernel: the "polynomial" hash family (pagh_mm.hashing), a degree-3
// polynomial over GF(2^61 - 1) evaluated by Horner's rule.  Modular arithmetic is exact,
// so the values equal the NumPy path's (32-bit limbs) bit for bit; here the 122-bit
// products come from __umul64hi.  One launch instead of one per array operation.
typedef long long i64;
typedef unsigned long long u64;

__device__ __forceinline__ u64 reduce61(u64 s)        // s < 2^63
{
    const u64 P = (1ULL << 61) - 1;
    s = (s & P) + (s >> 61);
    return s >= P ? s - P : s;
}

__device__ __forceinline__ u64 mulmod61(u64 x, u64 y)  // x, y < 2^61
{
    const u64 P = (1ULL << 61) - 1;
    const u64 lo = x * y, hi = __umul64hi(x, y);       // x y = hi 2^64 + lo, hi < 2^58
    return reduce61((hi << 3) + (lo >> 61) + (lo & P)); // 2^64 = 8, 2^61 = 1 (mod P)
}

// keys (n), coef (r x 4: powers 0..3, each below 2^61 - 1); out (r x n): value << 3.
extern "C" __global__ void poly61(const u64* __restrict__ keys, i64 n,
                                  const u64* __restrict__ coef, i64 r, u64* __restrict__ out)
{
    const i64 total = r * n;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 t = g / n, q = g - t * n;
        const u64 x = keys[q];
        const u64* c = coef + 4 * t;
        u64 v = c[3];
        v = reduce61(mulmod61(v, x) + c[2]);
        v = reduce61(mulmod61(v, x) + c[1]);
        v = reduce61(mulmod61(v, x) + c[0]);
        out[g] = v << 3;
    }
}

// 64 hash bits of key x for function ``role`` of repetition t (pagh_mm.hashing._raw): family
// 0 multiply-add-shift (a x + c; a x alone without ``affine``, the legacy multiply-shift's
// buckets), 1 simple tabulation (XOR of four byte-indexed words), 2 the polynomial family
// (its 61-bit value << 3).  a, c: (reps, 4); tables: (reps, 4 roles, 4 bytes, 256); coef:
// (reps, 4 roles, 4 powers).
__device__ __forceinline__ u64 raw_hash(int family, int t, int role, u64 x, bool affine,
                                        const u64* __restrict__ a, const u64* __restrict__ c,
                                        const u64* __restrict__ tables,
                                        const u64* __restrict__ coef)
{
    const int f = 4 * t + role;
    if (family == 1) {
        const u64* tab = tables + (i64)f * 4 * 256;
        return tab[x & 255] ^ tab[256 + ((x >> 8) & 255)] ^ tab[512 + ((x >> 16) & 255)] ^
               tab[768 + ((x >> 24) & 255)];
    }
    if (family == 2) {
        const u64* p = coef + 4 * f;
        u64 v = p[3];
        v = reduce61(mulmod61(v, x) + p[2]);
        v = reduce61(mulmod61(v, x) + p[1]);
        v = reduce61(mulmod61(v, x) + p[0]);
        return v << 3;
    }
    return affine ? a[f] * x + c[f] : a[f] * x;
}

// The hashes of n stored values of a sparse side for its ``reps`` distinct repetitions
// (pagh_mm.hashing.distinct_rows): h[t, q] the bucket (the top log2b bits of role_h's hash)
// (uint32) and w[t, q] = s(key) val[q], s = +1 or -1 by the top bit of role_s's hash (sign_table's
// product, exact).  Keys: int32 (key64 = 0) or int64 indices, below 2^32.  One launch in place
// of the array operations of bucket_table and sign_table, the same bits.
extern "C" __global__ void hash_values(const void* __restrict__ keys, int key64,
                                       const double* __restrict__ val, i64 n, int reps,
                                       int family, int affine, int role_h, int role_s, int log2b,
                                       const u64* __restrict__ a, const u64* __restrict__ c,
                                       const u64* __restrict__ tables,
                                       const u64* __restrict__ coef,
                                       unsigned* __restrict__ h, double* __restrict__ w)
{
    const i64 total = (i64)reps * n;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const int t = (int)(g / n);
        const i64 q = g - (i64)t * n;
        const u64 x = key64 ? (u64)((const i64*)keys)[q] : (u64)(unsigned)((const int*)keys)[q];
        const u64 hb = raw_hash(family, t, role_h, x, affine != 0, a, c, tables, coef);
        const u64 hs = raw_hash(family, t, role_s, x, true, a, c, tables, coef);
        h[g] = log2b ? (unsigned)(hb >> (64 - log2b)) : 0u;
        const double v = val[q];
        w[g] = (hs >> 63) ? -v : v;
    }
}
