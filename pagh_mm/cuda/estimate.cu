// pagh_mm CUDA query kernels: the median-of-d estimates of a tile of C = A @ B read
// straight from the hash tables and the (L2-resident) sketch, either all written out
// (SELECT = false: the tile, for to_dense and the per-row queries) or selected in the same
// pass (SELECT = true: only the entries whose key reaches the limit are written, with the
// largest key below the cut), optionally behind a heavy-bucket filter.
//
// Arithmetic (the NumPy engine's): each repetition's value is (s1 * s2) * c_t[bucket];
// median = middle value (odd d) or (a + b) / 2 of the two middle values (even d).
// GRAM (one hash function on both sides): each value is halved, repetitions whose bucket is
// 0 are left out, and the median of the c values left is (v[(c-1)/2] + v[c/2]) / 2 (0 when
// c = 0), as pagh_mm.query.masked_median computes it.
//
// The filter (SELECT with a bitmap of the groups of 2^log2g buckets that hold a bucket whose
// |c_t| x factor >= lim, coarse enough for shared memory; "heavy" below: in such a group): an entry
// whose key (|median| or median) reaches lim > 0 has at least as many repetitions at a heavy
// bucket as at a light one (the median lies between values of the majority), so an entry
// with more light than heavy repetitions is skipped without reading the sketch; its key is at
// most the largest light bucket's magnitude (the caller's bound).  The passing entries are
// evaluated exactly as above: the selection is the unfiltered one, bit for bit.
//
// Layout: one thread per column of the tile (its buckets of the first REG = min(MAXD,
// SCAN_REG) repetitions in registers), rows walked in order with their buckets staged in
// shared memory (a broadcast read per row), the filter's bitmaps of the first `sreps`
// repetitions in shared memory.
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

#define SCAN_REG 13         // repetitions whose buckets are kept in registers / staged (auto: up to 13)
#define SCAN_STAGED 32      // rows whose buckets a block stages at a time
#define SCAN_ROW_CHUNK 256  // rows of one work item
#define NEG_INF __longlong_as_double((long long)0xfff0000000000000ull)   // (NVRTC has no INFINITY)

