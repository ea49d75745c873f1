// pagh_mm CUDA kernels: Count-Sketch scattering with the NumPy engine's summation order.
// Each bucket's value is 0.0 plus the signed values s(i) x_i of its keys, added one at a
// time in increasing key order (the order SciPy's CSR product and numpy.bincount use), so
// the GPU sketch equals the CPU sketch bit for bit.  The products s(i) x_i are exact.
typedef long long i64;

// Dense vectors: X (keys x nb) float64 or float32 at element strides (s_key, s_col).  The
// scatter matrix in CSR form: bucket r = t * b + u holds keys[indptr[r] .. indptr[r + 1])
// (increasing) with signs sgn.  One thread per (bucket, vector); consecutive threads take
// consecutive vectors of the same bucket, so a warp reads row segments of X (coalesced where
// s_col = 1).  Each bucket 0.0 plus its keys' values converted to float64 (exact), one at a
// time in order, SCATTER_AHEAD of them loaded at once.  out: (nb, rows).
#define SCATTER_AHEAD 8
template <typename S>
__device__ __forceinline__ void scatter_dense_rows(const S* __restrict__ X, i64 s_key, i64 s_col,
                                                   i64 nb, const i64* __restrict__ indptr,
                                                   const i64* __restrict__ keys,
                                                   const double* __restrict__ sgn, i64 rows,
                                                   double* __restrict__ out)
{
    const i64 total = rows * nb;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 r = g / nb, k = g - r * nb;
        const S* x = X + k * s_col;
        double s = 0.0;
        i64 q = indptr[r];
        const i64 q1 = indptr[r + 1];
        for (; q + SCATTER_AHEAD <= q1; q += SCATTER_AHEAD) {
            double v[SCATTER_AHEAD];
#pragma unroll
            for (int j = 0; j < SCATTER_AHEAD; ++j) v[j] = (double)x[keys[q + j] * s_key];
#pragma unroll
            for (int j = 0; j < SCATTER_AHEAD; ++j) s = __dadd_rn(s, __dmul_rn(sgn[q + j], v[j]));
        }
        for (; q < q1; ++q)
            s = __dadd_rn(s, __dmul_rn(sgn[q], (double)x[keys[q] * s_key]));
        out[k * rows + r] = s;
    }
}

// The entry points of one float type S each (extern "C": no name expressions).
#define SCATTER_DENSE(NAME, S)                                                                \
    extern "C" __global__ void NAME(const S* __restrict__ X, i64 s_key, i64 s_col, i64 nb,    \
                                    const i64* __restrict__ indptr,                           \
                                    const i64* __restrict__ keys,                             \
                                    const double* __restrict__ sgn, i64 rows,                 \
                                    double* __restrict__ out)                                 \
    {                                                                                         \
        scatter_dense_rows<S>(X, s_key, s_col, nb, indptr, keys, sgn, rows, out);             \
    }
SCATTER_DENSE(scatter_dense, double)
SCATTER_DENSE(scatter_dense_f32, float)

// The same sums for vectors whose keys are contiguous (X[k * s_vec + key]), at most 64
// rows: one warp per SCATTER_VECS vectors, lane l summing rows l and l + 32 of each.  The
// keys go SCATTER_CHUNK at a time through the warp's tile in shared memory (read in order,
// coalesced); each lane then walks its rows' keys of the chunk in increasing order (skey: the
// CSR's keys in row order, bit 31 set where the sign is -1), adding each value to the row's
// sum: every row 0.0 plus its keys' signed values in increasing key order, as above.
#define SCATTER_CHUNK 256
#define SCATTER_VECS 2
#define SCATTER_WARPS 8
#define SCATTER_RUN 8
// sum[v] += s x_v[key] for the entry e (key, bit 31 the sign's) of the chunk from key c0.
template <typename S>
__device__ __forceinline__ void scatter_keys_add(double* sum, const S (*t)[SCATTER_CHUNK],
                                                 unsigned e, i64 c0)
{
    const int at = (int)((e & 0x7fffffffu) - (unsigned)c0);
    const double sg = (e >> 31) ? -1.0 : 1.0;
#pragma unroll
    for (int v = 0; v < SCATTER_VECS; ++v) sum[v] = __dadd_rn(sum[v], __dmul_rn(sg, (double)t[v][at]));
}

