// pagh_mm CUDA kernels: Count-Sketch scattering with the NumPy engine's summation order.
// Each bucket's value is 0.0 plus the signed values s(i) x_i of its keys, added one at a
// time in increasing key order (the order SciPy's CSR product and numpy.bincount use), so
// the GPU sketch equals the CPU sketch bit for bit.  The products s(i) x_i are exact.
typedef long long i64;

// Dense vectors: X (keys x nb) float64 at element strides (s_key, s_col).  The scatter
// matrix in CSR form: bucket r = t * b + u holds keys[indptr[r] .. indptr[r + 1]) (increasing)
// with signs sgn.  One thread per (bucket, vector); consecutive threads take consecutive
// vectors of the same bucket, so a warp reads row segments of X.  out: (nb, rows).
extern "C" __global__ void scatter_dense(const double* __restrict__ X, i64 s_key, i64 s_col,
                                         i64 nb, const i64* __restrict__ indptr,
                                         const i64* __restrict__ keys,
                                         const double* __restrict__ sgn, i64 rows,
                                         double* __restrict__ out)
{
    const i64 total = rows * nb;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 r = g / nb, k = g - r * nb;
        double s = 0.0;
        for (i64 q = indptr[r]; q < indptr[r + 1]; ++q)
            s = __dadd_rn(s, __dmul_rn(sgn[q], X[keys[q] * s_key + k * s_col]));
        out[k * rows + r] = s;
    }
}

// Sparse vectors: vector k holds stored values q in [ptr[k], ptr[k + 1]) (keys increasing);
// h and w (d x nnz): bucket and signed value of each stored value per repetition.  One
// thread per (vector, repetition) adds them in order into out[k][t] (zeroed, b buckets).
extern "C" __global__ void scatter_sparse(const i64* __restrict__ ptr, const i64* __restrict__ h,
                                          const double* __restrict__ w, i64 nnz, int d, i64 nb,
                                          i64 b, double* __restrict__ out)
{
    const i64 total = nb * d;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 k = g / d, t = g - k * d;
        double* o = out + (k * d + t) * b;
        for (i64 q = ptr[k]; q < ptr[k + 1]; ++q) {
            const i64 u = h[t * nnz + q];
            o[u] = __dadd_rn(o[u], w[t * nnz + q]);
        }
    }
}

// Direct pairs of sparse inner indices (exact integer products only): for inner index k
// (blockIdx.x) and every repetition t, each pair of a stored value i of A's vector k and
// a stored value j of B's vector k adds wA[t, i] wB[t, j] (signed values) to the
// time-domain table tab[t, hA[t, i] ^ hB[t, j]] - the XOR convolution of the two sketches
// without transforms, the SpGEMM's multiplications without its output.  The products and
// sums are integers below 2^53 (the caller checks), so they are exact in any order: the
// same bits as the transform route and as the CPU.  h, w: (d, nnz) arrays; ptr: the nb + 1
// bounds of the vectors' stored values.
extern "C" __global__ void pairs_direct(const i64* __restrict__ ptrA, const i64* __restrict__ hA,
                                        const double* __restrict__ wA, i64 nnzA,
                                        const i64* __restrict__ ptrB, const i64* __restrict__ hB,
                                        const double* __restrict__ wB, i64 nnzB, int d, i64 b,
                                        double* __restrict__ tab)
{
    const i64 k = blockIdx.x;
    const i64 a0 = ptrA[k], na = ptrA[k + 1] - a0, b0 = ptrB[k], nv = ptrB[k + 1] - b0;
    const i64 per = na * nv, total = per * d;
    for (i64 q = threadIdx.x; q < total; q += blockDim.x) {
        const i64 t = q / per, r = q - t * per, i = r / nv, j = r - i * nv;
        const i64 ia = t * nnzA + a0 + i, jb = t * nnzB + b0 + j;
        const double w = wA[ia];
        if (w != 0.0)            // rows a bit sketch leaves out add nothing (skipped: same bits)
            atomicAdd(tab + t * b + (hA[ia] ^ hB[jb]), __dmul_rn(w, wB[jb]));
    }
}
