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

// Direct pairs of sparse inner indices (exact integer products only): for every inner index
// k and repetition r, each pair of a stored value i of A's vector k and a stored value j of
// B's vector k adds wA[i] wB[j] (signed values) to the time-domain table
// tab[r, hA[i] ^ hB[j]] - the XOR convolution of the two sketches without transforms, the
// SpGEMM's multiplications without its output.  The products and sums are integers below
// 2^53 (the caller checks), so they are exact in any order: the same bits as the transform
// route and as the CPU.  h, w: (distinct repetitions, nnz) from hash_values (hash.cu);
// repetition r reads row base[r] of them and, when bit[r] >= 0 (a decoding repetition,
// pagh_mm.hashing.with_row_bits), leaves out A's keys (a Gram product: either key) whose bit
// bit[r] is 0, as its masked s1 (an added zero) would; keys: int32 or int64 (key64).  ptr:
// the nb + 1 bounds of the vectors' stored values.
//
// Block (x, y) takes repetition r = r0 + y and the PAIRS_K inner indices x PAIRS_K .. +
// PAIRS_K - 1, their pairs numbered one after the other (a prefix sum in shared memory), the
// threads striding over them: balanced whatever the vectors' lengths.  The caller launches
// one repetition at a time (gridDim.y = 1): the atomic additions of a launch go to one
// repetition's row of the table, which stays in L2 (32 MiB at b = 2^22) where the whole
// table would not.  (One launch of every repetition ran its blocks in that order too, but a
// chunk of a few thousand blocks per repetition had two or three repetitions' blocks resident
// at once: H100, 2^15 inner indices per chunk, 1.9x the pair time of 2^18.)
constexpr int PAIRS_K = 32;

__device__ __forceinline__ long long key_at(const void* keys, int key64, i64 q)
{
    return key64 ? ((const i64*)keys)[q] : (i64)((const int*)keys)[q];
}

extern "C" __global__ void pairs_direct(const i64* __restrict__ ptrA, const void* __restrict__ keysA,
                                        int keyA64, const unsigned* __restrict__ hA,
                                        const double* __restrict__ wA, i64 nnzA,
                                        const i64* __restrict__ ptrB, const void* __restrict__ keysB,
                                        int keyB64, const unsigned* __restrict__ hB,
                                        const double* __restrict__ wB, i64 nnzB, i64 nb, i64 b,
                                        const int* __restrict__ base, const int* __restrict__ bit,
                                        int gram, int r0, double* __restrict__ tab)
{
    __shared__ i64 first[PAIRS_K + 1];       // pairs before inner index k0 + c
    __shared__ i64 a0[PAIRS_K], b0[PAIRS_K], nv[PAIRS_K];
    const int r = r0 + blockIdx.y, m = base[r], l = bit[r];
    const i64 k0 = (i64)blockIdx.x * PAIRS_K;
    const int count = (int)min((i64)PAIRS_K, nb - k0);
    if (threadIdx.x < 32) {                  // one warp: the counts and their prefix sum
        const int c = threadIdx.x;
        i64 pairs = 0;
        if (c < count) {
            const i64 k = k0 + c;
            a0[c] = ptrA[k];
            b0[c] = ptrB[k];
            nv[c] = ptrB[k + 1] - b0[c];
            pairs = (ptrA[k + 1] - a0[c]) * nv[c];
        }
        for (int off = 1; off < 32; off <<= 1) {     // inclusive scan over the warp
            const i64 v = __shfl_up_sync(0xffffffffu, pairs, off);
            if (c >= off) pairs += v;
        }
        first[c + 1] = pairs;
        if (c == 0) first[0] = 0;
    }
    __syncthreads();
    const i64 total = first[count];
    const double* wa = wA + m * nnzA;
    const double* wb = wB + m * nnzB;
    const unsigned* ha = hA + m * nnzA;
    const unsigned* hb = hB + m * nnzB;
    double* row = tab + r * b;
    int c = 0;
    for (i64 q = threadIdx.x; q < total; q += blockDim.x) {
        while (first[c + 1] <= q) ++c;       // q only grows: the vector only moves on
        const i64 e = q - first[c], n = nv[c];
        i64 i, j;
        if (e < 0x7fffffff && n < 0x7fffffff) {      // 32-bit division where it fits
            const unsigned ei = (unsigned)e, ni = (unsigned)n;
            i = ei / ni;
            j = ei - (unsigned)i * ni;
        } else {
            i = e / n;
            j = e - i * n;
        }
        const i64 ia = a0[c] + i, jb = b0[c] + j;
        if (l >= 0 && (!((key_at(keysA, keyA64, ia) >> l) & 1) ||
                       (gram && !((key_at(keysB, keyB64, jb) >> l) & 1))))
            continue;            // rows a bit sketch leaves out add nothing
        const double w = wa[ia];
        if (w != 0.0)            // (a stored zero adds nothing either: skipped, same bits)
            atomicAdd(row + (ha[ia] ^ hb[jb]), __dmul_rn(w, wb[jb]));
    }
}

// The 1-norm of every sparse vector k (stored values q in [ptr[k], ptr[k + 1])), |v_q| added
// in stored order in float64, and the number of stored values that are not integers (NaN
// included) added to *fractional: what decides whether pairs are exact (pagh_mm.matmul).
extern "C" __global__ void vector_norms(const i64* __restrict__ ptr, const double* __restrict__ v,
                                        i64 nb, double* __restrict__ norm,
                                        unsigned long long* __restrict__ fractional)
{
    unsigned long long f = 0;
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < nb;
         k += (i64)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (i64 q = ptr[k]; q < ptr[k + 1]; ++q) {
            const double x = v[q];
            s = __dadd_rn(s, fabs(x));
            f += trunc(x) != x;
        }
        norm[k] = s;
    }
    if (f) atomicAdd(fractional, f);
}

// out[i] := sum_k X[i n + k]^2 over k < n (X: rows x n, float64, C-ordered) in the pairwise
// tree of pagh_mm.reduction.block_sum (the values padded with zeros to 2^log2p, adjacent
// pairs added level by level, the left one first: x + 0.0 = x for a square, so the bits of
// block_sum's unpadded tree).  One block of blockDim.x = 2^j <= 2^log2p threads per row;
// thread t sums the aligned span [t s, (t + 1) s) of s = 2^log2p / blockDim.x values with a
// stack of pending subtrees, then the block adds the threads' sums pairwise.
extern "C" __global__ void row_square_sums(const double* __restrict__ X, i64 n, int log2p,
                                           i64 rows, double* __restrict__ out)
{
    extern __shared__ double part[];
    const int t = threadIdx.x, T = blockDim.x;
    const i64 span = ((i64)1 << log2p) / T;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const double* x = X + r * n;
        double stack[48];
        const i64 k0 = (i64)t * span;
        for (i64 j = 0; j < span; ++j) {
            const i64 k = k0 + j;
            double v = k < n ? __dmul_rn(x[k], x[k]) : 0.0;
            int l = 0;
            for (i64 c = j; c & 1; c >>= 1, ++l) v = __dadd_rn(stack[l], v);
            stack[l] = v;
        }
        int top = 0;
        while (((i64)1 << top) < span) ++top;
        part[t] = stack[top];
        __syncthreads();
        for (int h = 1; h < T; h <<= 1) {
            if ((t & (2 * h - 1)) == 0) part[t] = __dadd_rn(part[t], part[t + h]);
            __syncthreads();
        }
        if (t == 0) out[r] = part[0];
        __syncthreads();
    }
}