template <typename S>
__device__ __forceinline__ void scatter_keys_rows(const S* __restrict__ X, i64 s_vec, i64 nb,
                                                  i64 nkeys, const i64* __restrict__ indptr,
                                                  const unsigned* __restrict__ skey, int rows,
                                                  double* __restrict__ out)
{
    __shared__ S tile[SCATTER_WARPS][SCATTER_VECS][SCATTER_CHUNK];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    S (*t)[SCATTER_CHUNK] = tile[w];
    const i64 items = (nb + SCATTER_VECS - 1) / SCATTER_VECS;
    for (i64 item = (i64)blockIdx.x * SCATTER_WARPS + w; item < items;
         item += (i64)gridDim.x * SCATTER_WARPS) {
        const i64 k0 = item * SCATTER_VECS;
        double sum[2][SCATTER_VECS];
        i64 p[2], p1[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = lane + 32 * h;
            p[h] = r < rows ? indptr[r] : 0;
            p1[h] = r < rows ? indptr[r + 1] : 0;
#pragma unroll
            for (int v = 0; v < SCATTER_VECS; ++v) sum[h][v] = 0.0;
        }
        for (i64 c0 = 0; c0 < nkeys; c0 += SCATTER_CHUNK) {
            __syncwarp();                                   // the last chunk's tile is read
#pragma unroll
            for (int v = 0; v < SCATTER_VECS; ++v) {
                const S* x = X + (k0 + v) * s_vec + c0;
#pragma unroll
                for (int i = lane; i < SCATTER_CHUNK; i += 32)
                    if (k0 + v < nb && c0 + i < nkeys) t[v][i] = x[i];
            }
            __syncwarp();
            const unsigned c1 = (unsigned)min(c0 + SCATTER_CHUNK, nkeys);
            // each row's next SCATTER_RUN entries loaded at once (a row holds about
            // SCATTER_CHUNK / rows keys of a chunk), then the rest one at a time
            unsigned e[2][SCATTER_RUN];
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < SCATTER_RUN; ++j)
                    e[h][j] = p[h] + j < p1[h] ? skey[p[h] + j] : 0x7fffffffu;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int used = 0;
#pragma unroll
                for (int j = 0; j < SCATTER_RUN; ++j) {
                    if ((e[h][j] & 0x7fffffffu) >= c1) break;
                    scatter_keys_add<S>(sum[h], t, e[h][j], c0);
                    ++used;
                }
                p[h] += used;
                if (used == SCATTER_RUN) {
                    for (; p[h] < p1[h]; ++p[h]) {
                        const unsigned u = skey[p[h]];
                        if ((u & 0x7fffffffu) >= c1) break;
                        scatter_keys_add<S>(sum[h], t, u, c0);
                    }
                }
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int v = 0; v < SCATTER_VECS; ++v)
                if (lane + 32 * h < rows && k0 + v < nb) out[(k0 + v) * rows + lane + 32 * h] = sum[h][v];
    }
}

#define SCATTER_KEYS(NAME, S)                                                                 \
    extern "C" __global__ void __launch_bounds__(SCATTER_WARPS * 32)                          \
    NAME(const S* __restrict__ X, i64 s_vec, i64 nb, i64 nkeys,                               \
         const i64* __restrict__ indptr, const unsigned* __restrict__ skey, int rows,         \
         double* __restrict__ out)                                                            \
    {                                                                                         \
        scatter_keys_rows<S>(X, s_vec, nb, nkeys, indptr, skey, rows, out);                   \
    }
SCATTER_KEYS(scatter_keys, double)
SCATTER_KEYS(scatter_keys_f32, float)

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

// Squared norms in the pairwise tree of pagh_mm.reduction.block_sum: the squares padded
// with zeros to a power of two, adjacent pairs added level by level, the left one first.
// Any power of two at least the count gives the same sums (a subtree of zeros is +0.0, and
// x + 0.0 = x for a square), so each kernel pads as its layout needs.  The squares and sums
// in float64 (float32 values converted exactly first).

