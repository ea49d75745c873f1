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
