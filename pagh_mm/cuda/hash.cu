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
