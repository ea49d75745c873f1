// Exploration (issue 19 item 2; benchmarks/explore_k_cluster.py): fwht_k_rows with each row
// spread over a cluster of two blocks (Hopper, sm_90), for rows whose padded tile is too large
// for two tiles per SM (FP32 28 * 2**10: 115 KiB) or for one block's shared memory at all
// (FP64 28 and 40 * 2**10, which the library transforms in two passes and a K stage).
//
// Block q of the pair holds the row's blocks q K/2 .. q K/2 + K/2 - 1 (K/2 blocks of 2^log_mu
// units, contiguous in memory) and applies the power-of-two stages to them exactly as
// fwht_k_rows does (round 0 fused with the load, then the rounds through shared memory: the
// same code, repeated here for the exploration); after a cluster barrier it takes half of
// the positions u and reads the K values of each, K/2 from its own and K/2 from the other
// block's shared memory (distributed shared memory), forms the K signed sums and writes them.
// Every operation is fwht_k_rows' in its order, so the bits are the library's (the
// exploration compares them with ==).  One row per cluster, rows t = cluster, + clusters, ...
#include "../fwht_gpu/cuda/kernels/k_stage.cuh"
#include "../fwht_gpu/cuda/kernels/cluster.cuh"

template <typename T, typename C, int K, bool TRANSPOSE, bool PAIRED>
__global__ void FWHT_CLUSTER_DIMS(2) __launch_bounds__(k_rows_max_threads<typename Units<T, C, PAIRED>::U, K>(), 1)
fwht_k_rows_pair(const T* src, T* dst, i64 nrows, int log_mu, double scale, unsigned int* flags)
{
#if FWHT_CLUSTERS
    typedef KRowsTraits<T, C, K, TRANSPOSE, PAIRED> TR;
    typedef typename TR::S S;
    typedef typename TR::U U;
    typedef typename TR::V V;
    typedef Num<U> N;
    constexpr int UPV = TR::UNITS_PER_VEC, LOG_UPV = TR::LOG_UNITS_PER_VEC, VIF = TR::VECS_IN_FLIGHT;
    constexpr int KH = K / 2;
    static_assert(K % 2 == 0, "two halves");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    U* sm = reinterpret_cast<U*>(smem_raw);
    const S* usrc = reinterpret_cast<const S*>(src);
    S* udst = reinterpret_cast<S*>(dst);
    const int tid = threadIdx.x, threads = blockDim.x, q = cluster_rank();
    const int mu = 1 << log_mu;
    const int tile_units = KH << log_mu;                 // this block's half of the row
    const int nvec = tile_units / UPV;
    const int first = log_mu < LOG_UPV ? log_mu : LOG_UPV;
    S probe = to<S>(U{});

    for (i64 t = blockIdx.x >> 1; t < nrows; t += gridDim.x >> 1) {
        const S* in = usrc + t * ((i64)K << log_mu) + (i64)q * tile_units;
        cluster_sync();                                  // both blocks' K-point reads are done
        // ---- round 0, fused with the load (fwht_k_rows' loop)
        for (int v0 = 0; v0 < nvec; v0 += VIF * threads) {
            V buf[VIF];
#pragma unroll
            for (int i = 0; i < VIF; ++i) {
                const int vi = v0 + i * threads + tid;
                if (vi < nvec) buf[i] = *reinterpret_cast<const V*>(in + (i64)vi * UPV);
            }
#pragma unroll
            for (int i = 0; i < VIF; ++i) {
                const int vi = v0 + i * threads + tid;
                if (vi < nvec) {
                    U w[UPV];
#pragma unroll
                    for (int k = 0; k < UPV; ++k) {
                        w[k] = to<U>(buf[i].v[k]);
                        if constexpr (PAIRED) w[k] = N::intra(w[k]);
                    }
                    radix2_stages<U, LOG_UPV, true>(w, first);
                    const int s0 = pad<U>(vi * UPV) * (int)sizeof(U);
#pragma unroll
                    for (int k = 0; k < UPV; ++k) k_slot(sm, s0 + k * (int)sizeof(U)) = w[k];
                }
            }
        }
        __syncthreads();
        // ---- the rounds through shared memory (fwht_k_rows' loop)
        for (int b = first, k; b < log_mu; b += k_log_e<U>() == 3 ? 3 : k) {
            k = k_round_bits<U>(b, log_mu);
            const int items = tile_units >> k;
            const bool spread = b + k == pad_shift<U>() && items % (32 << b) == 0;
            for (int item = tid; item < items; item += threads) {
                const int R = spread ? (item & 31) | ((item >> (5 + b)) << 5) : item >> b;
                const int lo = spread ? (item >> 5) & ((1 << b) - 1) : item & ((1 << b) - 1);
                const int x0 = (R << (b + k)) | lo;
                if (k == 3) k_round_item<U, 3>(sm, x0, b);
                else if (k_log_e<U>() == 4 && k == 4) k_round_item<U, k_log_e<U>()>(sm, x0, b);
                else if (k == 2) k_round_item<U, 2>(sm, x0, b);
                else k_round_item<U, 1>(sm, x0, b);
            }
            __syncthreads();
        }
        cluster_sync();                                  // both halves transformed
        // ---- the K-point round on half of the positions: K/2 values from each block
        const int half = mu >> 1;
        const int step = (mu + (mu >> pad_shift<U>())) * (int)sizeof(U);     // log_mu >= pad_shift
        for (int p = tid; p < half; p += threads) {
            const int u = q * half + p;
            U v[K];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                unsigned x = map_rank(sm + pad<U>(u), h);
#pragma unroll
                for (int c = 0; c < KH; ++c) { v[h * KH + c] = ld_cluster<U>(x); x += step; }
            }
            if constexpr (sizeof(C) != sizeof(T)) {
#pragma unroll
                for (int c = 0; c < K; ++c) v[c] = to<U>(to<S>(v[c]));
            }
            S* y = udst + t * ((i64)K << log_mu) + u;
#pragma unroll
            for (int i = 0; i < K; ++i) {
                S o = to<S>(k_point_sum<U, K, TRANSPOSE>(v, i));
                if (scale != 1.0) o = Num<S>::scale(o, scale);
                probe = k_probe(probe, o);
                *y = o;
                y += mu;
            }
        }
    }
    cluster_sync();                                      // no block leaves while read
    if (!Num<S>::finite(probe)) atomicOr(flags, 2u);
#else
    __trap();
#endif
}
