// pagh_mm CUDA kernel: median-of-d estimates of a tile of rows of C = A @ B, read
// straight from the hash tables and the (L2-resident) sketch, without materializing
// the d per-repetition values.  Same arithmetic as the NumPy path: (s1 * s2) * c_t,
// median = middle value (odd d) or (a + b) / 2 of the two middle values (even d).
// GRAM (one hash function on both sides): each value is halved, repetitions whose bucket
// is 0 are left out, and the median of the c values left is (v[(c-1)/2] + v[c/2]) / 2
// (0 when c = 0), as pagh_mm.query.masked_median computes it.
typedef long long i64;

template <int MAXD, bool XOR, bool GRAM>
__global__ void tile_estimates(const i64* __restrict__ h1, const double* __restrict__ s1,
                               const i64* __restrict__ h2, const double* __restrict__ s2,
                               const double* __restrict__ sketch, int d, i64 m, i64 p,
                               int log2b, i64 r0, i64 rows, double* __restrict__ out)
{
    const i64 total = rows * p;
    const i64 bmask = ((i64)1 << log2b) - 1;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (i64)gridDim.x * blockDim.x) {
        const i64 i = r0 + e / p, j = e % p;
        double v[MAXD];
        int c = 0;
        for (int t = 0; t < d; ++t) {
            const i64 a = h1[t * m + i], b = h2[t * p + j];
            const i64 idx = XOR ? (a ^ b) : ((a + b) & bmask);
            if (GRAM && idx == 0) continue;
            double val = __dmul_rn(__dmul_rn(s1[t * m + i], s2[t * p + j]),
                                   sketch[(t << log2b) + idx]);
            if (GRAM) val = __dmul_rn(val, 0.5);
            int k = c++;                       // insertion sort
            while (k > 0 && v[k - 1] > val) { v[k] = v[k - 1]; --k; }
            v[k] = val;
        }
        if (GRAM)
            out[e] = c == 0 ? 0.0 : __dmul_rn(__dadd_rn(v[(c - 1) >> 1], v[c >> 1]), 0.5);
        else
            out[e] = (d & 1) ? v[d >> 1] : __dmul_rn(__dadd_rn(v[(d >> 1) - 1], v[d >> 1]), 0.5);
    }
}