// Doubles as unsigned integers in the same order (for atomicMax).
__device__ __forceinline__ u64 order_key(double x)
{
    const u64 b = (u64)__double_as_longlong(x);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

template <int MAXD, bool GRAM>
struct Median {
    double v[MAXD];
    int c = 0;
    __device__ __forceinline__ void add(u32 idx, double sa, double sb, double cell)
    {
        if (GRAM && idx == 0) return;
        double val = __dmul_rn(__dmul_rn(sa, sb), cell);
        if (GRAM) val = __dmul_rn(val, 0.5);
        int k = c++;                            // insertion sort
        while (k > 0 && v[k - 1] > val) { v[k] = v[k - 1]; --k; }
        v[k] = val;
    }
    __device__ __forceinline__ double get(int d) const
    {
        if (GRAM)
            return c == 0 ? 0.0 : __dmul_rn(__dadd_rn(v[(c - 1) >> 1], v[c >> 1]), 0.5);
        return (d & 1) ? v[d >> 1] : __dmul_rn(__dadd_rn(v[(d >> 1) - 1], v[d >> 1]), 0.5);
    }
};

template <bool XOR>
__device__ __forceinline__ u32 bucket_of(u32 a, u32 b, u32 bmask)
{
    return XOR ? (a ^ b) : ((a + b) & bmask);
}

// Median's result for d <= MAXD <= SCAN_REG repetitions (not Gram) in registers: the same
// insertion sort unrolled (the slots past d hold +inf, inserted last, where they stay) and
// the middle read by a select, so no local memory.
template <int MAXD, bool XOR>
__device__ __forceinline__ double register_median(const u32 (*sh1)[SCAN_STAGED],
                                                  const double (*ss1)[SCAN_STAGED], int r,
                                                  const u32* hj, const double* s2, i64 cols,
                                                  const double* __restrict__ sketch, int d,
                                                  int log2b, u32 bmask)
{
    double v[MAXD];
#pragma unroll
    for (int t = 0; t < MAXD; ++t) {
        double val = __longlong_as_double(0x7ff0000000000000ll);
        if (t < d) {
            const u32 idx = bucket_of<XOR>(sh1[t][r], hj[t], bmask);
            val = __dmul_rn(__dmul_rn(ss1[t][r], s2[t * cols]), sketch[((i64)t << log2b) + idx]);
        }
        v[t] = val;
        bool go = true;
#pragma unroll
        for (int k = t; k > 0; --k) {
            go = go && v[k - 1] > v[k];
            const double lo = go ? v[k] : v[k - 1], hi = go ? v[k - 1] : v[k];
            v[k - 1] = lo;
            v[k] = hi;
        }
    }
    const int a = (d & 1) ? d >> 1 : (d >> 1) - 1, b = d >> 1;
    double x = v[0], y = v[0];
#pragma unroll
    for (int t = 0; t < MAXD; ++t) {
        if (t == a) x = v[t];
        if (t == b) y = v[t];
    }
    return (d & 1) ? y : __dmul_rn(__dadd_rn(x, y), 0.5);
}

// flags: 1 key = |estimate| (else the estimate), 2 skip the diagonal, 4 only entries on or
// above the diagonal.  h1/s1: (d, rows) of tile rows r0.., h2/s2: (d, cols) of tile columns
// c0..; ids are flat ids of the m x p product (i p + j).  SELECT = false: out[(i-r0) cols +
// (j-c0)] = estimate, nothing else.  diag (GRAM, SELECT): the exact diagonal.
template <int MAXD, bool XOR, bool GRAM, bool SELECT>
__global__ void __launch_bounds__(512, 2)
scan_tile(const i64* __restrict__ h1, const double* __restrict__ s1, i64 rows,
          const i64* __restrict__ h2, const double* __restrict__ s2, i64 cols,
          const double* __restrict__ sketch, int d, int log2b,
          const u32* __restrict__ bits, int sreps, int log2g,
          i64 r0, i64 c0, i64 p, const double* __restrict__ diag, int flags,
          double lim, double cut,
          double* __restrict__ vals, i64* __restrict__ ids, u64* __restrict__ count, i64 room,
          u64* __restrict__ low)
{
    // the repetitions staged and kept in registers: all of them up to SCAN_REG
    constexpr int REG = MAXD < SCAN_REG ? MAXD : SCAN_REG;
    extern __shared__ u32 sbits[];
    __shared__ u32 sh1[REG][SCAN_STAGED];
    __shared__ double ss1[REG][SCAN_STAGED];
    const i64 words = log2b - log2g >= 5 ? ((i64)1 << (log2b - log2g - 5)) : 1;
    const u32 bmask = (u32)(((u64)1 << log2b) - 1);
    const bool by_abs = flags & 1, skip_diag = flags & 2, upper = flags & 4;
    const bool filter = SELECT && bits != nullptr;
    if (filter)
        for (i64 w = threadIdx.x; w < (i64)sreps * words; w += blockDim.x) sbits[w] = bits[w];
    __syncthreads();
    const int dr = d < REG ? d : REG;
    const int width = blockDim.x;
    const i64 slabs = (cols + width - 1) / width;
    const i64 items = slabs * ((rows + SCAN_ROW_CHUNK - 1) / SCAN_ROW_CHUNK);
    double lowv = NEG_INF;
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
        const i64 slab = item % slabs, rbeg = (item / slabs) * SCAN_ROW_CHUNK;
        const i64 rend = min(rows, rbeg + SCAN_ROW_CHUNK);
        if (SELECT && upper && r0 + rbeg > c0 + min(cols, (slab + 1) * width) - 1)
            continue;                           // the whole item lies below the diagonal
        const i64 jl = slab * width + threadIdx.x, j = c0 + jl;
        const bool valid = jl < cols;
        u32 hj[REG];
#pragma unroll
        for (int t = 0; t < REG; ++t) hj[t] = (t < d && valid) ? (u32)h2[t * cols + jl] : 0u;
        for (i64 rs = rbeg; rs < rend; rs += SCAN_STAGED) {
            const int nr = (int)min((i64)SCAN_STAGED, rend - rs);
            __syncthreads();
            for (int q = threadIdx.x; q < dr * SCAN_STAGED; q += width) {
                const int t = q / SCAN_STAGED, r = q % SCAN_STAGED;
                if (r < nr) {
                    sh1[t][r] = (u32)h1[t * rows + rs + r];
                    ss1[t][r] = s1[t * rows + rs + r];
                }
            }
            __syncthreads();
            if (!valid) continue;
            for (int r = 0; r < nr; ++r) {
                const i64 il = rs + r, i = r0 + il;
                const bool on_diag = i == j;
                if (SELECT) {
                    if (upper && i > j) break;  // the later rows are below the diagonal too
                    if (skip_diag && on_diag) continue;
                    if (filter && !(GRAM && on_diag)) {
                        int heavy = 0, light = 0;
                        bool pass = true;
#pragma unroll
                        for (int t = 0; t < REG; ++t) {
                            if (t < d && pass) {
                                const u32 idx = bucket_of<XOR>(sh1[t][r], hj[t], bmask);
                                if (!(GRAM && idx == 0)) {
                                    const u32 g = idx >> log2g;
                                    const u32 w = t < sreps ? sbits[t * words + (g >> 5)]
                                                            : __ldg(bits + t * words + (g >> 5));
                                    if ((w >> (g & 31)) & 1u) ++heavy; else ++light;
                                    pass = light <= heavy + (d - 1 - t);
                                }
                            }
                        }
                        for (int t = REG; t < d && pass; ++t) {
                            const u32 idx = bucket_of<XOR>((u32)h1[t * rows + il],
                                                           (u32)h2[t * cols + jl], bmask);
                            if (GRAM && idx == 0) continue;
                            const u32 g = idx >> log2g;
                            const u32 w = t < sreps ? sbits[t * words + (g >> 5)]
                                                    : __ldg(bits + t * words + (g >> 5));
                            if ((w >> (g & 31)) & 1u) ++heavy; else ++light;
                            pass = light <= heavy + (d - 1 - t);
                        }
                        if (!pass) continue;
                    }
                }
                double est;
                if (SELECT && GRAM && on_diag && diag != nullptr) {
                    est = diag[i];
                } else {
                    if (!GRAM && MAXD <= SCAN_REG) {
                        est = register_median<MAXD, XOR>(sh1, ss1, r, hj, s2 + jl, cols, sketch,
                                                         d, log2b, bmask);
                    } else {
                        Median<MAXD, GRAM> md;
#pragma unroll
                        for (int t = 0; t < REG; ++t)
                            if (t < d) {
                                const u32 idx = bucket_of<XOR>(sh1[t][r], hj[t], bmask);
                                md.add(idx, ss1[t][r], s2[t * cols + jl],
                                       sketch[((i64)t << log2b) + idx]);
                            }
                        for (int t = REG; t < d; ++t) {
                            const u32 idx = bucket_of<XOR>((u32)h1[t * rows + il],
                                                           (u32)h2[t * cols + jl], bmask);
                            md.add(idx, s1[t * rows + il], s2[t * cols + jl],
                                   sketch[((i64)t << log2b) + idx]);
                        }
                        est = md.get(d);
                    }
                }
                if (!SELECT) {
                    vals[il * cols + jl] = est;
                    continue;
                }
                const double key = by_abs ? fabs(est) : est;
                if (lim == NEG_INF ? key > lim : key >= lim) {
                    const u64 at = atomicAdd(count, 1ull);
                    if (at < (u64)room) {
                        vals[at] = est;
                        ids[at] = i * p + j;
                    }
                } else if (key < cut) {
                    lowv = fmax(lowv, key);
                }
            }
        }
    }
    if (SELECT) {
        for (int o = 16; o > 0; o >>= 1) lowv = fmax(lowv, __shfl_xor_sync(0xffffffffu, lowv, o));
        if ((threadIdx.x & 31) == 0 && lowv > NEG_INF) atomicMax(low, order_key(lowv));
    }
}

