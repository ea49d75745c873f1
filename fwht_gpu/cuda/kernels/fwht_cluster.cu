// fwht_gpu CUDA kernels of the cluster passes (fwht_cluster_pass, cluster_pass.cuh; and
// fwht_stabilized_cluster_pass, stabilized_cluster_pass.cuh): plain Folklore and globally
// stabilized passes whose tile spans a thread-block cluster (sm_90 and later).  Its own
// translation unit, so that the power-of-two kernels' compile cache does not depend on it,
// and so that nothing in fwht.cu carries the cluster attribute.
//
// This is the translation unit the library compiles (NVRTC) and CI compiles (nvcc --ptx);
// its local includes are quoted, relative to this folder, one per line.
#include "cluster_pass.cuh"
#include "stabilized_cluster_pass.cuh"