// out[i] := sum_k X[i ld + k]^2 over k < n, one block of W warps per row (rows contiguous).
// Warp w takes the aligned span [w s, (w + 1) s) of the padded row, s a power of two >= 128, in
// chunks of 128: lane l reads elements l, l + 32, l + 64, l + 96 of the chunk (coalesced),
// five shuffle levels sum each run of 32, lane 0 adds the four runs pairwise and pushes the
// chunk's subtree onto a stack of pending subtrees; then the block adds the warps' sums
// pairwise.  Dynamic shared memory: W doubles.
template <typename T>
__device__ __forceinline__ void row_square_sums_of(const T* __restrict__ X, i64 ld, i64 n,
                                                   int log2p, i64 rows, double* __restrict__ out)
{
    extern __shared__ double part[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, W = blockDim.x >> 5;
    int log2s = log2p;                                   // the padded row: W spans of >= 128
    while (((i64)1 << log2s) < ((i64)W << 7)) ++log2s;
    const i64 span = ((i64)1 << log2s) / W, chunks = span >> 7;
    int top = 0;
    while (((i64)1 << top) < chunks) ++top;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* x = X + r * ld;
        double stack[48];
        for (i64 c = 0; c < chunks; ++c) {
            const i64 o = (i64)w * span + (c << 7) + lane;
            double v[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const i64 k = o + 32 * q;
                const double a = k < n ? (double)x[k] : 0.0;
                v[q] = __dmul_rn(a, a);
            }
#pragma unroll
            for (int h = 1; h < 32; h <<= 1) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const double u = __shfl_down_sync(0xffffffffu, v[q], h);
                    if ((lane & (2 * h - 1)) == 0) v[q] = __dadd_rn(v[q], u);
                }
            }
            if (lane == 0) {
                double t = __dadd_rn(__dadd_rn(v[0], v[1]), __dadd_rn(v[2], v[3]));
                int l = 0;
                for (i64 q = c; q & 1; q >>= 1, ++l) t = __dadd_rn(stack[l], t);
                stack[l] = t;
            }
        }
        if (lane == 0) part[w] = stack[top];
        __syncthreads();
        for (int h = 1; h < W; h <<= 1) {
            if (lane == 0 && (w & (2 * h - 1)) == 0) part[w] = __dadd_rn(part[w], part[w + h]);
            __syncthreads();
        }
        if (threadIdx.x == 0) out[r] = part[0];
        __syncthreads();
    }
}

extern "C" __global__ void row_square_sums(const double* __restrict__ X, i64 ld, i64 n, int log2p,
                                           i64 rows, double* __restrict__ out)
{
    row_square_sums_of<double>(X, ld, n, log2p, rows, out);
}

extern "C" __global__ void row_square_sums_f32(const float* __restrict__ X, i64 ld, i64 n,
                                               int log2p, i64 rows, double* __restrict__ out)
{
    row_square_sums_of<float>(X, ld, n, log2p, rows, out);
}

// part[s cols + j] := the subtree sum over the aligned span s of ``span`` rows (a power of two,
// at least 4) of X[k ld + j]^2, k < rows (columns contiguous across threads: a warp reads 32
// consecutive values of a row).  Grid: (column groups, spans); each thread adds its
// column's rows four at a time with a stack of pending subtrees.  The caller adds the spans'
// sums pairwise (the levels above the span).
template <typename T>
__device__ __forceinline__ void col_square_sums_of(const T* __restrict__ X, i64 ld, i64 rows,
                                                   i64 cols, i64 span, double* __restrict__ part)
{
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const i64 s = blockIdx.y, chunks = span >> 2, k0 = s * span;
    const T* x = X + j;
    double stack[48];
    for (i64 c = 0; c < chunks; ++c) {
        const i64 k = k0 + 4 * c;
        double v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const double a = k + q < rows ? (double)x[(k + q) * ld] : 0.0;
            v[q] = __dmul_rn(a, a);
        }
        double t = __dadd_rn(__dadd_rn(v[0], v[1]), __dadd_rn(v[2], v[3]));
        int l = 0;
        for (i64 q = c; q & 1; q >>= 1, ++l) t = __dadd_rn(stack[l], t);
        stack[l] = t;
    }
    int top = 0;
    while (((i64)1 << top) < chunks) ++top;
    part[s * cols + j] = stack[top];
}

extern "C" __global__ void col_square_sums(const double* __restrict__ X, i64 ld, i64 rows, i64 cols,
                                           i64 span, double* __restrict__ part)
{
    col_square_sums_of<double>(X, ld, rows, cols, span, part);
}

extern "C" __global__ void col_square_sums_f32(const float* __restrict__ X, i64 ld, i64 rows,
                                               i64 cols, i64 span, double* __restrict__ part)
{
    col_square_sums_of<float>(X, ld, rows, cols, span, part);
}