// The filter's bitmap over groups of 2^log2g buckets: bit u % 32 of word t * words + u / 32
// set when a bucket v of group u = v >> log2g has |sketch[t, v]| x factor >= lim; bound: the
// largest |sketch[t, v]| x factor of the other buckets (order_key).
__global__ void heavy_bits(const double* __restrict__ sketch, int d, int log2b, int log2g,
                           double factor, double lim, u32* __restrict__ bits,
                           u64* __restrict__ bound)
{
    const i64 b = (i64)1 << log2b, groups = (i64)1 << (log2b - log2g);
    const i64 words = groups >= 32 ? groups >> 5 : 1;
    const int gsize = 1 << log2g;
    double most = NEG_INF;
    for (i64 w = (i64)blockIdx.x * blockDim.x + threadIdx.x; w < d * words;
         w += (i64)gridDim.x * blockDim.x) {
        const i64 t = w / words, q = w % words;
        u32 word = 0;
        for (int k = 0; k < 32; ++k) {
            const i64 u = q * 32 + k;
            if (u >= groups) break;
            for (int e = 0; e < gsize; ++e) {
                const double mag = __dmul_rn(fabs(sketch[t * b + (u << log2g) + e]), factor);
                if (mag >= lim) word |= 1u << k;
                else most = fmax(most, mag);
            }
        }
        bits[w] = word;
    }
    for (int o = 16; o > 0; o >>= 1) most = fmax(most, __shfl_xor_sync(0xffffffffu, most, o));
    if ((threadIdx.x & 31) == 0 && most > NEG_INF) atomicMax(bound, order_key(most));
}

