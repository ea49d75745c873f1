// Thread-block cluster primitives (Hopper, sm_90+): the block's rank, the cluster barrier,
// and loads from another block's shared memory (distributed shared memory).  Used by the
// cluster passes (cluster_pass.cuh, stabilized_cluster_pass.cuh) and by the fused
// cluster kernel (any package's kernel may include it).
#pragma once

#include "numeric.cuh"

// The cluster's operations exist on sm_90 and later; compiled for an older architecture the
// kernel is declared (so that one translation unit serves every architecture) and traps.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define FWHT_CLUSTERS 1
#define FWHT_CLUSTER_DIMS(c) __cluster_dims__(c, 1, 1)
#else
#define FWHT_CLUSTERS 0
#define FWHT_CLUSTER_DIMS(c)
#endif

#if FWHT_CLUSTERS
// this block's rank in its cluster
__device__ __forceinline__ int cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
}
// every thread of every block of the cluster arrives; shared memory written before is
// visible to the cluster after
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The barrier before a block overwrites shared memory the others have read (write after
// read), where every value a thread read from the cluster has been consumed by a store
// before it arrives (a warp issues in order and a store waits for its data, so the reads
// have returned): no memory ordering is needed, so the arrive is relaxed.  The release of
// cluster_sync makes sm_90 wait for every global store still in flight (MEMBAR.ALL.GPU in
// the SASS; "Stall Membar" 12% of the FP32 28 * 2**10 pair kernel's cycles, Nsight Compute,
// session 36).  This rests on the hardware's order and on ptxas keeping the arrive after the
// stores (checked in the sm_90 SASS of the pair and cluster-pass kernels: DSMEM loads, the
// arithmetic, the stores, then UCGABAR_ARV), not on the PTX memory model (a relaxed arrive
// orders nothing), so it is compiled for sm_90 only; other architectures keep the release
// (CUTLASS relaxes its arrive only at start-up).  FWHT_CLUSTER_RELAXED 0
// (benchmarks/explore_cluster_sync.py) restores it on sm_90 too.
#ifndef FWHT_CLUSTER_RELAXED
#define FWHT_CLUSTER_RELAXED 1
#endif
__device__ __forceinline__ void cluster_sync_after_reads() {
#if FWHT_CLUSTER_RELAXED && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#else
    cluster_sync();
#endif
}
// the shared::cluster address of p (in this block's shared memory) in block `rank`'s
__device__ __forceinline__ unsigned map_rank(const void* p, int rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(out) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    return out;
}
// a unit of U (2, 4 or 8 bytes) at a shared::cluster address
template <typename U>
__device__ __forceinline__ U ld_cluster(unsigned addr) {
    if constexpr (sizeof(U) == 8) {
        unsigned long long w;
        asm volatile("ld.shared::cluster.b64 %0, [%1];" : "=l"(w) : "r"(addr) : "memory");
        return *reinterpret_cast<const U*>(&w);
    } else if constexpr (sizeof(U) == 4) {
        unsigned w;
        asm volatile("ld.shared::cluster.b32 %0, [%1];" : "=r"(w) : "r"(addr) : "memory");
        return *reinterpret_cast<const U*>(&w);
    } else {
        unsigned short w;
        asm volatile("ld.shared::cluster.b16 %0, [%1];" : "=h"(w) : "r"(addr) : "memory");
        return *reinterpret_cast<const U*>(&w);
    }
}
#endif