// The entries of rows r0 .. r0 + rows (all p columns) of an FWHT sketch that heavy buckets
// point to, selected as scan_tile selects (issue 17's sub-quadratic search; the CPU's
// pruned_scan5 for any d).  A key can reach lim > 0 only when at least need = (d + 1) / 2
// repetitions see the entry in a heavy bucket, so one of the first T = d - need + 1 does:
// thread (item q, row r) takes heavy bucket items[q] of repetition item_rep[q] < T and the
// columns c with h_t(r) ^ h_t(c) = items[q] (members[t, starts[t, v] .. starts[t, v + 1]],
// v = h_t(r) ^ items[q]), skips an entry an earlier repetition (< t) finds, and evaluates
// it when need repetitions are heavy (bits: the exact bitmap, one bit per bucket).  GRAM:
// the strict upper triangle; entries with a blind repetition (bucket 0) are left to the
// items -1 of repetition t (the columns in row r's bucket of repetition t), each evaluated
// once (at its first blind repetition) with the general median; the diagonal is the caller's.
template <int MAXD, bool GRAM>
__global__ void __launch_bounds__(256)
pruned_tile(const i64* __restrict__ h1, const double* __restrict__ s1, i64 rows, i64 r0,
            const i64* __restrict__ h2, const double* __restrict__ s2, i64 p,
            const double* __restrict__ sketch, int d, int log2b, const u32* __restrict__ bits,
            const i64* __restrict__ items, const int* __restrict__ item_rep, i64 nitems,
            const i64* __restrict__ starts, const i64* __restrict__ members, int flags,
            double lim, double cut, double* __restrict__ vals, i64* __restrict__ ids,
            u64* __restrict__ count, i64 room, u64* __restrict__ low)
{
    const i64 b = (i64)1 << log2b, words = log2b >= 5 ? b >> 5 : 1;
    const bool by_abs = flags & 1, skip_diag = flags & 2;
    const int need = (d + 1) / 2;
    double lowv = NEG_INF;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < nitems * rows;
         e += (i64)gridDim.x * blockDim.x) {
        const i64 q = e / rows, rl = e - q * rows, gr = r0 + rl;
        const int t = item_rep[q];
        const bool blind = GRAM && items[q] < 0;
        const i64 v = h1[t * rows + rl] ^ (blind ? 0 : items[q]);
        const i64 z1 = starts[t * (b + 1) + v + 1];
        for (i64 z = starts[t * (b + 1) + v]; z < z1; ++z) {
            const i64 c = members[t * p + z];
            if ((GRAM && c <= gr) || (skip_diag && c == gr)) continue;
            bool skip = false;
            if (!blind) {
                int heavy = 0;
                for (int t2 = 0; t2 < d; ++t2) {
                    const u32 idx = (u32)(h1[t2 * rows + rl] ^ h2[t2 * p + c]);
                    if (GRAM && idx == 0) { skip = true; break; }   // a blind repetition
                    const bool hv = (bits[t2 * words + (idx >> 5)] >> (idx & 31)) & 1u;
                    if (hv && t2 < t) { skip = true; break; }       // found there
                    heavy += hv;
                }
                skip = skip || heavy < need;                        // below lim (the bound)
            } else {
                for (int t2 = 0; t2 < t; ++t2)                      // its first blind one?
                    if (h1[t2 * rows + rl] == h2[t2 * p + c]) skip = true;
            }
            if (skip) continue;
            Median<MAXD, GRAM> md;
            for (int t2 = 0; t2 < d; ++t2) {
                const u32 idx = (u32)(h1[t2 * rows + rl] ^ h2[t2 * p + c]);
                md.add(idx, s1[t2 * rows + rl], s2[t2 * p + c], sketch[((i64)t2 << log2b) + idx]);
            }
            const double est = md.get(d);
            const double key = by_abs ? fabs(est) : est;
            if (key >= lim) {
                const u64 at = atomicAdd(count, 1ull);
                if (at < (u64)room) {
                    vals[at] = est;
                    ids[at] = gr * p + c;
                }
            } else if (key < cut) {
                lowv = fmax(lowv, key);
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) lowv = fmax(lowv, __shfl_xor_sync(0xffffffffu, lowv, o));
    if ((threadIdx.x & 31) == 0 && lowv > NEG_INF) atomicMax(low, order_key(lowv));
}
